"""Parsers for benchmark output: trtllm-bench text reports and --report_json, TensorRT-LLM memory lines,
the matmul and hf-generate workloads, vllm bench throughput. None of them raises on truncated or garbled input.

Start with :func:`parse_log` / :func:`parse_file`; each returns a :class:`ParseResult`.
"""

from .detect import INTERNAL_ERROR, detect_kind, parse_file, parse_log
from .hf_generate import parse_hf_generate
from .matmul import parse_matmul
from .probe import parse_probe
from .report_json import parse_report_json
from .result import ParseResult
from .trtllm_memory import parse_memory_lines
from .trtllm_report import parse_report_text
from .vllm import parse_vllm

__all__ = [
    "INTERNAL_ERROR",
    "ParseResult",
    "detect_kind",
    "parse_file",
    "parse_hf_generate",
    "parse_log",
    "parse_matmul",
    "parse_memory_lines",
    "parse_probe",
    "parse_report_json",
    "parse_report_text",
    "parse_vllm",
]
