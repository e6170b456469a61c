"""Serving end to end with the GPU engines (issue 25): the product drives vLLM's, SGLang's and trtllm-serve's
servers as it drives llama.cpp's (tests/integration/test_serving.py), with the stand-ins of tests/fleet/standins
as the engines (they take the real command lines, print the engines' real start-up and KV lines and speak the
OpenAI wire format on 127.0.0.1). bench.yml on the localhost inventory, natively (chroot into the image's rootfs)
and in Docker, the engine crossed as a campaign factor, the real load generator (llama-benchy) on the host; then
the report's engine and environment comparisons.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakefleet import STANDINS
from modeldirs import write_safetensors
from tinymodel import CORPUS, SHAPE, train_tokenizer

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate

pytestmark = [pytest.mark.root, pytest.mark.docker, pytest.mark.slow]

IMAGE_REPO = "sparkfleet-test/engines"
ENGINES = ["vllm", "sglang", "trtllm-serve"]
PORTS = {"vllm": 8000, "sglang": 30000, "trtllm-serve": 8000}  # the engines' defaults
PROFILE = {"depth": [0], "concurrency": [1, 2], "pp": [32], "tg": [8]}
DIST_PACKAGES = "/usr/local/lib/python3.11/dist-packages"  # on the test image's python3 path
#: what the image gains: (stand-in under tests/fleet/standins, where it goes in the image); each engine's entry
#: point imports openai_server from its parent directory
IMAGE_FILES = [("openai_server.py", "/usr/local/bin/openai_server.py"), ("vllm", "/usr/local/bin/vllm"),
               ("trtllm-serve", "/usr/local/bin/trtllm-serve"),
               ("openai_server.py", f"{DIST_PACKAGES}/openai_server.py"), ("sglang", f"{DIST_PACKAGES}/sglang")]


@pytest.fixture(scope="module")
def engines_image(test_image, tmp_path_factory) -> str:
    """The test image with the engine stand-ins where the engines' own images have them: ``vllm`` and
    ``trtllm-serve`` on the PATH, the ``sglang`` package importable by the image's python3. Tagged by content."""
    context = tmp_path_factory.mktemp("image")
    lines = [f"FROM {test_image}"]
    for name, dest in IMAGE_FILES:
        src = STANDINS / name
        if (context / name).exists():
            pass
        elif src.is_dir():
            shutil.copytree(src, context / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, context / name)
        lines.append(f"COPY {name} {dest}")
    (context / "Dockerfile").write_text("\n".join(lines) + "\n")
    digest = subprocess.run(f"cd {context} && find . -type f | sort | xargs sha256sum | sha256sum", shell=True,
                            capture_output=True, text=True, check=True).stdout[:12]
    ref = f"{IMAGE_REPO}:{test_image.rsplit(':', 1)[-1][:12]}-{digest}"
    if subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode != 0:
        subprocess.run(["docker", "build", "-q", "-t", ref, str(context)], check=True, capture_output=True,
                       timeout=600)
    return ref


def make_hf_model(dest: Path) -> dict:
    """A Hugging Face model directory the stand-ins size their KV cache from: config.json (layers, heads,
    hidden size: the KV bytes per token), a safetensors file (the weights' size) and the tiny tokenizer."""
    dest.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": SHAPE["n_layer"],
              "hidden_size": SHAPE["n_embd"], "num_attention_heads": SHAPE["n_head"],
              "num_key_value_heads": SHAPE["n_head"], "intermediate_size": SHAPE["n_ff"],
              "vocab_size": SHAPE["vocab"], "max_position_embeddings": SHAPE["n_ctx"], "torch_dtype": "float32"}
    (dest / "config.json").write_text(json.dumps(config))
    write_safetensors(dest / "model.safetensors", {"model.embed_tokens.weight": ("F32", [SHAPE["vocab"],
                                                                                        SHAPE["n_embd"]])})
    train_tokenizer(CORPUS.read_text(encoding="utf-8"), SHAPE["vocab"]).save(str(dest / "tokenizer.json"))
    return {"path": dest}


@pytest.fixture
def engines_setup(tmp_path, engines_image):
    work, results = tmp_path / "work", tmp_path / "results"
    model = make_hf_model(work / "models" / "tiny-hf")
    campaign = {"sparkfleet_campaign": {
        "name": "engines-e2e", "image": engines_image,
        "models": [{"name": "tiny", "path": str(model["path"])}],
        "environments": ["native", "container"],
        "workloads": [{"name": "chat", "profile": PROFILE, "runs": 1, "ready_timeout_s": 120,
                       # a prefill slower than llama-benchy's measured network latency (tens of ms on a loaded
                       # machine), else it estimates no prompt processing time and no prefill rate
                       "env": {"SPARKFLEET_FAKE_PREFILL_TOK_S": "150", "SPARKFLEET_FAKE_DECODE_TOK_S": "100"}}],
        "factors": {"engine": ENGINES},
        "iterations": 1, "warmup_runs": 0, "order": "interleaved",
        "cooldown": {"threshold_c": 45, "max_wait_s": 30, "on_timeout": "continue"},
        "timeout_s": 900}}
    path = tmp_path / "campaign.yml"
    path.write_text(yaml.safe_dump(campaign))
    extra = ["-e", f"@{path}", "-e", f"sparkfleet_work_dir={work}", "-e", f"sparkfleet_results_dir={results}",
             "-e", "sparkfleet_image_offline=true",
             "-e", f"sparkfleet_serving_client={Path(sys.executable).parent / 'llama-benchy'}"]  # no PyPI here
    return {"work": work, "results": results, "extra": extra, "model": model}


def expected_argv(engine: str, model: str) -> list[str]:
    """The head of each engine's real command line (the stand-ins accept it; serving.py must produce it)."""
    return {"vllm": ["vllm", "serve", model, "--host", "127.0.0.1", "--port"],
            "trtllm-serve": ["trtllm-serve", model, "--host", "127.0.0.1", "--port"],
            "sglang": ["python3", "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1",
                       "--port"]}[engine]


def test_gpu_engines_served_native_and_in_docker_driven_by_llama_benchy(engines_setup, ansible_env, repo):
    s = engines_setup
    proc = subprocess.run(["ansible-playbook", "bench.yml", *s["extra"]], cwd=repo, env=ansible_env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "6 runs planned on localhost" in proc.stdout, proc.stdout[-3000:]
    runs = sorted((s["results"] / "engines-e2e" / "localhost" / "runs").glob("*/record.json"))
    records = [json.loads(p.read_text()) for p in runs]
    cells = sorted((r["serving"]["engine"], r["environment"]) for r in records)
    assert cells == sorted((e, env) for e in ENGINES for env in ("native", "container"))
    model = str(s["model"]["path"])
    for path, rec in zip(runs, records, strict=True):
        assert validate(rec) == [] and rec["status"] == "ok", (rec["reason"], rec.get("serving"))
        serving = rec["serving"]
        engine = serving["engine"]
        assert rec["workload"].endswith(f".{engine}"), rec["workload"]
        argv = serving["server"]["argv"]
        head = expected_argv(engine, model)
        assert argv[:len(head)] == head, argv
        assert argv[len(head)] == str(PORTS[engine]) == str(serving["server"]["port"])
        assert serving["server"]["stopped"] in ("terminated", "exited")
        if rec["environment"] == "container":
            assert serving["server"].get("network") == "host"
        # the engine's own start-up log, parsed by the engine's KV parser
        kv = serving["kv"]
        assert kv["kv_cache_gib"] and kv["kv_cache_gib"] > 0, kv
        assert kv["source"] and kv["source"] in (path.parent / "server.log").read_text(), kv
        assert rec["metrics"]["kv_cache_gib"] == kv["kv_cache_gib"]
        assert "kv_cache_gib" in rec["metric_sources"], rec["metric_sources"]
        assert {(p["depth"], p["concurrency"]) for p in serving["points"]} == {(0, 1), (0, 2)}
        for point in serving["points"]:
            assert point["status"] == "ok", point
            m = point["metrics"]
            assert m["pp_tok_s"] > 0 and m["e2e_ttft_ms"] > 0, m
            assert (path.parent / point["raw"]).is_file()

    report = subprocess.run([sys.executable, "-m", "sparkfleet", "report", str(s["results"] / "engines-e2e")],
                            cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    with (s["results"] / "engines-e2e" / "report" / "serving_comparisons.csv").open() as fh:
        comparisons = list(csv.DictReader(fh))
    questions = {c["question"] for c in comparisons}
    assert questions == {"serving-engine", "serving-environment"}, questions
    engine_rows = [c for c in comparisons if c["question"] == "serving-engine"]
    # engines compared within one environment: sglang (the first by name) against the others, in both environments
    assert {(c["environment"], c["a"], c["b"]) for c in engine_rows} == {
        (env, "sglang", b) for env in ("native", "container") for b in ("trtllm-serve", "vllm")}, engine_rows[:2]
    environment_rows = [c for c in comparisons if c["question"] == "serving-environment"]
    assert {(c["engine"], c["a"], c["b"]) for c in environment_rows} == {
        (e, "native", "container") for e in ENGINES}, environment_rows[:2]
