"""``trtllm-bench ... --report_json FILE``: the same figures as the text report, unrounded.

Key names follow ``ReportUtility.get_statistics_dict()`` in TensorRT-LLM
(tensorrt_llm/bench/dataclasses/reporting.py): top-level ``engine``, ``machine`` (1.2+; ``null`` where
trtllm-bench could not query the GPU, as on a GB10 whose NVML has no memory clock), ``world_info``,
``request_info``, ``performance``, ``streaming_metrics`` (streaming runs only), ``dataset``; percentile
blocks have ``p50 p90 p95 p99 minimum maximum average``; ``world_info.kv_cache_percentage`` is a fraction.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .result import SRC_REPORT_JSON, ParseResult, as_text, compact, to_number
from .trtllm_report import ENGINE, REPORT_EXPECTED, STREAMING_EXPECTED

#: (path in the JSON, metric); for each metric the first path present wins (later ones are older names).
_METRIC_PATHS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("performance", "system_output_throughput_tok_s"), "output_tok_s"),
    (("performance", "output_throughput_tok_s"), "output_tok_s"),
    (("performance", "system_total_throughput_tok_s"), "total_tok_s"),
    (("performance", "total_token_throughput_tok_s"), "total_tok_s"),
    (("performance", "request_throughput_req_s"), "req_s"),
    (("performance", "avg_request_latency_ms"), "latency_ms_avg"),
    (("performance", "request_latency_percentiles_ms", "average"), "latency_ms_avg"),
    (("performance", "request_latency_percentiles_ms", "p50"), "latency_ms_p50"),
    (("performance", "request_latency_percentiles_ms", "p90"), "latency_ms_p90"),
    (("performance", "request_latency_percentiles_ms", "p95"), "latency_ms_p95"),
    (("performance", "request_latency_percentiles_ms", "p99"), "latency_ms_p99"),
    (("streaming_metrics", "avg_ttft_ms"), "ttft_ms"),
    (("streaming_metrics", "ttft_percentiles", "average"), "ttft_ms"),
    (("streaming_metrics", "avg_tpot_ms"), "tpot_ms"),
    (("streaming_metrics", "tpot_percentiles", "average"), "tpot_ms"),
)

_EXTRA_PATHS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("performance", "total_latency_ms"), "total_latency_ms"),
    (("performance", "output_throughput_per_user_tok_s"), "per_user_output_tok_s"),
    (("performance", "output_throughput_per_gpu_tok_s"), "per_gpu_output_tok_s"),
    (("streaming_metrics", "token_output_speed_tok_s"), "per_user_output_speed_tok_s"),
    (("request_info", "num_requests"), "num_requests"),
    (("request_info", "avg_num_concurrent_requests"), "avg_concurrent_requests"),
    (("request_info", "avg_input_length"), "avg_input_len"),
    (("request_info", "avg_output_length"), "avg_output_len"),
    (("world_info", "tp_size"), "tp_size"),
    (("world_info", "pp_size"), "pp_size"),
    (("world_info", "ep_size"), "ep_size"),
    (("world_info", "max_batch_size"), "max_batch_size"),
    (("world_info", "max_num_tokens"), "max_num_tokens"),
)

_SECTIONS = ("engine", "machine", "world_info", "request_info", "performance", "streaming_metrics", "dataset")
_BACKENDS = {
    "pytorch": "pytorch",
    "trt": "tensorrt",
    "tensorrt": "tensorrt",
    "_autodeploy": "_autodeploy",
    "autodeploy": "_autodeploy",
}


def dig(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any float: garbage, not a figure
            return None
        return number if math.isfinite(number) else None
    if isinstance(value, str):
        return to_number(value)
    return None


def _as_name(value: Any) -> str | None:
    if isinstance(value, str) and value.strip() and value.strip().lower() != "none":
        return value.strip()
    return None


def load_report_json(data: str | bytes | dict[str, Any], result: ParseResult) -> dict[str, Any] | None:
    if isinstance(data, dict):
        return data
    try:
        loaded = json.loads(as_text(data))
    except (ValueError, RecursionError) as exc:
        result.warnings.append(f"report_json is not valid JSON: {str(exc)[:120]}")
        return None
    if not isinstance(loaded, dict):
        result.warnings.append(f"report_json is a JSON {type(loaded).__name__}, not an object")
        return None
    return loaded


def _record_engine(report: dict[str, Any], result: ParseResult) -> None:
    result.model = _as_name(dig(report, ("engine", "model")))
    result.engine_version = _as_name(dig(report, ("engine", "version")))
    backend = _as_name(dig(report, ("engine", "backend")))
    if backend:
        result.backend = _BACKENDS.get(backend.lower(), backend.lower())
    # provenance (modelcard.judge): the path the engine was given and what it read from the checkpoint config
    for key in ("model_path", "dtype", "quantization", "kv_cache_dtype"):
        value = _as_name(dig(report, ("engine", key)))
        if value:
            result.loaded[key] = value


def _record_memory(report: dict[str, Any], result: ParseResult) -> None:
    fraction = as_number(dig(report, ("world_info", "kv_cache_percentage")))
    if fraction is not None and 1.0 < fraction <= 100.0:
        result.warnings.append(f"world_info.kv_cache_percentage {fraction} looks like a percentage; divided by 100")
        fraction /= 100.0
    result.set_metric("kv_fraction", fraction, f"{SRC_REPORT_JSON}: world_info.kv_cache_percentage")
    # ``machine`` (1.2+): {name, memory.total, clocks.mem}, or null where trtllm-bench could not query the GPU
    # (ReportUtility._query_gpu_info returns None; the text report then says "No GPU info available"). Then the
    # device total comes from the log's Peak memory line alone.
    result.extra["machine_details"] = machine_details(report)
    # machine.memory.total is torch's total_memory / 2**30, i.e. GiB.
    total = as_number(dig(report, ("machine", "memory.total")))
    result.set_metric("device_total_gib", total, f"{SRC_REPORT_JSON}: machine.memory.total")
    gpu = _as_name(dig(report, ("machine", "name")))
    if gpu:
        result.extra["gpu_name"] = gpu


def machine_details(report: dict[str, Any]) -> str:
    """'present', 'null' (no GPU info available), 'absent' (reports before 1.2 have no machine block) or
    'malformed' (not an object)."""
    if "machine" not in report:
        return "absent"
    machine = report["machine"]
    return "null" if machine is None else "present" if isinstance(machine, dict) else "malformed"


def parse_report_json(data: str | bytes | dict[str, Any]) -> ParseResult:
    """Parse a ``--report_json`` document (text, bytes or already loaded); never raises."""
    result = ParseResult(kind="unknown", engine=ENGINE)
    report = load_report_json(data, result)
    if report is None:
        result.note_missing(list(REPORT_EXPECTED) + ["model", "engine_version"])
        return result
    if not any(key in report for key in ("engine", "performance", "world_info")):
        result.warnings.append("report_json has none of the keys engine, performance, world_info")
    else:
        result.kind = "report_json"
    for section in _SECTIONS:
        if report.get(section) is not None and not isinstance(report[section], dict):
            result.warnings.append(f"report_json '{section}' is a {type(report[section]).__name__}, not an object")
    _record_engine(report, result)
    for path, metric in _METRIC_PATHS:
        result.set_metric(metric, as_number(dig(report, path)), f"{SRC_REPORT_JSON}: {'.'.join(path)}")
    _record_memory(report, result)
    for path, key in _EXTRA_PATHS:
        number = as_number(dig(report, path))
        if number is not None:
            result.extra[key] = compact(number)
    streaming = isinstance(report.get("streaming_metrics"), dict)
    result.extra["streaming"] = streaming
    expected = list(REPORT_EXPECTED) + (list(STREAMING_EXPECTED) if streaming else [])
    result.note_missing(expected + ["model", "engine_version"])
    return result
