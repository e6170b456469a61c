"""``sparkfleet report``: statistics, comparisons and warnings over a results directory, written as
report/summary.md, a self-contained report/index.html, runs.csv/parquet and the full tables as CSV."""

from __future__ import annotations

import os
from pathlib import Path

from sparkfleet.load import export_runs, write_csv
from sparkfleet.report import cluster_nodes, sample_checks, suspect_runs
from sparkfleet.report import serving as report_serving
from sparkfleet.report.analysis import Analysis, Options
from sparkfleet.report.compose import Report, analyse
from sparkfleet.report.content import FigureDrawing, PendingFigures, build_document, start_run_figures
from sparkfleet.report.render import to_html, to_markdown

__all__ = ["Analysis", "Options", "Report", "analyse", "start_run_figures", "write_report"]


def write_report(analysis: Report, out_dir: str | os.PathLike[str],
                 started: FigureDrawing | None = None) -> list[Path]:
    """Write every report file into ``out_dir``; returns the paths written (main files first).

    ``started``: the run-only figures, when the caller began drawing them with `start_run_figures`.
    Large reports write the data files while the figures are drawn in other processes."""
    out = Path(out_dir)
    plots_dir = out / "plots"
    plots_dir.mkdir(parents=True, exist_ok=True)
    pending = PendingFigures(analysis, started)
    csv_path, parquet_path = export_runs(analysis.runs, out)
    tables = {
        "cells.csv": analysis.cells.merge(analysis.counts, on=["host", "model", "environment", "workload"],
                                          how="left"),
        "environments.csv": analysis.environments,
        "kv_residuals.csv": analysis.kv_runs,
        "host_variance.csv": analysis.host_variance,
        "host_deviations.csv": analysis.host_deviations,
        "outliers.csv": analysis.outliers,
        "memory_decomposition.csv": analysis.memory.parts,
        "memory_factors.csv": analysis.memory.effects,
        "aa_pairs.csv": analysis.memory.aa_pairs,
        "aa_noise.csv": analysis.memory.noise,
    } | report_serving.tables(analysis.serving)  # serving_points/cells/comparisons/aa_noise.csv; {} without
    tables |= sample_checks.tables(analysis)  # serving_left_out.csv: what cannot be, left out (issue 32)
    tables |= suspect_runs.tables(analysis)  # suspect_runs.csv: the runs left out for readiness, where there are some
    tables |= cluster_nodes.tables(analysis.nodes)  # cluster_nodes.csv: each node of the multi-node runs (issue 36)

    for name, frame in tables.items():
        write_csv(frame, out / name)
    figures = pending.figures()
    sections = build_document(analysis, figures)
    title = f"sparkfleet report: {', '.join(sorted(set(analysis.runs['campaign'].astype(str)))) or analysis.root}"
    summary, index = out / "summary.md", out / "index.html"
    summary.write_text(to_markdown(title, sections))
    index.write_text(to_html(title, sections))
    for figure in figures.values():
        (plots_dir / f"{figure.name}.png").write_bytes(figure.png)
    return [summary, index, csv_path, parquet_path]
