"""Everything a report shows, computed once from the loaded runs (the renderers only format it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sparkfleet import compare, reproducibility, stats
from sparkfleet.load import LoadProblem, LoadResult
from sparkfleet.report.findings import Finding, collect_findings


@dataclass(frozen=True)
class Options:
    cv_gate: float = stats.DEFAULT_CV_GATE
    level: float = stats.DEFAULT_LEVEL
    resamples: int = stats.DEFAULT_RESAMPLES
    seed: int = stats.DEFAULT_SEED
    tolerance: float = reproducibility.DEFAULT_TOLERANCE
    kv_fraction: float = compare.DEFAULT_KV_FRACTION


@dataclass
class Analysis:
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
    findings: list[Finding] = field(default_factory=list)


def analyse(loaded: LoadResult, options: Options | None = None) -> Analysis:
    options = options or Options()
    runs = loaded.runs
    metrics = stats.metric_columns(runs)
    long = stats.long_metrics(runs, metrics, stats.CELL_KEYS)  # shared: the melt is the costly part
    outliers = stats.flag_outliers(runs, metrics, long=long)
    cells = stats.cell_statistics(runs, metrics, cv_gate=options.cv_gate, level=options.level,
                                  resamples=options.resamples, seed=options.seed, outliers=outliers, long=long)
    environments = compare.compare_environments(runs, level=options.level)
    kv_runs, kv_fit = compare.kv_decomposition(runs, options.kv_fraction)
    analysis = Analysis(
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
        host_deviations=reproducibility.host_deviations(runs, metrics, options.tolerance),
    )
    analysis.findings = collect_findings(analysis)
    return analysis
