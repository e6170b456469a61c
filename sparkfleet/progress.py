"""Live progress of a playbook run, derived from ansible-runner's event stream.

``RunnerEvents`` folds ansible-runner's events (dicts with ``event`` such as ``runner_on_ok``, ``runner_retry``,
``runner_on_failed``, ``runner_on_unreachable``, ``playbook_on_stats``, and ``event_data`` holding ``host``,
``task`` and the task's result ``res``) into sparkfleet's progress events; ``Progress`` folds those into
per-host state; ``Display`` shows it: redrawn in place on a terminal, one plain line per event otherwise (logs,
CI). ``sparkfleet run --json-events FILE`` keeps the progress events, one JSON object per line.

Progress events. Every one has ``event`` and ``ts`` (UTC seconds since the epoch, float).

* ``playbook_start``: ``playbook`` (file name). ``play_start``: ``name`` (the play's name).
* ``planned``: ``host``, ``total`` (number of planned runs), ``campaign`` (when known), ``next_cell``. From a
  task result whose ``ansible_facts`` hold ``sparkfleet_plan`` (a host's part of campaign_plan's plan: its
  ``runs``, or the list itself; each with ``run_id``, ``order_index``, ``model``, ``environment``, ``workload``,
  ...). ``campaign`` comes from a plan entry's ``campaign`` or that host's ``sparkfleet_resolved_campaign.name``.
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

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO


def _name(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("name")
    return "" if value is None else str(value)


def _cell(item: dict[str, Any]) -> str | None:
    names = [_name(item.get(k)) for k in ("model", "environment", "workload")]
    return "/".join(names) if any(names) else None


def _message(result: dict[str, Any], default: str) -> str:
    """The result's message; for a loop, the first failed item's (the task's own says only "All items
    completed")."""
    msg = result.get("msg")
    items = result.get("results")
    if isinstance(items, list):
        items = [i for i in items if isinstance(i, dict) and i.get("msg")]
        for test in (lambda i: i.get("failed") or i.get("unreachable"), lambda i: "exception" in i, bool):
            found = [i for i in items if test(i)]
            if found:
                msg = found[0]["msg"]
                break
    return str(msg or result.get("stderr") or default)


class _HostRuns:
    def __init__(self) -> None:
        self.plan: list[dict[str, Any]] = []
        self.total: int | None = None
        self.done_ids: set[Any] = set()
        self.done_anon = 0
        self.spent: list[float] = []  # duration_s + cooldown_s of the timed runs that were not skipped
        self.seen: set[tuple[str, str]] = set()  # (run_id, finished_ts) of list entries passed on

    @property
    def done(self) -> int:
        return len(self.done_ids) + self.done_anon

    def eta(self) -> float | None:
        if self.total is None or not self.spent:
            return None
        return round(max(self.total - self.done, 0) * sum(self.spent) / len(self.spent), 1)

    def next_cell(self) -> str | None:
        for item in self.plan:
            if item.get("run_id") not in self.done_ids:
                return _cell(item)
        return None


#: ansible-runner events whose ``event_data.res`` may carry a plan or run events.
_RESULT_EVENTS = ("runner_on_ok", "runner_retry", "runner_item_on_ok", "runner_item_on_failed", "runner_on_failed")


class RunnerEvents:
    """ansible-runner's events in, sparkfleet's progress events out (see the module's docstring)."""

    def __init__(self) -> None:
        self._hosts: dict[str, _HostRuns] = {}
        self._campaign: dict[str, str] = {}
        #: the controller's campaign directories (results dir / campaign name) the play hosts were given
        self.campaign_dirs: list[str] = []
        #: host -> the reproducibility tolerance (percent) its plan carries
        self.tolerances: dict[str, float] = {}

    def fold(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("event")
        data = event.get("event_data")
        data = data if isinstance(data, dict) else {}
        host = str(data.get("host") or "")
        out: list[dict[str, Any]] = []
        if kind == "playbook_on_start":
            out.append(progress_event("playbook_start", playbook=os.path.basename(str(data.get("playbook") or ""))))
        elif kind == "playbook_on_play_start":
            out.append(progress_event("play_start", name=str(data.get("name") or data.get("play") or "").strip()))
        elif kind in _RESULT_EVENTS and host:
            res = data.get("res")
            if isinstance(res, dict):
                out += self._inspect(host, res)
            if kind == "runner_on_failed" and not data.get("ignore_errors"):
                out.append(progress_event("host_failed", host=host, task=_task(data),
                                      msg=_message(res if isinstance(res, dict) else {}, "failed")))
        elif kind == "runner_on_unreachable" and host:
            res = data.get("res")
            out.append(progress_event("host_unreachable", host=host, task=_task(data),
                                  msg=_message(res if isinstance(res, dict) else {}, "unreachable")))
        elif kind == "playbook_on_stats":
            out.append(progress_event("stats", hosts=_stats(data)))
        return out

    def _host(self, name: str) -> _HostRuns:
        return self._hosts.setdefault(name, _HostRuns())

    def _inspect(self, host: str, result: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        facts = result.get("ansible_facts")
        if isinstance(facts, dict):
            resolved = facts.get("sparkfleet_resolved_campaign")
            if isinstance(resolved, dict) and resolved.get("name"):
                self._campaign[host] = str(resolved["name"])
                results_dir = facts.get("sparkfleet_controller_results")
                if isinstance(results_dir, str) and results_dir:
                    path = os.path.join(results_dir, str(resolved["name"]))
                    if path not in self.campaign_dirs:
                        self.campaign_dirs.append(path)
            plan = facts.get("sparkfleet_plan")
            if isinstance(plan, dict):  # a host's part of campaign_plan's plan: its runs, async limit, ...
                tolerance = (plan.get("reproducibility") or {}).get("tolerance_pct")
                if isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool):
                    self.tolerances[host] = float(tolerance)
                plan = plan.get("runs")
            if isinstance(plan, list):
                out.append(self._planned(host, plan))
        event = result.get("sparkfleet_event")
        if isinstance(event, dict):
            out.append(self._run_event(host, event))
        events = result.get("sparkfleet_events")
        if isinstance(events, list):  # every run finished so far (bench_follow): the new ones only
            runs = self._host(host)
            for event in events:
                if not isinstance(event, dict):
                    continue
                key = (str(event.get("run_id")), str(event.get("finished_ts")))
                if key not in runs.seen:
                    runs.seen.add(key)
                    out.append(self._run_event(host, event))
        return out  # a loop's items come as runner_item_on_* events of their own

    def _planned(self, host: str, plan: list[Any]) -> dict[str, Any]:
        runs = self._host(host)
        entries = [p for p in plan if isinstance(p, dict)]
        runs.plan = sorted(entries, key=lambda p: (p.get("order_index") is None, p.get("order_index") or 0))
        runs.total = len(plan)
        fields: dict[str, Any] = {"host": host, "total": runs.total, "next_cell": runs.next_cell()}
        campaign = next((p["campaign"] for p in entries if p.get("campaign")), None) or self._campaign.get(host)
        if campaign:
            fields["campaign"] = campaign
        return progress_event("planned", **fields)

    def _run_event(self, host: str, event: dict[str, Any]) -> dict[str, Any]:
        runs = self._host(host)
        fields = dict(event)
        kind = str(fields.get("type") or "run")
        fields.update(host=host, cell=_cell(fields))
        if kind == "run":
            run_id = fields.get("run_id")
            if run_id is None:
                runs.done_anon += 1
            else:
                runs.done_ids.add(run_id)
            if runs.total is None and isinstance(fields.get("total"), int) and fields["total"] > 0:
                runs.total = fields["total"]  # no plan seen: trust the event's own total
            if fields.get("status") != "skipped" and fields.get("duration_s") is not None:
                with contextlib.suppress(TypeError, ValueError):
                    runs.spent.append(float(fields["duration_s"]) + float(fields.get("cooldown_s") or 0))
            fields.update(done=runs.done, total=runs.total, eta_s=runs.eta(), next_cell=runs.next_cell())
        fields.pop("event", None)
        fields.pop("ts", None)
        return progress_event(kind, **fields)


def progress_event(event: str, **fields: Any) -> dict[str, Any]:
    return {"event": event, **fields, "ts": round(time.time(), 3)}


def _task(data: dict[str, Any]) -> str:
    return str(data.get("task") or data.get("task_action") or "").strip()


def _stats(data: dict[str, Any]) -> dict[str, dict[str, int]]:
    """playbook_on_stats' per-counter host maps, turned into one map of counters per host."""
    def count(key: str, host: str) -> int:
        value = data.get(key)
        return int(value.get(host, 0)) if isinstance(value, dict) else 0

    names = ("processed", "ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")
    hosts = sorted({h for key in names if isinstance(data.get(key), dict) for h in data[key]})
    return {h: {"ok": count("ok", h), "changed": count("changed", h), "failed": count("failures", h),
                "unreachable": count("dark", h), "skipped": count("skipped", h), "rescued": count("rescued", h),
                "ignored": count("ignored", h)} for h in hosts}


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
        if name not in self.hosts:
            self.hosts[name] = HostState(name)
        return self.hosts[name]

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
            lines = event.get("lines")
            self.report = [str(line) for line in lines] if isinstance(lines, list) else []
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
    two-space-indented line per verdict with its details indented further) and where the report is."""
    out: list[str] = []
    inside = False
    for line in report:
        if line.strip() == "verdicts:":
            inside, out = True, ["verdicts:"]
        elif inside and line.startswith("  ") and not line.startswith("   "):
            out.append(line)
        elif inside and not line.startswith(" "):
            inside = False
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
        out = []
        if self._drawn:
            out.append(f"\x1b[{self._drawn}F\x1b[J")  # back to the first drawn line, clear below
        out.append("\n".join(lines) + "\n")
        self.stream.write("".join(out))
        self.stream.flush()
        self._drawn = len(lines)

    def close(self, rc: int | None) -> None:
        self.tick(force=True)
        for line in self.progress.summary(rc):
            print(line, file=self.stream)
        self.stream.flush()
