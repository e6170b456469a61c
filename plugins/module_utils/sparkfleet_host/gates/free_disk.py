# Copyright: sparkfleet contributors
# Apache-2.0
"""Gate ``free_disk``: the space available on the work dir's file system (``statvfs``, the available column of
``df -P -k``) at least ``min_free_disk_gib``. The work dir must exist."""

from __future__ import annotations

import os
from typing import Any, Mapping, Tuple

from ..contract.fields import Field
from .gate import Gate, Probe, Record, gib

MIN_FREE_DISK_GIB = Field("sparkfleet_preflight_min_free_disk_gib", "float", 20.0,
                          "Gate: free disk under the work directory.", "GiB", 0.0, 10 ** 6,
                          option="min_free_disk_gib")


def disk_available_kib(path: str) -> int:
    """Space available to unprivileged users on ``path``'s file system in KiB, rounded up: ``df -P -k``."""
    st = os.statvfs(path)
    return -(-st.f_bavail * st.f_frsize // 1024)


def measure(probe: Probe) -> Tuple[int, str]:
    """The free KiB and the directory checked."""
    return disk_available_kib(probe.work_dir), probe.work_dir


def judge(limits: Mapping[str, Any], measured: Tuple[int, str]) -> Record:
    kib, path = measured
    value, limit = gib(kib), float(limits[MIN_FREE_DISK_GIB.option])
    return {"value": value, "limit": limit, "unit": "GiB", "path": path, "pass": value >= limit}


GATE = Gate("free_disk", (MIN_FREE_DISK_GIB,), measure, judge)
