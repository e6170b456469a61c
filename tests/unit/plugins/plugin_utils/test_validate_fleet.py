"""The validate stage's fleet behaviour (issue 23): an unreachable host is reported and the rest are planned;
a host name that is not a safe identifier is refused there, before any host is changed; a host whose check
fails still stops the fleet."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playrecap import play_recap

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning

REPO = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent
CAMPAIGN = {"name": "c1", "models": ["m"], "environments": ["native"], "workloads": ["matmul"], "iterations": 2,
            "cooldown": {"enabled": False}}
RAW = {"name": "x", "models": ["m"], "environments": ["native"], "workloads": ["matmul"]}


def closed_loopback_port() -> int:
    """A loopback port nothing listens on (bound, then released): a connection to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def local(tmp_path: Path, name: str) -> dict:
    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "sparkfleet_work_dir": str(tmp_path / "work" / name.replace("/", "_"))}


def validate(tmp_path: Path, hosts: dict[str, dict]) -> subprocess.CompletedProcess:
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"fleet": {"hosts": hosts}}))
    (tmp_path / "campaign.yml").write_text(yaml.safe_dump({"sparkfleet_campaign": CAMPAIGN}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    argv = [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "validate.yml"),
            "-i", str(tmp_path / "inventory.yml"), "-e", f"@{tmp_path / 'campaign.yml'}",
            "-e", f"sparkfleet_results_dir={tmp_path / 'results'}"]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------------------------------- host name (unit)


@pytest.mark.parametrize("name", ["spark1;reboot", "a b", "$(id)", "h`x`", "h|x", "-h", "../h", "h/x", "", "h" * 129])
def test_check_host_refuses_a_host_name_that_is_not_a_safe_identifier(name):
    with pytest.raises(planning.PlanningError) as err:
        planning.check_host(name, RAW, {})
    assert str(err.value).startswith("inventory_hostname: ")
    assert repr(name) in str(err.value) and "not a safe host name" in str(err.value)


@pytest.mark.parametrize("name", ["spark1", "spark-02.lab", "h_1", "10.0.0.7", "h" * 128])
def test_check_host_takes_safe_host_names(name):
    assert planning.check_host(name, RAW, {}).host == name


# ------------------------------------------------------------------------------- usable_checks (unit)


def _check(host: str) -> dict:
    return planning.check_host(host, RAW, {}).to_dict()


def test_usable_checks_plans_an_unreachable_host_and_refuses_a_failed_one():
    checks, gone = planning.usable_checks({"h1": _check("h1"),
                                           "h2": {**_check("h2"), "unreachable": True, "msg": "refused"}})
    assert [c.host for c in checks] == ["h1", "h2"] and gone == ["h2"]
    # unreachable before the controller's part was recorded: not planned, not named
    checks, gone = planning.usable_checks({"h1": _check("h1"), "h2": {"unreachable": True, "msg": "x"}})
    assert [c.host for c in checks] == ["h1"] and gone == []
    with pytest.raises(planning.PlanningError, match="h2: model path.s. not found: /m"):
        planning.usable_checks({"h1": _check("h1"),
                                "h2": {"failed": True, "msg": "h2: model path(s) not found: /m (models m)"}})
    with pytest.raises(planning.PlanningError, match="no reachable host"):
        planning.usable_checks({"h2": {**_check("h2"), "unreachable": True}})


# ---------------------------------------------------------------------------------- the validate play


def test_an_unreachable_host_is_reported_and_the_reachable_ones_are_planned(tmp_path):
    port = closed_loopback_port()
    hosts = {"h1": local(tmp_path, "h1"),
             "gone": {"ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "root",
                      "ansible_ssh_common_args": "-o ConnectTimeout=5 -o BatchMode=yes",
                      "sparkfleet_work_dir": str(tmp_path / "work" / "gone")}}
    proc = validate(tmp_path, hosts)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-2000:]  # ansible-playbook: a host unreachable
    rows = play_recap(proc.stdout)
    assert rows["gone"]["unreachable"] == 1 and rows["h1"]["failed"] == 0 and rows["h1"]["unreachable"] == 0
    assert "2 runs planned on h1" in proc.stdout  # the reachable host got its plan ...
    doc = json.loads((tmp_path / "results" / "c1" / "campaign.json").read_text())
    # ... and the unreachable one's runs are recorded, so that the report can name them missing
    assert doc["hosts"]["h1"]["planned"] == 2 and doc["hosts"]["gone"]["planned"] == 2
    assert "gone: unreachable" in proc.stdout + proc.stderr


def test_an_unsafe_host_name_is_refused_in_validate_before_any_host_changes(tmp_path):
    bad = "spark2;touch${IFS}pwned"
    proc = validate(tmp_path, {"h1": local(tmp_path, "h1"), bad: local(tmp_path, "bad")})
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "not a safe host name" in proc.stdout and repr(bad) in proc.stdout
    assert "runs planned" not in proc.stdout  # no host was handed a plan
    assert not (tmp_path / "results").exists() and not (tmp_path / "work").exists()
    assert not (tmp_path / "pwned").exists()
    rows = play_recap(proc.stdout)
    assert all(r["changed"] == 0 for r in rows.values()) and rows[bad]["failed"] == 1 and rows["h1"]["failed"] == 1


def test_a_host_whose_check_fails_still_stops_the_whole_fleet(tmp_path):
    broken = {**local(tmp_path, "h2"), "sparkfleet_telemetry_interval_s": 0}
    proc = validate(tmp_path, {"h1": local(tmp_path, "h1"), "h2": broken})
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "h2: sparkfleet_telemetry_interval_s: must be positive, got 0" in proc.stdout
    assert "runs planned" not in proc.stdout and not (tmp_path / "results").exists()
    assert play_recap(proc.stdout)["h1"]["failed"] == 1
