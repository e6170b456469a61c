"""trtllm-bench text reports (0.17 to 1.2+) and --report_json, parsed to exact values."""

from __future__ import annotations

import json

import pytest
from _shared import own_fixture, trtllm_fixture

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import METRICS
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import (
    parse_file,
    parse_log,
    parse_report_json,
    parse_report_text,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.trtllm_report import (
    normalise_label,
)

TEXT = "trtllm-bench report text"


def test_0_17_tensorrt_engine_report_old_labels():
    result = parse_file(trtllm_fixture("throughput-0.17.0-tensorrt.log"))
    assert result.kind == "trtllm-bench"
    assert result.model == "meta-llama/Llama-3.1-8B"
    assert result.engine == "trtllm-bench"
    assert result.engine_version == "0.17.0"
    assert result.backend == "tensorrt"
    # 0.17's "Token Throughput" is output tokens / total latency.
    assert result.metrics == {"output_tok_s": 28390.4265, "req_s": 221.8002, "kv_fraction": 0.9}
    assert result.sources["output_tok_s"] == TEXT
    assert result.sources["kv_fraction"] == f"{TEXT}: KV Memory Percentage"
    assert result.extra["total_latency_ms"] == 13525.6862  # whole run, not a per-request latency
    assert result.extra["num_requests"] == 3000
    assert result.extra["avg_output_len"] == 128
    assert result.missing == [
        "total_tok_s",
        "latency_ms_avg",
        "latency_ms_p50",
        "latency_ms_p90",
        "latency_ms_p95",
        "latency_ms_p99",
        "peak_memory_gib",
        "kv_cache_gib",
        "device_total_gib",
    ]
    assert result.warnings == []


def test_0_21_pytorch_streaming_report():
    result = parse_file(trtllm_fixture("throughput-0.21.0rc0-pytorch-streaming.txt"))
    assert result.kind == "trtllm-bench"
    assert result.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert result.engine_version == "0.21.0rc0"
    assert result.backend == "pytorch"
    assert result.metrics == {
        "req_s": 86.5373,
        "output_tok_s": 11076.77,
        "total_tok_s": 22153.5399,
        "latency_ms_avg": 1093.2284,
        "ttft_ms": 162.6706,
        "tpot_ms": 7.3272,
        "latency_ms_p50": 1091.7905,
        "latency_ms_p90": 1130.72,
        "latency_ms_p95": 1133.0074,
        "latency_ms_p99": 1137.6817,
        "kv_fraction": 0.9,
    }
    assert result.sources["latency_ms_p99"] == f"{TEXT}: [LATENCY] breakdown"
    assert result.extra["streaming"] is True
    assert result.extra["avg_concurrent_requests"] == 94.605
    assert result.extra["per_user_output_speed_tok_s"] == 137.1475
    assert result.missing == ["peak_memory_gib", "kv_cache_gib", "device_total_gib"]
    assert result.warnings == []


def test_1_1_partial_report_with_trailing_spaces_in_headers():
    result = parse_file(trtllm_fixture("throughput-1.1.0rc1-header-partial.txt"))
    assert result.model == "deepseek-ai/DeepSeek-R1"
    assert result.engine_version == "1.1.0rc1"
    assert result.backend == "pytorch"
    assert result.metrics == {"req_s": 7.3411, "output_tok_s": 7517.2584, "kv_fraction": 0.7}
    assert result.extra["tp_size"] == 4 and result.extra["ep_size"] == 4
    assert "total_tok_s" in result.missing and "latency_ms_p50" in result.missing
    assert "model" not in result.missing and "engine_version" not in result.missing


@pytest.mark.parametrize(
    ("raw", "name", "unit", "tag"),
    [
        ("Per User Output Throughput [w/ ctx] (tps/user)", "per user output throughput", "tps/user", None),
        ("Per User Output Throughput (tokens/sec/user)", "per user output throughput", "tokens/sec/user", None),
        ("  TOTAL   output\tthroughput (tokens/sec)   ", "total output throughput", "tokens/sec", None),
        ("Average time-to-first-token [TTFT] (ms)", "average time to first token", "ms", None),
        ("TensorRT LLM Version", "tensorrt llm version", None, None),
        ("TensorRT-LLM Version", "tensorrt llm version", None, None),
        ("[Latency] P50    ", "p50", None, "latency"),
    ],
)
def test_labels_are_normalised_by_meaning(raw, name, unit, tag):
    label = normalise_label(raw)
    assert (label.name, label.unit, label.tag) == (name, unit, tag)


REPORT_1_2 = (
    "[01/05/2026-10:00:00] [TRT-LLM] [I] \n\n"
    "===========================================================\n"
    "= PYTORCH BACKEND\n"
    "===========================================================\n"
    "Model:\t\t\tQwen/Qwen3-8B\n"
    "Model Path:\t\t/models/qwen3\n"
    "TensorRT LLM Version:\t1.2.0rc5\n"
    "Dtype:\t\t\tbfloat16\n\n"
    "===========================================================\n"
    "= MACHINE DETAILS \n"
    "===========================================================\n"
    "NVIDIA GB10, memory 119.70 GB, N/A\n\n"
    "===========================================================\n"
    "= PERFORMANCE OVERVIEW \n"
    "===========================================================\n"
    "request THROUGHPUT (req/sec):\t\t 1.5000   \n"
    "Total Output Throughput\t(tokens/sec):  192.0000\n"
    "Total Token Throughput (tokens/sec):              384.0000\n"
    "Average request latency (s):                      1.25\n"
    "Average time-to-first-token [TTFT] (ms):          80.5000\n"
    "Average time-per-output-token [TPOT] (ms):        9.2500\n"
)


def test_1_2_layout_tabs_case_and_units():
    result = parse_report_text(REPORT_1_2)
    assert result.model == "Qwen/Qwen3-8B"
    assert result.engine_version == "1.2.0rc5"
    assert result.extra["gpu_name"] == "NVIDIA GB10"
    assert result.metrics == {
        "device_total_gib": 119.7,
        "req_s": 1.5,
        "output_tok_s": 192.0,
        "total_tok_s": 384.0,
        "latency_ms_avg": 1250.0,  # seconds converted
        "ttft_ms": 80.5,
        "tpot_ms": 9.25,
    }
    assert result.sources["device_total_gib"] == f"{TEXT}: MACHINE DETAILS"


def test_pre_0_20_streaming_labels():
    text = (
        "= ENGINE DETAILS\nModel:\t\t\tgpt2\nTensorRT-LLM Version:\t0.12.0\n"
        "= PERFORMANCE OVERVIEW \nToken Throughput (tokens/sec):\t100.5\nRequest Throughput (req/sec):\t2.5\n"
        "Total Latency (seconds):\t4.0\n"
        "= STREAMING STATISTICS \nAverage request latency (ms):\t\t400.0\n"
        "Average time-to-first-token (ms):\t20.0\nAverage inter-token latency (ms):\t3.0\n"
    )
    result = parse_report_text(text)
    assert result.metrics == {
        "output_tok_s": 100.5,
        "req_s": 2.5,
        "latency_ms_avg": 400.0,
        "ttft_ms": 20.0,
        "tpot_ms": 3.0,
    }
    assert result.extra["total_latency_ms"] == 4000.0
    assert result.extra["streaming"] is True


def test_several_reports_take_the_last_and_say_so():
    first = trtllm_fixture("throughput-0.21.0rc0-pytorch-streaming.txt").read_text()
    second = first.replace("86.5373", "99.0000").replace("meta-llama/Llama-3.1-8B-Instruct", "other/model")
    result = parse_log(first + "\n" + second)
    assert result.metrics["req_s"] == 99.0
    assert result.model == "other/model"
    assert any("2 trtllm-bench reports" in w for w in result.warnings)


def test_none_and_garbage_values_are_skipped_not_guessed():
    text = (
        "= PYTORCH BACKEND\nModel:\tNone\n= WORLD + RUNTIME INFORMATION\nKV Memory Percentage:   None\n"
        "= PERFORMANCE OVERVIEW\nRequest Throughput (req/sec): nan\nTotal Output Throughput (tokens/sec): 1.2.3\n"
        "Total Token Throughput (tokens/sec): inf\n"
    )
    result = parse_report_text(text)
    assert result.metrics == {}
    assert result.model is None
    assert {"req_s", "output_tok_s", "total_tok_s", "model"} <= set(result.missing)


# --------------------------------------------------------------------------- --report_json


def test_report_json_1_2_streaming_exact():
    result = parse_file(own_fixture("trtllm-bench/report-1.2.0-pytorch-streaming.json"))
    assert result.kind == "report_json"
    assert result.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert result.engine_version == "1.2.0"
    assert result.backend == "pytorch"
    assert result.metrics == {
        "output_tok_s": 899.2194282267587,
        "total_tok_s": 1798.4388564535175,
        "req_s": 7.025151783021553,
        "latency_ms_avg": 5690.987654,
        "latency_ms_p50": 5678.123456,
        "latency_ms_p90": 6012.5,
        "latency_ms_p95": 6050.25,
        "latency_ms_p99": 6101.75,
        "ttft_ms": 412.345678,
        "tpot_ms": 41.567891,
        "kv_fraction": 0.9,
        "device_total_gib": 119.6962890625,
    }
    assert result.sources["output_tok_s"] == "report_json: performance.system_output_throughput_tok_s"
    assert result.sources["kv_fraction"] == "report_json: world_info.kv_cache_percentage"
    assert result.sources["device_total_gib"] == "report_json: machine.memory.total"
    assert result.extra["gpu_name"] == "NVIDIA GB10"
    assert result.extra["num_requests"] == 100
    assert result.missing == []  # a JSON report carries no memory-profiling figures, none are expected
    assert result.warnings == []


def test_report_json_1_1_without_machine_or_streaming():
    result = parse_report_json(own_fixture("trtllm-bench/report-1.1.0rc3-pytorch.json").read_text())
    assert result.model == "Qwen/Qwen2.5-7B-Instruct"
    assert result.engine_version == "1.1.0rc3"
    assert result.metrics["kv_fraction"] == 0.85
    assert "device_total_gib" not in result.metrics
    assert "ttft_ms" not in result.metrics and "ttft_ms" not in result.missing
    assert result.extra["streaming"] is False


def test_report_json_percentage_written_as_percent_is_fixed_with_warning():
    result = parse_report_json({"engine": {}, "world_info": {"kv_cache_percentage": 90}})
    assert result.metrics["kv_fraction"] == 0.9
    assert any("looks like a percentage" in w for w in result.warnings)


@pytest.mark.parametrize("data", ["", "{", "[1, 2]", "null", '{"performance": "x"}', b"\xff\xfe{"])
def test_report_json_garbage_is_a_warning(data):
    result = parse_report_json(data)
    assert result.metrics == {}
    assert "req_s" in result.missing
    assert result.warnings


def test_text_plus_report_json_prefers_json_and_keeps_log_memory():
    log = (
        trtllm_fixture("gb10-1.1.0rc3-memory-excerpt.log").read_text()
        + trtllm_fixture("throughput-0.21.0rc0-pytorch-streaming.txt").read_text()
    )
    report = json.loads(own_fixture("trtllm-bench/report-1.2.0-pytorch-streaming.json").read_text())
    result = parse_log(log, report)
    assert result.metrics["req_s"] == 7.025151783021553
    assert result.sources["req_s"].startswith("report_json")
    assert result.metrics["peak_memory_gib"] == 113.65
    assert result.metrics["kv_fraction"] == 0.9  # report_json's, over the log's float32 0.8999999761581421
    assert result.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert any(w.startswith("req_s:") and "using report_json" in w for w in result.warnings)
    assert set(result.metrics) <= set(METRICS)
