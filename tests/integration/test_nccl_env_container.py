"""NCCL's all-reduce inside real containers (issue 36): two ranks of the cluster_nccl_env module's work, each in its own
process and its own ``docker run`` of the test image with the environment's flags, meeting over TCP on this host's
loopback as two Sparks meet on rank 0's address. GPU software is a stand-in: the image's torch
(tests/fleet/standins/python/torch) with its CUDA switched on by a variable in the docker flags, its NCCL choosing
RDMA only when a uverbs device is passed in (/dev/null as /dev/infiniband/uverbs0). The verdict is the pair
preflight's own (nccl_env.judge)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _ansible_modules import host_util

pytestmark = [pytest.mark.root, pytest.mark.docker]

nccl_env = host_util("cluster.nccl_env")
HCAS = ["rocep1s0f0"]
GPU = ["-e", "SPARKFLEET_FAKE_TORCH_CUDA=1"]
RDMA = ["--device=/dev/null:/dev/infiniband/uverbs0"]
WORK = ("import json, sys\n"
        "from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import nccl_env\n"
        "print(json.dumps(nccl_env.preflight_work(json.loads(sys.argv[1]), None)))\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pair(image: str, flags: list, port: int, tmp_path, **params) -> list:
    """Both ranks at once, as the playbook's task runs on every node; each node's module result."""
    procs = []
    for rank in (0, 1):
        args = {"environments": [{"name": "ctr", "kind": "container", "docker_flags": flags, "run": True}],
                "image": image, "docker": "docker", "fabric_env": {"NCCL_IB_HCA": ",".join(HCAS)},
                "workload_env": {}, "rank": rank, "world": 2, "master_addr": "127.0.0.1", "master_port": port,
                "sizes": [1 << 20, 1 << 30], "warmup": 1, "iters": 3, "timeout_s": 120,
                "log_dir": str(tmp_path / f"rank{rank}"), **params}
        procs.append(subprocess.Popen([sys.executable, "-c", WORK, json.dumps(args)], stdout=subprocess.PIPE,
                                      text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}))
    try:
        return [json.loads(p.communicate(timeout=240)[0]) for p in procs]
    finally:
        for p in procs:
            p.kill()


def _left() -> str:
    return subprocess.run(["docker", "ps", "-aq", "--filter", "name=sparkfleet-nccl-test-"], capture_output=True,
                          text=True).stdout.strip()


def test_two_ranks_in_containers_given_the_verbs_device_pass_over_rdma_and_report_their_bandwidth(
        test_image, tmp_path):
    results = _pair(test_image, GPU + RDMA, _free_port(), tmp_path)
    checks, versions = nccl_env.judge(["a", "b"], results, [HCAS, HCAS], 1.0)
    assert all(ok for _, _, (ok, _) in checks), checks
    assert {(c, n) for c, n, _ in checks} == {("nccl_in_environment", "a"), ("nccl_in_environment", "b"),
                                              ("nccl_busbw_in_environment", "a")}
    entries = [r["environments"][0] for r in results]
    assert [e["reading"]["result"]["rank"] for e in entries] == [0, 1]
    assert all(e["reading"]["transport"]["net"] == "IB" for e in entries)
    assert versions["ctr"]["a"] == versions["ctr"]["b"] is not None
    (small, large) = nccl_env.busbw_rows(entries)
    assert large["size_bytes"] == 1 << 30 and large["ranks"] == 2 and large["busbw_gbs"] > 0
    # the command was the environment's own docker run, and its raw log was kept beside the results
    assert entries[0]["command"][:2] == ["docker", "run"] and "/dev/infiniband/uverbs0" in " ".join(
        entries[0]["command"])
    assert "NCCL INFO" in Path(entries[0]["log"]).read_text()
    # a floor above what the pair reached refuses it, naming the figure
    refused, _ = nccl_env.judge(["a", "b"], results, [HCAS, HCAS], 1e6)
    assert [(c, ok) for c, _, (ok, _) in refused if not ok] == [("nccl_busbw_in_environment", False)]
    assert _left() == ""


def test_without_the_verbs_device_the_image_s_nccl_falls_back_to_sockets_and_both_nodes_are_refused(
        test_image, tmp_path):
    results = _pair(test_image, GPU, _free_port(), tmp_path)
    checks, _ = nccl_env.judge(["a", "b"], results, [HCAS, HCAS], 1.0)
    refused = {n: reason for c, n, (ok, reason) in checks if c == "nccl_in_environment" and not ok}
    assert set(refused) == {"a", "b"} and all("Socket" in r for r in refused.values()), checks
    assert _left() == ""


def test_a_rank_alone_ends_at_the_rendezvous_timeout_with_an_error_not_a_hang(test_image, tmp_path):
    args = {"environments": [{"name": "ctr", "kind": "container", "docker_flags": GPU + RDMA, "run": True}],
            "image": test_image, "docker": "docker", "fabric_env": {}, "workload_env": {}, "rank": 1, "world": 2,
            "master_addr": "127.0.0.1", "master_port": _free_port(), "sizes": [1 << 20], "warmup": 1, "iters": 1,
            "timeout_s": 30, "log_dir": ""}
    done = subprocess.run([sys.executable, "-c", WORK, json.dumps(args)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    (entry,) = json.loads(done.stdout)["environments"]
    assert entry["judged"] and entry["error"] and entry["reading"]["result"] is None, entry
    checks, _ = nccl_env.judge(["b"], [{"environments": [entry]}], [HCAS], 1.0)
    assert [ok for _, _, (ok, _) in checks] == [False]
    assert _left() == ""
