"""What the report says, section by section, built from an Analysis."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

from sparkfleet.report import plots
from sparkfleet.report.analysis import Analysis
from sparkfleet.report.document import (
    Bullets,
    Figure,
    Paragraph,
    Section,
    fmt,
    fmt_interval,
    fmt_p,
    fmt_pct,
    shown,
    table,
)
from sparkfleet.report.findings import KV_RESIDUAL_LIMIT_GIB
from sparkfleet.stats import CELL_KEYS

#: Configuration, not results: kept in cells.csv and --json, left out of the statistics tables.
CONFIG_METRICS = ("device_total_gib", "kv_fraction")
#: Per-run KV residuals are listed one by one up to this many runs; beyond, per cell (all in kv_residuals.csv).
MAX_KV_RUN_ROWS = 200


#: Runs above which figures are drawn in two processes (forking costs more than it saves on small reports).
PARALLEL_FIGURES_MIN_RUNS = 20_000
_FORKED: dict[str, dict] = {}


def figure_makers(analysis: Analysis) -> dict[str, tuple[str, Callable[[], bytes | None]]]:
    fraction = analysis.kv_fit.assumed_fraction if analysis.kv_fit else analysis.options.kv_fraction
    return {
        "box_per_cell": ("Runs per cell (box plots)", lambda: plots.box_plots(analysis.runs)),
        "ci_bars": ("Means with 95% confidence intervals", lambda: plots.ci_bars(analysis.cells, analysis.runs)),
        "throughput_batch": ("Throughput against batch size", lambda: plots.throughput_by_batch(analysis.runs)),
        "kv_budget": ("KV-cache budget", lambda: plots.kv_budget(analysis.kv_runs, fraction)),
        "timeline": ("Campaign in run order", lambda: plots.campaign_timeline(analysis.runs)),
        "telemetry": ("Telemetry (temperature, memory) over time",
                      lambda: plots.telemetry(analysis.runs, analysis.root)),
    }


def _draw(names: list[str]) -> dict[str, bytes | None]:
    makers = _FORKED["makers"]
    return {name: makers[name][1]() for name in names}


def render_figures(analysis: Analysis) -> dict[str, Figure]:
    """Every figure that has data. Large reports draw the two heaviest figures in a forked process
    (it inherits the analysis, so nothing big is pickled) while this one draws the rest."""
    makers = figure_makers(analysis)
    names = list(makers)
    forked = ["box_per_cell", "ci_bars"]
    if len(analysis.runs) >= PARALLEL_FIGURES_MIN_RUNS and "fork" in mp.get_all_start_methods():
        _FORKED["makers"] = makers  # set before the pool forks its worker at submit()
        try:
            with ProcessPoolExecutor(1, mp_context=mp.get_context("fork")) as pool:
                future = pool.submit(_draw, forked)
                pngs = {name: makers[name][1]() for name in names if name not in forked}
                pngs |= future.result()
        finally:
            _FORKED.clear()
    else:
        pngs = {name: make() for name, (_, make) in makers.items()}
    return {name: Figure(name=name, title=makers[name][0], png=pngs[name]) for name in names if pngs[name]}


def build_document(analysis: Analysis, figures: dict[str, Figure]) -> list[Section]:
    return [
        overview(analysis),
        warnings_section(analysis),
        statistics_section(analysis, figures),
        environment_section(analysis),
        kv_section(analysis, figures),
        reproducibility_section(analysis),
        outlier_section(analysis),
        over_time_section(figures),
    ]


def overview(analysis: Analysis) -> Section:
    runs = analysis.runs
    statuses = runs["status"].value_counts().to_dict()
    status_text = ", ".join(f"{statuses[s]} {s}" for s in sorted(statuses))
    campaigns = ", ".join(sorted(set(runs["campaign"].astype(str)))) or "–"
    hosts = runs["host"].nunique()
    text = (f"{len(runs)} runs ({status_text or 'none'}) from campaign(s) {campaigns} on {hosts} host(s), "
            f"{len(analysis.counts)} cells (host / model / environment / workload). "
            f"{len(analysis.problems)} record(s) skipped as unreadable or invalid. "
            f"Statistics use status=ok runs only (warm-ups excluded); CV gate {analysis.options.cv_gate * 100:g}%, "
            f"confidence level {analysis.options.level * 100:g}%, bootstrap {analysis.options.resamples} resamples "
            f"(seed {analysis.options.seed}).")
    counts = analysis.counts.rename(columns={"n_runs": "runs", "n_measured": "in stats"})
    return Section("Overview", [Paragraph(text), table(counts, "Runs per cell by status", "cells.csv")])


def warnings_section(analysis: Analysis) -> Section:
    if not analysis.findings:
        return Section("Warnings", [Paragraph("None.")])
    kinds = pd.Series([f.kind for f in analysis.findings]).value_counts()
    summary = ", ".join(f"{n} {k}" for k, n in kinds.items())
    return Section("Warnings", [Paragraph(summary),
                                Bullets([f"[{f.kind}] {f.message}" for f in analysis.findings], "warnings")])


def statistics_section(analysis: Analysis, figures: dict[str, Figure]) -> Section:
    blocks: list = [Paragraph(
        "n, mean, sample standard deviation (ddof=1), coefficient of variation, median, range, the t "
        "confidence interval of the mean and a percentile-bootstrap interval of the median. Outliers are "
        "flagged by robust z = 0.6745·(x − median)/MAD > 3.5 and kept in every figure.")]
    reported = analysis.cells[~analysis.cells["metric"].isin(CONFIG_METRICS)]
    for metric, full in reported.groupby("metric", sort=False):
        part = shown(full)
        frame = pd.DataFrame({
            **{k: part[k] for k in CELL_KEYS},
            "n": part["n"].map(fmt),
            "mean": part["mean"].map(fmt),
            "std": part["std"].map(fmt),
            "CV": part["cv"].map(lambda v: fmt_pct(v * 100).lstrip("+")),
            "median": part["median"].map(fmt),
            "min": part["min"].map(fmt),
            "max": part["max"].map(fmt),
            "CI mean": [fmt_interval(lo, hi) for lo, hi in zip(part["ci_low"], part["ci_high"], strict=True)],
            "CI median (bootstrap)": [fmt_interval(lo, hi) for lo, hi in
                                      zip(part["median_ci_low"], part["median_ci_high"], strict=True)],
            "outliers": part["n_outliers"].map(fmt),
            "CV gate": part["cv_ok"].map(lambda ok: "–" if pd.isna(ok) else ("pass" if ok else "FAIL")),
        })
        blocks.append(table(frame, f"{metric}", "cells.csv", len(full)))
    blocks += [figures[n] for n in ("box_per_cell", "ci_bars", "throughput_batch") if n in figures]
    return Section("Per-cell statistics", blocks)


def environment_section(analysis: Analysis) -> Section:
    env = shown(analysis.environments)
    if env.empty:
        return Section("Environments against native", [Paragraph("No cell has both a native and another "
                                                                  "environment.")])
    frame = pd.DataFrame({
        "host": env["host"], "model": env["model"], "workload": env["workload"],
        "environment": env["environment"] + " vs " + env["native"], "metric": env["metric"],
        "n": env["n_native"].map(fmt) + " / " + env["n_env"].map(fmt),
        "native mean": env["native_mean"].map(fmt), "env mean": env["env_mean"].map(fmt),
        "difference": env["diff"].map(fmt),
        "95% CI of difference": [fmt_interval(lo, hi) for lo, hi in zip(env["ci_low"], env["ci_high"],
                                                                          strict=True)],
        "ratio": env["ratio"].map(lambda v: fmt(v, 3)),
        "overhead": env["overhead_pct"].map(fmt_pct),
        "Welch p": env["p_value"].map(fmt_p), "df": env["df"].map(lambda v: fmt(v, 3)),
    })
    text = ("Difference = environment − native; overhead = (environment − native) / native; Welch's t-test "
            "(unequal variances), CI with Welch–Satterthwaite degrees of freedom. A p-value above 0.05 with a "
            "CI spanning 0 means no difference was detected, not that none exists.")
    return Section("Environments against native",
                   [Paragraph(text), table(frame, "", "environments.csv", len(analysis.environments))])


def kv_section(analysis: Analysis, figures: dict[str, Figure]) -> Section:
    fit = analysis.kv_fit
    if fit is None:
        return Section("KV-cache budget", [Paragraph("No run reports peak memory, KV cache and device total.")])
    if fit.runs_with_recorded_fraction == fit.runs:
        fraction_text = "each run's recorded kv_fraction"
    else:
        missing = fit.runs - fit.runs_with_recorded_fraction
        fraction_text = (f"kv_fraction is not recorded in {missing} of {fit.runs} runs; for those it is assumed "
                         f"to be {fit.assumed_fraction:g} (TensorRT-LLM's default free_gpu_memory_fraction)")
    fits = max(abs(fit.residual_min), abs(fit.residual_max)) <= KV_RESIDUAL_LIMIT_GIB
    verdict = ", so the budget formula explains every run" if fits else \
        f"; some residuals exceed {KV_RESIDUAL_LIMIT_GIB} GiB, so the formula does not explain every run"
    text = (f"TensorRT-LLM sizes the KV cache as kv = fraction × (device_total − peak + tmp_kv). Using "
            f"{fraction_text}, the residual kv − fraction × (total − peak) lies between "
            f"{fit.residual_min:+.3f} and {fit.residual_max:+.3f} GiB over {fit.runs} runs (mean "
            f"{fit.residual_mean:+.3f} GiB, the small tmp_kv term). A least-squares fit of the fraction gives "
            f"{fit.fitted_fraction:.4f} (largest residual {fit.fitted_residual_max_abs:.3f} GiB){verdict}. "
            f"Whatever raises the device-wide peak (page cache, a container's accounting) "
            f"takes fraction × that amount out of the KV cache.")
    blocks: list = [Paragraph(text)]
    shift = analysis.kv_shift
    if not shift.empty:
        blocks.append(table(pd.DataFrame({
            "host": shift["host"], "model": shift["model"], "workload": shift["workload"],
            "environment": shift["environment"] + " vs " + shift["native"],
            "Δ peak (GiB)": shift["peak_diff_gib"].map(fmt),
            "Δ KV measured (GiB)": shift["kv_diff_gib"].map(fmt),
            "Δ KV predicted −f·Δpeak (GiB)": shift["kv_diff_predicted_gib"].map(fmt),
            "unexplained (GiB)": shift["unexplained_gib"].map(lambda v: f"{v:+.3f}"),
            "KV native / env": shift["kv_ratio_native_over_env"].map(lambda v: f"{v:.2f}×"),
        }), "Why the KV cache changed: the peak-memory change predicts it"))
    kv = analysis.kv_runs
    if len(kv) <= MAX_KV_RUN_ROWS:
        blocks.append(table(pd.DataFrame({
            **{k: kv[k] for k in CELL_KEYS}, "run": kv["run_id"], "order": kv["order_index"].map(fmt),
            "peak": kv["peak_memory_gib"].map(fmt), "total": kv["device_total_gib"].map(fmt),
            "fraction": kv["fraction"].map(fmt) + " (" + kv["fraction_source"] + ")",
            "KV measured": kv["kv_cache_gib"].map(fmt), "KV expected": kv["kv_expected_gib"].map(fmt),
            "residual (GiB)": kv["residual_gib"].map(lambda v: f"{v:+.3f}"),
        }), "Each run's residual", "kv_residuals.csv"))
    else:
        per_cell = kv.groupby(list(CELL_KEYS))["residual_gib"].agg(["count", "min", "max", "mean"]).reset_index()
        blocks.append(table(per_cell.assign(**{c: per_cell[c].map(lambda v: f"{v:+.3f}")
                                               for c in ("min", "max", "mean")}),
                            "Residuals per cell (each run's residual in kv_residuals.csv)", "kv_residuals.csv"))
    if "kv_budget" in figures:
        blocks.append(figures["kv_budget"])
    return Section("KV-cache budget", blocks)


def reproducibility_section(analysis: Analysis) -> Section:
    var = shown(analysis.host_variance)
    # Hosts outside the tolerance first: they are what a long table must not hide.
    dev = shown(analysis.host_deviations.sort_values("outside", ascending=False, kind="stable"))
    if var.empty:
        return Section("Cross-host reproducibility", [Paragraph("No cell was measured on two or more hosts.")])
    tol = analysis.options.tolerance * 100
    variance = pd.DataFrame({
        "model": var["model"], "environment": var["environment"], "workload": var["workload"],
        "metric": var["metric"], "hosts": var["hosts"].map(fmt), "n": var["n"].map(fmt),
        "sd within host": var["sd_within"].map(fmt), "sd between hosts": var["sd_between"].map(fmt),
        "ICC (host share)": var["icc"].map(lambda v: fmt(v, 3)), "F": var["f"].map(lambda v: fmt(v, 3)),
        "p": var["p_value"].map(fmt_p),
    })
    deviations = pd.DataFrame({
        "model": dev["model"], "environment": dev["environment"], "workload": dev["workload"],
        "metric": dev["metric"], "host": dev["host"], "n": dev["n"].map(fmt),
        "host median": dev["host_median"].map(fmt), "fleet median": dev["fleet_median"].map(fmt),
        "deviation": dev["deviation_pct"].map(fmt_pct),
        f"outside ±{tol:g}%": dev["outside"].map(lambda v: "OUTSIDE" if v else ""),
    })
    outside = analysis.host_deviations[analysis.host_deviations["outside"]]
    named = ", ".join(sorted(set(outside["host"].astype(str)))) or "none"
    return Section("Cross-host reproducibility", [
        Paragraph("One-way random-effects ANOVA per cell: within-host (run-to-run) against between-host "
                  f"variance; ICC is the share of variance due to the host. Hosts outside ±{tol:g}% of the "
                  f"fleet median on some metric: {named}."),
        table(variance, "Variance components", "host_variance.csv", len(analysis.host_variance)),
        table(deviations, "Each host against the fleet median", "host_deviations.csv",
              len(analysis.host_deviations)),
    ])


def outlier_section(analysis: Analysis) -> Section:
    out = shown(analysis.outliers)
    if out.empty:
        return Section("Outliers", [Paragraph("No value lies beyond robust z 3.5 of its cell.")])
    frame = out.assign(value=out["value"].map(fmt), cell_median=out["cell_median"].map(fmt),
                       robust_z=out["robust_z"].map(lambda v: f"{v:+.1f}"))
    return Section("Outliers", [Paragraph("Flagged, never dropped: every statistic above includes them."),
                                table(frame, "", "outliers.csv", len(analysis.outliers))])


def over_time_section(figures: dict[str, Figure]) -> Section:
    shown = [figures[n] for n in ("timeline", "telemetry") if n in figures]
    if not shown:
        return Section("Over time", [Paragraph("No run order or telemetry to plot.")])
    return Section("Over time", shown)
