# Copyright: sparkfleet contributors
# Apache-2.0
"""Gate ``performance_state``: every GPU's performance state (``nvidia-smi --query-gpu=pstate``, the query
gpu_temperature reads too) is one of ``pstates``; an empty list accepts any and only records them. No GPU
listed: unknown."""

from __future__ import annotations

from typing import Any, Mapping, Tuple

from ..contract.fields import Field
from .gate import Gate, GpuRows, Probe, Record

PSTATES = Field("sparkfleet_preflight_pstates", "list", [], "Gate: allowed GPU performance states (empty: any).",
                elements="str", option="pstates")


def measure(probe: Probe) -> Tuple[GpuRows, str]:
    return probe.gpus()


def judge(limits: Mapping[str, Any], measured: Tuple[GpuRows, str]) -> Record:
    states = [row.get("pstate") for row in measured[0]]
    allowed = list(limits[PSTATES.option] or [])
    return {"value": states, "limit": allowed,
            "pass": (not allowed or all(s in allowed for s in states)) if states else None}


def unknown(record: Mapping[str, Any], measured: Tuple[GpuRows, str]) -> str:
    """The record has no ``error`` of its own: the shared query's."""
    return measured[1]


GATE = Gate("performance_state", (PSTATES,), measure, judge, gpu_fields=("pstate",), unknown=unknown)
