# Copyright: sparkfleet contributors
# Apache-2.0
"""Host code: is a host fit and settled: the readiness probe and its rules,
the run-state checks, cooldown, attestation."""
