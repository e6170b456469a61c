"""TensorRT-LLM across two nodes by its own runtime (issue 36 item 3), end to end: bench.yml on two fake-fleet hosts of
one cluster, a trtllm-serve workload with topology tensor, llama-benchy driving rank 0. Rank 0 runs the real OpenMPI
mpirun, which starts the other rank on the worker over real SSH (the fleet's host-to-host key, as an owner sets up
passwordless SSH between two Sparks); the GPU software is stand-ins (tests/fleet/standins: trtllm-llmapi-launch,
which runs the server on rank 0 and an idle MGMN worker on the others, and trtllm-serve). The run's record names
mpirun's hosts and the parallel size, the worker ran its rank (its own log, in its own home), and nothing is left
running on either host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakefleet import STANDINS, pair_vars
from test_serving_engines import make_hf_model

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs OpenMPI (apt-get install openmpi-bin)"),
              pytest.mark.skipif(shutil.which("ping") is None, reason="needs ping (apt-get install iputils-ping)")]

PROFILE = {"depth": [0], "concurrency": [1, 2], "pp": [32], "tg": [8]}
#: what the launch stand-in writes in the home of the node each rank ran on
RANK_LOG = "trtllm-llmapi-launch.log"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _launch_processes(marks: tuple) -> list[str]:
    """This test's mpirun, OpenMPI daemons and launch stand-in ranks still running: their command line names one of
    ``marks`` (the model's directory, rank 0's address that the remote daemon calls back)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        names = {os.path.basename(a.decode(errors="replace")) for a in argv[:2]}
        line = b" ".join(argv).decode(errors="replace")
        if names & {"mpirun", "orted", "trtllm-llmapi-launch", "trtllm-serve"} and any(m in line for m in marks):
            out.append(f"{pid} {line}")
    return out


def _fleet(fleet_factory, host_env=None):
    """Two hosts of cluster pair, TensorRT-LLM's entry points (the stand-ins) on each one's PATH."""
    fleet = fleet_factory(2, host_env={h: {"SPARKFLEET_FAKE_RDMA_HCAS": "rocep1s0f0=eth0",
                                           "SPARKFLEET_FAKE_RDMA_STATE": "ACTIVE", **(host_env or {})}
                                       for h in ("spark1", "spark2")})
    fleet.set_mtu(9000)
    for host in fleet.hosts:  # as TensorRT-LLM's install puts them
        for name in ("trtllm-serve", "trtllm-llmapi-launch"):
            Path(host.dir, "bin", name).symlink_to(STANDINS / name)
    return fleet


def _bench(fleet, tmp_path, ansible_env, repo) -> tuple:
    """bench.yml with one trtllm-serve workload on the pair, topology tensor: (its result, its records' paths on rank
    0, the model's directory)."""
    work = tmp_path / "models"
    model = make_hf_model(work / "tiny-hf")
    campaign = {"sparkfleet_campaign": {
        "name": "mpi2", "models": [{"name": "tiny", "path": str(model["path"])}], "environments": ["bare"],
        "workloads": [{"name": "tp2", "engine": "trtllm-serve", "cluster": "pair", "topology": "tensor",
                       "profile": PROFILE, "runs": 1, "ready_timeout_s": 120,
                       "env": {"SPARKFLEET_FAKE_PREFILL_TOK_S": "150", "SPARKFLEET_FAKE_DECODE_TOK_S": "100"}}],
        "iterations": 1, "warmup_runs": 0, "order": "interleaved",
        "cooldown": {"threshold_c": 45, "max_wait_s": 30, "on_timeout": "continue"}, "timeout_s": 600}}
    path = tmp_path / "campaign.yml"
    path.write_text(yaml.safe_dump(campaign))
    results = tmp_path / "results"
    pair = tmp_path / "pair.json"
    pair.write_text(json.dumps(pair_vars()))
    cmd = fleet.bench_argv(path, pair, models=work, results=results,
                           client=Path(sys.executable).parent / "llama-benchy")
    run = subprocess.run(cmd, env=ansible_env, cwd=repo, capture_output=True, text=True, timeout=1500)
    paths = sorted((results / "mpi2" / fleet.hosts[0].name / "runs").glob("*/record.json"))
    return run, paths, model["path"]


def test_trtllm_serve_on_two_hosts_by_mpirun_from_rank_0(fleet_factory, ansible_env, repo, tmp_path):
    fleet = _fleet(fleet_factory)
    run, paths, model = _bench(fleet, tmp_path, ansible_env, repo)
    assert run.returncode == 0, (run.stdout + run.stderr)[-8000:]
    work = model.parent
    head, worker = fleet.hosts
    records = [json.loads(p.read_text()) for p in paths]
    assert len(records) == 1 and records[0]["status"] == "ok", [(r["run_id"], r["status"], r.get("error"))
                                                                for r in records]
    record = records[0]
    assert all(p["status"] == "ok" for p in record["serving"]["points"]), record["serving"]["points"]
    assert record["serving"]["cluster"]["workers"] == [worker.address], record["serving"]["cluster"]
    # rank 0 ran the whole launch: mpirun over both hosts, one slot each, the run's variables passed on, then the
    # engine's server with the tensor-parallel size of the cluster
    argv = record["serving"]["server"]["argv"]
    assert argv[:7] == ["mpirun", "--allow-run-as-root", "-np", "2", "-H", f"{head.address}:1,{worker.address}:1",
                        "-x"], argv
    assert "SPARKFLEET_FAKE_NCCL_HCAS" in argv and "SPARKFLEET_FAKE_PREFILL_TOK_S" in argv, argv
    server = argv.index("trtllm-llmapi-launch") + 1
    assert argv[server:server + 2] == ["trtllm-serve", str(model)] and argv[-2:] == ["--tp_size", "2"], argv
    # each rank ran on its own node (the log in that node's home): rank 0 on the head, rank 1 on the worker; the
    # worker's rank spoke through mpirun into rank 0's server.log
    head_ranks = Path(head.dir, "home", RANK_LOG).read_text().splitlines()
    worker_ranks = Path(worker.dir, "home", RANK_LOG).read_text().splitlines()
    assert [line.rsplit(" pid ", 1)[0] for line in head_ranks] == ["rank 0 of 2"], head_ranks
    assert [line.rsplit(" pid ", 1)[0] for line in worker_ranks] == ["rank 1 of 2"], worker_ranks
    server_log = (paths[0].parent / "server.log").read_text()
    assert "mpi_rank: 1" in server_log and "rank1 run mgmn worker node" in server_log, server_log[-3000:]
    # nothing sparkfleet starts on the worker (no cluster worker of its own), and nothing left on either host
    assert not list(Path(worker.work_dir, "results", ".sparkfleet", "cluster").glob("*.json"))
    ranks = [int(line.rsplit(" pid ", 1)[1]) for line in head_ranks + worker_ranks]
    assert not [pid for pid in ranks if _alive(pid)], ranks
    assert _launch_processes((str(work), head.address)) == []


#: An SSH agent as on a Spark where passwordless SSH to the worker was never set up: the worker's host key unknown.
UNSET_SSH = """#!/bin/sh
exec ssh -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o BatchMode=yes "$@"
"""


def test_a_worker_rank_0_cannot_reach_by_ssh_fails_the_run_naming_it_before_mpirun_starts(fleet_factory, ansible_env,
                                                                                           repo, tmp_path):
    agent = tmp_path / "unset-ssh"
    agent.write_text(UNSET_SSH)
    agent.chmod(0o755)
    fleet = _fleet(fleet_factory, {"OMPI_MCA_plm_rsh_agent": str(agent)})
    run, paths, model = _bench(fleet, tmp_path, ansible_env, repo)
    head, worker = fleet.hosts
    records = [json.loads(p.read_text()) for p in paths]
    assert [r["status"] for r in records] == ["failed"], (run.stdout + run.stderr)[-6000:]
    reason = json.dumps(records[0])
    assert f"rank 0 cannot run a command on {worker.address}: `{agent} {worker.address} true` exited with 255" in (
        reason), reason[-3000:]
    assert "Host key verification failed" in reason and "passwordless SSH" in reason
    # mpirun never started: no rank ran anywhere, nothing is left
    assert not any(Path(h.dir, "home", RANK_LOG).exists() for h in fleet.hosts)
    assert _launch_processes((str(model.parent), head.address)) == []
