"""The host lease (module_utils lease, module host_lease): one sparkfleet run at a time per host, whatever the
campaign; a lease whose holder is gone is taken over; a release names whose lease it gives back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _ansible_modules import host_util, load_module, run_module

lease = host_util("lease")
jobs = host_util("jobs")


def _me() -> dict:
    return lease.controller_identity(os.getpid())


@pytest.fixture
def sleeper():
    """A live process standing for another controller on this machine."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_second_run_is_refused_while_the_first_controller_lives(tmp_path, sleeper):
    root = str(tmp_path)
    lease.acquire(root, "h1", "tokA", "campaign-a", lease.controller_identity(sleeper.pid))
    with pytest.raises(lease.HostBusy) as refused:
        lease.acquire(root, "h1", "tokB", "campaign-b", _me())
    assert "campaign-a" in str(refused.value) and "restore.yml" in str(refused.value) and "-l h1" in str(refused.value)
    # the same campaign under another run is refused too: two runs of one campaign never share a host
    with pytest.raises(lease.HostBusy):
        lease.acquire(root, "h1", "tokC", "campaign-a", _me())
    assert lease.held_by(root, "tokA")


def test_the_same_run_renews_and_a_gone_controller_is_taken_over(tmp_path, sleeper):
    root = str(tmp_path)
    first = lease.acquire(root, "h1", "tokA", "c", lease.controller_identity(sleeper.pid))
    again = lease.acquire(root, "h1", "tokA", "c", lease.controller_identity(sleeper.pid))
    assert first["changed"] and not again["changed"] and again["taken_over"] is None
    sleeper.kill()
    sleeper.wait()
    taken = lease.acquire(root, "h1", "tokB", "other", _me())
    assert taken["taken_over"]["token"] == "tokA" and lease.held_by(root, "tokB")


def test_a_remote_controllers_lease_lives_for_its_ttl_without_a_job(tmp_path):
    root = str(tmp_path)
    remote = {"machine_id": "another-machine", "pid": 1, "start_ticks": 0, "hostname": "laptop"}
    lease.acquire(root, "h1", "tokA", "c", remote)
    with pytest.raises(lease.HostBusy) as refused:
        lease.acquire(root, "h1", "tokB", "c", _me(), ttl_s=3600)
    assert "laptop" in str(refused.value)
    old = time.time() - 7200
    os.utime(lease.lease_path(root), (old, old))
    assert lease.acquire(root, "h1", "tokB", "c", _me(), ttl_s=3600)["taken_over"]["token"] == "tokA"


def test_a_live_job_of_another_campaign_keeps_the_host_after_its_controller_died(tmp_path):
    root = str(tmp_path)
    dead = _me()
    dead["pid"], dead["start_ticks"] = 2 ** 22 - 1, 1  # no such process
    lease.acquire(root, "h1", "tokA", "campaign-a", dead)
    with jobs.JobRegistration(root, "campaign-a", "h1"):
        with pytest.raises(lease.HostBusy) as refused:
            lease.acquire(root, "h1", "tokB", "campaign-b", _me())
        assert "matrix job runs" in str(refused.value)
        # its own campaign resumes: bench_run waits for the leftover job, then runs what is left
        assert lease.acquire(root, "h1", "tokB", "campaign-a", _me())["taken_over"]["token"] == "tokA"


def test_release_gives_back_only_the_named_runs_lease(tmp_path):
    root = str(tmp_path)
    lease.acquire(root, "h1", "tokA", "c", _me())
    kept = lease.release(root, "tokB")
    assert not kept["changed"] and kept["holder"]["token"] == "tokA" and lease.held_by(root, "tokA")
    assert lease.release(root, "tokA", check_mode=True)["changed"] and lease.held_by(root, "tokA")
    assert lease.release(root, "tokA")["changed"] and lease.read_lease(root) is None
    lease.acquire(root, "h1", "tokA", "c", _me())
    assert lease.release(root)["changed"] and lease.read_lease(root) is None  # restore.yml naming no run


def test_host_lease_module_fails_naming_the_holder(tmp_path, sleeper):
    module = load_module("host_lease")
    args = {"results_root": str(tmp_path), "host": "h1", "campaign": "a", "token": "tokA",
            "controller": lease.controller_identity(sleeper.pid)}
    assert run_module(module, args)["changed"]
    refused = run_module(module, {**args, "token": "tokB", "campaign": "b"})
    assert refused["failed"] and refused["busy"] and "campaign a" in refused["msg"]
    checked = run_module(module, {**args, "token": "tokA", "state": "released"}, check_mode=True)
    assert checked["changed"] and json.loads(Path(lease.lease_path(str(tmp_path))).read_text())["token"] == "tokA"
    assert run_module(module, {**args, "state": "released"})["changed"]
