"""``[sparkfleet-probe] key: value`` lines: where a workload ran (hostname, /.dockerenv, the inode of /).

The matmul workload and the trtllm-bench stand-in print them so end-to-end tests can prove a run
happened natively (chroot) or in a container; both write the same format, defined here for readers and
copied (not imported) by the standalone scripts.
"""

from __future__ import annotations

import re

PROBE_PREFIX = "[sparkfleet-probe]"
_PROBE = re.compile(r"\[sparkfleet-probe\]\s*([A-Za-z0-9_.-]+)\s*:\s?(.*?)\s*$")


def parse_probe(text: str) -> dict[str, str]:
    """Every probe key found; the last value wins (a log may hold a retried run)."""
    probe: dict[str, str] = {}
    for line in text.splitlines():
        match = _PROBE.search(line)
        if match:
            probe[match.group(1)] = match.group(2)
    return probe
