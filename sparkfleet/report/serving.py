"""The serving answers (issue 25): per point, is the container the same as native (same engine), and is one
engine the same as another (same environment)? Built from the points table (sparkfleet.serving) with the
report's one decision rule (compare.classify, through verdicts.py's Verdict machinery), the A/A noise floor of
the serving metrics (memory.noise_floor over the A/A pairs' points), and shown as the "Serving" section, a
verdict line per comparison, the failed points as a warning, serving_*.csv beside the report and JSON.

Nothing here runs for a campaign without serving runs: ``ServingStudy.present`` is false and every hook returns
nothing, so such a report is what it was before.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import (
    AGGREGATE,
    LATENCY,
    PER_USER,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.serving import point_name
from sparkfleet import compare, pareto, serving, stats
from sparkfleet.load import write_csv
from sparkfleet.report import served, serving_nodes, serving_pareto, serving_plots, serving_sla
from sparkfleet.report.document import (
    N_TOO_SMALL,
    Bullets,
    Details,
    Figure,
    Paragraph,
    Section,
    fmt,
    fmt_ci,
    fmt_p,
    fmt_pct,
    shown,
    table,
)
from sparkfleet.report.memory import noise_floor, twin_pairs
from sparkfleet.report.types import Finding, MemoryStudy, Verdict, VerdictLine, plain
from sparkfleet.report.verdicts import aa_twins, line_outcome, verdicts_from, with_floor
from sparkfleet.report.wording import pct, unit

ENVIRONMENT, ENGINE = "serving-environment", "serving-engine"
#: What each comparison holds fixed and what it varies: (question, side, reference rule).
_CONTEXT = {ENVIRONMENT: "engine", ENGINE: "environment"}
_SIDE = {ENVIRONMENT: "environment", ENGINE: "engine"}
MAX_LISTED = 50
SERVING_TITLES = {
    "serving_throughput": "Serving throughput against concurrency: aggregate and per user in separate panels",
    "serving_ttft": "Serving: end-to-end time to first token against depth",
} | serving_pareto.TITLES  # the Pareto front's, in its own section
CSV_NAMES = ("serving_points.csv", "serving_cells.csv", "serving_comparisons.csv", "serving_aa_noise.csv",
             serving_pareto.CSV)
#: Each point against --baseline (compare.compare_campaigns' serving rows); written only with a baseline.
BASELINE_CSV = "serving_baseline.csv"


@dataclass
class ServingStudy:
    """Everything the serving section shows (empty frames for a campaign without serving runs)."""

    points: pd.DataFrame = field(default_factory=lambda: serving.points_frame([]))  # one row per run x point
    cells: pd.DataFrame = field(default_factory=pd.DataFrame)  # per point cell and metric (serving.cell_statistics)
    comparisons: pd.DataFrame = field(default_factory=pd.DataFrame)  # per compared point cell and metric
    verdicts: list[Verdict] = field(default_factory=list)  # the comparisons' verdicts, row for row
    aa_pairs: pd.DataFrame = field(default_factory=pd.DataFrame)
    noise: pd.DataFrame = field(default_factory=pd.DataFrame)  # per serving metric: memory.noise_floor's columns
    failed: pd.DataFrame = field(default_factory=pd.DataFrame)  # points left out: the point failed
    failed_runs: pd.DataFrame = field(default_factory=pd.DataFrame)  # serving runs not ok (their points left out)
    baseline: pd.DataFrame = field(default_factory=pd.DataFrame)  # each point against --baseline (the gate's rows)
    pareto: pd.DataFrame = field(default_factory=pd.DataFrame)  # per configuration and concurrency: pareto.COLUMNS
    pareto_twins: list[str] = field(default_factory=list)  # A/A twin environments left out of the front
    capacity: pd.DataFrame = field(default_factory=pd.DataFrame)  # per SLA cell: serving_sla.capacity_cells
    capacity_comparisons: pd.DataFrame = field(default_factory=pd.DataFrame)  # serving_sla.comparisons, per question

    @property
    def present(self) -> bool:
        return not self.points.empty

    floors = MemoryStudy.floors  # noise floor (relative) per metric, from the same noise table


def words(metric: str) -> str:
    return serving.WORDS.get(metric, metric)


# --- the comparisons -------------------------------------------------------------------------------------

def _references(measured: pd.DataFrame, question: str) -> pd.DataFrame:
    """Per (context, model): the side everything else is compared with. Environments: the native one
    (compare.native_environment); engines: the first by name."""
    context, side = _CONTEXT[question], _SIDE[question]
    if question == ENVIRONMENT:
        natives = measured[measured["environment_kind"].astype("string") == "native"]
        refs = natives.groupby([context, "model"])[side].agg(compare.native_environment)
    else:
        refs = measured.groupby([context, "model"])[side].agg("min")
    return refs.rename("a").reset_index()


def paired_points(points: pd.DataFrame, question: str, level: float = stats.DEFAULT_LEVEL) -> pd.DataFrame:
    """Per point cell and metric: each environment against native (question ENVIRONMENT, same engine) or each
    engine against the first (ENGINE, same environment), compare.compare_moments's Welch columns with ``a``/``b``.
    A/A twins are left out: they are compared only with their own pair (the noise floor)."""
    measured = serving.points_for_statistics(points)
    twins = aa_twins(measured)
    measured = measured[~measured["environment"].astype(str).isin(twins)]
    metrics = serving.metrics_present(points)
    if measured.empty or not metrics:
        return pd.DataFrame()
    context, side = _CONTEXT[question], _SIDE[question]
    moments = stats.moments(compare.long_table(measured, list(serving.POINT_KEYS), metrics),
                            [*serving.POINT_KEYS, "metric"])
    moments = moments.merge(_references(measured, question), on=[context, "model"])
    fixed = [k for k in serving.POINT_KEYS if k != side] + ["metric", "a"]
    ref = moments[moments[side] == moments["a"]].drop(columns=[side])
    other = moments[moments[side] != moments["a"]].rename(columns={side: "b"})
    pairs = other.merge(ref, on=fixed, suffixes=("_b", "_a"))
    if pairs.empty:
        return pd.DataFrame()
    result = compare.compare_sides(pairs, "_a", "_b", level)
    labels = pairs[[context, "client", "model", *serving.PROFILE, "metric", "a", "b"]].reset_index(drop=True)
    out = pd.concat([labels.assign(question=question), result], axis=1)
    order = {m: i for i, m in enumerate(serving.SERVING_METRICS)}
    return out.sort_values(["model", context, "a", "b", "metric", *serving.PROFILE],
                           key=lambda c: c.map(order) if c.name == "metric" else c).reset_index(drop=True)


def _judged(paired: pd.DataFrame, alpha: float, threshold: float,
            floors: dict[str, float]) -> tuple[pd.DataFrame, list[Verdict]]:
    """The report's one rule (compare.classify) per row, as Verdicts (verdicts.py's machinery: the clause,
    the A/A noise floor), each metric named in the serving words and judged by the serving direction."""
    judged = compare.classify(paired, alpha, threshold, family=True)  # one family per question (Holm)
    question = str(paired["question"].iloc[0])
    context = _CONTEXT[question]

    several_clients = paired["client"].nunique() > 1  # then each line names its client: never pooled

    def subject(row: pd.Series) -> str:
        point = point_name(row["depth"], row["concurrency"], row["pp"], row["tg"])
        held = f"{row[context]}, client {row['client']}" if several_clients else row[context]
        return f"{row['model']} / {held} / {point}"

    # verdicts_from judges "better" by compare.direction and words the clause by wording.words, both serving-aware
    verdicts = [with_floor(v, floors) for v in verdicts_from(paired, judged, question, subject, "a", "b",
                                                               _SIDE[question], threshold)]
    table = paired.assign(
        scope=paired["metric"].map(serving.SCOPES), outcome=judged["outcome"], reason=judged["reason"],
        required_n=judged["required_n"], cv_pooled=judged["cv_pooled"], p_family=judged["p_family"],
        family_size=judged["family_size"],
        ci_low_pct=[v.ci_low_pct for v in verdicts], ci_high_pct=[v.ci_high_pct for v in verdicts],
        better=[v.better for v in verdicts], noise_floor_pct=[v.noise_floor_pct for v in verdicts],
        under_noise_floor=[v.under_noise_floor for v in verdicts], text=[v.text for v in verdicts])
    return table, verdicts


def aa_point_pairs(points: pd.DataFrame, level: float = stats.DEFAULT_LEVEL) -> pd.DataFrame:
    """Every A/A twin (member b, c, ...) against member a of its pair, per point cell and serving metric, in
    memory.aa_pairs' columns (what memory.noise_floor reads), hosts pooled as the point cells pool them."""
    measured = serving.points_for_statistics(points)
    if measured.empty or measured["aa_group"].isna().all():
        return pd.DataFrame()
    measured = measured[measured["aa_group"].notna()].assign(aa_member=lambda f: f["aa_member"].astype(str))
    metrics = serving.metrics_present(points)
    cell = ["aa_group", "engine", "model", *serving.PROFILE]
    side = stats.moments(compare.long_table(measured, [*cell, "aa_member", "environment"], metrics),
                         [*cell, "aa_member", "environment", "metric"])
    return twin_pairs(side, cell, level).reset_index(drop=True)


def failed_runs(points: pd.DataFrame) -> pd.DataFrame:
    """The serving runs that are not ok (none of their points enters a statistic), with their reasons."""
    if points.empty:
        return pd.DataFrame(columns=["host", "run_id", "engine", "environment", "model", "status", "reason"])
    runs = points.drop_duplicates("run_id")
    runs = runs[runs["status"] != "ok"]
    return runs[["host", "run_id", "engine", "environment", "model", "status", "reason"]].reset_index(drop=True)


def baseline_points(regressions: pd.DataFrame | None) -> pd.DataFrame:
    """The serving rows of the comparison against --baseline (compare.compare_campaigns: a row with a point),
    those matched on both sides; empty without a baseline or serving points."""
    if regressions is None or "point" not in regressions:
        return pd.DataFrame()
    return regressions[regressions["point"].notna() & regressions["metric"].notna()].reset_index(drop=True)


def serving_study(points: pd.DataFrame, alpha: float, threshold: float, level: float = stats.DEFAULT_LEVEL,
                  resamples: int = stats.DEFAULT_RESAMPLES, seed: int = stats.DEFAULT_SEED,
                  cv_gate: float = stats.DEFAULT_CV_GATE, regressions: pd.DataFrame | None = None) -> ServingStudy:
    """The serving study of a campaign's points table; an empty study without points. ``regressions``: the
    comparison against --baseline (Analysis.regressions), whose serving rows the section shows."""
    if points.empty:
        return ServingStudy()
    pairs = aa_point_pairs(points, level)
    noise = noise_floor(pairs, alpha) if not pairs.empty else pd.DataFrame()
    study = ServingStudy(points=points, aa_pairs=pairs, noise=noise, failed=serving.failed_points(points),
                         failed_runs=failed_runs(points),
                         cells=serving.cell_statistics(points, level, resamples, seed, cv_gate),
                         baseline=baseline_points(regressions))
    twins = aa_twins(points)  # an A/A twin repeats its original's configuration: not a configuration of its own
    study.pareto_twins = sorted(twins)
    study.pareto = pareto.pareto_table(points[~points["environment"].astype(str).isin(twins)], level, resamples,
                                       seed)
    tables, verdicts = [], []
    for question in (ENVIRONMENT, ENGINE):
        paired = paired_points(points, question, level)
        if not paired.empty:
            judged, found = _judged(paired, alpha, threshold, study.floors())
            tables.append(judged)
            verdicts += found
    if tables:
        study.comparisons = pd.concat(tables, ignore_index=True)
        study.verdicts = verdicts
    capacity_study(study, points[~points["environment"].astype(str).isin(twins)], alpha, threshold, level)
    return study


def capacity_study(study: ServingStudy, points: pd.DataFrame, alpha: float, threshold: float, level: float) -> None:
    """The SLA capacities (issue 37) per cell and their verdicts, each question one family, into ``study``."""
    rows = serving_sla.capacity_rows(points)
    if rows.empty:
        return
    study.capacity = serving_sla.capacity_cells(rows, level)
    judged = [serving_sla.comparisons(rows, question, _CONTEXT[question], _SIDE[question],
                                      _references(rows, question), alpha, threshold, level)
              for question in (ENVIRONMENT, ENGINE)]
    judged = [frame for frame in judged if not frame.empty]
    if judged:
        study.capacity_comparisons = pd.concat(judged, ignore_index=True)


# --- verdict lines and warnings ----------------------------------------------------------------------------

def _metric_clause(metric: str, group: list[Verdict]) -> str:
    """"generation throughput (aggregate): different at 5 of 6 points (−31% to −12%), the same at 1"."""
    by = {o: [v for v in group if v.outcome == o] for o in ("different", "same", "undetermined")}
    parts = []
    if by["different"]:
        changes = [v.change_pct for v in by["different"] if v.change_pct is not None]
        low, high = (min(changes), max(changes)) if changes else (None, None)
        size = "" if low is None else f" ({pct(low)})" if low == high else f" ({pct(low)} to {pct(high)})"
        parts.append(f"different at {len(by['different'])} of {len(group)} points{size}")
    if by["same"]:
        parts.append(f"the same at {len(by['same'])}" + ("" if parts else f" of {len(group)} points"))
    if by["undetermined"]:
        need = max((v.required_n or 0) for v in by["undetermined"])
        parts.append(f"undetermined at {len(by['undetermined'])}" + ("" if parts else f" of {len(group)} points")
                     + (f" (≈ {need} iterations per side would tell)" if need else ""))
    return f"{words(metric)}: {', '.join(parts)}"


def verdict_lines(study: ServingStudy, threshold: float) -> list[VerdictLine]:
    """One line per comparison (model, what is held fixed, b against a), over all its points and metrics: the
    metrics that differ somewhere first, with their range of change; those the same at every point merged."""
    groups: dict[tuple[str, str, str, str, str], list[Verdict]] = {}
    for v in study.verdicts:
        model, context, _ = v.subject.split(" / ", 2)
        groups.setdefault((v.question, model, context, v.a, v.b), []).append(v)
    lines = []
    for (question, model, context, a, b), group in groups.items():
        held = f"engine {context}" if question == ENVIRONMENT else f"environment {context}"
        by_metric = {m: [v for v in group if v.metric == m] for m in dict.fromkeys(v.metric for v in group)}
        all_same = [m for m, vs in by_metric.items() if all(v.outcome == "same" for v in vs)]
        clauses = [_metric_clause(m, vs) for m, vs in by_metric.items() if m not in all_same]
        if all_same:
            clauses.append(f"the same at every point: {', '.join(words(m) for m in all_same)}")
        text = (f"Serving, {model} on {held}, {b} vs {a}, per point (±{threshold * 100:g}%): "
                + "; ".join(clauses) + ".")
        differ = [_metric_clause(m, vs) for m, vs in by_metric.items() if any(v.outcome == "different" for v in vs)]
        undetermined = sum(v.outcome == "undetermined" for v in group)
        if differ:
            answer = f"{b} vs {a}: " + "; ".join(differ)
        elif undetermined:
            answer = f"no difference shown between {b} and {a}"
        else:
            answer = f"{b} and {a} are the same at every point and metric (within ±{threshold * 100:g}%)"
        if undetermined:
            answer += f"; {undetermined} of {len(group)} point metrics undetermined"
        outcome = line_outcome(group)
        lines.append(VerdictLine("serving", f"{model} / {held}", outcome, outcome, text, tuple(group),
                                 f"Serving {model} ({held}): {answer}."))
    return lines


def capacity_lines(study: ServingStudy, threshold: float) -> list[VerdictLine]:
    """One line per SLA capacity comparison (serving_sla.verdict_words), its badge the comparison's outcome."""
    judged = study.capacity_comparisons
    if judged.empty:
        return []
    return [VerdictLine(serving_sla.QUESTION, f"{row.model} / {row.held} / {row.b} vs {row.a}", row.outcome,
                        row.outcome, serving_sla.verdict_words(row, threshold))
            for row in judged.itertuples()]


def with_serving_lines(lines: list[VerdictLine], study: ServingStudy, threshold: float) -> list[VerdictLine]:
    """The verdict block with the serving lines added; "nothing to compare" goes where serving compares."""
    added = (verdict_lines(study, threshold) + serving_nodes.node_lines(study.verdicts, ENGINE)
             + capacity_lines(study, threshold)) if study.present else []
    if not added:
        return lines
    return [line for line in lines if line.question != "none"] + added


def findings(study: ServingStudy) -> list[Finding]:
    """Failed points (left out of every statistic), named one by one; never dropped silently."""
    failed = study.failed
    if not study.present or failed.empty:
        return []
    details = tuple(f"{r.run_id} ({r.host}, {r.engine} / {r.environment}, iteration {r.iteration}): point "
                    f"{r.point} {r.point_status or 'without status'}: {r.why}" for r in failed.itertuples())
    runs = failed["run_id"].nunique()
    listed = ", ".join(sorted(set(failed["point"].astype(str))))
    return [Finding("serving-point", f"{len(failed)} serving point(s) failed in {runs} run(s) and are left out of "
                                     f"the serving statistics: {listed}", details[:MAX_LISTED], "serving")]


# --- the section -------------------------------------------------------------------------------------------

def _scope_table(cells: pd.DataFrame, scope: str, caption: str) -> Any | None:
    """One scope's metrics side by side per point: median and 95% CI per metric, n once."""
    part = cells[cells["scope"] == scope]
    if part.empty:
        return None
    keys = list(serving.POINT_KEYS)
    metrics = [m for m in serving.SERVING_METRICS if m in set(part["metric"])]
    wide = part.pivot_table(index=keys, columns="metric", values=["median", "ci95_low", "ci95_high", "n", "ci95_note"],
                            aggfunc="first", sort=False, dropna=False).reset_index()  # keep all-NaN CIs (n < 3)
    order = serving.in_point_order(pd.DataFrame({k: wide[(k, "")] for k in keys}))
    wide = wide.set_index([(k, "") for k in keys]).loc[list(order.itertuples(index=False, name=None))].reset_index()
    ci_of = part.drop_duplicates(keys).set_index(keys)["ci95_of"]
    columns: dict[str, Any] = {k: wide[(k, "")].astype(str) for k in serving.shown_keys(part)}
    columns["n"] = wide["n"].max(axis=1).map(fmt)
    for m in metrics:
        columns[f"{m} median ({unit(m)})"] = wide[("median", m)].map(fmt)
        columns[f"{m} 95% CI"] = [fmt_ci(lo, hi, n, stats.MIN_N_INTERVAL, m)
                                  + (f" ({note})" if isinstance(note, str) and note else "")
                                  for lo, hi, n, note in zip(wide[("ci95_low", m)], wide[("ci95_high", m)],
                                                             wide[("n", m)], wide[("ci95_note", m)], strict=True)]
    columns["CI of"] = [ci_of.get(tuple(r), "") or "–" for r in order.itertuples(index=False, name=None)]
    return table(pd.DataFrame(columns), caption, "serving_cells.csv", len(wide))


def _comparison_table(comparisons: pd.DataFrame) -> Any:
    c = shown(comparisons)
    # an environment comparison holds its engine fixed, an engine comparison its environment; a campaign of one
    # engine (or one environment) has only one of the two columns
    blank = pd.Series("", index=c.index)
    held = c.get("engine", blank).where(c["question"] == ENVIRONMENT, c.get("environment", blank))
    frame = pd.DataFrame({
        "comparison": c["b"].astype(str) + " vs " + c["a"].astype(str),
        "held fixed": [f"{'engine' if q == ENVIRONMENT else 'environment'} {x}" for q, x in zip(
            c["question"], held, strict=True)],
        **({"client": c["client"]} if "client" in c and c["client"].nunique() > 1 else {}),
        "model": c["model"], **{k: c[k].astype(str) for k in serving.PROFILE},
        "metric": c["metric"].map(words),
        "n": c["n_a"].map(fmt) + " / " + c["n_b"].map(fmt),
        "mean a": c["mean_a"].map(fmt), "mean b": c["mean_b"].map(fmt),
        "difference": c["change_pct"].map(fmt_pct),
        "95% CI": [f"{N_TOO_SMALL} (n={fmt(min(na, nb))})" if min(na, nb) < stats.MIN_N_INTERVAL else
                   "–" if lo is None or pd.isna(lo) else f"{fmt_pct(lo)} to {fmt_pct(hi)}" for lo, hi, na, nb in
                   zip(c["ci_low_pct"], c["ci_high_pct"], c["n_a"], c["n_b"], strict=True)],
        "Welch p (alone)": c["p_value"].map(fmt_p),
        "p in its family (Holm)": c["p_family"].map(fmt_p) if "p_family" in c else "–",
        "verdict": [o + (" (significant alone, not in its family)" if r == "family" else "")
                    + (f" (≈ {n:.0f} iterations/side would tell)" if o == "undetermined" and n == n else "")
                    for o, r, n in zip(c["outcome"], c["reason"], c["required_n"], strict=True)],
    })
    if c["noise_floor_pct"].notna().any():
        frame["A/A noise floor"] = ["–" if f is None or pd.isna(f) else
                                    f"{'under' if u else 'above'} (±{f:.2g}%)"
                                    for f, u in zip(c["noise_floor_pct"], c["under_noise_floor"], strict=True)]
    return table(frame, "Each point compared: b against a (the verdict is the report's one rule)",
                 "serving_comparisons.csv", len(comparisons))


def _baseline_table(rows: pd.DataFrame) -> Any:
    """Each serving point against --baseline: the gate's own rows (verdict regression / improvement / unchanged /
    undetermined, by its one family)."""
    c = shown(rows)
    keys = [k for k in ("host", "model", "environment", "workload") if k in c]
    scale = c["baseline_mean"].abs().where(c["baseline_mean"] != 0)
    low, high = c["ci_low"] / scale * 100, c["ci_high"] / scale * 100
    frame = pd.DataFrame({
        "cell": [" / ".join(str(r[k]) for k in keys) for _, r in c.iterrows()], "engine": c["engine"].astype(str),
        **{k: c[k].astype(str) for k in serving.PROFILE}, "metric": c["metric"].map(words),
        "n": c["n_baseline"].map(fmt) + " / " + c["n_current"].map(fmt),
        "baseline": c["baseline_mean"].map(fmt), "current": c["current_mean"].map(fmt),
        "difference": c["change_pct"].map(fmt_pct),
        "95% CI": [f"{N_TOO_SMALL} (n={fmt(min(na, nb))})" if min(na, nb) < stats.MIN_N_INTERVAL else
                   "–" if pd.isna(lo) else f"{fmt_pct(lo)} to {fmt_pct(hi)}"
                   for lo, hi, na, nb in zip(low, high, c["n_baseline"], c["n_current"], strict=True)],
        "Welch p (alone)": c["p_value"].map(fmt_p), "p in its family (Holm)": c["p_family"].map(fmt_p),
        "verdict": [v + (" (significant alone, not in its family)" if r == "family" else "")
                    + (f" (≈ {n:.0f} iterations/side would tell)" if v == "undetermined" and n == n else "")
                    for v, r, n in zip(c["verdict"], c["reason"], c["required_n"], strict=True)],
    })
    return table(frame, "Each point against the baseline: current against baseline (the regression gate's rows)",
                 BASELINE_CSV, len(rows))


def _baseline_blocks(study: ServingStudy, options: Any) -> list:
    """The serving points against --baseline: what the rule is, how many regressed, each row."""
    rows = study.baseline
    if rows.empty:
        return []
    counts = rows["verdict"].value_counts()
    said = ", ".join(f"{counts[v]} {v}" for v in ("regression", "improvement", "undetermined", "unchanged")
                     if v in counts)
    return [Paragraph(
        f"Against the baseline ({options.baseline}), each point and metric measured in both: {len(rows)} "
        f"comparisons ({said}). A regression or an improvement is significant and beyond ±"
        f"{options.threshold * 100:g}% (by the metric's direction: throughput up, latency down); significance is "
        f"{compare.FAMILY_METHOD} (every comparison against the baseline, run-level and serving, is one family)."),
        _baseline_table(rows)]


def serving_sections(report: Any, figures: dict[str, Figure]) -> list[Section]:
    """The "Serving" section and its Pareto front's (serving_pareto); nothing for a campaign without serving runs."""
    study: ServingStudy = report.serving
    if not study.present:
        return []
    points, o = study.points, report.options
    runs = points.drop_duplicates("run_id")
    measured = serving.measured_points(points)
    engines = ", ".join(sorted(set(points["engine"].dropna().astype(str)))) or "–"
    apart = int(stats.kept_apart(stats.ok_runs(runs)).sum())  # their points are left out with them
    suspect = f", not found suspect by the readiness probe ({apart} run(s) left out)" if apart else ""
    text = (f"{len(runs)} serving run(s) ({int((runs['status'] == 'ok').sum())} ok) of engine(s) {engines}: "
            f"{len(points)} run × point rows, {len(measured)} measured (run ok, not a warm-up{suspect}, point ok). "
            "Per point "
            "(engine, environment, model, depth, concurrency, pp, tg) over the iterations: the median with a 95% "
            f"interval: the median's percentile bootstrap from {stats.MIN_N_BOOTSTRAP} iterations on, else the "
            f"mean's t-interval from {stats.MIN_N_INTERVAL} on (\"CI of\" says which), \"{N_TOO_SMALL}\" below. "
            "Aggregate figures (*_tok_s) count all concurrent requests together, per-user figures (*_req_tok_s) "
            "one request: they are never shown in one table or one figure. Every per-iteration value is in "
            "serving_cells.csv (values) and every run × point row, raw samples included, in serving_points.csv.")
    blocks: list = [Paragraph(text)]
    lines = served.served_lines(getattr(report, "root", None), report.runs, set(runs["run_id"].astype(str)))
    if lines:
        blocks += [Paragraph(served.served_intro(len(lines))), Bullets(lines, "served")]
    if not study.failed.empty:
        blocks.append(Paragraph(f"Failed points, left out of every statistic ({len(study.failed)}):"))
        blocks.append(Bullets([f"{r.point} in {r.run_id} ({r.host}, {r.engine} / {r.environment}, iteration "
                               f"{r.iteration}): {r.why}" for r in shown(study.failed).itertuples()], "warnings"))
    if not study.failed_runs.empty:
        blocks.append(Paragraph(f"Serving runs that are not ok, none of their points measured "
                                f"({len(study.failed_runs)}):"))
        blocks.append(Bullets([f"{r.run_id} ({r.host}, {r.engine} / {r.environment}): {r.status}: {r.reason}"
                               for r in shown(study.failed_runs).itertuples()], "warnings"))
    for scope, caption in ((AGGREGATE, "Aggregate throughput per point (all concurrent requests)"),
                           (PER_USER, "Per-user throughput per point (one request)"),
                           (LATENCY, "Latency per point")):
        block = _scope_table(study.cells, scope, caption) if not study.cells.empty else None
        if block is not None:
            blocks.append(block)
    blocks += [figures[n] for n in SERVING_TITLES if n in figures and n not in serving_pareto.TITLES]
    if not study.comparisons.empty:
        blocks.append(Paragraph(
            "Each environment against native with the same engine, and each engine against the first by name in "
            f"the same environment, per point and metric: different when significant (Welch p < {o.alpha:g}) and "
            f"beyond ±{o.threshold * 100:g}%, the same when the whole {o.level * 100:g}% interval lies inside, "
            "otherwise undetermined with the iterations per side that would tell. Better is higher for "
            f"throughput, lower for latency. Significance is {compare.FAMILY_METHOD} (each question, environments "
            "and engines, is one family); the Welch p column is each comparison's own, and a row significant "
            "alone but not in its family says so (undetermined, reason family)."))
        blocks.append(_comparison_table(study.comparisons))
    else:
        blocks.append(Paragraph("No point was measured in two environments of one engine or by two engines in one "
                                "environment: nothing to compare within this campaign."))
    blocks += _baseline_blocks(study, o)
    if not study.noise.empty:
        noise = study.noise
        blocks.append(Details("A/A noise floor of the serving metrics", [table(pd.DataFrame({
            "metric": noise["metric"].map(words), "A/A point cells": noise["pairs"].map(fmt),
            "n per side": noise["n"].map(fmt), "CV": noise["cv"].map(lambda v: fmt_pct(v * 100).lstrip("+")),
            "largest |A−B|": noise["observed_pct"].map(lambda v: fmt_pct(v).lstrip("+")),
            "noise floor": noise["floor_pct"].map(lambda v: "±" + fmt_pct(v).lstrip("+")),
            "MDE": noise["mde_pct"].map(lambda v: fmt_pct(v).lstrip("+")),
        }), "Noise floor per serving metric (as the A/A noise floor section computes it)", "serving_aa_noise.csv")]))
    capacity = serving_sla.section(study.capacity, study.capacity_comparisons, o.level, o.threshold)  # issue 37
    return [Section("Serving", blocks), serving_pareto.section(study.pareto, study.pareto_twins, figures),
            *([capacity] if capacity is not None else [])]


def figure_makers(report: Any) -> dict[str, Callable[[], bytes | None]]:
    """The serving figures (each None without serving cells)."""
    cells = report.serving.cells
    marked = report.serving.pareto
    return {"serving_throughput": lambda: serving_plots.throughput_vs_concurrency(cells),
            "serving_ttft": lambda: serving_plots.ttft_vs_depth(cells),
            serving_pareto.FIGURE: lambda: serving_plots.pareto_front(marked)}


# --- files and JSON ----------------------------------------------------------------------------------------

def tables(study: ServingStudy) -> dict[str, pd.DataFrame]:
    """The serving CSVs (CSV_NAMES, and BASELINE_CSV against a baseline) by file name; {} without serving runs."""
    if not study.present:
        return {}
    comparisons = study.comparisons.drop(columns=["text"], errors="ignore")
    written = dict(zip(CSV_NAMES, (study.points, study.cells, comparisons, study.noise,
                                   study.pareto.reindex(columns=list(pareto.COLUMNS))), strict=True))
    capacity = {serving_sla.CSV: study.capacity} if not study.capacity.empty else {}
    if not study.capacity_comparisons.empty:
        capacity[serving_sla.COMPARISONS_CSV] = study.capacity_comparisons
    return written | capacity | ({BASELINE_CSV: study.baseline} if not study.baseline.empty else {})


def write_tables(study: ServingStudy, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write the serving CSVs into ``out_dir``; returns their paths ([] without serving runs)."""
    written = []
    for name, frame in tables(study).items():
        write_csv(frame, Path(out_dir) / name)
        written.append(Path(out_dir) / name)
    return written


def payload(report: Any) -> dict[str, Any]:
    """The JSON's ``serving`` key: {} without serving runs (the JSON then is what it was)."""
    study: ServingStudy = report.serving
    if not study.present:
        return {}

    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        return [{c: plain(v) for c, v in zip(frame.columns, row, strict=True)}
                for row in frame.itertuples(index=False, name=None)]

    cells = study.cells.assign(values=study.cells["values"].map(json.loads)) if not study.cells.empty else study.cells
    return {"serving": {"cells": records(cells), "comparisons": records(study.comparisons),
                        "failed_points": records(study.failed), "failed_runs": records(study.failed_runs),
                        "noise_floor": records(study.noise), "pareto": records(study.pareto),
                        "capacity": records(study.capacity),
                        "capacity_comparisons": records(study.capacity_comparisons)}}


__all__ = ["ServingStudy", "findings", "payload", "serving_sections", "serving_study", "tables",
           "with_serving_lines", "write_tables"]
