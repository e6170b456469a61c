"""The hf-generate engine: its standalone workload (run on the CPU with tiny models) and its parser.

Tests that run the workload need torch and transformers and skip without them; the parser, the
cache-size walker and the missing-library path are tested everywhere.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _shared import OWN_FIXTURES, PYTHON, REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import METRICS
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import (
    INTERNAL_ERROR,
    ParseResult,
    detect_kind,
    parse_hf_generate,
    parse_log,
)

SCRIPT = REPO / "roles" / "matrix" / "files" / "hf_generate.py"
FIXTURE = OWN_FIXTURES / "hf_generate" / "cpu-llama-tiny-transformers-5.23.0.log"
FIXTURE_TEXT = FIXTURE.read_text()
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PERCENTILES = ("latency_ms_p50", "latency_ms_p90", "latency_ms_p95", "latency_ms_p99")


def load_script():
    """The workload as a module (it is standalone: not importable as part of sparkfleet)."""
    spec = importlib.util.spec_from_file_location("hf_generate_workload", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


WORKLOAD = load_script()


@pytest.fixture(scope="module")
def libs():
    torch = pytest.importorskip("torch", reason="running hf_generate.py needs torch (CPU build is enough)")
    transformers = pytest.importorskip("transformers", reason="running hf_generate.py needs transformers")
    return torch, transformers


def run_workload(*args: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_")}
    full_env |= {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"} | (env or {})
    return subprocess.run(
        [PYTHON, str(SCRIPT), *args], capture_output=True, text=True, env=full_env, timeout=300, cwd=cwd
    )


def iteration_tokens(stdout: str) -> list[int]:
    return [int(n) for n in re.findall(r"^iteration \d+/\d+: .* output_tokens (\d+)$", stdout, re.M)]


def kv_bytes(layers: int, batch: int, kv_heads: int, head_dim: int, tokens: int, element: int) -> int:
    return 2 * layers * batch * kv_heads * head_dim * tokens * element


def assert_consistent(result: ParseResult, batch: int, input_len: int, output_len: int) -> None:
    m = result.metrics
    lat = result.extra["iteration_latency_ms"]
    assert m["latency_ms_avg"] == pytest.approx(sum(lat) / len(lat), rel=1e-6)
    values = [m[name] for name in PERCENTILES]
    assert values == sorted(values)
    assert min(lat) - 1e-6 <= m["latency_ms_p50"] and m["latency_ms_p99"] <= max(lat) + 1e-6
    seconds = m["latency_ms_avg"] / 1000
    assert m["output_tok_s"] == pytest.approx(batch * output_len / seconds, rel=1e-5)
    assert m["total_tok_s"] == pytest.approx(batch * (input_len + output_len) / seconds, rel=1e-5)
    assert m["req_s"] == pytest.approx(batch / seconds, rel=1e-5)
    assert m["ttft_ms"] == pytest.approx(sum(result.extra["iteration_ttft_ms"]) / len(lat), rel=1e-5)
    if output_len > 1:
        assert m["tpot_ms"] == pytest.approx((m["latency_ms_avg"] - m["ttft_ms"]) / (output_len - 1), rel=1e-5)
    assert m["peak_memory_gib"] > 0 and m["device_total_gib"] > m["peak_memory_gib"]
    assert set(result.sources.values()) == {"hf-generate output"}


# -------------------------------------------------------------------------------- the workload, for real


def test_llama_tiny_preset_on_cpu(libs, tmp_path):
    _torch, transformers = libs
    proc = run_workload(
        "--model", "llama-tiny", "--batch", "2", "--input-len", "16", "--output-len", "8",
        "--warmup", "1", "--iterations", "3", "--device", "cpu",
        env={"SPARKFLEET_ENV_PROBE": "native"}, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = parse_log(proc.stdout)
    assert result.kind == "hf-generate" and result.engine == "hf-generate"
    assert result.model == "llama-tiny"
    assert result.engine_version == transformers.__version__
    assert result.missing == [] and result.warnings == []
    extra = result.extra
    assert (extra["batch"], extra["input_len"], extra["output_len"]) == (2, 16, 8)
    assert (extra["warmup"], extra["iterations"]) == (1, 3)
    assert extra["dtype"] == "float32" and extra["model_source"] == "preset"
    assert extra["architecture"] == "LlamaForCausalLM"
    assert extra["device"].startswith("cpu")
    assert extra["peak_memory_source"].startswith("ru_maxrss")
    # exactly output_len new tokens for every sequence of the batch, in every measured iteration
    assert extra["output_tokens_per_iteration"] == 16
    assert iteration_tokens(proc.stdout) == [16, 16, 16]
    assert len(extra["iteration_latency_ms"]) == 3
    assert_consistent(result, batch=2, input_len=16, output_len=8)
    # llama-tiny: 2 layers, 2 KV heads, head_dim 64/4 = 16, float32. The cache holds input + output - 1
    # tokens: the last generated token is sampled from the logits and never fed back through the model.
    expected = kv_bytes(layers=2, batch=2, kv_heads=2, head_dim=16, tokens=16 + 8 - 1, element=4)
    assert expected == 23552
    assert extra["kv_cache_bytes"] == expected
    assert extra["kv_cache_tokens"] == 23 and extra["kv_cache_tensors"] == 4
    assert result.metrics["kv_cache_gib"] == pytest.approx(expected / 2**30, abs=1e-9)
    assert result.probe["env_probe"] == "native"
    assert result.probe["root_dev_ino"] == f"{os.stat('/').st_dev}:{os.stat('/').st_ino}"


def test_local_path_model_loads_without_network(libs, tmp_path):
    model_dir = tmp_path / "tiny-llama"
    # Built in a child process: torch's compiler and ansible-core's patches (loaded in this worker by the
    # module tests) do not mix in one interpreter.
    made = subprocess.run([sys.executable, "-c", (
        "import sys, torch, transformers as t\n"
        "c = t.LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=3,"
        " num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128)\n"
        "torch.manual_seed(1)\n"
        "m = t.AutoModelForCausalLM.from_config(c)\n"
        "m.save_pretrained(sys.argv[1])\n"
        "print(sum(p.numel() for p in m.parameters()))\n"), str(model_dir)],
        capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    parameters = int(made.stdout.split()[-1])
    assert (model_dir / "config.json").is_file()
    proc = run_workload(
        "--model", str(model_dir), "--batch", "1", "--input-len", "5", "--output-len", "3",
        "--warmup", "0", "--iterations", "2", cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = parse_log(proc.stdout)
    assert result.kind == "hf-generate" and result.model == str(model_dir)
    assert result.missing == [] and result.warnings == []
    assert result.extra["model_source"] == "path"
    assert result.extra["parameters"] == parameters
    # what it built, for the provenance check: the directory's own config, and the parameters it counted
    assert result.loaded == {"model_path": os.path.realpath(model_dir), "architecture": "LlamaForCausalLM",
                             "dtype": "float32", "num_hidden_layers": 3, "hidden_size": 32, "param_count": parameters}
    assert iteration_tokens(proc.stdout) == [3, 3]
    assert_consistent(result, batch=1, input_len=5, output_len=3)
    # 3 layers, 1 KV head, head_dim 32/4 = 8, float32, 5 + 3 - 1 cached tokens
    assert result.extra["kv_cache_bytes"] == kv_bytes(3, 1, 1, 8, 7, 4)


def test_qwen2_preset_bfloat16_single_token(libs, tmp_path):
    """One new token: no TPOT (reported n/a, so absent), the cache holds the prompt only, 2-byte elements."""
    proc = run_workload(
        "--model", "qwen2-tiny", "--batch", "3", "--input-len", "8", "--output-len", "1",
        "--warmup", "0", "--iterations", "2", "--dtype", "bfloat16", cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = parse_log(proc.stdout)
    assert result.missing == [] and result.warnings == []
    assert result.extra["dtype"] == "bfloat16" and result.extra["architecture"] == "Qwen2ForCausalLM"
    assert "tpot_ms" not in result.metrics
    assert iteration_tokens(proc.stdout) == [3, 3]
    assert result.extra["kv_cache_bytes"] == kv_bytes(2, 3, 2, 16, 8, 2)


def test_unknown_model_is_refused_without_download(libs, tmp_path):
    proc = run_workload("--model", "meta-llama/Llama-3.1-8B", "--iterations", "1", cwd=tmp_path)
    assert proc.returncode == 3
    assert "nothing is downloaded" in proc.stderr and "llama-tiny" in proc.stderr
    assert "=== sparkfleet hf-generate ===" not in proc.stdout
    assert parse_log(proc.stdout).kind == "unknown"


def test_cuda_asked_for_on_a_cpu_only_host(libs, tmp_path):
    torch, _ = libs
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    proc = run_workload("--model", "llama-tiny", "--device", "cuda", cwd=tmp_path)
    assert proc.returncode == 3 and "torch.cuda.is_available() is False" in proc.stderr


# ------------------------------------------------------------------------ the workload, no torch needed


@pytest.mark.parametrize(("missing", "message"), [("torch", "PyTorch is not importable"),
                                                  ("transformers", "transformers is not importable")])
def test_missing_library_is_a_clear_error(tmp_path, missing, message):
    shadow = tmp_path / "shadow" / missing
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(f"raise ImportError('no {missing} in this test')\n")
    if missing == "transformers" and importlib.util.find_spec("torch") is None:
        (tmp_path / "shadow" / "torch").mkdir()
        (tmp_path / "shadow" / "torch" / "__init__.py").write_text("__version__ = '0'\n")
    proc = run_workload("--model", "llama-tiny", env={"PYTHONPATH": str(tmp_path / "shadow")}, cwd=tmp_path)
    assert proc.returncode == 3
    assert f"hf_generate: error: {message}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "[sparkfleet-probe] hostname:" in proc.stdout


def test_bad_arguments_are_refused(tmp_path):
    for args in (["--model", "x", "--batch", "0"], ["--model", "x", "--warmup", "-1"], ["--batch", "1"]):
        proc = run_workload(*args, cwd=tmp_path)
        assert proc.returncode == 2, args


class FakeTensor:
    def __init__(self, *shape: int, element: int = 2) -> None:
        self.shape, self._element = shape, element

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return self._element


class Layer:
    def __init__(self, keys, values) -> None:
        self.keys, self.values = keys, values


class LayeredCache:  # transformers 5.x DynamicCache
    def __init__(self, pairs) -> None:
        self.layers = [Layer(k, v) for k, v in pairs]


class ListCache:  # transformers 4.3x-4.5x DynamicCache
    def __init__(self, pairs) -> None:
        self.key_cache = [k for k, _ in pairs]
        self.value_cache = [v for _, v in pairs]


class EncoderDecoderCache:
    def __init__(self, self_cache, cross_cache) -> None:
        self.self_attention_cache, self.cross_attention_cache = self_cache, cross_cache


def test_kv_cache_size_across_cache_formats():
    pairs = [(FakeTensor(2, 4, 10, 8), FakeTensor(2, 4, 10, 8)) for _ in range(3)]
    expected = kv_bytes(3, 2, 4, 8, 10, 2)
    for cache in (tuple(pairs), [list(p) for p in pairs], LayeredCache(pairs), ListCache(pairs)):
        assert WORKLOAD.kv_cache_size(cache) == (expected, 10, 6)
    both = EncoderDecoderCache(LayeredCache(pairs), ListCache([(FakeTensor(2, 4, 5, 8), FakeTensor(2, 4, 5, 8))]))
    assert WORKLOAD.kv_cache_size(both)[0] == expected + kv_bytes(1, 2, 4, 8, 5, 2)
    shared = FakeTensor(1, 1, 4, 4)
    assert WORKLOAD.kv_cache_size(((shared, shared),))[0] == 16 * 2  # one tensor counted once
    assert WORKLOAD.kv_cache_size(None) == (0, None, 0)
    assert WORKLOAD.kv_cache_size(LayeredCache([(None, None)])) == (0, None, 0)


def test_percentile_is_linear_interpolation():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert [WORKLOAD.percentile(values, q) for q in (0, 50, 90, 95, 99, 100)] == pytest.approx(
        [1.0, 3.0, 4.6, 4.8, 4.96, 5.0]
    )
    assert WORKLOAD.percentile([7.0], 99) == 7.0


def test_presets_are_buildable_configs():
    for name, (class_name, kwargs) in WORKLOAD.PRESETS.items():
        assert class_name in ("LlamaConfig", "Qwen2Config"), name
        assert kwargs["hidden_size"] % kwargs["num_attention_heads"] == 0
        assert kwargs["num_attention_heads"] % kwargs["num_key_value_heads"] == 0
        assert kwargs["max_position_embeddings"] >= 2048 + 512, name  # T3 fits


# ---------------------------------------------------------------------------------------------- parser


def test_captured_fixture_parses_exactly():
    result = parse_log(FIXTURE_TEXT)
    assert detect_kind(FIXTURE_TEXT) == "hf-generate"
    assert result.kind == "hf-generate" and result.engine == "hf-generate"
    assert result.model == "llama-tiny" and result.engine_version == "5.23.0"
    assert result.missing == [] and result.warnings == []
    assert result.extra["kv_cache_bytes"] == 23552 and result.extra["torch_version"] == "2.13.0+cpu"
    assert result.metrics["latency_ms_p99"] == pytest.approx(float(re.search(
        r"^latency_ms_p99: (\S+)$", FIXTURE_TEXT, re.M).group(1)))
    assert set(result.metrics) == {
        "output_tok_s", "total_tok_s", "req_s", "latency_ms_avg", "latency_ms_p50", "latency_ms_p90",
        "latency_ms_p95", "latency_ms_p99", "ttft_ms", "tpot_ms", "peak_memory_gib", "kv_cache_gib",
        "device_total_gib",
    }
    assert_consistent(result, batch=2, input_len=16, output_len=8)
    assert result.probe["env_probe"] == "native"


def test_parser_flags_what_looks_wrong():
    text = FIXTURE_TEXT.replace("output_tokens 16\n", "output_tokens 15\n", 1)
    assert any("expected 16" in w for w in parse_hf_generate(text).warnings)
    p50 = re.search(r"^latency_ms_p50: (\S+)$", FIXTURE_TEXT, re.M).group(0)
    assert any("not ordered" in w for w in parse_hf_generate(FIXTURE_TEXT.replace(p50, "latency_ms_p50: 1e9")).warnings)
    cut = FIXTURE_TEXT.split("output_tok_s:")[0]
    truncated = parse_log(cut)
    assert truncated.kind == "hf-generate"
    assert any("truncated" in w for w in truncated.warnings)
    assert "output_tok_s" in truncated.missing and "kv_cache_gib" in truncated.missing
    twice = parse_log(FIXTURE_TEXT + FIXTURE_TEXT.replace("model: llama-tiny", "model: second"))
    assert twice.model == "second" and any("2 hf-generate blocks" in w for w in twice.warnings)
    not_ours = parse_hf_generate("Throughput: 1.0 requests/s, 2.0 tokens/s")
    assert not_ours.kind == "unknown" and "output_tok_s" in not_ours.missing


def check(result: ParseResult) -> None:
    assert isinstance(result, ParseResult)
    assert not [w for w in result.warnings if w.startswith(INTERNAL_ERROR)], result.warnings
    assert set(result.metrics) <= set(METRICS)
    assert set(result.sources) == set(result.metrics)
    assert all(isinstance(v, float) and math.isfinite(v) for v in result.metrics.values())
    result.to_dict()


def test_every_truncation_of_the_fixture():
    for end in range(0, len(FIXTURE_TEXT) + 1, 7):
        check(parse_hf_generate(FIXTURE_TEXT[:end]))
        check(parse_log(FIXTURE_TEXT[:end]))


FIXTURE_LINES = FIXTURE_TEXT.splitlines()


@settings(FUZZ, max_examples=300)
@given(st.lists(st.sampled_from(FIXTURE_LINES) | st.text(max_size=60), max_size=60))
def test_shuffled_lines_and_garbage_never_raise(lines):
    text = "\n".join(lines)
    check(parse_hf_generate(text))
    check(parse_log(text))


@settings(FUZZ, max_examples=300)
@given(st.data())
def test_mutated_fixture_never_raises(data):
    text = FIXTURE_TEXT
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["cut", "insert", "delete", "number"]))
        if op == "cut":
            text = text[:at]
        elif op == "insert":
            text = text[:at] + data.draw(st.text(max_size=20)) + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + data.draw(st.integers(0, 30)):]
        else:
            junk = data.draw(st.sampled_from(["nan", "inf", "-1e999", "1e308", "", "1.2.3", "0", "-0", "1e-320"]))
            text = re.sub(r"(?m)^(\w+: )\S+$", lambda m, j=junk: m.group(1) + j, text, count=data.draw(
                st.integers(1, 40)))
    check(parse_hf_generate(text))
    check(parse_log(text))


@settings(FUZZ, max_examples=200)
@given(st.binary(max_size=2000))
def test_garbage_bytes_inside_the_block(data):
    text = "=== sparkfleet hf-generate ===\n" + data.decode("utf-8", "replace")
    check(parse_hf_generate(text))
    check(parse_log(data))
    check(parse_log(text.encode("utf-8", "surrogatepass")))


def test_fixture_readme_names_the_fixture():
    assert FIXTURE.name in (FIXTURE.parent / "README.md").read_text()
    assert Path(SCRIPT).is_file()
