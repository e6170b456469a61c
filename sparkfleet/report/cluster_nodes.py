"""Nodes of multi-node runs (issue 36): every node of each run on a cluster, rank 0 from its record and each worker
from the node file it wrote in its own tree (sparkfleet.load.join_nodes): its readiness before the run with the SM
clock the probe reached, and its telemetry over the run (mean power, the hottest GPU temperature, mean SM clock, the
clock-event reasons seen, samples). A worker without a node file, one not probed and a node file that could not be
read are named, never judged; a suspect worker made its run suspect in the loader already (hostcheck.run_states).

Nothing here for a campaign without multi-node runs or node files: ``NodeStudy.present`` is false."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sparkfleet.load import FROM_NODE_FILE, NO_NODE_FILE, NODE_COLUMNS, LoadResult, nodes_frame
from sparkfleet.report.document import Bullets, Paragraph, Section, fmt, shown, table
from sparkfleet.report.types import Finding, plain

CSV = "cluster_nodes.csv"
FINDING_KIND = "cluster-node"
TITLE = "Nodes of multi-node runs"
#: Per-host sentences listed one by one up to this many, then counted.
MAX_LISTED = 20


@dataclass
class NodeStudy:
    nodes: pd.DataFrame = field(default_factory=lambda: nodes_frame([]))  # load.NODE_COLUMNS, a row per run x node
    problems: list[str] = field(default_factory=list)  # node files not read or not joined, each with its reason

    @property
    def present(self) -> bool:
        return bool(len(self.nodes) or self.problems)


def node_study(loaded: LoadResult) -> NodeStudy:
    return NodeStudy(loaded.nodes, [str(p) for p in loaded.node_problems])


def readiness_words(state: Any, clock: Any, source: Any) -> str:
    """A node's readiness cell: "healthy (2400 MHz)", "not probed", "no node file"."""
    if source == NO_NODE_FILE:
        return "no node file"
    if not isinstance(state, str):
        return "not probed"
    return f"{state} ({fmt(clock)} MHz)" if pd.notna(clock) else state


def _clock_events(value: Any) -> str:
    return "–" if not isinstance(value, str) else value or "none"


def display(nodes: pd.DataFrame) -> pd.DataFrame:
    """The section's table: one row per run x node, formatted."""
    return pd.DataFrame({
        "run": nodes["run_id"], "cluster": nodes["cluster"], "host": nodes["host"], "rank": nodes["rank"].map(fmt),
        "readiness (SM clock under the probe)": [readiness_words(s, c, src) for s, c, src in zip(
            nodes["readiness_state"], nodes["readiness_clock_mhz"], nodes["source"], strict=True)],
        "mean power W": nodes["power_w_mean"].map(fmt), "max GPU temp °C": nodes["gpu_temp_c_max"].map(fmt),
        "mean SM clock MHz": nodes["sm_clock_mhz_mean"].map(fmt),
        "clock events seen": nodes["clock_events"].map(_clock_events), "samples": nodes["samples"].map(fmt),
    })


def _listed(sentences: list[str]) -> list[str]:
    if len(sentences) <= MAX_LISTED:
        return sentences
    return [*sentences[:MAX_LISTED], f"and {len(sentences) - MAX_LISTED} more (every row in {CSV})"]


def _runs(count: int) -> str:
    return f"{count} run{'s' * (count != 1)}"


def missing_sentences(nodes: pd.DataFrame) -> list[str]:
    """Per worker host without node files: "spark2: no node file for 2 of 3 runs — its telemetry was not
    collected"."""
    workers = nodes[nodes["rank"] > 0]
    out = []
    for host, rows in workers.groupby("host", sort=True):
        missing = int((rows["source"] == NO_NODE_FILE).sum())
        if missing:
            share = "" if missing == len(rows) else f" for {missing} of {_runs(len(rows))}"
            out.append(f"{host}: no node file{share} — its telemetry was not collected")
    return out


def unprobed_sentences(nodes: pd.DataFrame) -> list[str]:
    """Per node host whose node file or record has no readiness section: not probed, so not judged."""
    found = nodes[(nodes["source"] != NO_NODE_FILE) & nodes["readiness_state"].isna()]
    return [f"{host}: not probed before {_runs(len(rows))} (no readiness section: the probe was off): its readiness "
            "is not judged" for host, rows in found.groupby("host", sort=True)]


def suspect_sentences(nodes: pd.DataFrame) -> list[str]:
    """Per worker host the probe found suspect: the runs it made suspect, with the first reason."""
    found = nodes[(nodes["rank"] > 0) & (nodes["readiness_state"] == "suspect")]
    out = []
    for (host, rank), rows in found.groupby(["host", "rank"], sort=True):
        reason = rows["readiness_reasons"].dropna()
        why = f": {reason.iloc[0]}" if len(reason) else ""
        out.append(f"{host} (rank {rank}) was suspect before {_runs(len(rows))}{why}; "
                   f"{'that run counts' if len(rows) == 1 else 'those runs count'} as suspect")
    return out


def _overview(nodes: pd.DataFrame) -> str:
    runs = nodes["run_id"].nunique()
    clusters = ", ".join(sorted(nodes["cluster"].dropna().astype(str).unique())) or "unnamed"
    workers = nodes[nodes["rank"] > 0]
    found = int((workers["source"] == FROM_NODE_FILE).sum())
    return (f"{_runs(runs)} on cluster {clusters}: one row per node, rank 0 from the run's record, each worker from "
            f"the node file it wrote (cluster_nodes/<run_id>/node.json; {found} of {len(workers)} found). Readiness: "
            "the probe's state before the run with the SM clock it reached under load; then the node's telemetry "
            "over the run. A run one of whose nodes was suspect counts as suspect, as if rank 0's own probe had "
            "said so.")


def section(study: NodeStudy) -> Section | None:
    if not study.present:
        return None
    nodes = study.nodes
    blocks: list = []
    if len(nodes):
        notes = suspect_sentences(nodes) + missing_sentences(nodes) + unprobed_sentences(nodes)
        blocks += [Paragraph(_overview(nodes)), *([Bullets(_listed(notes))] if notes else []),
                   table(display(shown(nodes)), "Each node of each multi-node run", CSV, len(nodes))]
    if study.problems:
        blocks += [Paragraph("Node files left out (not readable, or no run of theirs was loaded):"),
                   Bullets(_listed(study.problems))]
    return Section(TITLE, blocks)


def findings(study: NodeStudy) -> list[Finding]:
    """A suspect worker, a worker without node files, each node file left out."""
    nodes = study.nodes
    said = suspect_sentences(nodes) + missing_sentences(nodes) if len(nodes) else []
    return ([Finding(FINDING_KIND, s) for s in said]
            + [Finding(FINDING_KIND, f"node file left out: {p}") for p in study.problems])


def tables(study: NodeStudy) -> dict[str, pd.DataFrame]:
    """cluster_nodes.csv: every row of the section's table unformatted; nothing without nodes."""
    return {CSV: study.nodes[NODE_COLUMNS]} if len(study.nodes) else {}


def payload(study: NodeStudy) -> dict[str, Any]:
    """``--json``'s ``cluster_nodes``: the rows, the sentences the section says and the node files left out."""
    nodes = study.nodes
    return {"nodes": [{c: plain(v) for c, v in row.items()} for row in nodes.to_dict("records")],
            "suspect": suspect_sentences(nodes) if len(nodes) else [],
            "missing": missing_sentences(nodes) if len(nodes) else [],
            "not_probed": unprobed_sentences(nodes) if len(nodes) else [],
            "left_out": list(study.problems)}
