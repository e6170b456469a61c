"""TensorRT-LLM memory-profiling and KV-cache allocation lines, every variant seen in the sources."""

from __future__ import annotations

import pytest
from _shared import trtllm_fixture

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import (
    parse_file,
    parse_log,
    parse_memory_lines,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.trtllm_memory import (
    SRC_ALLOC,
    SRC_CPP_TOTAL,
    SRC_KV_BUDGET,
    SRC_PEAK,
    SRC_RESIDUAL,
    SRC_RESIDUAL_NO_TMP,
    SRC_TMP_KV,
)

PREFIX = "[12/20/2025-04:21:51] [TRT-LLM] [I] "
PEAK_HEAD = (
    "Peak memory during memory usage profiling (torch + non-torch): 91.46 GiB, "
    "available KV cache memory when calculating max tokens: 41.11 GiB"
)


def test_gb10_excerpt_exact():
    result = parse_file(trtllm_fixture("gb10-1.1.0rc3-memory-excerpt.log"))
    assert result.kind == "trtllm-memory"
    assert result.engine_version == "1.1.0rc3"  # from the import banner
    # 0.9 x (119.70 - 113.65 + 0.56) = 5.949: the line fits the KV budget (DESIGN.md) to its 2-decimal rounding
    residual = result.metrics.pop("kv_budget_residual_gib")
    assert abs(residual) <= 0.01 and residual == pytest.approx(0.001, abs=1e-4)
    assert result.metrics == {
        "peak_memory_gib": 113.65,
        "kv_cache_gib": 5.95,
        "device_total_gib": 119.70,
        "kv_fraction": 0.8999999761581421,
        "tmp_kv_gib": 0.56,  # the budget's tmp_kv term, a record metric with its source
    }
    assert result.sources["tmp_kv_gib"] == SRC_TMP_KV and result.sources["kv_budget_residual_gib"] == SRC_RESIDUAL
    assert result.sources["peak_memory_gib"] == SRC_PEAK
    # the allocation after the profiling line is the real KV cache; the 0.56 GiB one before it was temporary
    assert result.sources["kv_cache_gib"] == SRC_ALLOC
    assert result.extra["kv_max_tokens"] == 86720
    assert "tmp_kv_gib" not in result.extra and "kv_budget_residual_gib" not in result.extra  # metrics now
    assert result.extra["available_kv_gib"] == 5.95
    assert result.extra["kv_size_per_token"] == 73728
    assert result.extra["weights_inside_torch_gib"] == 63.52
    assert result.extra["weights_outside_torch_gib"] == 49.78
    assert result.extra["activations_inside_torch_gib"] == 0.85
    assert result.extra["outside_torch_gib"] == 49.28
    assert result.extra["estimated_kv_gib"] == 5.95
    assert result.extra["max_batch_size"] == 64
    assert result.warnings == []
    # a memory excerpt has no report: the report's figures and the model are missing, memory ones are not
    assert "model" in result.missing and "output_tok_s" in result.missing
    assert not {"peak_memory_gib", "kv_cache_gib", "device_total_gib", "kv_fraction"} & set(result.missing)


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("", {"peak_memory_gib": 91.46, "kv_cache_gib": 41.11}),
        (
            ", fraction is set 0.85, kv size is 35136",
            {"peak_memory_gib": 91.46, "kv_cache_gib": 41.11, "kv_fraction": 0.85},
        ),
        (
            ", fraction is set 0.85, kv size is 35136. device total memory 139.81 GiB",
            {"peak_memory_gib": 91.46, "kv_cache_gib": 41.11, "kv_fraction": 0.85, "device_total_gib": 139.81,
             "kv_budget_residual_gib": 0.0125},  # 41.11 - 0.85 x (139.81 - 91.46), no tmp_kv in the line
        ),
        (
            ", fraction is set 0.85, kv size is 35136. device total memory 139.81 GiB, , tmp kv_mem 1.07 GiB",
            {"peak_memory_gib": 91.46, "kv_cache_gib": 41.11, "kv_fraction": 0.85, "device_total_gib": 139.81,
             "tmp_kv_gib": 1.07, "kv_budget_residual_gib": -0.897},  # ... - 0.85 x 1.07
        ),
        (
            ", fraction is set 0.85, kv size per token is 35136. device total memory 139.81 GiB, "
            "temporary kv cache memory during profiling 1.07 GiB",
            {"peak_memory_gib": 91.46, "kv_cache_gib": 41.11, "kv_fraction": 0.85, "device_total_gib": 139.81,
             "tmp_kv_gib": 1.07, "kv_budget_residual_gib": -0.897},
        ),
    ],
    ids=["oldest", "fraction-kvsize", "device-total", "tmp-kv-mem-1.1", "newest-1.2"],
)
def test_every_peak_line_variant(tail, expected):
    result = parse_memory_lines(PREFIX + PEAK_HEAD + tail + "\n")
    assert result.metrics == pytest.approx(expected)
    assert result.sources["kv_cache_gib"] == SRC_KV_BUDGET  # no allocation line: the profiling's figure
    assert result.sources["kv_cache_gib"].startswith("budget: ") and result.extra["kv_cache_source"] == "budget"
    if "device total" in tail:
        assert result.sources["kv_budget_residual_gib"] == (SRC_RESIDUAL if "tmp_kv_gib" in expected
                                                             else SRC_RESIDUAL_NO_TMP)
    if "kv size" in tail:
        assert result.extra["kv_size_per_token"] == 35136


def test_label_spacing_and_case_do_not_matter():
    line = (
        "[TRT-LLM] [RANK 0] [I] peak  memory during memory usage profiling (torch + non-torch) :  12.5 gib, "
        "available kv cache memory when calculating max tokens: 3.25 GiB, fraction is set 0.9, "
        "kv size per token is 1024. Device Total Memory 20.00 GiB, temporary kv cache memory during "
        "profiling 0.5 GiB"
    )
    result = parse_memory_lines(line)
    assert result.metrics == pytest.approx({
        "peak_memory_gib": 12.5,
        "kv_cache_gib": 3.25,
        "kv_fraction": 0.9,
        "device_total_gib": 20.0,
        "tmp_kv_gib": 0.5,
        "kv_budget_residual_gib": -3.95,  # 3.25 - 0.9 x (20 - 12.5 + 0.5): a made-up line, not a fitting one
    })


def test_several_profiling_lines_take_the_last_and_say_so():
    text = "\n".join(
        [
            PREFIX + PEAK_HEAD + ", fraction is set 0.9, kv size is 1. device total memory 139.81 GiB",
            "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 41.11 GiB for max tokens in paged KV cache (100).",
            PREFIX + "Peak memory during memory usage profiling (torch + non-torch): 95.00 GiB, available KV cache "
            "memory when calculating max tokens: 40.00 GiB, fraction is set 0.9, kv size is 1. "
            "device total memory 139.81 GiB",
            "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 40.00 GiB for max tokens in paged KV cache (99).",
        ]
    )
    result = parse_memory_lines(text)
    assert result.metrics["peak_memory_gib"] == 95.0
    assert result.metrics["kv_cache_gib"] == 40.0
    assert result.extra["kv_max_tokens"] == 99
    assert result.extra["profiling_lines"] == 2
    assert any("2 memory-profiling" in w and "last (final)" in w for w in result.warnings)


def test_allocation_without_paged_words_and_in_mib():
    text = PREFIX + PEAK_HEAD + "\n[MemUsageChange] Allocated 2048 MiB for max tokens (524288)\n"
    result = parse_memory_lines(text)
    assert result.metrics["kv_cache_gib"] == 2.0
    assert result.sources["kv_cache_gib"] == SRC_ALLOC


def test_allocation_alone_and_cpp_runtime_usage_line():
    text = (
        "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 79.10 GiB, "
        "available: 70.48 GiB\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 63.43 GiB for max tokens in paged KV cache (519616).\n"
    )
    result = parse_memory_lines(text)
    assert result.metrics == {"device_total_gib": 79.10, "kv_cache_gib": 63.43}
    assert result.sources["device_total_gib"] == SRC_CPP_TOTAL
    assert result.extra["cpp_available_gib"] == 70.48
    assert result.missing == ["peak_memory_gib", "kv_fraction"]


def test_estimated_line_is_the_last_resort_for_kv():
    result = parse_memory_lines(PREFIX + "Estimated max memory in KV cache : 5.95 GiB\n")
    assert result.metrics == {"kv_cache_gib": 5.95}
    assert result.sources["kv_cache_gib"] == \
        "budget: log Estimated max memory in KV cache (no [MemUsageChange] allocation line)"


def test_cut_numbers_without_unit_are_not_taken():
    result = parse_memory_lines(PREFIX + "Peak memory during memory usage profiling (torch + non-torch): 113.6")
    assert result.metrics == {}
    assert result.kind == "unknown"


def test_bench_log_merges_memory_lines_and_report():
    log = (
        trtllm_fixture("gb10-1.1.0rc3-memory-excerpt.log").read_text()
        + "\n"
        + trtllm_fixture("throughput-1.1.0rc1-header-partial.txt").read_text()
    )
    result = parse_log(log)
    assert result.kind == "trtllm-bench"
    assert result.model == "deepseek-ai/DeepSeek-R1"
    assert result.engine_version == "1.1.0rc1"  # the report's, over the banner's
    assert result.metrics["peak_memory_gib"] == 113.65
    assert result.metrics["req_s"] == 7.3411
    # the engine's own fraction wins over the report's requested percentage, and they disagree -> warned
    assert result.metrics["kv_fraction"] == 0.8999999761581421
    assert result.sources["kv_fraction"] == "log: Peak memory line, fraction is set"
    assert any(w.startswith("kv_fraction:") for w in result.warnings)
