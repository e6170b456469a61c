"""Issue 33, item 3: reuse is explicit. A campaign whose planned runs are all done measures nothing and says so,
"N runs already done on HOST (dates); nothing measured"; a fresh measurement (sparkfleet run --fresh,
-e sparkfleet_fresh=true) is a new instance of the campaign, the previous one moved aside, never deleted, on the
host (bench_run) and on the controller (campaign_plan)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _ansible_modules import host_util, load_module, run_module
from test_resume import _args, _campaign

reuse = host_util("reuse")


def test_nothing_measured_only_when_every_planned_run_was_already_done():
    assert reuse.nothing_measured(["skipped", "skipped"])
    assert not reuse.nothing_measured([])  # nothing planned is not "already done"
    assert not reuse.nothing_measured(["skipped", "ok"])
    assert not reuse.nothing_measured(["failed"])


def test_the_message_names_the_count_the_host_and_the_dates():
    one_day = reuse.done_message("spark1", ["2026-11-27T10:15:02.1Z", "2026-11-27T09:01:00.0Z"])
    assert one_day.startswith("2 runs already done on spark1 (2026-11-27 09:01 UTC .. 2026-11-27 10:15 UTC); "
                              "nothing measured")
    assert "--fresh" in one_day and "sparkfleet_fresh=true" in one_day
    assert reuse.done_message("h", ["2026-11-27T10:15:59.9Z"]).startswith("1 run already done on h "
                                                                           "(2026-11-27 10:15 UTC); nothing")
    assert "(date unknown)" in reuse.done_message("h", [None])


def test_moving_a_host_instance_aside_keeps_everything_but_the_lock(tmp_path):
    host_dir = tmp_path / "results" / "c1" / "h1"
    (host_dir / "runs" / "r1").mkdir(parents=True)
    (host_dir / "runs" / "r1" / "record.json").write_text("{}")
    (host_dir / "ledger.jsonl").write_text('{"event": "job"}\n')
    (host_dir / ".lock").write_text("")
    moved = reuse.move_host_instance(str(host_dir), "20261127T101502Z")
    assert moved == str(tmp_path / "results" / "c1.20261127T101502Z" / "h1")
    assert sorted(os.listdir(moved)) == ["ledger.jsonl", "runs"]
    assert (tmp_path / "results/c1.20261127T101502Z/h1/runs/r1/record.json").read_text() == "{}"
    assert os.listdir(host_dir) == [".lock"]  # the job's held lock stays
    assert reuse.move_host_instance(str(host_dir), "x") is None  # nothing left to move
    assert reuse.move_host_instance(str(tmp_path / "absent" / "h1"), "x") is None
    # a second host of the same fleet, moved in the same second, joins the same instance; a taken one is not reused
    other = tmp_path / "results" / "c1" / "h2"
    other.mkdir()
    (other / "ledger.jsonl").write_text("")
    (tmp_path / "results" / "c1.20261127T101502Z" / "h2").mkdir()
    assert reuse.move_host_instance(str(other), "20261127T101502Z").endswith("c1.20261127T101502Z.2/h2")


def test_the_controller_instance_is_renamed_whole(tmp_path):
    campaign = tmp_path / "results" / "c1"
    (campaign / "h1").mkdir(parents=True)
    (campaign / "campaign.json").write_text("{}")
    moved = reuse.move_campaign_instance(str(campaign), "S")
    assert moved == str(tmp_path / "results" / "c1.S") and not campaign.exists()
    assert sorted(os.listdir(moved)) == ["campaign.json", "h1"]
    assert reuse.move_campaign_instance(str(campaign), "S") is None


@pytest.fixture
def standins(monkeypatch):
    from _ansible_modules import STANDINS

    monkeypatch.setenv("PATH", f"{STANDINS}:{os.environ['PATH']}")


def test_bench_run_says_nothing_measured_then_fresh_measures_again_keeping_the_old(tmp_path, standins):
    campaign = _campaign()
    first = run_module(load_module("bench_run"), _args(tmp_path, campaign))
    assert first["counts"] == {"ok": 2} and first["nothing_measured"] is False
    host_dir = tmp_path / "results" / "c1" / "h1"
    old_ledger = (host_dir / "ledger.jsonl").read_bytes()
    old_runs = sorted(os.listdir(host_dir / "runs"))

    again = run_module(load_module("bench_run"), _args(tmp_path, campaign))
    assert again["counts"] == {"skipped": 2} and again["nothing_measured"] is True
    assert again["summary"].startswith("2 runs already done on h1 (") and "; nothing measured" in again["summary"]
    assert all(e.get("finished_ts") for e in again["sparkfleet_events"])  # the dates the message shows
    assert (host_dir / "ledger.jsonl").read_bytes() == old_ledger  # nothing appended

    fresh = run_module(load_module("bench_run"), {**_args(tmp_path, campaign), "fresh": True})
    assert fresh["counts"] == {"ok": 2} and fresh["nothing_measured"] is False, fresh
    previous = fresh["previous_instance"]
    assert os.path.dirname(os.path.dirname(previous)) == str(tmp_path / "results")
    assert os.path.basename(os.path.dirname(previous)).startswith("c1.") and previous.endswith("/h1")
    assert Path(previous, "ledger.jsonl").read_bytes() == old_ledger  # the old instance, whole
    assert sorted(os.listdir(os.path.join(previous, "runs"))) == old_runs
    new_events = [json.loads(line) for line in (host_dir / "ledger.jsonl").read_text().splitlines()]
    assert [e["event"] for e in new_events if e.get("run_id")] == ["started", "finished"] * 2  # only the new runs
    assert "previous results were moved to" in fresh["summary"]
