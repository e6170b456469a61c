"""Issue 33, item 3: `sparkfleet run` of a campaign whose planned runs were all done says so per host and exits
12; --fresh asks the playbook for a new instance (-e sparkfleet_fresh=true). Ansible never runs."""

from __future__ import annotations

import argparse
import json

import pytest
from serving_tree import build_serving_tree

from sparkfleet.cli import main
from sparkfleet.commands import run as run_cmd
from sparkfleet.runner import RunOutcome

OK = {"ok": 9, "changed": 0, "failed": 0, "unreachable": 0}


def _run(monkeypatch, tmp_path, events, fresh=False, rc=0):
    root = build_serving_tree(tmp_path / "results" / "serve", engines=("llama.cpp",), environments=("native",),
                              iterations=2)
    outcome = RunOutcome(rc=rc, status="successful", stdout_tail=[], campaign_dirs=[str(root)],
                         stats={"spark1": OK, "spark2": OK})
    requests = []

    def fake(request, on_events):
        requests.append(request)
        on_events(events)
        return outcome

    (tmp_path / "inv.ini").write_text("spark1\nspark2\n")
    monkeypatch.setattr("sparkfleet.runner.run_playbook", fake)
    args = argparse.Namespace(inventory=str(tmp_path / "inv.ini"), playbook="bench.yml", extra_vars=[], env=[],
                              json_events=None, quiet=True, fresh=fresh)
    return run_cmd.run(args), requests[0]


def _event(host, n, status, ts="2026-11-27T09:0%d:00.0Z"):
    return {"event": "run", "host": host, "run_id": f"r{n}", "status": status, "finished_ts": ts % n}


def test_everything_already_done_is_said_per_host_and_exits_12(tmp_path, monkeypatch, capsys):
    events = [_event(h, n, "skipped") for h in ("spark1", "spark2") for n in (1, 2)]
    status, _ = _run(monkeypatch, tmp_path, events)
    assert status == run_cmd.EXIT_NOTHING_MEASURED == 12
    out = capsys.readouterr().out
    for host in ("spark1", "spark2"):
        assert (f"2 runs already done on {host} (2026-11-27 09:01 UTC .. 2026-11-27 09:02 UTC); nothing measured"
                in out)
    assert "exit status 12: nothing measured" in out


def test_a_host_that_measured_anything_is_not_12(tmp_path, monkeypatch, capsys):
    events = [_event("spark1", 1, "skipped"), _event("spark1", 2, "ok"), _event("spark2", 3, "skipped")]
    status, _ = _run(monkeypatch, tmp_path, events)
    assert status == 0 and "already done" not in capsys.readouterr().out
    assert run_cmd.already_done([]) == []  # no run event at all (a playbook that stopped early): not 12


def test_a_failed_playbook_keeps_its_status(tmp_path, monkeypatch):
    status, _ = _run(monkeypatch, tmp_path, [_event("spark1", 1, "skipped")], rc=2)
    assert status == 2


@pytest.mark.parametrize("fresh", [True, False])
def test_fresh_is_an_extra_var_the_playbook_honours(tmp_path, monkeypatch, fresh):
    _, request = _run(monkeypatch, tmp_path, [_event("spark1", 1, "ok")], fresh=fresh)
    passed = [json.loads(v) for v in request.extra_vars if v.startswith("{")]
    assert [p for p in passed if "sparkfleet_run_token" not in p] == ([{"sparkfleet_fresh": True}] if fresh else [])


def test_12_and_fresh_are_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "12 nothing measured: every planned run was already done" in help_text
    assert "--fresh" in help_text
