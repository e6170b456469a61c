"""Serving capacity within the SLA (issue 37 item 3): per (engine, environment, client, model, depth, pp, tg,
targets), the capacity each run's SLA search found (the loader's ``sla_*`` point columns: the largest concurrency
meeting the targets), over the iterations: the median with an exact order-statistic interval for it
(distribution-free, so it holds for a discrete capacity; :data:`MIN_N` iterations for 95%), and verdicts between
environments and engines.

The verdicts follow the report's rule (different: significant within its family and beyond the threshold; same:
the interval inside ±threshold; otherwise undetermined, with the iterations that could tell) with a test that
fits a capacity found by bisection: the exact rank comparison of :func:`sparkfleet.stats.rank_shift`. Welch's
test would call two constant sides (8, 8 against 12, 12) an exact difference, which a discrete figure with no
true difference produces often. A capacity at the search's cap is censored (the cap was never exceeded): it can
still be shown lower than another, never the same.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from sparkfleet import compare, stats
from sparkfleet.report.document import Paragraph, Section, fmt, table

KEYS = ["engine", "environment", "client", "model", "depth", "pp", "tg", "targets"]
#: The least iterations whose order statistics give a 95% interval for the median (2 x 0.5^n <= 0.05).
MIN_N = 6
TITLE = "Serving capacity within the SLA"
CSV = "serving_capacity.csv"
COMPARISONS_CSV = "serving_capacity_comparisons.csv"
QUESTION = "serving-capacity"


def capacity_rows(points: pd.DataFrame) -> pd.DataFrame:
    """One row per measured serving run and searched (depth, pp, tg): KEYS (targets as text), environment_kind,
    run_id, iteration, capacity, cap, stopped. The ok runs that are not warm-ups, nor found suspect by the readiness
    probe (stats.kept_apart, as every statistic): their points' ``sla_*``."""
    columns = [*KEYS, "environment_kind", "run_id", "iteration", "capacity", "cap", "stopped"]
    if points.empty or points["sla_capacity"].isna().all():
        return pd.DataFrame(columns=columns)
    runs = stats.measured_runs(points)
    runs = runs[runs["sla_capacity"].notna()]
    runs = runs.drop_duplicates(["run_id", "depth", "pp", "tg"])
    rows = pd.DataFrame({**{k: runs[k] for k in KEYS[:-1]}, "targets": runs["sla_targets"].map(targets_words),
                         "environment_kind": runs["environment_kind"], "run_id": runs["run_id"],
                         "iteration": runs["iteration"], "capacity": runs["sla_capacity"].astype(int),
                         "cap": runs["sla_cap"], "stopped": runs["sla_stopped"]}, columns=columns)
    return rows.reset_index(drop=True)


def targets_words(targets: Any) -> str:
    """"TTFT p99 <= 2000 ms, TPOT p99 <= 50 ms" from the record's targets (a dict or its JSON text)."""
    if isinstance(targets, str):
        targets = json.loads(targets)
    names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}
    return ", ".join(f"{names.get(k, k)} p{fmt(v.get('percentile'))} <= {fmt(v.get('max'))} ms"
                     for k, v in sorted((targets or {}).items()) if isinstance(v, dict))


def median_interval(values: list[int], level: float = 0.95) -> tuple[float, float | None, float | None]:
    """The median of ``values`` and the widest-needed exact order-statistic interval [x(k), x(n-k+1)] covering the
    population median with probability >= ``level`` (binomial(n, 1/2)); (median, None, None) when n is too small."""
    data = sorted(values)
    n = len(data)
    if not n:
        return math.nan, None, None
    median = float(pd.Series(data).median())
    best = None
    for k in range(1, n // 2 + 1):  # coverage 1 - 2 P(B <= k - 1), B ~ binomial(n, 1/2)
        tail = sum(math.comb(n, i) for i in range(k)) / 2 ** n
        if 1 - 2 * tail >= level:
            best = k
    if best is None:
        return median, None, None
    return median, float(data[best - 1]), float(data[n - best])


def settled(rows: pd.DataFrame) -> pd.DataFrame:
    """The searches that settled: one stopped early (an error, the run's time) found only a lower bound."""
    return rows[rows["stopped"].isna()]


def capacity_cells(rows: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per KEYS cell: n and the capacities of the searches that settled, their median and its interval, the cap,
    and the searches stopped early (left out of n: their capacity is only a lower bound)."""
    out = []
    for key, group in rows.groupby(KEYS, sort=True, dropna=False):
        values = [int(v) for v in settled(group)["capacity"]]
        median, low, high = median_interval(values, level)
        out.append(dict(zip(KEYS, key, strict=True), n=len(values), capacities=values, median=median, low=low,
                        high=high, cap=group["cap"].max(), stopped=int(group["stopped"].notna().sum())))
    return pd.DataFrame(out)


# --- verdicts ----------------------------------------------------------------------------------------------

def least_n(alpha: float) -> int:
    """The fewest iterations per side with which the rank test can reach p < alpha at all (2 / C(2n, n))."""
    n = 2
    while 2 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def _judge(a: list[int], b: list[int], cap: float, alpha: float, threshold: float, level: float) -> dict[str, Any]:
    """One comparison's columns before its family is held (reason as compare.classify names them, plus at-cap)."""
    test = stats.rank_shift(a, b, level)
    base = float(pd.Series(a).median())
    change = test.shift / base if base else (math.inf if test.shift else 0.0)
    censored = cap == cap and cap > 0 and any(v >= cap for v in (*a, *b))
    inside = (test.ci_low is not None and base > 0 and test.ci_low >= -threshold * base
              and test.ci_high <= threshold * base)
    significant = test.p_value < alpha
    if not any(a) and not any(b):
        reason = "none-met"  # no level met the targets on either side: nothing to compare, however many runs
    elif test.p_min >= alpha and test.ci_low is None:
        reason = "n-too-small"
    elif significant and abs(change) > threshold:
        reason = "beyond-threshold"
    elif censored and (significant or inside):
        reason = "at-cap"  # equal within the cap says nothing of what lies beyond it
    elif significant:
        reason = "within-threshold"
    elif inside:
        reason = "equivalent"
    else:
        reason = "inconclusive"
    outcome = {"beyond-threshold": "different", "within-threshold": "same", "equivalent": "same"}.get(
        reason, "undetermined")
    return {"n_a": len(a), "n_b": len(b), "median_a": base, "median_b": float(pd.Series(b).median()),
            "shift": test.shift, "change_pct": change * 100, "ci_low": test.ci_low, "ci_high": test.ci_high,
            "p_value": test.p_value, "p_min": test.p_min, "outcome": outcome, "reason": reason}


def comparisons(rows: pd.DataFrame, question: str, context: str, side: str, references: pd.DataFrame,
                alpha: float, threshold: float, level: float) -> pd.DataFrame:
    """Per capacity cell: each ``side`` (environment or engine) against its reference (``references``: per
    (context, model) the side ``a``), the same ``context`` and model, depth, pp, tg and targets; the rows of one
    question are one family (compare.hold_to_family, Holm). Undetermined rows say the iterations per side that
    could tell (``required_n``: where a difference can first be significant in this family, every row in it)."""
    if rows.empty or references.empty:
        return pd.DataFrame()
    fixed = [k for k in KEYS if k != side]
    rows = settled(rows).merge(references, on=[context, "model"])
    out = []
    for key, cell in rows.groupby(fixed, sort=True, dropna=False):
        ref = cell[cell[side] == cell["a"]]
        for other, part in cell[cell[side] != cell["a"]].groupby(side, sort=True):
            if ref.empty:
                continue
            cap = float(pd.concat([ref["cap"], part["cap"]]).astype(float).max())
            judged = _judge(list(ref["capacity"]), list(part["capacity"]), cap, alpha, threshold, level)
            held = dict(zip(fixed, key, strict=True))
            out.append({"question": question, **held, "held": f"{context} {held[context]}", "a": ref["a"].iloc[0],
                        "b": other, "cap": cap, **judged})
    if not out:
        return pd.DataFrame()
    table_ = compare.hold_to_family(pd.DataFrame(out), alpha)
    size = len(table_)  # the family once every comparison can be judged
    table_["required_n"] = [least_n(alpha / size) if o == "undetermined" and r not in ("at-cap", "none-met") else None
                            for o, r in zip(table_["outcome"], table_["reason"], strict=True)]
    return table_


def verdict_words(row: Any, threshold: float) -> str:
    """The comparison in one sentence: the medians, the shift and its interval, the verdict and why."""
    where = f"{row.model} / depth {row.depth} pp {row.pp} tg {row.tg} ({row.targets})"
    interval = (f"[{fmt(row.ci_low)}, {fmt(row.ci_high)}]" if row.ci_low is not None and row.ci_low == row.ci_low
                else "none at these n")
    said = {"beyond-threshold": f"different (rank test p {fmt(row.p_value)}, within its family "
                                f"{fmt(row.p_family)}; beyond ±{threshold * 100:g}%)",
            "within-threshold": f"the same within ±{threshold * 100:g}% (significant but smaller)",
            "equivalent": f"the same (the interval lies inside ±{threshold * 100:g}%)",
            "at-cap": "undetermined: a capacity reached the search's cap (max_concurrency), so equal or close says "
                      "nothing beyond it; a higher cap could tell",
            "family": "undetermined: significant alone, not within its family",
            "none-met": "undetermined: no level met the targets on either side (lower the profile's lowest "
                        "concurrency or loosen the targets)",
            "n-too-small": f"undetermined: too few iterations (≥ {row.required_n} per side could tell)",
            "inconclusive": f"undetermined (≥ {row.required_n} iterations per side could tell)"}
    return (f"SLA capacity, {where}: {row.b} median {fmt(row.median_b)} vs {row.a} median {fmt(row.median_a)}, "
            f"shift {fmt(row.shift)} (interval {interval}): {said.get(row.reason, row.outcome)}.")


# --- the section -------------------------------------------------------------------------------------------

def section(cells: pd.DataFrame, judged: pd.DataFrame, level: float, threshold: float) -> Section | None:
    """The section, or None when no serving run searched."""
    if cells.empty:
        return None
    text = ("The largest concurrency each run found within its workload's SLA targets (per engine, environment, "
            "model, depth, pp, tg and targets; doubling from the profile's lowest concurrency to a failing level or "
            "the cap, then bisection; latencies at the targets' percentiles from the client's data: llama-benchy's "
            "per-request samples, time per output token as 1000 / each request's decode rate, or AIPerf's exported "
            f"pNN). Over the iterations: the median capacity with an exact {level * 100:g}% order-statistic interval "
            f"for the median (from {MIN_N} iterations on; fewer: none). A capacity equal to the cap means the cap "
            "was never exceeded, not that the server stops there. A search stopped early (a point that failed, the "
            "run's time) found only a lower bound: it is counted, not used.")
    shown = pd.DataFrame({
        **{k: cells[k] for k in KEYS}, "n": cells["n"],
        "capacities": cells["capacities"].map(lambda v: ", ".join(map(str, v))),
        "median": cells["median"].map(fmt),
        "interval": [f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None else "n too small"
                     for lo, hi in zip(cells["low"], cells["high"], strict=True)],
        "cap": cells["cap"].map(fmt), "searches stopped early": cells["stopped"]})
    blocks: list[Any] = [Paragraph(text), table(shown, "Capacity within the SLA per cell", CSV)]
    if judged.empty:
        blocks.append(Paragraph("No capacity was searched in two environments of one engine or by two engines in "
                                "one environment: nothing to compare."))
        return Section(TITLE, blocks)
    blocks.append(Paragraph(
        "Each environment against native with the same engine, and each engine against the first by name in the "
        "same environment, per searched cell: the Hodges–Lehmann shift (the median of every difference between "
        f"the two sides' capacities) with its distribution-free {level * 100:g}% interval, and the exact rank test "
        "(Mann–Whitney, every split of the iterations counted, ties included). Different when the test is "
        f"significant within its family and the shift is beyond ±{threshold * 100:g}% of the reference's median; "
        "the same when the interval lies inside; otherwise undetermined, with the iterations per side from which "
        f"the test can reach significance at all. Significance is {compare.FAMILY_METHOD} (here: each question's "
        "capacity comparisons are one family)."))
    shown_judged = pd.DataFrame({
        "comparison": judged["b"].astype(str) + " vs " + judged["a"].astype(str),
        "held fixed": judged["held"],
        **{k: judged[k] for k in ("client", "model", "depth", "pp", "tg", "targets")},
        "medians (b, a)": [f"{fmt(b)}, {fmt(a)}" for a, b in zip(judged["median_a"], judged["median_b"], strict=True)],
        "shift": judged["shift"].map(fmt),
        f"{level * 100:g}% interval": [f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None and lo == lo else "n too small"
                                       for lo, hi in zip(judged["ci_low"], judged["ci_high"], strict=True)],
        "p (rank)": judged["p_value"].map(fmt), "p (family)": judged["p_family"].map(fmt),
        "verdict": judged["outcome"], "reason": judged["reason"],
        "iterations that could tell": judged["required_n"].map(lambda v: "" if v is None or v != v else f"≥ {v:g}")})
    blocks.append(table(shown_judged, "Capacity comparisons", COMPARISONS_CSV))
    return Section(TITLE, blocks)
