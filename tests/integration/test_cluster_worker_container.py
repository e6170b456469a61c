"""A multi-node run's worker in the container environment (issue 36), with real Docker and the project's test image:
cluster/worker.py runs it as rank 0's run runs its server - the image, the run's docker flags, the host's network so
that it listens on the node's own address - with the node's watch beside it; stopping it removes its container, also
when its docker client was killed (a SIGKILLed client leaves its container running)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest
from _ansible_modules import host_util
from llamacpp import free_port

pytestmark = [pytest.mark.root, pytest.mark.docker]

worker = host_util("cluster.worker")


def _containers(name: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"name=^{name}$", "--format", "{{.Names}}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def _params(tmp_path, image: str, name: str, port: int) -> dict:
    return {"state": "started", "name": name, "dir": str(tmp_path / "cluster"),
            "argv": ["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"], "address": "127.0.0.1",
            "port": port, "ready_url": f"http://127.0.0.1:{port}/", "timeout_s": 60.0, "env": {"WORKER_VAR": "1"},
            "environment": {"name": "ctr", "kind": "container", "image": image, "docker": "docker",
                            "docker_flags": ["--ipc=host"], "gpu_present": False, "results_root": str(tmp_path)},
            "node": {"run_id": name, "campaign": "c", "cluster": "pair", "head": "spark1", "host": "spark2",
                     "rank": 1, "address": "127.0.0.1"},
            "results_dir": str(tmp_path / "c" / "spark2"), "readiness": {"probe_s": 2}, "telemetry_interval_s": 0.5,
            "max_s": 300.0, "nvml": None}


def test_a_container_worker_listens_on_the_host_network_and_its_stop_removes_the_container(tmp_path, test_image):
    name, port = "ctr-" + tmp_path.name[-20:], free_port()
    out = worker.work(_params(tmp_path, test_image, name, port), None)
    container = worker.container_name(name)
    try:
        assert out["worker"]["container"] == {"name": container, "docker": "docker"}
        assert _containers(container) == [container] and _answers(f"http://127.0.0.1:{port}/")
        # the run's variables and results tree inside, as rank 0's container has them
        env = subprocess.run(["docker", "exec", container, "sh", "-c", "echo $WORKER_VAR; pwd"], capture_output=True,
                             text=True, check=True).stdout.split()
        assert env == ["1", str(tmp_path / "cluster")]
    finally:
        stopped = worker.work({"state": "stopped", "name": name, "dir": str(tmp_path / "cluster")}, None)
    assert stopped["stopped"][0]["stopped"] == "signalled" and _containers(container) == []
    node = json.loads((tmp_path / "c" / "spark2" / "cluster_nodes" / name / "node.json").read_text())
    assert node["environment"] == {"name": "ctr", "kind": "container"} and node["worker"]["stopped"] == "signalled"
    assert not _answers(f"http://127.0.0.1:{port}/")


def test_a_container_left_by_a_killed_docker_client_is_removed_at_the_stop(tmp_path, test_image):
    name, port = "kill-" + tmp_path.name[-20:], free_port()
    params = dict(_params(tmp_path, test_image, name, port), node=None)
    out = worker.work(params, None)
    container = worker.container_name(name)
    os.killpg(out["worker"]["pid"], signal.SIGKILL)  # the client dies; docker keeps its container running
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{out['worker']['pid']}") and time.monotonic() < deadline:
        time.sleep(0.1)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(out["worker"]["pid"], os.WNOHANG)
    assert _containers(container) == [container]
    assert worker.stop(name, str(tmp_path / "cluster"))["stopped"] == "gone"
    assert _containers(container) == [] and not _answers(f"http://127.0.0.1:{port}/")
