"""Entry points: tell what a log is, run the right parsers, merge what one bench.log holds.

A TensorRT-LLM ``bench.log`` carries both the memory-profiling lines (during start-up) and the
trtllm-bench report (at the end); both are parsed and merged. When the run also wrote
``--report_json``, its unrounded figures win over the text's.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .hf_generate import HF_GENERATE_EXPECTED, looks_like_hf_generate, parse_hf_generate
from .matmul import looks_like_matmul, parse_matmul
from .probe import parse_probe
from .report_json import parse_report_json
from .result import ParseResult, as_text
from .trtllm_loading import parse_loading_lines
from .trtllm_memory import MEMORY_EXPECTED, parse_memory_lines
from .trtllm_report import REPORT_EXPECTED, STREAMING_EXPECTED, parse_report_text
from .vllm import looks_like_vllm, parse_vllm

#: Warnings that start with this mean a parser bug was caught; tests assert they never appear.
INTERNAL_ERROR = "internal parser error"

_TRTLLM_MARKERS = (
    "TRT-LLM",
    "TensorRT-LLM",
    "TensorRT LLM",
    "= PERFORMANCE OVERVIEW",
    "= PYTORCH BACKEND",
    "= ENGINE DETAILS",
    "Peak memory during memory usage profiling",
    "[MemUsageChange]",
)
#: Relative difference above which two sources of one figure are reported as disagreeing.
_AGREEMENT = 0.01


def detect_kind(text: str) -> str:
    """'report_json', 'matmul', 'hf-generate', 'vllm', 'trtllm' or 'unknown'."""
    stripped = text.lstrip()
    if stripped.startswith("{") and _is_json_object(stripped):
        return "report_json"
    if looks_like_matmul(text):
        return "matmul"
    if looks_like_hf_generate(text):
        return "hf-generate"
    if looks_like_vllm(text):
        return "vllm"
    if any(marker.lower() in text.lower() for marker in _TRTLLM_MARKERS):
        return "trtllm"
    return "unknown"


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _disagreement(name: str, kept: float, other: float, kept_src: str, other_src: str) -> str | None:
    scale = max(abs(kept), abs(other), 1e-12)
    if abs(kept - other) / scale <= _AGREEMENT:
        return None
    return f"{name}: {other_src} says {other:g}, {kept_src} says {kept:g}; using {kept_src}"


def merge_into(base: ParseResult, other: ParseResult, prefer_other: bool) -> None:
    """Fold ``other``'s figures into ``base``; on conflict keep base's unless ``prefer_other``."""
    for name, value in other.metrics.items():
        if name not in base.metrics:
            base.set_metric(name, value, other.sources[name])
            continue
        winner, loser = (other, base) if prefer_other else (base, other)
        note = _disagreement(name, winner.metrics[name], loser.metrics[name], winner.sources[name], loser.sources[name])
        if note:
            base.warnings.append(note)
        if prefer_other:
            base.set_metric(name, value, other.sources[name], overwrite=True)
    for attr in ("model", "engine_version", "backend", "engine"):
        mine, theirs = getattr(base, attr), getattr(other, attr)
        if theirs and (prefer_other or not mine):
            if mine and mine != theirs:
                base.warnings.append(f"{attr}: '{mine}' in the log, '{theirs}' in report_json; using report_json")
            setattr(base, attr, theirs)
    base.extra = {**other.extra, **base.extra} if not prefer_other else {**base.extra, **other.extra}
    base.samples = {**other.samples, **base.samples} if not prefer_other else {**base.samples, **other.samples}
    base.loaded = {**other.loaded, **base.loaded} if not prefer_other else {**base.loaded, **other.loaded}
    base.warnings.extend(w for w in other.warnings if w not in base.warnings)


def _parse_trtllm(text: str) -> ParseResult:
    report = parse_report_text(text)
    memory = parse_memory_lines(text)
    # Memory figures: the engine's own log lines first, the report's (requested fraction, GPU total) second.
    merged = ParseResult(kind="trtllm-bench", engine=report.engine)
    merge_into(merged, memory, prefer_other=False)
    merge_into(merged, report, prefer_other=False)
    merged.model, merged.backend = report.model, report.backend
    merged.loaded = {**parse_loading_lines(text), **report.loaded}
    merged.engine_version = report.engine_version or memory.engine_version
    if report.kind == "unknown":
        merged.kind = memory.kind if memory.kind != "unknown" else "trtllm"
    return merged


def _expected(result: ParseResult) -> list[str]:
    if result.kind == "matmul":
        return ["gflops", "matmul_s_mean", "model"]
    if result.kind == "hf-generate":
        return list(HF_GENERATE_EXPECTED)
    if result.kind == "vllm":
        return ["output_tok_s", "total_tok_s", "req_s", "model"]
    streaming = list(STREAMING_EXPECTED) if result.extra.get("streaming") else []
    memory = list(MEMORY_EXPECTED) if result.kind != "report_json" else []
    return list(REPORT_EXPECTED) + streaming + memory + ["model", "engine_version"]


def _dispatch(text: str) -> ParseResult:
    parsers: dict[str, Callable[[str], ParseResult]] = {
        "report_json": parse_report_json,
        "matmul": parse_matmul,
        "hf-generate": parse_hf_generate,
        "vllm": parse_vllm,
        "trtllm": _parse_trtllm,
    }
    kind = detect_kind(text)
    if kind == "unknown":
        return ParseResult(
            kind="unknown",
            missing=["recognisable benchmark output"],
            warnings=["no trtllm-bench, report_json, matmul, hf-generate or vllm output recognised"],
        )
    return parsers[kind](text)


def parse_log(data: str | bytes, report_json: str | bytes | dict[str, Any] | None = None) -> ParseResult:
    """Parse one log (any supported kind); with ``report_json`` its figures win. Never raises."""
    try:
        text = as_text(data)
        result = _dispatch(text)
        if report_json is not None:
            from_json = parse_report_json(report_json)
            merge_into(result, from_json, prefer_other=True)
            if result.kind in ("unknown", "trtllm-memory", "trtllm"):
                result.kind = "trtllm-bench"
        result.probe = parse_probe(text)
        result.missing = []
        result.note_missing(_expected(result) if result.kind != "unknown" else [])
        if result.kind == "unknown":
            result.missing.append("recognisable benchmark output")
        return result
    except Exception as exc:  # the never-raise contract; tests assert this branch is never taken
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return ParseResult(
            kind="unknown",
            missing=["recognisable benchmark output"],
            warnings=[
                f"{INTERNAL_ERROR}: {type(exc).__name__}: {exc} ({os.path.basename(where.filename)}:{where.lineno})"
            ],
        )


def parse_file(path: str | os.PathLike[str], report_json: str | os.PathLike[str] | None = None) -> ParseResult:
    """Parse a log file (and its ``--report_json`` file). Raises OSError only for unreadable files."""
    data = Path(path).read_bytes()
    json_data = Path(report_json).read_bytes() if report_json is not None else None
    return parse_log(data, json_data)
