"""Live progress of a playbook run, read from the ``sparkfleet.bench.progress`` callback's JSON lines.

``JsonlTail`` follows the file as the callback appends to it (whole lines only); ``Progress`` folds the
events into per-host state; ``Display`` shows it: redrawn in place on a terminal, one plain line per
event otherwise (logs, CI). The event contract is documented in ``plugins/callback/progress.py``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO


class JsonlTail:
    """New complete JSON lines of a file that another process appends to."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        events = []
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events


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
    """Per-host state built from callback events."""

    def __init__(self) -> None:
        self.hosts: dict[str, HostState] = {}
        self.play: str | None = None
        self.campaign: str | None = None
        self.stats: dict[str, dict[str, int]] | None = None
        self.report: list[str] = []  # `sparkfleet report`'s output, from the report play's "report" event
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
