# Copyright: sparkfleet contributors
# Apache-2.0
"""Gate ``cpu_load``: the 1-minute load average (``/proc/loadavg``) at or below ``max_load_per_cpu`` times the
online CPUs."""

from __future__ import annotations

import os
from typing import Any, Mapping, Tuple

from ..contract.fields import Field
from .gate import Gate, Probe, Record

MAX_LOAD_PER_CPU = Field("sparkfleet_preflight_max_load_per_cpu", "float", 0.5,
                         "Gate: 1-minute load average per CPU.", "", 0.0, 1000.0, option="max_load_per_cpu")


def load_1min(path: str = "/proc/loadavg") -> float:
    """The 1-minute load average."""
    with open(path, encoding="ascii") as fh:
        return float(fh.read().split()[0])


def online_cpus() -> int:
    """Online CPUs, as ``getconf _NPROCESSORS_ONLN`` counts them."""
    try:
        return int(os.sysconf("SC_NPROCESSORS_ONLN"))
    except (ValueError, OSError, AttributeError):
        return os.cpu_count() or 1


def measure(probe: Probe) -> Tuple[float, int]:
    """The load and the online CPUs."""
    return load_1min(), online_cpus()


def judge(limits: Mapping[str, Any], measured: Tuple[float, int]) -> Record:
    load1, cpus = measured
    limit = float(limits[MAX_LOAD_PER_CPU.option]) * int(cpus)
    return {"value": float(load1), "limit": limit, "cpus": int(cpus), "pass": load1 <= limit}


GATE = Gate("cpu_load", (MAX_LOAD_PER_CPU,), measure, judge)
