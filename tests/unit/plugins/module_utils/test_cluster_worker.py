"""cluster/worker.py: a worker with no port to probe (a vLLM --headless node, an SGLang rank >= 1: they answer nothing
until rank 0 has joined them) is ready once it still runs after its settle time, and refused when it exits first.
Real processes, started and stopped by the module's own code."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import worker


def test_a_worker_without_a_port_is_ready_once_it_still_runs_after_its_settle_time(tmp_path):
    began = time.monotonic()
    info = worker.start("run-1", ["sleep", "60"], str(tmp_path), "127.0.0.1", None, timeout_s=30, settle_s=0.6)
    try:
        assert info["ready_s"] >= 0.6 and time.monotonic() - began < 10
        assert os.path.exists(tmp_path / "run-1.json")
        os.kill(info["pid"], 0)  # still running: rank 0 would start now
    finally:
        assert worker.stop("run-1", str(tmp_path), grace_s=5) == {"name": "run-1", "stopped": "signalled", "node": None}
    assert not os.path.exists(tmp_path / "run-1.json")


def test_a_worker_without_a_port_that_exits_within_its_settle_time_is_refused_with_its_log(tmp_path):
    with pytest.raises(worker.WorkerError) as err:
        worker.start("run-2", ["sh", "-c", "echo no such model >&2; exit 3"], str(tmp_path), "127.0.0.1", None,
                     timeout_s=30, settle_s=5.0)
    text = str(err.value)
    assert "worker run-2 exited with 3 before the end of its 5 s settle time" in text and "no such model" in text
    assert not os.path.exists(tmp_path / "run-2.json")  # nothing left to stop
