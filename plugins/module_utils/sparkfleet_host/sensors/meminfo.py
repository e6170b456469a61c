# Copyright: sparkfleet contributors
# Apache-2.0
"""The one /proc/meminfo parser of the host code.

``/proc/meminfo`` lines read ``Key:   value kB`` (a few, such as ``HugePages_Total``, have no unit); the
kernel's "kB" is KiB. Every reader of it (the preflight gates, the telemetry sampler, the record's memory
section, the GPU sensor's telemetry rows) parses through :func:`parse_meminfo_kib` and derives its figures
from the values in KiB.

A leaf: stdlib only, no import of the other sparkfleet_host files (gpu, memstate, telemetry and gates all
import it). Python 3.8+.
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional

MEMINFO = "/proc/meminfo"


def parse_meminfo_kib(text: str, keys: Optional[Iterable[str]] = None) -> Dict[str, int]:
    """Key -> value (KiB) of a /proc/meminfo text; only ``keys`` when given (reading stops once all are
    found). A line whose value is not a number is left out, as is a key that is missing."""
    wanted = None if keys is None else set(keys)
    values: Dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep or (wanted is not None and key not in wanted):
            continue
        try:
            values[key] = int(rest.split()[0])
        except (ValueError, IndexError):
            continue
        if wanted is not None and len(values) == len(wanted):
            break
    return values


def used_kib(text: str) -> Optional[int]:
    """MemTotal - MemAvailable (KiB) of a /proc/meminfo text: on unified memory (GB10) the memory in use by
    CPU and GPU together; None when either is missing."""
    values = parse_meminfo_kib(text, ("MemTotal", "MemAvailable"))
    return values["MemTotal"] - values["MemAvailable"] if len(values) == 2 else None
