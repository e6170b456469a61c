"""Output of ``roles/matrix/files/matmul.py``, the study's N x N FP32 matrix-product sanity check.

Layout (one ``key: value`` per line between the markers; timings in seconds)::

    === sparkfleet matmul ===
    model: NAME
    backend: torch | cupy | numpy
    backend_version: 2.5.1
    device: cuda:0 NVIDIA GB10
    dtype: float32
    size: 10000
    warmup: 1
    iterations: 10
    iteration 1/10: 0.123456789 s
    ...
    mean_s: 0.123456789
    gflops: 16201.234
    === end sparkfleet matmul ===
"""

from __future__ import annotations

import re

from .result import ParseResult, last_block, to_number

ENGINE = "matmul"
BEGIN = "=== sparkfleet matmul ==="
END = "=== end sparkfleet matmul ==="
MATMUL_EXPECTED = ("gflops", "matmul_s_mean", "model")
SOURCE = "matmul workload output"

_FIELD = re.compile(r"^\s*([a-z_]+)\s*:\s*(.*?)\s*$")
_ITERATION = re.compile(r"^\s*iteration\s+(\d+)\s*/\s*(\d+)\s*:\s*(\S+)\s*s\s*$")
_INT_FIELDS = ("size", "warmup", "iterations")


def looks_like_matmul(text: str) -> bool:
    return BEGIN in text


def _read_fields(lines: list[str], result: ParseResult) -> tuple[dict[str, str], list[float]]:
    fields: dict[str, str] = {}
    timings: list[float] = []
    for line in lines:
        iteration = _ITERATION.match(line)
        if iteration:
            seconds = to_number(iteration.group(3))
            if seconds is not None:
                timings.append(seconds)
            continue
        field = _FIELD.match(line)
        if field:
            fields[field.group(1)] = field.group(2)
    return fields, timings


def _check_timings(fields: dict[str, str], timings: list[float], result: ParseResult) -> None:
    announced = to_number(fields.get("iterations"))
    if announced is not None and len(timings) != int(announced):
        result.warnings.append(f"{len(timings)} of {int(announced)} iteration timings present")
    mean = result.metrics.get("matmul_s_mean")
    if timings and mean:
        own = sum(timings) / len(timings)
        if abs(own - mean) > 0.01 * mean:
            result.warnings.append(f"mean_s {mean} differs from the mean of the timings ({own:.9f})")


def parse_matmul(text: str) -> ParseResult:
    """Parse the matmul workload's output; never raises."""
    result = ParseResult(kind="unknown", engine=ENGINE)
    if not looks_like_matmul(text):
        result.note_missing(MATMUL_EXPECTED)
        return result
    result.kind = ENGINE
    fields, timings = _read_fields(last_block(text, BEGIN, END, "matmul", result), result)
    result.model = fields.get("model") or None
    result.backend = fields.get("backend") or None
    result.engine_version = fields.get("backend_version") or None
    result.set_metric("gflops", to_number(fields.get("gflops")), SOURCE)
    result.set_metric("matmul_s_mean", to_number(fields.get("mean_s")), SOURCE)
    for key in _INT_FIELDS:
        number = to_number(fields.get(key))
        if number is not None:
            result.extra[key] = int(number)
    for key in ("device", "dtype", "status", "error"):
        if fields.get(key):
            result.extra[key] = fields[key]
    result.extra["iteration_s"] = timings
    result.set_samples("matmul_s", timings, SOURCE)
    _check_timings(fields, timings, result)
    result.note_missing(MATMUL_EXPECTED)
    return result
