"""The PyTorch stand-in (tests/fleet/standins/python/torch) running the product's in-environment NCCL test for real:
cluster/nccl_env.py's SCRIPT in two processes on loopback, each with the variables process_env gives a node, read
back with nccl_env.parse and judged with nccl_env.judge and parsers/nccl.py's transport_verdict. RDMA is a
temporary directory holding ``uverbs0`` (SPARKFLEET_FAKE_DEV_INFINIBAND); times are only asserted positive."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import nccl_env
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import nccl

REPO = Path(__file__).resolve().parents[2]
STANDIN_PYTHON = REPO / "tests" / "fleet" / "standins" / "python"
PROBE = REPO / "roles" / "matrix" / "files" / "gpu_probe.py"
SIZES = (1 << 30, 8 << 20)
HCA = "rocep1s0f0"
FABRIC = {"NCCL_IB_HCA": HCA, "NCCL_SOCKET_IFNAME": "lo"}
#: Every run of the script ends well within this (the slowest, sockets at 2.5 GB/s, takes about 2 s).
PROCESS_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def base_env(**extra: str) -> dict[str, str]:
    """A clean environment (no SPARKFLEET_FAKE_* of the caller's) with the stand-ins importable."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(STANDIN_PYTHON),
            "PYTHONDONTWRITEBYTECODE": "1", **extra}


@pytest.fixture
def rdma(tmp_path) -> str:
    """A /dev/infiniband that holds a uverbs device (what --device=/dev/infiniband gives a container)."""
    path = tmp_path / "infiniband"
    path.mkdir()
    (path / "uverbs0").write_text("")
    return str(path)


@pytest.fixture
def no_rdma(tmp_path) -> str:
    path = tmp_path / "no-infiniband"
    path.mkdir()
    return str(path)


def run_ranks(ranks=(0, 1), world: int = 2, fabric=FABRIC, **extra: str) -> tuple[list[str], float]:
    """SCRIPT in one process per rank of ``ranks`` (rendezvous on 127.0.0.1): each one's output, and the wall time."""
    port, procs, started = free_port(), [], time.monotonic()
    try:
        for rank in ranks:
            env = base_env(**nccl_env.process_env(rank, world, "127.0.0.1", port, fabric, None, SIZES, 1, 2))
            env.update(extra)
            procs.append(subprocess.Popen([sys.executable, "-c", nccl_env.SCRIPT], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        deadline = started + PROCESS_TIMEOUT_S
        outputs = [p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0].decode() for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outputs, time.monotonic() - started


def node_result(text: str) -> dict:
    """A node's cluster_nccl_env result with its one environment judged (as preflight_work returns it)."""
    reading = nccl_env.parse(text)
    error = None if reading["result"] else f"exit 1: {reading['error']}"
    return {"environments": [{"environment": "trtllm", "kind": "container", "judged": True, "reason": "",
                              "error": error, "reading": reading}]}


def assert_complete(reading: dict, rank: int) -> None:
    result = reading["result"]
    assert reading["error"] is None and result is not None
    assert (result["rank"], result["world"], result["nccl"], result["cuda"]) == (rank, 2, "2.27.7", "13.0")
    assert result["device"] == "NVIDIA GB10"
    assert [row["size_bytes"] for row in result["rows"]] == list(SIZES)
    assert all(row["seconds"] > 0 for row in result["rows"])


def test_two_ranks_over_rdma_are_correct_and_pass_the_transport_verdict(rdma):
    outputs, _ = run_ranks(SPARKFLEET_FAKE_TORCH_CUDA="1", SPARKFLEET_FAKE_DEV_INFINIBAND=rdma)
    readings = [nccl_env.parse(text) for text in outputs]
    for rank, reading in enumerate(readings):
        assert_complete(reading, rank)
        assert all(row["correct"] for row in reading["result"]["rows"])
        assert reading["transport"]["net"] == "IB"
        ok, reason = nccl.transport_verdict(reading["transport"], [HCA])
        assert ok, reason
    entries = [node_result(text)["environments"][0] for text in outputs]
    assert all(row["busbw_gbs"] > 0 for row in nccl_env.busbw_rows(entries))
    checks, versions = nccl_env.judge(["spark1", "spark2"], [node_result(t) for t in outputs], [[HCA], [HCA]], 0.0)
    assert [(name, verdict[0]) for name, _node, verdict in checks] == [
        ("nccl_in_environment", True), ("nccl_in_environment", True), ("nccl_busbw_in_environment", True)]
    assert versions == {"trtllm": {"spark1": "2.27.7", "spark2": "2.27.7"}}


def test_without_rdma_nccl_falls_back_to_sockets_and_is_refused(no_rdma):
    outputs, _ = run_ranks(SPARKFLEET_FAKE_TORCH_CUDA="1", SPARKFLEET_FAKE_DEV_INFINIBAND=no_rdma)
    for rank, text in enumerate(outputs):
        reading = nccl_env.parse(text)
        assert_complete(reading, rank)
        assert all(row["correct"] for row in reading["result"]["rows"])
        assert reading["transport"]["net"] == "Socket"
        assert not nccl.transport_verdict(reading["transport"], [HCA])[0]
    checks, _ = nccl_env.judge(["spark1", "spark2"], [node_result(t) for t in outputs], [[HCA], [HCA]], 0.0)
    assert [verdict[0] for name, _node, verdict in checks if name == "nccl_in_environment"] == [False, False]


def test_nccl_net_ib_without_rdma_fails_instead_of_falling_back(no_rdma):
    outputs, _ = run_ranks(fabric=dict(FABRIC, NCCL_NET="IB"), SPARKFLEET_FAKE_TORCH_CUDA="1",
                           SPARKFLEET_FAKE_DEV_INFINIBAND=no_rdma)
    for text in outputs:
        reading = nccl_env.parse(text)
        assert reading["result"] is None and reading["error"]
        assert any("network IB not found" in w for w in reading["transport"]["warnings"])


def test_a_corrupted_sum_is_reported_incorrect(rdma):
    outputs, _ = run_ranks(SPARKFLEET_FAKE_TORCH_CUDA="1", SPARKFLEET_FAKE_DEV_INFINIBAND=rdma,
                           SPARKFLEET_FAKE_NCCL_WRONG="1")
    for rank, text in enumerate(outputs):
        reading = nccl_env.parse(text)
        assert_complete(reading, rank)
        assert [row["correct"] for row in reading["result"]["rows"]] == [False, False]
    checks, _ = nccl_env.judge(["spark1", "spark2"], [node_result(t) for t in outputs], [[HCA], [HCA]], 0.0)
    assert [verdict[0] for name, _node, verdict in checks if name == "nccl_in_environment"] == [False, False]


@pytest.mark.parametrize("rank", [1, 0], ids=["rank1-finds-no-master", "rank0-waits-for-no-one"])
def test_a_lone_rank_gives_up_at_the_rendezvous_timeout(rdma, rank):
    (text,), elapsed = run_ranks(ranks=(rank,), SPARKFLEET_FAKE_TORCH_CUDA="1", SPARKFLEET_FAKE_DEV_INFINIBAND=rdma,
                                 SPARKFLEET_NCCL_RENDEZVOUS_S="3")
    reading = nccl_env.parse(text)
    assert reading["result"] is None and reading["error"]
    assert "timed out" in reading["error"].lower()
    assert 2.5 < elapsed < PROCESS_TIMEOUT_S


def test_without_the_cuda_knob_torch_sees_no_device(rdma):
    outputs, _ = run_ranks(SPARKFLEET_FAKE_DEV_INFINIBAND=rdma)
    for text in outputs:
        reading = nccl_env.parse(text)
        assert reading["result"] is None and "no CUDA device" in reading["error"]


def test_only_the_scripts_api_exists_and_the_readiness_probe_still_falls_back_to_cupy(tmp_path):
    missing = ("torch.randn", "torch.matmul", "torch.bfloat16", "torch.cuda.device_count",
               "torch.distributed.all_gather", "torch.distributed.get_rank")
    code = (f"import torch, torch.distributed\nfor name in {missing!r}:\n    obj = torch\n    try:\n"
            "        for part in name.split('.')[1:]: obj = getattr(obj, part)\n        print('present', name)\n"
            "    except AttributeError:\n        pass\n")
    done = subprocess.run([sys.executable, "-c", code], env=base_env(SPARKFLEET_FAKE_TORCH_CUDA="1"),
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    marker = tmp_path / "gpu-load"
    probe = subprocess.run([sys.executable, str(PROBE), "bandwidth", "--mib", "1", "--iterations", "2"],
                           env=base_env(SPARKFLEET_FAKE_GPU_LOAD=str(marker)), capture_output=True, text=True,
                           timeout=PROCESS_TIMEOUT_S)
    assert '"backend": "cupy"' in probe.stdout.splitlines()[-1], probe.stdout + probe.stderr
