"""The pair preflight on a fake fleet: two hosts of one cluster over real SSH, their rails at MTU 9000 with a
real jumbo ping between the namespaces, perftest's and NCCL's tests by their stand-ins (ib_write_bw and
ib_write_lat really connect server to client over TCP). A healthy pair passes; a pair whose NCCL falls back to
sockets, whose bus bandwidth is under the floor, or whose nodes differ in driver or NCCL version is refused, naming
the cause."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.fleet,
              # the pair preflight's jumbo ping (bootstrap.sh installs iputils-ping)
              pytest.mark.skipif(shutil.which("ping") is None, reason="needs ping (apt-get install iputils-ping)")]

RAIL = {"hca": "rocep1s0f0", "netdev": "eth0"}
# The stand-ins' knobs (tests/fleet/standins): one RDMA device, rocep1s0f0 on eth0, ACTIVE.
RDMA_ENV = {"SPARKFLEET_FAKE_RDMA_HCAS": "rocep1s0f0=eth0", "SPARKFLEET_FAKE_RDMA_STATE": "ACTIVE"}


def _run(fleet, ansible_env, repo, tmp_path, limit: str, nccl_env: dict, name: str,
         **extra_vars) -> subprocess.CompletedProcess:
    extra = tmp_path / f"{name}.json"
    extra.write_text(json.dumps({
        "sparkfleet_cluster": "pair", "sparkfleet_fabric": [RAIL],
        # one rail here: the sum floor is the one rail's floor
        "sparkfleet_pair_rdma_sum_gbps_min": 85.0,
        "sparkfleet_pair_nccl_command": ["all_reduce_perf", "-b", "8M", "-e", "2G", "-f", "2", "-g", "1"],
        "sparkfleet_workload_env": nccl_env, **extra_vars}))
    cmd = ["ansible-playbook", "-i", fleet.inventory, "--limit", limit, "-e", f"@{extra}",
           "playbooks/pair_preflight.yml"]
    return subprocess.run(cmd, env=ansible_env, cwd=repo, capture_output=True, text=True, timeout=300)


def _verdict(fleet) -> dict:
    head = fleet.hosts[0]
    return json.loads(Path(head.work_dir, "results", "study", head.name, "pair_preflight.json").read_text())


def test_pair_preflight_passes_a_healthy_pair_and_refuses_sockets_low_busbw_and_driver_drift(
        fleet_factory, ansible_env, repo, tmp_path):
    fleet = fleet_factory(3, host_env={"spark1": RDMA_ENV, "spark2": RDMA_ENV,
                                       "spark3": {**RDMA_ENV, "SPARKFLEET_FAKE_GPU_MODEL": "h200"}})
    fleet.set_mtu(9000)
    healthy = {"SPARKFLEET_FAKE_NCCL_NET": "IB", "SPARKFLEET_FAKE_NCCL_HCAS": "rocep1s0f0",
               "SPARKFLEET_FAKE_NCCL_BUSBW_GBS": "23.7"}

    run = _run(fleet, ansible_env, repo, tmp_path, "spark1,spark2", healthy, "healthy")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert "pair preflight of cluster pair passed (spark1, spark2)" in out
    verdict = _verdict(fleet)
    assert verdict["pass"] is True and verdict["nodes"] == ["spark1", "spark2"], verdict
    checks = {(c["check"], c["node"]) for c in verdict["checks"]}
    for name in ("rails_active", "mtu", "subnets", "jumbo_ping"):
        assert (name, "spark1") in checks and (name, "spark2") in checks, (name, checks)
    for name in ("ib_write_bw", "ib_write_lat", "nccl_transport", "nccl_busbw", "parity"):
        assert (name, "spark1") in checks, (name, checks)
    pings = [c for c in verdict["checks"] if c["check"] == "jumbo_ping"]
    assert all(c["pass"] and "9000-byte" in c["reason"] for c in pings), pings
    # no run has probed yet: the probe clocks are named unread, not judged
    (probe,) = [c for c in verdict["checks"] if c["check"] == "probe_clocks"]
    assert probe["pass"] and "unread on spark1, spark2" in probe["reason"], probe

    # spark2's rank loads another NCCL build: its own "NCCL version" line tells
    run = _run(fleet, ansible_env, repo, tmp_path, "spark1,spark2",
               {**healthy, "SPARKFLEET_FAKE_NCCL_VERSION": "2.27.7+cuda13.0,2.26.2+cuda12.9"}, "nccl_drift")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    assert "nccl_version: spark1='2.27.7+cuda13.0', spark2='2.26.2+cuda12.9'" in out, out[-4000:]

    run = _run(fleet, ansible_env, repo, tmp_path, "spark1,spark2", {**healthy, "SPARKFLEET_FAKE_NCCL_NET": "Socket"},
               "socket")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    assert "nccl_transport on spark1" in out and "Socket" in out, out[-4000:]
    assert _verdict(fleet)["pass"] is False

    run = _run(fleet, ansible_env, repo, tmp_path, "spark1,spark2",
               {**healthy, "SPARKFLEET_FAKE_NCCL_BUSBW_GBS": "12.0"}, "slow")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    assert "nccl_busbw on spark1" in out and "GB/s (floor 20.00)" in out, out[-4000:]

    run = _run(fleet, ansible_env, repo, tmp_path, "spark1,spark3", healthy, "drift")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    assert "parity on spark1" in out and "driver" in out and "580.95.05" in out and "580.159.04" in out, out[-4000:]
    assert _verdict(fleet)["nodes"] == ["spark1", "spark3"]



@pytest.mark.docker
def test_as_a_stage_of_bench_the_preflight_refuses_a_container_environment_that_cannot_see_rdma(
        fleet_factory, ansible_env, repo, tmp_path, test_image):
    # bench.yml's stage has the resolved campaign: a vLLM tensor-parallel workload on the pair goes over NCCL, in a
    # container environment whose docker flags pass neither the verbs devices nor an unlimited memlock. The image is on
    # the nodes (this machine's Docker), so the probe runs in it, on each node, with those flags.
    fleet = fleet_factory(2, host_env={"spark1": RDMA_ENV, "spark2": RDMA_ENV})
    fleet.set_mtu(9000)
    healthy = {"SPARKFLEET_FAKE_NCCL_NET": "IB", "SPARKFLEET_FAKE_NCCL_HCAS": "rocep1s0f0",
               "SPARKFLEET_FAKE_NCCL_BUSBW_GBS": "23.7"}
    campaign = {"name": "tp2", "image": test_image, "environments": [
        {"name": "ctr", "kind": "container", "docker_flags": ["--network", "none"]}],
        "workloads": [{"name": "tp", "engine": "vllm", "cluster": "pair", "topology": "tensor"}]}
    run = _run(fleet, ansible_env, repo, tmp_path, "spark1,spark2", healthy, "in_image",
               sparkfleet_resolved_campaign=campaign, sparkfleet_image=test_image)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-6000:]
    written = sorted(Path(fleet.hosts[0].work_dir, "results").glob("*/spark1/pair_preflight.json"),
                     key=lambda p: p.stat().st_mtime)
    verdict = json.loads(written[-1].read_text())
    checks = [c for c in verdict["checks"] if c["check"] == "rdma_in_environment"]
    assert {c["node"] for c in checks} == {"spark1", "spark2"} and not any(c["pass"] for c in checks), checks
    assert all("/dev/infiniband" in c["reason"] and "ctr" in c["reason"] for c in checks), [c["reason"] for c in checks]
    assert "rdma_in_environment on spark2" in out, out[-4000:]
    # the rest of the pair is healthy: only the environment refuses it
    assert {c["check"] for c in verdict["checks"] if not c["pass"]} == {"rdma_in_environment"}, verdict["causes"]
    # NCCL's all-reduce inside that environment is not run where RDMA is not visible inside: named, not judged
    nccl = [c for c in verdict["checks"] if c["check"] == "nccl_in_environment"]
    assert {c["node"] for c in nccl} == {"spark1", "spark2"}, verdict["checks"]
    assert all(c["pass"] and "not judged" in c["reason"] and "RDMA is not visible" in c["reason"] for c in nccl), nccl
