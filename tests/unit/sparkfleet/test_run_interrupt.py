"""Ctrl-C and SIGTERM to `sparkfleet run` (issue 33): the playbook is cancelled (no ansible-playbook left), then
playbooks/restore.yml runs for the run's own token, so what the run started on the hosts is stopped and nothing of
another run's; where that stop cannot finish, the command that does is printed."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from _shared import REPO

from sparkfleet.commands import run as run_cmd
from sparkfleet.runner import RunOutcome


def _outcome(rc: int, cancelled: bool, stats=None) -> RunOutcome:
    return RunOutcome(rc=rc, status="x", stdout_tail=["PLAY RECAP"], campaign_dirs=[], stats=stats,
                      cancelled=cancelled, signal="SIGINT" if cancelled else None)


def _run(monkeypatch, tmp_path, outcomes: list[RunOutcome], playbook="bench.yml"):
    requests = []

    def fake(request, on_events):
        requests.append(request)
        return outcomes[len(requests) - 1]

    monkeypatch.setattr("sparkfleet.runner.run_playbook", fake)
    (tmp_path / "inv.ini").write_text("spark1\n")
    args = argparse.Namespace(inventory=str(tmp_path / "inv.ini"), playbook=playbook, extra_vars=["x=1"], env=[],
                              json_events=None, quiet=True)
    return run_cmd.run(args), requests


def _token(request) -> str:
    return next(json.loads(v)["sparkfleet_run_token"] for v in request.extra_vars if "sparkfleet_run_token" in v)


def test_an_interrupted_bench_runs_restore_for_its_own_token(monkeypatch, tmp_path, capsys):
    rc, requests = _run(monkeypatch, tmp_path, [_outcome(130, True), _outcome(0, False, {"spark1": {"ok": 5}})])
    assert rc == 130
    assert [Path(r.playbook).name for r in requests] == ["bench.yml", "restore.yml"]
    assert _token(requests[0]) == _token(requests[1]) and len(_token(requests[0])) == 32
    assert "x=1" in requests[1].extra_vars and requests[1].inventory == requests[0].inventory
    err = capsys.readouterr().err
    assert "stopped on spark1" in err


def test_a_stop_that_cannot_finish_prints_the_command_that_does(monkeypatch, tmp_path, capsys):
    rc, requests = _run(monkeypatch, tmp_path, [_outcome(143, True), _outcome(2, False)])
    assert rc == 143
    line = next(x for x in capsys.readouterr().err.splitlines() if "stop it with:" in x)
    assert "playbooks/restore.yml" in line and _token(requests[0]) in line and "-i" in line


def test_playbooks_that_take_no_host_get_no_token_and_no_stop(monkeypatch, tmp_path):
    rc, requests = _run(monkeypatch, tmp_path, [_outcome(130, True)], playbook="playbooks/restore.yml")
    assert rc == 130 and len(requests) == 1
    assert not any("sparkfleet_run_token" in v for v in requests[0].extra_vars)


PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.command: sleep {seconds}
"""

# run_playbook in a process of its own, on the default inventory (inventory/local.ini: this machine, local)
DRIVER = textwrap.dedent("""
    import sys
    from sparkfleet.runner import RunRequest, run_playbook
    outcome = run_playbook(RunRequest(inventory=None, playbook=sys.argv[1]),
                           lambda events: print("tick", flush=True) if any(events) else None)
    print("cancelled", outcome.cancelled, outcome.signal, outcome.rc, flush=True)
""")


def _sleepers(marker: str) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                out.append(int(proc.name))
        except OSError:
            continue
    return out


def test_sigterm_cancels_the_playbook_and_leaves_no_ansible_playbook(tmp_path):
    playbook = tmp_path / "sleep.yml"
    seconds = f"300.{os.getpid()}"  # this test's sleep, told from any other on the machine
    playbook.write_text(PLAYBOOK.format(seconds=seconds))
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(playbook)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while not _sleepers(f"sleep {seconds}") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _sleepers(str(playbook)), "ansible-playbook never started"
        driver.send_signal(signal.SIGTERM)
        out, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert "cancelled True SIGTERM 143" in out
    deadline = time.monotonic() + 30
    while _sleepers(str(playbook)) and time.monotonic() < deadline:  # a killed group may take a moment to go
        time.sleep(0.2)
    assert not _sleepers(str(playbook))  # ansible-playbook and its workers
    assert not _sleepers(f"sleep {seconds}")  # and the task's command (local connection: in its process group)
