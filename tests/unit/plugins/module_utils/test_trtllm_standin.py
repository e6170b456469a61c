"""The trtllm-bench stand-in: real argument names, the real report layout, real memory, and a parser
round trip that gives back exactly the numbers it printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _shared import STANDIN_TRTLLM

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import (
    parse_log,
    parse_report_json,
)

MODEL = "meta-llama/Llama-3.1-8B"
# prepare-dataset exists from 1.2 (the 1.1 stand-in refuses it as click does); its tokenizer is --model, a local
# directory (the test host reaches no Hub).
PREPARE_ENV = {"SPARKFLEET_FAKE_VERSION": "1.2.0rc8"}
TOKENIZER = str(Path(__file__).resolve().parent)


def standin(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 60, cwd=None
) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_")}
    full_env |= {"SPARKFLEET_FAKE_RUNTIME_S": "0.05", **(env or {})}
    # Run it as the product would: an executable found by path, its own shebang, python3 on PATH.
    return subprocess.run(
        [str(STANDIN_TRTLLM), *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("ds") / "synthetic_128_64.jsonl"
    proc = standin(
        env=PREPARE_ENV,
        args=[
            "--model",
            TOKENIZER,
            "prepare-dataset",
            "--output",
            str(path),
            "token-norm-dist",
            "--num-requests",
            "50",
            "--input-mean",
            "128",
            "--output-mean",
            "64",
            "--input-stdev",
            "0",
            "--output-stdev",
            "0",
        ]
    )
    assert proc.returncode == 0, proc.stderr
    return path


def test_prepare_dataset_writes_the_real_jsonl_shape(dataset):
    rows = [json.loads(line) for line in dataset.read_text().splitlines()]
    assert len(rows) == 50
    assert set(rows[0]) == {"task_id", "input_ids", "output_tokens"}
    assert all(len(r["input_ids"]) == 128 and r["output_tokens"] == 64 for r in rows)


def throughput(dataset, tmp_path, *extra: str, env: dict[str, str] | None = None):
    report = tmp_path / "report.json"
    proc = standin(
        [
            "--model",
            MODEL,
            "--workspace",
            str(tmp_path / "ws"),
            "throughput",
            "--dataset",
            str(dataset),
            "--backend",
            "pytorch",
            "--report_json",
            str(report),
            *extra,
        ],
        env=env,
    )
    return proc, report


def test_throughput_round_trip_text_and_json(dataset, tmp_path):
    proc, report_path = throughput(
        dataset, tmp_path, "--num_requests", "40", "--concurrency", "8", "--max_batch_size", "64", "--streaming"
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    assert set(report) == {"engine", "world_info", "request_info", "performance", "streaming_metrics", "dataset"}
    text = parse_log(proc.stdout)
    assert text.kind == "trtllm-bench"
    assert text.model == MODEL and text.engine_version == "1.1.0rc3" and text.backend == "pytorch"
    assert text.missing == [] and text.warnings == []
    # the text carries the JSON's figures rounded to the printed 4 decimals, nothing else
    perf, streaming = report["performance"], report["streaming_metrics"]
    printed = {
        "req_s": perf["request_throughput_req_s"],
        "output_tok_s": perf["system_output_throughput_tok_s"],
        "total_tok_s": perf["system_total_throughput_tok_s"],
        "latency_ms_avg": perf["avg_request_latency_ms"],
        "latency_ms_p50": perf["request_latency_percentiles_ms"]["p50"],
        "latency_ms_p90": perf["request_latency_percentiles_ms"]["p90"],
        "latency_ms_p95": perf["request_latency_percentiles_ms"]["p95"],
        "latency_ms_p99": perf["request_latency_percentiles_ms"]["p99"],
        "ttft_ms": streaming["avg_ttft_ms"],
        "tpot_ms": streaming["avg_tpot_ms"],
    }
    for metric, value in printed.items():
        assert text.metrics[metric] == float(f"{value:.4f}"), metric
    # the JSON parser gives the unrounded figures back exactly
    from_json = parse_report_json(report_path.read_text())
    for metric, value in printed.items():
        assert from_json.metrics[metric] == value, metric
    # workload honoured: request count and lengths as asked
    assert text.extra["num_requests"] == 40
    assert text.extra["avg_output_len"] == 64 and text.extra["avg_input_len"] == 128
    assert report["request_info"]["num_requests"] == 40
    assert report["world_info"]["max_batch_size"] == 64
    assert report["world_info"]["kv_cache_percentage"] == 0.9
    # memory lines as on a GB10, consistent with the KV budget
    assert text.metrics["device_total_gib"] == 119.70
    assert text.metrics["kv_fraction"] == 0.8999999761581421
    assert abs(text.metrics["kv_budget_residual_gib"]) <= 0.011
    assert text.metrics["tmp_kv_gib"] == 1.0  # the stand-in's temporary KV cache, printed as the real line does
    # with --report_json given, its figures win
    merged = parse_log(proc.stdout, report_path.read_text())
    assert merged.metrics["req_s"] == perf["request_throughput_req_s"]
    assert merged.warnings == []


def test_latency_subcommand_streams_at_concurrency_one(dataset, tmp_path):
    report = tmp_path / "lat.json"
    proc = standin(
        ["--model", MODEL, "latency", "--dataset", str(dataset), "--num_requests", "5", "--report_json", str(report)]
    )
    assert proc.returncode == 0, proc.stderr
    result = parse_log(proc.stdout)
    assert {"ttft_ms", "tpot_ms", "latency_ms_p99"} <= set(result.metrics)
    data = json.loads(report.read_text())
    assert data["world_info"]["max_batch_size"] == 1
    assert data["request_info"]["num_requests"] == 5
    assert "streaming_metrics" in data


def test_non_streaming_throughput_has_no_streaming_block(dataset, tmp_path):
    proc, report = throughput(dataset, tmp_path)
    result = parse_log(proc.stdout)
    assert "ttft_ms" not in result.metrics and "ttft_ms" not in result.missing
    assert "streaming_metrics" not in json.loads(report.read_text())
    assert result.extra["num_requests"] == 50  # whole dataset when --num_requests is not given


def test_output_length_changes_the_figures(tmp_path):
    outputs = {}
    for osl in (32, 256):
        path = tmp_path / f"ds{osl}.jsonl"
        standin(
            env=PREPARE_ENV,
            args=[
                "--model",
                TOKENIZER,
                "prepare-dataset",
                "--output",
                str(path),
                "token-norm-dist",
                "--num-requests",
                "10",
                "--input-mean",
                "100",
                "--output-mean",
                str(osl),
                "--input-stdev",
                "0",
                "--output-stdev",
                "0",
            ]
        )
        proc = standin(["--model", MODEL, "throughput", "--dataset", str(path)])
        outputs[osl] = parse_log(proc.stdout)
    assert outputs[32].extra["avg_output_len"] == 32 and outputs[256].extra["avg_output_len"] == 256
    assert outputs[256].metrics["latency_ms_avg"] > 4 * outputs[32].metrics["latency_ms_avg"]


def test_loaded_model_hook_and_speed_hook(dataset, tmp_path):
    base, _ = throughput(dataset, tmp_path)
    slow, report = throughput(
        dataset, tmp_path, env={"SPARKFLEET_FAKE_LOADED_MODEL": "Qwen/Qwen2.5-7B", "SPARKFLEET_FAKE_SPEED": "0.5"}
    )
    fast_result, slow_result = parse_log(base.stdout), parse_log(slow.stdout)
    assert slow_result.model == "Qwen/Qwen2.5-7B"
    assert json.loads(report.read_text())["engine"]["model"] == "Qwen/Qwen2.5-7B"
    ratio = slow_result.metrics["output_tok_s"] / fast_result.metrics["output_tok_s"]
    assert ratio == pytest.approx(0.5, rel=1e-3)


def test_exit_hook_fails_after_start_up_without_a_report(dataset, tmp_path):
    proc, report = throughput(dataset, tmp_path, env={"SPARKFLEET_FAKE_EXIT": "7"})
    assert proc.returncode == 7
    assert not report.exists()
    result = parse_log(proc.stdout)
    assert "peak_memory_gib" in result.metrics  # start-up lines were printed
    assert "output_tok_s" in result.missing and "model" in result.missing


def test_hang_hook_runs_into_the_timeout(dataset, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        standin(
            ["--model", MODEL, "throughput", "--dataset", str(dataset)], env={"SPARKFLEET_FAKE_HANG": "1"}, timeout=3
        )


def test_it_really_allocates_memory(dataset):
    # ru_maxrss of the waited-for children, in KiB on Linux, measured in a fresh helper process
    helper = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    env = {**os.environ, "SPARKFLEET_FAKE_ALLOC_MIB": "200", "SPARKFLEET_FAKE_RUNTIME_S": "0"}
    out = subprocess.run(
        [sys.executable, "-c", helper, str(STANDIN_TRTLLM), "--model", MODEL, "throughput", "--dataset", str(dataset)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert int(out.stdout) >= 200 * 1024


def test_probe_lines_on_stderr(dataset, tmp_path):
    proc, _ = throughput(dataset, tmp_path, env={"SPARKFLEET_ENV_PROBE": "container-A"})
    assert "[sparkfleet-probe]" not in proc.stdout
    result = parse_log(proc.stderr + proc.stdout)
    assert result.probe["env_probe"] == "container-A"
    assert result.probe["dockerenv"] in ("yes", "no")
    assert result.probe["root_dev_ino"] == f"{os.stat('/').st_dev}:{os.stat('/').st_ino}"


def test_1_2_layout_switch(dataset, tmp_path):
    proc, report = throughput(dataset, tmp_path, env={"SPARKFLEET_FAKE_VERSION": "1.2.0"})
    assert "TensorRT LLM Version:\t1.2.0" in proc.stdout and "= MACHINE DETAILS" in proc.stdout
    assert "temporary kv cache memory during profiling" in proc.stdout
    result = parse_log(proc.stdout)
    assert result.engine_version == "1.2.0"
    assert result.extra["gpu_name"] == "NVIDIA GB10"
    assert json.loads(report.read_text())["machine"]["memory.total"] == 119.70


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["throughput", "--dataset", "/nonexistent.jsonl"], 2),
        (["throughput", "--no_such_option", "1"], 2),
        (["bogus-command"], 2),
        (["throughput"], 1),
    ],
)
def test_bad_invocations_fail_like_the_cli(args, code):
    proc = standin(["--model", MODEL, *args])
    assert proc.returncode == code
    assert "Traceback" not in proc.stderr or code == 1


def test_it_is_stdlib_only_and_standalone():
    source = STANDIN_TRTLLM.read_text()
    assert source.startswith("#!/usr/bin/env python3\n")
    assert "sparkfleet" not in "".join(line for line in source.splitlines() if line.startswith(("import", "from")))
    assert os.access(STANDIN_TRTLLM, os.X_OK)


@pytest.mark.parametrize("yaml_text", ["kv_cache_config:\n  free_gpu_memory_fraction: 0.25\n",
                                       "# options\nkv_cache_config: {free_gpu_memory_fraction: 0.25}\n"])
def test_llm_api_options_fraction_overrides_the_cli_in_the_memory_lines(dataset, tmp_path, yaml_text):
    options = tmp_path / "extra.yaml"
    options.write_text(yaml_text)
    proc, report = throughput(dataset, tmp_path, "--extra_llm_api_options", str(options))
    assert proc.returncode == 0, proc.stderr
    parsed = parse_log(proc.stdout)
    assert parsed.metrics["kv_fraction"] == 0.25
    # the report keeps the runtime config's (CLI) value, as the real tool does
    assert json.loads(report.read_text())["world_info"]["kv_cache_percentage"] == 0.9


def _meminfo_gib(key: str) -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 2**20
    raise KeyError(key)


def test_unified_memory_model_sizes_kv_from_memtotal_and_memfree(dataset, tmp_path):
    proc, _ = throughput(dataset, tmp_path, "--kv_cache_free_gpu_mem_fraction", "0.5",
                         env={"SPARKFLEET_FAKE_UNIFIED_MEMORY": "1", "SPARKFLEET_FAKE_ALLOC_MIB": "8"})
    assert proc.returncode == 0, proc.stderr
    m = parse_log(proc.stdout).metrics
    assert m["device_total_gib"] == pytest.approx(_meminfo_gib("MemTotal"), abs=0.01)
    tmp = 8224 * 131072 / 2**30
    # peak = total - MemFree (page cache and everything else count as used); kv = fraction x (free + tmp)
    assert m["peak_memory_gib"] == pytest.approx(_meminfo_gib("MemTotal") - _meminfo_gib("MemFree"), abs=1.0)
    assert m["kv_cache_gib"] == pytest.approx(0.5 * (m["device_total_gib"] - m["peak_memory_gib"] + tmp), abs=0.02)


@pytest.mark.root
def test_unified_memory_model_page_cache_shrinks_kv_and_a_drop_gives_it_back(dataset, tmp_path):
    """The study's page-cache explanation, as the stand-in models it: cached file pages are not free to CUDA.
    Other tests running beside this one fill the page cache too, between the drop and the run after it: up to
    three cached/dropped pairs, the first that shows most of the cache coming back passes."""
    env = {"SPARKFLEET_FAKE_UNIFIED_MEMORY": "1", "SPARKFLEET_FAKE_ALLOC_MIB": "8"}
    cache_mib = 1536
    blob = tmp_path / "weights.bin"
    with open(blob, "wb") as fh:  # written and synced: its pages stay in the page cache
        for _ in range(cache_mib):
            fh.write(os.urandom(1 << 20))
        fh.flush()
        os.fsync(fh.fileno())
    gains = []
    for _ in range(3):
        blob.read_bytes()  # the blob's pages (back) in the page cache
        cached, _ = throughput(dataset, tmp_path, "--kv_cache_free_gpu_mem_fraction", "0.5", env=env)
        subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
        dropped, _ = throughput(dataset, tmp_path, "--kv_cache_free_gpu_mem_fraction", "0.5", env=env)
        kv_cached, kv_dropped = (parse_log(p.stdout).metrics["kv_cache_gib"] for p in (cached, dropped))
        gains.append(kv_dropped - kv_cached)
        if gains[-1] > 0.5 * (cache_mib / 1024) * 0.6:  # most of the cache came back as KV
            break
    assert gains[-1] > 0.5 * (cache_mib / 1024) * 0.6, gains
