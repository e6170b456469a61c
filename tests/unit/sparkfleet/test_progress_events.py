"""`sparkfleet run`'s progress: ansible-runner's recorded event streams folded into progress events, the
display, and the runner's arguments; one real run on localhost through ansible-runner.

The recorded streams (tests/fixtures/runner_events/*.json, made by record.py there) are what ansible-runner's
event_handler received for test playbooks on localhost, cut to the keys the folding code may read."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from sparkfleet import cli
from sparkfleet.progress import Display, Progress, RunnerEvents, fmt_duration, plain_line
from sparkfleet.runner import RunRequest, parse_env, runner_kwargs

REPO = Path(__file__).resolve().parents[3]
MODULES = REPO / "tests" / "fixtures" / "modules"
FAKE_MATRIX = REPO / "tests" / "fixtures" / "playbooks" / "fake_matrix.yml"
RECORDED = REPO / "tests" / "fixtures" / "runner_events"


def _recorded(name: str) -> list[dict]:
    return json.loads((RECORDED / f"{name}.json").read_text())


def _fold(events: list[dict], folder: RunnerEvents | None = None) -> list[dict]:
    folder = folder or RunnerEvents()
    return [p for e in events for p in folder.fold(e)]


def test_plan_and_runs_from_a_loop_are_counted_with_an_eta():
    events = _fold(_recorded("fake_matrix"))
    kinds = [e["event"] for e in events]
    assert kinds == ["playbook_start", "play_start", "planned", "run", "run", "run", "run", "run", "stats"]
    assert all(isinstance(e["ts"], float) for e in events)
    assert events[0]["playbook"] == "fake_matrix.yml" and events[1]["name"] == "Fake benchmark matrix"

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
    # The module's own fields come through untouched.
    assert runs[0] | {"duration_s": 10.0, "cooldown_s": 2.0, "model": "llama", "environment": "native",
                      "workload": "short", "iteration": 1, "order_index": 0, "type": "run"} == runs[0]

    assert events[-1]["hosts"] == {"localhost": {"ok": 3, "changed": 0, "failed": 0, "unreachable": 0,
                                                 "skipped": 0, "rescued": 0, "ignored": 0}}


def test_eta_is_null_until_a_run_is_timed():
    recorded = copy.deepcopy(_recorded("fake_matrix"))
    for event in recorded:  # r1 and r2 reported as skipped: no timing yet, so no ETA; then r3 (32 s) sets it
        res = event["event_data"].get("res") or {}
        if res.get("sparkfleet_event", {}).get("run_id") in ("r1", "r2"):
            res["sparkfleet_event"]["status"] = "skipped"
        elif res.get("sparkfleet_event", {}).get("run_id") == "r3":
            res["sparkfleet_event"]["status"] = "ok"
    runs = [e for e in _fold(recorded) if e["event"] == "run"]
    assert [r["eta_s"] for r in runs] == [None, None, 2 * 32, 1 * (32 + 42) / 2, 0]
    assert [r["done"] for r in runs] == [1, 2, 3, 4, 5]


def test_runs_reported_on_until_retries_are_counted_once_each():
    """bench_follow's shape: every retry's result lists all runs finished so far (runner_retry events), the
    last one comes with runner_on_ok."""
    recorded = _recorded("fake_follow")
    retries = [e for e in recorded if e["event"] in ("runner_retry", "runner_on_ok")
               and e["event_data"]["res"].get("sparkfleet_events")]
    assert [len(e["event_data"]["res"]["sparkfleet_events"]) for e in retries] == [1, 2, 3]
    folder = RunnerEvents()
    events = _fold(recorded, folder)
    runs = [e for e in events if e["event"] == "run"]
    assert [(r["run_id"], r["done"], r["total"]) for r in runs] == [("r1", 1, 3), ("r2", 2, 3), ("r3", 3, 3)]
    assert [r["eta_s"] for r in runs] == [2 * 12, 1 * (12 + 22) / 2, 0]
    assert runs[-1]["next_cell"] is None
    assert [e["campaign"] for e in events if e["event"] == "planned"] == ["followed"]
    assert folder.campaign_dirs == ["results/followed"]  # the controller's results dir + campaign, for the report

    # The same list again (a retry with nothing new), or a run finished again later (a resumed job): once each.
    again = copy.deepcopy(retries[-1])
    assert folder.fold(again) == []
    rerun = copy.deepcopy(retries[-1])
    rerun["event_data"]["res"]["sparkfleet_events"][0]["finished_ts"] = "later"
    [event] = folder.fold(rerun)
    assert event["run_id"] == "r1" and event["done"] == 3  # a run id counts once


def test_failed_and_unreachable_hosts():
    events = _fold(_recorded("failed"))
    runs = [e for e in events if e["event"] == "run"]
    assert [(r["host"], r["run_id"], r["status"], r["done"]) for r in runs] == [
        ("good", "a", "ok", 1), ("good", "b", "failed", 2)]
    failed = [e for e in events if e["event"] == "host_failed"]
    assert [(e["host"], e["task"]) for e in failed] == [("good", "Run")]
    assert failed[0]["msg"] == "fake run b failed"  # the item's message, not "One or more items failed"
    unreachable = [e for e in events if e["event"] == "host_unreachable"]
    assert [e["host"] for e in unreachable] == ["gone"]
    assert "All items completed" not in unreachable[0]["msg"] and "Connection refused" in unreachable[0]["msg"]
    stats = events[-1]
    assert stats["event"] == "stats"
    assert stats["hosts"]["good"]["failed"] == 1 and stats["hosts"]["gone"]["unreachable"] == 1


def test_an_ignored_failure_is_not_a_failed_host_and_odd_events_are_skipped():
    folder = RunnerEvents()
    ignored = {"event": "runner_on_failed", "event_data": {"host": "h", "task": "t", "ignore_errors": True,
                                                           "res": {"msg": "meh"}}}
    assert folder.fold(ignored) == []
    for odd in ({"event": "verbose", "stdout": "x"}, {"event": "runner_on_ok"}, {"event": "runner_on_ok",
                "event_data": {"host": "h", "res": "not a dict"}}, {}, {"event": "playbook_on_stats"}):
        assert all(e["event"] == "stats" for e in folder.fold(odd))


# ---- the display side of `sparkfleet run` ----------------------------------------------------------
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


def test_the_recorded_stream_through_the_display_in_plain_lines():
    out = io.StringIO()
    d = Display(stream=out, tty=False)
    d.feed(_fold(_recorded("fake_follow")))
    d.close(0)
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["PLAY Fake followed matrix", "localhost: 3 runs planned (campaign followed)",
                         "localhost: run 1/3 llama/native/short ok 10.0s eta 24s"]
    assert lines[-2:] == ["localhost: ok=3 changed=0 failed=0 unreachable=0 runs=3/3", "playbook finished: rc=0"]


def test_runner_arguments(tmp_path, monkeypatch):
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.ini").write_text("a\n")
    (tmp_path / "vars.yml").write_text("x: 1\n")
    req = RunRequest(inventory="inv.ini", playbook=str(FAKE_MATRIX), extra_vars=["k=v w", "@vars.yml"],
                     env=parse_env(["ANSIBLE_LIBRARY=/x", "EMPTY="]))
    kw = runner_kwargs(req, str(tmp_path / "pdd"))
    assert kw["project_dir"] == str(REPO) and kw["playbook"] == str(FAKE_MATRIX)
    assert kw["cmdline"].split(" ", 2)[:2] == ["-i", str(tmp_path / "inv.ini")]
    assert f"-e 'k=v w' -e @{tmp_path / 'vars.yml'}" in kw["cmdline"]
    env = kw["envvars"]
    assert env["ANSIBLE_CONFIG"] == str(REPO / "ansible.cfg")
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"  # ansible-runner would turn it off
    assert "ANSIBLE_CALLBACKS_ENABLED" not in env  # progress comes from ansible-runner's own event stream
    assert env["ANSIBLE_LIBRARY"] == "/x" and env["EMPTY"] == ""
    assert runner_kwargs(RunRequest(inventory="h1,h2,"), "/p")["cmdline"].startswith("-i h1,h2,")
    # none given: no -i, ansible-playbook reads ansible.cfg's (inventory/local.ini: test_ansible_wiring)
    assert runner_kwargs(RunRequest(inventory=None), "/p")["cmdline"] == ""

    with pytest.raises(UsageError, match="no such file"):
        runner_kwargs(RunRequest(inventory="inv.ini", extra_vars=["@missing.yml"]), "/p")
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_env(["novalue"])
    with pytest.raises(UsageError, match="playbook"):
        runner_kwargs(RunRequest(inventory="inv.ini", playbook="nope.yml"), "/p")


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
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert [e["event"] for e in events].count("run") == 5
    assert events[-1]["event"] == "stats" and "report" not in [e["event"] for e in events]  # not bench.yml


def _plan_event(host: str, tolerance_pct: float) -> dict:
    facts = {"sparkfleet_resolved_campaign": {"name": "repro"}, "sparkfleet_controller_results": "/r",
             "sparkfleet_plan": {"runs": [], "reproducibility": {"tolerance_pct": tolerance_pct}}}
    return {"event": "runner_on_ok", "event_data": {"host": host, "task": "Hand each host its part of the plan",
                                                    "res": {"ansible_facts": facts}}}


def test_the_reproducibility_tolerance_and_campaign_dir_come_from_the_plans_in_the_stream():
    from sparkfleet.commands.run import fleet_tolerance

    folder = RunnerEvents()
    _fold([_plan_event("spark1", 3.5), _plan_event("spark2", 3.5)], folder)
    assert folder.tolerances == {"spark1": 3.5, "spark2": 3.5} and folder.campaign_dirs == ["/r/repro"]
    assert fleet_tolerance(folder.tolerances) == 3.5
    assert fleet_tolerance({}) == 5.0  # no plan seen: sparkfleet fleet's default


def test_hosts_whose_plans_disagree_on_the_tolerance_get_no_fleet_report(tmp_path):
    """One fleet comparison has one tolerance: hosts' plans that differ are named, nothing is written."""
    from sparkfleet.commands.run import write_results

    folder = RunnerEvents()
    _fold([_plan_event("spark1", 5.0), _plan_event("spark2", 2.0)], folder)
    (tmp_path / "spark1" / "runs").mkdir(parents=True)
    lines, error = write_results(str(tmp_path), "fleet", folder.tolerances)
    assert lines == [] and "spark1=5" in error and "spark2=2" in error
    assert "tolerance" in error and not (tmp_path / "report").exists()


@pytest.mark.parametrize(("playbook", "stats", "cancelled", "kind"), [
    ("bench.yml", {"a": {"failed": 0, "unreachable": 0}}, False, "report"),
    ("playbooks/reproducibility.yml", {"a": {"failed": 0, "unreachable": 1}, "b": {}}, False, "fleet"),
    ("playbooks/provision.yml", {"a": {}}, False, None),
    ("bench.yml", {"a": {"failed": 1}}, False, None),  # no host got to its end
    ("bench.yml", {"a": {}}, True, None),  # Ctrl+C: nothing is written
])
def test_what_sparkfleet_run_writes_after_a_playbook(playbook, stats, cancelled, kind):
    from sparkfleet.commands.run import after_playbook
    from sparkfleet.runner import REPO, RunOutcome

    outcome = RunOutcome(rc=0, status="successful", stdout_tail=[], campaign_dirs=["/r/c"], stats=stats,
                         cancelled=cancelled)
    assert after_playbook(str(REPO / playbook), outcome) == (kind, ["/r/c"] if kind else [])
