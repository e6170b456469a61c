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
* ``host_failed`` / ``host_unreachable``: ``host``, ``task``, ``msg`` (a failure whose errors were ignored is not
  one).
* ``stats``: at the end, ``hosts`` maps each host to ``ok``, ``changed``, ``failed``, ``unreachable``,
  ``skipped``, ``rescued``, ``ignored``.
* ``report``: ``lines``, ``sparkfleet report``'s terminal summary, when ``sparkfleet run`` wrote the report.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO


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


class _HostRuns:
    def __init__(self) -> None:
        self.plan: list[dict[str, Any]] = []
        self.total: int | None = None
        self.done: set[Any] = set()  # run ids
        self.spent: list[float] = []  # duration_s + cooldown_s of the timed runs that were not skipped
        self.seen: set[tuple[str, str]] = set()  # (run_id, finished_ts) of list entries passed on

    def eta(self) -> float | None:
        if self.total is None or not self.spent:
            return None
        return round(max(self.total - len(self.done), 0) * sum(self.spent) / len(self.spent), 1)

    def next_cell(self) -> str | None:
        return next((_cell(item) for item in self.plan if item.get("run_id") not in self.done), None)


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
        for event in result.get("sparkfleet_events") or ():  # every run finished so far (bench_follow): new ones
            key = (str(event.get("run_id")), str(event.get("finished_ts")))
            if key not in runs.seen:
                runs.seen.add(key)
                out.append(self._run_event(host, event))
        return out  # a loop's items come as runner_item_on_* events of their own

    def _planned(self, host: str, plan: list[dict[str, Any]]) -> dict[str, Any]:
        runs = self._host(host)
        runs.plan = sorted(plan, key=lambda p: p["order_index"])
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
    statuses: dict[str, int] = field(default_factory=dict)
    state: str = "running"           # running | done | failed | unreachable
    msg: str | None = None

    @property
    def progress(self) -> str:
        return f"{self.done}/{self.total if self.total is not None else '?'}"

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
            if h.total is not None and h.done >= h.total:
                h.state = "done"
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
            current = h.cell if h.state == "running" else (h.msg or "")
            rows.append((h.name, h.progress, h.state, _clip(current or "-", 60), fmt_duration(h.eta_s),
                         h.status_summary))
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
    if kind == "host_failed":
        return f"{host}: FAILED in {event.get('task')}: {event.get('msg')}"
    if kind == "host_unreachable":
        return f"{host}: UNREACHABLE: {event.get('msg')}"
    return None


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
