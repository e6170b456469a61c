"""Progress inside a serving run (issue 33): the point loop writes a ``point`` event to the ledger as each point
starts and finishes, and no ledger reader takes one for a run's state (resume, the accounting, the follower)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from _ansible_modules import host_util

ledger = host_util("ledger")
run_launch = host_util("run_launch")
serving = host_util("serving")

PROFILE = {"depth": [0, 4096], "concurrency": [1, 4], "pp": [512], "tg": [64]}


def _events(path: Path) -> list[dict]:
    return ledger.read_events(str(path))


class _Driver:
    """Stands for llama-benchy's driver: argv names the point and its output file, any output parses."""

    name = EXECUTABLE = PACKAGE = "llama-benchy"
    PIN = "0.4.0"

    @staticmethod
    def raw_name(point_name):
        return point_name + ".json"

    @staticmethod
    def version(client):
        return "0.4.0"

    @staticmethod
    def point_argv(client, point, *args, **_kw):
        out = next(a for a in args if isinstance(a, str) and a.endswith(point["point"] + ".json"))
        return [client, point["point"], out]

    @staticmethod
    def parse_point(data, point, source):
        return {"metrics": {"tg_tok_s": 40.0}, "samples": {}}


class _Server:
    def __init__(self, alive: bool = True):
        self.alive = alive
        self.proc = SimpleNamespace(returncode=1)
        self.log_path = "/nonexistent"

    def running(self):
        return self.alive


@pytest.fixture
def launcher(tmp_path, monkeypatch):
    """A Launcher of one bare serving run whose client is stubbed: point d4096.c4 fails, the others pass."""
    client = tmp_path / "llama-benchy"
    client.write_text("#!/bin/sh\n")
    client.chmod(0o755)
    calls = []

    def run_process(cmd, log, timeout, **_kw):
        calls.append((cmd[-2], [e for e in _events(tmp_path / "ledger.jsonl") if e["event"] == "point"]))
        Path(cmd[-1]).write_text("{}")
        return {"seconds": 1.25, "timed_out": False, "rc": 1 if cmd[-2].startswith("d4096.c4") else 0}

    monkeypatch.setattr(run_launch.serving_client, "driver", lambda name: _Driver)
    monkeypatch.setattr(run_launch, "run_process", run_process)
    workload = {"name": "serve", "engine": "llama.cpp", "profile": PROFILE, "runs": 2, "port": 18080}
    (tmp_path / "tokenizer.json").write_text("{}")
    model = {"name": "tiny", "tokenizer": str(tmp_path / "tokenizer.json")}
    run = SimpleNamespace(rid="c1-h1-tiny-bare-serve-1", workload=workload, model=model,
                          run_dir=str(tmp_path / "run"), ledger=str(tmp_path / "ledger.jsonl"),
                          environment={"name": "bare", "kind": "bare"})
    os.makedirs(run.run_dir)
    out = run_launch.Launcher(run, {"results_root": str(tmp_path), "serving": {"client": str(client)}})
    out.calls = calls
    return out


def _section():
    return {"client": {"version": None, "argv": None}, "points": []}


def test_each_point_run_is_started_then_finished_in_the_ledger_as_k_of_n(launcher):
    points, _ = serving.shuffled_points(launcher.run.workload, launcher.run.rid)
    section = _section()
    assert launcher.run_points(section, points, _Server(), time.monotonic() + 60) is False
    events = _events(Path(launcher.run.ledger))
    assert [(e["event"], e["run_id"], e["k"], e["n"], e["point"], e["phase"]) for e in events] == [
        ("point", launcher.run.rid, k, 4, p["point"], phase) for k, p in enumerate(points, 1)
        for phase in ("started", "finished")]
    finished = [e for e in events if e["phase"] == "finished"]
    assert [e["status"] for e in finished] == [p["status"] for p in section["points"]]  # the record's
    assert sorted(e["status"] for e in finished) == ["failed", "ok", "ok", "ok"]  # d4096.c4's client failed
    assert {e["duration_s"] for e in finished} == {1.25}
    assert all("status" not in e and "duration_s" not in e for e in events if e["phase"] == "started")
    # each point's started line is on disk before its client runs: a follower sees the point in progress
    assert [[(e["k"], e["phase"]) for e in seen][-1] for _, seen in launcher.calls] == [
        (k, "started") for k in range(1, 5)]


def test_points_not_run_write_no_point_event(launcher):
    points, _ = serving.shuffled_points(launcher.run.workload, launcher.run.rid)
    section = _section()
    assert launcher.run_points(section, points, _Server(alive=False), time.monotonic() + 60) is False
    assert launcher.run_points(section, points, _Server(), time.monotonic() - 1) is True  # time is up
    assert _events(Path(launcher.run.ledger)) == [] and launcher.calls == []
    assert all(p["reason"].startswith("not run") for p in section["points"])


def test_a_point_stopped_mid_way_leaves_no_finished_line(launcher, monkeypatch):
    def stopped(*_a, **_kw):
        raise KeyboardInterrupt  # stands for bench_run's JobStopped (SIGTERM): a BaseException

    monkeypatch.setattr(run_launch, "run_process", stopped)
    points, _ = serving.shuffled_points(launcher.run.workload, launcher.run.rid)
    with pytest.raises(KeyboardInterrupt):
        launcher.run_points(_section(), points, _Server(), time.monotonic() + 60)
    assert [(e["k"], e["phase"]) for e in _events(Path(launcher.run.ledger))] == [(1, "started")]


def test_point_events_are_no_run_state_for_resume(tmp_path):
    path = str(tmp_path / "ledger.jsonl")
    ledger.append_event(path, "job", None, pid=1)
    ledger.append_event(path, "started", "a")
    ledger.append_point(path, "a", 1, 2, "d0.c1.pp512.tg64", "started")
    ledger.append_point(path, "a", 1, 2, "d0.c1.pp512.tg64", "finished", status="ok", duration_s=3.0)
    assert ledger.run_states(path)["a"]["event"] == "started"  # interrupted: a resume runs it again
    ledger.append_finished(path, "a", {"status": "ok", "duration_s": 9.0}, 0)
    ledger.append_point(path, "a", 2, 2, "d0.c4.pp512.tg64", "finished", status="ok", duration_s=3.0)
    assert ledger.run_states(path)["a"]["event"] == "finished"  # a point after the end changes nothing
    assert ledger.last_by_run(ledger.read_events(path), ("started", "finished"))["a"]["event"] == "finished"
    line = json.loads((tmp_path / "ledger.jsonl").read_text().splitlines()[2])
    assert line == {"ts": line["ts"], "event": "point", "run_id": "a", "k": 1, "n": 2, "point": "d0.c1.pp512.tg64",
                    "phase": "started"}


def test_a_point_event_that_cannot_be_written_does_not_fail_the_run(tmp_path):
    (tmp_path / "file").write_text("")
    assert ledger.append_point(str(tmp_path / "file" / "ledger.jsonl"), "a", 1, 1, "p", "started") is None
