"""Where the unit tests find their inputs: published data copied into ``tests/data`` (see its README for
provenance) and fixtures written for this project in ``tests/fixtures``. Both ship with the repo."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OWN_FIXTURES = REPO / "tests" / "fixtures"
DATA = REPO / "tests" / "data"
STUDY_JSON = DATA / "benchmark-spark" / "all_benchmark_results.json"
H200_TRACE = DATA / "gpu-traces" / "h200-heat-cool.json"
STANDIN_TRTLLM = REPO / "tests" / "fleet" / "standins" / "trtllm-bench"
MATMUL = REPO / "roles" / "matrix" / "files" / "matmul.py"
PYTHON = sys.executable


def trtllm_fixture(name: str) -> Path:
    return DATA / "trtllm-bench-published" / name


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
    "trtllm-bench/report-1.3.0rc13-gb10-machine-null.json",
    "trtllm-bench/throughput-1.3.0rc13-gb10-no-gpu-info-kv-v2.log",
    "vllm/throughput-v0.10.txt",
    "vllm/throughput-v0.5-old.txt",
)
