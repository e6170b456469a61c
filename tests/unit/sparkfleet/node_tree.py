"""A results tree of multi-node serving runs (issue 36): rank 0's records (serving.cluster naming the nodes, its own
readiness and telemetry) and the node file each worker writes in its own tree
(``<campaign>/<worker>/cluster_nodes/<run_id>/node.json``, contract/node_file.py), plus single-node runs of the
same engine to compare them with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from serving_tree import CAMPAIGN, no_difference, serving_record

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import node_file
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract

HEAD, WORKER = "spark1", "spark2"
CLUSTER = {"name": "pair", "nodes": [HEAD, WORKER], "topology": "layers", "workers": ["192.168.100.12"]}
PROFILE = {"depth": (0,), "concurrency": (1,), "pp": (512,), "tg": (64,)}


def ready(state: str = "healthy", clock: float = 2400.0, reason: str | None = None) -> dict[str, Any]:
    """A readiness section (host_state.readiness_probe) of ``state``; a suspect one gives ``reason``."""
    reasons = [{"cause": "degraded_band", "message": reason}] if reason else []
    return {"state": state, "reasons": reasons, "action": {"action": "run" if state == "healthy" else "mark"},
            "sm_clock_mhz": clock, "power_w": 90.0, "power_limited": False}


def telemetry(power: float, temp: float, clock: float, seen: list[str] | None = None, samples: int = 40) -> dict:
    """A TelemetrySampler.stop() summary (the keys the report reads; ``seen``: the clock-event reasons)."""
    summary = {"sensor": "nvml", "samples": samples, "gpu_power_w_mean": power, "gpu_temp_c_max": temp,
               "sm_clock_mhz_mean": clock, "errors": []}
    return summary if seen is None else {**summary, "throttle_reasons_seen": seen}


def head_record(iteration: int, cluster: dict | None = CLUSTER, readiness: dict | None = None) -> dict[str, Any]:
    """Rank 0's record of a multi-node run (``cluster`` None: a run on one node)."""
    rec = serving_record("llama.cpp", "bare", iteration, iteration, np.random.default_rng(iteration), no_difference,
                         0.01, host=HEAD, profile=PROFILE)
    rec |= {"environment_kind": "bare", "readiness": readiness or ready(),
            "telemetry": telemetry(95.0, 61.0, 2400.0, ["sw_power_cap"])}
    if cluster is not None:
        rec["serving"]["cluster"] = cluster
        rec["workload"] = "serve-pair"
        rec["run_id"] = contract.run_id(CAMPAIGN, HEAD, rec["model"], "bare", rec["workload"], iteration)
    return rec


def write_record(root: Path, rec: dict[str, Any]) -> Path:
    path = root / rec["host"] / "runs" / rec["run_id"] / contract.RECORD_NAME
    contract.write_json_atomic(path, rec)
    return path


def node_document(run_id: str, readiness: dict | None = None, summary: dict | None = None) -> dict[str, Any]:
    """What a worker writes for the run ``run_id`` (rank 0's run id)."""
    return {"schema": 1, "run_id": run_id, "campaign": CAMPAIGN, "cluster": "pair", "head": HEAD, "host": WORKER,
            "rank": 1, "address": "192.168.100.12", "environment": {"name": "bare", "kind": "bare"},
            "readiness": readiness, "telemetry": summary if summary is not None else telemetry(88.0, 58.0, 2350.0, []),
            "started_utc": "2026-01-10T00:00:00Z", "stopped_utc": "2026-01-10T00:01:00Z", "worker": None}


def write_node(root: Path, document: dict[str, Any] | str, run_id: str, host: str = WORKER) -> Path:
    """The node file under ``<root>/<host>/cluster_nodes/<run_id>/`` (text written as is: a broken file)."""
    directory = Path(node_file.node_dir(str(root / host), run_id))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / node_file.NODE_NAME
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def pair_campaign(root: Path, worker_states: list[dict | None], singles: int = 0) -> list[str]:
    """One multi-node run per entry of ``worker_states`` (the worker's readiness section; None: not probed), each
    with the worker's node file, and ``singles`` runs on one node; returns the multi-node runs' ids."""
    ids = []
    for iteration, state in enumerate(worker_states, start=1):
        rec = head_record(iteration)
        write_record(root, rec)
        write_node(root, node_document(rec["run_id"], state), rec["run_id"])
        ids.append(rec["run_id"])
    for iteration in range(1, singles + 1):
        write_record(root, head_record(iteration, cluster=None))
    return ids
