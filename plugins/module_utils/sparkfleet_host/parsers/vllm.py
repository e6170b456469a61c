"""``vllm bench throughput`` output: ``Throughput: X requests/s, Y total tokens/s, Z output tokens/s``.

Older vLLM printed only ``Throughput: X requests/s, Y tokens/s`` (Y being total tokens).
"""

from __future__ import annotations

import re

from .result import ParseResult, to_number

ENGINE = "vllm"
VLLM_EXPECTED = ("output_tok_s", "total_tok_s", "req_s", "model")
SOURCE = "vllm bench throughput: Throughput line"

_NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_THROUGHPUT = re.compile(
    r"Throughput:\s*" + _NUM + r"\s*requests/s\s*,\s*" + _NUM + r"\s*(total\s+)?tokens/s"
    r"(?:\s*,\s*" + _NUM + r"\s*output\s+tokens/s)?",
    re.IGNORECASE,
)
_MODEL = re.compile(r"\bmodel=['\"]([^'\"]+)['\"]")
_VERSION = re.compile(r"(?:LLM engine \(v|vLLM (?:API server )?version:?\s*v?)(\d+\.\d+[\w.+-]*)", re.IGNORECASE)
_TOTALS = re.compile(r"Total num (prompt|output) tokens:\s*(\d+)", re.IGNORECASE)


def looks_like_vllm(text: str) -> bool:
    return _THROUGHPUT.search(text) is not None


def parse_vllm(text: str) -> ParseResult:
    """Parse ``vllm bench throughput`` output (the last Throughput line wins); never raises."""
    result = ParseResult(kind="unknown", engine=ENGINE)
    found = _THROUGHPUT.findall(text)
    if found:
        result.kind = ENGINE
        if len(found) > 1:
            result.warnings.append(f"{len(found)} Throughput lines; using the last one")
        req_s, tok_s, _total_word, out_s = found[-1]
        result.set_metric("req_s", to_number(req_s), SOURCE)
        result.set_metric("total_tok_s", to_number(tok_s), SOURCE)
        result.set_metric("output_tok_s", to_number(out_s) if out_s else None, SOURCE)
    models = _MODEL.findall(text)
    result.model = models[-1] if models else None
    versions = _VERSION.findall(text)
    result.engine_version = versions[-1] if versions else None
    for which, count in _TOTALS.findall(text):
        result.extra[f"total_{which.lower()}_tokens"] = int(count)
    result.note_missing(VLLM_EXPECTED)
    return result
