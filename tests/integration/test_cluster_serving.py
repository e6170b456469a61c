"""Multi-node serving runs end to end (issue 36), with no stand-in: two fake-fleet hosts of one cluster, through
bench.yml, llama-benchy driving rank 0. Topology layers: llama.cpp's real ggml-rpc-server on the worker and
llama-server --rpc on rank 0 (the CPU build of tests/fleet/llamacpp.py, with -DGGML_RPC=ON). Topology replicas: a
llama-server on each host, the client's requests spread over both by rank 0's round-robin proxy. Beside them the
same workload on each host alone. Rank 0's records name the worker, the worker served (its log), the replicas
shared the load evenly, and nothing is left running."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakefleet import pair_vars
from tinymodel import make_tiny_model

pytestmark = [pytest.mark.root, pytest.mark.fleet,
              # the pair preflight's jumbo ping (bootstrap.sh installs iputils-ping)
              pytest.mark.skipif(shutil.which("ping") is None, reason="needs ping (apt-get install iputils-ping)")]

PROFILE = {"depth": [0], "concurrency": [1, 2], "pp": [32], "tg": [16]}


def _records(results: Path, host: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results / "rpc2" / host / "runs").glob("*/record.json"))]


def _worker_processes(work: Path, address: str) -> list[str]:
    """This test's servers still running: an RPC server on the worker's address, a llama-server of its model."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        line = b" ".join(argv)
        if (argv[0].endswith(b"ggml-rpc-server") and address.encode() in line) or (
                argv[0].endswith(b"llama-server") and str(work).encode() in line):
            out.append(pid)
    return out


def test_a_two_host_llama_cpp_rpc_run_beside_single_host_runs(fleet_factory, llama_server, ansible_env, repo,
                                                              tmp_path):
    # the pair preflight runs as bench.yml's stage for the cluster: its links at MTU 9000, the RDMA and NCCL tests by
    # their stand-ins (one rail, rocep1s0f0 on eth0)
    fleet = fleet_factory(2, host_env={h: {"SPARKFLEET_FAKE_RDMA_HCAS": "rocep1s0f0=eth0",
                                           "SPARKFLEET_FAKE_RDMA_STATE": "ACTIVE"} for h in ("spark1", "spark2")})
    fleet.set_mtu(9000)
    for host in fleet.hosts:  # the engine's binaries on each host's PATH, as an owner's install puts them
        for name in ("llama-server", "ggml-rpc-server"):
            link = Path(host.dir, "bin", name)
            link.unlink(missing_ok=True)
            link.symlink_to(llama_server.parent / name)
    work = tmp_path / "models"
    model = make_tiny_model(work / "tiny")
    workload = {"engine": "llama.cpp", "profile": PROFILE, "runs": 1, "server_args": ["-t", "1"],
                "ready_timeout_s": 120}
    campaign = {"sparkfleet_campaign": {
        "name": "rpc2", "models": [{"name": "tiny", "path": str(model["gguf"]), "random_weights": True}],
        "environments": ["bare"], "workloads": [{"name": "one", **workload},
                                                {"name": "two", "cluster": "pair", **workload},
                                                {"name": "twin", "cluster": "pair", "topology": "replicas",
                                                 **workload}],
        "iterations": 2, "warmup_runs": 0, "order": "interleaved",
        "cooldown": {"threshold_c": 45, "max_wait_s": 30, "on_timeout": "continue"}, "timeout_s": 600}}
    path = tmp_path / "campaign.yml"
    path.write_text(yaml.safe_dump(campaign))
    results = tmp_path / "results"
    pair = tmp_path / "pair.json"
    pair.write_text(json.dumps(pair_vars()))
    cmd = fleet.bench_argv(path, pair, models=work, results=results,
                           client=Path(sys.executable).parent / "llama-benchy")
    run = subprocess.run(cmd, env=ansible_env, cwd=repo, capture_output=True, text=True, timeout=1500)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-8000:]
    assert "4 multi-node runs it leads" in out
    assert "pair preflight of cluster pair passed (spark1, spark2)" in out

    head, worker = fleet.hosts
    records = _records(results, head.name)
    two = [r for r in records if r["workload"] == "two"]
    assert len(two) == 2 and all(r["status"] == "ok" for r in two), [(r["run_id"], r["status"], r.get("error"))
                                                                     for r in records]
    for record in two:
        cluster = record["serving"]["cluster"]
        assert cluster["nodes"] == [head.name, worker.name] and cluster["workers"] == [worker.address], cluster
        # rank 0's own rails' NCCL/UCX variables reached its server's environment (each worker gets its own)
        fabric = cluster["fabric_env"]
        assert fabric["NCCL_IB_HCA"] == "rocep1s0f0" and "eth0" in fabric["NCCL_SOCKET_IFNAME"], fabric
        argv = record["serving"]["server"]["argv"]
        assert argv[argv.index("--rpc") + 1] == f"{worker.address}:50052", argv
    # every point measured in at least one of the two runs: on a loaded 2-core machine llama-benchy once measured
    # nothing at one point of one run (a failed point, named in the record, as the report names it)
    measured = {p["point"] for record in two for p in record["serving"]["points"] if p["status"] == "ok"}
    assert measured == {p["point"] for p in two[0]["serving"]["points"]}, [r["serving"]["points"] for r in two]
    twin = [r for r in records if r["workload"] == "twin"]
    assert len(twin) == 2 and all(r["status"] == "ok" for r in twin), [(r["run_id"], r.get("error")) for r in twin]
    for record in twin:
        cluster = record["serving"]["cluster"]
        assert cluster["topology"] == "replicas" and "--rpc" not in record["serving"]["server"]["argv"]
        split = cluster["split"]  # rank 0's server and the worker's, each half of the completions
        assert set(split) == {"http://127.0.0.1:8080", f"http://{worker.address}:8080"}, split
        assert abs(split["http://127.0.0.1:8080"] - split[f"http://{worker.address}:8080"]) <= 1, split
        assert min(split.values()) > 0 and not any(cluster["proxy_failures"].values()), cluster
    # the single-host workload ran on both hosts; the cluster's only on rank 0
    assert len([r for r in records if r["workload"] == "one"]) == 2
    assert {r["workload"] for r in _records(results, worker.name)} == {"one"}
    # the worker served rank 0: rpc-server prints each client it accepts, the readiness probe's connection and then
    # rank 0's (llama-server connects to each RPC server more than once while it loads the model)
    logs = sorted(Path(worker.work_dir, "results", ".sparkfleet", "cluster").glob("*.log"))
    rpc_logs = [p for p in logs if ".two." in p.name]
    assert len(logs) == 4 and len(rpc_logs) == 2, logs
    assert all(p.read_text().count("Accepted client connection") >= 2 for p in rpc_logs), rpc_logs
    assert not list(Path(worker.work_dir, "results", ".sparkfleet", "cluster").glob("*.json"))
    assert _worker_processes(work, worker.address) == []

    report = subprocess.run([str(Path(sys.executable).parent / "sparkfleet"), "report", str(results / "rpc2")],
                            env=ansible_env, cwd=repo, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    # the report's answer to "is one model on two hosts worth it?": each topology against the single host, by the
    # report's one rule (a verdict per point and metric), and the Pareto front over the three configurations
    with (results / "rpc2" / "report" / "serving_comparisons.csv").open() as fh:
        compared = {(r["a"], r["b"]) for r in csv.DictReader(fh)}
    assert compared == {("llama.cpp", "llama.cpp on 2 nodes (layers)"),
                        ("llama.cpp", "llama.cpp on 2 nodes (replicas)")}, compared
    summary = json.loads(subprocess.run([str(Path(sys.executable).parent / "sparkfleet"), "report",
                                         str(results / "rpc2"), "--json"], env=ansible_env, cwd=repo,
                                        capture_output=True, text=True, timeout=600, check=True).stdout)
    worth = {v["subject"].rsplit(" / ", 1)[1] for v in summary["verdicts"] if v["question"] == "two-sparks"}
    assert worth == {"llama.cpp on 2 nodes (layers)", "llama.cpp on 2 nodes (replicas)"}, summary["verdicts"]
    with (results / "rpc2" / "report" / "pareto.csv").open() as fh:
        assert {r["engine"] for r in csv.DictReader(fh)} >= {"llama.cpp", "llama.cpp on 2 nodes (layers)",
                                                              "llama.cpp on 2 nodes (replicas)"}


@pytest.fixture(scope="module")
def rpc_image(test_image, llama_server, tmp_path_factory) -> str:
    """The test image with llama.cpp's llama-server and ggml-rpc-server on its PATH (an engine image with RPC), built
    offline, tagged by the binaries' content."""
    context = tmp_path_factory.mktemp("rpc-image")
    names = ("llama-server", "ggml-rpc-server")
    for name in names:
        shutil.copy2(llama_server.parent / name, context / name)
    (context / "Dockerfile").write_text(f"FROM {test_image}\n" + "".join(f"COPY {n} /usr/local/bin/{n}\n"
                                                                         for n in names))
    digest = subprocess.run(["sha256sum", *(str(llama_server.parent / n) for n in names)], capture_output=True,
                            text=True, check=True).stdout
    tag = hashlib.sha256(digest.encode()).hexdigest()[:12]
    ref = f"sparkfleet-test/llamacpp-rpc:{test_image.rsplit(':', 1)[-1][:12]}-{tag}"
    if subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode != 0:
        subprocess.run(["docker", "build", "-q", "-t", ref, str(context)], check=True, capture_output=True,
                       timeout=600)
    return ref


def test_a_two_host_rpc_run_in_the_native_environment_runs_the_worker_in_its_nodes_rootfs(
        fleet_factory, rpc_image, ansible_env, repo, tmp_path):
    # the engine is in the image only (no llama.cpp on the hosts' PATH): the worker can only have run chrooted into
    # its node's rootfs, as rank 0's server does. RPC goes over TCP: the pair preflight is left out.
    fleet = fleet_factory(2)
    work = tmp_path / "models"
    model = make_tiny_model(work / "tiny")
    workload = {"engine": "llama.cpp", "profile": PROFILE, "runs": 1, "server_args": ["-t", "1"],
                "ready_timeout_s": 120}
    campaign = {"sparkfleet_campaign": {
        "name": "rpc2", "image": rpc_image, "models": [{"name": "tiny", "path": str(model["gguf"]),
                                                        "random_weights": True}],
        "environments": ["native"], "workloads": [{"name": "two", "cluster": "pair", **workload}],
        "iterations": 1, "warmup_runs": 0, "cooldown": {"threshold_c": 45, "max_wait_s": 30, "on_timeout": "continue"},
        "timeout_s": 600}}
    path = tmp_path / "campaign.yml"
    path.write_text(yaml.safe_dump(campaign))
    results = tmp_path / "results"
    pair = tmp_path / "pair.json"
    pair.write_text(json.dumps({**pair_vars(), "sparkfleet_pair_preflight": False}))
    cmd = fleet.bench_argv(path, pair, models=work, results=results,
                           client=Path(sys.executable).parent / "llama-benchy")
    run = subprocess.run(cmd, env=ansible_env, cwd=repo, capture_output=True, text=True, timeout=1500)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-8000:]

    head, worker = fleet.hosts
    (record,) = _records(results, head.name)
    assert record["status"] == "ok" and record["environment"] == "native", (record["status"], record.get("error"))
    argv = record["serving"]["server"]["argv"]
    assert argv[argv.index("--rpc") + 1] == f"{worker.address}:50052", argv
    assert any(p["status"] == "ok" for p in record["serving"]["points"]), record["serving"]["points"]
    (log,) = Path(worker.work_dir, "results", ".sparkfleet", "cluster").glob("*.log")
    assert log.read_text().count("Accepted client connection") >= 2, log.read_text()[-2000:]
    # the worker node watched itself into its own results tree: no GPU here, the probe says so; telemetry sampled
    (node_file,) = (results / "rpc2" / worker.name / "cluster_nodes").glob("*/node.json")
    node = json.loads(node_file.read_text())
    assert node["run_id"] == record["run_id"] and node["head"] == head.name and node["rank"] == 1, node
    assert node["environment"] == {"name": "native", "kind": "native"} and node["worker"]["stopped"] == "signalled"
    assert node["readiness"]["state"] == "unknown" and node["telemetry"]["samples"] >= 1, node
    # the report joins the worker's node file to rank 0's run: a row per node of the run
    report = subprocess.run([str(Path(sys.executable).parent / "sparkfleet"), "report", str(results / "rpc2")],
                            env=ansible_env, cwd=repo, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    with (results / "rpc2" / "report" / "cluster_nodes.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["host"], str(r["rank"])) for r in rows) == [(head.name, "0"), (worker.name, "1")], rows
    # nothing left running or mounted on either host
    assert _worker_processes(work, worker.address) == []
    with open("/proc/mounts") as fh:
        left = [line.split()[1] for line in fh if any(str(h.dir) in line for h in fleet.hosts)]
    assert not [m for m in left if "rootfs" in m], left
