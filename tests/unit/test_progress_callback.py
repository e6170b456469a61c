"""The sparkfleet.bench.progress callback under plain ansible-playbook; the `sparkfleet run` display and runner."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet import cli
from sparkfleet.errors import UsageError
from sparkfleet.progress import Display, JsonlTail, Progress, fmt_duration, plain_line
from sparkfleet.runner import RunRequest, parse_env, runner_kwargs

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODULES = REPO / "tests" / "fixtures" / "modules"
FAKE_MATRIX = REPO / "tests" / "fixtures" / "playbooks" / "fake_matrix.yml"


def _env(tmp_path: Path, events: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SPARKFLEET_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_CALLBACKS_ENABLED="sparkfleet.bench.progress", ANSIBLE_LIBRARY=str(MODULES),
               ANSIBLE_NOCOLOR="1", PATH=f"{BIN}:{env.get('PATH', '')}")
    if events is not None:
        env["SPARKFLEET_PROGRESS_FILE"] = str(events)
    env.update(extra)
    return env


def _playbook(playbook: Path, env: dict[str, str], cwd: Path, *args: str,
              inventory: str = "localhost,") -> subprocess.CompletedProcess:
    cmd = [str(BIN / "ansible-playbook"), "-i", inventory, "-c", "local",
           "-e", f"ansible_python_interpreter={sys.executable}", *args, str(playbook)]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def _events(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    assert all(line.startswith("{") and line.endswith("}") for line in lines)  # whole lines only
    return [json.loads(line) for line in lines]


def test_plan_and_runs_are_counted_with_an_eta(tmp_path):
    events_file = tmp_path / "progress.jsonl"
    proc = _playbook(FAKE_MATRIX, _env(tmp_path, events_file, FAKE_MATRIX_CAMPAIGN="c1"), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = _events(events_file)
    kinds = [e["event"] for e in events]
    assert kinds == ["playbook_start", "play_start", "planned", "run", "run", "run", "run", "run", "stats"]
    assert all(isinstance(e["ts"], float) for e in events)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)

    planned = events[2]
    assert planned == {**planned, "host": "localhost", "total": 5, "campaign": "c1",
                       "next_cell": "llama/native/short"}

    runs = [e for e in events if e["event"] == "run"]
    assert [r["done"] for r in runs] == [1, 2, 3, 4, 5]
    assert {r["total"] for r in runs} == {5}
    assert {r["host"] for r in runs} == {"localhost"}
    assert [r["run_id"] for r in runs] == ["r1", "r2", "r3", "r4", "r5"]
    assert [r["cell"] for r in runs] == ["llama/native/short", "llama/docker/short", "qwen/native/short",
                                         "qwen/docker/long", "llama/native/long"]
    assert [r["next_cell"] for r in runs] == ["llama/docker/short", "qwen/native/short", "qwen/docker/long",
                                              "llama/native/long", None]
    assert [r["status"] for r in runs] == ["ok", "ok", "skipped", "ok", "ok"]  # iteration 3 is skipped
    # eta = remaining x mean(duration + cooldown) of the non-skipped runs so far (durations 10,20,[30],40,50; +2)
    assert [r["eta_s"] for r in runs] == [4 * 12, 3 * (12 + 22) / 2, 2 * (12 + 22) / 2,
                                          round(1 * (12 + 22 + 42) / 3, 1), 0]
    etas = [r["eta_s"] for r in runs]
    assert etas[-1] == 0 and all(b <= a * 1.5 for a, b in zip(etas, etas[1:], strict=False))  # monotone-ish
    # The module's own fields come through untouched.
    assert runs[0] | {"duration_s": 10.0, "cooldown_s": 2.0, "model": "llama", "environment": "native",
                      "workload": "short", "iteration": 1, "order_index": 0, "type": "run"} == runs[0]

    stats = events[-1]["hosts"]
    assert stats == {"localhost": {"ok": 3, "changed": 0, "failed": 0, "unreachable": 0, "skipped": 0,
                                   "rescued": 0, "ignored": 0}}


def test_eta_is_null_until_a_run_counted(tmp_path):
    events_file = tmp_path / "progress.jsonl"
    proc = _playbook(FAKE_MATRIX, _env(tmp_path, events_file), tmp_path, "-e", "fake_matrix_skip_iteration=1")
    assert proc.returncode == 0, proc.stderr
    runs = [e for e in _events(events_file) if e["event"] == "run"]
    # r1 and r2 (iteration 1) are skipped: no timing yet, so no ETA; then r3 (32 s) sets it.
    assert [r["eta_s"] for r in runs] == [None, None, 2 * 32, 1 * (32 + 42) / 2, 0]
    assert [r["done"] for r in runs] == [1, 2, 3, 4, 5]


def test_without_a_file_it_does_nothing(tmp_path):
    work = tmp_path / "cwd"
    work.mkdir()
    proc = _playbook(FAKE_MATRIX, _env(tmp_path, None), work)
    assert proc.returncode == 0, proc.stderr
    assert list(work.iterdir()) == []
    assert "sparkfleet.bench.progress" not in proc.stdout + proc.stderr


def test_path_from_the_ini_file(tmp_path):
    events_file = tmp_path / "from-ini.jsonl"
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"""[defaults]
collections_path = {REPO}/.collections
callbacks_enabled = sparkfleet.bench.progress
library = {MODULES}
gathering = explicit

[callback_sparkfleet_progress]
path = {events_file}
""")
    env = _env(tmp_path, None, ANSIBLE_CONFIG=str(cfg))
    del env["ANSIBLE_CALLBACKS_ENABLED"]
    proc = _playbook(FAKE_MATRIX, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [e["event"] for e in _events(events_file)].count("run") == 5


def test_failed_and_unreachable_hosts(tmp_path):
    playbook = tmp_path / "fail.yml"
    playbook.write_text("""
- name: Two runs, the second fails
  hosts: all
  gather_facts: false
  tasks:
    - name: Plan
      ansible.builtin.set_fact:
        sparkfleet_plan:
          - {run_id: a, order_index: 0, iteration: 1, warmup: false,
             model: {name: m}, environment: {name: native}, workload: {name: w}}
          - {run_id: b, order_index: 1, iteration: 1, warmup: false,
             model: {name: m}, environment: {name: docker}, workload: {name: w}}
    - name: Run
      fake_run:
        run: "{{ item }}"
        status: "{{ 'failed' if item.run_id == 'b' else 'ok' }}"
        fail: "{{ item.run_id == 'b' }}"
        duration_s: 5
      loop: "{{ sparkfleet_plan }}"
""")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("good\ngone ansible_connection=ssh ansible_host=127.0.0.1 ansible_port=1\n")
    events_file = tmp_path / "progress.jsonl"
    proc = _playbook(playbook, _env(tmp_path, events_file), tmp_path, inventory=str(inventory))
    assert proc.returncode != 0
    events = _events(events_file)
    runs = [e for e in events if e["event"] == "run"]
    assert [(r["host"], r["run_id"], r["status"], r["done"]) for r in runs] == [
        ("good", "a", "ok", 1), ("good", "b", "failed", 2)]
    failed = [e for e in events if e["event"] == "host_failed"]
    assert [(e["host"], e["task"]) for e in failed] == [("good", "Run")]
    assert failed[0]["msg"] == "fake run b failed"  # the item's message, not "One or more items failed"
    unreachable = [e for e in events if e["event"] == "host_unreachable"]
    assert [e["host"] for e in unreachable] == ["gone"]
    assert "All items completed" not in unreachable[0]["msg"]
    stats = events[-1]
    assert stats["event"] == "stats"
    assert stats["hosts"]["good"]["failed"] == 1 and stats["hosts"]["gone"]["unreachable"] == 1


# ---- the display side of `sparkfleet run` ----------------------------------------------------------
def test_tail_returns_whole_lines_only(tmp_path):
    path = tmp_path / "e.jsonl"
    tail = JsonlTail(path)
    assert tail.read_new() == []  # no file yet
    with path.open("a") as fh:
        fh.write('{"event": "a"}\n{"event": "b"')
    assert tail.read_new() == [{"event": "a"}]
    with path.open("a") as fh:
        fh.write('}\nnot json\n{"event": "c"}\n')
    assert tail.read_new() == [{"event": "b"}, {"event": "c"}]
    assert tail.read_new() == []


def _run_event(host, done, total=3, status="ok", eta=10.0, cell="m/native/w", next_cell="m/docker/w"):
    return {"event": "run", "host": host, "done": done, "total": total, "status": status, "eta_s": eta,
            "cell": cell, "next_cell": next_cell, "duration_s": 4.0}


def test_progress_state_and_render():
    p = Progress()
    p.update({"event": "play_start", "name": "Benchmark matrix"})
    p.update({"event": "planned", "host": "b", "total": 3, "campaign": "c", "next_cell": "m/native/w"})
    p.update({"event": "planned", "host": "a", "total": 3, "next_cell": "m/native/w"})
    p.update(_run_event("a", 1))
    p.update(_run_event("a", 2, status="failed", eta=70))
    p.update({"event": "host_unreachable", "host": "b", "msg": "ssh: connect refused"})
    assert p.hosts["a"].progress == "2/3" and p.hosts["a"].cell == "m/docker/w"
    assert p.hosts["a"].statuses == {"ok": 1, "failed": 1}
    assert p.hosts["b"].state == "unreachable"
    lines = p.render()
    assert "Benchmark matrix" in lines[0] and "campaign c" in lines[0]
    assert lines[1].split() == ["HOST", "RUNS", "STATE", "CURRENT", "CELL", "ETA", "STATUS"]
    assert lines[2].split() == ["a", "2/3", "running", "m/docker/w", "1m10s", "failed=1", "ok=1"]
    assert lines[3].split()[:3] == ["b", "0/3", "unreachable"] and "connect refused" in lines[3]
    p.update(_run_event("a", 3, eta=0, next_cell=None))
    assert p.hosts["a"].state == "done"
    p.update({"event": "stats", "hosts": {"a": {"ok": 4, "changed": 0, "failed": 1, "unreachable": 0},
                                          "b": {"ok": 1, "changed": 0, "failed": 0, "unreachable": 1}}})
    summary = p.summary(2)
    assert summary[0] == "a: ok=4 changed=0 failed=1 unreachable=0 runs=3/3"
    assert summary[-1] == "playbook finished: rc=2"


def test_plain_lines_and_in_place_redraw():
    assert plain_line(_run_event("a", 1)) == "a: run 1/3 m/native/w ok 4.0s eta 10s"
    assert plain_line({"event": "stats", "hosts": {}}) is None
    assert fmt_duration(None) == "-" and fmt_duration(3725) == "1h02m" and fmt_duration(59.6) == "1m00s"

    plain = io.StringIO()
    d = Display(stream=plain, tty=False)
    d.feed([{"event": "planned", "host": "a", "total": 3}, _run_event("a", 1)])
    assert plain.getvalue().splitlines() == ["a: 3 runs planned", "a: run 1/3 m/native/w ok 4.0s eta 10s"]
    assert "\x1b[" not in plain.getvalue()

    tty = io.StringIO()
    d = Display(stream=tty, tty=True, fps=1e9)
    d.feed([{"event": "planned", "host": "a", "total": 3}])
    d.feed([_run_event("a", 1)])
    out = tty.getvalue()
    assert out.count("\x1b[3F\x1b[J") == 1  # the second frame redraws the three lines of the first
    assert out.rstrip().splitlines()[-1].split()[:2] == ["a", "1/3"]

    quiet = io.StringIO()
    d = Display(stream=quiet, tty=True, quiet=True)
    d.feed([_run_event("a", 1)])
    d.close(0)
    assert quiet.getvalue().splitlines() == ["playbook finished: rc=0"]


def test_runner_arguments(tmp_path, monkeypatch):
    monkeypatch.delenv("ANSIBLE_CALLBACKS_ENABLED", raising=False)
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.ini").write_text("a\n")
    (tmp_path / "vars.yml").write_text("x: 1\n")
    req = RunRequest(inventory="inv.ini", playbook=str(FAKE_MATRIX), extra_vars=["k=v w", "@vars.yml"],
                     env=parse_env(["ANSIBLE_LIBRARY=/x", "EMPTY="]))
    kw = runner_kwargs(req, str(tmp_path / "pdd"), str(tmp_path / "ev.jsonl"))
    assert kw["project_dir"] == str(REPO) and kw["playbook"] == str(FAKE_MATRIX)
    assert kw["cmdline"].split(" ", 2)[:2] == ["-i", str(tmp_path / "inv.ini")]
    assert f"-e 'k=v w' -e @{tmp_path / 'vars.yml'}" in kw["cmdline"]
    env = kw["envvars"]
    assert env["ANSIBLE_CONFIG"] == str(REPO / "ansible.cfg")
    assert env["ANSIBLE_CALLBACKS_ENABLED"] == "sparkfleet.bench.progress"
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"  # ansible-runner would turn it off
    assert env["SPARKFLEET_PROGRESS_FILE"] == str(tmp_path / "ev.jsonl")
    assert env["ANSIBLE_LIBRARY"] == "/x" and env["EMPTY"] == ""
    assert runner_kwargs(RunRequest(inventory="h1,h2,"), "/p", "/e")["cmdline"].startswith("-i h1,h2,")

    with pytest.raises(UsageError, match="no such file"):
        runner_kwargs(RunRequest(inventory="inv.ini", extra_vars=["@missing.yml"]), "/p", "/e")
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_env(["novalue"])
    with pytest.raises(UsageError, match="playbook"):
        runner_kwargs(RunRequest(inventory="inv.ini", playbook="nope.yml"), "/p", "/e")


def test_run_with_a_missing_inventory_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "-i", "missing.ini"]) == 2
    err = capsys.readouterr().err
    assert "sparkfleet run: error: inventory missing.ini: no such file or directory" in err


def test_sparkfleet_run_locally_end_to_end(tmp_path):
    """`sparkfleet run` through ansible-runner on localhost: the display's plain lines and the events file."""
    events_file = tmp_path / "ev.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SPARKFLEET_"))}
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp_path / "tmp")
    proc = subprocess.run(
        [sys.executable, "-m", "sparkfleet", "run", "-i", "localhost,", "--playbook", str(FAKE_MATRIX),
         "-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}",
         "--env", f"ANSIBLE_LIBRARY={MODULES}", "--env", "FAKE_MATRIX_CAMPAIGN=local",
         "--json-events", str(events_file)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "localhost: 5 runs planned (campaign local)" in lines
    assert "localhost: run 5/5 llama/native/long ok 50.0s eta 0s" in lines
    assert lines[-1] == "playbook finished: rc=0"
    assert [e["event"] for e in _events(events_file)].count("run") == 5


def _load_callback(path: Path):
    import _ansible_modules  # noqa: F401, PLC0415  (the collection loader)
    from ansible.plugins.loader import callback_loader

    cb = callback_loader.get("sparkfleet.bench.progress")
    cb.set_options(direct={"path": str(path)})
    return cb


class _Result:
    def __init__(self, host: str, result: dict):
        self._host = type("H", (), {"get_name": lambda self: host})()
        self._task = type("T", (), {"get_name": lambda self: "task"})()
        self._result = result


def test_bench_run_shaped_events_without_a_plan(tmp_path):
    """bench_run's event: its own total, record-style dicts for model/environment/workload, check mode."""
    events_file = tmp_path / "e.jsonl"
    cb = _load_callback(events_file)
    model, env, wl = {"name": "llama", "hf_id": "x/y"}, {"name": "native", "kind": "native"}, {"name": "w"}
    check = {"type": "run", "run_id": "c1", "status": "planned"}
    cb.v2_runner_item_on_ok(_Result("h", {"sparkfleet_event": check}))
    for i, status in enumerate(["skipped", "ok", "failed"]):
        ev = {"type": "run", "run_id": f"r{i}", "order_index": i, "total": 4, "status": status,
              "duration_s": 100.0, "cooldown_s": None if i == 1 else 20.0, "model": model, "environment": env,
              "workload": wl, "iteration": i + 1, "warmup": False}
        cb.v2_runner_item_on_ok(_Result("h", {"sparkfleet_event": ev}))
    cb.v2_runner_item_on_ok(_Result("h", {"sparkfleet_event": {**ev, "status": "ok"}}))  # same run_id again
    runs = _events(events_file)
    assert runs[0]["cell"] is None and runs[0]["total"] is None and runs[0]["eta_s"] is None  # no plan, no total
    assert [r["total"] for r in runs[1:]] == [4, 4, 4, 4]
    assert [r["done"] for r in runs] == [1, 2, 3, 4, 4]  # a repeated run_id counts once
    assert runs[1]["cell"] == "llama/native/w" and runs[1]["model"] == model
    # skipped and duration-less runs are not timed; r1 = 100 s (no cooldown), r2 = 120 s
    assert [r["eta_s"] for r in runs] == [None, None, 1 * 100.0, 0.0, 0.0]  # total 4; c1, r0, r1 done


def test_bench_follow_event_lists_are_written_once_each_also_on_retries(tmp_path):
    """bench_follow hands the same finished runs back on every poll (until-retries, then the final result)."""
    events_file = tmp_path / "e.jsonl"
    cb = _load_callback(events_file)
    plan = [{"run_id": f"r{i}", "order_index": i, "model": {"name": "m"}, "environment": {"name": "native"},
             "workload": {"name": f"w{i}"}, "iteration": 1} for i in range(3)]
    # the host's plan as campaign_plan hands it out: its runs, with the async limit and the follower beside them
    cb.v2_runner_on_ok(_Result("h", {"ansible_facts": {"sparkfleet_plan": {"runs": plan, "total": 3,
                                                                           "async_s": 100}}}))

    def ev(i, status="ok", ts=None):
        return {"type": "run", "run_id": f"r{i}", "order_index": i, "status": status, "duration_s": 10.0,
                "cooldown_s": 2.0, "model": "m", "environment": "native", "workload": f"w{i}",
                "finished_ts": ts or f"t{i}"}

    cb.v2_runner_retry(_Result("h", {"finished": False, "sparkfleet_events": [ev(0)]}))
    cb.v2_runner_retry(_Result("h", {"finished": False, "sparkfleet_events": [ev(0), ev(1, "failed")]}))
    # a retried run finishes again (new finish time): written again, counted once
    cb.v2_runner_retry(_Result("h", {"finished": False, "sparkfleet_events": [ev(0), ev(1, "ok", "t1b")]}))
    cb.v2_runner_on_ok(_Result("h", {"finished": True, "sparkfleet_events": [ev(0), ev(1, "ok", "t1b"), ev(2),
                                                                             "junk"]}))
    runs = [e for e in _events(events_file) if e["event"] == "run"]
    assert [(r["run_id"], r["status"]) for r in runs] == [("r0", "ok"), ("r1", "failed"), ("r1", "ok"), ("r2", "ok")]
    assert [r["done"] for r in runs] == [1, 2, 2, 3]
    assert [r["next_cell"] for r in runs] == ["m/native/w1", "m/native/w2", "m/native/w2", None]
    assert runs[0]["eta_s"] == 24.0 and runs[-1]["eta_s"] == 0.0  # (3 - 1) x (10 + 2)
