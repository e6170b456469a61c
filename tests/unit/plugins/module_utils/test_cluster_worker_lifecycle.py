"""cluster/worker.py with real processes: a worker started in its own session is ready once its port accepts (and
its readiness URL answers), stopped with its whole process group, its pid file gone; one that exits at once fails
its start with its log's tail; a pid file whose pid now runs something else is never signalled."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from _ansible_modules import host_util
from llamacpp import free_port

worker = host_util("cluster.worker")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_worker_is_started_ready_and_stopped_with_its_group(tmp_path):
    port = free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    info = worker.start("w1", argv, str(tmp_path), "127.0.0.1", port, 30.0,
                        ready_url=f"http://127.0.0.1:{port}/")
    try:
        assert info["ready_s"] >= 0 and _alive(info["pid"]) and os.getpgid(info["pid"]) == info["pid"]
        assert json.loads((tmp_path / "w1.json").read_text())["pid"] == info["pid"]
    finally:
        stopped = worker.stop("w1", str(tmp_path))
    assert stopped == {"name": "w1", "stopped": "signalled", "node": None}
    deadline = time.monotonic() + 10
    while _alive(info["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(info["pid"]) and not (tmp_path / "w1.json").exists()
    assert worker.stop("w1", str(tmp_path)) == {"name": "w1", "stopped": "none", "node": None}


def test_a_worker_that_exits_fails_its_start_naming_why(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('cannot bind the port'); sys.exit(3)"]
    with pytest.raises(worker.WorkerError, match="exited with 3 .*cannot bind the port"):
        worker.start("w2", argv, str(tmp_path), "127.0.0.1", free_port(), 30.0)
    assert not (tmp_path / "w2.json").exists()


def test_a_reused_pid_is_never_signalled(tmp_path):
    # the pid file names this test's own process, which runs python, not the worker's executable
    (tmp_path / "w3.json").write_text(json.dumps({"pid": os.getpid(), "executable": "/usr/bin/ggml-rpc-server"}))
    assert worker.stop_all(str(tmp_path)) == [{"name": "w3", "stopped": "gone", "node": None}]
    assert _alive(os.getpid()) and not (tmp_path / "w3.json").exists()
