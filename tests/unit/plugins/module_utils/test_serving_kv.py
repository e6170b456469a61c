"""parse_kv on real engine start-up lines (tests/fixtures/serving/README.md says where each came from)."""

from __future__ import annotations

import pytest
from _shared import own_fixture, trtllm_fixture

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.serving_kv import (
    KV_LOGS,
    parse_kv,
)


def kv(engine: str, name: str) -> dict:
    return parse_kv(engine, own_fixture(f"serving/{name}").read_text())


# --------------------------------------------------------------------------- vLLM


def test_vllm_0_10_available_memory_and_token_capacity():
    out = kv("vllm", "vllm-startup-0.10.1-pr20707.log")
    assert out["engine"] == "vllm"
    assert out["kv_cache_gib"] == 112.61 and out["available_memory_gib"] == 112.61
    assert out["source"].endswith("[gpu_worker.py:277] Available KV cache memory: 112.61 GiB")
    assert out["max_tokens"] == 922496  # "922,496": thousands separators
    assert out["max_concurrency"] == 23.06 and out["max_concurrency_tokens_per_request"] == 40000


def test_vllm_0_11_tensor_parallel_log():
    out = kv("vllm", "vllm-startup-0.11-tp2-issue28228.log")
    assert (out["kv_cache_gib"], out["max_tokens"]) == (2.30, 75840)
    assert out["source"].startswith("(Worker_TP0 pid=26347)")


def test_vllm_early_v1_prints_blocks_not_tokens():
    out = kv("vllm", "vllm-startup-0.7-v1-pr12569.log")
    assert out["kv_cache_gib"] is None and out["max_tokens"] is None
    assert out["gpu_blocks"] == 1381
    assert out["model_loading_gib"] == 67.7229


def test_vllm_v0_reserved_for_kv_cache():
    out = kv("vllm", "vllm-startup-0.6-v0-pr12126.log")
    assert out["kv_cache_gib"] == 14.65
    assert "the rest of the memory reserved for KV Cache is 14.65GiB" in out["source"]
    assert out["gpu_blocks"] == 6001


def test_vllm_2026_spellings():
    # vllm/v1/worker/gpu_worker.py and gpu_model_runner.py on 2026 main: format_gib() and "GiB memory"
    text = ("(EngineCore pid=7) INFO 05-26 21:34:03 [gpu_model_runner.py:4881] Model loading took 15.36 GiB memory "
            "and 9.871 seconds\n"
            "(EngineCore pid=7) INFO 05-26 21:34:11 [gpu_worker.py:563] Available KV cache memory: 12.29 GiB\n"
            "(EngineCore pid=7) INFO 05-26 21:34:12 [kv_cache_utils.py:1710] GPU KV cache size: 396,928 tokens\n")
    out = parse_kv("vllm", text)
    assert (out["kv_cache_gib"], out["max_tokens"], out["model_loading_gib"]) == (12.29, 396928, 15.36)


# --------------------------------------------------------------------------- SGLang


def test_sglang_k_plus_v_and_tokens():
    out = kv("sglang", "sglang-startup-2025-issue21348.log")
    assert out["kv_cache_gib"] == pytest.approx(16.46)
    assert out["max_tokens"] == 367404
    assert (out["k_gib"], out["v_gib"]) == (8.23, 8.23)


def test_sglang_2026_dtype_field_first_rank_and_draft_pool():
    out = kv("sglang", "sglang-startup-2026-fp8-draft-club3090-1261.log")
    assert out["rank"] == "TP0" and out["kv_dtype"] == "torch.float8_e4m3fn"
    assert out["pools"] == 2  # target model and draft model on TP0; TP1's lines are not added
    assert out["kv_cache_gib"] == pytest.approx(3.46 * 2 + 1.08 * 2)
    assert out["max_tokens"] == 454112
    assert out["avail_mem_after_pool_gib"] == 8.40
    assert out["warnings"]


def test_sglang_swa_pool_ranks_out_of_order():
    out = kv("sglang", "sglang-startup-2026-swa-pr18039.log")
    assert out["rank"] == "TP1" and out["pools"] == 1
    assert out["kv_cache_gib"] == pytest.approx(8.38 + 5.59)


def test_sglang_mla_pool_and_scheduler_line():
    # MLATokenToKVPool's line (memory_pool.py) and scheduler.py's max_total_num_tokens line, TP0 only
    text = ("[2026-03-11 13:53:21 TP0] Load weight end. elapsed=23.18 s, type=Glm4MoeLiteForCausalLM, "
            "avail mem=32.02 GB, mem usage=28.79 GB.\n"
            "[2026-03-11 13:53:23 TP0] KV Cache is allocated. #tokens: 383872, KV size: 19.36 GB\n"
            "[2026-03-11 13:53:23 TP0] max_total_num_tokens=383800, chunked_prefill_size=8192, "
            "max_prefill_tokens=16384, max_running_requests=48, context_len=202752, available_gpu_mem=10.30 GB\n")
    out = parse_kv("sglang", text)
    assert out["kv_cache_gib"] == 19.36
    assert out["max_tokens"] == 383800  # the scheduler's figure wins over the pool's #tokens
    assert (out["available_memory_gib"], out["weights_gib"]) == (32.02, 28.79)


# --------------------------------------------------------------------------- llama.cpp

# The format strings of src/llama-kv-cache.cpp (ggml-org/llama.cpp, 2025-08+) rendered with printf's widths.
LLAMA_KV_2025 = (
    "llama_context: constructing llama_context\n"
    "llama_context: n_ctx         = 8192\n"
    "llama_kv_cache:      CUDA0 KV buffer size =  1024.00 MiB\n"
    "llama_kv_cache: size = 1024.00 MiB (  8192 cells,  32 layers,  4/1 seqs), "
    "K (f16):  512.00 MiB, V (f16):  512.00 MiB\n"
)


def test_llamacpp_size_line():
    out = parse_kv("llama.cpp", LLAMA_KV_2025)
    assert out["kv_cache_gib"] == 1.0 and out["max_tokens"] == 8192
    assert (out["cells"], out["layers"], out["seqs"], out["streams"]) == (8192, 32, 4, 1)
    assert out["buffers_gib"] == {"CUDA0": 1.0}
    assert out["available_memory_gib"] is None


def test_llamacpp_per_sequence_streams_multiply_cells():
    text = LLAMA_KV_2025.replace("(  8192 cells,  32 layers,  4/1 seqs)", "(  2048 cells,  32 layers,  4/4 seqs)")
    assert parse_kv("llama.cpp", text)["max_tokens"] == 8192


def test_llamacpp_unified_name_and_draft_context_ignored():
    text = ("llama_context: constructing llama_context\n"
            "llama_kv_cache_unified: size =  448.00 MiB (  4096 cells,  28 layers,  1 seqs), K (q8_0):  224.00 MiB, "
            "V (q8_0):  224.00 MiB\n"
            "llama_context: constructing llama_context\n"
            "llama_kv_cache_unified: size =   32.00 MiB (  4096 cells,   2 layers,  1 seqs), K (f16):   16.00 MiB, "
            "V (f16):   16.00 MiB\n")
    out = parse_kv("llama.cpp", text)
    assert out["kv_cache_gib"] == pytest.approx(448 / 1024) and out["k_type"] == "q8_0"
    assert out["warnings"]


def test_llamacpp_2024_kv_self_size():
    # llama_new_context_with_model's line in 2024 builds (src/llama.cpp)
    text = ("llama_new_context_with_model: n_ctx      = 4096\n"
            "llama_kv_cache_init:      CUDA0 KV buffer size =   512.00 MiB\n"
            "llama_new_context_with_model: KV self size  =  512.00 MiB, K (f16):  256.00 MiB, V (f16):  256.00 MiB\n")
    out = parse_kv("llama.cpp", text)
    assert (out["kv_cache_gib"], out["max_tokens"]) == (0.5, 4096)


def test_llamacpp_real_server_log():
    # llama-server -c 32768 -np 4 -lv 4 on the tiny model: "llama_kv_cache: size = 16.00 MiB ( 8192 cells, 2 layers,
    # 4/4 seqs)" - one stream per slot, 8192 cells each
    out = parse_kv("llama.cpp", own_fixture("serving/llama-server-startup.log").read_text())
    assert out["kv_cache_gib"] == 16 / 1024 and out["max_tokens"] == 4 * 8192
    assert "size =" in out["source"]


# --------------------------------------------------------------------------- TensorRT-LLM


def test_trtllm_serve_allocation_after_profiling():
    out = parse_kv("trtllm-serve", trtllm_fixture("gb10-1.1.0rc3-memory-excerpt.log").read_text())
    assert out["kv_cache_gib"] == 5.95 and out["max_tokens"] == 86720  # not the profiling run's 0.56 GiB / 8224
    assert out["source"].endswith("[MemUsageChange] Allocated 5.95 GiB for max tokens in paged KV cache (86720).")
    assert out["available_memory_gib"] == 5.95 and out["kv_cache_source"] == "allocation"
    assert out["engine_version"] == "1.1.0rc3"


def test_trtllm_serve_budget_without_allocation_line():
    text = own_fixture("trtllm-bench/throughput-1.3.0rc13-gb10-no-gpu-info-kv-v2.log").read_text()
    out = parse_kv("trtllm-serve", text)
    assert out["kv_cache_source"] == "budget"
    assert out["kv_cache_gib"] == out["available_memory_gib"]
    assert "Peak memory during memory usage profiling" in out["source"]
    assert out["max_tokens"] is None


# --------------------------------------------------------------------------- every engine


@pytest.mark.parametrize("engine", KV_LOGS)
def test_nothing_found_is_all_none(engine):
    out = parse_kv(engine, "INFO: Uvicorn running on http://127.0.0.1:8000\n\x00garbage\n")
    assert out["engine"] == engine
    assert (out["kv_cache_gib"], out["source"], out["max_tokens"]) == (None, None, None)


def test_unknown_engine_is_refused_by_name():
    with pytest.raises(ValueError, match="'tgi'"):
        parse_kv("tgi", "")


def test_llamacpp_at_its_default_verbosity_gives_the_capacity_in_tokens_and_says_why_no_size():
    # the real start-up log without its -lv 4 (debug) lines: what llama-server prints by default
    text = own_fixture("serving/llama-server-startup.log").read_text()
    quiet = "\n".join(line for line in text.splitlines()
                      if "llama_kv_cache" not in line and "llama_context" not in line)
    kv = parse_kv("llama.cpp", quiet)
    assert kv["kv_cache_gib"] is None and kv["max_tokens"] == 4 * 8192
    assert "n_slots = 4" in kv["source"] and any("-lv 4" in w for w in kv["warnings"])
