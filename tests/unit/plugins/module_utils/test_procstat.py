"""/proc/PID/stat read in one place (sparkfleet_host.sensors.procstat): lines of odd shape, and live processes of this
machine (this test's own, a child it starts and reaps, a zombie it leaves unreaped for a moment)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from _ansible_modules import host_util

procstat = host_util("procstat")

FULL = "42 (a (b) c) S 7 40 40 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 1 0 5123 1000000 25 18446744073709551615"


def test_comm_with_spaces_and_parentheses_and_the_fields_after_it():
    stat = procstat.parse(FULL)
    assert (stat.comm, stat.state, stat.ppid, stat.pgrp) == ("a (b) c", "S", 7, 40)
    assert (stat.utime_ticks, stat.stime_ticks, stat.start_ticks, stat.rss_pages) == (250, 30, 5123, 25)


def test_a_short_line_has_no_times_and_a_line_of_something_else_is_refused():
    stat = procstat.parse("10 (worker ) R 1 10) D 1 10 10 0 -1 4194560 0 0\n")  # the last ")" ends comm
    assert (stat.comm, stat.state, stat.pgrp, stat.utime_ticks, stat.start_ticks) == ("worker ) R 1 10", "D", 10,
                                                                                    None, None)
    assert procstat.cpu_seconds(stat) is None
    for text in ("", "42 no parentheses S 1 2", "42 (comm) S 1"):
        with pytest.raises(ValueError):
            procstat.parse(text)


def test_this_process_read_from_proc():
    stat = procstat.read(os.getpid())
    assert (stat.ppid, stat.pgrp, stat.state) == (os.getppid(), os.getpgrp(), "R")
    assert procstat.live(stat) and stat.start_ticks == procstat.read(os.getpid()).start_ticks
    assert os.getpid() in procstat.pids()
    assert 0 <= procstat.cpu_seconds(stat) <= time.process_time() + 1


def test_a_zombie_is_not_live_and_a_reaped_process_is_gone(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while procstat.live(procstat.read(child.pid)) and time.monotonic() < deadline:  # exited, not yet reaped
        time.sleep(0.02)
    zombie = procstat.read(child.pid)
    assert zombie is not None and zombie.state == "Z" and not procstat.live(zombie)
    child.wait()
    assert procstat.read(child.pid) is None and not procstat.live(None)
    assert procstat.pids(str(tmp_path / "no-proc")) == [] and procstat.read(1, str(tmp_path)) is None
