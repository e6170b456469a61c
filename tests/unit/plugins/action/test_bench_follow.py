"""bench_follow: reading a background matrix job's state from one shell command, and the action's loop."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail

REPO = Path(__file__).resolve().parents[4]
follow = importlib.import_module("ansible_collections.sparkfleet.bench.plugins.action.bench_follow")


def _line(**entry) -> str:
    return json.dumps(entry) + "\n"


def _finished(rid, status="ok", ts="t", **kw):
    return {"event": "finished", "run_id": rid, "status": status, "ts": ts, "duration_s": 2.0, "cooldown_s": 0.5,
            "model": "m", "environment": "native", "workload": "w", "iteration": 1, **kw}


def _sh(cmd: str) -> str:
    return subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, check=True).stdout


# ------------------------------------------------------------------------------------------- pure parts


def test_command_reads_job_file_ledger_and_live_pids_with_hostile_paths(tmp_path):
    base = tmp_path / "a dir; $(touch pwned) 'q'"
    jobs = base / "jobs"
    jobs.mkdir(parents=True)
    (base / "job").write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1"}))
    (base / "ledger.jsonl").write_text(_line(event="started", run_id="r1") + '{"torn": ')
    (jobs / f"{os.getpid()}.json").write_text("{}")
    (jobs / "999999999.json").write_text("{}")  # no such pid: not alive
    out = _sh(follow.follow_command(str(base / "job"), str(base / "ledger.jsonl"), str(jobs)))
    state = follow.parse_follow_output(out)
    assert state["job"] == {"started": 1, "finished": 0, "ansible_job_id": "j1"}
    assert state["events"] == [{"event": "started", "run_id": "r1"}]  # the torn last line is left for later
    assert state["alive"] == [os.getpid()]
    assert not (Path.cwd() / "pwned").exists() and not (tmp_path / "pwned").exists()


def test_command_on_a_host_with_nothing_yet(tmp_path):
    out = _sh(follow.follow_command(str(tmp_path / "nojob"), str(tmp_path / "noledger"), str(tmp_path / "nojobs")))
    assert follow.parse_follow_output(out) == {"job": None, "events": [], "alive": []}


def test_half_written_job_file_is_not_taken_for_a_result():
    mark = follow.MARK
    state = follow.parse_follow_output(f"{mark} job\n{{\"changed\": tr\n{mark} ledger\n{mark} alive\n")
    assert state["job"] is None and not follow.job_finished(state["job"])


@pytest.mark.parametrize(("job", "done"), [
    ({"started": 1, "finished": 0, "ansible_job_id": "1"}, False),
    ({"changed": True, "runs": []}, True),
    ({"failed": True, "msg": "boom"}, True),
    (None, False),
])
def test_job_finished(job, done):
    assert follow.job_finished(job) is done


def test_progress_events_last_finish_wins_and_earlier_jobs_runs_are_skipped():
    events = [
        {"event": "job", "pid": 1}, {"event": "started", "run_id": "a"}, _finished("a", ts="1"),
        {"event": "started", "run_id": "b"}, _finished("b", "failed", ts="2"),
        {"event": "job", "pid": 2},  # a resume with retry_failed: a was done before, b is run again
        {"event": "started", "run_id": "b"}, _finished("b", "ok", ts="3"),
    ]
    out = follow.progress_events(events, total=2)
    assert [(e["run_id"], e["status"], e["previous_status"], e["finished_ts"]) for e in out] == [
        ("a", "skipped", "ok", "1"), ("b", "ok", None, "3")]
    assert all(e["type"] == "run" and e["total"] == 2 and e["duration_s"] == 2.0 for e in out)


def test_current_run_is_the_one_started_and_not_finished():
    events = [{"event": "started", "run_id": "a"}, _finished("a"), {"event": "started", "run_id": "b"}]
    assert follow.current_run(events) == "b"
    assert follow.current_run(events + [_finished("b")]) is None


def test_final_events_are_the_jobs_own_with_the_ledgers_finish_time():
    result = {"sparkfleet_events": [{"run_id": "a", "status": "skipped"}, {"run_id": "b", "status": "ok"}, "junk"]}
    out = follow.final_events(result, [_finished("a", ts="1"), _finished("b", ts="2")])
    assert out == [{"run_id": "a", "status": "skipped", "finished_ts": "1"},
                   {"run_id": "b", "status": "ok", "finished_ts": "2"}]


# ------------------------------------------------------------------------------------------ the action


class _Host:
    """A local 'host': the action's low-level commands run through /bin/sh here."""

    def __init__(self, tmp_path: Path):
        self.dir = tmp_path
        self.job = tmp_path / "async" / "j1"
        self.job.parent.mkdir()
        self.ledger = tmp_path / "ledger.jsonl"
        self.jobs = tmp_path / "jobs"
        self.jobs.mkdir()
        self.commands = 0
        self.shown: list[str] = []

    def execute(self, cmd, **_kw):
        self.commands += 1
        proc = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True)
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    def register_alive(self):
        (self.jobs / f"{os.getpid()}.json").write_text("{}")

    def append(self, **entry):
        with self.ledger.open("a") as fh:
            fh.write(_line(**entry))


def _action(host: _Host, register="matrix_follow", **args):
    action = follow.ActionModule.__new__(follow.ActionModule)
    merged = {"job": {"results_file": str(host.job), "ansible_job_id": "j1"}, "ledger": str(host.ledger),
              "jobs_dir": str(host.jobs), "total": 2, "poll_interval_s": 0.05, "report_after_s": 5}
    merged.update(args)
    action._task = SimpleNamespace(args=merged, register=register)
    action._low_level_execute_command = host.execute
    action._display = SimpleNamespace(display=host.shown.append)
    return action


@pytest.fixture
def no_base_run(monkeypatch):
    monkeypatch.setattr(follow.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})


def test_returns_when_a_run_finishes_then_with_the_jobs_result(tmp_path, no_base_run):
    host = _Host(tmp_path)
    host.register_alive()
    host.job.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1"}))
    host.append(event="job", pid=os.getpid())
    host.append(event="started", run_id="a")

    def later():
        time.sleep(0.3)
        host.append(**_finished("a", ts="1"))
    threading.Thread(target=later).start()
    started = time.monotonic()
    first = _action(host).run(task_vars={"inventory_hostname": "spark1"})
    assert time.monotonic() - started < 4  # returned on the finished run, not after report_after_s
    assert first["finished"] is False and first["done"] == 1 and first["current"] is None
    assert [e["run_id"] for e in first["sparkfleet_events"]] == ["a"]
    assert host.shown == ["spark1: run 1/2 ok in 2.0 s (m/native/w #1)"]  # plain ansible-playbook shows it

    host.append(**_finished("b", ts="2"))
    events = [{"run_id": "a", "status": "ok"}, {"run_id": "b", "status": "ok"}]
    host.job.write_text(json.dumps({"changed": True, "counts": {"ok": 2}, "runs": [{"run_id": "a"}, {"run_id": "b"}],
                                    "sparkfleet_events": events, "invocation": {"module_args": {}}}))
    # Ansible hands the previous attempt's registered result to the next one: what it printed is not reprinted.
    first.update(attempts=1)
    last = _action(host).run(task_vars={"inventory_hostname": "spark1", "matrix_follow": first})
    assert last["finished"] is True and last["changed"] is True and last["counts"] == {"ok": 2}
    assert "invocation" not in last and not last.get("failed")
    assert [(e["run_id"], e["finished_ts"]) for e in last["sparkfleet_events"]] == [("a", "1"), ("b", "2")]
    assert not host.job.exists()  # the async job file is cleaned up, as async_status cleanup would
    # each finished run printed once over the retries, the last one too
    assert host.shown == ["spark1: run 1/2 ok in 2.0 s (m/native/w #1)", "spark1: run 2/2 ok in 2.0 s (m/native/w #1)"]


# ansible-core 2.19 keeps `register:` as the name, 2.21 as {name: expression} (a register projection).
@pytest.mark.parametrize("register", ["matrix_follow", {"matrix_follow": "_task.polymorphic_result"}])
def test_a_first_attempt_prints_every_finished_run_whatever_an_earlier_run_of_the_task_registered(
        tmp_path, no_base_run, register):
    host = _Host(tmp_path)
    host.register_alive()
    host.job.write_text(json.dumps({"started": 1, "finished": 0}))
    host.append(**_finished("a", ts="1"))
    host.append(event="started", run_id="b")
    earlier = {"finished": True, "done": 5, "attempts": 3}  # the task's result from an earlier play
    out = _action(host, register, report_after_s=0.2).run(task_vars={"inventory_hostname": "s",
                                                                       "matrix_follow": earlier})
    assert out["done"] == 1 and host.shown == ["s: run 1/2 ok in 2.0 s (m/native/w #1)"]
    retry = dict(out, attempts=1)
    again = _action(host, register, report_after_s=0.2).run(task_vars={"inventory_hostname": "s",
                                                                         "matrix_follow": retry})
    assert [e["run_id"] for e in again["sparkfleet_events"]] == ["a"]  # every finished run, every time
    assert host.shown == ["s: run 1/2 ok in 2.0 s (m/native/w #1)"]  # printed once


def test_reports_after_a_while_without_a_finished_run(tmp_path, no_base_run):
    host = _Host(tmp_path)
    host.register_alive()
    host.job.write_text(json.dumps({"started": 1, "finished": 0}))
    host.append(event="started", run_id="a")
    started = time.monotonic()
    out = _action(host, report_after_s=0.4).run(task_vars={})
    assert 0.4 <= time.monotonic() - started < 3
    assert out["finished"] is False and out["current"] == "a" and out["done"] == 0
    assert host.commands >= 3  # it polled in between


def test_a_failed_job_fails_the_task_with_its_message(tmp_path, no_base_run):
    host = _Host(tmp_path)
    host.job.write_text(json.dumps({"failed": True, "msg": "spark1: stopped by signal 15 after 1 of 2 runs",
                                    "runs": [{"run_id": "a", "status": "ok"}]}))
    out = _action(host).run(task_vars={})
    assert out["finished"] is True and out["failed"] is True and "stopped by signal 15" in out["msg"]


def test_a_job_that_died_without_a_result_is_called_lost(tmp_path, no_base_run):
    host = _Host(tmp_path)
    host.job.write_text(json.dumps({"started": 1, "finished": 0}))
    (host.jobs / "999999999.json").write_text("{}")  # registered, but that process is gone
    host.append(**_finished("a", ts="1"))
    out = _action(host, lost_after_s=0.3).run(task_vars={})
    assert out["finished"] is True and out["failed"] is True
    assert "the matrix job is gone" in out["msg"] and "resume" in out["msg"]
    assert [e["run_id"] for e in out["sparkfleet_events"]] == ["a"]  # what it finished is still reported


@pytest.mark.parametrize(("args", "message"), [
    ({"job": {"changed": False}}, "results_file"),
    ({"job": "j1"}, "results_file"),
    ({"ledger": ""}, "ledger is required"),
    ({"poll_interval_s": "soon"}, "poll_interval_s.*float"),
    ({"report_after_s": 0}, "report_after_s must be positive"),
    ({"total": "many"}, "total.*int"),
    ({"follow": True}, "follow"),
])
def test_bad_arguments_are_named(tmp_path, no_base_run, args, message):
    with pytest.raises(AnsibleActionFail, match=message):
        _action(_Host(tmp_path), **args).run(task_vars={})


def test_progress_line_names_host_count_status_time_and_cell():
    event = {"status": "ok", "duration_s": 10.64, "model": "llama", "environment": "native", "workload": "T1",
             "iteration": 2}
    assert follow.progress_line("spark1", event, 3, 6) == "spark1: run 3/6 ok in 10.6 s (llama/native/T1 #2)"
    assert follow.progress_line("spark1", {"status": "failed"}, 1, None) == "spark1: run 1/? failed (?/?/? #None)"


def test_a_foreground_result_from_check_mode_is_returned_as_it_is_without_touching_the_host(tmp_path, no_base_run):
    host = _Host(tmp_path)
    planned = {"changed": True, "runs": [{"run_id": "a", "status": "planned"}], "counts": {"planned": 1},
               "summary": "1 runs \u2014 planned 1", "sparkfleet_events": [], "invocation": {"module_args": {}}}
    out = _action(host, job=planned).run(task_vars={})
    assert out["finished"] is True and out["summary"] == "1 runs \u2014 planned 1" and "invocation" not in out
    assert host.commands == 0
    with pytest.raises(AnsibleActionFail, match="give the registered result of the async bench_run task"):
        _action(host, job={"changed": False}).run(task_vars={})


def test_on_ansible_core_2_21_the_previous_attempt_is_a_lazy_projection_that_templating_resolves(
        tmp_path, no_base_run):
    host = _Host(tmp_path)
    host.register_alive()
    host.job.write_text(json.dumps({"started": 1, "finished": 0}))
    host.append(**_finished("a", ts="1"))
    host.append(event="started", run_id="b")
    previous = {"finished": False, "done": 1, "attempts": 1}

    class Projection:  # stands for ansible-core 2.21's TemplateExpressionWrapper: no mapping methods
        pass

    action = _action(host, {"matrix_follow": "_task.polymorphic_result"}, report_after_s=0.2)
    action._templar = SimpleNamespace(template=lambda value: previous if isinstance(value, Projection) else value)
    out = action.run(task_vars={"inventory_hostname": "s", "matrix_follow": Projection()})
    assert out["done"] == 1 and host.shown == []  # run 1 was printed by the previous attempt


# ------------------------------------------------------------------------- progress inside a serving run


def _point(rid, k, phase, ts, n=2, **kw):
    done = {"status": "ok", "duration_s": 3.5} if phase == "finished" else {}
    return {"event": "point", "run_id": rid, "k": k, "n": n, "point": f"d0.c{k}.pp512.tg64", "phase": phase,
            "ts": ts, **done, **kw}


def test_point_events_are_the_current_and_last_finished_runs_latest_attempt():
    events = [
        {"event": "started", "run_id": "z", "ts": "0"}, _point("z", 1, "started", "0a"), _finished("z", ts="0b"),
        {"event": "started", "run_id": "a", "ts": "1"}, _point("a", 1, "started", "2"),
        _point("a", 1, "finished", "3"), _finished("a", ts="4"),
        {"event": "started", "run_id": "b", "ts": "5"}, _point("b", 1, "started", "6"),  # an attempt cut short
        {"event": "job", "pid": 2}, {"event": "started", "run_id": "b", "ts": "7"}, _point("b", 1, "started", "8"),
    ]
    out = follow.point_events(events)
    assert [(p["run_id"], p["k"], p["phase"], p["ts"], p["run_started_ts"]) for p in out] == [
        ("a", 1, "started", "2", "1"), ("a", 1, "finished", "3", "1"), ("b", 1, "started", "8", "7")]
    assert follow.current_run(events) == "b"  # a point is no run state
    assert [e["run_id"] for e in follow.progress_events(events, 3)] == ["z", "a"]
    assert follow.point_events([{"event": "started", "run_id": "a", "ts": "1"}]) == []


def test_point_line_names_the_point_its_status_and_time():
    point = _point("a", 3, "finished", "t", n=28)
    assert follow.point_line("spark1", point) == "spark1: point 3/28 ok in 3.5 s (d0.c3.pp512.tg64)"


def test_points_are_returned_and_printed_once_in_the_hosts_order(tmp_path, no_base_run):
    host = _Host(tmp_path)
    host.register_alive()
    host.job.write_text(json.dumps({"started": 1, "finished": 0}))
    host.append(event="started", run_id="a", ts="1")
    host.append(**_point("a", 1, "started", "2"))
    host.append(**_point("a", 1, "finished", "3"))
    host.append(**_point("a", 2, "started", "4"))
    first = _action(host, report_after_s=0.2).run(task_vars={"inventory_hostname": "s"})
    assert first["finished"] is False and first["current"] == "a"
    assert [(p["k"], p["phase"], p["run_started_ts"]) for p in first["sparkfleet_points"]] == [
        (1, "started", "1"), (1, "finished", "1"), (2, "started", "1")]
    assert host.shown == ["s: point 1/2 ok in 3.5 s (d0.c1.pp512.tg64)"]

    host.append(**_point("a", 2, "finished", "5"))
    host.append(**_finished("a", ts="6"))
    host.append(event="started", run_id="b", ts="7")
    second = _action(host, report_after_s=0.2).run(task_vars={"inventory_hostname": "s",
                                                              "matrix_follow": dict(first, attempts=1)})
    assert second["done"] == 1 and second["current"] == "b"
    assert [p["k"] for p in second["sparkfleet_points"]] == [1, 1, 2, 2]  # a's points, the run finished last
    assert host.shown == ["s: point 1/2 ok in 3.5 s (d0.c1.pp512.tg64)",  # not again
                          "s: point 2/2 ok in 3.5 s (d0.c2.pp512.tg64)", "s: run 1/2 ok in 2.0 s (m/native/w #1)"]
