"""trtllm-bench commands built from the image's own CLI: detection (the version as provenance, the command tree
read from the image's click sources), the captured surfaces where no CLI can be read (an offline plan; an
image laid out otherwise), the argv in the spellings the surface offers (dataset by subcommand or by the image's
script, tokenizer from the local path, latency without --max_batch_size, --config vs --extra_llm_api_options),
refusals that name the command or option the CLI lacks, the stdout step, and engine_probe."""

from __future__ import annotations

import copy
import subprocess
import sys
import tarfile

import pytest
import testimage
from _ansible_modules import load_module, run_module

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import trtllm_cli
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run import runexec

MODEL = {"name": "llama", "hf_id": "meta-llama/Llama-3.1-8B", "path": "/models/meta-llama/Llama-3.1-8B"}
T4 = {"name": "T4", "engine": "trtllm", "mode": "throughput", "batch": 4, "input_len": 512, "output_len": 128}
SCRIPT = trtllm_cli.SCRIPT_PATH
#: The captured versions (one per surface) and 1.3.0, past every capture.
VERSIONS = ["1.1.0rc3", "1.2.0rc6", "1.2.0rc8", "1.2.1", "1.3.0rc13", "1.3.0rc29", "1.3.0"]


def rootfs(tmp_path, version):
    """The files the test image adds for ``version``, extracted: an image rootfs as detection sees it."""
    overlay = tmp_path / "overlay.tar"
    testimage._overlay_tar(overlay, version)
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(overlay) as tar:
        tar.extractall(root, filter="data")  # our own tarball, extracted as Python 3.14 will by default
    return root


def package(root):
    return next(root.glob("usr/local/lib/python3*/dist-packages/tensorrt_llm"))


def steps(version, workload=T4, model=MODEL, **kw):
    return runexec.engine_steps("trtllm", workload, model, "/r/run", "/w", trtllm={"version": version, **kw})


def surface_of(version):
    """A copy of the captured programs for ``version`` (a surface to take away from)."""
    return copy.deepcopy(trtllm_cli.captured_for(version)[0]["programs"])


def image(programs, version="9.9.9"):
    """A detect() result of an image whose CLI reads as ``programs``."""
    return {"version": version, "surface": {"read_from": "image", "programs": programs}, "sources": {}}


# ------------------------------------------------------------------------------------------ detection


@pytest.mark.parametrize(("version", "subcommand", "script", "flag"), [
    ("1.1.0rc3", False, True, "--extra_llm_api_options"), ("1.2.0rc6", False, True, "--extra_llm_api_options"),
    ("1.2.0rc8", True, True, "--extra_llm_api_options"), ("1.2.1", True, True, "--extra_llm_api_options"),
    ("1.3.0rc13", True, True, "--config"), ("1.3.0rc29", True, False, "--config")])
def test_detect_reads_the_cli_from_the_images_click_sources(tmp_path, version, subcommand, script, flag):
    found = trtllm_cli.detect(str(rootfs(tmp_path, version)))
    assert found["version"] == version
    assert found["sources"]["version"] == "/usr/local/lib/python3.11/dist-packages/tensorrt_llm/version.py"
    assert found["sources"]["trtllm-bench"].endswith("/tensorrt_llm/commands/bench.py")
    bench = found["surface"]["programs"]["trtllm-bench"]
    assert ("prepare-dataset" in bench["commands"]) is subcommand
    assert {"throughput", "latency"} <= set(bench["commands"]) and "--model" in bench["options"]
    assert ("prepare_dataset.py" in found["surface"]["programs"]) is script
    resolved = trtllm_cli.resolve(found)
    assert resolved["profile"] == "image" and resolved["warnings"] == [] and resolved["config_flag"] == flag
    assert resolved["dataset"] == ("subcommand" if subcommand else "script")


def test_detect_falls_back_to_dist_info_metadata_and_finds_nothing_in_an_empty_root(tmp_path):
    assert trtllm_cli.detect(str(tmp_path))["version"] is None
    lib = tmp_path / "usr/local/lib/python3.12/dist-packages"
    (lib / "tensorrt_llm").mkdir(parents=True)
    (lib / "tensorrt_llm-1.2.0rc6.dist-info").mkdir()
    (lib / "tensorrt_llm-1.2.0rc6.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: tensorrt_llm\n"
                                                                 "Version: 1.2.0rc6\n")
    found = trtllm_cli.detect(str(tmp_path))
    assert found["version"] == "1.2.0rc6" and found["sources"]["version"].endswith("METADATA")


def test_detect_reads_a_version_py_that_prefers_the_bindings_version(tmp_path):
    """Newer trees define __version__ under a condition (the C++ bindings' version, else a literal)."""
    pkg = tmp_path / "usr/local/lib/python3.12/dist-packages/tensorrt_llm"
    pkg.mkdir(parents=True)
    (pkg / "version.py").write_text("_cpp_ver = _get_cpp_version()\nif _cpp_ver is not None:\n    __version__ = "
                                    "_cpp_ver\nelse:\n    __version__ = \"1.3.0rc20\"\n")
    assert trtllm_cli.detect(str(tmp_path))["version"] == "1.3.0rc20"


@pytest.mark.parametrize("claimed", ["0.21.0", "1.3.0", "1.4.0rc1", "2.0.0"])
def test_the_images_cli_decides_whatever_its_version(tmp_path, claimed):
    """A version no capture covers (older, or newer than all) runs when the image's CLI has what is needed."""
    root = rootfs(tmp_path, "1.3.0rc29")
    (package(root) / "version.py").write_text(f'__version__ = "{claimed}"\n')
    resolved = trtllm_cli.resolve(trtllm_cli.detect(str(root)))
    assert (resolved["version"], resolved["profile"], resolved["warnings"]) == (claimed, "image", [])
    (_, prep, _), (_, bench, _) = trtllm_cli.steps(T4 | {"kv_fraction": 0.5}, MODEL, "/r", resolved)
    assert prep[3] == "prepare-dataset" and "--config" in bench


def test_a_version_that_claims_the_subcommand_but_whose_cli_lacks_it_uses_the_script(tmp_path):
    root = rootfs(tmp_path, "1.1.0rc3")
    (package(root) / "version.py").write_text('__version__ = "1.3.0rc13"\n')
    (_, prep, out), _ = trtllm_cli.steps(T4, MODEL, "/r", trtllm_cli.resolve(trtllm_cli.detect(str(root))))
    assert prep[:2] == ["python3", SCRIPT] and out == "/r/dataset.jsonl"


def test_an_image_whose_cli_cannot_be_read_uses_the_captured_surface_and_warns(tmp_path):
    root = rootfs(tmp_path, "1.2.1")
    (package(root) / "commands" / "bench.py").unlink()
    resolved = trtllm_cli.resolve(trtllm_cli.detect(str(root)))
    assert resolved["profile"] == "captured 1.2.1" and resolved["dataset"] == "subcommand"
    assert "could not be read from the image" in resolved["warnings"][0]
    assert "the captured surface 1.2.1 covers it" in resolved["warnings"][0]


def test_only_a_version_older_than_every_capture_without_a_readable_cli_is_refused():
    with pytest.raises(runexec.RunSetupError) as err:
        steps("1.0.0rc4")
    assert "1.0.0rc4: no captured trtllm-bench surface covers it" in str(err.value)
    assert all(v in str(err.value) for v in ("1.1.0rc3", "1.2.1", "1.3.0rcN", "1.3.0rc2x"))
    with pytest.raises(runexec.RunSetupError, match="does not guess"):
        runexec.engine_steps("trtllm", T4, MODEL, "/r", "/w", trtllm={})
    resolved = trtllm_cli.resolve({"version": "1.0.0rc4"}, "warn")
    assert resolved["profile"] == "captured 1.1.0rc3" and "older than every captured" in resolved["warnings"][0]


@pytest.mark.parametrize(("version", "profile", "how"), [
    ("1.2.1", "1.2.1", "covers"), ("1.2.0", "1.2.1", "covers"), ("1.2.0rc6.post3", "1.2.0rc6", "covers"),
    ("1.3.0rc5.post2", "1.3.0rcN", "covers"), ("1.3.0rc19", "1.3.0rcN", "covers"),
    ("1.3.0rc20", "1.3.0rc2x", "covers"), ("1.3.0rc30", "1.3.0rc2x", "covers"),
    ("1.2.0rc7", "1.2.0rc6", "nearest"), ("1.3.0", "1.3.0rc2x", "newest"), ("1.4.0rc1", "1.3.0rc2x", "newest")])
def test_offline_every_version_from_1_1_on_gets_a_captured_surface_without_a_flag(version, profile, how):
    surface, said = trtllm_cli.captured_for(version)
    assert (surface["name"], said) == (profile, how)
    resolved = trtllm_cli.resolve({"version": version})
    assert resolved["profile"] == f"captured {profile}" and resolved["warnings"] == []
    said = {"covers": "covers it", "nearest": "the nearest below it", "newest": "the newest"}[how]
    assert said in resolved["notes"][0]


# --------------------------------------------------------------------------------------------- argv


def test_1_1_makes_its_dataset_with_the_images_script_on_stdout_from_the_local_tokenizer():
    (prep, argv, out), (bench, bargv, bout) = steps("1.1.0rc3")
    assert prep == "prepare" and out == "/r/run/dataset.jsonl" and bout is None
    assert argv == ["python3", SCRIPT, "--tokenizer", MODEL["path"], "--stdout", "token-norm-dist",
                    "--num-requests", "40", "--input-mean", "512", "--input-stdev", "0",
                    "--output-mean", "128", "--output-stdev", "0"]
    assert bargv[:6] == ["trtllm-bench", "--model", MODEL["hf_id"], "--model_path", MODEL["path"], "throughput"]
    assert "prepare-dataset" not in " ".join(argv + bargv)


@pytest.mark.parametrize("version", ["1.2.0rc8", "1.2.1", "1.3.0rc5", "1.3.0rc13", "1.3.0rc29", "1.3.0"])
def test_1_2_rc8_on_use_the_subcommand_with_the_local_path_as_model(version):
    (_, argv, out), _ = steps(version)
    assert out is None
    assert argv[:6] == ["trtllm-bench", "--model", MODEL["path"], "prepare-dataset", "--output",
                        "/r/run/dataset.jsonl"]


def test_1_2_rc6_uses_the_script_unless_the_image_shows_the_subcommand():
    (_, argv, _), _ = steps("1.2.0rc6")
    assert argv[:2] == ["python3", SCRIPT]
    programs = surface_of("1.2.0rc6")
    programs["trtllm-bench"]["commands"]["prepare-dataset"] = surface_of("1.2.0rc8")["trtllm-bench"]["commands"][
        "prepare-dataset"]
    (_, argv, _), _ = trtllm_cli.steps(T4, MODEL, "/r", trtllm_cli.resolve(image(programs, "1.2.0rc6")))
    assert argv[3] == "prepare-dataset"


def test_an_image_without_any_dataset_maker_is_a_setup_error():
    programs = surface_of("1.1.0rc3")
    del programs["prepare_dataset.py"]
    with pytest.raises(trtllm_cli.TrtllmCliError, match="no `prepare-dataset` command and the image has no"):
        trtllm_cli.resolve(image(programs))


@pytest.mark.parametrize("version", VERSIONS)
def test_latency_never_gets_max_batch_size(version):
    _, (_, bench, _) = steps(version, {**T4, "mode": "latency", "concurrency": 2})
    assert "--max_batch_size" not in bench and bench[5] == "latency" and "--concurrency" in bench


@pytest.mark.parametrize(("version", "mode", "flag"), [
    ("1.1.0rc3", "throughput", "--extra_llm_api_options"), ("1.1.0rc3", "latency", None),
    ("1.2.0rc8", "latency", "--extra_llm_api_options"), ("1.2.1", "throughput", "--extra_llm_api_options"),
    ("1.2.1", "latency", "--extra_llm_api_options"), ("1.3.0rc13", "throughput", "--config"),
    ("1.3.0rc13", "latency", "--config"), ("1.3.0rc29", "throughput", "--config"), ("1.3.0", "latency", "--config")])
def test_kv_fraction_uses_the_options_flag_the_surface_offers(version, mode, flag):
    _, (_, bench, _) = steps(version, {**T4, "mode": mode, "kv_fraction": 0.5})
    assert bench[bench.index("--kv_cache_free_gpu_mem_fraction") + 1] == "0.5"
    others = {"--config", "--extra_llm_api_options"} - {flag}
    assert not others & set(bench)
    if flag:
        assert bench[bench.index(flag) + 1] == "/r/run/extra_llm_api_options.yaml"


# ---------------------------------------------------------------------------- refusals that name it


def test_a_surface_without_an_option_a_workload_needs_is_refused_naming_it():
    programs = surface_of("1.3.0rc29")
    del programs["trtllm-bench"]["commands"]["latency"]["options"]["--concurrency"]
    resolved = trtllm_cli.resolve(image(programs, "1.3.1"))
    workload = {**T4, "name": "lat", "mode": "latency", "concurrency": 2}
    with pytest.raises(trtllm_cli.TrtllmCliError) as err:
        trtllm_cli.steps(workload, MODEL, "/r", resolved)
    assert str(err.value) == ("TensorRT-LLM 1.3.1 (its trtllm-bench as read from the image) lacks what workload "
                              "'lat' needs: `trtllm-bench latency` has no option --concurrency")
    assert trtllm_cli.check(workload, resolved) == (["`trtllm-bench latency` has no option --concurrency"], [])
    assert trtllm_cli.steps({**workload, "concurrency": None}, MODEL, "/r", resolved)  # without it: fine


def test_a_surface_without_a_command_or_the_options_file_flag_is_refused_naming_them():
    programs = surface_of("1.2.1")
    del programs["trtllm-bench"]["commands"]["latency"]
    resolved = trtllm_cli.resolve(image(programs))
    assert trtllm_cli.check({**T4, "mode": "latency"}, resolved)[0] == ["`trtllm-bench` has no command `latency`"]
    del programs["trtllm-bench"]["commands"]["throughput"]["options"]["--extra_llm_api_options"]
    missing, _ = trtllm_cli.check({**T4, "kv_fraction": 0.5}, trtllm_cli.resolve(image(programs)))
    assert missing == ["`trtllm-bench throughput` has neither --config nor --extra_llm_api_options (the LLM API "
                       "options file that sizes the KV cache: kv_fraction)"]


def test_extra_args_the_cli_lacks_are_refused_and_a_new_required_option_is_named():
    with pytest.raises(runexec.RunSetupError, match=r"`trtllm-bench throughput` has no option --sim"):
        steps("1.2.1", {**T4, "extra_args": ["--sim"]})
    assert steps("1.3.0rc29", {**T4, "extra_args": ["--sim"]})[1][1][-1] == "--sim"
    programs = surface_of("1.3.0rc29")
    programs["trtllm-bench"]["commands"]["throughput"]["options"]["--tokenizer_dir"] = {"type": "path",
                                                                                       "required": True}
    missing, _ = trtllm_cli.check(T4, trtllm_cli.resolve(image(programs)))
    assert missing == ["`trtllm-bench throughput` requires --tokenizer_dir, which sparkfleet does not pass"]


def test_options_a_partly_read_level_does_not_show_are_unconfirmed_not_refused():
    """A decorator the reader cannot follow may add options: their absence is not a fact, so no refusal."""
    programs = surface_of("1.3.0rc29")
    latency = programs["trtllm-bench"]["commands"]["latency"]
    del latency["options"]["--concurrency"]
    latency["partial"] = ["common_latency_options"]
    resolved = trtllm_cli.resolve(image(programs))
    workload = {**T4, "mode": "latency", "concurrency": 2}
    assert trtllm_cli.check(workload, resolved) == (
        [], ["`trtllm-bench latency` --concurrency (not seen in its sources)"])
    assert "--concurrency" in trtllm_cli.steps(workload, MODEL, "/r", resolved)[1][1]


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


@pytest.mark.parametrize("version", ["1.1.0rc3", "1.2.1", "1.3.0rc13", "1.3.0rc29"])
def test_engine_probe_reads_a_rootfs(tmp_path, version):
    out = run_module(load_module("engine_probe"), {"rootfs": str(rootfs(tmp_path, version))})
    assert not out.get("failed"), out
    assert out["trtllm"]["version"] == version and out["trtllm"]["unknown_version"] == "refuse"
    assert out["trtllm"]["profile"] == "image" and f"TensorRT-LLM {version} (CLI read from the image)" in out["summary"]


def test_engine_probe_runs_a_version_no_capture_covers_when_its_cli_has_what_is_needed(tmp_path):
    root = rootfs(tmp_path, "1.3.0rc29")
    (package(root) / "version.py").write_text('__version__ = "1.4.0rc1"\n')
    out = run_module(load_module("engine_probe"), {"rootfs": str(root), "runs": [{"workload": T4}]})
    assert not out.get("failed") and out["trtllm"]["profile"] == "image" and out["warnings_list"] == []


def test_engine_probe_fails_at_provisioning_naming_what_a_planned_workload_needs(tmp_path):
    root = rootfs(tmp_path, "1.1.0rc3")
    runs = [{"workload": T4}, {"workload": {**T4, "name": "lat", "mode": "latency", "extra_args": ["--config", "x"]}},
            {"workload": {"name": "m", "engine": "matmul"}}]
    out = run_module(load_module("engine_probe"), {"rootfs": str(root), "runs": runs})
    assert out["failed"]
    assert out["msg"] == (f"engine_probe: rootfs {root}: TensorRT-LLM 1.1.0rc3 (its trtllm-bench as read from the "
                          "image) lacks what the planned runs need: workload 'lat': `trtllm-bench latency` has no "
                          "option --config")
    assert not run_module(load_module("engine_probe"), {"rootfs": str(root), "runs": runs[:1]}).get("failed")


def test_engine_probe_warns_when_the_cli_cannot_be_read_and_refuses_an_old_version_unless_told_to_warn(tmp_path):
    root = rootfs(tmp_path, "1.3.0rc13")
    (package(root) / "commands" / "bench.py").unlink()
    out = run_module(load_module("engine_probe"), {"rootfs": str(root)})
    assert not out.get("failed") and out["trtllm"]["profile"] == "captured 1.3.0rcN"
    assert "could not be read from the image" in out["warnings_list"][0]
    (package(root) / "version.py").write_text('__version__ = "1.0.0rc4"\n')
    refused = run_module(load_module("engine_probe"), {"rootfs": str(root)})
    assert refused["failed"] and "1.0.0rc4: its CLI could not be read from the image and no captured" in refused["msg"]
    warned = run_module(load_module("engine_probe"), {"rootfs": str(root), "unknown_version": "warn"})
    assert not warned.get("failed") and warned["trtllm"]["profile"] == "captured 1.1.0rc3"
    assert "1.0.0rc4 is older than every captured" in warned["warnings_list"][0]


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


@pytest.mark.parametrize("version", ["1.1.0rc3", "1.2.0rc8", "1.2.1", "1.3.0rc13", "1.3.0rc29"])
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
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record
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


def test_bench_run_builds_from_the_detected_surface_and_records_it(tmp_path, monkeypatch):
    programs = surface_of("1.1.0rc3")
    programs["prepare_dataset.py"]["path"] = str(testimage.STANDINS / "prepare_dataset.py")  # the image's script
    rec = _bare_run(tmp_path, monkeypatch, {**image(programs, "1.1.0rc3"), "unknown_version": "refuse"})
    assert rec["status"] == "ok", rec["reason"]
    built = rec["versions"]["trtllm"]
    assert (built["version"], built["profile"], built["dataset"]) == ("1.1.0rc3", "image", "script")
    assert built["surface"]["commands"] == ["build", "latency", "throughput"] and built["surface"]["script"]
    assert built["surface"]["sha256"] == trtllm_cli.surface_digest(programs)
    assert "--max_batch_size" not in rec["command"] and "latency" in rec["command"]
    run_dir = tmp_path / "results/c1/h1/runs" / rec["run_id"]
    assert "> " + str(run_dir / "dataset.jsonl") in (run_dir / "prepare.log").read_text()
    assert "HF_HUB_OFFLINE=1" in " ".join(rec["command"])  # bare: the env assignments lead the argv


def test_bench_run_with_the_wrong_version_fails_at_the_engines_own_refusal(tmp_path, monkeypatch):
    """Today's command on a 1.1 engine: the stand-in refuses prepare-dataset like click (exit 2)."""
    rec = _bare_run(tmp_path, monkeypatch, {"version": "1.2.0rc8"})
    assert rec["status"] == "failed"
    assert "step prepare exited 2" in rec["reason"] and "No such command 'prepare-dataset'" in rec["reason"]


def test_bench_run_refuses_at_setup_what_no_surface_can_build(tmp_path, monkeypatch):
    rec = _bare_run(tmp_path, monkeypatch, {"version": "0.21.0"})
    assert rec["status"] == "failed" and "0.21.0: no captured trtllm-bench surface covers it" in rec["reason"]
    programs = surface_of("1.1.0rc3")
    del programs["trtllm-bench"]["commands"]["latency"]["options"]["--num_requests"]
    rec = _bare_run(tmp_path / "b", monkeypatch, image(programs, "1.1.0rc3"))
    assert rec["status"] == "failed" and "`trtllm-bench latency` has no option --num_requests" in rec["reason"]


def test_engine_probe_reads_nothing_without_trtllm_runs_and_passes_the_cache_on(tmp_path):
    probe = load_module("engine_probe")
    matmul = [{"workload": {"name": "m", "engine": "matmul"}}]
    skipped = run_module(probe, {"rootfs": str(tmp_path / "absent"), "runs": matmul})
    assert skipped["trtllm"] == {} and "no trtllm runs" in skipped["summary"]
    out = run_module(probe, {"rootfs": str(rootfs(tmp_path, "1.1.0rc3")), "hf_cache_dir": "/srv/hf",
                             "runs": [{"workload": {"name": "t", "engine": "trtllm"}}]})
    assert out["trtllm"]["hf_cache_dir"] == "/srv/hf"
    assert out["summary"] == ("TensorRT-LLM 1.1.0rc3 (CLI read from the image): dataset by "
                              f"{SCRIPT} --stdout, options flag --extra_llm_api_options")
