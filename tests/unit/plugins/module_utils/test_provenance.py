"""Run provenance (issue 23): a log's model name is our own argument echoed; only what the engine read from
the checkpoint can confirm the model. modelcard fingerprints model directories written here (config.json and
real safetensors headers, their data regions sparse), judge() compares them with what the parsers found, and
bench_run marks a run that loaded another directory invalid, naming the field and both values."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module
from _shared import DATA, MATMUL
from modeldirs import make_model

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import (
    parse_hf_generate,
    parse_log,
    parse_report_json,
    parse_report_text,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.trtllm_loading import (
    parse_loading_lines,
)

modelcard = host_util("modelcard")
record = host_util("record")
GIB = 1 << 30
PUBLISHED = DATA / "trtllm-bench-published"
# ------------------------------------------------------------------------------------------ modelcard


def test_fingerprint_reads_config_and_safetensors_headers(tmp_path):
    want = make_model(tmp_path, "llama")
    card = modelcard.fingerprint(want["path"])
    assert card["path"] == os.path.realpath(want["path"])
    assert (card["architecture"], card["num_hidden_layers"], card["hidden_size"], card["vocab_size"], card["dtype"]) \
        == ("LlamaForCausalLM", 4, 4096, 32000, "bfloat16")
    assert card["param_count"] == want["params"] and card["tensor_bytes"] == want["bytes"] == 2 * want["params"]
    assert card["weights_source"] == "safetensors headers"
    files = sorted(Path(want["path"]).glob("*.safetensors"))
    assert card["weight_files"] == [f.name for f in files]
    assert card["checkpoint_bytes"] == sum(f.stat().st_size for f in files)
    assert len(card["config_sha256"]) == 64


def test_fingerprint_falls_back_to_the_index_when_headers_are_unreadable(tmp_path):
    want = make_model(tmp_path, "llama", shards=2)
    first = sorted(Path(want["path"]).glob("*.safetensors"))[0]
    first.write_bytes(b"\xff" * 16)  # a header length far beyond any real one
    card = modelcard.fingerprint(want["path"])
    assert card["param_count"] is None and first.name in card["weights_problem"]
    assert card["tensor_bytes"] == want["bytes"] and "index.json" in card["weights_source"]


def test_transformers_dtype_key_and_text_config_are_read(tmp_path):
    path = tmp_path / "vl"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen2VLForConditionalGeneration"],
                                                  "dtype": "float16", "text_config": {"num_hidden_layers": 28,
                                                                                     "hidden_size": 3584}}))
    card = modelcard.fingerprint(str(path))
    assert (card["dtype"], card["num_hidden_layers"], card["hidden_size"]) == ("float16", 28, 3584)
    assert card["param_count"] is None and "no *.safetensors" in card["weights_problem"]


@pytest.mark.parametrize("setup, problem", [
    (lambda p: None, "config.json"),
    (lambda p: (p / "config.json").write_text("{not json"), "not valid JSON"),
    (lambda p: (p / "config.json").write_text("[1]"), "not a JSON object"),
])
def test_a_directory_without_a_usable_config_is_refused_naming_the_file(tmp_path, setup, problem):
    path = tmp_path / "m"
    path.mkdir()
    setup(path)
    with pytest.raises(modelcard.ModelCardError, match=problem):
        modelcard.fingerprint(str(path))
    card, why = modelcard.Fingerprints().get(str(path))
    assert card is None and problem in why


def test_fingerprints_are_read_once_per_directory(tmp_path, monkeypatch):
    want = make_model(tmp_path, "llama")
    calls = []
    real = modelcard.fingerprint
    monkeypatch.setattr(modelcard, "fingerprint", lambda p: calls.append(p) or real(p))
    cards = modelcard.Fingerprints()
    assert cards.get(want["path"])[0] == cards.get(want["path"] + "/")[0]
    assert len(calls) == 1


# ------------------------------------------------------------------------------------------ judging


@pytest.fixture
def card(tmp_path):
    return modelcard.fingerprint(make_model(tmp_path, "llama", layers=8)["path"])


def engine_view(card: dict) -> dict:
    """What a faithful engine's output shows of this card."""
    return {"model_path": card["path"], "weight_files": [os.path.join(card["path"], f) for f in card["weight_files"]],
            "architecture": card["architecture"], "num_hidden_layers": card["num_hidden_layers"],
            "hidden_size": card["hidden_size"], "dtype": "torch.bfloat16", "param_count": card["param_count"],
            "checkpoint_bytes": round(card["checkpoint_bytes"] / GIB, 2) * GIB,
            "weights_bytes": round(card["tensor_bytes"] * 1.03 / GIB, 2) * GIB}


def test_a_faithful_engine_confirms(card):
    verdict = modelcard.judge(card, engine_view(card))
    assert verdict["status"] == "confirmed" and verdict["reason"] is None
    assert all(c["ok"] for c in verdict["checks"].values()) and len(verdict["checks"]) == 9


@pytest.mark.parametrize("field, other", [
    ("model_path", "/var/lib/sparkfleet/models/qwen2.5-7b"),
    ("weight_files", ["/var/lib/sparkfleet/models/qwen2.5-7b/model-00001-of-00004.safetensors"]),
    ("architecture", "Qwen2ForCausalLM"),
    ("num_hidden_layers", 28),
    ("hidden_size", 3584),
    ("dtype", "float16"),
    ("param_count", 7_615_616_512),
    ("checkpoint_bytes", 15.23 * GIB),
    ("weights_bytes", 14.19 * GIB),
])
def test_each_field_that_differs_makes_a_mismatch_naming_it_and_both_values(card, field, other):
    loaded = engine_view(card) | {field: other}
    verdict = modelcard.judge(card, loaded)
    assert verdict["status"] == "mismatch"
    assert list(k for k, c in verdict["checks"].items() if not c["ok"]) == [field]
    check = verdict["checks"][field]
    assert verdict["reason"].startswith(f"{field}: the engine loaded ")
    assert str(check["loaded"]) in verdict["reason"] and str(check["expected"]) in verdict["reason"]


def test_weights_on_the_gpu_are_one_ranks_share(card):
    half = engine_view(card) | {"weights_bytes": card["tensor_bytes"] / 2}
    assert modelcard.judge(card, half)["status"] == "mismatch"
    assert modelcard.judge(card, half, world=2)["status"] == "confirmed"


def test_the_echoed_path_or_a_dtype_alone_never_confirms(card):
    verdict = modelcard.judge(card, {"model_path": card["path"], "dtype": "bfloat16"})
    assert verdict["status"] == "unconfirmed"
    assert "model_path, dtype" in verdict["reason"] and "echoed" in verdict["reason"]


def test_sizes_under_a_gib_do_not_confirm(tmp_path):
    small = modelcard.fingerprint(make_model(tmp_path, "tiny", layers=1, hidden=256, vocab=1000)["path"])
    verdict = modelcard.judge(small, {"checkpoint_bytes": 0.0, "weights_bytes": 0.0})
    assert verdict["status"] == "unconfirmed" and not verdict["checks"]["weights_bytes"]["identifies"]


@pytest.mark.parametrize("expected, loaded, problem, why", [
    (None, {"dtype": "bfloat16"}, None, "the model has no path"),
    (None, {}, "/m: not a directory", "/m: not a directory"),
    ("card", {}, None, "shows nothing of the model"),
    ("card", {"quantization": "NVFP4"}, None, "shows no field the model directory has (quantization)"),
])
def test_nothing_checkable_is_unconfirmed_saying_why(card, expected, loaded, problem, why):
    verdict = modelcard.judge(card if expected == "card" else None, loaded, problem)
    assert verdict["status"] == "unconfirmed" and why in verdict["reason"]


def test_a_workload_that_loads_no_model_is_not_applicable(card):
    assert modelcard.judge(card, {}, applicable=False)["status"] == "not_applicable"


def test_the_record_contract_knows_the_provenance_statuses():
    rec = record.new_record("c", "h", "m", "native", "w", 1, status="ok").to_dict()
    rec["provenance"] = {"status": "confirmed", "reason": None, "expected": {}, "loaded": {}, "checks": {}}
    assert record.validate(rec) == []
    rec["provenance"]["status"] = "probably"
    assert any("provenance.status 'probably'" in p for p in record.validate(rec))


# ------------------------------------------------------------------------------------------ parsers


def test_the_published_report_shows_model_path_dtype_and_quantization_not_the_model_name():
    text = (PUBLISHED / "throughput-1.1.0rc1-header-partial.txt").read_text()
    result = parse_report_text(text)
    assert result.model == "deepseek-ai/DeepSeek-R1"
    assert result.loaded == {"model_path": "/lustre/fsw/coreai_devtech_all/dastokes/DeepSeek-R1-0528-FP4",
                             "dtype": "bfloat16", "kv_cache_dtype": "FP8", "quantization": "NVFP4"}


def test_a_report_without_a_model_path_shows_only_the_dtype():
    result = parse_log((PUBLISHED / "throughput-0.21.0rc0-pytorch-streaming.txt").read_text())
    assert result.loaded == {"dtype": "bfloat16"}
    assert modelcard.judge({"path": "/m", "dtype": "bfloat16"}, result.loaded)["status"] == "unconfirmed"


def test_the_gb10_memory_excerpt_shows_nothing_of_the_model():
    result = parse_log((PUBLISHED / "gb10-1.1.0rc3-memory-excerpt.log").read_text())
    assert result.loaded == {}
    verdict = modelcard.judge({"path": "/m", "dtype": "bfloat16"}, result.loaded)
    assert verdict["status"] == "unconfirmed" and "shows nothing" in verdict["reason"]


LOADING_LOG = """\
[11/20/2025-10:01:02] [TRT-LLM] [I] Use 14.96 GB for model weights.
[11/20/2025-10:01:02] [TRT-LLM] [RANK 0] [I] Prefetching 14.97GB checkpoint files.
[11/20/2025-10:01:02] [TRT-LLM] [I] Prefetching /models/llama/model-00001-of-00002.safetensors to memory...
[11/20/2025-10:01:02] [TRT-LLM] [I] Prefetching /models/llama/model-00002-of-00002.safetensors to memory...
[11/20/2025-10:01:09] [TRT-LLM] [I] Finished prefetching /models/llama/model-00001-of-00002.safetensors.
Loading safetensors weights in parallel: 100%|##########| 2/2 [00:03<00:00,  1.52s/it]
[11/20/2025-10:01:12] [TRT-LLM] [I] Start to load safetensor file /models/llama/model-00001-of-00002.safetensors
[11/20/2025-10:01:12] [TRT-LLM] [I] Number of attention layers: 32
"""


def test_loading_lines_give_sizes_files_and_layers():
    loaded = parse_loading_lines(LOADING_LOG)
    assert loaded == {"weights_bytes": 14.96 * GIB, "checkpoint_bytes": 14.97 * GIB, "num_attention_layers": 32,
                      "weight_files": ["/models/llama/model-00001-of-00002.safetensors",
                                       "/models/llama/model-00002-of-00002.safetensors"]}
    merged = parse_log(LOADING_LOG + (PUBLISHED / "throughput-1.1.0rc1-header-partial.txt").read_text())
    assert merged.loaded["checkpoint_bytes"] == 14.97 * GIB and merged.loaded["quantization"] == "NVFP4"


def test_report_json_engine_section_is_read():
    doc = {"engine": {"model": "m", "model_path": "/models/llama", "engine_dir": "None", "version": "1.1.0",
                      "backend": "Pytorch", "dtype": "bfloat16", "kv_cache_dtype": None, "quantization": None}}
    assert parse_report_json(json.dumps(doc)).loaded == {"model_path": "/models/llama", "dtype": "bfloat16"}


def test_hf_generate_config_lines_are_the_loaded_model():
    block = "\n".join([
        "=== sparkfleet hf-generate ===", "engine: hf-generate", "model: /models/llama", "model_source: path",
        "architecture: LlamaForCausalLM", "parameters: 8030261248", "model_path: /models/llama",
        "config_architecture: LlamaForCausalLM", "num_hidden_layers: 32", "hidden_size: 4096",
        "config_dtype: bfloat16", "status: ok", "=== end sparkfleet hf-generate ==="])
    assert parse_hf_generate(block).loaded == {
        "model_path": "/models/llama", "architecture": "LlamaForCausalLM", "dtype": "bfloat16",
        "num_hidden_layers": 32, "hidden_size": 4096, "param_count": 8030261248}
    preset = block.replace("model_path: /models/llama", "model_path: n/a").replace(
        "config_architecture: LlamaForCausalLM", "config_architecture: n/a")
    assert "model_path" not in parse_hf_generate(preset).loaded


# ------------------------------------------------------------------------- bench_run with the stand-in


@pytest.fixture
def standin_path(monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDINS}:{os.environ['PATH']}")


def _bench(tmp_path: Path, model: dict, env: dict | None = None, engine: str = "trtllm") -> dict:
    workload = {"name": "w", "engine": engine, "preset": "T1", "requests": 2}
    runs = [{"run_id": record.run_id("c1", "h1", model["name"], "bare", "w", 1), "order_index": 0, "model": model,
             "environment": {"name": "bare", "kind": "bare"}, "workload": workload, "iteration": 1, "warmup": False}]
    args = {"runs": runs, "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
            "cooldown": {"enabled": False}, "timeout_s": 60, "telemetry_interval_s": 0.05,
            "trtllm": {"version": "1.2.0rc8"},
            "env": {"SPARKFLEET_FAKE_RUNTIME_S": "0.1", "SPARKFLEET_FAKE_ALLOC_MIB": "1",
                    "SPARKFLEET_FAKE_VERSION": "1.2.0rc8", **(env or {})}}
    out = run_module(load_module("bench_run"), args)
    assert not out.get("failed"), out
    rec = json.loads(Path(out["runs"][0]["record_path"]).read_text())
    assert record.validate(rec) == []
    return rec


def test_a_run_of_the_requested_directory_is_confirmed(tmp_path, standin_path):
    want = make_model(tmp_path / "models", "llama-8b", layers=8)
    rec = _bench(tmp_path, {"name": "llama", "hf_id": "meta-llama/Llama-3.1-8B", "path": want["path"]})
    prov = rec["provenance"]
    assert rec["status"] == "ok" and rec["reason"] is None, rec["reason"]
    assert prov["status"] == "confirmed"
    assert prov["checks"]["checkpoint_bytes"]["ok"] and prov["checks"]["weights_bytes"]["identifies"]
    assert prov["expected"]["param_count"] == want["params"]


def test_a_run_that_loaded_another_directory_is_invalid_naming_the_fields(tmp_path, standin_path):
    want = make_model(tmp_path / "models", "llama-8b", layers=8)
    other = make_model(tmp_path / "models", "qwen-7b", layers=1, hidden=3584, vocab=152064)
    rec = _bench(tmp_path, {"name": "llama", "hf_id": "meta-llama/Llama-3.1-8B", "path": want["path"]},
                 env={"SPARKFLEET_FAKE_LOADED_MODEL_DIR": other["path"]})
    assert rec["status"] == "invalid" and rec["provenance"]["status"] == "mismatch"
    # the log's Model: line still says what we asked for: the echo is no evidence
    assert rec["model_loaded"] == "meta-llama/Llama-3.1-8B"
    assert rec["reason"].startswith(f"provenance: model_path: the engine loaded {other['path']}, the model "
                                    f"directory has {want['path']}")
    failed = [name for name, check in rec["provenance"]["checks"].items() if not check["ok"]]
    assert sorted(failed) == ["checkpoint_bytes", "model_path", "weight_files", "weights_bytes"]
    assert "checkpoint_bytes: the engine loaded 2.", ", the model directory has 3.24 GiB" in rec["reason"]


def test_a_log_showing_only_the_path_and_dtype_stays_ok_but_unconfirmed(tmp_path, standin_path):
    want = make_model(tmp_path / "models", "llama-8b", layers=8)
    for weights in Path(want["path"]).glob("*.safetensors"):  # nothing to load: no loading lines
        weights.unlink()
    rec = _bench(tmp_path, {"name": "llama", "hf_id": "meta-llama/Llama-3.1-8B", "path": want["path"]})
    assert rec["status"] == "ok" and rec["provenance"]["status"] == "unconfirmed"
    assert rec["reason"].startswith("provenance unconfirmed: only model_path, dtype matched")


def test_matmul_loads_no_model(tmp_path):
    workloads = tmp_path / "results" / ".sparkfleet" / "workloads"  # where the matrix role copies them
    workloads.mkdir(parents=True)
    for name in ("matmul.py", "sparkfleet_probe.py"):
        (workloads / name).write_text((MATMUL.parent / name).read_text())
    rec = _bench(tmp_path, {"name": "matmul-fp32"}, engine="matmul")
    assert rec["status"] == "ok" and rec["provenance"]["status"] == "not_applicable", rec["reason"]
    assert rec["reason"] is None


# ------------------------------------------------------------------------------------------ the report


def test_the_report_names_unconfirmed_cells_in_one_warning_line(tmp_path):
    from sparkfleet.load import load_runs
    from sparkfleet.report.findings import unconfirmed_models

    def rec(model, env, i, engine="trtllm", provenance=None, status="ok"):
        data = record.new_record("c", "h", model, env, "T1", i, status=status, engine=engine,
                                 reason=None if status == "ok" else "x").to_dict()
        data["provenance"] = provenance
        (tmp_path / "h" / "runs" / data["run_id"]).mkdir(parents=True)
        (tmp_path / "h" / "runs" / data["run_id"] / "record.json").write_text(json.dumps(data))

    confirmed = {"status": "confirmed", "reason": None}
    unconfirmed = {"status": "unconfirmed", "reason": "the engine's output shows nothing of the model it loaded"}
    for written in ([
        rec("llama", "native", 1, provenance=confirmed), rec("llama", "native", 2, provenance=confirmed),
        rec("qwen", "native", 1, provenance=unconfirmed), rec("qwen", "native", 2, provenance=confirmed),
        rec("mistral", "container", 1),  # written before the check: no provenance
        rec("gemma", "native", 1, provenance={"status": "mismatch", "reason": "x"}, status="invalid"),
        rec("matmul-fp32", "native", 1, engine="matmul"),  # loads no model
        rec("matmul-fp32", "native", 2, engine="matmul", provenance={"status": "not_applicable", "reason": "-"}),
    ]):
        assert written is None
    runs = load_runs(tmp_path).runs
    (finding,) = unconfirmed_models(runs)
    assert finding.kind == "model-unconfirmed"
    assert finding.message.startswith("provenance unconfirmed: 2 ok run(s) in 2 cell(s) (h / mistral / container / "
                                      "T1; h / qwen / native / T1)")
    assert finding.details == ("h / mistral / container / T1: 1 run(s); the record has no provenance check",
                               "h / qwen / native / T1: 1 run(s); the engine's output shows nothing of the model "
                               "it loaded")
    assert unconfirmed_models(runs[runs["model"] == "llama"]) == []


def test_the_loader_reads_the_verdict_not_the_cards(tmp_path):
    from sparkfleet.load import load_runs

    for i, prov in enumerate(({"status": "confirmed", "reason": None, "expected": {"path": "/m"}}, None), start=1):
        data = record.new_record("c", "h", "m", "native", "T1", i, status="ok").to_dict()
        data["provenance"] = prov
        run_dir = tmp_path / "c" / "h" / "runs" / data["run_id"]
        run_dir.mkdir(parents=True)
        (run_dir / "record.json").write_text(json.dumps(data))
    runs = load_runs(tmp_path, workers=1).runs.sort_values("iteration")
    assert runs["provenance_status"].tolist()[0] == "confirmed" and runs["provenance_status"].isna().tolist()[1]
    assert not [c for c in runs.columns if c.startswith("provenance_") and c not in ("provenance_status",
                                                                                     "provenance_reason")]


# ------------------------------------------------------------------------------------------ the stand-in


def _standin(tmp_path: Path, model_path: str, env: dict | None = None) -> str:
    import subprocess

    from _shared import STANDIN_TRTLLM

    dataset = tmp_path / "dataset.jsonl"
    dataset.write_text("".join(json.dumps({"task_id": i, "input_ids": [1] * 16, "output_tokens": 8}) + "\n"
                               for i in range(4)))
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_")}
    full_env |= {"SPARKFLEET_FAKE_RUNTIME_S": "0.01", "SPARKFLEET_FAKE_ALLOC_MIB": "1", **(env or {})}
    proc = subprocess.run([str(STANDIN_TRTLLM), "--model", "meta-llama/Llama-3.1-8B", "--model_path", model_path,
                           "throughput", "--dataset", str(dataset), "--backend", "pytorch", "--num_requests", "4",
                           "--report_json", str(tmp_path / "report.json")],
                          capture_output=True, text=True, env=full_env, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_the_standin_prints_what_it_read_from_the_checkpoint(tmp_path):
    want = make_model(tmp_path / "models", "llama-8b", layers=8, dtype="float16")
    log = _standin(tmp_path, want["path"])
    files = sorted(str(p) for p in Path(want["path"]).glob("*.safetensors"))
    assert f"Use {want['bytes'] / GIB:.2f} GB for model weights." in log
    assert all(f"Prefetching {f} to memory..." in log and f"Start to load safetensor file {f}" in log for f in files)
    result = parse_log(log, (tmp_path / "report.json").read_text())
    assert result.loaded["model_path"] == want["path"] and result.loaded["dtype"] == "float16"
    assert result.loaded["weight_files"] == files
    assert modelcard.judge(modelcard.fingerprint(want["path"]), result.loaded)["status"] == "confirmed"


def test_the_standin_hook_loads_another_directory_under_our_model_name(tmp_path):
    want = make_model(tmp_path / "models", "llama-8b", layers=8)
    other = make_model(tmp_path / "models", "qwen-7b", layers=1, hidden=3584, vocab=152064, dtype="float16")
    log = _standin(tmp_path, want["path"], {"SPARKFLEET_FAKE_LOADED_MODEL_DIR": other["path"]})
    result = parse_log(log)
    assert result.model == "meta-llama/Llama-3.1-8B"  # the echo
    assert result.loaded["model_path"] == other["path"] and result.loaded["dtype"] == "float16"
    verdict = modelcard.judge(modelcard.fingerprint(want["path"]), result.loaded)
    assert verdict["status"] == "mismatch" and not verdict["checks"]["dtype"]["ok"]


def test_a_float32_checkpoint_run_in_16_bits_is_the_same_model(tmp_path):
    card = modelcard.fingerprint(make_model(tmp_path, "fp32", layers=8, dtype="float32")["path"])
    loaded = engine_view(card) | {"dtype": "bfloat16", "weights_bytes": card["tensor_bytes"] / 2}
    verdict = modelcard.judge(card, loaded)
    assert verdict["status"] == "confirmed" and verdict["checks"]["dtype"]["ok"]
    assert "weights_bytes" not in modelcard.judge(card, {k: v for k, v in loaded.items() if k != "dtype"})["checks"]
    assert modelcard.judge(card, loaded | {"dtype": "float8"})["status"] == "mismatch"
