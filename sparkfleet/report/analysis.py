"""The facts a report shows, computed once from the loaded runs: statistics, comparisons, fits (the
judgements built on them live in findings.py, verdicts.py and memory.py; compose.py puts all together)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from sparkfleet import compare, reproducibility, stats, thresholds
from sparkfleet.accounting import Accounting
from sparkfleet.load import DEFAULT_KV_FRACTION, LoadProblem, LoadResult, load_runs
from sparkfleet.report.host_facts import facts_for_runs


@dataclass(frozen=True)
class Options:
    cv_gate: float = stats.DEFAULT_CV_GATE
    level: float = stats.DEFAULT_LEVEL
    resamples: int = stats.DEFAULT_RESAMPLES
    seed: int = stats.DEFAULT_SEED
    tolerance: float = reproducibility.DEFAULT_TOLERANCE
    kv_fraction: float = DEFAULT_KV_FRACTION  # assumed where a run's engine output states none
    alpha: float = thresholds.DEFAULT_ALPHA
    threshold: float = thresholds.DEFAULT_THRESHOLD  # the smallest relative difference that matters
    baseline: str | None = None  # results directory the regression verdicts compare against


@dataclass
class Analysis:
    """The computed facts of one campaign: tables and fits, no judgement. The findings, the verdicts and the
    memory study are built from these (findings.py, verdicts.py, memory.py); compose.analyse puts them together."""

    root: Path
    runs: pd.DataFrame
    problems: list[LoadProblem]
    options: Options
    metrics: list[str]
    counts: pd.DataFrame
    cells: pd.DataFrame
    outliers: pd.DataFrame
    environments: pd.DataFrame
    kv_runs: pd.DataFrame
    kv_fit: compare.KvFit | None
    kv_shift: pd.DataFrame
    host_variance: pd.DataFrame
    host_deviations: pd.DataFrame
    environments_pooled: pd.DataFrame = field(default_factory=pd.DataFrame)  # per (model, workload), hosts pooled
    regressions: pd.DataFrame | None = None  # compare_campaigns(baseline, runs), serving points too, with a baseline
    baseline_problems: list[LoadProblem] = field(default_factory=list)
    accounting: Accounting = field(default_factory=Accounting)  # every planned run: the missing ones named


def check_one_campaign(runs: pd.DataFrame, root: Path | None) -> None:
    """A report's cells never mix campaigns: runs of several campaigns under one RESULTS are refused (a
    UsageError naming each campaign, how many runs it has and where they lie, and how to report one)."""
    if "campaign" not in runs or runs.empty:
        return
    names = runs["campaign"].astype("string").fillna("(none)")
    if names.nunique() < 2:
        return
    root = root or Path(".")
    places = {}
    for name, dirs in runs.groupby(names, sort=True)["record_dir"]:
        common = os.path.commonpath([str(d) for d in dirs])
        places[name] = (len(dirs), _campaign_dir(root / common) if common else root)
    parts = [f"{name} ({count} runs under {where})" for name, (count, where) in places.items()]
    example = next(where for _, where in places.values())
    raise UsageError(f"{root}: holds runs of {len(places)} campaigns: {', '.join(parts)}; a report never pools "
                     f"campaigns: report each on its own, e.g. sparkfleet report {example}")


def _campaign_dir(path: Path) -> Path:
    """The campaign directory above a record directory path (<campaign>/<host>/runs/<run_id>)."""
    parts = path.parts
    if "runs" in parts:
        index = len(parts) - 1 - parts[::-1].index("runs")
        return Path(*parts[:max(index - 1, 1)])
    return path


def compute_facts(loaded: LoadResult, options: Options | None = None) -> Analysis:
    """Every table the report judges: cell statistics, comparisons, KV fit, host variance and deviations."""
    options = options or Options()
    runs = loaded.runs
    check_one_campaign(runs, loaded.root)
    metrics = stats.metric_columns(runs)
    long = stats.long_metrics(runs, metrics, stats.CELL_KEYS)  # shared: the melt is the costly part
    outliers = stats.flag_outliers(runs, metrics, long=long)
    cells = stats.cell_statistics(runs, metrics, cv_gate=options.cv_gate, level=options.level,
                                  resamples=options.resamples, seed=options.seed, outliers=outliers, long=long)
    environments = compare.compare_environments(runs, level=options.level)
    # The verdicts pool hosts: with one host (the common case) that is the per-host table itself, in the pooled
    # layout (a ``hosts`` column of 1).
    pooled = compare.compare_environments(runs, level=options.level, pool_hosts=True) \
        if runs["host"].nunique() > 1 else environments.drop(columns=["host"]).assign(hosts=1)
    regressions, baseline_problems = None, []
    if options.baseline:
        inside = compare.left_out(options.baseline, loaded.root)["baseline"] if loaded.root else ()
        baseline = load_runs(options.baseline, exclude=inside)  # RESULTS inside the baseline: left out of it
        baseline_problems = baseline.problems
        if not baseline.runs.empty:
            regressions = compare.compare_campaigns(baseline.runs, runs, alpha=options.alpha,
                                                    threshold=options.threshold, level=options.level,
                                                    baseline_points=baseline.serving, current_points=loaded.serving)
    kv_runs, kv_fit = compare.kv_decomposition(runs, options.kv_fraction)
    return Analysis(
        root=loaded.root or Path("."),
        runs=runs,
        problems=loaded.problems,
        options=options,
        metrics=metrics,
        counts=stats.status_counts(runs),
        cells=cells,
        outliers=outliers,
        environments=environments,
        kv_runs=kv_runs,
        kv_fit=kv_fit,
        kv_shift=compare.kv_shift(environments, kv_runs),
        host_variance=reproducibility.host_variance(runs, metrics),
        host_deviations=reproducibility.host_deviations(  # each host against the others, named with what differs
            runs, metrics, options.tolerance, alpha=options.alpha, level=options.level,
            facts=facts_for_runs(loaded.root or Path("."), runs)),
        environments_pooled=pooled,
        regressions=regressions,
        baseline_problems=baseline_problems,
        accounting=loaded.accounting,
    )
