# -*- coding: utf-8 -*-
"""Registry of running matrix jobs on a host, so that they can be followed and stopped.

A matrix job (one ``bench_run`` call running a host's whole plan, usually in the background under
Ansible's ``async``) outlives the controller that started it: a killed controller or a pulled cable does
not stop the measurements. Each job registers itself as ``<results_root>/.sparkfleet/jobs/<pid>.json``
(its pid, the kernel's start time of that pid, campaign, and the process group / container of the
workload it is running right now) and removes the file when it ends. ``bench_follow`` lists the live
ones; ``bench_stop`` (``restore.yml``, the matrix's ``always``) ends them before mounts are undone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time

from ..contract.textfile import write_atomic
from ..sensors import procstat

JOBS_SUBDIR = os.path.join(".sparkfleet", "jobs")


def jobs_dir(results_root: str) -> str:
    return os.path.join(results_root, JOBS_SUBDIR)


def _start_ticks(pid: int):
    """The pid's start time in clock ticks since boot (tells a reused pid from the job's); None once it is
    gone or a zombie (it has exited; only its parent has yet to reap it)."""
    stat = procstat.read(pid)
    return stat.start_ticks if procstat.live(stat) else None


def _write(path: str, entry: dict) -> None:
    write_atomic(path, json.dumps(entry, sort_keys=True))


class JobRegistration:
    """This process's entry in the registry (a context manager: the entry goes when the job ends)."""

    def __init__(self, results_root: str, campaign: str, host: str):
        self.dir = jobs_dir(results_root)
        self.pid = os.getpid()
        self.path = os.path.join(self.dir, "%d.json" % self.pid)
        self.entry = {"pid": self.pid, "start_ticks": _start_ticks(self.pid), "campaign": campaign,
                      "host": host, "started": time.time(), "child_pgid": None, "container": None,
                      "docker": None, "run_id": None}

    def __enter__(self):
        os.makedirs(self.dir, exist_ok=True)
        _write(self.path, self.entry)
        return self

    def running(self, run_id=None, child_pgid=None, container=None, docker=None) -> None:
        """Say what the job runs now, so that a stop can end the workload even if the job itself is gone."""
        self.entry.update(run_id=run_id, child_pgid=child_pgid, container=container, docker=docker,
                          child_ticks=_start_ticks(child_pgid) if child_pgid else None)
        with contextlib.suppress(OSError):  # a full disk must not fail the run over bookkeeping
            _write(self.path, self.entry)

    def __exit__(self, *exc):
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        return False


def list_jobs(results_root: str) -> list:
    """Registered jobs, each with ``alive`` (the pid still runs and is the same process)."""
    jobs = []
    directory = jobs_dir(results_root)
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return jobs
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path) as fh:
                entry = json.load(fh)
            pid = int(entry["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        entry["path"] = path
        entry["alive"] = _start_ticks(pid) is not None and _start_ticks(pid) == entry.get("start_ticks")
        jobs.append(entry)
    return jobs


def _wait_gone(pid: int, ticks, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _start_ticks(pid) != ticks:
            return True
        time.sleep(0.1)
    return _start_ticks(pid) != ticks


def stop_job(entry: dict, grace_s: float) -> dict:
    """End one job: SIGTERM (the job ends its workload and exits), then SIGKILL and end the workload here."""
    pid, ticks = int(entry["pid"]), entry.get("start_ticks")
    how = "gone"
    if entry.get("alive"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        how = "terminated"
        if not _wait_gone(pid, ticks, grace_s):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, ticks, 5)
            how = "killed"
    if how != "terminated":  # the job could not clean up after itself: end what it was running
        pgid = entry.get("child_pgid")
        if pgid and entry.get("child_ticks") is not None and _start_ticks(int(pgid)) == entry["child_ticks"]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pgid), signal.SIGKILL)
        if entry.get("container"):
            subprocess.run([entry.get("docker") or "docker", "rm", "-f", entry["container"]], capture_output=True)
    with contextlib.suppress(OSError):
        os.unlink(entry["path"])
    return {"pid": pid, "campaign": entry.get("campaign"), "run_id": entry.get("run_id"), "how": how}


#: The labels every run's container carries (run_launch.Launcher): what a clean-up may remove is a run's container
#: of this results root (one Docker daemon may serve several: another install's, a test fleet's other hosts).
RUN_LABEL = "sparkfleet.run_id"
ROOT_LABEL = "sparkfleet.results_root"


def remove_left_containers(docker: str, results_root: str, campaign=None, keep=()) -> dict:
    """Remove the run containers a job could not remove (Docker was down, the job was killed): those labelled
    RUN_LABEL under ``results_root`` (and ``campaign``'s, when given), except ``keep`` (the live jobs' current
    ones). ``{"removed": [names], "error": None | why Docker could not be asked}``."""
    labels = [RUN_LABEL, "%s=%s" % (ROOT_LABEL, results_root)] + (
        ["sparkfleet.campaign=%s" % campaign] if campaign else [])
    filters = [a for label in labels for a in ("--filter", "label=" + label)]
    query = [docker, "ps", "-a", "--format", "{{.Names}}"] + filters
    try:
        listed = subprocess.run(query, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"removed": [], "error": "%s: %s" % (docker, exc)}
    if listed.returncode != 0:
        return {"removed": [], "error": (listed.stderr or listed.stdout).strip()[-300:] or "docker ps failed"}
    names = [n for n in listed.stdout.split() if n not in set(keep)]
    removed = [n for n in names
               if subprocess.run([docker, "rm", "-f", n], capture_output=True, timeout=120).returncode == 0]
    return {"removed": removed, "error": None}
