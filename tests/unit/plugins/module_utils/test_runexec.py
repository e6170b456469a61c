"""The run executor's pieces: argv per engine (never a shell), redaction, provenance, ledger, timeouts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from _ansible_modules import host_util

runexec = host_util("runexec")
trtllm_cli = host_util("trtllm_cli")
ledger = host_util("ledger")

HOSTILE = "m; rm -rf / $(touch /tmp/pwned) `id` 'q' \"d\"\nx"


TRTLLM = {"version": "1.2.0rc8"}  # the per-version argv: tests/unit/test_trtllm_cli.py
LOCAL = {"name": "d", "path": "/m/d"}


def test_trtllm_steps_prepare_a_dataset_then_bench_with_report_json():
    steps = runexec.engine_steps("trtllm", {"name": "T4", "batch": 4, "input_len": 512, "output_len": 128,
                                            "mode": "throughput"},
                                 {"name": "qwen", "hf_id": "Qwen/Qwen2.5-72B-Instruct", "path": "/m/q"}, "/r/run", "/w",
                                 trtllm=TRTLLM)
    (prep_name, prep, prep_out), (bench_name, bench, bench_out) = steps
    assert (prep_name, bench_name, prep_out, bench_out) == ("prepare", "bench", None, None)
    assert prep[:4] == ["trtllm-bench", "--model", "/m/q", "prepare-dataset"]  # the tokenizer: the local path
    assert prep[prep.index("--input-mean") + 1] == "512" and prep[prep.index("--output-mean") + 1] == "128"
    assert bench[:5] == ["trtllm-bench", "--model", "Qwen/Qwen2.5-72B-Instruct", "--model_path", "/m/q"]
    assert bench[5:8] == ["throughput", "--dataset", "/r/run/dataset.jsonl"]
    assert bench[bench.index("--report_json") + 1] == "/r/run/report.json"
    assert bench[bench.index("--max_batch_size") + 1] == "4"


def test_study_workload_uses_its_request_count():
    _, (_, bench, _) = runexec.engine_steps("trtllm", {"name": "study", "requests": 50, "input_len": 128,
                                                       "output_len": 128}, LOCAL, "/r", "/w", trtllm=TRTLLM)
    assert bench[bench.index("--num_requests") + 1] == "50"


def test_hostile_names_stay_single_literal_arguments():
    steps = runexec.engine_steps("matmul", {"name": "matmul", "extra_args": ["--x", HOSTILE]}, {"name": HOSTILE},
                                 "/r", "/w")
    argv = steps[0][1]
    assert argv.count(HOSTILE) == 2  # the model name and the extra argument, each one argv element


def test_unknown_engine_is_a_setup_error():
    with pytest.raises(runexec.RunSetupError, match="engine 'onnx'"):
        runexec.engine_steps("onnx", {"name": "x"}, {"name": "m"}, "/r", "/w")


def test_container_command_binds_labels_and_env_as_argv():
    cmd = runexec.container_command("docker", "sf-x", "sha256:abc", ["--ipc=host"], ["python3", HOSTILE],
                                    {"K": HOSTILE}, "/r/run", [("/r", "/r", False), ("/m", "/m", True)],
                                    {"sparkfleet.run_id": "x"})
    assert cmd[:5] == ["docker", "run", "--name", "sf-x", "--init"]
    assert "type=bind,source=/m,target=/m,readonly" in cmd and f"K={HOSTILE}" in cmd
    assert cmd[-3:] == ["sha256:abc", "python3", HOSTILE]


def test_gpu_flags_are_dropped_on_hosts_without_a_gpu():
    assert runexec.strip_gpu_flags(["--gpus", "all", "--ipc=host", "--gpus=1"]) == ["--ipc=host"]


def test_secrets_are_redacted_from_recorded_commands():
    argv = ["trtllm-bench", "--hf_token", "hf_abc", "--api-key=sk-1", "HF_TOKEN=hf_x", "--model", "m"]
    assert runexec.redact(argv) == ["trtllm-bench", "--hf_token", "***", "--api-key=***", "HF_TOKEN=***",
                                    "--model", "m"]


@pytest.mark.parametrize("arg", [
    "HF_TOKEN=hf_x", "HUGGING_FACE_HUB_TOKEN=hf_x", "OPENAI_API_KEY=sk", "AWS_SECRET_ACCESS_KEY=a", "PASSWORD=p",
    "DB_PASSWD=p", "GITHUB_PAT=p", "NGC_API_KEY=k", "hfToken=t", "GHTOKEN=t", "MY_APIKEY=k", "CLIENT_SECRET=s",
    "--hf_token=t", "--hf-token=t", "--password=p", "--auth=x"])
def test_secret_assignments_stay_hidden(arg):
    assert runexec.redact(["x", arg]) == ["x", arg.split("=", 1)[0] + "=***"]


@pytest.mark.parametrize("arg", [
    "TOKENIZERS_PARALLELISM=false", "--max_num_tokens=8192", "AUTHOR=me", "KEY_SIZE=3", "MAX_TOKENS=5",
    "--kv_cache_free_gpu_mem_fraction=0.9", "PATH=/usr/bin", "--model_path=/m"])
def test_ordinary_variables_are_not_hidden(arg):
    assert runexec.redact(["x", arg]) == ["x", arg]


def test_docker_env_of_an_ordinary_variable_is_kept_and_of_a_secret_hidden():
    argv = ["docker", "run", "--env", "TOKENIZERS_PARALLELISM=false", "--env", "HF_TOKEN=hf_x",
            "--max_num_tokens", "8192", "--hf_token", "hf_y"]
    assert runexec.redact(argv) == ["docker", "run", "--env", "TOKENIZERS_PARALLELISM=false", "--env",
                                    "HF_TOKEN=***", "--max_num_tokens", "8192", "--hf_token", "***"]


@pytest.mark.parametrize(("loaded", "ok"), [
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", True), ("DeepSeek-R1-Distill-Qwen-7B", True),
    ("/data/models/deepseek-ai/DeepSeek-R1-Distill-Qwen-7B/", True), ("deepseek", True), (None, True),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", False), ("Qwen/Qwen2.5-72B-Instruct", False)])
def test_model_provenance(loaded, ok):
    requested = {"name": "deepseek", "hf_id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
                 "path": "/data/models/deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"}
    assert runexec.model_matches(requested, loaded) is ok


def test_run_process_kills_the_whole_group_at_the_timeout(tmp_path):
    log = tmp_path / "bench.log"
    marker = tmp_path / "child-alive"
    script = f"sleep 30 & echo $! > {marker}; wait"
    started = time.monotonic()
    out = runexec.run_process(["bash", "-c", script], str(log), timeout_s=1)
    assert out["timed_out"] and time.monotonic() - started < 15
    child = int(marker.read_text())
    time.sleep(0.2)
    status = Path(f"/proc/{child}/status")
    assert not status.exists() or "zombie" in status.read_text().lower()
    assert log.read_text().startswith("$ bash -c ")


def test_ledger_last_event_wins_and_a_torn_line_is_skipped(tmp_path):
    path = str(tmp_path / "ledger.jsonl")
    ledger.append_event(path, "started", "r1")
    ledger.append_event(path, "finished", "r1", status="ok")
    ledger.append_event(path, "started", "r2")
    with open(path, "a") as fh:
        fh.write('{"event": "finished", "run_id": "r2", "sta')  # the controller died mid-write
    states = ledger.run_states(path)
    assert states["r1"]["event"] == "finished" and states["r1"]["status"] == "ok"
    assert states["r2"]["event"] == "started"
    assert all(json.loads(line) for line in Path(path).read_text().splitlines()[:3])


def test_kv_fraction_goes_through_the_llm_api_options_file_and_the_cli():
    workload = {"name": "study", "engine": "trtllm", "requests": 5, "kv_fraction": 0.5}
    _, (_, bench, _) = runexec.engine_steps("trtllm", workload, LOCAL, "/r/run", "/w", trtllm=TRTLLM)
    assert bench[bench.index("--extra_llm_api_options") + 1] == "/r/run/extra_llm_api_options.yaml"
    assert bench[bench.index("--kv_cache_free_gpu_mem_fraction") + 1] == "0.5"
    assert trtllm_cli.llm_api_options(workload) == "kv_cache_config:\n  free_gpu_memory_fraction: 0.5\n"
    assert trtllm_cli.llm_api_options({"engine": "trtllm"}) is None
    assert trtllm_cli.llm_api_options({"engine": "matmul", "kv_fraction": 0.5}) is None
    _, (_, plain, _) = runexec.engine_steps("trtllm", {"name": "study"}, LOCAL, "/r/run", "/w", trtllm=TRTLLM)
    assert "--extra_llm_api_options" not in plain


def test_kv_fraction_conflicts_are_setup_errors():  # its range is the campaign's to check, once
    workload = {"kv_fraction": 0.5, "extra_args": ["--extra_llm_api_options", "/x.yaml"]}
    with pytest.raises(runexec.RunSetupError):
        runexec.engine_steps("trtllm", {"name": "w", **workload}, LOCAL, "/r", "/w", trtllm=TRTLLM)


# ------------------------------------------------------------------------------------- a bare run's PATH


def _fake_login_shell(tmp_path, monkeypatch, body: str) -> Path:
    """The user's login shell (the password database's) replaced by a script: ``body`` runs before the command
    it is given with -l -c (a profile that prints a banner and sets PATH, say)."""
    import pwd
    import types

    shell = tmp_path / "login-shell"
    shell.write_text(f"#!/bin/sh\n# $1 is -l, $2 is -c\n{body}\nexec /bin/sh -c \"$3\"\n")
    shell.chmod(0o755)
    real = pwd.getpwuid(0)
    monkeypatch.setattr(runexec.pwd, "getpwuid", lambda uid: types.SimpleNamespace(pw_shell=str(shell),
                                                                                  pw_dir=real.pw_dir))
    monkeypatch.setattr(runexec, "_LOGIN_PATHS", {})
    return shell


def test_the_login_shells_path_is_read_through_its_banner(tmp_path, monkeypatch):
    _fake_login_shell(tmp_path, monkeypatch, 'echo "Welcome to the Spark"\nPATH=/opt/engines/bin:/usr/bin\n'
                                             'export PATH')
    assert runexec.login_path() == ("/opt/engines/bin:/usr/bin", None)
    _fake_login_shell(tmp_path, monkeypatch, "exit 3")
    path, why = runexec.login_path()
    assert path is None and why.endswith("login-shell -l exited 3 without saying its PATH")


def test_a_bare_runs_path_is_the_login_shells_then_the_modules_then_the_usual_places(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    got = runexec.host_path(login="/opt/e/bin:/usr/bin:relative", module_path="/venv/bin:/usr/bin:/bin")
    assert got.split(":") == ["/opt/e/bin", "/usr/bin", "/venv/bin", "/bin", f"{tmp_path}/.local/bin",
                              "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/sbin"]


def test_a_bare_command_finds_its_engine_on_the_hosts_path_or_names_what_it_searched(tmp_path, monkeypatch):
    engines = tmp_path / "engines"
    engines.mkdir()
    (engines / "llama-server").write_text("#!/bin/sh\n")
    (engines / "llama-server").chmod(0o755)
    _fake_login_shell(tmp_path, monkeypatch, f"PATH={engines}:/usr/bin; export PATH")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # Ansible's minimal PATH: not where the engine is
    cmd = runexec.bare_command(["llama-server", "-m", "/m/t.gguf"], {"A": "1"}, "/r")
    path = next(a for a in cmd if a.startswith("PATH="))[5:]
    assert cmd[:4] == ["/usr/bin/env", "-C", "/r", "A=1"] and cmd[-3:] == ["llama-server", "-m", "/m/t.gguf"]
    assert path.split(":")[0] == str(engines)
    env, exe = runexec.bare_env(["llama-server"], {})
    assert exe == str(engines / "llama-server") and env["PATH"] == path
    with pytest.raises(runexec.RunSetupError) as err:
        runexec.bare_env(["vllm", "serve"], {})
    assert str(err.value).startswith(f"bare run: vllm not found on the host's PATH: its login shell's, the "
                                     f"module's, ~/.local/bin and the system directories ({engines}:/usr/bin:")
    # a PATH the workload or the inventory gives is the one searched, and kept as given
    with pytest.raises(runexec.RunSetupError, match=r"llama-server not found on the PATH the workload's env or "
                                                    r"sparkfleet_workload_env gives \(/nowhere\)"):
        runexec.bare_env(["llama-server"], {"PATH": "/nowhere"})
    assert runexec.bare_env(["llama-server"], {"PATH": str(engines)})[0]["PATH"] == str(engines)
    assert runexec.bare_env(["/nowhere/srv"], {}, check=False)[1] is None
