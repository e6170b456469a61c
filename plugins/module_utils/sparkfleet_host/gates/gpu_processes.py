# Copyright: sparkfleet contributors
# Apache-2.0
"""Gate ``gpu_processes``: at most ``max_gpu_processes`` compute processes listed by ``nvidia-smi
--query-compute-apps=pid,process_name,used_memory --format=csv,noheader``. A query that fails: unknown, with its
output as the ``error``."""

from __future__ import annotations

from typing import Any, Mapping

from ..contract.fields import Field
from ..sensors.gpu import NO_PROCESSES, compute_apps_argv
from .gate import Command, Gate, Probe, Record

MAX_GPU_PROCESSES = Field("sparkfleet_preflight_max_gpu_processes", "int", 0, "Gate: processes on the GPU.", "",
                          0, 100000, option="max_gpu_processes")


def process_count(apps: Command) -> int:
    """Compute processes listed: non-empty lines other than nvidia-smi's "No running processes found"."""
    return len([line for line in apps.lines if line and NO_PROCESSES not in line])


def measure(probe: Probe) -> Command:
    return probe.run(compute_apps_argv(probe.nvidia_smi))


def judge(limits: Mapping[str, Any], apps: Command) -> Record:
    procs = process_count(apps) if apps.ok else None
    limit = int(limits[MAX_GPU_PROCESSES.option])
    return {"value": procs, "limit": limit, "processes": apps.lines if apps.ok else [],
            "pass": None if procs is None else procs <= limit, "error": "" if apps.ok else apps.error}


GATE = Gate("gpu_processes", (MAX_GPU_PROCESSES,), measure, judge)
