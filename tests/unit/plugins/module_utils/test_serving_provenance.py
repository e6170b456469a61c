"""What a serving run served (issue 35): each engine's version from its own version command (as the stand-ins and
the real CLIs print it), the GGUF's card from the tests' tiny-model writer, the weights checked against what the
engine showed and against the campaign's model (a changed file, another hf_id named as a mismatch), and a bare
run's record naming no image."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module

prov = host_util("serving_provenance")
serving = host_util("serving")
modelcard = host_util("modelcard")
record_mod = host_util("record")
run_record = host_util("run_record")

LLAMA_NEW = "version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
LLAMA_OLD = "version: 4589 (1a2b3c4d)\nbuilt with cc (Ubuntu 13.3.0) 13.3.0 for aarch64-linux-gnu\n"


# ----------------------------------------------------------------------------------------- versions

@pytest.mark.parametrize(("text", "version", "build", "commit"), [
    # ggml-org/llama.cpp common/build-info.cpp.in llama_print_build_info, as the llama-cpp-python 0.3.36 vendored
    # build prints it (measured on the tests' cached build)
    (LLAMA_NEW, "0.5.0-dev (build 1, commit 0c1e570)", 1, "0c1e570"),
    # common/arg.cpp's --version before build-info printed a version string: "version: %d (%s)"
    (LLAMA_OLD, "4589 (1a2b3c4d)", 4589, "1a2b3c4d"),
    ("$ /usr/bin/env -C /run PATH=/usr/bin llama-server --version\n" + LLAMA_NEW, "0.5.0-dev (build 1, commit "
     "0c1e570)", 1, "0c1e570"),  # run_process's command line first
])
def test_llama_server_version(text, version, build, commit):
    parsed = prov.parse_version("llama.cpp", text)
    assert (parsed["version"], parsed["build"], parsed["commit"]) == (version, build, commit)
    assert parsed["built_with"].endswith(("Linux x86_64", "aarch64-linux-gnu"))


def test_a_llama_server_that_prints_no_version_is_named():
    parsed = prov.parse_version("llama.cpp", "error: unknown argument: --version\n")
    assert parsed["version"] is None and "unknown argument" in parsed["error"]


def test_the_cached_llama_server_answers_as_parsed():
    """The real llama-server the serving tests build (tests/fleet/llamacpp.py), when this machine has one."""
    sys.path.insert(0, str(STANDINS.parent))
    from llamacpp import _cached, cache_path

    binary = _cached(cache_path())
    if binary is None:
        pytest.skip("no cached llama-server build here")
    proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == ""  # on stderr, as build-info.cpp.in prints it
    parsed = prov.parse_version("llama.cpp", proc.stderr)
    assert parsed["version"] and parsed["commit"] and "error" not in parsed


def _env(**extra):
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in extra.pop("path", [])), **extra}


def test_the_vllm_standin_answers_version_as_vllm_does():
    """vllm/entrypoints/cli/main.py: argparse's version action prints importlib.metadata.version("vllm") and exits 0
    (the real CLI may log INFO lines first: the last version-shaped line is taken)."""
    argv, label = serving.version_command({"engine": "vllm"})
    assert argv == ["vllm", "--version"] and label == "vllm --version"
    proc = subprocess.run([sys.executable, str(STANDINS / "vllm"), "--version"], capture_output=True, text=True,
                          timeout=60, env=_env(SPARKFLEET_FAKE_VERSION="0.11.2"))
    assert proc.returncode == 0 and proc.stdout == "0.11.2\n"
    noisy = "INFO 11-27 10:00:00 [__init__.py:216] Automatically detected platform cuda.\n" + proc.stdout
    assert prov.parse_version("vllm", noisy) == {"version": "0.11.2"}
    assert prov.parse_version("vllm", "Traceback (most recent call last):\nImportError: x\n")["version"] is None


def test_the_sglang_standin_answers_as_the_package_does():
    """python3 -c PY_VERSION sglang sglang: no dist-info beside the stand-in package, so its version.py
    (python/sglang/version.py), read as text, never imported."""
    argv, _ = serving.version_command({"engine": "sglang"})
    proc = subprocess.run([sys.executable] + argv[1:], capture_output=True, text=True, timeout=60,
                          env=_env(path=[STANDINS]))
    parsed = prov.parse_version("sglang", proc.stdout)
    assert proc.returncode == 0 and parsed["version"] == "0.5.4"
    assert parsed["where"] == str(STANDINS / "sglang" / "version.py")


def test_tensorrt_llm_from_its_metadata_else_its_version_py(tmp_path):
    """The trtllm-serve version: the tensorrt_llm distribution's metadata (pip's dist-info), else the package's
    version.py as NVIDIA's images lay it out (tensorrt_llm/version.py: __version__ = "1.2.1")."""
    argv, _ = serving.version_command({"engine": "trtllm-serve"})
    site = tmp_path / "site"
    (site / "tensorrt_llm").mkdir(parents=True)
    (site / "tensorrt_llm" / "__init__.py").write_text("raise SystemExit('imported: would start CUDA')\n")
    (site / "tensorrt_llm" / "version.py").write_text('__version__ = "1.2.1"\n')

    def run():
        return subprocess.run([sys.executable] + argv[1:], capture_output=True, text=True, timeout=60,
                              env=_env(path=[site]))

    parsed = prov.parse_version("trtllm-serve", run().stdout)
    assert parsed["version"] == "1.2.1" and parsed["where"].endswith("tensorrt_llm/version.py")
    meta = site / "tensorrt_llm-1.3.0rc29.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: 1.3.0rc29\n")
    parsed = prov.parse_version("trtllm-serve", run().stdout)
    assert parsed["version"] == "1.3.0rc29" and "dist-info metadata" in parsed["where"]


def test_no_package_no_version_and_the_reason():
    argv, _ = serving.version_command({"engine": "sglang"})
    proc = subprocess.run([sys.executable] + argv[1:], capture_output=True, text=True, timeout=60,
                          env=_env(path=[]))
    assert proc.returncode != 0
    parsed = prov.parse_version("sglang", proc.stdout + proc.stderr)
    assert parsed["version"] is None and "no sglang package" in parsed["error"]
    assert serving.version_command({"engine": "ollama", "engine_spec": {}}) == (
        None, "engine ollama declares no version command sparkfleet knows")


# --------------------------------------------------------------------------------------------- GGUF

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tinymodel import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _expected_counts(matrix_dtype: str) -> tuple[int, int]:
    """(parameters, tensor bytes) of the tiny model by its shape (tinymodel.random_weights)."""
    from tinymodel import SHAPE

    d, ff, vocab, layers = SHAPE["n_embd"], SHAPE["n_ff"], SHAPE["vocab"], SHAPE["n_layer"]
    matrices = 2 * vocab * d + layers * (4 * d * d + 3 * d * ff)
    norms = d + layers * 2 * d
    return matrices + norms, (2 if matrix_dtype == "f16" else 4) * matrices + 4 * norms


@pytest.mark.parametrize("matrix_dtype", ["f32", "f16"])
def test_the_gguf_card_of_the_tiny_model(tmp_path, matrix_dtype):
    pytest.importorskip("gguf")
    from tinymodel import make_tiny_model

    made = make_tiny_model(tmp_path, matrix_dtype=matrix_dtype)
    card = modelcard.gguf_card(str(made["gguf"]))
    params, nbytes = _expected_counts(matrix_dtype)
    data = made["gguf"].read_bytes()
    assert card["param_count"] == params and card["tensor_bytes"] == nbytes and card["tensor_count"] == 21
    assert card["file_bytes"] == card["checkpoint_bytes"] == len(data)
    assert card["head_sha256"] == hashlib.sha256(data[: 1 << 20]).hexdigest()
    assert card["tail_sha256"] == hashlib.sha256(data[-(1 << 20):]).hexdigest()
    assert (card["format"], card["architecture"], card["name"], card["num_hidden_layers"], card["hidden_size"],
            card["vocab_size"], card["context_length"]) == ("gguf", "llama", "tiny", 2, 64, 1024, 8192)
    assert (card["file_type"], card["dtype"], card["quantization"]) == (
        ("F16", "float16", None) if matrix_dtype == "f16" else ("F32", "float32", None))
    assert card["weights_source"] == "GGUF tensor infos" and card["weights_problem"] is None
    assert modelcard.weights_card(str(made["gguf"])) == (card, None)
    assert modelcard.weights_card(None)[0] is None
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00")
    assert modelcard.weights_card(str(bad)) == (None, f"{bad}: the file ends inside its metadata (at byte 4): not a "
                                                      "whole GGUF")


def test_the_ggml_type_table_is_gguf_pys():
    gguf = pytest.importorskip("gguf")
    theirs = {t.value: (t.name, block, size) for t, (block, size) in gguf.GGML_QUANT_SIZES.items()}
    assert {k: v for k, v in modelcard.GGML_TYPES.items() if k in theirs} == theirs
    files = {f.value: f.name.split("_", 1)[1] for f in gguf.LlamaFileType if f.name != "GUESSED"}
    assert {k: v for k, v in modelcard.FILE_TYPES.items() if k in files} == files


def _gguf_with_source(path: Path, repos: dict) -> Path:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), "qwen3")
    for key, value in repos.items():
        if isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_string(key, value)
    w.add_uint32("general.file_type", 15)  # Q4_K_M, whatever the tensors are
    w.add_tensor("blk.0.ffn_up_exps.weight", np.zeros((4, 8, 16), dtype=np.float16))  # 4 routed experts
    w.add_tensor("blk.0.ffn_up_shexp.weight", np.zeros((8, 16), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_names_its_source_and_experts(tmp_path):
    path = _gguf_with_source(tmp_path / "q.gguf", {"general.base_model.count": 1,
                                                   "general.base_model.0.repo_url": "https://huggingface.co/Qwen/Qwen3-8B",
                                                   "general.source.huggingface.repository": "unsloth/Qwen3-8B-GGUF"})
    card = modelcard.gguf_card(str(path))
    assert card["source_repos"] == ["unsloth/Qwen3-8B-GGUF", "Qwen/Qwen3-8B"]
    assert (card["file_type"], card["dtype"], card["quantization"]) == ("Q4_K_M", None, "Q4_K_M")
    assert card["expert_tensor_bytes"] == 4 * 8 * 16 * 2 and card["tensor_bytes"] == 5 * 8 * 16 * 2
    for hf_id in ("Qwen/Qwen3-8B", "unsloth/Qwen3-8B-GGUF", "someone/qwen3-8b-gguf"):  # the source or its GGUF repo
        assert prov.hf_id_problem({"hf_id": hf_id}, card) == ""
    assert prov.hf_id_problem({"hf_id": "meta-llama/Llama-3.2-1B"}, card) == (
        "hf_id: the campaign's model is meta-llama/Llama-3.2-1B, the GGUF names its source as unsloth/Qwen3-8B-GGUF, "
        "Qwen/Qwen3-8B")
    assert prov.hf_id_problem({}, card) == "" and prov.hf_id_problem({"hf_id": "x/y"}, {"source_repos": []}) == ""


# ------------------------------------------------------------------------------------------ judging

def _meta(card: dict, **over) -> dict:
    """llama-server's /v1/models meta for the card's model (tools/server model_meta; ftype as it words it)."""
    return {"vocab_type": 2, "n_vocab": card["vocab_size"], "n_ctx": 1024, "n_ctx_train": card["context_length"],
            "n_embd": card["hidden_size"], "n_params": card["param_count"], "size": card["tensor_bytes"],
            "ftype": "all F32", **over}


def test_what_llama_server_shows_confirms_the_gguf(tiny):
    card = modelcard.gguf_card(str(tiny["gguf"]))
    loaded = prov.loaded_from_meta(prov.model_meta({"data": [{"id": "tiny", "meta": _meta(card)}]}))
    assert loaded == {"param_count": 262464, "tensor_bytes": 1049856, "hidden_size": 64, "vocab_size": 1024,
                      "context_length": 8192, "file_type": "all F32"}
    verdict = prov.judge({"name": "tiny"}, card, None, loaded)
    assert verdict["status"] == "confirmed" and verdict["checks"]["tensor_bytes"]["identifies"]
    assert verdict["expected"] is card
    other = prov.loaded_from_meta(_meta(card, n_params=card["param_count"] * 2, size=card["tensor_bytes"] * 2))
    verdict = prov.judge({"name": "tiny"}, card, None, other)
    assert verdict["status"] == "mismatch"
    assert verdict["reason"] == ("param_count: the engine loaded 524928, the GGUF has 262464; tensor_bytes: the "
                                 "engine loaded 2099712, the GGUF has 1049856")
    assert prov.judge({"name": "tiny"}, card, None, {})["reason"] == (
        "the engine's output shows nothing of the model it loaded")


def test_the_engines_start_up_lines_say_what_they_loaded():
    gib = float(1 << 30)
    vllm = ("(APIServer pid=1) INFO 11-27 10:00:00 [model.py:547] Resolved architecture: Qwen3ForCausalLM\n"
            "(EngineCore_DP0 pid=2) INFO 11-27 10:00:09 [gpu_model_runner.py:2602] Model loading took 15.2683 GiB "
            "and 6.402 seconds\n")
    assert prov.loaded_from_log("vllm", vllm) == {"architecture": "Qwen3ForCausalLM", "weights_bytes": 15.2683 * gib}
    sglang = ("[2026-11-27 10:00:00 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail "
              "mem=100.20 GB, mem usage=15.27 GB.\n")
    assert prov.loaded_from_log("sglang", sglang) == {"architecture": "Qwen3ForCausalLM", "dtype": "bfloat16",
                                                      "weights_bytes": 15.27 * gib}
    trt = "[11/27/2026-10:00:00] [TRT-LLM] [I] Use 15.27 GB for model weights.\n"
    assert prov.loaded_from_log("trtllm-serve", trt) == {"weights_bytes": 15.27 * gib}
    llama = ("print_info: arch             = llama\nprint_info: n_embd           = 2048\n"
             "print_info: n_layer          = 16\nprint_info: file type        = F16\n")
    assert prov.loaded_from_log("llama.cpp", llama) == {"architecture": "llama", "hidden_size": 2048,
                                                        "num_hidden_layers": 16, "file_type": "F16"}


def test_changed_weights_at_a_path_are_a_mismatch_naming_the_first_run(tmp_path, tiny):
    from tinymodel import make_tiny_model

    path = tmp_path / "models" / "tiny.gguf"
    path.parent.mkdir()
    path.write_bytes(tiny["gguf"].read_bytes())
    seen = prov.SeenWeights(str(tmp_path / "host"))
    (tmp_path / "host").mkdir()
    first = modelcard.gguf_card(str(path))
    assert seen.check(first, "r1") == (None, [])  # kept as the path's first
    assert seen.check(modelcard.gguf_card(str(path)), "r2")[1] == []  # the same file: nothing changed
    other = make_tiny_model(tmp_path / "other", seed=99)  # same shape, other weights
    path.write_bytes(other["gguf"].read_bytes())
    card = modelcard.gguf_card(str(path))
    entry, changes = seen.check(card, "r3")
    assert entry["run_id"] == "r1" and [c.split(" ")[0] for c in changes] == ["head_sha256", "tail_sha256"]
    verdict = prov.judge({"name": "tiny"}, card, None, prov.loaded_from_meta(_meta(card)), entry, changes)
    assert verdict["status"] == "mismatch" and verdict["reason"].startswith(
        f"weights changed: {path} is not what run r1 of this campaign served (head_sha256 {first['head_sha256'][:12]}"
        f"... -> {card['head_sha256'][:12]}...; tail_sha256 ")
    assert verdict["checks"]["weights_unchanged"]["ok"] is False
    assert json.loads((tmp_path / "host" / ".sparkfleet-weights.json").read_text())[str(path)]["run_id"] == "r1"


def test_a_gguf_of_another_model_than_the_hf_id_is_a_mismatch(tmp_path):
    card = modelcard.gguf_card(str(_gguf_with_source(tmp_path / "q.gguf", {
        "general.source.huggingface.repository": "Qwen/Qwen3-8B"})))
    verdict = prov.judge({"name": "llama", "hf_id": "meta-llama/Llama-3.2-1B"}, card, None,
                         {"param_count": card["param_count"]})
    assert verdict["status"] == "mismatch" and verdict["reason"] == (
        "hf_id: the campaign's model is meta-llama/Llama-3.2-1B, the GGUF names its source as Qwen/Qwen3-8B")
    assert verdict["checks"]["hf_id"] == {"ok": False, "expected": "meta-llama/Llama-3.2-1B", "identifies": False,
                                          "loaded": "Qwen/Qwen3-8B"}


# ------------------------------------------------------------------------------------- bare records

def test_a_bare_runs_record_names_no_image():
    versions = {"image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13", "image_ref": "overlay:/",
                "campaign_config_hash": "abc"}
    assert run_record.run_versions(versions, "bare") == {"campaign_config_hash": "abc"}
    assert run_record.run_versions(versions, "native") == versions and run_record.run_versions(None, "bare") == {}


def test_an_older_bare_record_loads_without_its_image(tmp_path):
    from sparkfleet.load import load_runs

    for env, kind in (("bare", "bare"), ("native", "native")):
        rec = record_mod.new_record("c", "h", "m", env, "w", 1, environment_kind=kind, status="ok",
                                    versions={"image": "overlay:/", "image_ref": "overlay:/"})
        data, problems = record_mod.sealed(rec)
        assert not problems
        record_mod.write_json_atomic(tmp_path / "c" / "h" / "runs" / data["run_id"] / "record.json", data)
    runs = load_runs(tmp_path / "c").runs.set_index("environment")
    assert runs.loc["bare", "version_image"] is None and runs.loc["bare", "version_image_ref"] is None
    assert runs.loc["native", "version_image"] == "overlay:/"


# ------------------------------------------------------------------------------ a whole serving run

FAKE_LLAMA_SERVER = textwrap.dedent("""\
    #!{python}
    import http.server, os, sys
    args = sys.argv[1:]
    if args == ["--version"]:  # as llama-server: build-info.cpp.in's two lines on stderr, exit 0
        sys.stderr.write("version: 0.5.0-dev (build 1, commit 0c1e570)\\nbuilt with GNU 12.2.0 for Linux x86_64\\n")
        sys.exit(0)
    port = int(args[args.index("--port") + 1])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(('{{"data": [{{"id": "tiny", "meta": %s}}]}}' % os.environ["FAKE_META"]).encode())
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")

FAKE_BENCHY = textwrap.dedent("""\
    #!{python}
    import json, sys
    args = sys.argv[1:]
    if args == ["--version"]:
        print("llama-benchy 0.4.0")
        sys.exit(0)
    get = lambda flag: args[args.index(flag) + 1]
    metric = lambda v: {{"mean": v, "std": 0.0, "values": [v, v]}}
    entry = {{"concurrency": int(get("--concurrency")), "context_size": int(get("--depth")),
             "prompt_size": int(get("--pp")), "response_size": int(get("--tg")), "is_context_prefill_phase": False,
             "pp_throughput": metric(1000.0), "pp_req_throughput": metric(1000.0), "tg_throughput": metric(40.0),
             "tg_req_throughput": metric(40.0), "peak_throughput": metric(45.0), "peak_req_throughput": None,
             "ttfr": metric(12.5), "est_ppt": metric(10.0), "e2e_ttft": metric(13.0)}}
    with open(get("--save-result"), "w") as fh:
        json.dump({{"version": "0.4.0", "benchmarks": [entry]}}, fh)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _executable(path: Path, text: str) -> str:
    path.write_text(text.format(python=sys.executable))
    path.chmod(0o755)
    return str(path)


def test_a_bare_serving_run_records_what_it_served_and_names_a_changed_gguf(tmp_path, monkeypatch, tiny):
    from tinymodel import make_tiny_model

    bindir = tmp_path / "bin"
    bindir.mkdir()
    _executable(bindir / "llama-server", FAKE_LLAMA_SERVER)
    client = _executable(tmp_path / "llama-benchy", FAKE_BENCHY)
    gguf = tmp_path / "models" / "tiny.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(tiny["gguf"].read_bytes())
    card = modelcard.gguf_card(str(gguf))
    path = f"{bindir}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    model = {"name": "tiny", "path": str(gguf), "tokenizer": str(tiny["tokenizer"]), "random_weights": True}
    workload = {"name": "serve", "engine": "llama.cpp", "runs": 1, "ready_timeout_s": 60, "port": _free_port(),
                "profile": {"depth": [0], "concurrency": [1], "pp": [64], "tg": [8]}}
    versions = {"image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13", "image_ref": "x",
                "campaign_config_hash": "abc"}

    def run(iteration: int, meta: dict) -> dict:
        rid = record_mod.run_id("c1", "h1", "tiny", "bare", "serve", iteration)
        args = {"runs": [{"run_id": rid, "order_index": iteration, "model": model, "workload": workload,
                          "environment": {"name": "bare", "kind": "bare"}, "iteration": iteration, "warmup": False}],
                "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"), "versions": versions,
                "cooldown": {"enabled": False}, "timeout_s": 300, "telemetry_interval_s": 0.2,
                "env": {"PATH": path, "FAKE_META": json.dumps(meta)}, "serving": {"client": client},
                "readiness": {"probe_s": 0}}
        out = run_module(load_module("bench_run"), args)
        assert not out.get("failed"), out
        rec = json.loads(Path(out["runs"][0]["record_path"]).read_text())
        assert record_mod.validate(rec) == []
        return rec

    rec = run(1, _meta(card))
    assert rec["status"] == "ok" and rec["reason"] is None, rec["reason"]
    assert rec["engine_version"] == rec["versions"]["engine_version"] == "0.5.0-dev (build 1, commit 0c1e570)"
    assert rec["serving"]["engine_version"]["built_with"] == "GNU 12.2.0 for Linux x86_64"
    assert "image" not in rec["versions"] and "image_ref" not in rec["versions"]  # a bare run uses no image
    assert rec["versions"]["campaign_config_hash"] == "abc"
    provenance = rec["provenance"]
    assert provenance["status"] == "confirmed" and provenance["expected"]["head_sha256"] == card["head_sha256"]
    assert provenance["expected"]["tensor_bytes"] == 1049856 and rec["serving"]["server"]["model_meta"]["n_params"]

    # the engine says it loaded other weights than the file holds: invalid, naming both
    rec = run(2, _meta(card, n_params=7))
    assert rec["status"] == "invalid" and rec["reason"].startswith(
        "provenance: param_count: the engine loaded 7, the GGUF has 262464")

    # another file at the same path: every later run names the change against run 1
    time.sleep(0.01)
    gguf.write_bytes(make_tiny_model(tmp_path / "other", seed=7)["gguf"].read_bytes())
    rec = run(3, _meta(modelcard.gguf_card(str(gguf))))
    first = record_mod.run_id("c1", "h1", "tiny", "bare", "serve", 1)
    assert rec["status"] == "invalid" and rec["reason"].startswith(
        f"provenance: weights changed: {gguf} is not what run {first} of this campaign served (head_sha256 ")


def test_a_bare_vllm_run_with_the_standin_records_its_version_and_what_it_loaded(tmp_path, monkeypatch):
    """The vLLM stand-in answers `vllm --version` as vLLM does and prints vLLM's start-up lines, among them
    "Resolved architecture" and "Model loading took X GiB": the run records the version and confirms the
    directory's card (architecture, and weights of over 1 GiB within 25%)."""
    from modeldirs import make_model

    want = make_model(tmp_path / "models", "llama-8l", layers=8)
    client = _executable(tmp_path / "llama-benchy", FAKE_BENCHY)
    path = f"{STANDINS}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    model = {"name": "llama", "path": str(want["path"])}
    workload = {"name": "serve", "engine": "vllm", "runs": 1, "ready_timeout_s": 60, "port": _free_port(),
                "profile": {"depth": [0], "concurrency": [1], "pp": [64], "tg": [8]}}
    rid = record_mod.run_id("c1", "h1", "llama", "bare", "serve", 1)
    args = {"runs": [{"run_id": rid, "order_index": 0, "model": model, "workload": workload, "iteration": 1,
                      "environment": {"name": "bare", "kind": "bare"}, "warmup": False}],
            "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"), "cooldown": {"enabled": False},
            "timeout_s": 300, "telemetry_interval_s": 0.2, "serving": {"client": client}, "readiness": {"probe_s": 0},
            "env": {"PATH": path, "SPARKFLEET_FAKE_STARTUP_S": "0.1", "SPARKFLEET_FAKE_VERSION": "0.11.2"},
            "versions": {"image": "vllm/vllm-openai:v0.11.2", "campaign_config_hash": "abc"}}
    out = run_module(load_module("bench_run"), args)
    assert not out.get("failed"), out
    rec = json.loads(Path(out["runs"][0]["record_path"]).read_text())
    assert record_mod.validate(rec) == [] and rec["status"] == "ok" and rec["reason"] is None, rec["reason"]
    assert rec["engine_version"] == "0.11.2" and rec["serving"]["engine_version"]["source"] == "vllm --version"
    assert "image" not in rec["versions"]
    provenance = rec["provenance"]
    assert provenance["status"] == "confirmed" and provenance["loaded"]["architecture"] == "LlamaForCausalLM"
    assert provenance["checks"]["architecture"]["ok"] and provenance["checks"]["weights_bytes"]["identifies"]
