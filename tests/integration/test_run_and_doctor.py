"""`sparkfleet run` and `sparkfleet doctor` against the fake fleet (real SSH to namespace hosts)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.fleet]

FAKE_RUNS = 5  # runs planned per host by tests/fixtures/playbooks/fake_matrix.yml


def _sparkfleet(args: list[str], env: dict[str, str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkfleet", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run_matrix(fleet, ansible_env, repo, tmp_path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    events_file = tmp_path / "events.jsonl"
    extra = tmp_path / "extra.yml"
    extra.write_text("fake_matrix_skip_iteration: 99\n")  # nothing skipped: every run is timed
    env = {k: v for k, v in ansible_env.items() if k != "ANSIBLE_CONFIG"}  # sparkfleet run sets it itself
    proc = _sparkfleet(["run", "-i", fleet.inventory, "--playbook", "tests/fixtures/playbooks/fake_matrix.yml",
                        "--env", f"ANSIBLE_LIBRARY={repo / 'tests/fixtures/modules'}",
                        "--env", "FAKE_MATRIX_CAMPAIGN=e2e",
                        "-e", "fake_matrix_sleep_s=0.1", "-e", f"@{extra}",
                        "--json-events", str(events_file)], env, repo)
    return proc, _events(events_file)


def test_run_counts_every_hosts_runs_against_its_plan(fleet_factory, ansible_env, repo, tmp_path):
    fleet = fleet_factory(3)
    proc, events = _run_matrix(fleet, ansible_env, repo, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = sorted(h.name for h in fleet.hosts)

    planned = {e["host"]: e for e in events if e["event"] == "planned"}
    assert sorted(planned) == names
    assert {e["total"] for e in planned.values()} == {FAKE_RUNS}
    assert {e["campaign"] for e in planned.values()} == {"e2e"}  # --env reached the playbook

    runs = defaultdict(list)
    for e in events:
        if e["event"] == "run":
            runs[e["host"]].append(e)
    assert sum(len(v) for v in runs.values()) == 3 * FAKE_RUNS
    for host in names:
        assert [r["done"] for r in runs[host]] == list(range(1, FAKE_RUNS + 1))
        assert {r["total"] for r in runs[host]} == {FAKE_RUNS}
        assert {r["status"] for r in runs[host]} == {"ok"}
        assert runs[host][-1]["eta_s"] == 0 and runs[host][-1]["next_cell"] is None
        assert all(r["eta_s"] is not None for r in runs[host])

    stats = [e for e in events if e["event"] == "stats"]
    assert len(stats) == 1 and sorted(stats[0]["hosts"]) == names
    assert all(s["failed"] == 0 and s["unreachable"] == 0 for s in stats[0]["hosts"].values())
    assert not [e for e in events if e["event"] in ("host_failed", "host_unreachable")]

    # Not a terminal: one plain line per event, then the summary.
    lines = proc.stdout.splitlines()
    for host in names:
        assert f"{host}: {FAKE_RUNS} runs planned (campaign e2e)" in lines
        assert f"{host}: run {FAKE_RUNS}/{FAKE_RUNS} llama/native/long ok 50.0s eta 0s" in lines
    assert lines[-1] == "playbook finished: rc=0"


def test_run_reports_an_unreachable_host_and_keeps_the_others_going(fleet_factory, ansible_env, repo, tmp_path):
    fleet = fleet_factory(3)
    gone = fleet.hosts[2]
    fleet.stop_sshd(gone)
    proc, events = _run_matrix(fleet, ansible_env, repo, tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # ansible-playbook's rc for unreachable hosts
    unreachable = [e for e in events if e["event"] == "host_unreachable"]
    assert [e["host"] for e in unreachable] == [gone.name]
    assert unreachable[0]["msg"].strip()  # the reason is passed on (its wording is OpenSSH's, not asserted)
    done = defaultdict(int)
    for e in events:
        if e["event"] == "run":
            done[e["host"]] = e["done"]
    assert done == {h.name: FAKE_RUNS for h in fleet.hosts if h is not gone}
    assert f"{gone.name}: UNREACHABLE" in proc.stdout
    assert "playbook failed (rc=4)" in proc.stderr


def _rows(stdout: str) -> dict[str, list[str]]:
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 8 and cells[0] not in ("host",) and not cells[0].startswith("-"):
            rows[cells[0]] = cells
    return rows


def test_doctor_names_the_unreachable_host(fleet_factory, ansible_env, repo):
    fleet = fleet_factory(3)
    gone = fleet.hosts[1]
    fleet.stop_sshd(gone)
    proc = _sparkfleet(["doctor", "-i", fleet.inventory, "--timeout", "5", "--min-free-gib", "0"],
                       ansible_env, repo, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = _rows(proc.stdout)
    assert sorted(rows) == sorted(h.name for h in fleet.hosts)
    assert rows[gone.name][1] == "NO"
    # doctor's own words and the address; the OS's reason after them is not asserted
    assert rows[gone.name][7].startswith(f"unreachable: cannot connect to {gone.address}:22: ")
    for host in fleet.hosts:
        if host is gone:
            continue
        row = rows[host.name]
        assert row[1] == "yes" and row[2] == "root"
        assert row[4] == "1 GPU"  # the nvidia-smi stand-in on the test host's PATH
        assert "GiB (" in row[5]
        assert abs(float(row[6].rstrip("s"))) < 0.5   # same machine: no real skew
    assert f"not ready: {gone.name}" in proc.stdout.splitlines()[-1]

    as_json = _sparkfleet(["doctor", "-i", fleet.inventory, "--timeout", "5", "--json"], ansible_env, repo,
                          timeout=120)
    data = json.loads(as_json.stdout)
    assert data["ok"] is False
    assert {h["host"]: h["reachable"] for h in data["hosts"]} == {h.name: h is not gone for h in fleet.hosts}


def test_doctor_rejects_unknown_host_keys(fleet_factory, ansible_env, repo):
    fleet = fleet_factory(1)
    Path(fleet.known_hosts).write_text("")  # forget the host key: doctor must refuse, not trust blindly
    proc = _sparkfleet(["doctor", "-i", fleet.inventory, "--timeout", "5"], ansible_env, repo, timeout=120)
    assert proc.returncode == 1
    row = _rows(proc.stdout)[fleet.hosts[0].name]
    assert row[1] == "NO"
    assert row[7].startswith("host key rejected:")
    assert "not in known_hosts" in row[7] or "MISMATCH" in row[7]
    assert fleet.known_hosts in row[7] or "MISMATCH" in row[7]


@pytest.mark.docker
def test_doctor_passes_on_a_ready_fleet(fleet_factory, ansible_env, repo, docker_engine):
    fleet = fleet_factory(2)
    proc = _sparkfleet(["doctor", "-i", fleet.inventory, "--min-free-gib", "0"], ansible_env, repo, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(proc.stdout)
    assert all(r[7] == "ok" and r[3] not in ("NO", "-") for r in rows.values())
    assert proc.stdout.splitlines()[-1] == "2/2 hosts ready"
