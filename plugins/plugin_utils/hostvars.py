"""Inventory variables (`sparkfleet_*`): checked on the controller before any host is changed.

A typo'd threshold or a relative work dir would otherwise surface hours later, on one host, as an odd
failure. Each problem names the host and the variable. The settings, their types, ranges and defaults are
defined once, in ``sparkfleet_host.settings.SETTINGS``.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.settings import setting_problems


def problems(host: str, variables: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(errors, warnings) for one host's sparkfleet_* variables."""
    return setting_problems(host, variables)
