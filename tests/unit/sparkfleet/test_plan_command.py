"""`sparkfleet plan`: every run's exact command lines per TensorRT-LLM version, offline, secrets redacted."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from sparkfleet.cli import main

MODEL_PATH = "/var/lib/sparkfleet/models/meta-llama/Llama-3.1-8B"


@pytest.fixture
def campaign(tmp_path):
    def write(image="nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13", models=None, **over):
        data = {"name": "demo", "image": image,
                "models": models or [{"name": "llama", "hf_id": "meta-llama/Llama-3.1-8B", "path": MODEL_PATH}],
                "environments": ["native", "container"],
                "workloads": [{"name": "t4", "preset": "T4", "kv_fraction": 0.5},
                              {"name": "lat", "preset": "T2", "mode": "latency", "env": {"HF_TOKEN": "hf_secret"}}],
                "iterations": 1, **over}
        path = tmp_path / "campaign.yml"
        path.write_text(yaml.safe_dump({"sparkfleet_campaign": data}))
        return str(path)
    return write


def plan_json(capsys, *args):
    code = main(["plan", *args, "--json"])
    out = json.loads(capsys.readouterr().out)
    return code, out


def steps(out, kind, workload, step):
    run = next(r for r in out["runs"] if r["kind"] == kind and f".{workload}." in r["run_id"])
    return next(s for s in run["steps"] if s["name"] == step)


@pytest.mark.parametrize("version", ["1.1.0rc3", "1.2.0rc8", "1.2.1", "1.3.0rc13", "1.3.0rc29", "1.3.0"])
def test_each_version_gets_its_own_commands(campaign, capsys, version):
    code, out = plan_json(capsys, campaign(), "--trtllm-version", version)
    assert code == 0 and out["trtllm"]["version"] == version
    prep = steps(out, "native", "t4", "prepare")
    assert prep["argv"][:2] == ["chroot", "/var/lib/sparkfleet/rootfs/<sha256-image-id>"]
    tail = prep["argv"][prep["argv"].index("<image-entrypoint>") + 1:]
    if version == "1.1.0rc3":
        assert tail[:5] == ["python3", "/app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py", "--tokenizer",
                            MODEL_PATH, "--stdout"]
        assert prep["stdout"].endswith("/dataset.jsonl") and prep["line"].endswith("> " + prep["stdout"])
    else:
        assert tail[:4] == ["trtllm-bench", "--model", MODEL_PATH, "prepare-dataset"] and prep["stdout"] is None
    bench = steps(out, "container", "t4", "bench")["argv"]
    assert bench[:2] == ["docker", "run"] and "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13" in bench
    flag = "--config" if version.startswith("1.3") else "--extra_llm_api_options"
    assert flag in bench and "HF_HUB_OFFLINE=1" in bench
    latency = steps(out, "native", "lat", "bench")["argv"]
    assert "latency" in latency and "--max_batch_size" not in latency
    assert "HF_TOKEN=***" in latency and "hf_secret" not in json.dumps(out)


def test_text_output_says_what_is_unknown_offline(campaign, capsys):
    assert main(["plan", campaign(image="nvcr.io/nvidia/tensorrt-llm/release:spark-single-gpu-dev")]) == 0
    text = capsys.readouterr().out
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert "TensorRT-LLM 1.1.0rc3" in header[1] and "spark-single-gpu-dev" in header[1]
    assert any("offline: nothing was touched" in line for line in header)
    assert any("<image-entrypoint>" in line and "unknown offline" in line for line in header)
    assert text.count("\n## ") == 4 and "prepare: chroot" in text and "bench: docker run" in text


def test_a_version_past_every_capture_plans_with_the_newest_one_older_than_all_needs_warn(campaign, capsys, tmp_path):
    """1.3.0 (and 1.4.0rcN) run without a flag, built against the newest captured surface, saying so; only a
    version older than every captured surface is refused offline, unless the inventory says warn."""
    for version in ("1.3.0", "1.4.0rc1"):
        code, out = plan_json(capsys, campaign(), "--trtllm-version", version)
        assert code == 0 and out["trtllm"]["profile"] == "captured 1.3.0rc2x", out["notes"]
        assert any("no captured surface covers it; the newest, 1.3.0rc2x, is used" in n for n in out["notes"])
    assert main(["plan", campaign(), "--trtllm-version", "1.0.0rc4"]) == 2
    assert "1.0.0rc4: no captured trtllm-bench surface covers it" in capsys.readouterr().err
    varfile = tmp_path / "vars.yml"
    varfile.write_text("sparkfleet_trtllm_unknown_version: warn\nsparkfleet_work_dir: /srv/sf\n")
    code, out = plan_json(capsys, campaign(), "--trtllm-version", "1.0.0rc4", "--vars", str(varfile))
    assert code == 0 and out["trtllm"]["profile"] == "captured 1.1.0rc3"
    assert any("1.0.0rc4 is older than every captured trtllm-bench surface" in n for n in out["notes"])
    assert steps(out, "native", "t4", "bench")["argv"][1] == "/srv/sf/rootfs/<sha256-image-id>"


def test_a_workload_the_surface_cannot_run_is_refused_naming_the_option(campaign, capsys):
    """extra_args the version's trtllm-bench lacks: the run's row names the command and the option."""
    path = campaign(workloads=[{"name": "t4", "preset": "T4", "extra_args": ["--sim"]}])
    code, out = plan_json(capsys, path, "--trtllm-version", "1.2.1")
    assert code == 1
    assert all("`trtllm-bench throughput` has no option --sim" in r["error"] for r in out["runs"])
    code, out = plan_json(capsys, path, "--trtllm-version", "1.3.0rc29")  # sim mode is there
    assert code == 0 and "--sim" in steps(out, "native", "t4", "bench")["argv"]


def test_a_model_without_path_is_named_and_an_hf_cache_lets_it_through(campaign, capsys):
    path = campaign(models=[{"name": "q", "hf_id": "Qwen/Qwen2.5-0.5B"}])
    code, out = plan_json(capsys, path)
    assert code == 1 and all("has no path" in r["error"] for r in out["runs"])
    code, out = plan_json(capsys, path, "-e", "sparkfleet_hf_cache_dir=/srv/hf")
    assert code == 0
    bench = steps(out, "container", "t4", "bench")["argv"]
    assert "type=bind,source=/srv/hf,target=/root/.cache/huggingface" in bench and "HF_HUB_OFFLINE=1" not in bench


def test_an_image_tag_without_a_version_needs_the_flag(campaign, capsys):
    assert main(["plan", campaign(image="nvcr.io/nvidia/tensorrt-llm/release:latest")]) == 2
    assert "--trtllm-version" in capsys.readouterr().err


def test_the_environment_shown_is_the_one_the_host_launcher_builds(campaign, capsys):
    """The inventory's env, the workload's over it, the probe and trtllm's offline defaults: as bench_run's
    Launcher composes them (the inventory's HF_TOKEN is overridden by the workload's, both redacted)."""
    code, out = plan_json(capsys, campaign(), "--trtllm-version", "1.3.0rc13",
                          "-e", 'sparkfleet_workload_env={"A": "1", "HF_TOKEN": "inv"}')
    assert code == 0
    for kind, workload, expected in (
            ("native", "t4", {"A": "1", "HF_TOKEN": "***", "SPARKFLEET_ENV_PROBE": "native/native",
                              "HF_HUB_OFFLINE": "1"}),
            ("container", "lat", {"A": "1", "HF_TOKEN": "***", "SPARKFLEET_ENV_PROBE": "container/container",
                                  "HF_HUB_OFFLINE": "1"})):
        argv = steps(out, kind, workload, "bench")["argv"]
        shown = dict(a.split("=", 1) for a in argv if "=" in a and a.split("=", 1)[0] in expected)
        assert shown == expected


def test_hf_generate_runs_share_one_inductor_cache_per_host_unless_the_workload_names_one(campaign, capsys):
    """Every environment of a host reads the same kernel tuning: its Inductor cache under the results root,
    which the chroot and the container see at the same path; other engines get no such variable."""
    hf = [{"name": "t1", "preset": "T1", "engine": "hf-generate"},
          {"name": "own", "preset": "T1", "engine": "hf-generate", "env": {"TORCHINDUCTOR_CACHE_DIR": "/srv/x"}},
          {"name": "t4", "preset": "T4"}]
    code, out = plan_json(capsys, campaign(workloads=hf), "--trtllm-version", "1.3.0rc13",
                          "-e", "sparkfleet_work_dir=/srv/sf")
    assert code == 0

    def cache_dirs(workload):
        argvs = [steps(out, kind, workload, "bench")["argv"] for kind in ("native", "container")]
        return {a.split("=", 1)[1] for argv in argvs for a in argv if a.startswith("TORCHINDUCTOR_CACHE_DIR=")}

    assert cache_dirs("t1") == {"/srv/sf/results/.sparkfleet/inductor-cache"}
    assert cache_dirs("own") == {"/srv/x"} and cache_dirs("t4") == set()


def test_the_paths_are_the_ones_the_hosts_plan_carries(campaign, capsys):
    """A work dir given: results, models (its default {{ sparkfleet_work_dir }}/models) and rootfs under it."""
    code, out = plan_json(capsys, campaign(), "--trtllm-version", "1.3.0rc13", "-e", "sparkfleet_work_dir=/srv/sf/")
    assert code == 0
    bench = " ".join(steps(out, "container", "t4", "bench")["argv"])
    assert "source=/srv/sf/results,target=/srv/sf/results" in bench
    assert "source=/srv/sf/models,target=/srv/sf/models" in bench
    assert "/srv/sf/results/demo/HOST/runs/" in bench
    assert steps(out, "native", "t4", "bench")["argv"][1] == "/srv/sf/rootfs/<sha256-image-id>"


GGUF = "/var/lib/sparkfleet/models/llama-3.1-8b-q4_k_m.gguf"


@pytest.fixture
def arena(campaign):
    """A Spark Arena campaign: the preset names no engine, the factor crosses two in."""
    return campaign(models=[{"name": "llama", "path": MODEL_PATH, "gguf": GGUF}],
                    workloads=[{"name": "arena", "preset": "spark-arena"}],
                    factors={"engine": ["vllm", "llama.cpp"]})


def test_a_spark_arena_campaign_plans_its_points_requests_and_duration(arena, capsys):
    assert main(["plan", arena]) == 0
    text = capsys.readouterr().out
    header = [line for line in text.splitlines() if line.startswith("# serving arena.")]
    assert len(header) == 2 and all("28 points per run (7 depth x 4 concurrency x 1 pp x 1 tg)" in h
                                    and "378 requests" in h for h in header)
    assert all(re.search(r"about \d+(\.\d)? (s|min|h) per run \(a rough planning figure\)", h) for h in header)
    runs = text.split("\n## ")[1:]
    assert len(runs) == 4 and all("# 28 points per run, 378 requests, about " in r for r in runs)
    assert all("\nserver: " in r and "\nclient: " in r for r in runs)


def test_a_serving_runs_server_and_client_are_the_hosts(arena, capsys):
    code, out = plan_json(capsys, arena, "-e", "sparkfleet_serving_corpus=/srv/book.txt")
    assert code == 0 and set(out["serving"]) == {"arena.vllm", "arena.llama.cpp"}
    assert out["serving"]["arena.vllm"]["points"] == 28 and out["serving"]["arena.vllm"]["requests"] == 378
    vllm = steps(out, "container", "arena", "server")["argv"]  # the first container run: vllm
    assert vllm[:2] == ["docker", "run"] and "--network" in vllm and vllm[vllm.index("--network") + 1] == "host"
    assert vllm[vllm.index("serve") - 1:vllm.index("serve") + 2] == ["vllm", "serve", MODEL_PATH]
    llama = next(r for r in out["runs"] if r["kind"] == "native" and ".arena.llama.cpp." in r["run_id"])
    server, client = llama["steps"]
    assert server["argv"][server["argv"].index("-m") + 1] == GGUF  # llama.cpp serves the model's gguf
    argv = client["argv"]
    assert argv[:2] == ["/usr/bin/env", "-C"] and "/var/lib/sparkfleet/clients/llama-benchy/bin/llama-benchy" in argv
    assert argv[argv.index("--tokenizer") + 1] == MODEL_PATH and "--enable-prefix-caching" in argv
    assert argv[argv.index("--runs") + 1] == "3" and argv[argv.index("--base-url") + 1] == "http://127.0.0.1:8080/v1"
    assert "--book-url" in argv and client["points"] == 28
    assert llama["timeout_s"] > 3600  # its own timeout: the campaign gives none


def test_a_local_serving_campaign_plans_with_no_test_only_setting(campaign, capsys):
    """Issue 33: a GGUF alone, random weights, a bare environment, no corpus setting. The plan says what the host
    decides: the GGUF's tokenizer, the collection's corpus (never a download), the host's PATH, and the coherence
    check skipped for the random weights."""
    gguf = "/var/lib/sparkfleet/models/tiny/tiny.gguf"
    path = campaign(models=[{"name": "tiny", "path": gguf, "random_weights": True}],
                    environments=[{"name": "host", "kind": "bare"}],
                    workloads=[{"name": "chat", "preset": "serve-quick", "engine": "llama.cpp"}])
    code, out = plan_json(capsys, path)
    assert code == 0, out
    server, client = out["runs"][0]["steps"]
    assert server["argv"][:3] == ["/usr/bin/env", "-C", out["runs"][0]["steps"][0]["argv"][2]]
    assert "PATH=<the host's PATH>" in server["argv"] and "llama-server" in server["argv"]
    argv = client["argv"]
    assert argv[argv.index("--tokenizer") + 1] == f"<tokenizer of {gguf}>" and "--skip-coherence" in argv
    assert "--book-url" in argv
    notes = "\n".join(out["notes"])
    assert ("prompts from /var/lib/sparkfleet/clients/corpus.txt (the collection's public-domain corpus, installed "
            "by the serving_client role)") in notes and "nothing is downloaded" in notes
    assert (f"<tokenizer of {gguf}>: on the host, the tokenizer.json beside the GGUF when its vocabulary is the "
            f"GGUF's, else one derived from the GGUF's own vocabulary, once, under "
            f"/var/lib/sparkfleet/results/.sparkfleet/tokenizers/") in notes
    assert "random_weights (tiny): the client skips its coherence check (--skip-coherence)" in notes
    # a corpus the inventory names is the one said, and the PATH the inventory gives is the one the command gets
    code, out = plan_json(capsys, path, "-e", "sparkfleet_serving_corpus=/srv/book.txt",
                          "-e", 'sparkfleet_workload_env={"PATH": "/opt/llama/bin:/usr/bin"}')
    assert "prompts from /srv/book.txt (sparkfleet_serving_corpus)" in "\n".join(out["notes"])
    assert "PATH=/opt/llama/bin:/usr/bin" in out["runs"][0]["steps"][0]["argv"]


def test_a_serving_model_without_a_tokenizer_is_refused_before_planning(campaign, capsys):
    path = campaign(models=[{"name": "q", "hf_id": "Qwen/Qwen3-8B"}], workloads=[{"name": "q", "preset": "serve-quick",
                                                                                  "engine": "vllm"}])
    assert main(["plan", path]) == 2
    assert "campaign.models[0].tokenizer: required" in capsys.readouterr().err


def test_a_campaigns_own_engine_shows_its_expanded_server_command(campaign, capsys):
    ollama = {"command": ["ollama-serve", "--model", "{model}", "--listen", "{host}:{port}", "--name",
                          "{served_model_name}"], "port": 11434}
    path = campaign(models=[{"name": "llama", "path": MODEL_PATH}], workloads=[{"name": "q", "preset": "serve-quick"}],
                    engines={"ollama": ollama}, factors={"engine": ["vllm", "ollama"]})
    code, out = plan_json(capsys, path)
    assert code == 0 and set(out["serving"]) == {"q.vllm", "q.ollama"}
    expanded = ["ollama-serve", "--model", MODEL_PATH, "--listen", "127.0.0.1:11434", "--name", "llama"]
    native = next(r for r in out["runs"] if r["kind"] == "native" and ".q.ollama." in r["run_id"])
    server, client = native["steps"]
    assert server["argv"][-len(expanded):] == expanded and "error" not in native
    assert client["argv"][client["argv"].index("--base-url") + 1] == "http://127.0.0.1:11434/v1"
    docker = steps(out, "container", "q.ollama", "server")["argv"]
    assert docker[:2] == ["docker", "run"] and docker[docker.index("--network") + 1] == "host"
    assert docker[-len(expanded):] == expanded
    assert main(["plan", path]) == 0
    assert "server: " in capsys.readouterr().out


# (environments, image named in the header) - issue 33: the header names only what the campaign uses.
HEADER_CASES = [
    (["native", "container"], True),
    (["native"], True),
    (["container"], True),
    ([{"name": "host", "kind": "bare"}], False),
]


@pytest.mark.parametrize(("environments", "names_image"), HEADER_CASES)
def test_the_plan_header_names_the_image_only_when_an_environment_uses_it(campaign, capsys, environments,
                                                                         names_image):
    image = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13"
    path = campaign(environments=environments, workloads=[{"name": "mm", "preset": "matmul"}],
                    models=[{"name": "matmul-fp32"}])
    assert main(["plan", path]) == 0
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
    assert any(image in line for line in header) is names_image, header
    kinds = {e if isinstance(e, str) else e["kind"] for e in environments}
    assert any(line.startswith("# native:") for line in header) is ("native" in kinds)
    assert any(line.startswith("# container:") for line in header) is ("container" in kinds)
