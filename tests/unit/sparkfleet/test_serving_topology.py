"""Multi-node serving runs in the report (issue 36, topology as a factor): a run on a cluster is a configuration of
its own, ``<engine> on N nodes (<topology>)``, never pooled with the single-host runs of its engine, and is compared
with them as engines are (the single host, first by name, the reference), with the report's one rule."""

from __future__ import annotations

import csv

import numpy as np
from serving_tree import CAMPAIGN, no_difference, serving_record

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main
from sparkfleet.load import load_runs
from sparkfleet.report import serving_nodes
from sparkfleet.report.compose import analyse
from sparkfleet.serving import configuration_of, engine_configuration, point_rows

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
    assert configuration_of(LAYERS) == ("llama.cpp", 2, "layers") and configuration_of("vllm") == ("vllm", 1, None)


def _faster(factor: float):
    def scale(engine: str, environment: str, metric: str, point: dict) -> float:
        return factor if metric in ("tg_tok_s", "pp_tok_s", "peak_tg_tok_s") else 1.0
    return scale


def _campaign(tmp_path, scales: dict) -> object:
    """One host's runs of llama.cpp alone and on two nodes (each topology's aggregate decode rate x its scale), 5
    iterations, one point at concurrency 4."""
    rng = np.random.default_rng(1)
    root = tmp_path / CAMPAIGN
    order = 0
    for iteration in range(1, 6):
        for topology, scale in scales.items():
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
    return root


def test_one_host_two_nodes_and_two_replicas_are_compared_not_pooled(tmp_path):
    """Two replicas double the aggregate decode rate here, the model over two nodes does not change it: the
    report says replicas differ from one host and the layered run is the same within the tolerance."""
    root = _campaign(tmp_path, {None: 1.0, "layers": 1.0, "replicas": 2.0})
    assert main(["report", str(root)]) == 0
    with (root / "report" / "serving_cells.csv").open() as fh:
        cells = list(csv.DictReader(fh))
    assert {c["engine"] for c in cells} == {"llama.cpp", LAYERS, REPLICAS}
    assert {c["n"] for c in cells} == {"5"}  # five runs each: nothing pooled across topologies
    with (root / "report" / "serving_comparisons.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["metric"] == "tg_tok_s"]
    outcome = {r["b"]: r["outcome"] for r in rows if r["a"] == "llama.cpp"}
    assert outcome == {LAYERS: "same", REPLICAS: "different"}, rows


def _answers(root) -> dict[str, str]:
    lines = [line for line in analyse(load_runs(root)).verdicts if line.question == serving_nodes.QUESTION]
    return {line.subject.rsplit(" / ", 1)[1]: line.headline for line in lines}


def test_the_report_answers_whether_two_nodes_are_worth_it(tmp_path):
    """Replicas at 2.5x one node's aggregate rate pay for their second node; the model over two nodes at 0.6x does
    not; each line says so from the engine verdicts."""
    answers = _answers(_campaign(tmp_path, {None: 1.0, "layers": 0.6, "replicas": 2.5}))
    assert set(answers) == {LAYERS, REPLICAS}
    assert "Lower aggregate throughput than one node at 1 of 1 points: not worth it" in answers[LAYERS]
    assert "Higher aggregate throughput at every point, above the +100% that 2 nodes cost" in answers[REPLICAS]


def test_a_gain_short_of_the_second_node_says_less_per_node(tmp_path):
    answers = _answers(_campaign(tmp_path, {None: 1.0, "replicas": 1.5}))
    assert "below the +100% that 2 nodes cost: less per node than one node alone" in answers[REPLICAS]


def test_no_multi_node_configuration_no_answer(tmp_path):
    assert _answers(_campaign(tmp_path, {None: 1.0})) == {}
