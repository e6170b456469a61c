"""Metrics and numbers in the report's words: a metric's name and unit, a number, a signed number and a
relative change as the verdicts and the memory lines print them."""

from __future__ import annotations

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import (
    METRICS,
    SERVING_METRICS,
)

WORDS = {
    "output_tok_s": "output throughput",
    "total_tok_s": "total throughput",
    "req_s": "request rate",
    "gflops": "matmul throughput",
    "matmul_s_mean": "matmul time",
    "peak_memory_gib": "peak memory",
    "kv_cache_gib": "KV cache",
    "latency_ms_avg": "mean latency",
    "latency_ms_p50": "median latency",
    "latency_ms_p90": "p90 latency",
    "latency_ms_p95": "p95 latency",
    "latency_ms_p99": "p99 latency",
    "ttft_ms": "time to first token",
    "tpot_ms": "time per output token",
}
UNITS = {"tokens/s": "tok/s", "requests/s": "req/s"}


def words(metric: str) -> str:
    """A metric in words; a serving point's metric in the serving words (scope included: aggregate, per user)."""
    spec = SERVING_METRICS.get(metric)
    return WORDS.get(metric) or (spec.words if spec else metric)


def unit(metric: str) -> str:
    spec = SERVING_METRICS.get(metric)
    text = METRICS.get(metric) or (spec.unit if spec else "")
    return UNITS.get(text, text)


def num(value: float, digits: int = 3) -> str:
    """3 significant digits; thousands and more as whole numbers, spaced: "12 345"."""
    if abs(value) >= 1000:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.{digits}g}"


def signed(value: float, digits: int = 3) -> str:
    """+1.23 / −1.23 (the report's minus sign) / ±0."""
    return ("+" if value > 0 else "−" if value < 0 else "±") + num(abs(value), digits)


def pct(value: float) -> str:
    """A relative change in percent: "+1.2%", "−0.45%", "0%" for what rounds to nothing."""
    if abs(value) < 0.005:
        return "0%"
    sign = "+" if value > 0 else "−"
    return f"{sign}{abs(value):.{2 if abs(value) < 1 else 1}f}%"
