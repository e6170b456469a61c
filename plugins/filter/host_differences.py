"""The firmware/driver differences across hosts that block a reproducibility campaign (issue 24)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import attestation


def host_differences(attestations, blocking=True):
    """``{host: attestation}`` (host_attest's ``attestation``) -> ``{field: {host: value}}`` for each identity
    field whose value is not the same on every host (attestation.differences); with ``blocking`` (the default) only
    the firmware, VBIOS and driver fields (attestation.blocking_differences). Empty when the hosts agree. A host
    whose attestation is null or empty (its preflight did not attest it) is left out."""
    if not isinstance(attestations, Mapping):
        raise AnsibleFilterError(f"host_differences: expected a mapping of host to attestation, got "
                                 f"{type(attestations).__name__}")
    given = {str(h): att for h, att in attestations.items() if att}
    bad = sorted(h for h, att in given.items() if not isinstance(att, Mapping))
    if bad:
        raise AnsibleFilterError(f"host_differences: the attestation of {', '.join(bad)} is not a mapping")
    diff = attestation.differences({h: dict(att) for h, att in given.items()})
    return attestation.blocking_differences(diff) if blocking else diff


class FilterModule:
    def filters(self):
        return {"host_differences": host_differences}
