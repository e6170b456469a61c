# Copyright: sparkfleet contributors
# Apache-2.0
"""Gate ``gpu_temperature``: the hottest GPU (``nvidia-smi --query-gpu=temperature.gpu``) at or below
``max_gpu_temp_c``. No temperature read (no nvidia-smi, no GPU, a refused query): unknown, with the command's
output or why it failed as its ``error``."""

from __future__ import annotations

from typing import Any, Mapping, Tuple

from ..contract.fields import GPU_TEMP_C, Field
from ..sensors.gpu import parse_number
from .gate import Gate, GpuRows, Probe, Record

MAX_GPU_TEMP_C = Field("sparkfleet_preflight_max_gpu_temp_c", "float", 60.0, "Gate: hottest GPU before the runs.",
                       "C", GPU_TEMP_C[0], GPU_TEMP_C[1], option="max_gpu_temp_c")


def measure(probe: Probe) -> Tuple[GpuRows, str]:
    return probe.gpus()


def judge(limits: Mapping[str, Any], measured: Tuple[GpuRows, str]) -> Record:
    rows, error = measured
    temps = [t for t in (parse_number(row.get("temperature.gpu")) for row in rows) if t is not None]
    hottest = max(temps) if temps else None
    limit = float(limits[MAX_GPU_TEMP_C.option])
    return {"value": hottest, "limit": limit, "unit": "C", "pass": None if hottest is None else hottest <= limit,
            "error": "" if temps else error}


GATE = Gate("gpu_temperature", (MAX_GPU_TEMP_C,), measure, judge, gpu_fields=("index", "temperature.gpu"))
