"""trtllm-bench per TensorRT-LLM version: detection from an image's files, the unknown-version policy, the
argv per version (dataset by subcommand or by the image's script, tokenizer from the local path, latency
without --max_batch_size, --config vs --extra_llm_api_options), the stdout step, and engine_probe."""

from __future__ import annotations

import subprocess
import sys
import tarfile

import pytest
import testimage
from _ansible_modules import load_module, run_module

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import runexec, trtllm_cli

MODEL = {"name": "llama", "hf_id": "meta-llama/Llama-3.1-8B", "path": "/models/meta-llama/Llama-3.1-8B"}
T4 = {"name": "T4", "engine": "trtllm", "mode": "throughput", "batch": 4, "input_len": 512, "output_len": 128}
SCRIPT = trtllm_cli.SCRIPT_PATH


def rootfs(tmp_path, version):
    """The files the test image adds for ``version``, extracted: an image rootfs as detection sees it."""
    overlay = tmp_path / "overlay.tar"
    testimage._overlay_tar(overlay, version)
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(overlay) as tar:
        tar.extractall(root, filter="data")  # our own tarball, extracted as Python 3.14 will by default
    return root


def steps(version, workload=T4, model=MODEL, **kw):
    return runexec.engine_steps("trtllm", workload, model, "/r/run", "/w", trtllm={"version": version, **kw})


@pytest.mark.parametrize(("version", "profile", "subcommand", "script"), [
    ("1.1.0rc3", "1.1", False, SCRIPT), ("1.2.0rc6", "1.2.0rc6", False, SCRIPT),
    ("1.2.0rc8", "1.2", True, SCRIPT), ("1.3.0rc13", "1.3", True, SCRIPT)])
def test_detect_reads_version_and_surface_from_files(tmp_path, version, profile, subcommand, script):
    found = trtllm_cli.detect(str(rootfs(tmp_path, version)))
    assert (found["version"], found["profile"], found["supported"]) == (version, profile, True)
    assert found["surface"]["prepare_dataset_subcommand"] is subcommand
    assert found["surface"]["prepare_dataset_script"] == script
    assert found["sources"]["version"] == "/usr/local/lib/python3.11/dist-packages/tensorrt_llm/version.py"
    assert found["surface"]["config_flag"] == ("--config" if version.startswith("1.3") else "--extra_llm_api_options")


def test_detect_falls_back_to_dist_info_metadata_and_finds_nothing_in_an_empty_root(tmp_path):
    assert trtllm_cli.detect(str(tmp_path))["version"] is None
    lib = tmp_path / "usr/local/lib/python3.12/dist-packages"
    (lib / "tensorrt_llm").mkdir(parents=True)
    (lib / "tensorrt_llm-1.2.0rc6.dist-info").mkdir()
    (lib / "tensorrt_llm-1.2.0rc6.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: tensorrt_llm\n"
                                                                 "Version: 1.2.0rc6\n")
    found = trtllm_cli.detect(str(tmp_path))
    assert found["version"] == "1.2.0rc6" and found["sources"]["version"].endswith("METADATA")


def test_an_unknown_version_is_refused_naming_it_and_the_supported_ones():
    with pytest.raises(runexec.RunSetupError) as err:
        steps("1.4.0")
    assert "1.4.0 is not a supported version" in str(err.value)
    assert all(v in str(err.value) for v in ("1.1.0rc3", "1.2.0rc6", "1.2.0rc8", "1.3.0rcN"))
    with pytest.raises(runexec.RunSetupError, match="version is unknown"):
        runexec.engine_steps("trtllm", T4, MODEL, "/r", "/w", trtllm={})


def test_warn_runs_an_unknown_version_with_the_nearest_profile_and_says_so():
    resolved = trtllm_cli.resolve({"version": "1.2.0"}, "warn")
    assert resolved["profile"] == "1.2" and "1.2.0 is not a supported version" in resolved["warnings"][0]
    assert trtllm_cli.resolve({"version": "1.0.0rc4"}, "warn")["profile"] == "1.1"
    assert trtllm_cli.resolve({"version": "2.0.0"}, "warn")["profile"] == "1.3"
    assert trtllm_cli.resolve({"version": "1.3.0rc13"}, "warn")["warnings"] == []


def test_1_1_makes_its_dataset_with_the_images_script_on_stdout_from_the_local_tokenizer():
    (prep, argv, out), (bench, bargv, bout) = steps("1.1.0rc3")
    assert prep == "prepare" and out == "/r/run/dataset.jsonl" and bout is None
    assert argv == ["python3", SCRIPT, "--tokenizer", MODEL["path"], "--stdout", "token-norm-dist",
                    "--num-requests", "40", "--input-mean", "512", "--input-stdev", "0",
                    "--output-mean", "128", "--output-stdev", "0"]
    assert bargv[:6] == ["trtllm-bench", "--model", MODEL["hf_id"], "--model_path", MODEL["path"], "throughput"]
    assert "prepare-dataset" not in " ".join(argv + bargv)


@pytest.mark.parametrize("version", ["1.2.0rc8", "1.3.0rc5", "1.3.0rc13"])
def test_1_2_rc8_and_1_3_use_the_subcommand_with_the_local_path_as_model(version):
    (_, argv, out), _ = steps(version)
    assert out is None
    assert argv[:6] == ["trtllm-bench", "--model", MODEL["path"], "prepare-dataset", "--output",
                        "/r/run/dataset.jsonl"]


def test_1_2_rc6_uses_the_script_unless_the_image_shows_the_subcommand():
    (_, argv, _), _ = steps("1.2.0rc6")
    assert argv[:2] == ["python3", SCRIPT]
    surface = {"prepare_dataset_subcommand": True, "prepare_dataset_script": SCRIPT}
    (_, argv, _), _ = steps("1.2.0rc6", surface=surface)
    assert argv[3] == "prepare-dataset"


def test_an_image_without_any_dataset_maker_is_a_setup_error():
    surface = {"prepare_dataset_subcommand": False, "prepare_dataset_script": None}
    with pytest.raises(runexec.RunSetupError, match="neither"):
        steps("1.1.0rc3", surface=surface)


@pytest.mark.parametrize("version", ["1.1.0rc3", "1.2.0rc6", "1.2.0rc8", "1.3.0rc13"])
def test_latency_never_gets_max_batch_size(version):
    _, (_, bench, _) = steps(version, {**T4, "mode": "latency", "concurrency": 2})
    assert "--max_batch_size" not in bench and bench[5] == "latency" and "--concurrency" in bench


@pytest.mark.parametrize(("version", "mode", "flag"), [
    ("1.1.0rc3", "throughput", "--extra_llm_api_options"), ("1.1.0rc3", "latency", None),
    ("1.2.0rc8", "latency", "--extra_llm_api_options"), ("1.3.0rc13", "throughput", "--config"),
    ("1.3.0rc13", "latency", "--config")])
def test_kv_fraction_uses_the_versions_options_flag(version, mode, flag):
    _, (_, bench, _) = steps(version, {**T4, "mode": mode, "kv_fraction": 0.5})
    assert bench[bench.index("--kv_cache_free_gpu_mem_fraction") + 1] == "0.5"
    others = {"--config", "--extra_llm_api_options"} - {flag}
    assert not others & set(bench)
    if flag:
        assert bench[bench.index(flag) + 1] == "/r/run/extra_llm_api_options.yaml"


def test_a_model_without_path_needs_an_hf_cache_and_then_names_its_id():
    with pytest.raises(runexec.RunSetupError, match="has no path"):
        steps("1.3.0rc13", model={"name": "q", "hf_id": "Qwen/Qwen2.5-0.5B"})
    (_, argv, _), (_, bench, _) = runexec.engine_steps(
        "trtllm", T4, {"name": "q", "hf_id": "Qwen/Qwen2.5-0.5B"}, "/r", "/w", trtllm={"version": "1.3.0rc13"},
        hf_cache=True)
    assert argv[2] == "Qwen/Qwen2.5-0.5B" and "--model_path" not in bench


def test_runs_are_offline_unless_a_cache_is_bound():
    assert trtllm_cli.run_env(None) == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    assert trtllm_cli.run_env("/srv/hf") == {"HF_HOME": "/root/.cache/huggingface"}


def test_run_process_sends_stdout_to_its_file_and_stderr_to_the_log(tmp_path):
    log, out = tmp_path / "prepare.log", tmp_path / "dataset.jsonl"
    code = "import sys; print('{\"task_id\": 0}'); print('tokenizer loaded', file=sys.stderr)"
    result = runexec.run_process([sys.executable, "-c", code], str(log), 30, stdout_path=str(out))
    assert result["rc"] == 0
    assert out.read_text() == '{"task_id": 0}\n'
    text = log.read_text()
    assert "tokenizer loaded" in text and text.splitlines()[0].endswith("> " + str(out))


def test_the_script_standin_writes_what_trtllm_bench_reads(tmp_path):
    dataset = tmp_path / "d.jsonl"
    argv = steps("1.1.0rc3")[0][1]
    argv[1] = str(testimage.STANDINS / "prepare_dataset.py")
    argv[3] = str(tmp_path)
    with dataset.open("w") as fh:
        proc = subprocess.run(argv, stdout=fh, stderr=subprocess.PIPE, text=True,
                              env={"PATH": f"{testimage.STANDINS}:/usr/bin:/bin",
                                   "SPARKFLEET_FAKE_VERSION": "1.1.0rc3"})
    assert proc.returncode == 0, proc.stderr
    assert len(dataset.read_text().splitlines()) == 40


@pytest.mark.parametrize("version", ["1.1.0rc3", "1.3.0rc13"])
def test_engine_probe_reads_a_rootfs(tmp_path, version):
    out = run_module(load_module("engine_probe"), {"rootfs": str(rootfs(tmp_path, version))})
    assert not out.get("failed"), out
    assert out["trtllm"]["version"] == version and out["trtllm"]["unknown_version"] == "refuse"


def test_engine_probe_refuses_an_unknown_version_unless_told_to_warn(tmp_path):
    root = rootfs(tmp_path, "1.3.0rc13")
    (next(root.glob("usr/local/lib/python3*/dist-packages/tensorrt_llm")) / "version.py").write_text(
        '__version__ = "1.4.0rc1"\n')
    refused = run_module(load_module("engine_probe"), {"rootfs": str(root)})
    assert refused["failed"] and "1.4.0rc1 is not a supported version" in refused["msg"]
    warned = run_module(load_module("engine_probe"), {"rootfs": str(root), "unknown_version": "warn"})
    assert not warned.get("failed") and warned["trtllm"]["profile"] == "1.3"
    assert "nearest" not in warned["warnings_list"][0] and "1.4.0rc1" in warned["warnings_list"][0]


# ------------------------------------------------------------------------------- the stand-ins and bench_run


def _standin(args, **env):
    return subprocess.run([str(testimage.STANDINS / "trtllm-bench"), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "SPARKFLEET_FAKE_RUNTIME_S": "0.05", **env}, timeout=60)


def test_the_1_1_standin_refuses_prepare_dataset_as_click_does(tmp_path):
    proc = _standin(["--model", str(tmp_path), "prepare-dataset", "--output", str(tmp_path / "d"), "token-norm-dist",
                     "--num-requests", "2", "--input-mean", "4", "--input-stdev", "0", "--output-mean", "2",
                     "--output-stdev", "0"], SPARKFLEET_FAKE_VERSION="1.1.0rc3")
    assert proc.returncode == 2
    assert proc.stderr.startswith("Usage: trtllm-bench [OPTIONS] COMMAND [ARGS]...\n")
    assert proc.stderr.rstrip().endswith("Error: No such command 'prepare-dataset'.")


@pytest.mark.parametrize("version", ["1.1.0rc3", "1.2.0rc8", "1.3.0rc13"])
def test_every_standin_version_refuses_latency_max_batch_size(tmp_path, version):
    proc = _standin(["--model", "m", "latency", "--dataset", str(tmp_path), "--max_batch_size", "4"],
                    SPARKFLEET_FAKE_VERSION=version)
    assert proc.returncode == 2 and proc.stderr.rstrip().endswith("Error: No such option: --max_batch_size")


def test_the_standin_takes_its_tokenizer_from_a_local_directory_only(tmp_path):
    args = ["prepare-dataset", "--output", str(tmp_path / "d"), "token-norm-dist", "--num-requests", "2",
            "--input-mean", "4", "--input-stdev", "0", "--output-mean", "2", "--output-stdev", "0"]
    hub = _standin(["--model", "meta-llama/Llama-3.1-8B", *args], SPARKFLEET_FAKE_VERSION="1.2.0rc8")
    assert hub.returncode == 1 and "Cannot find a tokenizer" in hub.stdout + hub.stderr
    local = _standin(["--model", str(tmp_path), *args], SPARKFLEET_FAKE_VERSION="1.2.0rc8")
    assert local.returncode == 0 and len((tmp_path / "d").read_text().splitlines()) == 2


def _bare_run(tmp_path, monkeypatch, trtllm, workload=None):
    monkeypatch.setenv("PATH", f"{testimage.STANDINS}:{sys.executable.rsplit('/', 1)[0]}:/usr/bin:/bin")
    monkeypatch.delenv("SPARKFLEET_FAKE_VERSION", raising=False)
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import record
    workload = workload or {"name": "w", "engine": "trtllm", "preset": "T1", "mode": "latency", "batch": 4,
                            "requests": 2, "kv_fraction": 0.5}
    runs = [{"run_id": record.run_id("c1", "h1", "m", "bare", "w", 1), "order_index": 0,
             "model": {"name": "m", "hf_id": "org/m", "path": str(tmp_path)},
             "environment": {"name": "bare", "kind": "bare"}, "workload": workload, "iteration": 1,
             "warmup": False}]
    out = run_module(load_module("bench_run"), {
        "runs": runs, "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
        "cooldown": {"enabled": False}, "timeout_s": 60, "trtllm": trtllm,
        "env": {"SPARKFLEET_FAKE_RUNTIME_S": "0.05", "SPARKFLEET_FAKE_ALLOC_MIB": "1"}})
    assert not out.get("failed"), out
    import json

    return json.loads(open(out["runs"][0]["record_path"]).read())


def test_bench_run_builds_for_the_detected_version_and_records_it(tmp_path, monkeypatch):
    surface = {"prepare_dataset_subcommand": False,
               "prepare_dataset_script": str(testimage.STANDINS / "prepare_dataset.py")}
    rec = _bare_run(tmp_path, monkeypatch, {"version": "1.1.0rc3", "surface": surface, "unknown_version": "refuse"})
    assert rec["status"] == "ok", rec["reason"]
    assert rec["versions"]["trtllm"]["version"] == "1.1.0rc3" and rec["versions"]["trtllm"]["dataset"] == "script"
    assert "--max_batch_size" not in rec["command"] and "latency" in rec["command"]
    run_dir = tmp_path / "results/c1/h1/runs" / rec["run_id"]
    assert "> " + str(run_dir / "dataset.jsonl") in (run_dir / "prepare.log").read_text()
    assert "HF_HUB_OFFLINE=1" in " ".join(rec["command"])  # bare: the env assignments lead the argv


def test_bench_run_with_the_wrong_version_fails_at_the_engines_own_refusal(tmp_path, monkeypatch):
    """Today's command on a 1.1 engine: the stand-in refuses prepare-dataset like click (exit 2)."""
    rec = _bare_run(tmp_path, monkeypatch, {"version": "1.2.0rc8"})
    assert rec["status"] == "failed"
    assert "step prepare exited 2" in rec["reason"] and "No such command 'prepare-dataset'" in rec["reason"]


def test_bench_run_refuses_an_unknown_version_at_setup(tmp_path, monkeypatch):
    rec = _bare_run(tmp_path, monkeypatch, {"version": "0.21.0"})
    assert rec["status"] == "failed" and "0.21.0 is not a supported version" in rec["reason"]


def test_engine_probe_reads_nothing_without_trtllm_runs_and_passes_the_cache_on(tmp_path):
    probe = load_module("engine_probe")
    matmul = [{"workload": {"name": "m", "engine": "matmul"}}]
    skipped = run_module(probe, {"rootfs": str(tmp_path / "absent"), "runs": matmul})
    assert skipped["trtllm"] == {} and "no trtllm runs" in skipped["summary"]
    out = run_module(probe, {"rootfs": str(rootfs(tmp_path, "1.1.0rc3")), "hf_cache_dir": "/srv/hf",
                             "runs": [{"workload": {"name": "t", "engine": "trtllm"}}]})
    assert out["trtllm"]["hf_cache_dir"] == "/srv/hf"
    assert out["summary"] == ("TensorRT-LLM 1.1.0rc3 (profile 1.1): dataset by "
                              f"{SCRIPT} --stdout, options flag --extra_llm_api_options")
