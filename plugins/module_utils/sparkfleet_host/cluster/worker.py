# Copyright: sparkfleet contributors
# Apache-2.0
"""A cluster worker: the process a multi-node engine runs on a node other than rank 0 (llama.cpp's
ggml-rpc-server), started for one run and stopped after it, on success, failure or timeout (cluster_runs.yml's
``always``), or by restore.yml.

The process runs bare, in its own session (it outlives the module that started it), found on the host's PATH as a
bare run's command is (runexec.bare_command). Its pid file ``<dir>/<name>.json`` says what runs; a stop signals its
process group only while /proc still shows that pid running that executable (a reused pid is never signalled).
Ready once its TCP port accepts on the address it listens on; a worker with no port to probe (a vLLM --headless or
SGLang rank >= 1, which answers nothing until rank 0 has joined it) once it still runs after a settle time.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from typing import Any, Dict, List, Optional

from ..engines.serving import log_tail
from ..run import runexec

POLL_S = 0.2
STOP_GRACE_S = 10.0
#: A worker without a port: how long it must keep running after its start (a wrong flag, a missing model or
#: executable fails within it) before rank 0 starts; its joining the cluster shows in rank 0's readiness.
SETTLE_S = 5.0


class WorkerError(Exception):
    """The worker could not be started or did not become ready; the message says why, with its log's tail."""


def _pid_file(directory: str, name: str) -> str:
    return os.path.join(directory, "%s.json" % name)


def _running(info: Dict[str, Any]) -> bool:
    """The recorded pid still runs the recorded executable (not a reused pid)."""
    try:
        with open("/proc/%d/cmdline" % int(info["pid"]), "rb") as fh:
            argv0 = fh.read().split(b"\0", 1)[0].decode("utf-8", "replace")
    except (OSError, ValueError, KeyError):
        return False
    return os.path.basename(argv0) == os.path.basename(str(info.get("executable") or ""))


def _accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1.0):
            return True
    except OSError:
        return False


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # straight to the node, never a proxy
    try:
        with opener.open(url, timeout=2.0) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def start(name: str, argv: List[str], directory: str, address: str, port: Optional[int], timeout_s: float,
          env: Optional[Dict[str, str]] = None, ready_url: Optional[str] = None,
          settle_s: float = SETTLE_S) -> Dict[str, Any]:
    """Start the worker and wait until ``address:port`` accepts (and ``ready_url`` answers 200, when given); with
    ``port`` None, until it has run for ``settle_s``. {pid, argv, executable, log, ready_s}. A worker of that name
    still running (a run that was killed) is stopped first. WorkerError when it exits or times out."""
    os.makedirs(directory, exist_ok=True)
    stop(name, directory)
    log = os.path.join(directory, "%s.log" % name)
    cmd = runexec.bare_command(argv, dict(env or {}), directory)
    executable = runexec.bare_env(argv, dict(env or {}))[1]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    info = {"pid": proc.pid, "argv": list(argv), "executable": executable, "log": log, "started": time.time()}
    with open(_pid_file(directory, name), "w", encoding="utf-8") as fh:
        json.dump(info, fh)
    began = time.monotonic()
    awaited = "%s:%d" % (address, port) if port else "its %.0f s settle time" % settle_s
    while not _ready(address, port, ready_url, time.monotonic() - began >= settle_s):
        if proc.poll() is not None:
            stop(name, directory)
            raise WorkerError("worker %s exited with %s before %s: %s" % (
                name, proc.returncode, "%s accepted" % awaited if port else "the end of " + awaited, log_tail(log)))
        if time.monotonic() - began > timeout_s:
            stop(name, directory)
            raise WorkerError("worker %s: %s did not answer within %.0f s: %s" % (
                name, ready_url or awaited, timeout_s, log_tail(log)))
        time.sleep(POLL_S)
    return dict(info, ready_s=round(time.monotonic() - began, 3))


def _ready(address: str, port: Optional[int], ready_url: Optional[str], settled: bool) -> bool:
    """A worker with a port: it accepts (and ready_url answers 200); without one: it has settled."""
    if not port:
        return settled
    return _accepts(address, port) and (not ready_url or _answers(ready_url))


def stop(name: str, directory: str, grace_s: float = STOP_GRACE_S) -> Dict[str, Any]:
    """Stop the named worker (SIGTERM to its group, SIGKILL after ``grace_s``) and drop its pid file:
    {name, stopped: "signalled" | "gone" | "none"}."""
    path = _pid_file(directory, name)
    try:
        with open(path, encoding="utf-8") as fh:
            info = json.load(fh)
    except (OSError, ValueError):
        return {"name": name, "stopped": "none"}
    outcome = "gone"
    if _running(info):
        outcome = "signalled"
        pid = int(info["pid"])
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except OSError:
                break
            deadline = time.monotonic() + wait
            while _running(info) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(POLL_S)
            if not _running(info):
                break
    os.unlink(path)
    return {"name": name, "stopped": outcome}


def _reap(pid: int) -> None:
    with contextlib.suppress(OSError):  # not our child (the module that started it has exited): init reaps it
        os.waitpid(pid, os.WNOHANG)


def stop_all(directory: str) -> List[Dict[str, Any]]:
    """Stop every worker whose pid file is in ``directory`` (restore.yml)."""
    try:
        names = sorted(f[:-5] for f in os.listdir(directory) if f.endswith(".json"))
    except OSError:
        return []
    return [stop(name, directory) for name in names]


def work(params: Dict[str, Any], _task: Any) -> Dict[str, Any]:
    """The cluster_worker module's work: started (one worker) or stopped (one, or every one without a name)."""
    from ..task import TaskFailed

    if params["state"] == "started":
        try:
            info = start(params["name"], params["argv"], params["dir"], params["address"], params.get("port"),
                         params["timeout_s"], params.get("env"), params.get("ready_url"))
        except (WorkerError, runexec.RunSetupError, OSError) as exc:
            raise TaskFailed(str(exc)) from None
        return {"changed": True, "worker": info}
    stopped = [stop(params["name"], params["dir"])] if params.get("name") else stop_all(params["dir"])
    return {"changed": any(s["stopped"] != "none" for s in stopped), "stopped": stopped}
