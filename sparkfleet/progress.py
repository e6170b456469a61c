"""Live progress of a playbook run, from ansible-runner's event stream.

``RunnerEvents`` folds ansible-runner's events (``event``, and ``event_data`` with ``host``, ``task`` and the
result ``res``) into the progress events below; ``Progress`` folds those into per-host state; ``Display`` shows
it, redrawn in place on a terminal, one plain line per event otherwise (logs, CI). ``sparkfleet run
--json-events FILE`` keeps the progress events, one JSON object per line, each with ``event`` and ``ts``.

* ``playbook_start``: ``playbook`` (file name). ``play_start``: ``name`` (the play's name).
* ``planned``: ``host``, ``total`` (planned runs), ``campaign`` (the host's ``sparkfleet_resolved_campaign``'s
  name, when known), ``next_cell``; from a result whose ``ansible_facts`` hold ``sparkfleet_plan`` (its
  ``runs``, or the list itself).
* ``run`` (and other types): a task result's (or a loop item's) ``sparkfleet_event`` dict (bench_run), or each
  dict of its ``sparkfleet_events`` list: bench_follow returns every run finished so far on each ``until``
  retry, so an entry whose ``run_id`` and ``finished_ts`` were seen before for that host is not repeated. The
  dict is passed on with ``event`` set to its ``type`` (default ``run``) and ``host``, ``cell``
  (``model/environment/workload``; null when it names none of them), and for runs ``done`` (distinct
  ``run_id``s so far), ``total`` (the planned total; without a plan, the event's own), ``eta_s``
  ((total - done) x the mean ``duration_s + cooldown_s`` of the host's timed, not skipped runs; null before
  one) and ``next_cell`` (the first planned run by ``order_index`` with no event yet) added.
* ``point``: a serving run's point ``k`` of ``n`` (1-based, in the run's shuffled order) ``started`` or
  ``finished`` (``phase``), one event each, from bench_follow's ``sparkfleet_points`` (the host's ledger; an entry
  seen before is not repeated): ``host``, ``run_id``, ``cell``, ``point`` (its name, e.g. ``d0.c4.pp512.tg64``),
  ``k``, ``n``, ``phase``, for a finished one ``status`` and ``duration_s``; ``point_ts`` and ``run_started_ts``
  (the host's times of this event and of the run's start); ``run_eta_s``: the time left in the run, (n - points
  finished) x the mean ``duration_s`` of its finished points, before any finished the plan's estimate of the run
  (as ``sparkfleet plan`` shows it) shared evenly among its points, else null; ``eta_s``: the host's, as in
  ``run`` events but counting the run in progress by ``run_eta_s``: ``run_eta_s`` + the runs after it x the
  mean run time (before any run finished, this run's: its elapsed time + ``run_eta_s``).
* ``host_failed`` / ``host_unreachable``: ``host``, ``task``, ``msg`` (a failure whose errors were ignored is not
  one).
* ``stats``: at the end, ``hosts`` maps each host to ``ok``, ``changed``, ``failed``, ``unreachable``,
  ``skipped``, ``rescued``, ``ignored``.
* ``report``: ``lines``, ``sparkfleet report``'s terminal summary, when ``sparkfleet run`` wrote the report.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate


def _cell(item: dict[str, Any]) -> str | None:
    """model/environment/workload: a plan entry's are dicts with a name, a run event's the names."""
    values = [item.get(k) for k in ("model", "environment", "workload")]
    names = ["" if n is None else str(n) for n in (v.get("name") if isinstance(v, dict) else v for v in values)]
    return "/".join(names) if any(names) else None


def _message(result: dict[str, Any], default: str) -> str:
    """The result's message; for a loop, the first failed item's (the task's own says only "All items
    completed")."""
    failed = [i["msg"] for i in result.get("results") or ()
              if i.get("msg") and (i.get("failed") or i.get("unreachable"))]
    return str((failed or [result.get("msg")])[0] or result.get("stderr") or default)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _host_time(value: Any) -> float | None:
    """A ledger time (2026-11-21T10:42:02.120384Z, the host's clock) in seconds, or None."""
    try:
        return datetime.datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


def _planned_run_s(item: dict[str, Any] | None) -> float | None:
    """The plan's estimate of a serving run (``sparkfleet plan``'s "about ... per run"), or None."""
    try:
        return estimate.serving_run_s(item["workload"]) if item else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


class _HostRuns:
    def __init__(self) -> None:
        self.plan: list[dict[str, Any]] = []
        self.by_id: dict[Any, dict[str, Any]] = {}  # run_id -> its plan entry
        self.total: int | None = None
        self.done: set[Any] = set()  # run ids
        self.spent: list[float] = []  # duration_s + cooldown_s of the timed runs that were not skipped
        self.seen: set[tuple[str, str]] = set()  # (run_id, finished_ts) of list entries passed on
        self.points_seen: set[tuple[Any, ...]] = set()  # (run_id, run_started_ts, k, phase) passed on
        self.point_s: dict[tuple[Any, Any], list[float]] = {}  # (run_id, run_started_ts) -> finished points' s

    def eta(self) -> float | None:
        if self.total is None or not self.spent:
            return None
        return round(max(self.total - len(self.done), 0) * sum(self.spent) / len(self.spent), 1)

    def next_cell(self) -> str | None:
        return next((_cell(item) for item in self.plan if item.get("run_id") not in self.done), None)

    def planned(self, run_id: Any) -> dict[str, Any] | None:
        return self.by_id.get(run_id)

    def run_eta(self, durations: list[float], n: int, run_id: Any) -> float | None:
        """Seconds left in a serving run: its points not finished x their mean time (the finished ones', else the
        plan's estimate of the run over its n points)."""
        planned = _planned_run_s(self.planned(run_id))
        per_point = _mean(durations) if durations else planned / n if planned and n > 0 else None
        return None if per_point is None else round(max(n - len(durations), 0) * per_point, 1)

    def eta_within(self, run_id: Any, run_eta: float | None, elapsed: float | None) -> float | None:
        """The host's ETA with the run in progress counted by ``run_eta``: + the runs after it x the mean run time
        (none finished yet: this run's, ``elapsed`` + ``run_eta``)."""
        if run_eta is None or self.total is None:
            return None
        after = max(self.total - len(self.done) - (0 if run_id in self.done else 1), 0)
        per_run = _mean(self.spent) if self.spent else None if elapsed is None else elapsed + run_eta
        if not after:
            return run_eta
        return None if per_run is None else round(run_eta + after * per_run, 1)


#: ansible-runner events whose ``event_data.res`` may carry a plan or run events, or say the host is lost.
_RESULT_EVENTS = ("runner_on_ok", "runner_retry", "runner_item_on_ok", "runner_item_on_failed", "runner_on_failed",
                  "runner_on_unreachable")


class RunnerEvents:
    """ansible-runner's events in, sparkfleet's progress events out (see the module's docstring)."""

    def __init__(self) -> None:
        self._hosts: dict[str, _HostRuns] = {}
        self._campaign: dict[str, str] = {}
        #: the controller's campaign directories (results dir / campaign name) the play hosts were given
        self.campaign_dirs: list[str] = []
        #: host -> the reproducibility tolerance (percent) its plan carries
        self.tolerances: dict[str, float] = {}
        #: the playbook's final counters per host (playbook_on_stats), None before it
        self.stats: dict[str, dict[str, int]] | None = None

    def fold(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("event")
        data = event.get("event_data") or {}
        host = data.get("host")
        if kind == "playbook_on_start":
            return [progress_event("playbook_start", playbook=os.path.basename(data["playbook"]))]
        if kind == "playbook_on_play_start":
            return [progress_event("play_start", name=str(data.get("name") or "").strip())]
        if kind == "playbook_on_stats":
            self.stats = _stats(data)
            return [progress_event("stats", hosts=self.stats)]
        if kind not in _RESULT_EVENTS or not host:
            return []
        res = data["res"] if isinstance(data.get("res"), dict) else {}
        out = self._inspect(host, res)
        if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            lost = "failed" if kind == "runner_on_failed" else "unreachable"
            out.append(progress_event(f"host_{lost}", host=host, task=str(data.get("task") or "").strip(),
                                      msg=_message(res, lost)))
        return out

    def _host(self, name: str) -> _HostRuns:
        return self._hosts.setdefault(name, _HostRuns())

    def _inspect(self, host: str, result: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        facts = result.get("ansible_facts") or {}
        name = (facts.get("sparkfleet_resolved_campaign") or {}).get("name")
        if name:
            self._campaign[host] = name
            if facts.get("sparkfleet_controller_results"):
                path = os.path.join(facts["sparkfleet_controller_results"], name)
                if path not in self.campaign_dirs:
                    self.campaign_dirs.append(path)
        plan = facts.get("sparkfleet_plan")
        if isinstance(plan, dict):  # a host's part of campaign_plan's plan: its runs, async limit, ...
            tolerance = plan.get("reproducibility", {}).get("tolerance_pct")
            if tolerance is not None:
                self.tolerances[host] = float(tolerance)
            plan = plan.get("runs")
        if isinstance(plan, list):
            out.append(self._planned(host, plan))
        if result.get("sparkfleet_event"):
            out.append(self._run_event(host, result["sparkfleet_event"]))
        runs = self._host(host)
        finished = [e for e in result.get("sparkfleet_events") or () if isinstance(e, dict)]
        points = self._new_points(host, result.get("sparkfleet_points"))
        # a run's points before its end, the run in progress's after the runs that ended meanwhile
        ended = runs.done | {e.get("run_id") for e in finished}
        out += [self._point_event(host, p) for p in points if p.get("run_id") in ended]
        for event in finished:  # every run finished so far (bench_follow): new ones
            key = (str(event.get("run_id")), str(event.get("finished_ts")))
            if key not in runs.seen:
                runs.seen.add(key)
                out.append(self._run_event(host, event))
        out += [self._point_event(host, p) for p in points if p.get("run_id") not in ended]
        return out  # a loop's items come as runner_item_on_* events of their own

    def _new_points(self, host: str, points: Any) -> list[dict[str, Any]]:
        """bench_follow's point entries not passed on before (each retry lists the recent ones again)."""
        runs = self._host(host)
        new = []
        for point in points if isinstance(points, list) else ():
            key = (point.get("run_id"), point.get("run_started_ts"), point.get("k"), point.get("phase")) \
                if isinstance(point, dict) else None
            if key and key not in runs.points_seen:
                runs.points_seen.add(key)
                new.append(point)
        return new

    def _point_event(self, host: str, point: dict[str, Any]) -> dict[str, Any]:
        runs = self._host(host)
        run_id, n = point.get("run_id"), point.get("n")
        durations = runs.point_s.setdefault((run_id, point.get("run_started_ts")), [])
        if point.get("phase") == "finished" and isinstance(point.get("duration_s"), int | float):
            durations.append(float(point["duration_s"]))
        run_eta = runs.run_eta(durations, n if isinstance(n, int) else 0, run_id)
        at, began = _host_time(point.get("ts")), _host_time(point.get("run_started_ts"))
        elapsed = at - began if at is not None and began is not None else None
        fields = {key: point.get(key) for key in ("run_id", "point", "k", "n", "phase", "run_started_ts")}
        if point.get("phase") == "finished":
            fields.update(status=point.get("status"), duration_s=point.get("duration_s"))
        return progress_event("point", host=host, cell=_cell(runs.planned(run_id) or {}), **fields,
                              point_ts=point.get("ts"), run_eta_s=run_eta,
                              eta_s=runs.eta_within(run_id, run_eta, elapsed))

    def _planned(self, host: str, plan: list[dict[str, Any]]) -> dict[str, Any]:
        runs = self._host(host)
        runs.plan = sorted(plan, key=lambda p: p["order_index"])
        runs.by_id = {item.get("run_id"): item for item in runs.plan}
        runs.total = len(plan)
        campaign = {"campaign": self._campaign[host]} if host in self._campaign else {}
        return progress_event("planned", host=host, total=runs.total, next_cell=runs.next_cell(), **campaign)

    def _run_event(self, host: str, event: dict[str, Any]) -> dict[str, Any]:
        runs = self._host(host)
        fields = dict(event)
        kind = str(fields.get("type") or "run")
        fields.update(host=host, cell=_cell(fields))
        if kind == "run":
            runs.done.add(fields["run_id"])
            if runs.total is None:
                runs.total = fields.get("total")  # no plan seen: trust the event's own total
            if fields.get("status") != "skipped" and fields.get("duration_s") is not None:
                runs.spent.append(float(fields["duration_s"]) + float(fields.get("cooldown_s") or 0))
            fields.update(done=len(runs.done), total=runs.total, eta_s=runs.eta(), next_cell=runs.next_cell())
        return progress_event(kind, **fields)


def progress_event(event: str, **fields: Any) -> dict[str, Any]:
    return {"event": event, **fields, "ts": round(time.time(), 3)}


#: our counter names: playbook_on_stats' keys
_COUNTERS = {"ok": "ok", "changed": "changed", "failed": "failures", "unreachable": "dark", "skipped": "skipped",
             "rescued": "rescued", "ignored": "ignored"}


def _stats(data: dict[str, Any]) -> dict[str, dict[str, int]]:
    """playbook_on_stats' per-counter host maps, turned into one map of counters per host."""
    hosts = sorted({h for key in (*_COUNTERS.values(), "processed") for h in data.get(key) or {}})
    return {h: {ours: (data.get(key) or {}).get(h, 0) for ours, key in _COUNTERS.items()} for h in hosts}


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


@dataclass
class HostState:
    name: str
    total: int | None = None
    done: int = 0
    cell: str | None = None          # the run in progress (the next planned one), or the last one seen
    last: str | None = None          # "cell status" of the latest finished run
    eta_s: float | None = None
    point: str | None = None         # "k/n" of the serving run in progress's latest point event
    run_eta_s: float | None = None   # the time left in that run
    statuses: dict[str, int] = field(default_factory=dict)
    state: str = "running"           # running | done | failed | unreachable
    msg: str | None = None

    @property
    def progress(self) -> str:
        return f"{self.done}/{self.total if self.total is not None else '?'}"

    @property
    def current(self) -> str:
        """The cell in progress, with the serving run's point and the time left in the run."""
        cell = _clip(self.cell or "-", 60)
        return f"{cell} point {self.point}, run ETA {fmt_duration(self.run_eta_s)}" if self.point else cell

    @property
    def status_summary(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.statuses.items())) or "-"


class Progress:
    """Per-host state built from progress events."""

    def __init__(self) -> None:
        self.hosts: dict[str, HostState] = {}
        self.play: str | None = None
        self.campaign: str | None = None
        self.stats: dict[str, dict[str, int]] | None = None
        self.report: list[str] = []  # `sparkfleet report`'s output, from the "report" event
        self.started = time.monotonic()

    def host(self, name: str) -> HostState:
        return self.hosts.setdefault(name, HostState(name))

    def update(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        name = event.get("host")
        if kind == "play_start":
            self.play = event.get("name")
        elif kind == "planned" and name:
            h = self.host(name)
            h.total = event.get("total")
            h.cell = event.get("next_cell")
            self.campaign = event.get("campaign") or self.campaign
        elif kind == "run" and name:
            h = self.host(name)
            h.done = int(event.get("done") or h.done + 1)
            if event.get("total") is not None:
                h.total = event["total"]
            h.eta_s = event.get("eta_s")
            status = str(event.get("status") or "?")
            h.statuses[status] = h.statuses.get(status, 0) + 1
            h.last = f"{event.get('cell')} {status}"
            h.cell = event.get("next_cell")
            h.point = h.run_eta_s = None
            if h.total is not None and h.done >= h.total:
                h.state = "done"
        elif kind == "point" and name:
            h = self.host(name)
            h.point = f"{event.get('k')}/{event.get('n')}"
            h.run_eta_s, h.eta_s = event.get("run_eta_s"), event.get("eta_s")
            h.cell = event.get("cell") or h.cell
        elif kind in ("host_failed", "host_unreachable") and name:
            h = self.host(name)
            h.state = "failed" if kind == "host_failed" else "unreachable"
            h.msg = str(event.get("msg") or "")
        elif kind == "report":
            self.report = event["lines"]
        elif kind == "stats":
            self.stats = event.get("hosts") or {}
            for hname in self.stats:
                self.host(hname)

    def render(self) -> list[str]:
        elapsed = fmt_duration(time.monotonic() - self.started)
        head = f"sparkfleet run  {self.play or 'starting'}"
        if self.campaign:
            head += f"  campaign {self.campaign}"
        rows = [("HOST", "RUNS", "STATE", "CURRENT CELL", "ETA", "STATUS")]
        for h in sorted(self.hosts.values(), key=lambda x: x.name):
            current = h.current if h.state == "running" else _clip(h.msg or "-", 60)
            rows.append((h.name, h.progress, h.state, current, fmt_duration(h.eta_s), h.status_summary))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [f"{head}  elapsed {elapsed}"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        return lines

    def summary(self, rc: int | None) -> list[str]:
        lines = []
        if self.stats:
            for hname, s in sorted(self.stats.items()):
                h = self.hosts.get(hname)
                runs = f" runs={h.progress}" if h and h.total is not None else ""
                lines.append(f"{hname}: ok={s.get('ok', 0)} changed={s.get('changed', 0)} "
                             f"failed={s.get('failed', 0)} unreachable={s.get('unreachable', 0)}{runs}")
        lines += report_verdicts(self.report)
        lines.append(f"playbook finished: rc={rc}")
        return lines


def report_verdicts(report: list[str]) -> list[str]:
    """The verdict headlines of `sparkfleet report`'s terminal summary (a "verdicts:" line, then one
    two-space-indented line per verdict with its details indented further), its "numbers:" block whole (the
    headline table, report/headline.py), in the summary's order, and where the report is."""
    out: list[str] = []
    inside = None
    for line in report:
        if line.strip() in ("verdicts:", "numbers:") and not line.startswith(" "):
            inside = line.strip()
            out.append(line)
        elif line.startswith("  ") and (inside == "numbers:" or inside == "verdicts:" and not line.startswith("   ")):
            out.append(line)
        elif inside and not line.startswith(" "):
            inside = None
        if line.startswith("wrote ") and line.endswith("index.html"):
            out.append(f"report: {line.removeprefix('wrote ')}")
    return out


def plain_line(event: dict[str, Any]) -> str | None:
    """One line for a non-terminal log, or None for events not worth a line."""
    kind = event.get("event")
    host = event.get("host")
    if kind == "play_start":
        return f"PLAY {event.get('name')}"
    if kind == "planned":
        camp = f" (campaign {event['campaign']})" if event.get("campaign") else ""
        return f"{host}: {event.get('total')} runs planned{camp}"
    if kind == "run":
        total = event.get("total") if event.get("total") is not None else "?"
        dur = event.get("duration_s")
        dur_s = f" {dur:.1f}s" if isinstance(dur, int | float) else ""
        return (f"{host}: run {event.get('done')}/{total} {event.get('cell')} {event.get('status')}{dur_s}"
                f" eta {fmt_duration(event.get('eta_s'))}")
    if kind == "point":
        return _point_line(event)
    if kind == "host_failed":
        return f"{host}: FAILED in {event.get('task')}: {event.get('msg')}"
    if kind == "host_unreachable":
        return f"{host}: UNREACHABLE: {event.get('msg')}"
    return None


def _point_line(event: dict[str, Any]) -> str:
    """'spark1: point 3/28 d0.c4.pp512.tg64 ok 312.4s run eta 2h05m eta 6h40m' (or 'started')."""
    dur = event.get("duration_s")
    what = "started" if event.get("phase") == "started" else f"{event.get('status')}" + (
        f" {dur:.1f}s" if isinstance(dur, int | float) else "")
    return (f"{event.get('host')}: point {event.get('k')}/{event.get('n')} {event.get('point')} {what}"
            f" run eta {fmt_duration(event.get('run_eta_s'))} eta {fmt_duration(event.get('eta_s'))}")


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


class Display:
    """Show ``Progress``: in place on a TTY (at most ``fps`` redraws a second), plain lines otherwise."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None, quiet: bool = False,
                 fps: float = 4.0):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.quiet = quiet
        self.progress = Progress()
        self._drawn = 0
        self._last_draw = 0.0
        self._interval = 1.0 / fps

    def feed(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.progress.update(event)
            if not self.quiet and not self.tty:
                line = plain_line(event)
                if line:
                    print(line, file=self.stream, flush=True)
        self.tick()

    def tick(self, force: bool = False) -> None:
        if self.quiet or not self.tty or not self.progress.hosts and not force:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self._interval:
            return
        self._last_draw = now
        lines = self.progress.render()
        back = f"\x1b[{self._drawn}F\x1b[J" if self._drawn else ""  # back to the first drawn line, clear below
        self.stream.write(back + "\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)

    def close(self, rc: int | None) -> None:
        self.tick(force=True)
        for line in self.progress.summary(rc):
            print(line, file=self.stream)
        self.stream.flush()
