"""The report's "Nodes of multi-node runs" (issue 36): a row per run x node in the section, cluster_nodes.csv and
--json; the suspect worker, the worker without a node file and the node file left out named; nothing for a campaign
without multi-node runs."""

from __future__ import annotations

import csv
import json

from node_tree import CAMPAIGN, HEAD, WORKER, head_record, pair_campaign, ready, write_node, write_record

from sparkfleet.cli import main
from sparkfleet.load import load_runs
from sparkfleet.report import cluster_nodes
from sparkfleet.report.compose import analyse
from sparkfleet.report.summary import to_json

SLOW = "SM clock 700 MHz under load, in the degraded band 500-890 MHz"


def _tree(tmp_path):
    """Two multi-node runs (the worker healthy in one, suspect in the other), one whose worker wrote no node file, a
    broken node file, and two runs on one node."""
    root = tmp_path / CAMPAIGN
    ids = pair_campaign(root, [ready("healthy", 2350.0), ready("suspect", 700.0, SLOW)], singles=2)
    lost = head_record(3)
    write_record(root, lost)
    write_node(root, "{", "serve-broken")
    return root, [*ids, lost["run_id"]]


def test_the_section_has_a_row_per_run_and_node(tmp_path):
    root, (healthy, suspect, lost) = _tree(tmp_path)
    report = analyse(load_runs(root))
    section = cluster_nodes.section(report.nodes)
    assert section is not None and section.title == cluster_nodes.TITLE
    [frame] = [b.frame for b in section.blocks if hasattr(b, "frame")]
    rows = {(r["run"], r["host"]): r for r in frame.to_dict("records")}
    assert set(rows) == {(run, host) for run in (healthy, suspect, lost) for host in (HEAD, WORKER)}  # singles: none
    assert rows[(healthy, WORKER)]["readiness (SM clock under the probe)"] == "healthy (2350 MHz)"
    assert rows[(healthy, WORKER)]["mean power W"] == "88" and rows[(healthy, WORKER)]["max GPU temp °C"] == "58"
    assert rows[(healthy, WORKER)]["clock events seen"] == "none"
    assert rows[(healthy, HEAD)]["clock events seen"] == "sw_power_cap"
    assert rows[(suspect, WORKER)]["readiness (SM clock under the probe)"] == "suspect (700 MHz)"
    assert rows[(lost, WORKER)]["readiness (SM clock under the probe)"] == "no node file"
    bullets = [item for b in section.blocks if hasattr(b, "items") for item in b.items]
    assert any(item.startswith(f"{WORKER}: no node file for 1 of 3 runs") for item in bullets)
    assert any(item.startswith(f"{WORKER} (rank 1) was suspect before 1 run: {SLOW}") for item in bullets)
    assert any("serve-broken" in item for item in bullets)  # the broken node file, named
    kinds = [f.message for f in report.findings if f.kind == cluster_nodes.FINDING_KIND]
    assert len(kinds) == 3


def test_the_csv_and_json_carry_the_same_rows(tmp_path):
    root, ids = _tree(tmp_path)
    assert main(["report", str(root)]) == 0
    with (root / "report" / cluster_nodes.CSV).open() as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["run_id"], r["host"], r["rank"]) for r in rows} == {(run, h, str(rank)) for run in ids
                                                                   for rank, h in enumerate((HEAD, WORKER))}
    data = json.loads(to_json(analyse(load_runs(root))))["cluster_nodes"]
    assert {(r["run_id"], r["host"]) for r in data["nodes"]} == {(r["run_id"], r["host"]) for r in rows}
    assert len(data["suspect"]) == 1 and len(data["missing"]) == 1 and len(data["left_out"]) == 1


def test_a_suspect_worker_is_kept_apart_in_the_host_verdict(tmp_path):
    root, _ = _tree(tmp_path)
    hosts = analyse(load_runs(root)).hosts.hosts.set_index("host")
    assert hosts.loc[HEAD, "suspect_runs"] == 1


def test_no_multi_node_runs_no_section(tmp_path):
    root = tmp_path / CAMPAIGN
    pair_campaign(root, [], singles=2)
    report = analyse(load_runs(root))
    assert cluster_nodes.section(report.nodes) is None
    assert "cluster_nodes" not in json.loads(to_json(report))
    assert main(["report", str(root)]) == 0
    assert not (root / "report" / cluster_nodes.CSV).exists()
    assert cluster_nodes.TITLE not in (root / "report" / "summary.md").read_text()


def test_a_worker_not_probed_is_named_not_judged(tmp_path):
    root = tmp_path / CAMPAIGN
    pair_campaign(root, [None])
    nodes = load_runs(root).nodes
    assert cluster_nodes.unprobed_sentences(nodes) == [
        f"{WORKER}: not probed before 1 run (no readiness section: the probe was off): its readiness is not judged"]
    assert cluster_nodes.suspect_sentences(nodes) == [] and cluster_nodes.missing_sentences(nodes) == []
