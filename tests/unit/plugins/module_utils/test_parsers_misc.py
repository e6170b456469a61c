"""The matmul workload's output, vllm bench throughput, kind detection and probe lines."""

from __future__ import annotations

import pytest
from _shared import own_fixture, trtllm_fixture

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import (
    detect_kind,
    parse_file,
    parse_log,
    parse_matmul,
    parse_probe,
    parse_vllm,
)

MATMUL_OUTPUT = """\
[sparkfleet-probe] hostname: spark-03
[sparkfleet-probe] dockerenv: no
[sparkfleet-probe] root_dev_ino: 2049:2
[sparkfleet-probe] env_probe: native-chroot
=== sparkfleet matmul ===
model: meta-llama/Llama-3.1-8B
backend: torch
backend_version: 2.8.0
device: cuda:0 NVIDIA GB10
dtype: float32
size: 10000
warmup: 1
iterations: 3
iteration 1/3: 0.100000000 s
iteration 2/3: 0.110000000 s
iteration 3/3: 0.120000000 s
mean_s: 0.110000000
gflops: 18181.818
status: ok
=== end sparkfleet matmul ===
"""


def test_matmul_output_exact():
    result = parse_log(MATMUL_OUTPUT)
    assert result.kind == "matmul"
    assert result.engine == "matmul"
    assert result.model == "meta-llama/Llama-3.1-8B"
    assert result.backend == "torch"
    assert result.engine_version == "2.8.0"
    assert result.metrics == {"gflops": 18181.818, "matmul_s_mean": 0.11}
    assert result.sources == {"gflops": "matmul workload output", "matmul_s_mean": "matmul workload output"}
    assert result.extra["iteration_s"] == [0.1, 0.11, 0.12]
    assert result.extra["size"] == 10000
    assert result.extra["device"] == "cuda:0 NVIDIA GB10"
    assert result.probe == {
        "hostname": "spark-03",
        "dockerenv": "no",
        "root_dev_ino": "2049:2",
        "env_probe": "native-chroot",
    }
    assert result.missing == [] and result.warnings == []


def test_matmul_truncated_output_is_flagged():
    cut = MATMUL_OUTPUT.split("iteration 3/3")[0]
    result = parse_matmul(cut)
    assert result.metrics == {}
    assert result.missing == ["gflops", "matmul_s_mean"]
    assert any("no end marker" in w for w in result.warnings)
    assert any("2 of 3 iteration timings" in w for w in result.warnings)


def test_matmul_mean_that_does_not_match_timings_is_flagged():
    result = parse_matmul(MATMUL_OUTPUT.replace("mean_s: 0.110000000", "mean_s: 0.200000000"))
    assert any("differs from the mean" in w for w in result.warnings)


def test_vllm_current_format_exact():
    result = parse_file(own_fixture("vllm/throughput-v0.10.txt"))
    assert result.kind == "vllm"
    assert result.engine == "vllm"
    assert result.engine_version == "0.10.1.1"
    assert result.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert result.metrics == {"req_s": 10.42, "total_tok_s": 2667.46, "output_tok_s": 1333.73}
    assert result.sources["req_s"] == "vllm bench throughput: Throughput line"
    assert result.extra == {"total_prompt_tokens": 12800, "total_output_tokens": 12800}
    assert result.missing == [] and result.warnings == []


def test_vllm_old_format_has_total_tokens_only():
    result = parse_file(own_fixture("vllm/throughput-v0.5-old.txt"))
    assert result.metrics == {"req_s": 42.17, "total_tok_s": 10795.52}
    assert result.model == "facebook/opt-125m"
    assert result.engine_version == "0.5.0"
    assert result.missing == ["output_tok_s"]


def test_vllm_without_model_line():
    result = parse_vllm("Throughput: 1.00 requests/s, 3.00 total tokens/s, 2.00 output tokens/s\n")
    assert result.metrics == {"req_s": 1.0, "total_tok_s": 3.0, "output_tok_s": 2.0}
    assert result.missing == ["model"]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('  {"engine": {}, "performance": {}}', "report_json"),
        (MATMUL_OUTPUT, "matmul"),
        ("Throughput: 1.00 requests/s, 3.00 total tokens/s, 2.00 output tokens/s", "vllm"),
        ("[TensorRT-LLM] TensorRT-LLM version: 1.1.0rc3\n", "trtllm"),
        ("===\n= PERFORMANCE OVERVIEW\n===\n", "trtllm"),
        ("hello world\n", "unknown"),
        ("", "unknown"),
        ("{not json", "unknown"),
    ],
)
def test_detect_kind(text, kind):
    assert detect_kind(text) == kind


@pytest.mark.parametrize("name", ["throughput-0.17.0-tensorrt.log", "gb10-1.1.0rc3-memory-excerpt.log"])
def test_shared_fixtures_are_detected_as_trtllm(name):
    assert detect_kind(trtllm_fixture(name).read_text()) == "trtllm"


def test_unknown_text_says_what_is_missing():
    result = parse_log("just some words\nand more: 12\n")
    assert result.kind == "unknown"
    assert result.metrics == {}
    assert result.missing == ["recognisable benchmark output"]
    assert result.warnings


def test_bytes_with_invalid_utf8_are_fine():
    result = parse_log(MATMUL_OUTPUT.encode() + b"\xff\xfe\x80 progress \x1b[2K\n")
    assert result.metrics["gflops"] == 18181.818


def test_probe_last_value_wins_and_noise_is_ignored():
    text = (
        "[sparkfleet-probe] hostname: a\nnoise [sparkfleet-probe] hostname: b\n"
        "[sparkfleet-probe]   env_probe: x y z  \n[sparkfleet-probe] broken line\n"
    )
    assert parse_probe(text) == {"hostname": "b", "env_probe": "x y z"}


def test_to_dict_is_plain_data():
    data = parse_log(MATMUL_OUTPUT).to_dict()
    assert data["metrics"]["gflops"] == 18181.818
    assert set(data) == {
        "kind",
        "metrics",
        "sources",
        "model",
        "engine",
        "engine_version",
        "backend",
        "missing",
        "warnings",
        "extra",
        "probe",
        "samples",
        "loaded",
    }
    assert data["samples"]["matmul_s"] == data["extra"]["iteration_s"]  # raw per-iteration timings, kept
