"""The nodes of a multi-node run in the loader (issue 36): each worker's node file is joined to rank 0's run by run
id; a suspect worker makes the run suspect for every reader of readiness (hostcheck.run_states, and so the host
verdicts), naming the node; a node file that cannot be read or joined is named, never a crash."""

from __future__ import annotations

import pandas as pd
from node_tree import CAMPAIGN, HEAD, WORKER, head_record, node_document, pair_campaign, ready, write_node, write_record

from sparkfleet import hostcheck
from sparkfleet.load import FROM_NODE_FILE, FROM_RECORD, NO_NODE_FILE, WORKERS_STATE, load_runs
from sparkfleet.report.host_normal import check_hosts

SLOW = "SM clock 700 MHz under load, in the degraded band 500-890 MHz"


def test_a_worker_node_file_joins_rank_zeros_run(tmp_path):
    root = tmp_path / CAMPAIGN
    [run_id] = pair_campaign(root, [ready("healthy", 2350.0)])
    loaded = load_runs(root)
    nodes = loaded.nodes.set_index("rank")
    assert list(nodes.index) == [0, 1] and set(nodes["run_id"]) == {run_id}
    assert nodes.loc[0, "host"] == HEAD and nodes.loc[0, "source"] == FROM_RECORD
    assert nodes.loc[1, "host"] == WORKER and nodes.loc[1, "source"] == FROM_NODE_FILE
    assert nodes.loc[1, "readiness_state"] == "healthy" and nodes.loc[1, "readiness_clock_mhz"] == 2350.0
    assert nodes.loc[1, "power_w_mean"] == 88.0 and nodes.loc[1, "gpu_temp_c_max"] == 58.0
    assert nodes.loc[1, "clock_events"] == "" and nodes.loc[1, "samples"] == 40
    assert nodes.loc[0, "clock_events"] == "sw_power_cap"
    assert nodes.loc[1, "record_dir"] == nodes.loc[0, "record_dir"]  # the run's row in the runs table
    assert loaded.node_problems == [] and loaded.problems == []
    assert len(loaded.runs) == 1 and WORKERS_STATE not in loaded.runs  # nothing suspect: the runs as they were


def test_a_suspect_worker_makes_the_run_suspect_and_names_the_node(tmp_path):
    root = tmp_path / CAMPAIGN
    suspect_id, healthy_id = pair_campaign(root, [ready("suspect", 700.0, SLOW), ready("healthy")])
    loaded = load_runs(root)
    states = hostcheck.run_states(root, loaded.runs).set_index("run_id")
    assert states.loc[suspect_id, "readiness_state"] == "suspect"
    assert states.loc[suspect_id, "readiness_reasons"] == f"{WORKER} (rank 1): {SLOW}"
    assert states.loc[suspect_id, "own_readiness_state"] == "healthy"  # rank 0's own probe
    assert states.loc[healthy_id, "readiness_state"] == "healthy"
    host = check_hosts(root, loaded.runs).hosts.set_index("host").loc[HEAD]
    assert host["suspect_runs"] == 1  # kept apart, never averaged in
    assert f"{WORKER} (rank 1)" in host["causes"]
    assert host["readiness"] == "readiness: 2 of 2 probes healthy"  # spark1's own probes were


def test_a_worker_without_a_node_file_or_a_probe_is_named_not_judged(tmp_path):
    root = tmp_path / CAMPAIGN
    [unprobed] = pair_campaign(root, [None])
    missing = head_record(2)
    write_record(root, missing)
    loaded = load_runs(root)
    workers = loaded.nodes[loaded.nodes["rank"] == 1].set_index("run_id")
    assert workers.loc[unprobed, "source"] == FROM_NODE_FILE and pd.isna(workers.loc[unprobed, "readiness_state"])
    assert workers.loc[missing["run_id"], "source"] == NO_NODE_FILE
    assert workers.loc[missing["run_id"], "host"] == WORKER
    assert WORKERS_STATE not in loaded.runs
    assert set(hostcheck.run_states(root, loaded.runs)["readiness_state"]) == {"healthy"}


def test_a_broken_or_unjoined_node_file_is_named(tmp_path):
    root = tmp_path / CAMPAIGN
    [run_id] = pair_campaign(root, [ready()])
    broken = write_node(root, "{not json", run_id, host="spark3")
    no_rank = node_document(run_id) | {"rank": "one"}
    wrong = write_node(root, no_rank, run_id, host="spark4")
    orphan = write_node(root, node_document("serve-other-run"), "serve-other-run")
    stranger = write_node(root, node_document(run_id) | {"host": "spark5"}, run_id, host="spark5")
    loaded = load_runs(root)
    named = {p.path: p.reason for p in loaded.node_problems}
    assert set(named) == {broken, wrong, orphan, stranger}
    assert "spark5 is not a worker node" in named[stranger]
    assert "not readable JSON" in named[broken]
    assert "rank" in named[wrong]
    assert "no record of its run serve-other-run" in named[orphan]
    assert len(loaded.runs) == 1 and loaded.problems == []  # the records are read all the same
    assert list(loaded.nodes["source"]) == [FROM_RECORD, FROM_NODE_FILE]


def test_a_campaign_without_multi_node_runs_has_no_nodes(tmp_path):
    root = tmp_path / CAMPAIGN
    pair_campaign(root, [], singles=2)
    loaded = load_runs(root)
    assert loaded.nodes.empty and loaded.node_problems == []
