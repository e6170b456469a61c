# Copyright: sparkfleet contributors
# Apache-2.0
"""A cluster worker: the process a multi-node engine runs on a node other than rank 0 (llama.cpp's
ggml-rpc-server), started for one run and stopped after it, on success, failure or timeout (cluster_run.yml's
``always``), or by restore.yml.

The process runs in the run's environment, as rank 0's server does (run_launch.Launcher.command): bare, found on
the host's PATH as a bare run's command is (runexec.bare_command); native, chrooted into the image's rootfs
(runexec.native_command); container, ``docker run`` of the image with the run's docker flags and the host's
network, so that it listens on the node's own address (runexec.container_command). It runs in its own session (it
outlives the module that started it). Its pid file ``<dir>/<name>.json`` says what runs; a stop signals its process
group only while /proc still shows that pid running that executable (a reused pid is never signalled), and removes
its container. Ready once its TCP port accepts on the address it listens on; a worker with no port to probe (a vLLM
--headless or SGLang rank >= 1, which answers nothing until rank 0 has joined it) once it still runs after a settle
time. Beside it, the node's watch (node_watch: its readiness probe before, its telemetry throughout), also for a
node where rank 0's launcher starts the rank (mpirun), with no process of its own here.

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
from ..run.jobs import ROOT_LABEL, RUN_LABEL
from . import node_watch, rdma_env

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


def container_name(name: str) -> str:
    """The worker's container (``sf-w-<run>``: rank 0's run's is ``sf-<run>``, on another host)."""
    return ("sf-w-" + name)[:120]


def environment_command(name: str, argv: List[str], env: Dict[str, str], cwd: str,
                        environment: Optional[Dict[str, Any]]) -> tuple:
    """runexec.placed_command for the worker ``name``: its container :func:`container_name`, labelled so that
    restore.yml's clean-up finds it."""
    root = (environment or {}).get("results_root") or cwd
    return runexec.placed_command(container_name(name), argv, env, cwd, environment,
                                  {RUN_LABEL: name, "sparkfleet.step": "worker", ROOT_LABEL: root})


def start(name: str, argv: List[str], directory: str, address: str, port: Optional[int], timeout_s: float,
          env: Optional[Dict[str, str]] = None, ready_url: Optional[str] = None,
          settle_s: float = SETTLE_S, environment: Optional[Dict[str, Any]] = None,
          replace: bool = True) -> Dict[str, Any]:
    """Start the worker in the run's ``environment`` (:func:`environment_command`) and wait until ``address:port``
    accepts (and ``ready_url`` answers 200, when given); with ``port`` None, until it has run for ``settle_s``.
    {pid, argv, executable, container, log, ready_s}. A worker of that name still running (a run that was killed)
    is stopped first (``replace``: the caller has already). WorkerError when it exits or times out."""
    os.makedirs(directory, exist_ok=True)
    if replace:
        stop(name, directory)
    log = os.path.join(directory, "%s.log" % name)
    cmd, executable, container = environment_command(name, argv, dict(env or {}), directory, environment)
    if container:  # a container of that name left by a killed run
        subprocess.run([container["docker"], "rm", "-f", container["name"]], capture_output=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    info = {"pid": proc.pid, "argv": list(argv), "executable": executable, "container": container, "log": log,
            "started": time.time()}
    _write_info(directory, name, info)
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


def _write_info(directory: str, name: str, info: Dict[str, Any]) -> None:
    """The pid file, merged with what it already says (the node's watch, started first)."""
    path = _pid_file(directory, name)
    try:
        with open(path, encoding="utf-8") as fh:
            info = dict(json.load(fh), **info)
    except (OSError, ValueError):
        pass
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(info, fh)


def stop(name: str, directory: str, grace_s: float = STOP_GRACE_S) -> Dict[str, Any]:
    """Stop the named worker (SIGTERM to its group, SIGKILL after ``grace_s``; its container removed) and its
    node's watch (the node file then says how the worker ended), and drop its pid file:
    {name, stopped: "signalled" | "gone" | "none", node: the node file or None}."""
    path = _pid_file(directory, name)
    try:
        with open(path, encoding="utf-8") as fh:
            info = json.load(fh)
    except (OSError, ValueError):
        return {"name": name, "stopped": "none", "node": None}
    outcome = _stop_process(info, grace_s) if info.get("pid") else "none"
    node = node_watch.finish(info.get("watch"), {"argv": info.get("argv"), "stopped": outcome}
                             if info.get("pid") else None)
    os.unlink(path)
    return {"name": name, "stopped": outcome, "node": node}


def _stop_process(info: Dict[str, Any], grace_s: float) -> str:
    """Signal the worker's group while it runs; remove its container. "signalled" or "gone"."""
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
    container = info.get("container")
    if container:  # the docker client is gone; its container may not be (a SIGKILLed client leaves it)
        subprocess.run([container["docker"], "rm", "-f", container["name"]], capture_output=True)
    return outcome


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
    """The cluster_worker module's work: started (the node's watch, then its worker when it has one) or stopped
    (one, or every one without a name)."""
    from ..task import TaskFailed

    if params["state"] != "started":
        stopped = [stop(params["name"], params["dir"])] if params.get("name") else stop_all(params["dir"])
        return {"changed": any(s["stopped"] != "none" or s["node"] for s in stopped), "stopped": stopped}
    name, directory = params["name"], params["dir"]
    environment = params.get("environment") or {"kind": "bare"}
    env = dict(params.get("env") or {})
    try:
        os.makedirs(directory, exist_ok=True)
        stop(name, directory)  # a worker or watch of that name a killed run left
        node = watch_node(name, directory, environment, env, params)
        problem = check_rdma(name, directory, environment, env, params)
        if problem:
            stop(name, directory)  # the watch ends; its node file keeps the check
            raise WorkerError(problem)
        info = None
        if params.get("argv"):
            info = start(name, params["argv"], directory, params["address"], params.get("port"), params["timeout_s"],
                         env, params.get("ready_url"), environment=environment, replace=False)
    except (WorkerError, node_watch.NodeRefused, runexec.RunSetupError, OSError) as exc:
        raise TaskFailed(str(exc)) from None
    return {"changed": True, "worker": info, "node": node}


def _remove_container(name: str, environment: Dict[str, Any]) -> None:
    """The container a probe run as ``name`` left (killed at its timeout), in a container environment."""
    if (environment.get("kind") or "bare") == "container":
        subprocess.run([environment.get("docker") or "docker", "rm", "-f", container_name(name)], capture_output=True)


def check_rdma(name: str, directory: str, environment: Dict[str, Any], env: Dict[str, str],
               params: Dict[str, Any]) -> Optional[str]:
    """RDMA as the worker's engine will see it, in the run's environment with its flags (rdma_env.check over
    ``rdma_hcas``; none given: nothing to check), kept in the node file. Why the run cannot go on, or None."""
    hcas = params.get("rdma_hcas") or []
    if not hcas:
        return None
    probe_name = name + ".rdma"
    try:
        found = rdma_env.check(lambda argv: environment_command(probe_name, argv, env, directory, environment)[0],
                               hcas, rdma_env.TIMEOUT_S)
    finally:
        _remove_container(probe_name, environment)
    found["command"] = runexec.redact(found["command"]) if found.get("command") else found.get("command")
    watch = _read_info(directory, name).get("watch")
    if watch:
        node_watch.note(watch, rdma=found)
    node = params.get("node") or {}
    return None if found["pass"] else "rdma on %s (rank %s): %s" % (node.get("host", "this node"),
                                                                    node.get("rank", "?"), found["reason"])


def _read_info(directory: str, name: str) -> Dict[str, Any]:
    try:
        with open(_pid_file(directory, name), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def watch_node(name: str, directory: str, environment: Dict[str, Any], env: Dict[str, str],
               params: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The node's readiness probe in the run's environment, then its telemetry daemon (kept in the pid file, so
    that :func:`stop` ends it with the worker): {file, readiness state}, or None without ``node``."""
    node = params.get("node")
    if not node or not params.get("results_dir"):
        return None
    probe_name = name + ".probe"
    readiness = node_watch.probe(
        params.get("readiness"), environment.get("results_root") or directory,
        bool(environment.get("gpu_present", True)),
        lambda argv: environment_command(probe_name, argv, env, directory, environment)[0],
        lambda: _remove_container(probe_name, environment))
    watch = node_watch.begin(dict(node, environment={"name": environment.get("name"),
                                                     "kind": environment.get("kind") or "bare"}),
                             params["results_dir"], readiness, params.get("telemetry_interval_s") or 1.0,
                             params.get("max_s") or 86400.0, params.get("nvml"))
    _write_info(directory, name, {"watch": watch})
    return {"file": os.path.join(watch["dir"], node_watch.NODE_FILE),
            "readiness": (readiness or {}).get("state")}
