"""What the report says, section by section, built from a Report (facts, findings, verdicts, memory study)."""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from statistics import NormalDist

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import CONFIG_METRICS
from sparkfleet import compare
from sparkfleet.report import cluster_nodes, headline, host_normal, plots, sample_checks, suspect_runs
from sparkfleet.report import pair as report_pair
from sparkfleet.report import serving as report_serving
from sparkfleet.report.compose import Report
from sparkfleet.report.document import (
    N_TOO_SMALL,
    Bullets,
    Details,
    Figure,
    Paragraph,
    Section,
    Verdicts,
    fmt,
    fmt_ci,
    fmt_p,
    fmt_pct,
    shown,
    table,
)
from sparkfleet.report.findings import KV_RESIDUAL_LIMIT_GIB
from sparkfleet.report.memory import (
    PART_WORDS,
    PARTS,
    TARGET_EFFECTS,
    gap_sentence,
    kv_figure,
    kv_figure_label,
    runs_without_tmp_kv,
    under_floor,
)
from sparkfleet.report.verdicts import twins_note
from sparkfleet.stats import CELL_KEYS, MIN_N_BOOTSTRAP, MIN_N_INTERVAL, measured_runs, range_violation

#: Per-run KV residuals are listed one by one up to this many runs; beyond, per cell (all in kv_residuals.csv).
MAX_KV_RUN_ROWS = 200


#: Runs above which figures are drawn in forked processes (forking costs more than it saves on small reports).
PARALLEL_FIGURES_MIN_RUNS = 20_000
_TITLES = {
    "effects": "The first verdict in a figure: each comparison's relative difference with its 95% CI",
    "box_per_cell": "Runs per cell (box plots)",
    "ci_bars": "Means with 95% confidence intervals",
    "throughput_batch": "Throughput against batch size",
    "kv_budget": "KV-cache budget",
    "memory_decomposition": "Where the memory went: each environment's device total in parts",
    "timeline": "Campaign in run order",
    "telemetry": "Telemetry (temperature, memory) over time",
}
_TITLES |= report_serving.SERVING_TITLES  # serving runs' figures (issue 25): drawn only for serving runs


def run_figure_makers(runs: pd.DataFrame, root: Path) -> dict[str, Callable[[], bytes | None]]:
    """The figures that need only the runs: a large report draws them while it computes the statistics."""
    return {
        "box_per_cell": lambda: plots.box_plots(runs),
        "throughput_batch": lambda: plots.throughput_by_batch(runs),
        "timeline": lambda: plots.campaign_timeline(runs),
        "telemetry": lambda: plots.telemetry(runs, root),
    }


def figure_makers(analysis: Report) -> dict[str, tuple[str, Callable[[], bytes | None]]]:
    makers = run_figure_makers(analysis.runs, analysis.root) | {
        "effects": lambda: plots.effects(analysis.verdicts, analysis.options.threshold),
        "ci_bars": lambda: plots.ci_bars(analysis.cells, analysis.runs),
        "kv_budget": lambda: plots.kv_budget(analysis.kv_runs, analysis.options.kv_fraction),  # the fit's assumption
        "memory_decomposition": lambda: plots.memory_decomposition(analysis.memory.decomposition),
    }
    makers |= report_serving.figure_makers(analysis)  # each None without serving runs
    return {name: (title, makers[name]) for name, title in _TITLES.items()}


#: What the figure processes draw, by key: set before a pool forks its worker, which inherits the table (and the
#: data each maker closes over), so that only a key goes to the worker and only PNG bytes come back.
_MAKERS: dict[str, Callable[[], bytes | None]] = {}
_DRAWINGS = itertools.count()


def _draw(key: str) -> bytes | None:
    """In a forked worker: draw the figure the table holds under ``key``."""
    return _MAKERS[key]()


class FigureDrawing:
    """Figures drawn in a forked worker process (concurrent.futures with the 'fork' start method: the worker
    inherits the data, so nothing big is pickled), or right here where forking is not worth it or not
    possible."""

    def __init__(self, makers: dict[str, Callable[[], bytes | None]], fork: bool) -> None:
        self.names = list(makers)
        self._pngs: dict[str, bytes | None] | None = None
        if not fork:
            self._pngs = {name: make() for name, make in makers.items()}
            return
        drawing = next(_DRAWINGS)
        keys = {name: f"{drawing}:{name}" for name in makers}
        _MAKERS.update({keys[name]: make for name, make in makers.items()})
        try:
            # One worker, forked at the first submit (the 'fork' method starts every worker then).
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
            self._futures: dict[str, Future[bytes | None]] = {
                name: self._pool.submit(_draw, key) for name, key in keys.items()}
        finally:
            for key in keys.values():  # the worker has its copy; the parent needs the makers no more
                _MAKERS.pop(key, None)

    def result(self) -> dict[str, bytes | None]:
        """The PNGs by name (waits for the worker; a maker's exception is raised here)."""
        if self._pngs is None:
            try:
                self._pngs = {name: future.result() for name, future in self._futures.items()}
            finally:
                self._pool.shutdown(cancel_futures=True)
        return self._pngs


def _fork_figures(runs: pd.DataFrame) -> bool:
    return len(runs) >= PARALLEL_FIGURES_MIN_RUNS and "fork" in multiprocessing.get_all_start_methods()


def start_run_figures(runs: pd.DataFrame, root: Path | None) -> FigureDrawing | None:
    """Start drawing the figures that need only the runs, in a forked process, when the report is large
    enough to gain from it: the caller computes the statistics meanwhile. None: nothing started."""
    if not _fork_figures(runs):
        return None
    return FigureDrawing(run_figure_makers(runs, root or Path(".")), fork=True)


class PendingFigures:
    """The report's figures, being drawn; `figures()` waits for them."""

    def __init__(self, analysis: Report, started: FigureDrawing | None = None) -> None:
        makers = figure_makers(analysis)
        fork = _fork_figures(analysis.runs)
        if started is None and fork:
            started = start_run_figures(analysis.runs, analysis.root)
        self._parts = [started] if started is not None else []
        done = set(started.names) if started is not None else set()
        rest = {name: make for name, (_, make) in makers.items() if name not in done}
        self._parts.append(FigureDrawing(rest, fork=fork))

    def figures(self) -> dict[str, Figure]:
        pngs: dict[str, bytes | None] = {}
        for part in self._parts:
            pngs |= part.result()
        return {name: Figure(name=name, title=title, png=pngs[name])
                for name, title in _TITLES.items() if pngs.get(name)}


def verdict_section(analysis: Report, figures: dict[str, Figure]) -> Section:
    o = analysis.options
    rule = (f"Different: significant (Welch p < {o.alpha:g}) and larger than ±{o.threshold * 100:g}%. Same: "
            f"within ±{o.threshold * 100:g}% (the whole {o.level * 100:g}% CI inside it, or identical runs). "
            f"Undetermined: fewer than {MIN_N_INTERVAL} runs on a side or a CI too wide to tell; the number of "
            f"iterations that would tell is for a ±{o.threshold * 100:g}% difference at power 0.8 from the "
            f"observed run-to-run variation. Significance is {compare.FAMILY_METHOD}; a comparison significant "
            "alone but not among its family is undetermined and says so.")
    blocks: list = [Verdicts([(line.label, line.outcome, line.headline, line.text) for line in analysis.verdicts])]
    note = twins_note(analysis)
    if note:
        blocks.append(Paragraph(note))
    blocks.append(Paragraph(rule))
    if "effects" in figures:
        blocks.append(figures["effects"])
    return Section("Verdicts", blocks)


def overview(analysis: Report) -> Section:
    runs = analysis.runs
    statuses = runs["status"].value_counts().to_dict()
    status_text = ", ".join(f"{statuses[s]} {s}" for s in sorted(statuses))
    campaigns = ", ".join(sorted(set(runs["campaign"].astype(str)))) or "–"
    hosts = runs["host"].nunique()
    text = (f"{len(runs)} runs ({status_text or 'none'}) from campaign(s) {campaigns} on {hosts} host(s), "
            f"{len(analysis.counts)} cells (host / model / environment / workload). "
            f"{len(analysis.problems)} record(s) skipped as unreadable or invalid. "
            f"{analysis.accounting.summary()} "
            f"Statistics use status=ok runs only (warm-ups excluded{suspect_runs.overview_words(analysis.suspect_runs)}"
            f"); CV gate {analysis.options.cv_gate * 100:g}%, "
            f"confidence level {analysis.options.level * 100:g}%, bootstrap {analysis.options.resamples} resamples "
            f"(seed {analysis.options.seed}).")
    counts = analysis.counts.rename(columns={"n_runs": "runs", "n_measured": "in stats", "n_suspect": "suspect"})
    if "suspect" in counts and not counts["suspect"].any():  # a column of zeros says nothing (cells.csv keeps it)
        counts = counts.drop(columns="suspect")
    return Section("Overview", [Paragraph(text), Details(f"Runs per cell by status ({len(counts)} cells)",
                                                         [table(counts, "", "cells.csv")])])


def warnings_section(analysis: Report) -> Section:
    """One line per cell (or host, or run problem); the single facts each line groups, collapsed."""
    if not analysis.findings:
        return Section("Warnings", [Paragraph("None.")])
    kinds = pd.Series([f.kind for f in analysis.findings]).value_counts()
    summary = ", ".join(f"{n} {k}" for k, n in kinds.items())
    blocks: list = [Paragraph(summary),
                    Bullets([f"[{f.kind}] {f.message}" for f in analysis.findings], "warnings")]
    details = [f"[{f.kind}] {f.subject + ': ' if f.subject else ''}{d}" for f in analysis.findings for d in f.details]
    if details:
        blocks.append(Details(f"Details: {len(details)} single warnings", [Bullets(details, "warnings")]))
    return Section("Warnings", blocks)


def statistics_section(analysis: Report, figures: dict[str, Figure]) -> Section:
    reported = analysis.cells[~analysis.cells["metric"].isin(CONFIG_METRICS)]  # in cells.csv and --json only
    n_max = reported["n"].max() if len(reported) else 0
    runs_max = int(analysis.counts["n_measured"].max()) if len(analysis.counts) else 0
    omitted = [] if reported.empty else \
        [f"the {what} ({_too_few(need, runs_max)})" for what, need in
         (("t-intervals", MIN_N_INTERVAL), ("bootstrap intervals", MIN_N_BOOTSTRAP)) if n_max < need]
    blocks: list = [Paragraph(
        "n, mean, sample standard deviation (ddof=1), coefficient of variation, median, range, the t "
        f"confidence interval of the mean (from {MIN_N_INTERVAL} runs on) and a percentile-bootstrap interval "
        f"of the median (from {MIN_N_BOOTSTRAP} runs on); with fewer runs the cell says \"{N_TOO_SMALL}\". "
        "Intervals are never clipped: a bound outside the metric's physical range is marked. Outliers are "
        "flagged by robust z = 0.6745·(x − median)/MAD > 3.5 and kept in every figure."
        + (f" Left out of the tables: {' and '.join(omitted)}." if omitted else "")
        + ("" if len(reported) else " No run records a per-run result metric"
           + (" (only configuration figures, in cells.csv)" if len(analysis.cells) else "") + ", so there is no table"
           + (": serving runs' figures are their points', under \"Serving\"." if analysis.serving.present
              else ".")))]
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
            "CI mean": [fmt_ci(lo, hi, n, MIN_N_INTERVAL, str(metric)) for lo, hi, n in
                        zip(part["ci_low"], part["ci_high"], part["n"], strict=True)],
            "CI median (bootstrap)": [fmt_ci(lo, hi, n, MIN_N_BOOTSTRAP, str(metric)) for lo, hi, n in
                                      zip(part["median_ci_low"], part["median_ci_high"], part["n"], strict=True)],
            "outliers": part["n_outliers"].map(fmt),
            "CV gate": part["cv_ok"].map(lambda ok: "–" if pd.isna(ok) else ("pass" if ok else "FAIL")),
        })
        if n_max < MIN_N_INTERVAL:
            frame = frame.drop(columns=["CI mean"])
        if n_max < MIN_N_BOOTSTRAP:
            frame = frame.drop(columns=["CI median (bootstrap)"])
        blocks.append(table(frame, f"{metric}", "cells.csv", len(full)))
    blocks += [figures[n] for n in ("box_per_cell", "ci_bars", "throughput_batch") if n in figures]
    return Section("Per-cell statistics", blocks)


def _listed(values, limit: int = 6) -> str:
    names = sorted({str(v) for v in values})
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more if names else "–"


def no_environment_comparison(runs: pd.DataFrame, serving_present: bool = False) -> str:
    """Why the campaign holds no comparison of an environment against native, as it is for ``runs``: no native
    or no other environment, none of one side in the statistics, never both on one host, model and workload, or
    no compared metric recorded on both sides (serving runs: their figures are the points', under "Serving")."""
    def is_native(frame: pd.DataFrame) -> pd.Series:
        kind = frame["environment_kind"] if "environment_kind" in frame else pd.Series(pd.NA, index=frame.index)
        return kind.astype("string").eq("native").fillna(False).astype(bool)

    if not is_native(runs).any():
        return (f"No run is of a native environment (environments: {_listed(runs['environment'])}): nothing is "
                "compared against native.")
    if runs["environment"].nunique() < 2:
        return f"Every run is of one environment ({_listed(runs['environment'])}): there is nothing to compare."
    measured = measured_runs(runs)
    keys = ["host", "model", "workload"]
    natives = measured[is_native(measured)]
    if natives.empty:
        return (f"No native run entered the statistics (their status: {_listed(runs.loc[is_native(runs), 'status'])}; "
                "warm-ups and runs found suspect by the readiness probe are left out): nothing to compare the other "
                "environments with.")
    # each (host, model, workload)'s reference, as compare.compare_environments picks it; the rest are compared
    reference = natives.groupby(keys)["environment"].agg(compare.native_environment).rename("_reference")
    joined = measured.join(reference, on=keys)
    others = joined[joined["environment"] != joined["_reference"]]  # no reference there (NaN) counts as other
    if others.empty:
        statuses = _listed(runs.loc[~runs["run_id"].isin(natives["run_id"]), "status"])
        return (f"No run of another environment than native entered the statistics (their status: {statuses}; "
                "warm-ups and runs found suspect by the readiness probe are left out): nothing to compare with "
                "native.")
    if others["_reference"].isna().all():
        pooled = natives.groupby(["model", "workload"]).size().index
        if others.set_index(["model", "workload"]).index.isin(pooled).any():
            return (f"No host ran both native and another environment on the same model and workload (native on "
                    f"{_listed(natives['host'])}; {_listed(others['environment'])} on {_listed(others['host'])}): "
                    "comparing across hosts would take the host for the environment, so nothing is compared.")
        return ("No model and workload ran both native and another environment (native: "
                f"{_listed(natives['model'] + ' / ' + natives['workload'])}; {_listed(others['environment'])}: "
                f"{_listed(others['model'] + ' / ' + others['workload'])}): nothing is compared.")
    text = ("Native and another environment ran on the same host, model and workload, but no compared metric "
            "(memory, KV cache, throughput, latency) was recorded on both sides")
    if serving_present:
        text += ": serving runs' figures are their points', compared per point under \"Serving\""
    return text + "."


def _too_few(need: int, runs_max: int) -> str:
    """Why no cell reaches ``need`` values of a metric: too few runs in the statistics, or runs without it."""
    if runs_max < need:
        return f"every cell has fewer than {need} runs in the statistics"
    return (f"no cell has {need} values of one metric, though a cell has up to {runs_max} runs in the statistics: "
            "some runs' records lack the metric")


def environment_section(analysis: Report) -> Section:
    env = shown(analysis.environments)
    if env.empty:
        return Section("Environments against native",
                       [Paragraph(no_environment_comparison(analysis.runs, analysis.serving.present))])
    frame = pd.DataFrame({
        "host": env["host"], "model": env["model"], "workload": env["workload"],
        "environment": env["environment"] + " vs " + env["native"], "metric": env["metric"],
        "n": env["n_native"].map(fmt) + " / " + env["n_env"].map(fmt),
        "native mean": env["native_mean"].map(fmt), "env mean": env["env_mean"].map(fmt),
        "difference": env["diff"].map(fmt),
        f"{analysis.options.level * 100:g}% CI of difference": [_difference_ci(r) for r in env.itertuples()],
        "ratio": env["ratio"].map(lambda v: fmt(v, 3)),
        "overhead": env["overhead_pct"].map(fmt_pct),
        "Welch p": env["p_value"].map(fmt_p), "df": env["df"].map(lambda v: fmt(v, 3)),
    })
    floors = analysis.memory.floors()
    if floors:
        frame["A/A noise floor"] = [_floor_label(r.overhead_pct, r.metric, floors) for r in env.itertuples()]
    text = ("Difference = environment − native; overhead = (environment − native) / native; Welch's t-test "
            "(unequal variances), CI with Welch–Satterthwaite degrees of freedom, shown from "
            f"{MIN_N_INTERVAL} runs per side on. A p-value above {analysis.options.alpha:g} with a CI spanning 0 "
            "means no difference "
            "was detected, not that none exists; the verdicts above say which.")
    return Section("Environments against native",
                   [Paragraph(text), table(frame, "", "environments.csv", len(analysis.environments))])


def _floor_label(change_pct: float, metric: str, floors: dict[str, float]) -> str:
    under = under_floor(change_pct, metric, floors)
    return "–" if under is None else \
        f"under the noise floor (±{floors[metric] * 100:.2g}%)" if under else f"above (±{floors[metric] * 100:.2g}%)"


def memory_sections(analysis: Report, figures: dict[str, Figure]) -> list[Section]:
    """"Where the memory went" (decomposition, KV gaps, factor effects) and "A/A noise floor"; nothing for
    campaigns without memory sections or A/A pairs."""

    study = analysis.memory
    level, alpha = analysis.options.level * 100, analysis.options.alpha  # the study's intervals and tests
    z = NormalDist().inv_cdf(1 - alpha / 2)
    out = []
    if not study.decomposition.empty or not study.effects.empty:
        blocks: list = [Paragraph(
            "The engine's device total in parts (GiB, mean per cell): KV cache; the reserve the fraction keeps back "
            "(device_total − peak − KV); page cache (Cached + Buffers of /proc/meminfo at the run's peak sample; in "
            "a memory-limited container the container's own file pages); cgroup-accounted (a container's "
            "memory.current beyond its file pages and the engine's own peak, plus what lies outside its memory "
            "limit); the engine's own peak (model: the median peak − page cache of the native runs of the same "
            "cell); unexplained (the rest of the peak; negative: more attributed than the peak). KV residual: "
            "kv − fraction × (device_total − peak + tmp_kv), the formula's fit, with each record's tmp_kv_gib (the "
            "temporary KV cache TensorRT-LLM made while profiling)."
            + tmp_kv_note(runs_without_tmp_kv(study.parts), len(study.parts)) + " docs/MEMORY.md defines each part.")]
        dec = study.decomposition
        if not dec.empty:
            blocks.append(table(pd.DataFrame({
                "host": dec["host"], "model": dec["model"], "workload": dec["workload"],
                "environment": dec["environment"], "n": dec["n"].map(fmt),
                "device total": dec["device_total_gib"].map(fmt), "peak": dec["peak_gib"].map(fmt),
                **{PART_WORDS[p]: dec[p].map(fmt) for p in PARTS},
                "KV residual": dec["kv_residual_gib"].map(lambda v: f"{v:+.3f}"),
                "tmp_kv": [_tmp_kv_cell(v, k, n) for v, k, n in
                           zip(dec["tmp_kv_gib"], dec["n_without_tmp_kv"], dec["n"], strict=True)],
                "limit": dec["limit_gib"].map(fmt),
                # budget: the log had no KV allocation line, the KV cache part is what profiling set aside
                "KV figure": [kv_figure_label(b, n) for b, n in zip(dec["n_kv_budget"], dec["n"], strict=True)],
            }), "Device total in parts (GiB, mean per cell)", "memory_decomposition.csv"))
        if "memory_decomposition" in figures:
            blocks.append(figures["memory_decomposition"])
        if not study.gaps.empty:
            blocks.append(Paragraph("The KV-cache gap against native, attributed: a part that grew by Δ GiB takes "
                                    "fraction × Δ out of the KV cache (the budget formula)."))
            blocks.append(Bullets([f"{r['model']} / {r['workload']} on {r['host']}: {gap_sentence(r)}"
                                   for _, r in study.gaps.iterrows()], "gaps"))
        eff = study.effects
        if not eff.empty:
            blocks.append(Paragraph(
                "Factor effects: level b against level a, per model, pooled over every other factor (in a balanced "
                "design the marginal difference is the factor's main effect; the other factors' spread widens the "
                f"CI). Welch CI from {MIN_N_INTERVAL} runs per side on; the verdict is the report's one rule."))
            blocks.append(table(pd.DataFrame({
                "model": eff["model"], "factor": eff["factor"], "b vs a": eff["words"], "metric": eff["metric"],
                "n": eff["n_a"].map(fmt) + " / " + eff["n_b"].map(fmt), "mean a": eff["mean_a"].map(fmt),
                "mean b": eff["mean_b"].map(fmt), "effect (GiB)": eff["diff"].map(fmt),
                "effect": eff["change_pct"].map(fmt_pct),
                f"{level:g}% CI (GiB)": [fmt_ci(lo, hi, min(na, nb), MIN_N_INTERVAL) for lo, hi, na, nb in
                                 zip(eff["ci_low"], eff["ci_high"], eff["n_a"], eff["n_b"], strict=True)],
                "Welch p": eff["p_value"].map(fmt_p), "verdict": eff["outcome"],
            }), "Each factor's effect on the KV cache and the peak", "memory_factors.csv"))
        out.append(Section("Where the memory went", blocks))
    noise = study.noise
    if not noise.empty:
        need = {f"runs for {round(e * 100)}%": noise[f"required_n_{round(e * 100)}pct"].map(fmt)
                for e in TARGET_EFFECTS}
        pairs = study.aa_pairs
        blocks = [Paragraph(
            "Each A/A pair runs the same environment twice, interleaved: their difference is noise. Per metric: the "
            "pooled run-to-run CV of both members; the noise floor = the larger of the largest |A/A difference| "
            f"and {z:.2f} · CV · √(2/n) (the half-width of the {(1 - alpha) * 100:g}% interval of a difference of "
            f"two n-run means); the minimum detectable effect (MDE) for n runs per side at alpha {alpha:g} and power "
            f"0.8, ({z:.2f} + 0.84) · CV · √(2/n); and the runs per side a 2% and a 5% difference need. A comparison "
            "between environments whose difference is below the floor is labelled \"under the noise floor\"."),
            table(pd.DataFrame({
                "metric": noise["metric"], "A/A cells": noise["pairs"].map(fmt), "n per side": noise["n"].map(fmt),
                "CV": noise["cv"].map(lambda v: fmt_pct(v * 100).lstrip("+")),
                "largest |A−B|": noise["observed_pct"].map(lambda v: fmt_pct(v).lstrip("+")),
                "noise floor": noise["floor_pct"].map(lambda v: "±" + fmt_pct(v).lstrip("+")),
                "MDE": noise["mde_pct"].map(lambda v: fmt_pct(v).lstrip("+")), **need,
            }), "Noise floor per metric", "aa_noise.csv"),
            table(pd.DataFrame({
                "pair": pairs["b"] + " vs " + pairs["a"], "host": pairs["host"], "model": pairs["model"],
                "workload": pairs["workload"], "metric": pairs["metric"],
                "n": pairs["n_a"].map(fmt) + " / " + pairs["n_b"].map(fmt), "mean a": pairs["mean_a"].map(fmt),
                "mean b": pairs["mean_b"].map(fmt), "A/A difference": pairs["change_pct"].map(fmt_pct),
                f"{level:g}% CI": [fmt_interval_pct(lo, hi, min(na, nb)) for lo, hi, na, nb in
                           zip(pairs["ci_low_pct"], pairs["ci_high_pct"], pairs["n_a"], pairs["n_b"], strict=True)],
            }), "Each A/A pair", "aa_pairs.csv", len(pairs))]
        out.append(Section("A/A noise floor", blocks))
    return out


def fmt_interval_pct(low: float, high: float, n: float) -> str:
    if n < MIN_N_INTERVAL:
        return f"{N_TOO_SMALL} (n={fmt(n)})"
    return "–" if pd.isna(low) else f"{fmt_pct(low)} to {fmt_pct(high)}"


def _difference_ci(row) -> str:
    """The CI of environment − native under the small-sample rule; a bound that would put the environment's
    mean outside the metric's physical range is marked."""
    n = min(row.n_native, row.n_env)
    if n < MIN_N_INTERVAL:
        return f"{N_TOO_SMALL} (n={fmt(row.n_native)}/{fmt(row.n_env)})"
    text = fmt_ci(row.ci_low, row.ci_high, n, MIN_N_INTERVAL)
    if text == "–":
        return text
    note = range_violation(row.metric, row.native_mean + row.ci_low, row.native_mean + row.ci_high)
    return f"{text} ({note} for the environment's mean: outside the physical range)" if note else text


def tmp_kv_note(missing: int, runs: int) -> str:
    """The sentence a KV residual needs when some records lack tmp_kv_gib ("" when none does)."""
    if not missing:
        return ""
    which = "No run's record carries" if missing == runs else f"{missing} of {runs} runs' records lack"
    return (f" {which} tmp_kv_gib (records written before sparkfleet kept it, or an engine whose log does not "
            "print it): their KV residual leaves tmp_kv out, so it is larger by about fraction × tmp_kv.")


def _tmp_kv_cell(mean: float, missing: int, runs: int) -> str:
    """A cell's tmp_kv: its mean, "not recorded", or the mean with how many runs lack it."""
    if missing >= runs:
        return "not recorded"
    return fmt(mean) + (f" ({missing} of {runs} runs without)" if missing else "")


def kv_section(analysis: Report, figures: dict[str, Figure]) -> Section:
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
            f"{fraction_text}, and each record's tmp_kv_gib, the residual kv − fraction × (total − peak + tmp_kv) "
            f"lies between {fit.residual_min:+.3f} and {fit.residual_max:+.3f} GiB over {fit.runs} runs (mean "
            f"{fit.residual_mean:+.3f} GiB).{tmp_kv_note(fit.runs - fit.runs_with_tmp_kv, fit.runs)} A least-squares "
            f"fit of the fraction gives {fit.fitted_fraction:.4f} (largest residual "
            f"{fit.fitted_residual_max_abs:.3f} GiB){verdict}. Whatever raises the device-wide peak (page cache, a "
            f"container's accounting) takes fraction × that amount out of the KV cache.")
    kv = analysis.kv_runs
    budget_runs = set(analysis.runs["run_id"][kv_figure(analysis.runs).eq("budget").fillna(False)])
    is_budget = kv["run_id"].isin(budget_runs)
    if is_budget.any():
        text += (f" {int(is_budget.sum())} of {len(kv)} runs logged no '[MemUsageChange] Allocated ... paged KV "
                 "cache' line (TensorRT-LLM 1.3+ with the KV cache manager V2 does not print it): their KV figure is "
                 "the profiling's budget, marked 'budget' below, so their residual checks only the engine's own "
                 "arithmetic, not what it allocated.")
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
    if len(kv) <= MAX_KV_RUN_ROWS:
        blocks.append(table(pd.DataFrame({
            **{k: kv[k] for k in CELL_KEYS}, "run": kv["run_id"], "order": kv["order_index"].map(fmt),
            "peak": kv["peak_memory_gib"].map(fmt), "total": kv["device_total_gib"].map(fmt),
            "fraction": kv["fraction"].map(fmt) + " (" + kv["fraction_source"] + ")",
            "tmp_kv": [fmt(v) if s == "recorded" else s for v, s in zip(kv["tmp_kv_gib"], kv["tmp_kv_source"],
                                                                        strict=True)],
            "KV measured": [fmt(v) + (" (budget)" if b else "") for v, b in zip(kv["kv_cache_gib"], is_budget,
                                                                                  strict=True)],
            "KV expected": kv["kv_expected_gib"].map(fmt),
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


def reproducibility_section(analysis: Report) -> Section:
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
        "metric": dev["metric"], "host": dev["host"], "against": dev["rest_hosts"],
        "n": dev["n"].map(fmt) + " vs " + dev["n_rest"].map(fmt),
        "host mean": dev["host_mean"].map(fmt), "others' mean": dev["rest_mean"].map(fmt),
        "difference": dev["deviation_pct"].map(fmt_pct),
        f"{analysis.options.level * 100:g}% CI": dev["ci_low_pct"].map(fmt_pct) + " to "
        + dev["ci_high_pct"].map(fmt_pct),
        "p": dev["p_value"].map(fmt_p),
        "verdict": dev["outcome"].map(lambda v: "OUT" if v == "different" else str(v))
        + dev["required_n"].map(lambda n: f" (≈ {n:.0f} runs/host would tell)" if n == n else ""),
        "what differs on the host": dev["hardware"],
    })
    outside = analysis.host_deviations[analysis.host_deviations["outside"]]
    named = ", ".join(sorted(set(outside["host"].astype(str)))) or "none"
    return Section("Cross-host reproducibility", [
        Paragraph("One-way random-effects ANOVA per cell: within-host (run-to-run) against between-host "
                  "variance; ICC is the share of variance due to the host. Each host is compared with the "
                  "other hosts (those not themselves out) by the rule of every verdict: out when the "
                  f"difference is significant (p < {analysis.options.alpha:g}"
                  + (", Holm-adjusted over every host, cell and metric compared"
                     if "p_family" in analysis.host_deviations else "")
                  + f") and beyond ±{tol:g}%, the same "
                  f"when the whole {analysis.options.level * 100:g}% interval lies inside, otherwise undetermined "
                  "with the runs that would tell; "
                  f"an out host is named with the host facts in which it differs from the others. Hosts out: "
                  f"{named}."),
        table(variance, "Variance components", "host_variance.csv", len(analysis.host_variance)),
        table(deviations, "Each host against the other hosts", "host_deviations.csv",
              len(analysis.host_deviations)),
    ])


def outlier_section(analysis: Report) -> Section:
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


#: A section builder gives its section, its sections, or None where it has nothing to show.
SectionBuilder = Callable[[Report, dict[str, Figure]], "Section | list[Section] | None"]


def _numbers_first(analysis: Report, _figures: dict[str, Figure]) -> Section | None:
    """Where the verdicts have nothing to compare, the numbers (headline.py) come before them."""
    return headline.section(analysis) if headline.nothing_to_compare(analysis) else None


#: The report's sections, in order: (name, builder). The answer first (verdicts and the figure that shows the
#: first of them), then the evidence. A study adds its section(s) here, one entry, built by its own module.
SECTIONS: tuple[tuple[str, SectionBuilder], ...] = (
    ("numbers", _numbers_first),
    ("verdicts", verdict_section),
    ("overview", lambda analysis, _figures: overview(analysis)),
    ("warnings", lambda analysis, _figures: warnings_section(analysis)),
    ("environments", lambda analysis, _figures: environment_section(analysis)),
    ("pair preflight", lambda analysis, _figures: report_pair.section(analysis.pair)),  # issue 36
    ("serving", report_serving.serving_sections),  # only for serving runs (issue 25)
    ("nodes", lambda analysis, _figures: cluster_nodes.section(analysis.nodes)),  # multi-node runs only (issue 36)
    ("suspect runs", lambda analysis, _figures: suspect_runs.section(analysis)),  # left out for readiness
    ("serving samples left out", lambda analysis, _figures: sample_checks.section(analysis)),  # issue 32
    ("memory", memory_sections),
    ("statistics", statistics_section),
    ("kv cache", kv_section),
    ("reproducibility", lambda analysis, _figures: reproducibility_section(analysis)),
    ("hosts", lambda analysis, _figures: host_normal.section(analysis.hosts)),  # only with evidence (issue 24)
    ("outliers", lambda analysis, _figures: outlier_section(analysis)),
    ("over time", lambda _analysis, figures: over_time_section(figures)),
)


def build_document(analysis: Report, figures: dict[str, Figure]) -> list[Section]:
    """The report's sections: each builder of SECTIONS in turn."""
    sections: list[Section] = []
    for _name, build in SECTIONS:
        built = build(analysis, figures)
        sections += built if isinstance(built, list) else [built] if built is not None else []
    return sections
