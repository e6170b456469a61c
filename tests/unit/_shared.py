"""Where the unit tests find fixtures: the shared, published samples and this repo's own.

Shared fixtures live beside the checkout (``<checkout>/../shared/fixtures``); set SPARKFLEET_SHARED to the
``shared`` directory when the checkout lives elsewhere. Tests that need them skip, saying so, when neither
place has them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OWN_FIXTURES = REPO / "tests" / "fixtures"
STANDIN_TRTLLM = REPO / "tests" / "fleet" / "standins" / "trtllm-bench"
MATMUL = REPO / "sparkfleet" / "workloads" / "matmul.py"
PYTHON = sys.executable


def shared_fixtures() -> Path:
    """``<...>/shared/fixtures``: next to the checkout first, then $SPARKFLEET_SHARED/fixtures."""
    candidates = [Path(__file__).resolve().parents[3] / "shared" / "fixtures"]
    if os.environ.get("SPARKFLEET_SHARED"):
        candidates.append(Path(os.environ["SPARKFLEET_SHARED"]) / "fixtures")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    pytest.skip(f"shared fixtures not found in {', '.join(map(str, candidates))} (set SPARKFLEET_SHARED)")
    raise AssertionError("unreachable")


def trtllm_fixture(name: str) -> Path:
    return shared_fixtures() / "trtllm-bench" / name


def own_fixture(relative: str) -> Path:
    return OWN_FIXTURES / relative


SHARED_TRTLLM_FIXTURES = (
    "gb10-1.1.0rc3-memory-excerpt.log",
    "throughput-0.17.0-tensorrt.log",
    "throughput-0.21.0rc0-pytorch-streaming.txt",
    "throughput-1.1.0rc1-header-partial.txt",
)
OWN_FIXTURE_FILES = (
    "trtllm-bench/report-1.2.0-pytorch-streaming.json",
    "trtllm-bench/report-1.1.0rc3-pytorch.json",
    "vllm/throughput-v0.10.txt",
    "vllm/throughput-v0.5-old.txt",
)
