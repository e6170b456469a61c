# Copyright: sparkfleet contributors
# Apache-2.0
"""Gate ``free_memory``: ``MemAvailable`` (``/proc/meminfo``) at least ``min_free_memory_gib``."""

from __future__ import annotations

from typing import Any, Mapping

from ..contract.fields import Field
from ..sensors.meminfo import MEMINFO, parse_meminfo_kib
from .gate import Gate, Probe, Record, gib

MIN_FREE_MEMORY_GIB = Field("sparkfleet_preflight_min_free_memory_gib", "float", 8.0, "Gate: free memory.", "GiB",
                            0.0, 65536.0, option="min_free_memory_gib")


def mem_available_kib(path: str = MEMINFO) -> int:
    """``MemAvailable`` in KiB (the kernel's "kB")."""
    with open(path, encoding="ascii", errors="replace") as fh:
        values = parse_meminfo_kib(fh.read(), ("MemAvailable",))
    if "MemAvailable" not in values:
        raise ValueError("%s has no MemAvailable line" % path)
    return values["MemAvailable"]


def measure(probe: Probe) -> int:
    return mem_available_kib()


def judge(limits: Mapping[str, Any], measured: int) -> Record:
    value, limit = gib(measured), float(limits[MIN_FREE_MEMORY_GIB.option])
    return {"value": value, "limit": limit, "unit": "GiB", "pass": value >= limit}


GATE = Gate("free_memory", (MIN_FREE_MEMORY_GIB,), measure, judge)
