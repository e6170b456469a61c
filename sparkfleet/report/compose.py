"""The whole analysis of a campaign, composed in one direction: the facts (analysis.py), then the memory
study, the findings and the verdicts, each built from the facts (memory.py, findings.py, verdicts.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pandas as pd

from sparkfleet.load import LoadResult
from sparkfleet.report import cluster_nodes, host_normal, sample_checks, suspect_runs
from sparkfleet.report import pair as report_pair
from sparkfleet.report import serving as report_serving
from sparkfleet.report.analysis import Analysis, Options, compute_facts
from sparkfleet.report.findings import collect_findings
from sparkfleet.report.memory import memory_study
from sparkfleet.report.types import Finding, MemoryStudy, VerdictLine
from sparkfleet.report.verdicts import build_verdicts


@dataclass
class Report(Analysis):
    """The facts and what the report says about them; the renderers read this."""

    findings: list[Finding] = field(default_factory=list)
    verdicts: list[VerdictLine] = field(default_factory=list)
    memory: MemoryStudy = field(default_factory=MemoryStudy)  # decomposition, factor effects, A/A noise floor
    hosts: host_normal.HostCheck | None = None  # "is this host normal?" (host_normal.py); None: no evidence
    serving: report_serving.ServingStudy = field(default_factory=report_serving.ServingStudy)  # serving points
    serving_left_out: pd.DataFrame = field(default_factory=pd.DataFrame)  # sample_checks: what cannot be, named
    suspect_runs: pd.DataFrame = field(default_factory=pd.DataFrame)  # suspect_runs: left out for readiness, named
    pair: report_pair.PairStudy = field(default_factory=report_pair.PairStudy)  # pair_preflight.json (issue 36)
    nodes: cluster_nodes.NodeStudy = field(default_factory=cluster_nodes.NodeStudy)  # multi-node runs' nodes (36)


def analyse(loaded: LoadResult, options: Options | None = None,
            host_options: host_normal.HostOptions | None = None) -> Report:
    facts = compute_facts(loaded, options)
    o = facts.options
    memory = memory_study(facts.runs, facts.kv_runs, o.alpha, o.threshold, o.level)
    hosts = host_normal.for_report(facts, host_options, loaded.serving)
    serving = report_serving.serving_study(loaded.serving, o.alpha, o.threshold, o.level, o.resamples, o.seed,
                                           o.cv_gate, facts.regressions)  # empty without serving runs
    left_out = sample_checks.left_out(loaded.serving)  # the serving samples that cannot be (issue 32)
    suspect = suspect_runs.suspect_runs(facts.runs)  # the runs the readiness probe found suspect, left out
    pair = report_pair.pair_study(facts.root)  # the clusters' pair preflights (issue 36)
    nodes = cluster_nodes.node_study(loaded)  # each node of the multi-node runs (issue 36)
    return Report(**{f.name: getattr(facts, f.name) for f in fields(Analysis)},
                  findings=collect_findings(facts) + host_normal.findings(hosts) + report_serving.findings(serving)
                  + suspect_runs.findings(suspect) + sample_checks.findings(left_out) + report_pair.findings(pair)
                  + cluster_nodes.findings(nodes),
                  verdicts=report_serving.with_serving_lines(build_verdicts(facts, memory), serving, o.threshold),
                  memory=memory, hosts=hosts, serving=serving, serving_left_out=left_out, suspect_runs=suspect,
                  pair=pair, nodes=nodes)
