# Copyright: sparkfleet contributors
# Apache-2.0
"""What a worker node of a multi-node run measures of itself: its readiness probe before the run (the same probe,
judged by the same rules, as rank 0's before its server starts) and its telemetry throughout, written to its own
results tree as the node file ``<results_dir>/cluster_nodes/<run_id>/node.json`` with ``telemetry.csv`` beside it.
The report joins them to rank 0's record by run id (data flows one way: each node writes its own, collection fetches
them). A node whose probe says refuse fails the run before it starts; suspect lets it run, and the report treats the
whole run as suspect.

The telemetry sampler must outlive the module that starts it (the run goes on after the task returns): a daemon
forked from the module, as Ansible's async_wrapper does, in its own session with its standard streams on /dev/null
(Ansible waits for the module's pipes to close). It samples until SIGTERM, or until its own ``max_s`` (a controller
killed before restore.yml leaves nothing sampling forever), then writes its summary and exits. Everything it runs is
imported before the fork: the module's payload is deleted once the module exits.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from typing import Any, Callable, Dict, Optional

from .. import gpu_control
from ..contract import node_file
from ..contract.ledger import utc
from ..contract.textfile import read_json_object, write_atomic
from ..health import host_state
from ..sensors import procstat
from ..sensors.gpu import use_bindings
from ..sensors.telemetry import TelemetrySampler

NODE_FILE = node_file.NODE_NAME
TELEMETRY_FILE = "telemetry.csv"
SUMMARY_FILE = "telemetry.json"  # the sampler's summary, read into the node file when the watch ends
SCHEMA = node_file.NODE_SCHEMA
#: How long a stop waits for the sampler to write its summary.
SUMMARY_WAIT_S = 20.0
POLL_S = 0.2


class NodeRefused(Exception):
    """The node's readiness probe refuses the run (policy refuse); the message names the node and why."""


def _write_json(path: str, data: Dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def probe(settings: Optional[Dict[str, Any]], results_root: str, gpu_present: bool,
          wrap: Optional[Callable[[list], list]], cleanup: Callable[[], None]) -> Optional[Dict[str, Any]]:
    """The node's readiness section (host_state.readiness_probe in the run's environment, through ``wrap``), with a
    lost cap that sparkfleet set put back once and probed again, as rank 0 does; None when the probe is off."""
    settings = settings or {}
    if settings.get("probe_s", 1) == 0:
        return None
    controls = gpu_control.applied_controls(results_root)
    script = os.path.join(results_root, ".sparkfleet", "workloads", host_state.PROBE_SCRIPT)

    def once() -> Dict[str, Any]:
        try:
            return host_state.readiness_probe(settings, controls, gpu_present, script=script, wrap=wrap)
        finally:
            cleanup()

    return gpu_control.reapply_lost_controls(once(), controls, once)


def begin(node: Dict[str, Any], results_dir: str, readiness: Optional[Dict[str, Any]], interval_s: float,
          max_s: float, nvml: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Write the node file with its ``readiness`` section and start the telemetry daemon: the watch {pid,
    starttime, dir} to keep in the worker's pid file. NodeRefused (the node file written) when the probe's action
    is refuse."""
    directory = node_file.node_dir(results_dir, str(node["run_id"]))
    os.makedirs(directory, exist_ok=True)
    data = dict(node, schema=SCHEMA, readiness=readiness, started_utc=utc(time.time()), stopped_utc=None, worker=None,
                telemetry={"file": TELEMETRY_FILE, "note": "sampling"})
    action = ((readiness or {}).get("action") or {}).get("action")
    if action == "refuse":
        data["telemetry"] = {"note": "not sampled: the readiness probe refused the run"}
        _write_json(os.path.join(directory, NODE_FILE), data)
        reasons = "; ".join(r.get("message", "") for r in readiness.get("reasons") or []) or readiness.get("state")
        raise NodeRefused("readiness on %s (rank %s): %s" % (node.get("host"), node.get("rank"), reasons))
    _write_json(os.path.join(directory, NODE_FILE), data)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(directory, SUMMARY_FILE))
    use_bindings((nvml or {}).get("path"), (nvml or {}).get("note"))  # before the fork: the daemon reads NVML
    pid = _spawn_sampler(directory, float(interval_s), float(max_s))
    return {"pid": pid, "starttime": _starttime(pid), "dir": directory}


def _starttime(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot: with the pid, its identity. None when no such process
    runs (an exited one left as a zombie included)."""
    stat = procstat.read(pid)
    return stat.start_ticks if procstat.live(stat) else None


def _spawn_sampler(directory: str, interval_s: float, max_s: float) -> int:
    """Fork the telemetry daemon (double fork, its own session); its pid, said once its SIGTERM handler is set (a
    stop right after the start must still end in a summary)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked processes
        try:
            os.close(read_end)
            os.setsid()
            if os.fork():
                os._exit(0)
            stopped: list = []
            signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            os.write(write_end, str(os.getpid()).encode())
            os.close(write_end)
            _sample_until_stopped(directory, interval_s, max_s, stopped)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        pid = int(fh.read() or b"0")
    os.waitpid(child, 0)
    if not pid:
        raise OSError("the telemetry daemon of %s did not start" % directory)
    return pid


def _sample_until_stopped(directory: str, interval_s: float, max_s: float,
                          stopped: list) -> None:  # pragma: no cover - forked
    """The daemon: detached from the module's streams, it samples until SIGTERM (``stopped`` filled) or ``max_s``,
    then writes its summary."""
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, 1024)
    sampler = TelemetrySampler(os.path.join(directory, TELEMETRY_FILE), interval_s=interval_s)
    sampler.start()
    deadline = time.monotonic() + max_s
    while not stopped and time.monotonic() < deadline:
        time.sleep(POLL_S)
    summary = sampler.stop()
    if not stopped:
        summary["note"] = "stopped after %.0f s by itself: nothing stopped it (a killed controller)" % max_s
    _write_json(os.path.join(directory, SUMMARY_FILE), summary)


def _alive(watch: Dict[str, Any]) -> bool:
    return bool(watch.get("pid")) and _starttime(int(watch["pid"])) == watch.get("starttime")


def note(watch: Dict[str, Any], **fields: Any) -> None:
    """Add ``fields`` to the node file of a running watch (the RDMA check in the node's environment)."""
    path = os.path.join(watch["dir"], NODE_FILE)
    _write_json(path, dict(read_json_object(path) or {"schema": SCHEMA}, **fields))


def finish(watch: Optional[Dict[str, Any]], worker: Optional[Dict[str, Any]]) -> Optional[str]:
    """Stop the telemetry daemon and complete the node file with its summary, when it ended and how the node's
    ``worker`` did (None: rank 0's launcher ran the rank here). The node file's path, or None without a watch."""
    if not watch or not watch.get("dir"):
        return None
    directory = watch["dir"]
    summary_path = os.path.join(directory, SUMMARY_FILE)
    if _alive(watch):
        with contextlib.suppress(OSError):
            os.kill(int(watch["pid"]), signal.SIGTERM)
        deadline = time.monotonic() + SUMMARY_WAIT_S
        while _alive(watch) and time.monotonic() < deadline:  # it writes its summary, then exits
            time.sleep(POLL_S)
    path = os.path.join(directory, NODE_FILE)
    data = read_json_object(path) or {"schema": SCHEMA}
    summary = read_json_object(summary_path)
    data["telemetry"] = dict(summary, file=TELEMETRY_FILE) if summary else {
        "note": "the telemetry daemon wrote no summary (killed, or its host restarted)"}
    data.update(stopped_utc=utc(time.time()), worker=worker)
    _write_json(path, data)
    with contextlib.suppress(OSError):
        os.unlink(summary_path)
    return path
