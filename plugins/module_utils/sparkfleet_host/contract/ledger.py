# -*- coding: utf-8 -*-
"""The per-host ledger: an append-only JSON-lines log of job / started / finished events.

``job`` (no run_id) is written when a matrix job with something to run starts; ``finished`` carries what a
follower shows (status, duration, cooldown, cell) so progress needs no record reads. ``point`` (a serving run's
point ``k`` of ``n`` ``started`` or ``finished``) is progress within a run for followers only: no run state
(:func:`last_by_run`'s kinds leave it out), so resume and the accounting never read it.

Resume reads it back: a run whose last event is ``finished`` (and whose record.json exists) is done; a
run that ``started`` but never finished was interrupted and is run again. Each event is one ``write`` of
one line on an O_APPEND descriptor, fsynced, so a crash leaves at worst a truncated last line, which
``read_events`` skips.
"""

from __future__ import annotations

import datetime
import json
import os
import time

#: The ledger's file name, in its host's results directory (``<campaign>/<host>/ledger.jsonl``).
LEDGER_NAME = "ledger.jsonl"


def utc(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def append_event(path: str, event: str, run_id, **fields) -> dict:
    """Append one event; ``run_id`` None for an event about the job rather than a run (``job``)."""
    entry = {"ts": utc(time.time()), "event": event}
    if run_id is not None:
        entry["run_id"] = run_id
    entry.update(fields)
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a line a crash cut short is ended first, so this
            line = b"\n" + line  # event is a line of its own (the torn one is skipped by parse_events)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return entry


def append_point(path: str, run_id: str, k: int, n: int, point: str, phase: str, **fields):
    """A serving run's point ``k`` of ``n`` (1-based, in the run's order) ``started`` or ``finished``
    (``phase``; a finished one with its ``status`` and ``duration_s``). Bookkeeping for followers: a full disk
    loses the line, never the run (None then)."""
    try:
        return append_event(path, "point", run_id, k=k, n=n, point=point, phase=phase, **fields)
    except OSError:
        return None


def parse_events(lines) -> list:
    """The ledger's events from its lines (bytes or str); a line cut by a crash, or still being written, is
    skipped (the run it belonged to is re-done)."""
    events = []
    for raw in lines:
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict):
            events.append(entry)
    return events


def read_events(path: str) -> list:
    try:
        with open(path, "rb") as fh:
            return parse_events(fh)
    except FileNotFoundError:
        return []


def last_by_run(events: list, kinds=("job", "started", "finished")) -> dict:
    """run_id -> its last event among ``kinds``, in the order runs last changed (dicts keep insertion order)."""
    states = {}
    for entry in events:
        if entry.get("run_id") and entry.get("event") in kinds:
            states.pop(entry["run_id"], None)
            states[entry["run_id"]] = entry
    return states


def run_states(path: str) -> dict:
    """run_id -> last event ('started' or 'finished') with its fields."""
    return last_by_run(read_events(path))


def finished_fields(record: dict, order_index) -> dict:
    """What a follower needs to show a finished run without reading its record."""
    return {"order_index": order_index, "duration_s": record.get("duration_s"),
            "cooldown_s": (record.get("cooldown") or {}).get("waited_s"), "model": record.get("model"),
            "environment": record.get("environment"), "workload": record.get("workload"),
            "iteration": record.get("iteration"), "warmup": record.get("warmup")}


def append_finished(path: str, run_id: str, record: dict, order_index, **fields) -> dict:
    """The run's ``finished`` event: its record's status and :func:`finished_fields` (plus ``fields``)."""
    fields.update(finished_fields(record, order_index))
    return append_event(path, "finished", run_id, status=record["status"], **fields)
