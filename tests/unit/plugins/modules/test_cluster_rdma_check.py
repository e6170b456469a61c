"""Rank 0 of a multi-node run over NCCL checks RDMA inside its environment before its server starts (issue 36):
bench_run on this machine (no /dev/infiniband, memlock limited) refuses a vLLM tensor-parallel run on a cluster
with a reason starting ``rdma:`` naming what is missing, records the check in serving.cluster.rdma and starts no
server; llama.cpp's layers (TCP) and a run with the check turned off are not checked."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module

record = host_util("record")

PROFILE = {"depth": [0], "concurrency": [1], "pp": [16], "tg": [8]}
FABRIC_ENV = {"NCCL_NET": "IB", "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "NCCL_IB_GID_INDEX": "3"}

pytestmark = pytest.mark.skipif(os.path.isdir("/dev/infiniband"), reason="a host with RDMA: no refusal to assert")


def _args(tmp_path: Path, engine: str, topology: str, check: bool = True) -> dict:
    model_dir = tmp_path / "models" / "tiny"
    model_dir.mkdir(parents=True, exist_ok=True)
    workload = {"name": "tp2", "engine": engine, "cluster": "pair", "topology": topology, "profile": PROFILE,
                "runs": 1, "ready_timeout_s": 5}
    model = {"name": "m", "path": str(model_dir / "m.gguf") if engine == "llama.cpp" else str(model_dir)}
    if engine == "llama.cpp":
        Path(model["path"]).write_bytes(b"GGUF")
        (model_dir / "tokenizer.json").write_text("{}")
    run = {"run_id": record.run_id("c1", "h1", "m", "bare", "tp2", 1), "order_index": 0, "model": model,
           "environment": {"name": "bare", "kind": "bare"}, "workload": workload, "iteration": 1, "warmup": False,
           "cluster": {"name": "pair", "topology": topology, "nodes": ["h1", "h2"]}}
    return {"runs": [run], "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
            "cooldown": {"enabled": False}, "timeout_s": 30, "readiness": {"probe_s": 0},
            "serving": {"client": shutil.which("true"), "workers": ["10.0.0.2"], "head_address": "10.0.0.1",
                        "fabric_env": FABRIC_ENV, "rdma_env_check": check}}


@pytest.fixture
def engines_on_path(monkeypatch):
    """The engines' entry points are the stand-ins (a bare run finds its server on the host's PATH)."""
    monkeypatch.setenv("PATH", f"{STANDINS}:{Path(sys.executable).parent}:{os.environ['PATH']}")


def _only_run(out: dict, tmp_path: Path) -> tuple:
    (result,) = out["runs"]
    return result, json.loads(Path(result["record_path"]).read_text())


def test_rank_0_refuses_a_tensor_parallel_run_without_rdma_in_its_environment(tmp_path, engines_on_path):
    out = run_module(load_module("bench_run"), _args(tmp_path, "vllm", "tensor"))
    result, rec = _only_run(out, tmp_path)
    assert result["status"] == "failed" and result["reason"].startswith("rdma: "), result["reason"]
    assert "no uverbs device in /dev/infiniband" in result["reason"] and "--device=/dev/infiniband" in result["reason"]
    if resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] != resource.RLIM_INFINITY:  # this machine's limit, named
        assert "memlock limited to" in result["reason"] and "--ulimit memlock=-1" in result["reason"]
    rdma = rec["serving"]["cluster"]["rdma"]
    assert rdma["pass"] is False and rdma["reading"]["complete"] and rdma["command"][-3:-1] == ["sh", "-c"]
    # the twins' ports are ACTIVE by the ibv_devinfo stand-in on the PATH (as an NGC image has rdma-core's)
    assert rdma["reading"]["ports_from"] == "ibv_devinfo" and "ACTIVE port" not in result["reason"]
    assert rec["serving"]["cluster"]["fabric_env"]["NCCL_IB_HCA"] == FABRIC_ENV["NCCL_IB_HCA"]
    assert rec["serving"]["points"] == [] and not Path(result["record_path"]).with_name("server.log").exists()


@pytest.mark.parametrize("engine,topology,check", [("llama.cpp", "layers", True), ("vllm", "tensor", False)])
def test_no_rdma_check_for_tcp_layers_or_when_turned_off(tmp_path, engines_on_path, engine, topology, check):
    out = run_module(load_module("bench_run"), _args(tmp_path, engine, topology, check))
    result, rec = _only_run(out, tmp_path)
    assert not (result["reason"] or "").startswith("rdma:"), result["reason"]
    assert ((rec.get("serving") or {}).get("cluster") or {}).get("rdma") is None
