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


# --------------------------------------------------------------------------- server start-up: KV-cache sizing
# The lines ``vllm serve`` logs while it sizes its KV cache, newest spelling first where they changed.
# V1 engine (vLLM >= 0.8): vllm/v1/worker/gpu_worker.py determine_available_memory()
#   logger.info("Available KV cache memory: %.2f GiB", ...)            (0.8 .. 0.11; vllm-project/vllm @0012cf6..)
#   logger.info_once("Available KV cache memory: %s GiB", format_gib(...), scope="local")   (2026 main)
# vllm/v1/core/kv_cache_utils.py (after the KV cache config is made):
#   logger.info("GPU KV cache size: %s tokens", f"{num_tokens:,}")     (0.8+; @bbf906a8, "Maximum concurrency for
#   %s tokens per request: %.2fx" beside it); early V1 (0.7.x) logged "# GPU blocks: %d" instead (PR #12569).
# vllm/v1/worker/gpu_model_runner.py load_model():
#   "Model loading took %.4f GiB and %.6f seconds" (0.8 .. 0.11), "Model loading took %s GiB memory and %.6f
#   seconds" (2026), "Loading model weights took %.4f GB" (0.7 / V0 model_runner.py).
# V0 engine (vllm/worker/worker.py, <= 0.10): "the rest of the memory reserved for KV Cache is %.2fGiB." (0.6.6+,
#   PR #12126), "available_kv_cache_memory  %.2fGiB" (0.6.5, PR #10511), and executor_base.py's
#   "# CUDA blocks: %d, # CPU blocks: %d" / "# GPU blocks: %d, # CPU blocks: %d".
# Published examples: vllm-project/vllm PR #20707 (0.10.1: gpu_worker.py:277 / kv_cache_utils.py:849) and issue
# #28228 (0.11: gpu_worker.py:349, kv_cache_utils.py:1229), copied into tests/fixtures/serving/vllm-startup-*.log.

_KV_NUM = r"(\d+(?:\.\d+)?)"
_KV_AVAILABLE = re.compile(r"Available KV cache memory:\s*(-?\d+(?:\.\d+)?)\s*(GiB|GB|MiB)", re.IGNORECASE)
_KV_V0_REST = re.compile(
    r"(?:the rest of the memory reserved for KV Cache is|available_kv_cache_memory)\s*(-?\d+(?:\.\d+)?)\s*(GiB|GB)",
    re.IGNORECASE,
)
_KV_TOKENS = re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens", re.IGNORECASE)
_KV_BLOCKS = re.compile(r"#\s*(?:GPU|CUDA|cuda)\s+blocks:\s*(\d+)", re.IGNORECASE)
_KV_CONCURRENCY = re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*" + _KV_NUM + r"x")
_KV_MODEL_LOADING = re.compile(
    r"(?:Model loading took|Loading model weights took)\s*" + _KV_NUM + r"\s*(GiB|GB)", re.IGNORECASE
)
_KV_UNITS = {"gib": 1.0, "gb": 1.0, "mib": 1.0 / 1024}  # vLLM's "GB" here is GiB_bytes too


def _gib(number: str, unit: str) -> float:
    return round(float(number) * _KV_UNITS[unit.lower()], 4)


def _last_line(text: str, pattern: re.Pattern) -> tuple:
    """(match, stripped line) of the last line the pattern matches, or (None, None)."""
    found = (None, None)
    for line in text.splitlines():
        match = pattern.search(line)
        if match:
            found = (match, line.strip())
    return found


def vllm_kv(text: str) -> dict:
    """KV-cache sizing from a ``vllm serve`` start-up log (see the table above); never raises.

    kv_cache_gib: the memory vLLM gave its KV cache ("Available KV cache memory", V0's "reserved for KV Cache");
    vLLM prints no separate figure of what it then allocated (whole blocks of that budget).
    max_tokens: "GPU KV cache size: N tokens"; None where only a block count was printed (``gpu_blocks``).
    """
    out: dict = {"kv_cache_gib": None, "source": None, "available_memory_gib": None, "max_tokens": None}
    match, line = _last_line(text, _KV_AVAILABLE)
    if match is None:
        match, line = _last_line(text, _KV_V0_REST)
    if match is not None:
        out["kv_cache_gib"] = out["available_memory_gib"] = _gib(match.group(1), match.group(2))
        out["source"] = line
    match, line = _last_line(text, _KV_TOKENS)
    if match is not None:
        out["max_tokens"] = int(match.group(1).replace(",", ""))
        out["tokens_source"] = line
    match, _ = _last_line(text, _KV_BLOCKS)
    if match is not None:
        out["gpu_blocks"] = int(match.group(1))
    match, _ = _last_line(text, _KV_CONCURRENCY)
    if match is not None:
        out["max_concurrency"] = float(match.group(2))
        out["max_concurrency_tokens_per_request"] = int(match.group(1).replace(",", ""))
    match, _ = _last_line(text, _KV_MODEL_LOADING)
    if match is not None:
        out["model_loading_gib"] = _gib(match.group(1), match.group(2))
    versions = _VERSION.findall(text)
    out["engine_version"] = versions[-1] if versions else None
    return out
