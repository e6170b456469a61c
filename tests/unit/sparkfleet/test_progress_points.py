"""`sparkfleet run`'s progress inside a serving run (issue 33): bench_follow's ``sparkfleet_points`` folded into
``point`` events (point k of n, the time left in the run, the host's ETA counting it), and the display."""

from __future__ import annotations

import datetime
import io

import pytest

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate
from sparkfleet.progress import Display, Progress, RunnerEvents, plain_line

T0 = 1_790_000_000.0
PROFILE = {"depth": [0, 4096], "concurrency": [1, 4], "pp": [512], "tg": [64]}
WORKLOAD = {"name": "arena", "engine": "llama.cpp", "profile": PROFILE, "runs": 2}
#: the plan's estimate of one run of WORKLOAD (`sparkfleet plan`'s "about ... per run")
PLANNED = estimate.serving_run_s(WORKLOAD)


def _ts(seconds: float) -> str:
    """A ledger time, T0 + seconds on the host's clock."""
    return datetime.datetime.fromtimestamp(T0 + seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _plan(n_runs: int = 3) -> dict:
    runs = [{"run_id": f"r{i}", "order_index": i, "model": {"name": "qwen"}, "environment": {"name": "native"},
             "workload": WORKLOAD, "iteration": i} for i in range(1, n_runs + 1)]
    facts = {"sparkfleet_resolved_campaign": {"name": "serve"}, "sparkfleet_plan": {"runs": runs}}
    return {"event": "runner_on_ok", "event_data": {"host": "spark1", "res": {"ansible_facts": facts}}}


def _point(rid: str, k: int, phase: str, at: float, started: float = 0.0, duration: float | None = None) -> dict:
    point = {"event": "point", "run_id": rid, "k": k, "n": 4, "point": f"p{k}", "phase": phase, "ts": _ts(at),
             "run_started_ts": _ts(started)}
    if phase == "finished":
        point.update(status="ok", duration_s=duration)
    return point


def _retry(points: list[dict], finished: list[dict] = ()) -> dict:
    return {"event": "runner_retry", "event_data": {"host": "spark1", "res": {
        "finished": False, "sparkfleet_events": list(finished), "sparkfleet_points": points}}}


def _run(rid: str, duration: float, finished_at: float) -> dict:
    return {"type": "run", "run_id": rid, "status": "ok", "duration_s": duration, "cooldown_s": 0.0,
            "model": "qwen", "environment": "native", "workload": "arena", "iteration": 1,
            "finished_ts": _ts(finished_at)}


def _folded(folder: RunnerEvents, event: dict) -> list[tuple]:
    return [(e["event"], e.get("run_id"), e.get("k"), e.get("phase"), e.get("run_eta_s"), e.get("eta_s"))
            for e in folder.fold(event)]


def test_points_give_k_of_n_and_an_eta_within_the_run_then_the_hosts():
    folder = RunnerEvents()
    assert [e["event"] for e in folder.fold(_plan())] == ["planned"]
    # the first point started 60 s into run r1 (server start): no point timed yet, the plan's estimate
    r1 = [_point("r1", 1, "started", 60)]
    [event] = folder.fold(_retry(r1))
    assert event == {**event, "event": "point", "host": "spark1", "run_id": "r1", "cell": "qwen/native/arena",
                     "point": "p1", "k": 1, "n": 4, "phase": "started", "point_ts": _ts(60),
                     "run_started_ts": _ts(0), "run_eta_s": round(PLANNED, 1)}
    # the host's: this run's time left + 2 runs after it x this run's projected time (60 s in + time left)
    assert event["eta_s"] == pytest.approx(PLANNED + 2 * (60 + PLANNED), abs=0.2)
    assert isinstance(event["ts"], float) and "status" not in event

    # a retry lists the recent points again: only the new ones are passed on, each with the mean so far
    r1 += [_point("r1", 1, "finished", 160, duration=100), _point("r1", 2, "started", 160)]
    assert _folded(folder, _retry(r1)) == [
        ("point", "r1", 1, "finished", 3 * 100, 300 + 2 * (160 + 300)),
        ("point", "r1", 2, "started", 3 * 100, 300 + 2 * (160 + 300))]
    assert folder.fold(_retry(r1)) == []
    r1 += [_point("r1", 2, "finished", 360, duration=200)]
    assert _folded(folder, _retry(r1)) == [("point", "r1", 2, "finished", 2 * 150, 300 + 2 * (360 + 300))]

    # r1's last points, its end and r2's first point in one retry: r1's points before its run event, r2's after
    r1 += [_point("r1", 3, "started", 360), _point("r1", 3, "finished", 510, duration=150),
           _point("r1", 4, "started", 510), _point("r1", 4, "finished", 660, duration=150)]
    r2 = [_point("r2", 1, "started", 760, started=700)]
    out = _folded(folder, _retry(r1 + r2, [_run("r1", 660, 661)]))
    assert [e[:4] for e in out] == [("point", "r1", 3, "started"), ("point", "r1", 3, "finished"),
                                    ("point", "r1", 4, "started"), ("point", "r1", 4, "finished"),
                                    ("run", "r1", None, None), ("point", "r2", 1, "started")]
    assert out[3][4:] == (0, 2 * 660)  # r1's last point: nothing left in it; 2 runs after it, at r1's 660 s...
    # ...r2 starts afresh from the plan's estimate; the runs after it go by r1's measured 660 s
    assert out[5][4:] == (round(PLANNED, 1), round(round(PLANNED, 1) + 1 * 660, 1))


def test_a_resumed_runs_new_attempt_starts_its_points_afresh():
    folder = RunnerEvents()
    folder.fold(_plan(1))
    first = [_point("r1", 1, "started", 10), _point("r1", 1, "finished", 110, duration=100)]
    assert _folded(folder, _retry(first))[-1][4:] == (300, 300)  # the only run: its time left is the host's
    again = [_point("r1", 1, "started", 1010, started=1000)]  # the job was stopped, r1 runs again
    assert _folded(folder, _retry(again)) == [("point", "r1", 1, "started", round(PLANNED, 1), round(PLANNED, 1))]


def test_without_a_plan_the_eta_within_the_run_waits_for_a_timed_point():
    folder = RunnerEvents()
    points = [_point("r1", 1, "started", 10), _point("r1", 1, "finished", 40, duration=30)]
    out = folder.fold(_retry(points))
    assert [(e["run_eta_s"], e["eta_s"], e["cell"]) for e in out] == [(None, None, None), (90, None, None)]


def test_the_display_shows_point_k_of_n_and_the_time_left_in_the_run():
    p = Progress()
    p.update({"event": "planned", "host": "spark1", "total": 3, "next_cell": "qwen/native/arena"})
    p.update({"event": "point", "host": "spark1", "run_id": "r1", "cell": "qwen/native/arena", "point": "p2", "k": 2,
              "n": 28, "phase": "started", "run_eta_s": 3900, "eta_s": 7500})
    row = p.render()[2]
    assert "qwen/native/arena point 2/28, run ETA 1h05m" in row and row.split()[-2:] == ["2h05m", "-"]
    p.update({"event": "run", "host": "spark1", "run_id": "r1", "done": 1, "total": 3, "status": "ok", "eta_s": 600,
              "cell": "qwen/native/arena", "next_cell": "qwen/native/arena"})
    assert "point" not in p.render()[2]  # the run ended: its point is gone

    event = {"event": "point", "host": "spark1", "point": "d0.c4.pp512.tg64", "k": 3, "n": 28, "phase": "finished",
             "status": "ok", "duration_s": 312.44, "run_eta_s": 7810, "eta_s": 24000}
    assert plain_line(event) == "spark1: point 3/28 d0.c4.pp512.tg64 ok 312.4s run eta 2h10m eta 6h40m"
    assert plain_line({**event, "phase": "started"}) == \
        "spark1: point 3/28 d0.c4.pp512.tg64 started run eta 2h10m eta 6h40m"

    out = io.StringIO()
    d = Display(stream=out, tty=False)
    folder = RunnerEvents()
    d.feed(folder.fold(_plan(1)) + folder.fold(_retry([_point("r1", 1, "started", 60)])))
    assert out.getvalue().splitlines()[-1].startswith("spark1: point 1/4 p1 started run eta ")
