"""Standalone workload scripts copied to the hosts (no sparkfleet imports inside them)."""
