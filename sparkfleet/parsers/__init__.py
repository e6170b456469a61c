"""Parsers for benchmark output: trtllm-bench text reports and --report_json, TensorRT-LLM memory lines,
the matmul workload, vllm bench throughput. None of them raises on truncated or garbled input.

Start with :func:`parse_log` / :func:`parse_file`; each returns a :class:`ParseResult`.
"""

from sparkfleet.parsers.detect import INTERNAL_ERROR, detect_kind, parse_file, parse_log
from sparkfleet.parsers.matmul import parse_matmul
from sparkfleet.parsers.probe import parse_probe
from sparkfleet.parsers.report_json import parse_report_json
from sparkfleet.parsers.result import ParseResult
from sparkfleet.parsers.trtllm_memory import parse_memory_lines
from sparkfleet.parsers.trtllm_report import parse_report_text
from sparkfleet.parsers.vllm import parse_vllm

__all__ = [
    "INTERNAL_ERROR",
    "ParseResult",
    "detect_kind",
    "parse_file",
    "parse_log",
    "parse_matmul",
    "parse_memory_lines",
    "parse_probe",
    "parse_report_json",
    "parse_report_text",
    "parse_vllm",
]
