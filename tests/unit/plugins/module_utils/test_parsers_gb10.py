"""GB10 and TensorRT-LLM 1.3+: a report whose machine block is null or absent (MACHINE DETAILS "No GPU info
available"), and a log without the C++ '[MemUsageChange] Allocated ... paged KV cache' line (KV cache manager V2),
whose kv_cache_gib is then the profiling's budget and says so in its source."""

from __future__ import annotations

import json

import pytest
from _shared import own_fixture, trtllm_fixture

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import (
    parse_file,
    parse_log,
    parse_report_json,
    parse_report_text,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.trtllm_memory import (
    SRC_ALLOC,
    SRC_ESTIMATED,
    SRC_KV_BUDGET,
    SRC_TOTAL,
    kv_source_kind,
)

#: Synthetic (tests/fixtures/README.md): a 1.3.0rc13 GB10 log, the newest Peak-line tail, no allocation line,
#: the text report with "No GPU info available".
V13_LOG = own_fixture("trtllm-bench/throughput-1.3.0rc13-gb10-no-gpu-info-kv-v2.log")
V13_JSON = own_fixture("trtllm-bench/report-1.3.0rc13-gb10-machine-null.json")
#: Real (tests/data/trtllm-bench-published): 1.1.0rc3 on a DGX Spark, with the allocation line.
GB10_REAL = trtllm_fixture("gb10-1.1.0rc3-memory-excerpt.log")


def test_report_json_with_machine_null_parses_and_says_so():
    result = parse_report_json(V13_JSON.read_text())
    assert result.kind == "report_json" and result.engine_version == "1.3.0rc13"
    assert result.metrics["output_tok_s"] > 0 and "device_total_gib" not in result.metrics
    assert result.extra["machine_details"] == "null" and "gpu_name" not in result.extra
    assert not [w for w in result.warnings if "machine" in w]  # null is what the writer writes: not garbage


@pytest.mark.parametrize(("machine", "details", "total"), [
    ("absent", "absent", None),
    ({"name": "NVIDIA GB10", "memory.total": 119.6962890625, "clocks.mem": None}, "present", 119.6962890625),
    ({"name": "NVIDIA GB10", "memory.total": None, "clocks.mem": None}, "present", None),
    ({}, "present", None),
    ("No GPU info available", "malformed", None),
])
def test_report_json_machine_block_in_every_shape(machine, details, total):
    report = json.loads(V13_JSON.read_text())
    if machine == "absent":
        del report["machine"]
    else:
        report["machine"] = machine
    result = parse_report_json(json.dumps(report))
    assert result.extra["machine_details"] == details
    assert result.metrics.get("device_total_gib") == total
    assert result.metrics["req_s"] == pytest.approx(report["performance"]["request_throughput_req_s"])


def test_text_report_no_gpu_info_and_log_without_allocation_line():
    result = parse_file(V13_LOG)
    assert result.engine_version == "1.3.0rc13" and result.backend == "pytorch"
    assert result.metrics["output_tok_s"] == pytest.approx(711.1111)
    assert result.metrics["latency_ms_p99"] == pytest.approx(8980.0)
    assert result.extra["machine_details"] == "null" and "gpu_name" not in result.extra
    # the device total still comes from the Peak memory line
    assert result.metrics["device_total_gib"] == pytest.approx(119.70)
    assert result.sources["device_total_gib"] == SRC_TOTAL
    # no [MemUsageChange] line: the KV figure is the budget, and its source says so
    assert result.metrics["kv_cache_gib"] == pytest.approx(82.67)
    assert result.sources["kv_cache_gib"] == SRC_KV_BUDGET
    assert kv_source_kind(result.sources["kv_cache_gib"]) == "budget"
    assert result.extra["kv_cache_source"] == "budget"
    assert result.metrics["tmp_kv_gib"] == pytest.approx(0.56)
    assert "device_total_gib" not in result.missing and "kv_cache_gib" not in result.missing


def test_log_with_a_null_machine_report_json_keeps_the_logs_device_total():
    result = parse_log(V13_LOG.read_text(), report_json=V13_JSON.read_text())
    assert result.metrics["device_total_gib"] == pytest.approx(119.70)
    assert result.sources["device_total_gib"] == SRC_TOTAL
    assert result.sources["kv_cache_gib"] == SRC_KV_BUDGET
    assert result.extra["machine_details"] == "null"
    assert result.metrics["output_tok_s"] == pytest.approx(json.loads(V13_JSON.read_text())["performance"][
        "system_output_throughput_tok_s"])


@pytest.mark.parametrize(("body", "details", "total", "gpu"), [
    (None, "absent", None, None),  # no MACHINE DETAILS section at all (before 1.2)
    ("No GPU info available", "null", None, None),
    ("NVIDIA GB10, memory 119.70 GB, N/A", "present", 119.70, "NVIDIA GB10"),  # no pynvml: clock N/A
    ("NVIDIA GB10, memory N/A, N/A", "present", None, "NVIDIA GB10"),
    ("NVIDIA H100 80GB HBM3, memory 79.11 GB, 2.62 GHz", "present", 79.11, "NVIDIA H100 80GB HBM3"),  # PR #8584
    ("something else entirely", "unreadable", None, None),
])
def test_text_machine_details_in_every_shape(body, details, total, gpu):
    text = V13_LOG.read_text()
    section = "= MACHINE DETAILS \n===========================================================\nNo GPU info available\n"
    assert section in text
    if body is None:
        head, _, rest = text.partition("===========================================================\n" + section)
        text = head + rest.lstrip("\n")
    else:
        text = text.replace(section, section.replace("No GPU info available", body))
    report = parse_report_text(text)
    assert report.extra["machine_details"] == details
    assert report.metrics.get("device_total_gib") == (None if total is None else pytest.approx(total))
    assert report.extra.get("gpu_name") == gpu
    assert report.metrics["req_s"] == pytest.approx(5.5556)
    merged = parse_log(text)  # the log's Peak line wins over MACHINE DETAILS, which rounds
    assert merged.metrics["device_total_gib"] == pytest.approx(119.70)


def test_the_real_gb10_log_has_an_allocation_and_without_its_line_the_budget_is_labelled():
    real = GB10_REAL.read_text()
    result = parse_file(GB10_REAL)
    assert result.metrics["kv_cache_gib"] == pytest.approx(5.95)
    assert result.sources["kv_cache_gib"] == SRC_ALLOC and kv_source_kind(SRC_ALLOC) == "allocation"
    assert result.extra["kv_cache_source"] == "allocation"
    # the same log as a KV cache manager V2 would write it: no C++ allocation lines
    without = "\n".join(line for line in real.splitlines() if "[MemUsageChange]" not in line)
    budget = parse_log(without)
    assert budget.metrics["kv_cache_gib"] == pytest.approx(5.95)
    assert budget.sources["kv_cache_gib"] == SRC_KV_BUDGET and budget.extra["kv_cache_source"] == "budget"


@pytest.mark.parametrize(("source", "kind"), [
    (SRC_ALLOC, "allocation"),
    (SRC_KV_BUDGET, "budget"),
    (SRC_ESTIMATED, "budget"),
    # records written before the sources said it
    ("log: [MemUsageChange] Allocated ... for max tokens in paged KV cache", "allocation"),
    ("log: available KV cache memory when calculating max tokens", "budget"),
    ("log: Estimated max memory in KV cache", "budget"),
    ("log", None),
    ("benchmark-spark all_benchmark_results.json: kv_cache", None),
    (None, None),
])
def test_kv_source_kind(source, kind):
    assert kv_source_kind(source) == kind
