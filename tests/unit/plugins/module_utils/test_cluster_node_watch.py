"""A worker node of a multi-node run watches itself (cluster/node_watch.py through cluster/worker.py's module work):
its readiness probe before the run and a telemetry daemon that outlives the module, into its own results tree
(cluster_nodes/<run_id>/node.json, telemetry.csv); stopping the worker ends the daemon and completes the node file.
A probe that refuses fails the start naming the node, with nothing left sampling. Real processes, no GPU here: the
probe says so (state unknown) and the daemon samples host memory."""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

import pytest
from _ansible_modules import host_util
from llamacpp import free_port
from test_cluster_worker_lifecycle import _alive

worker = host_util("cluster.worker")
node_watch = host_util("cluster.node_watch")
task = host_util("task")

NODE = {"run_id": "r1", "campaign": "c", "cluster": "pair", "head": "spark1", "host": "spark2", "rank": 1,
        "address": "127.0.0.1"}


def _params(tmp_path: Path, **over) -> dict:
    return {"state": "started", "name": "r1", "dir": str(tmp_path / "cluster"), "argv": None, "address": "127.0.0.1",
            "port": None, "ready_url": None, "timeout_s": 30.0, "env": {},
            "environment": {"name": "bare", "kind": "bare", "gpu_present": False, "results_root": str(tmp_path)},
            "node": dict(NODE), "results_dir": str(tmp_path / "c" / "spark2"), "readiness": {"probe_s": 2},
            "telemetry_interval_s": 0.2, "max_s": 120.0, "nvml": None, **over}


def _node(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "c" / "spark2" / "cluster_nodes" / "r1" / "node.json").read_text())


def test_a_worker_node_is_probed_and_sampled_while_its_worker_runs_and_the_node_file_completed_at_its_stop(tmp_path):
    port = free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    out = worker.work(_params(tmp_path, argv=argv, port=port), None)
    info = json.loads((tmp_path / "cluster" / "r1.json").read_text())
    daemon = info["watch"]["pid"]
    try:
        assert out["worker"]["pid"] == info["pid"] and _alive(daemon) and _alive(info["pid"])
        assert out["node"]["readiness"] == "unknown"  # no GPU: nothing to probe, said so
        started = _node(tmp_path)
        assert started["readiness"]["reasons"][0]["cause"] == "no_gpu" and started["stopped_utc"] is None
        assert started["environment"] == {"name": "bare", "kind": "bare"} and started["rank"] == 1
        time.sleep(1.5)  # a few samples
    finally:
        stopped = worker.work({"state": "stopped", "name": "r1", "dir": str(tmp_path / "cluster")}, None)
    assert stopped["stopped"][0]["stopped"] == "signalled"
    node = _node(tmp_path)
    assert node["worker"] == {"argv": argv, "stopped": "signalled"} and node["stopped_utc"]
    assert node["telemetry"]["file"] == "telemetry.csv" and node["telemetry"]["samples"] >= 2, node["telemetry"]
    with (tmp_path / "c" / "spark2" / "cluster_nodes" / "r1" / "telemetry.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) >= 2 and all(r["mem_used_gib"] for r in rows)
    deadline = time.monotonic() + 10
    while _alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(daemon) and not (tmp_path / "cluster" / "r1.json").exists()
    assert not (tmp_path / "c" / "spark2" / "cluster_nodes" / "r1" / "telemetry.json").exists()


def test_a_node_whose_rank_rank_0_starts_is_watched_with_no_worker_of_its_own(tmp_path):
    out = worker.work(_params(tmp_path), None)  # argv None: trtllm-serve's mpirun starts the rank here
    assert out["worker"] is None and out["node"]["readiness"] == "unknown"
    daemon = json.loads((tmp_path / "cluster" / "r1.json").read_text())["watch"]["pid"]
    assert _alive(daemon)
    stopped = worker.stop_all(str(tmp_path / "cluster"))  # restore.yml's stop of every one
    assert stopped[0]["stopped"] == "none" and stopped[0]["node"].endswith("node.json")
    node = _node(tmp_path)
    assert node["worker"] is None and node["stopped_utc"] and "samples" in node["telemetry"]


def test_a_refusing_probe_fails_the_start_naming_the_node_and_nothing_samples(tmp_path):
    readiness = {"state": "suspect", "action": {"action": "refuse", "warn": True},
                 "reasons": [{"cause": "clock_event", "message": "HW slowdown active under load"}]}
    with pytest.raises(node_watch.NodeRefused, match=r"readiness on spark2 \(rank 1\): HW slowdown active"):
        node_watch.begin(dict(NODE), str(tmp_path / "c" / "spark2"), readiness, 0.2, 60.0)
    node = _node(tmp_path)
    assert node["readiness"]["action"]["action"] == "refuse" and "not sampled" in node["telemetry"]["note"]
    assert not (tmp_path / "c" / "spark2" / "cluster_nodes" / "r1" / "telemetry.csv").exists()


def test_a_probe_left_off_is_recorded_as_none(tmp_path):
    out = worker.work(_params(tmp_path, readiness={"probe_s": 0}), None)
    try:
        assert out["node"]["readiness"] is None and _node(tmp_path)["readiness"] is None
    finally:
        worker.stop("r1", str(tmp_path / "cluster"))


def test_a_worker_that_fails_to_start_completes_its_node_file_and_stops_the_daemon(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('no such model'); sys.exit(3)"]
    with pytest.raises(task.TaskFailed, match="exited with 3 .*no such model"):
        worker.work(_params(tmp_path, argv=argv, port=free_port()), None)
    node = _node(tmp_path)
    assert node["worker"]["stopped"] == "gone" and node["stopped_utc"]
    assert not (tmp_path / "cluster" / "r1.json").exists()


@pytest.mark.parametrize(("environment", "network", "present", "absent"), [
    # no GPU on the node: --gpus dropped, as rank 0's run drops it; the host's network added
    ({"kind": "container", "name": "ctr", "image": "img:1", "docker": "docker", "docker_flags": ["--gpus", "all",
                                                                                                 "--ipc=host"],
      "gpu_present": False, "results_root": "/r"}, "host", ["--ipc=host"], ["--gpus", "all"]),
    # a network the flags choose is kept
    ({"kind": "container", "name": "ctr", "image": "img:1", "docker_flags": ["--network", "bridge"],
      "results_root": "/r"}, "bridge", [], ["host"]),
])
def test_a_container_worker_runs_the_image_with_the_run_flags_on_the_host_network(environment, network, present,
                                                                                  absent):
    cmd, executable, container = worker.environment_command("run1", ["ggml-rpc-server", "--port", "50052"], {"A": "1"},
                                                            "/r/w", environment)
    assert executable == "docker" and container == {"name": "sf-w-run1", "docker": "docker"}
    assert cmd[:5] == ["docker", "run", "--name", "sf-w-run1", "--init"], cmd
    assert cmd[cmd.index("--network") + 1] == network and all(p in cmd for p in present), cmd
    assert not set(absent) & set(cmd), cmd
    assert "sparkfleet.results_root=/r" in cmd and "type=bind,source=/r,target=/r" in cmd and "A=1" in cmd
    assert cmd[-5:] == ["/r/w", "img:1", "ggml-rpc-server", "--port", "50052"], cmd


def test_a_container_worker_without_resolved_flags_is_refused():
    with pytest.raises(worker.runexec.RunSetupError, match="no docker flags resolved for environment 'ctr'"):
        worker.environment_command("run1", ["x"], {}, "/r", {"kind": "container", "name": "ctr", "image": "i"})


def test_a_chroot_command_runs_the_program_after_its_variables():
    cmd = ["chroot", "/rootfs", "/usr/bin/env", "-i", "-C", "/w", "--", "PATH=/usr/bin", "A=b=c", "ggml-rpc-server",
           "--host", "10.0.0.2"]
    assert worker.runexec.chroot_program(cmd) == "ggml-rpc-server"
    program = worker.runexec.chroot_program(["chroot", "/r", "env", "-i", "--", "/opt/x/rpc", "-p"])
    assert os.path.basename(program) == "rpc"


def test_a_worker_over_nccl_that_cannot_see_rdma_in_its_environment_fails_naming_the_node_and_never_starts(tmp_path):
    # this machine has no /dev/infiniband: the bare environment's probe finds no verbs device
    argv = [sys.executable, "-c", "open('started', 'w').close()"]
    with pytest.raises(task.TaskFailed, match=r"rdma on spark2 \(rank 1\): .*/dev/infiniband"):
        worker.work(_params(tmp_path, argv=argv, rdma_hcas=["rocep1s0f0"]), None)
    node = _node(tmp_path)
    assert node["rdma"]["pass"] is False and node["stopped_utc"] and node["worker"] is None
    assert not (tmp_path / "cluster" / "started").exists() and not (tmp_path / "cluster" / "r1.json").exists()


@pytest.mark.parametrize(("engine", "topology", "fabric", "check", "expected"), [
    ("vllm", "tensor", {"NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0"}, True, ["rocep1s0f0", "roceP2p1s0f0"]),
    ("vllm", "tensor", {"NCCL_IB_HCA": "=rocep1s0f0:1"}, True, ["rocep1s0f0"]),
    ("vllm", "tensor", {"NCCL_IB_HCA": "rocep1s0f0"}, False, []),  # sparkfleet_pair_rdma_env_check: false
    ("vllm", "tensor", {}, True, []),  # no rails: the pair preflight names the sockets NCCL would use
    ("llama.cpp", "layers", {"NCCL_IB_HCA": "rocep1s0f0"}, True, []),  # RPC over TCP
])
def test_each_worker_is_given_the_hcas_it_must_see_when_its_run_goes_over_nccl(engine, topology, fabric, check,
                                                                             expected):
    from ansible_collections.sparkfleet.bench.plugins.filter.cluster import worker_spec

    model = {"name": "m", "path": "/m/m.gguf", "gguf": "/m/m.gguf", "tokenizer": "/m"}
    run = {"workload": {"name": "w", "engine": engine, "cluster": "pair", "topology": topology},
           "model": model, "cluster": {"nodes": ["spark1", "spark2"]}}
    assert worker_spec(run, "10.0.0.2", 1, "10.0.0.1", fabric, check)["rdma_hcas"] == expected
