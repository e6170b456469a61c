"""hf-generate's two decoders: ``graph`` (static cache, the decode step replayed from a CUDA graph; an eager loop
without CUDA) and transformers' ``generate`` (launch-bound).

The parser is tested on real captures (tests/fixtures/hf_generate/README.md says where each comes from): an H100
run of each decoder and a CPU run of the graph decoder's fallback. Figures are asserted against the capture's own
text or against arithmetic of the model's shape, never recomputed by the formula the workload uses. The workload's
own pieces that need no torch (argument handling, the StaticCache constructor across transformers versions, how
many generations an iteration holds) run everywhere; running it needs torch and transformers (skipped without).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from _shared import OWN_FIXTURES, PYTHON, REPO

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import METRICS
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import (
    INTERNAL_ERROR,
    ParseResult,
    parse_hf_generate,
    parse_log,
)

SCRIPT = REPO / "roles" / "matrix" / "files" / "hf_generate.py"
FIXTURES = OWN_FIXTURES / "hf_generate"
GRAPH = (FIXTURES / "h100-llama-1b-graph-transformers-5.17.0.log").read_text()
GENERATE = (FIXTURES / "h100-llama-1b-generate-transformers-5.17.0.log").read_text()
CPU_GRAPH = (FIXTURES / "cpu-llama-tiny-graph-eager-static-transformers-5.17.0.log").read_text()
LEGACY = (FIXTURES / "cpu-llama-tiny-transformers-5.23.0.log").read_text()
NEW_FIXTURES = (GRAPH, GENERATE, CPU_GRAPH)


def load_script():
    spec = importlib.util.spec_from_file_location("hf_generate_decoders_workload", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


WORKLOAD = load_script()


def printed(text: str, key: str) -> str:
    """The value a capture printed for ``key`` (its own text: what the parser must return)."""
    return re.search(rf"^{key}: (.*)$", text, re.M).group(1)


def check(result: ParseResult) -> None:
    assert not [w for w in result.warnings if w.startswith(INTERNAL_ERROR)], result.warnings
    assert set(result.metrics) <= set(METRICS)
    assert all(isinstance(v, float) and math.isfinite(v) for v in result.metrics.values())
    result.to_dict()


# ------------------------------------------------------------------------------------ parser, real captures


def test_h100_graph_capture():
    result = parse_log(GRAPH)
    assert result.kind == "hf-generate" and result.model == "llama-1b" and result.engine_version == "5.17.0"
    assert result.missing == [] and result.warnings == []
    extra = result.extra
    assert extra["decoder"] == "graph" and extra["decode_path"] == "cuda-graph"
    assert extra["launch_bound"] is False and extra["compiled"] is True
    assert extra["kv_cache_kind"] == "static"
    assert extra["decode_check"].startswith("ok (32 tokens")
    assert extra["device"] == "cuda:0 NVIDIA H100 80GB HBM3" and extra["dtype"] == "bfloat16"
    # T1 shape, batch 1: 31 decode tokens a generation, 17 generations = 527 >= the 512 asked for by default
    assert (extra["batch"], extra["input_len"], extra["output_len"]) == (1, 128, 32)
    assert extra["generations_per_iteration"] == 17 and extra["measured_decode_tokens_per_iteration"] == 527
    # Llama-3.2-1B's published size (1.24 B parameters, embeddings tied) in bf16: 2 bytes each
    assert extra["parameters"] == 1_235_814_400 and extra["weight_bytes"] == 2_471_628_800
    assert result.loaded["param_count"] == 1_235_814_400
    # 2 (K, V) x 16 layers x batch 1 x 8 KV heads x head_dim 64 x (128 + 32 - 1) tokens x 2 B
    assert extra["kv_cache_bytes"] == 5_210_112 and extra["kv_cache_tokens"] == 159
    assert extra["decode_tok_s"] == float(printed(GRAPH, "decode_tok_s")) == 584.300482
    assert extra["decoder_setup_s"] == 29.141  # cold Inductor cache: the first process compiled from scratch
    # decode alone is faster than the whole generation (whose TTFT is an eager prefill)
    assert extra["decode_tok_s"] > result.metrics["output_tok_s"]
    assert result.metrics["tpot_ms"] == float(printed(GRAPH, "tpot_ms"))
    lat = extra["iteration_latency_ms"]
    assert len(lat) == 5 and result.samples["output_tokens"] == [32.0] * 5
    assert min(lat) <= result.metrics["latency_ms_p50"] <= result.metrics["latency_ms_p99"] <= max(lat)
    assert result.probe["env_probe"] == "native"


def test_the_compile_tuning_line_is_read_and_older_outputs_have_none():
    assert "compile_tuning" not in parse_log(GRAPH).extra  # captured before the line existed
    tuned = GRAPH.replace("compiled: yes\n", "compiled: yes\ncompile_tuning: coordinate-descent\n")
    assert parse_log(tuned).extra["compile_tuning"] == "coordinate-descent"
    assert "compile_tuned_now" not in parse_log(tuned).extra
    counted = tuned.replace("decoder_setup_s:", "compile_tuned_now: 26\ndecoder_setup_s:")
    assert parse_log(counted).extra["compile_tuned_now"] == 26
    unknown = tuned.replace("decoder_setup_s:", "compile_tuned_now: n/a\ndecoder_setup_s:")
    assert "compile_tuned_now" not in parse_log(unknown).extra


def test_h100_generate_capture():
    result = parse_log(GENERATE)
    assert result.missing == [] and result.warnings == []
    extra = result.extra
    assert extra["decoder"] == "generate" and extra["decode_path"] == "generate"
    assert extra["launch_bound"] is True and extra["compiled"] is False
    assert extra["kv_cache_kind"] == "dynamic" and extra["decode_check"] == "n/a"
    assert extra["decode_tok_s"] == float(printed(GENERATE, "decode_tok_s"))
    # the same GPU, model and shape: transformers' generate decodes an order of magnitude slower than the graph
    assert extra["decode_tok_s"] * 5 < parse_log(GRAPH).extra["decode_tok_s"]
    assert len(extra["iteration_latency_ms"]) == 2


def test_cpu_fallback_capture():
    result = parse_log(CPU_GRAPH)
    assert result.missing == [] and result.warnings == []  # an eager loop on a CPU is no fault
    extra = result.extra
    assert extra["decoder"] == "graph" and extra["decode_path"] == "eager-static"
    assert extra["launch_bound"] is True and extra["device"].startswith("cpu")
    assert "no CUDA device" in extra["decode_path_reason"]
    assert "decoder_setup_s" not in extra  # an older revision's output: nothing required of it
    assert extra["generations_per_iteration"] == 1 and extra["measured_decode_tokens_per_iteration"] == 14
    # the same KV cache as transformers' generate held for this shape (the legacy capture): 23 tokens, 4 tensors
    assert extra["kv_cache_bytes"] == parse_log(LEGACY).extra["kv_cache_bytes"] == 23552
    assert extra["weight_bytes"] == 4 * extra["parameters"]  # float32


def test_legacy_output_reads_as_generate():
    result = parse_log(LEGACY)
    assert result.extra["decoder"] == "generate" and result.extra["launch_bound"] is True
    assert "decode_tok_s" not in result.extra and "decode_path" not in result.extra
    assert result.warnings == []


def test_a_cut_before_the_decoder_line_is_not_read_as_legacy():
    cut = GRAPH.split("decoder: graph")[0]
    result = parse_hf_generate(cut)
    assert "decoder" not in result.extra and "launch_bound" not in result.extra
    assert any("truncated" in w for w in result.warnings)


def test_what_looks_wrong_is_said():
    fell_back = GRAPH.replace("decode_path: cuda-graph", "decode_path: eager-static").replace(
        "decode_path_reason: decode step replayed from a CUDA graph",
        "decode_path_reason: CUDA graph capture failed (RuntimeError: x): eager static loop")
    assert any("eager loop on a CUDA device" in w and "capture failed" in w
               for w in parse_hf_generate(fell_back).warnings)
    differs = GRAPH.replace(printed(GRAPH, "decode_check"), "differs (first at token 7 of 32, 3 tokens differ)")
    assert any("disagree" in w for w in parse_hf_generate(differs).warnings)
    inflated = GRAPH.replace("decode_tok_s: 584.300482", "decode_tok_s: 700.0")
    assert any("decode_tok_s 700.0 differs" in w for w in parse_hf_generate(inflated).warnings)
    odd = GRAPH.replace("launch_bound: no", "launch_bound: maybe")
    assert "launch_bound" not in parse_hf_generate(odd).extra


@pytest.mark.parametrize("text", NEW_FIXTURES, ids=["graph", "generate", "cpu"])
def test_every_truncation_never_raises(text):
    for end in range(0, len(text) + 1, 11):
        check(parse_hf_generate(text[:end]))
        check(parse_log(text[:end]))


def test_fixture_readme_names_each_capture():
    readme = (FIXTURES / "README.md").read_text()
    for path in FIXTURES.glob("*.log"):
        assert f"`{path.name}`" in readme, path.name


# ------------------------------------------------------------------------------ workload, no torch needed


def test_decoder_options_and_defaults():
    args = WORKLOAD.parse_args(["--model", "llama-tiny"])
    assert (args.decoder, args.compile, args.min_decode_tokens) == ("graph", "auto", None)
    args = WORKLOAD.parse_args(["--model", "x", "--decoder", "generate", "--min-decode-tokens", "0",
                                "--compile", "off"])
    assert (args.decoder, args.compile, args.min_decode_tokens) == ("generate", "off", 0)
    assert args.compile_tuning == "none"  # reproducible from process to process (BENCHMARKS.md)
    tuned = WORKLOAD.parse_args(["--model", "x", "--compile-tuning", "coordinate-descent"])
    assert tuned.compile_tuning == "coordinate-descent"


@pytest.mark.parametrize("tuning, expected", [("coordinate-descent", True), ("none", False)])
def test_the_compiled_step_gets_inductors_tuning_set_before_it_compiles(tuning, expected, monkeypatch):
    """Tuned: the static launcher off too (its cache reload drops the tuned result: tuned again per process),
    the R0_BLOCK halving (its variant beats the tuned entry in one process, loses in the next), and the compile
    workers (their pickled configs lose the tuned flag); untuned: Inductor's own defaults left as they are."""
    inductor = SimpleNamespace(coordinate_descent_tuning=not expected, use_static_cuda_launcher="default",
                               dynamic_scale_rblock="default", compile_threads="default")
    monkeypatch.setitem(sys.modules, "torch._inductor.config", inductor)
    seen = {}

    def fake_compile(fn, **kwargs):
        seen.update(kwargs, tuning_when_compiled=inductor.coordinate_descent_tuning,
                    static_launcher_when_compiled=inductor.use_static_cuda_launcher,
                    scale_rblock_when_compiled=inductor.dynamic_scale_rblock,
                    threads_when_compiled=inductor.compile_threads)
        return fn

    def step():
        return None

    assert WORKLOAD.compile_step(SimpleNamespace(compile=fake_compile), step, tuning) is step
    left = False if expected else "default"
    assert seen == {"dynamic": False, "tuning_when_compiled": expected, "static_launcher_when_compiled": left,
                    "scale_rblock_when_compiled": left, "threads_when_compiled": 1 if expected else "default"}
    older = SimpleNamespace(coordinate_descent_tuning=False)  # a torch before the static launcher
    monkeypatch.setitem(sys.modules, "torch._inductor.config", older)
    WORKLOAD.compile_step(SimpleNamespace(compile=lambda fn, **_: fn), step, tuning)
    assert vars(older) == {"coordinate_descent_tuning": expected}


def test_the_tuning_this_process_wrote_is_counted_from_inductors_cache(tmp_path, monkeypatch):
    """compile_tuned_now: the *.best_config entries written since the decoder's setup began, wherever in the
    cache's tree; older entries, other files and a missing cache are not counted."""
    for name, age_s in (("a/k1.best_config", 0), ("b/c/k2.best_config", 0), ("a/k3.best_config", 3600),
                        ("a/k1.py", 0)):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        stamp = 1_000_000.0 - age_s
        os.utime(path, (stamp, stamp))
    assert WORKLOAD.tuning_entries_written(str(tmp_path), since=1_000_000.0 - 60) == 2
    assert WORKLOAD.tuning_entries_written(str(tmp_path), since=1_000_000.0 + 1) == 0
    assert WORKLOAD.tuning_entries_written(str(tmp_path / "absent"), since=0) is None
    assert WORKLOAD.tuning_entries_written(None, since=0) is None
    # where Inductor keeps it: the newer module's cache_dir(), else the older one's, else unknown
    monkeypatch.setitem(sys.modules, "torch._inductor.runtime.cache_dir_utils", None)
    monkeypatch.setitem(sys.modules, "torch._inductor.runtime.runtime_utils",
                        SimpleNamespace(cache_dir=lambda: str(tmp_path)))
    assert WORKLOAD.inductor_cache_dir() == str(tmp_path)
    monkeypatch.setitem(sys.modules, "torch._inductor.runtime.runtime_utils", SimpleNamespace())
    assert WORKLOAD.inductor_cache_dir() is None


@pytest.mark.parametrize("argv", [["--decoder", "eager"], ["--min-decode-tokens", "-1"], ["--compile", "yes"],
                                  ["--compile-tuning", "max-autotune"]])
def test_bad_decoder_options_are_refused(argv, tmp_path):
    proc = subprocess.run([PYTHON, str(SCRIPT), "--model", "llama-tiny", *argv], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert argv[0] in proc.stderr


def test_generations_per_iteration():
    cuda, cpu = SimpleNamespace(type="cuda"), SimpleNamespace(type="cpu")

    def count(device, batch=1, output_len=32, wanted=None):
        args = argparse.Namespace(batch=batch, output_len=output_len, min_decode_tokens=wanted)
        return WORKLOAD.generations_per_iteration(args, device)

    assert count(cuda) == 17  # T1: 31 decode tokens each, 17 x 31 = 527 >= 512
    assert count(cuda, output_len=128) == 5  # 5 x 127 = 635
    assert count(cuda, batch=32, output_len=128) == 1  # T6: one generation is 4064 decode tokens
    assert count(cpu) == 1 and count(cpu, wanted=20, batch=2, output_len=8) == 2  # 14 a generation
    assert count(cuda, wanted=0) == 1 and count(cuda, output_len=1) == 1  # nothing to decode: one


class OldStaticCache:  # transformers 4.38-4.41: everything positional, allocated at once
    def __init__(self, config, max_batch_size, max_cache_len, device, dtype=None) -> None:
        self.got = dict(config=config, max_batch_size=max_batch_size, max_cache_len=max_cache_len, device=device,
                        dtype=dtype)


class MiddleStaticCache:  # transformers 4.42-4.5x: batch_size renamed max_batch_size, both accepted
    def __init__(self, config, batch_size=None, max_cache_len=None, device=None, dtype=None,
                 max_batch_size=None) -> None:
        self.got = dict(config=config, batch_size=batch_size, max_cache_len=max_cache_len, device=device,
                        dtype=dtype, max_batch_size=max_batch_size)


class NewStaticCache:  # transformers 4.56+ / 5.x: config and length, allocated on the first update
    def __init__(self, config, max_cache_len, offloading=False, **kwargs) -> None:
        self.got = dict(config=config, max_cache_len=max_cache_len, kwargs=kwargs)


def test_static_cache_across_constructors():
    model = SimpleNamespace(config="CONFIG")

    def make(cls):
        return WORKLOAD.make_static_cache(SimpleNamespace(StaticCache=cls, __version__="x"), model, 3, 40, "DEV",
                                          "BF16").got

    assert make(OldStaticCache) == dict(config="CONFIG", max_batch_size=3, max_cache_len=40, device="DEV",
                                        dtype="BF16")
    middle = make(MiddleStaticCache)
    assert middle["max_batch_size"] == 3 and middle["batch_size"] is None and middle["max_cache_len"] == 40
    assert make(NewStaticCache) == dict(config="CONFIG", max_cache_len=40, kwargs={})
    with pytest.raises(WORKLOAD.SetupError, match="--decoder generate"):
        WORKLOAD.make_static_cache(SimpleNamespace(__version__="4.30.0"), model, 1, 8, "DEV", "BF16")


# ------------------------------------------------------------------------------- workload, for real (CPU)


@pytest.fixture(scope="module")
def libs():
    pytest.importorskip("torch", reason="running hf_generate.py needs torch (CPU build is enough)")
    pytest.importorskip("transformers", reason="running hf_generate.py needs transformers")


def run_workload(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_")}
    env |= {"HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([PYTHON, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300,
                          cwd=cwd)


def test_graph_decoder_tokens_equal_generate(libs, tmp_path):
    """The static-cache loop decodes exactly what transformers' generate decodes (greedy, float32, CPU)."""
    child = (
        "import importlib.util, sys, argparse, torch\n"
        f"spec = importlib.util.spec_from_file_location('w', {str(SCRIPT)!r})\n"
        "w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w)\n"
        "torch_, tf = w.import_libraries()\n"
        "args = argparse.Namespace(model='llama-tiny', batch=2, input_len=9, output_len=12, compile='off',\n"
        "                          min_decode_tokens=None)\n"
        "device = torch.device('cpu')\n"
        "model, _ = w.load_model(torch, tf, 'llama-tiny', torch.float32, device)\n"
        "bench = w.Bench(torch, tf, model, device, args)\n"
        "dec = w.GraphDecoder(torch, tf, model, device, torch.float32, args, bench.input_ids)\n"
        "dec.generation()\n"
        "ours = dec.tokens.tolist()\n"
        "_, _, _, out = bench.iteration()\n"
        "theirs = out.sequences[:, args.input_len:].tolist()\n"
        "print(dec.path, ours == theirs, len(ours[0]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["eager-static", "True", "12"]


def test_generate_decoder_and_repeated_generations_on_cpu(libs, tmp_path):
    proc = run_workload("--model", "llama-tiny", "--batch", "2", "--input-len", "16", "--output-len", "8",
                        "--warmup", "0", "--iterations", "2", "--decoder", "generate",
                        "--min-decode-tokens", "20", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = parse_log(proc.stdout)
    assert result.missing == [] and result.warnings == []
    extra = result.extra
    assert extra["decoder"] == "generate" and extra["launch_bound"] is True
    assert extra["generations_per_iteration"] == 2 and extra["measured_decode_tokens_per_iteration"] == 28
    assert result.samples["output_tokens"] == [16.0, 16.0]


def test_graph_decoder_on_cpu_falls_back_and_says_so(libs, tmp_path):
    proc = run_workload("--model", "qwen2-tiny", "--batch", "1", "--input-len", "6", "--output-len", "5",
                        "--warmup", "1", "--iterations", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = parse_log(proc.stdout)
    assert result.missing == [] and result.warnings == []
    extra = result.extra
    assert (extra["decoder"], extra["decode_path"], extra["launch_bound"]) == ("graph", "eager-static", True)
    assert extra["compiled"] is False and extra["kv_cache_kind"] == "static"
    # qwen2-tiny: 2 layers, 2 KV heads, head_dim 16, float32, 6 + 5 - 1 cached tokens
    assert extra["kv_cache_bytes"] == 2 * 2 * 1 * 2 * 16 * 10 * 4
    single = parse_log(run_workload("--model", "llama-tiny", "--output-len", "1", "--iterations", "1",
                                    "--warmup", "0", "--input-len", "4", cwd=tmp_path).stdout)
    assert single.extra["decode_path"] == "prefill-only" and "launch_bound" not in single.extra
    assert "decode_tok_s" not in single.extra
