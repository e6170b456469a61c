"""Multi-node serving runs in the report (issue 36, topology as a factor): a run on a cluster is a configuration of
its own, ``<engine> on N nodes (<topology>)``, never pooled with the single-host runs of its engine, and is compared
with them as engines are (the single host, first by name, the reference), with the report's one rule."""

from __future__ import annotations

import csv

import numpy as np
from serving_tree import CAMPAIGN, no_difference, serving_record

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main
from sparkfleet.serving import engine_configuration, point_rows

LAYERS = "llama.cpp on 2 nodes (layers)"
REPLICAS = "llama.cpp on 2 nodes (replicas)"


def test_a_cluster_run_is_its_engine_on_its_nodes_and_topology():
    assert engine_configuration({"engine": "llama.cpp"}) == "llama.cpp"
    assert engine_configuration({"engine": "llama.cpp", "cluster": None}) == "llama.cpp"
    cluster = {"name": "pair", "nodes": ["spark1", "spark2"], "topology": "replicas", "workers": ["10.0.0.2"]}
    assert engine_configuration({"engine": "llama.cpp", "cluster": cluster}) == REPLICAS
    rec = serving_record("llama.cpp", "bare", 1, 0, np.random.default_rng(0), no_difference, 0.01)
    rec["serving"]["cluster"] = dict(cluster, topology="layers")
    assert {row["engine"] for row in point_rows(rec, "/tmp")} == {LAYERS}


def _faster(factor: float):
    def scale(engine: str, environment: str, metric: str, point: dict) -> float:
        return factor if metric in ("tg_tok_s", "pp_tok_s", "peak_tg_tok_s") else 1.0
    return scale


def test_one_host_two_nodes_and_two_replicas_are_compared_not_pooled(tmp_path):
    """Two replicas double the aggregate decode rate here, the model over two nodes does not change it: the
    report says replicas differ from one host and the layered run is the same within the tolerance."""
    rng = np.random.default_rng(1)
    root = tmp_path / CAMPAIGN
    order = 0
    for iteration in range(1, 6):
        for topology, scale in ((None, 1.0), ("layers", 1.0), ("replicas", 2.0)):
            rec = serving_record("llama.cpp", "bare", iteration, order, rng, _faster(scale), 0.01,
                                 profile={"depth": (0,), "concurrency": (4,), "pp": (512,), "tg": (64,)})
            if topology:
                rec["serving"]["cluster"] = {"name": "pair", "nodes": ["spark-01", "spark-02"],
                                             "topology": topology, "workers": ["10.0.0.2"]}
                rec["workload"] = f"serve-{topology}"
                rec["run_id"] = contract.run_id(CAMPAIGN, "spark-01", rec["model"], "bare", rec["workload"],
                                                iteration)
            rec["environment_kind"] = "bare"
            contract.write_json_atomic(root / "spark-01" / "runs" / rec["run_id"] / "record.json", rec)
            order += 1
    assert main(["report", str(root)]) == 0
    with (root / "report" / "serving_cells.csv").open() as fh:
        cells = list(csv.DictReader(fh))
    assert {c["engine"] for c in cells} == {"llama.cpp", LAYERS, REPLICAS}
    assert {c["n"] for c in cells} == {"5"}  # five runs each: nothing pooled across topologies
    with (root / "report" / "serving_comparisons.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["metric"] == "tg_tok_s"]
    outcome = {r["b"]: r["outcome"] for r in rows if r["a"] == "llama.cpp"}
    assert outcome == {LAYERS: "same", REPLICAS: "different"}, rows
