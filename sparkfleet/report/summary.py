"""The report for terminals (a short text summary) and for programs (JSON with stable keys)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pandas as pd

from sparkfleet.report import cluster_nodes, headline, host_normal, suspect_runs
from sparkfleet.report import pair as report_pair
from sparkfleet.report import serving as report_serving
from sparkfleet.report.compose import Report
from sparkfleet.report.types import plain

JSON_VERSION = 1


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    columns = list(frame.columns)
    return [{c: plain(v) for c, v in zip(columns, row, strict=True)}
            for row in frame.itertuples(index=False, name=None)]


def payload(analysis: Report) -> dict[str, Any]:
    """Cells (statistics joined with status counts), comparisons and warnings."""
    keys = ["host", "model", "environment", "workload"]
    cells = analysis.cells.merge(analysis.counts, on=keys, how="left")
    return {
        "version": JSON_VERSION,
        "root": str(analysis.root),
        **report_serving.payload(analysis),  # "serving": only for serving runs (issue 25)
        "runs": {"total": len(analysis.runs), **{f"status_{k}": int(v) for k, v in
                                                 analysis.runs["status"].value_counts().sort_index().items()}},
        "skipped": [{"path": str(p.path), "reason": p.reason} for p in analysis.problems],
        # the ok runs the readiness probe found suspect, left out of every statistic, each with its reason
        "suspect_runs": records(analysis.suspect_runs),
        # every planned run accounted for: planned (campaign.json), with a record, each missing one named
        "accounting": analysis.accounting.to_dict(),
        "options": dataclasses.asdict(analysis.options),
        "cell_counts": records(analysis.counts),
        "cells": records(cells),
        "comparisons": {
            "environments": records(analysis.environments),
            "kv_shift": records(analysis.kv_shift),
        },
        "kv_fit": dataclasses.asdict(analysis.kv_fit) if analysis.kv_fit else None,
        "kv_residuals": records(analysis.kv_runs[["run_id", "fraction", "fraction_source", "tmp_kv_gib",
                                                  "tmp_kv_source", "residual_gib", "line_residual_gib"]])
        if not analysis.kv_runs.empty else [],
        "reproducibility": {
            "variance": records(analysis.host_variance),
            "deviations": records(analysis.host_deviations),
        },
        "outliers": records(analysis.outliers),
        "memory": {  # report/memory.py: decomposition, KV gaps, factor effects, A/A noise floor
            "decomposition": records(analysis.memory.decomposition),
            "kv_gaps": records(analysis.memory.gaps),
            "factor_effects": records(analysis.memory.effects),
            "aa_pairs": records(analysis.memory.aa_pairs),
            "noise_floor": records(analysis.memory.noise),
        },
        "warnings": [dataclasses.asdict(f) for f in analysis.findings],
        # The answers, in the order the report shows them: one entry per line, each with its metrics.
        "verdicts": [line.as_dict() for line in analysis.verdicts],
        "baseline": None if analysis.regressions is None else {
            "path": analysis.options.baseline,
            "skipped": [{"path": str(p.path), "reason": p.reason} for p in analysis.baseline_problems],
            "comparisons": records(analysis.regressions),
        },
    }


def to_json(analysis: Report) -> str:
    data = payload(analysis)
    if analysis.hosts is not None:  # "is this host normal?" (host_normal.py): only where the tree has evidence
        data["hosts"] = analysis.hosts.to_dict()
    if analysis.pair.present:  # the clusters' pair preflights: only where the tree holds pair_preflight.json
        data["pair_preflight"] = report_pair.payload(analysis.pair)
    if analysis.nodes.present:  # each node of the multi-node runs: only where the tree holds some (issue 36)
        data["cluster_nodes"] = cluster_nodes.payload(analysis.nodes)
    return json.dumps(data, sort_keys=True, indent=2, default=str)


def verdict_lines(analysis: Report) -> list[str]:
    """The verdict block as terminal lines (the same lines as the report's first section)."""
    lines = []
    for line in analysis.verdicts:
        lines.append(f"  {line.label.upper()}: {line.headline or line.text}")
        if line.headline:
            lines.append(f"      {line.text}")
    return lines


def terminal_summary(analysis: Report, written: list[str]) -> str:
    runs = analysis.runs
    statuses = ", ".join(f"{n} {s}" for s, n in runs["status"].value_counts().sort_index().items())
    # the numbers (headline.py) follow the verdicts, or lead where the verdicts have nothing to compare
    numbers, verdicts = headline.terminal_lines(analysis), ["verdicts:", *verdict_lines(analysis)]
    lines = [*((numbers + verdicts) if headline.nothing_to_compare(analysis) else (verdicts + numbers)),
             *(["hosts:", *(f"  {s}" for s in analysis.hosts.hosts["sentence"])]
               if analysis.hosts and host_normal.says_something(analysis.hosts) else []),
             f"{len(runs)} runs ({statuses}) in {len(analysis.counts)} cells; "
             f"{len(analysis.problems)} record(s) skipped",
             analysis.accounting.summary()]
    if analysis.kv_fit:
        fit = analysis.kv_fit
        no_tmp = fit.runs - fit.runs_with_tmp_kv
        lines.append(f"KV budget: residuals {fit.residual_min:+.3f}..{fit.residual_max:+.3f} GiB with fraction "
                     f"{fit.assumed_fraction:g} where not recorded (fitted {fit.fitted_fraction:.4f})"
                     + (f"; tmp_kv not recorded in {no_tmp} of {fit.runs} runs (left out of their residual)"
                        if no_tmp else ""))
    kinds = pd.Series([f.kind for f in analysis.findings], dtype="string").value_counts()
    if len(kinds):
        lines.append("warnings: " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
        for finding in analysis.findings:
            if finding.kind in ("sequential", "invalid", "not-ok", "skipped", "missing", "no-metrics", "leftover",
                                "rejected-metric", "tree", report_pair.FINDING_KIND, cluster_nodes.FINDING_KIND,
                                suspect_runs.FINDING_KIND,
                                *host_normal.TERMINAL_KINDS):
                lines.append(f"  ! {finding.message}")
    lines += [f"wrote {path}" for path in written]
    return "\n".join(lines)
