# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache-2.0
"""The host lease: one sparkfleet run at a time on a host, whatever its campaign.

A run (one ``ansible-playbook bench.yml``, one ``sparkfleet run``) takes the lease before it changes anything
on the host (mounts, GPU state, a job) and gives it back when it has undone them. Another run finding the lease
held is refused there, before it changes anything, so its clean-up can never unmount, stop or overwrite what the
holder set up; the refusal names the holder and the command that ends it.

The lease is ``<results_root>/.sparkfleet/host.lease`` (JSON: token, campaign, controller, taken). A holder is
alive while its controller's ansible-playbook runs, when the controller is this machine (same /etc/machine-id,
the pid with its start time); a killed one's job of the same campaign is resumed, of another campaign keeps the
host. For a controller elsewhere, while any registered matrix job runs on the host (jobs.py) or the lease is
younger than ``ttl_s`` (each acquire by the same run renews it). A lease whose holder is not alive was left by a
killed controller: it is taken over, and the result says so.
The check and the write happen under an flock, so two runs starting at once cannot both win.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time

from ..contract.textfile import write_atomic
from ..sensors import procstat
from .jobs import list_jobs

LEASE_SUBPATH = os.path.join(".sparkfleet", "host.lease")
#: How long a lease of a controller on another machine counts as alive with no job running (provisioning:
#: an image pull and a rootfs extraction fit; a killed controller's lease blocks no longer than this).
DEFAULT_TTL_S = 7200.0


class HostBusy(Exception):
    """Another run holds the lease; the message names it and how to end it."""


def lease_path(results_root: str) -> str:
    return os.path.join(results_root, LEASE_SUBPATH)


def machine_id(path: str = "/etc/machine-id") -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def controller_identity(pid: int) -> dict:
    """Who takes a lease: this machine's id and the controller process (its pid and start time)."""
    stat = procstat.read(pid)
    return {"machine_id": machine_id(), "pid": pid, "start_ticks": stat.start_ticks if stat else None,
            "hostname": os.uname().nodename}


def read_lease(results_root: str):
    """The lease held now (with its age ``age_s``), or None: no lease, or one that is not JSON (a torn write
    is impossible: it is written atomically; anything else there is not a lease)."""
    path = lease_path(results_root)
    try:
        with open(path, encoding="utf-8") as fh:
            lease = json.load(fh)
        age = time.time() - os.stat(path).st_mtime
    except (OSError, ValueError):
        return None
    if not isinstance(lease, dict) or not lease.get("token"):
        return None
    lease["age_s"] = max(0.0, age)
    return lease


def alive_because(lease: dict, results_root: str, campaign: str, ttl_s: float):
    """Why the lease's holder still runs (a sentence), or None when it is gone and ``campaign``'s run may take
    the lease over."""
    jobs = [j for j in list_jobs(results_root) if j.get("alive")]
    controller = lease.get("controller") or {}
    if controller.get("machine_id") and controller.get("machine_id") == machine_id():
        stat = procstat.read(int(controller.get("pid") or 0)) if controller.get("pid") else None
        if procstat.live(stat) and stat.start_ticks == controller.get("start_ticks"):
            return "its controller, ansible-playbook pid %s on this machine, runs" % controller["pid"]
        # The controller was killed. A job it left of this same campaign is resumed (bench_run waits for it to
        # end, then runs what is left); another campaign's job keeps the host.
        others = [j for j in jobs if j.get("campaign") != campaign]
        if others:
            return "its controller is gone but its matrix job runs (pid %s, campaign %s)" % (
                others[0]["pid"], others[0].get("campaign"))
        return None
    if jobs:
        return "its matrix job runs (pid %s, campaign %s)" % (jobs[0]["pid"], jobs[0].get("campaign"))
    if lease["age_s"] < ttl_s:
        return ("its controller is on another machine (%s) and took the lease %.0f s ago; a lease with no job is "
                "taken over after %.0f s" % (controller.get("hostname") or "?", lease["age_s"], ttl_s))
    return None


def busy_message(host: str, lease: dict, why: str, results_root: str) -> str:
    return ("%s is busy: sparkfleet run %s of campaign %s holds it since %s (%s). One sparkfleet run at a time "
            "per host: wait for it, or end it and undo what it set up with `ansible-playbook playbooks/restore.yml "
            "-i INVENTORY -l %s` (lease: %s)" % (host, lease["token"][:12], lease.get("campaign"),
                                                 lease.get("taken", "?"), why, host, lease_path(results_root)))


@contextlib.contextmanager
def _locked(results_root: str):
    path = lease_path(results_root) + ".lock"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def acquire(results_root: str, host: str, token: str, campaign: str, controller: dict,
            ttl_s: float = DEFAULT_TTL_S, check_mode: bool = False) -> dict:
    """Take (or renew) the lease for ``token``: ``{"changed", "taken_over"}``; HostBusy when another run holds
    it and is alive. ``check_mode``: the same answer, nothing written."""
    guard = contextlib.nullcontext() if check_mode else _locked(results_root)  # check mode writes nothing
    with guard:
        held = read_lease(results_root)
        taken_over = None
        if held and held["token"] != token:
            why = alive_because(held, results_root, campaign, ttl_s)
            if why:
                raise HostBusy(busy_message(host, held, why, results_root))
            taken_over = {k: held.get(k) for k in ("token", "campaign", "taken")}
        lease = {"token": token, "campaign": campaign, "controller": controller,
                 "taken": held["taken"] if held and held["token"] == token else time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                               time.gmtime())}
        if not check_mode:
            write_atomic(lease_path(results_root), json.dumps(lease, sort_keys=True))
        return {"changed": not held or held["token"] != token, "taken_over": taken_over}


def held_by(results_root: str, token: str) -> bool:
    held = read_lease(results_root)
    return bool(held) and held["token"] == token


def release(results_root: str, token=None, check_mode: bool = False) -> dict:
    """Give the lease back: ``token``'s only (another run's lease is left alone), or whoever holds it when
    ``token`` is None (restore.yml with no run named). ``{"changed", "holder"}``."""
    held = read_lease(results_root)
    if not held or check_mode:
        return {"changed": bool(held) and (token is None or held["token"] == token),
                "holder": held and {k: held.get(k) for k in ("token", "campaign", "taken")}}
    with _locked(results_root):
        held = read_lease(results_root)
        if not held or (token is not None and held["token"] != token):
            return {"changed": False, "holder": held and {k: held.get(k) for k in ("token", "campaign", "taken")}}
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lease_path(results_root))
        return {"changed": True, "holder": {k: held.get(k) for k in ("token", "campaign", "taken")}}
