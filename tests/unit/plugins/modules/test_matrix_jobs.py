"""Matrix jobs: the registry (sparkfleet_jobs), bench_stop, and bench_run's whole-plan call and SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module

# importable once _ansible_modules has installed the collection loader
jobs = host_util("jobs")
record = host_util("record")

# A process that registers itself as a matrix job and runs a workload in its own session, as bench_run does.
JOB = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run import jobs as sparkfleet_jobs
    if sys.argv[2] == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    with sparkfleet_jobs.JobRegistration(sys.argv[1], "c1", "h1") as job:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # as run_process: no stop before the try
        child = subprocess.Popen(["sleep", "300"], start_new_session=True)
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            job.running("r1", child_pgid=child.pid)
            print(child.pid, flush=True)
            time.sleep(300)
        finally:
            os.killpg(child.pid, signal.SIGKILL)
""")


def _start_job(tmp_path: Path, mode: str):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "results"), mode], stdout=subprocess.PIPE,
                            text=True)
    child = int(proc.stdout.readline())
    return proc, child


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _gone(pid: int, within_s: float = 10) -> bool:
    """A killed process may take a moment to die on a loaded machine."""
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_registration_comes_and_goes_with_the_job(tmp_path):
    root = str(tmp_path)
    with jobs.JobRegistration(root, "c1", "h1") as job:
        (entry,) = jobs.list_jobs(root)
        assert entry["pid"] == os.getpid() and entry["alive"] and entry["campaign"] == "c1"
        job.running("r1", child_pgid=os.getpid(), container="sf-r1", docker="docker")
        (entry,) = jobs.list_jobs(root)
        assert entry["run_id"] == "r1" and entry["container"] == "sf-r1" and entry["child_ticks"]
    assert jobs.list_jobs(root) == []


def test_a_reused_pid_is_not_taken_for_the_job(tmp_path):
    root = str(tmp_path)
    with jobs.JobRegistration(root, "c1", "h1"):
        path = Path(jobs.jobs_dir(root), f"{os.getpid()}.json")
        entry = json.loads(path.read_text())
        entry["start_ticks"] -= 1  # the same pid number, another process
        path.write_text(json.dumps(entry))
        (listed,) = jobs.list_jobs(root)
        assert listed["alive"] is False
        assert jobs.stop_job(listed, grace_s=1)["how"] == "gone"  # and this process was not signalled
        assert not path.exists()


def test_stop_terminates_a_job_that_honours_sigterm(tmp_path):
    proc, child = _start_job(tmp_path, "honour")
    try:
        (entry,) = jobs.list_jobs(str(tmp_path / "results"))
        assert entry["alive"] and entry["child_pgid"] == child
        out = jobs.stop_job(entry, grace_s=10)
        assert out == {"pid": proc.pid, "campaign": "c1", "run_id": "r1", "how": "terminated"}
        proc.wait(timeout=10)
        assert _gone(child)  # the job ended its own workload
        assert jobs.list_jobs(str(tmp_path / "results")) == []
    finally:
        proc.kill()


def test_stop_kills_a_job_that_ignores_sigterm_and_its_workload(tmp_path):
    proc, child = _start_job(tmp_path, "ignore")
    try:
        (entry,) = jobs.list_jobs(str(tmp_path / "results"))
        out = jobs.stop_job(entry, grace_s=0.5)
        assert out["how"] == "killed"
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert _gone(child)  # SIGKILL gave the job no chance: the stop ended the workload itself
    finally:
        proc.kill()
        subprocess.run(["pkill", "-KILL", "-g", str(child)], capture_output=True)


def test_bench_stop_module_stops_only_the_named_campaign(tmp_path):
    proc, _child = _start_job(tmp_path, "honour")
    try:
        bench_stop = load_module("bench_stop")
        args = {"results_root": str(tmp_path / "results"), "grace_s": 10}
        other = run_module(bench_stop, {**args, "campaign": "another"})
        assert other["changed"] is False and other["stopped"] == []
        planned = run_module(bench_stop, args, check_mode=True)
        assert planned["changed"] is True and planned["stopped"][0]["how"] == "would stop"
        assert proc.poll() is None
        done = run_module(bench_stop, {**args, "campaign": "c1"})
        assert done["changed"] is True and [s["how"] for s in done["stopped"]] == ["terminated"]
        assert proc.wait(timeout=10) == 0
        again = run_module(bench_stop, args)
        assert again["changed"] is False and again["stopped"] == []
    finally:
        proc.kill()


# ------------------------------------------------------------------------------------------ bench_run


# The bare host's trtllm-bench is the 1.1.0rc3 stand-in: datasets come from the script stand-in, the tokenizer
# from the model's local directory (any directory serves the stand-ins).
TRTLLM = {"version": "1.1.0rc3", "surface": {"prepare_dataset_script": str(STANDINS / "prepare_dataset.py")}}
MODEL = {"name": "m", "path": str(STANDINS)}


def _plan(campaign: str, host: str, n: int) -> list[dict]:
    runs = []
    for i in range(1, n + 1):
        runs.append({"run_id": record.run_id(campaign, host, "m", "bare", "w", i), "order_index": i - 1,
                     "model": MODEL, "environment": {"name": "bare", "kind": "bare"},
                     "workload": {"name": "w", "engine": "trtllm", "preset": "T1", "requests": 2},
                     "iteration": i, "warmup": False})
    return runs


def _args(tmp_path: Path, runs: list, runtime: float) -> dict:
    return {"runs": runs, "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
            "cooldown": {"enabled": False}, "timeout_s": 60, "trtllm": TRTLLM,
            "env": {"SPARKFLEET_FAKE_RUNTIME_S": str(runtime), "SPARKFLEET_FAKE_ALLOC_MIB": "1"}}


@pytest.fixture
def standin_path(monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDINS}:{os.environ['PATH']}")


def test_bad_runs_are_refused_before_anything_runs(tmp_path):
    bench_run = load_module("bench_run")
    good = _plan("c1", "h1", 2)
    for runs, message in (([good[0], {"run_id": "x"}], "missing key 'model'"),
                          ([good[0], "not a dict"], "unable to convert to dict"),
                          ([good[0], good[0]], "planned twice"),
                          ([good[0], {**good[1], "run_id": "c1__h1__forged"}], "does not match its identity")):
        out = run_module(bench_run, _args(tmp_path, runs, 0.1))
        assert out.get("failed") and message in out["msg"], out
    assert not (tmp_path / "results" / "c1").exists()  # nothing was started, not even the ledger


def test_one_call_runs_the_whole_plan_then_skips_it(tmp_path, standin_path):
    bench_run = load_module("bench_run")
    args = _args(tmp_path, _plan("c1", "h1", 3), 0.1)
    out = run_module(bench_run, args)
    assert not out.get("failed"), out
    assert out["counts"] == {"ok": 3} and out["changed"] is True
    assert [e["order_index"] for e in out["sparkfleet_events"]] == [0, 1, 2]
    ledger_path = tmp_path / "results/c1/h1/ledger.jsonl"
    ledger = [json.loads(line) for line in ledger_path.read_text().splitlines()]
    assert ledger[0]["event"] == "job" and ledger[0]["skipped"] == 0 and "run_id" not in ledger[0]
    finished = [e for e in ledger if e["event"] == "finished"]
    assert [e["status"] for e in finished] == ["ok"] * 3
    assert all(e["duration_s"] > 0 and e["workload"] == "w" and e["environment"] == "bare" for e in finished)
    before = ledger_path.read_bytes()
    again = run_module(load_module("bench_run"), args)
    assert again["counts"] == {"skipped": 3} and again["changed"] is False
    assert ledger_path.read_bytes() == before  # nothing to do: the ledger is left as it was
    assert not list(Path(tmp_path, "results/.sparkfleet/jobs").glob("*.json"))


def test_sigterm_ends_the_workload_and_leaves_the_run_for_a_resume(tmp_path, standin_path):
    runner = tmp_path / "run_module.py"
    args_file = tmp_path / "args.json"
    runs = _plan("c1", "h1", 2)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": _args(tmp_path, runs, 60)}))
    runner.write_text(textwrap.dedent(f"""
        import runpy, sys
        sys.argv = ["bench_run", {str(args_file)!r}]
        runpy.run_module("ansible_collections.sparkfleet.bench.plugins.modules.bench_run", run_name="__main__")
    """))
    proc = subprocess.Popen([sys.executable, str(runner)], stdout=subprocess.PIPE, text=True)
    ledger = tmp_path / "results/c1/h1/ledger.jsonl"
    jobs_dir = Path(jobs.jobs_dir(str(tmp_path / "results")))
    try:
        deadline = time.monotonic() + 60
        entry = {}
        while not entry.get("child_pgid") and time.monotonic() < deadline:
            time.sleep(0.1)
            listed = jobs.list_jobs(str(tmp_path / "results"))
            entry = listed[0] if listed else {}
        assert entry.get("run_id") == runs[0]["run_id"], entry
        workload = entry["child_pgid"]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    result = json.loads(out.strip().splitlines()[-1])
    assert result["failed"] and "stopped by signal 15 after 0 of 2 runs" in result["msg"]
    assert _gone(workload)
    assert not list(jobs_dir.glob("*.json"))
    events = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [e["event"] for e in events] == ["job", "started"]  # unfinished: a resume runs it again
    resumed = run_module(load_module("bench_run"), _args(tmp_path, runs, 0.1))
    assert resumed["counts"] == {"ok": 2}
    assert list((tmp_path / "results/c1/h1/runs").glob("*.interrupted-1"))
