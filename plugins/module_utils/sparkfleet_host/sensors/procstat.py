"""/proc/PID/stat read in one place, its fields by name (proc(5)).

The process table of the fingerprint, a job's start time (a reused pid told from the job's), a server's process
group and session, and a child's CPU time all come from this one line. comm, the second field, may hold spaces and
parentheses: the last ")" ends it.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional


class ProcStat(NamedTuple):
    comm: str
    state: str  # R, S, D, Z (exited, not yet reaped), X (dead), ...
    ppid: int
    pgrp: int
    session: Optional[int]  # the session id (None where the line is cut short)
    utime_ticks: Optional[int]  # None where the line is cut short (a test's, an old kernel's)
    stime_ticks: Optional[int]
    start_ticks: Optional[int]  # clock ticks since boot
    rss_pages: int


# The fields after comm, counted from 0 (proc(5)'s field n is n - 3 here).
_STATE, _PPID, _PGRP, _SESSION, _UTIME, _STIME, _START, _RSS = 0, 1, 2, 3, 11, 12, 19, 21


def parse(text: str) -> ProcStat:
    """A /proc/PID/stat line; ValueError when it is not one."""
    head, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or "(" not in head or len(fields) <= _PGRP:
        raise ValueError("not a /proc/PID/stat line: %r" % text[:80])

    def at(index: int) -> Optional[int]:
        return int(fields[index]) if len(fields) > index else None

    return ProcStat(comm=head.partition("(")[2], state=fields[_STATE], ppid=int(fields[_PPID]),
                    pgrp=int(fields[_PGRP]), session=at(_SESSION), utime_ticks=at(_UTIME), stime_ticks=at(_STIME),
                    start_ticks=at(_START), rss_pages=at(_RSS) or 0)


def read(pid: int, proc_root: str = "/proc") -> Optional[ProcStat]:
    """The process's stat, or None once it is gone (or its line cannot be read)."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), encoding="utf-8", errors="replace") as fh:
            return parse(fh.read())
    except (OSError, ValueError):
        return None


def live(stat: Optional[ProcStat]) -> bool:
    """Running or sleeping: not gone, not a zombie (exited; holds no memory, only its exit status)."""
    return stat is not None and stat.state not in ("Z", "X")


def pids(proc_root: str = "/proc") -> list:
    try:
        return [int(name) for name in os.listdir(proc_root) if name.isdigit()]
    except OSError:
        return []


def cpu_seconds(stat: Optional[ProcStat]) -> Optional[float]:
    """utime + stime in seconds, None when unknown."""
    if stat is None or stat.utime_ticks is None or stat.stime_ticks is None:
        return None
    return (stat.utime_ticks + stat.stime_ticks) / os.sysconf("SC_CLK_TCK")
