# -*- coding: utf-8 -*-
"""Reuse made explicit (issue 33, item 3): a campaign run again whose planned runs are all done measures
nothing and says so; a fresh measurement (``sparkfleet run --fresh``, ``-e sparkfleet_fresh=true``) is a new
instance of the campaign, the previous one moved aside (never deleted), on the host and on the controller.

Where results live: on a host ``<work_dir>/results/<campaign>/<host>/`` (ledger.jsonl, runs/<run_id>/ ...); on
the controller ``<results_dir>/<campaign>/<host>/`` beside campaign.json. A previous instance is moved to
``<campaign>.<UTC stamp>`` beside it: ``<work_dir>/results/<campaign>.<stamp>/<host>/`` on the host,
``<results_dir>/<campaign>.<stamp>/`` on the controller (a campaign directory of its own: a report never pools two
measurements of one campaign).

Used by the bench_run module (the host) and by the controller (campaign_plan, sparkfleet run): plain Python.
"""

from __future__ import annotations

import os
import time

#: What a run's module entry and progress event say for a run the ledger already has as done.
SKIPPED = "skipped"


def stamp(now=None) -> str:
    """A previous instance's suffix: the UTC time it was moved aside, to the second (20261127T101502Z)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))


def nothing_measured(statuses) -> bool:
    """True when there were planned runs and every one was already done (skipped): nothing was measured."""
    statuses = list(statuses)
    return bool(statuses) and all(s == SKIPPED for s in statuses)


def _day(ts) -> str:
    """A ledger timestamp (2026-11-27T10:15:02.123456Z) as shown: 2026-11-27 10:15 UTC."""
    text = str(ts or "")
    return "%s %s UTC" % (text[:10], text[11:16]) if len(text) >= 16 else (text or "?")


def done_message(host: str, finished_ts) -> str:
    """'N runs already done on HOST (first .. last); nothing measured', from the finished dates of its runs
    (ledger timestamps, ISO 8601 UTC; unknown ones are left out of the dates)."""
    finished_ts = list(finished_ts)
    stamps = sorted(str(t) for t in finished_ts if t)
    n = len(finished_ts)
    if not stamps:
        when = "date unknown"
    elif _day(stamps[0]) == _day(stamps[-1]):
        when = _day(stamps[0])
    else:
        when = "%s .. %s" % (_day(stamps[0]), _day(stamps[-1]))
    return ("%d run%s already done on %s (%s); nothing measured (measure again, keeping these: "
            "sparkfleet run --fresh, or -e sparkfleet_fresh=true)" % (n, "" if n == 1 else "s", host, when))


def previous_path(path: str, suffix: str) -> str:
    """``<parent>/<name>.<suffix>``, made unique with .2, .3 ... when taken."""
    base = "%s.%s" % (path.rstrip(os.sep), suffix)
    candidate, n = base, 1
    while os.path.lexists(candidate):
        n += 1
        candidate = "%s.%d" % (base, n)
    return candidate


def move_host_instance(host_dir: str, suffix: str, keep=(".lock",)):
    """Move a host's previous measurement of a campaign, ``<root>/<campaign>/<host>/``, to
    ``<root>/<campaign>.<suffix>/<host>/``: every entry but ``keep`` (the job's lock, held while this runs).
    Returns the new host directory, or None when there was nothing to move. Nothing is deleted."""
    try:
        entries = sorted(e for e in os.listdir(host_dir) if e not in keep)
    except FileNotFoundError:
        return None
    if not entries:
        return None
    campaign_dir, host = os.path.split(host_dir.rstrip(os.sep))
    target = os.path.join(previous_path(campaign_dir, suffix), host)
    os.makedirs(target)
    for entry in entries:
        os.rename(os.path.join(host_dir, entry), os.path.join(target, entry))
    return target


def move_campaign_instance(campaign_dir: str, suffix: str):
    """The controller's side: ``<results_dir>/<campaign>/`` (campaign.json, every host's collected results)
    renamed ``<results_dir>/<campaign>.<suffix>/``. Returns the new directory, or None when there was none."""
    if not os.path.isdir(campaign_dir):
        return None
    target = previous_path(campaign_dir, suffix)
    os.rename(campaign_dir, target)
    return target
