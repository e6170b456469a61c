"""Comparisons: each environment against native on one host, the KV-cache budget that explains memory
differences, and a campaign against a baseline (the regression gate).

Every difference comes with Welch's t-test (unequal variances) and a CI with Welch–Satterthwaite degrees
of freedom, so "the container uses 30 GiB more" carries its uncertainty and "throughput is identical" is a
statement about a p-value and an interval, not about two means that happen to look close.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.serving import (
    ENGINES,
    point_name,
)
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from sparkfleet import serving
from sparkfleet.load import DEFAULT_KV_FRACTION, kv_fraction, numbers
from sparkfleet.stats import (
    CELL_KEYS,
    DEFAULT_LEVEL,
    MIN_N_INTERVAL,
    interval_allowed,
    measured_runs,
    moments,
    required_n,
    student_from_moments,
    welch_from_moments,
)
from sparkfleet.thresholds import DEFAULT_ALPHA, DEFAULT_THRESHOLD

__all__ = ["DEFAULT_ALPHA", "DEFAULT_THRESHOLD", "FAMILY_METHOD", "POINT_COLUMNS", "classify", "compare_campaigns",
           "compare_environments", "compare_moments", "compare_sides", "hold_to_family", "holm", "kv_residual",
           "long_table"]

#: Which way is better. KV cache is memory the engine *could* give to requests, so more is better; peak
#: memory, latencies and times are costs. The configuration metrics (record.CONFIG_METRICS) are neither.
HIGHER_IS_BETTER = ("output_tok_s", "total_tok_s", "req_s", "kv_cache_gib", "gflops")
LOWER_IS_BETTER = ("latency_ms_avg", "latency_ms_p50", "latency_ms_p90", "latency_ms_p95", "latency_ms_p99",
                   "ttft_ms", "tpot_ms", "peak_memory_gib", "matmul_s_mean")
#: The memory story first, then throughput, then latency (the order tables are shown in).
COMPARED_METRICS = ("peak_memory_gib", "kv_cache_gib", "output_tok_s", "total_tok_s", "req_s", "gflops",
                    *LOWER_IS_BETTER[:7], "matmul_s_mean")  # LOWER_IS_BETTER[:7]: latencies, ttft, tpot

_PAIR_KEYS = ("host", "model", "workload")


def long_table(runs: pd.DataFrame, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    long = runs.melt(id_vars=keys, value_vars=metrics, var_name="metric", value_name="value")
    return long[long["value"].notna()]


def compare_moments(a: pd.DataFrame, b: pd.DataFrame, level: float, same_distribution: bool = False) -> pd.DataFrame:
    """Welch columns for rows holding n/mean/var of side a (``*_a``) and side b (``*_b``); with
    ``same_distribution`` Student's pooled-variance t instead (stats.student_from_moments: the null of a host
    against its peers or a reference, where the two sides differ in size and Welch would be liberal).

    The CI of the difference follows the small-sample rule (stats.MIN_N_INTERVAL): NaN when either side
    has fewer runs. The p-value is kept (it is what it is, and the verdicts treat such rows as
    undetermined)."""
    test = student_from_moments if same_distribution else welch_from_moments
    w = test(a["n"], a["mean"], a["var"], b["n"], b["mean"], b["var"], level)
    mean_a = a["mean"].to_numpy(dtype=float)
    allowed = interval_allowed(np.minimum(a["n"].to_numpy(dtype=float), b["n"].to_numpy(dtype=float)))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(mean_a != 0, b["mean"].to_numpy(dtype=float) / mean_a, np.nan)
        change = np.where(mean_a != 0, w["diff"] / np.abs(mean_a) * 100, np.nan)
    return pd.DataFrame({"n_a": a["n"].to_numpy(), "n_b": b["n"].to_numpy(), "mean_a": mean_a,
                         "mean_b": b["mean"].to_numpy(dtype=float),
                         "sd_a": np.sqrt(a["var"].to_numpy(dtype=float)),
                         "sd_b": np.sqrt(b["var"].to_numpy(dtype=float)), "diff": w["diff"], "ratio": ratio,
                         "change_pct": change, "p_value": w["p_value"],
                         "ci_low": np.where(allowed, w["ci_low"], np.nan),
                         "ci_high": np.where(allowed, w["ci_high"], np.nan), "df": w["df"]})


def compare_sides(frame: pd.DataFrame, a: str, b: str, level: float, same_distribution: bool = False) -> pd.DataFrame:
    """:func:`compare_moments` of the two sides a row of ``frame`` holds: side a's ``n<a>``, ``mean<a>`` and
    ``var<a>`` columns against side b's (``a``, ``b``: the column suffixes, e.g. "_a" and "_b")."""
    return compare_moments(_side(frame, a), _side(frame, b), level, same_distribution)


def _side(frame: pd.DataFrame, suffix: str) -> pd.DataFrame:
    return pd.DataFrame({c: frame[f"{c}{suffix}"].to_numpy(dtype=float) for c in ("n", "mean", "var")})


#: How a verdict kind's family of comparisons is held to its error rate, in the one sentence the legends print.
FAMILY_METHOD = ("Holm's step-down adjustment over every comparison behind a verdict kind in the campaign, so that "
                 "with no true difference anywhere a DIFFERENT, NOT NORMAL / out or REGRESSION / IMPROVEMENT verdict "
                 "appears in at most α of campaigns however many metrics, points and hosts it covers")


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values: min(1, max over j <= i of (m - j + 1) p_(j)) in ascending order.

    NaN stays NaN and is not counted in the family (m = the finite values). Holm controls the family-wise
    error rate in the strong sense under any dependence between the tests (Holm 1979)."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    finite = np.isfinite(p)
    m = int(finite.sum())
    if m:
        values = p[finite]
        order = np.argsort(values, kind="stable")
        adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * values[order]))
        inverse = np.empty(m)
        inverse[order] = adjusted
        out[finite] = inverse
    return out


def family_size(p_values) -> int:
    """How many comparisons a family holds (its finite p-values)."""
    return int(np.isfinite(np.asarray(p_values, dtype=float)).sum())


def hold_to_family(table: pd.DataFrame, alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """A verdict kind's rows held to the family-wise error rate: ``table`` (rows with ``p_value``,
    ``outcome``, ``reason``, and ``n_a``/``n_b`` or ``n``/``n_ref`` where known) with ``p_family`` (Holm over
    the rows that can be judged) and ``family_size`` added, and every "different" whose ``p_family`` is not
    below ``alpha`` turned "undetermined" with reason "family": significant alone, not among its family.

    Rows that cannot be "different" by design (fewer than MIN_N_INTERVAL runs on a side, not both constant)
    are left out of the family; "same" and "undetermined" answers are not touched (equivalence is per
    comparison). Applying it again to a superset of a family keeps the rule: the larger family's adjusted p
    is never smaller."""
    out = table.copy()
    if out.empty:
        return out.assign(p_family=pd.Series(dtype=float), family_size=pd.Series(dtype="int64"))
    p = out["p_value"].to_numpy(dtype=float)
    judgeable = ~out["reason"].isin(["n-too-small", "no-data"]).to_numpy() if "reason" in out else np.ones(len(p), bool)
    p = np.where(judgeable, p, np.nan)
    adjusted = holm(p)
    if "p_family" in out:  # a superset family: never less strict than the subset's own adjustment
        adjusted = np.fmax(adjusted, out["p_family"].to_numpy(dtype=float))
    held = (out["outcome"].to_numpy() == "different") & ~(adjusted < alpha) & (p > 0)
    out["p_family"] = adjusted
    out["family_size"] = family_size(p)
    out.loc[held, "outcome"] = "undetermined"
    if "reason" in out:
        out.loc[held, "reason"] = "family"
    if "significant" in out:
        out["significant"] = adjusted < alpha
    return out


def classify(table: pd.DataFrame, alpha: float = DEFAULT_ALPHA, threshold: float = DEFAULT_THRESHOLD,
             power_alpha: float = DEFAULT_ALPHA, family: bool = False) -> pd.DataFrame:
    """The one decision rule behind every verdict, for rows of ``compare_moments`` columns (b against a).

    outcome "different": significant (Welch p < alpha) and |change| > threshold. "same": significant
    but within the threshold, or not significant with the whole CI of the change inside ±threshold, or
    both sides constant and equal (or within the threshold). "undetermined": fewer than MIN_N_INTERVAL
    runs on a side (unless both sides are constant), or not significant with a CI reaching beyond the
    threshold: then ``required_n`` says how many runs per side would resolve a change of ``threshold``
    (power 0.8, the pooled CV of the two sides).

    ``family``: the rows are one verdict kind's family (every comparison behind one headline answer), held
    to the family-wise error rate by :func:`hold_to_family` (Holm): "different" needs the adjusted p below
    ``alpha``; a row significant alone but not among its family is "undetermined", reason "family", and its
    ``required_n`` is computed at alpha / family size. ``p_family`` and ``family_size`` say what was used.

    The ``reason`` column says why: beyond-threshold / within-threshold (significant, larger than the
    threshold or not), equivalent / inconclusive (not significant, the CI within the threshold or reaching
    beyond it), identical (the same value in every run), exact (each side constant: the difference is exact),
    n-too-small (fewer than MIN_N_INTERVAL runs on a side), no-data (no value on a side), family (see above).
    """
    n = np.minimum(table["n_a"].to_numpy(dtype=float), table["n_b"].to_numpy(dtype=float))
    mean_a = np.abs(table["mean_a"].to_numpy(dtype=float))
    sd_a, sd_b = table["sd_a"].to_numpy(dtype=float), table["sd_b"].to_numpy(dtype=float)
    change = table["change_pct"].to_numpy(dtype=float) / 100
    with np.errstate(invalid="ignore", divide="ignore"):
        cv = np.sqrt((sd_a**2 + sd_b**2) / 2) / mean_a
        ci_low = table["ci_low"].to_numpy(dtype=float) / mean_a
        ci_high = table["ci_high"].to_numpy(dtype=float) / mean_a
    p = table["p_value"].to_numpy(dtype=float)
    significant = p < alpha
    large = np.abs(change) > threshold
    exact = (sd_a == 0) & (sd_b == 0) & (n >= 2)
    inside = (ci_low >= -threshold) & (ci_high <= threshold)
    conditions = [
        np.isnan(change) & ~exact,
        exact & (table["diff"].to_numpy(dtype=float) == 0),
        exact,
        ~interval_allowed(n),
        significant & large,
        significant,
        inside,
    ]
    reasons = ["no-data", "identical", "exact", "n-too-small", "beyond-threshold", "within-threshold", "equivalent"]
    reason = np.select(conditions, reasons, default="inconclusive")
    outcome = np.select(
        [np.isin(reason, ["beyond-threshold"]) | ((reason == "exact") & large),
         np.isin(reason, ["identical", "exact", "within-threshold", "equivalent"])],
        ["different", "same"], default="undetermined")
    judged = pd.DataFrame({"significant": significant, "large": large, "outcome": outcome, "reason": reason,
                           "cv_pooled": cv, "p_value": p}, index=table.index)
    if family:
        judged = hold_to_family(judged, alpha)
        power_alpha = power_alpha / max(1, int(judged["family_size"].iloc[0])) if len(judged) else power_alpha
    need = required_n(cv, threshold, alpha=power_alpha)
    judged["required_n"] = np.where(judged["outcome"].to_numpy() == "undetermined",
                                    np.maximum(need, MIN_N_INTERVAL), np.nan)
    return judged.drop(columns="p_value")


def native_environment(environments: pd.Series) -> str:
    """The environment compared against: kind native, preferring one literally named 'native'."""
    names = set(environments)
    return "native" if "native" in names else min(names)


def pooled_moments(per_group: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """n, mean and sample variance of the union of groups, from each group's n, mean and var (exact:
    within-group plus between-group sums of squares)."""
    frame = per_group.assign(_s=per_group["n"] * per_group["mean"])
    total = frame.groupby(keys, sort=True).agg(n=("n", "sum"), _s=("_s", "sum"), hosts=("n", "size"))
    total["mean"] = total["_s"] / total["n"]
    frame = frame.join(total["mean"].rename("_pooled"), on=keys)
    frame["_ss"] = (frame["n"] - 1) * frame["var"].fillna(0) + frame["n"] * (frame["mean"] - frame["_pooled"]) ** 2
    total["var"] = frame.groupby(keys, sort=True)["_ss"].sum() / (total["n"] - 1)
    total.loc[total["n"] < 2, "var"] = np.nan
    return total.drop(columns="_s").reset_index()


def compare_environments(
    runs: pd.DataFrame, metrics: tuple[str, ...] = COMPARED_METRICS, level: float = DEFAULT_LEVEL,
    pool_hosts: bool = False,
) -> pd.DataFrame:
    """Every non-native environment against native, per (host, model, workload) and metric.

    ``diff`` = environment - native, ``ratio`` = environment / native, ``overhead_pct`` = (environment -
    native) / native x 100; ``p_value`` and ``ci_*`` from Welch (no CI below stats.MIN_N_INTERVAL runs).
    ``pool_hosts``: one comparison per (model, workload), pooling the runs of the hosts that ran both
    environments (a host that ran only one of them would confound host with environment); a ``hosts``
    column counts them.
    """
    columns = [*_PAIR_KEYS, "native", "environment", "metric", "n_native", "n_env", "native_mean", "env_mean",
               "sd_native", "sd_env", "diff", "ratio", "overhead_pct", "p_value", "ci_low", "ci_high", "df"]
    if pool_hosts:
        columns = [c if c != "host" else "hosts" for c in columns]
    measured = measured_runs(runs)
    present = [m for m in dict.fromkeys(metrics) if m in measured and measured[m].notna().any()]
    natives = measured[measured["environment_kind"] == "native"].groupby(list(_PAIR_KEYS))["environment"]
    if not present or natives.ngroups == 0:
        return pd.DataFrame(columns=columns)
    native = natives.agg(native_environment).rename("native").reset_index()
    stats = moments(long_table(measured, [*_PAIR_KEYS, "environment"], present), [*_PAIR_KEYS, "environment", "metric"])
    stats = stats.merge(native, on=list(_PAIR_KEYS))
    base = stats[stats["environment"] == stats["native"]].drop(columns=["environment"])
    other = stats[stats["environment"] != stats["native"]]
    pairs = other.merge(base, on=[*_PAIR_KEYS, "native", "metric"], suffixes=("_b", "_a"))
    if pairs.empty:
        return pd.DataFrame(columns=columns)
    keys = [*_PAIR_KEYS, "native", "environment", "metric"]
    side = {s: pairs[[*keys, *(f"{c}_{s}" for c in ("n", "mean", "var"))]].set_axis(
        [*keys, "n", "mean", "var"], axis=1) for s in ("a", "b")}
    if pool_hosts:  # pairs holds only hosts that ran both environments: pool each side over them
        keys = keys[1:]
        side = {s: pooled_moments(frame, keys) for s, frame in side.items()}
    result = compare_moments(side["a"], side["b"], level)
    labels = side["a"][keys].reset_index(drop=True)
    if pool_hosts:
        labels.insert(0, "hosts", side["a"]["hosts"].to_numpy())
    table = pd.concat([labels, result], axis=1).rename(columns={
        "n_a": "n_native", "n_b": "n_env", "mean_a": "native_mean", "mean_b": "env_mean", "sd_a": "sd_native",
        "sd_b": "sd_env", "change_pct": "overhead_pct"})
    order = {m: i for i, m in enumerate(present)}
    sort = [k for k in (*_PAIR_KEYS, "environment", "metric") if k in table]
    table = table.sort_values(sort, key=lambda c: c.map(order) if c.name == "metric" else c)
    return table[columns].reset_index(drop=True)


@dataclass(frozen=True)
class KvFit:
    """How well ``kv = fraction x (total - peak + tmp_kv)`` explains the runs."""

    runs: int
    assumed_fraction: float
    runs_with_recorded_fraction: int
    fitted_fraction: float
    residual_min: float
    residual_max: float
    residual_mean: float
    fitted_residual_max_abs: float
    runs_with_tmp_kv: int = 0  # runs whose record carries tmp_kv_gib; the others' budget leaves it out


#: Engines whose KV cache grows with the sequence instead of being preallocated from the free memory (ENGINES'
#: ``kv_grows``).
GROWING_KV_ENGINES = tuple(name for name, row in ENGINES.items() if row["kv_grows"])


def kv_budget(runs: pd.DataFrame) -> pd.Series:
    """Each run's KV-cache budget before the fraction, ``device_total - peak + tmp_kv`` (GiB); a run whose record
    has no ``tmp_kv_gib`` (older records, engines whose log does not print it) leaves that term out."""
    return (numbers(runs, "device_total_gib") - numbers(runs, "peak_memory_gib")
            + numbers(runs, "tmp_kv_gib").fillna(0.0))


def kv_residual(runs: pd.DataFrame, fraction: pd.Series | float) -> pd.Series:
    """Each run's measured KV cache minus what the budget formula expects of it, ``fraction x`` :func:`kv_budget`."""
    return numbers(runs, "kv_cache_gib") - fraction * kv_budget(runs)


def kv_decomposition(
    runs: pd.DataFrame, assumed_fraction: float = DEFAULT_KV_FRACTION
) -> tuple[pd.DataFrame, KvFit | None]:
    """Each run's KV cache against the budget ``fraction x (device_total - peak + tmp_kv)``.

    The fraction is the one the record states (load.kv_fraction), otherwise ``assumed_fraction`` (TensorRT-
    LLM's default 0.9). ``tmp_kv`` is the record's ``tmp_kv_gib`` (the temporary KV cache TensorRT-LLM made
    while profiling); a record without it (older records, engines whose log does not print it) leaves the term
    out, and its residual is larger by about ``fraction x tmp_kv`` (``tmp_kv_source`` says which).
    A least-squares fit through the origin says whether the assumed fraction holds.
    Residual = measured KV - expected KV: small where the formula holds (allocation granularity, the log's
    2-decimal rounding); the record's ``kv_budget_residual_gib`` (the engine's own line against the formula)
    is kept beside it as ``line_residual_gib``.
    """
    measured = measured_runs(runs)
    needed = ["peak_memory_gib", "kv_cache_gib", "device_total_gib"]
    if not all(c in measured for c in needed):
        return pd.DataFrame(), None
    usable = measured.dropna(subset=needed)
    if "engine" in usable:  # only engines that size their KV cache from free memory (TensorRT-LLM) fit it
        usable = usable[~usable["engine"].isin(GROWING_KV_ENGINES)]
    if usable.empty:
        return pd.DataFrame(), None
    fraction, recorded = kv_fraction(usable, assumed_fraction)
    tmp_kv = numbers(usable, "tmp_kv_gib")
    headroom = usable["device_total_gib"] - usable["peak_memory_gib"]
    budget = kv_budget(usable)
    expected = fraction * budget
    table = usable[[*CELL_KEYS, "run_id", "order_index", "peak_memory_gib", "device_total_gib",
                    "kv_cache_gib"]].assign(
        fraction=fraction,
        fraction_source=np.where(recorded, "recorded", "assumed"),
        headroom_gib=headroom,
        tmp_kv_gib=tmp_kv,
        tmp_kv_source=np.where(tmp_kv.notna(), "recorded", "not recorded"),
        kv_expected_gib=expected,
        residual_gib=kv_residual(usable, fraction),
        line_residual_gib=numbers(usable, "kv_budget_residual_gib"),
    )
    h, kv = budget.to_numpy(dtype=float), usable["kv_cache_gib"].to_numpy(dtype=float)
    fitted = float((h @ kv) / (h @ h)) if (h @ h) > 0 else math.nan
    fit = KvFit(
        runs=len(table),
        assumed_fraction=assumed_fraction,
        runs_with_recorded_fraction=int(recorded.sum()),
        fitted_fraction=fitted,
        residual_min=float(table["residual_gib"].min()),
        residual_max=float(table["residual_gib"].max()),
        residual_mean=float(table["residual_gib"].mean()),
        fitted_residual_max_abs=float(np.abs(kv - fitted * h).max()),
        runs_with_tmp_kv=int(tmp_kv.notna().sum()),
    )
    return table.sort_values([*CELL_KEYS, "order_index"]).reset_index(drop=True), fit


def kv_shift(env_comparison: pd.DataFrame, decomposition: pd.DataFrame) -> pd.DataFrame:
    """Why the KV cache changed: the change predicted by the peak-memory change (-fraction x delta peak)
    next to the measured change. When they agree, the KV cache shrank because peak memory grew."""
    if env_comparison.empty or decomposition.empty:
        return pd.DataFrame()
    peak = env_comparison[env_comparison["metric"] == "peak_memory_gib"]
    kv = env_comparison[env_comparison["metric"] == "kv_cache_gib"]
    keys = [*_PAIR_KEYS, "native", "environment"]
    merged = peak[[*keys, "diff"]].rename(columns={"diff": "peak_diff_gib"}).merge(
        kv[[*keys, "native_mean", "env_mean", "diff"]].rename(
            columns={"diff": "kv_diff_gib", "native_mean": "kv_native_gib", "env_mean": "kv_env_gib"}),
        on=keys,
    )
    fractions = decomposition.groupby(list(_PAIR_KEYS))["fraction"].mean().rename("fraction").reset_index()
    merged = merged.merge(fractions, on=list(_PAIR_KEYS), how="left")
    merged["kv_diff_predicted_gib"] = -merged["fraction"] * merged["peak_diff_gib"]
    merged["unexplained_gib"] = merged["kv_diff_gib"] - merged["kv_diff_predicted_gib"]
    merged["kv_ratio_native_over_env"] = merged["kv_native_gib"] / merged["kv_env_gib"]
    return merged


# --- baseline comparison (regression gate) ---------------------------------------------------------------


def cell_keys_for(baseline: pd.DataFrame, current: pd.DataFrame, match: str) -> tuple[str, ...]:
    """Per-host cells when both campaigns share hosts; otherwise pool hosts (a new fleet against the study
    measured on one machine compares like with like per model, environment and workload)."""
    if match == "host":
        return CELL_KEYS
    if match == "pooled":
        return ("model", "environment", "workload")
    shared = set(baseline[list(CELL_KEYS)].itertuples(index=False, name=None)) & set(
        current[list(CELL_KEYS)].itertuples(index=False, name=None)
    )
    return CELL_KEYS if shared else ("model", "environment", "workload")


def left_out(baseline: str | os.PathLike[str], current: str | os.PathLike[str]) -> dict[str, tuple[str, ...]]:
    """What each side of a comparison leaves out when one results tree lies inside the other: the inner tree
    is read only as itself, never also as part of the outer one, so that both sides never hold the same
    runs and the result is the one the two trees side by side would give. The same directory on both sides
    (also through a symlink) is a UsageError: there is nothing to compare."""
    b, c = Path(baseline).resolve(), Path(current).resolve()
    if b == c:
        raise UsageError(f"baseline {baseline} and current {current} are the same directory: nothing to compare")
    if c.is_relative_to(b):
        return {"baseline": (str(current),), "current": ()}
    if b.is_relative_to(c):
        return {"baseline": (), "current": (str(baseline),)}
    return {"baseline": (), "current": ()}


def direction(metric: str) -> int:
    """+1 when higher is better, -1 when lower is better, 0 when the metric is not judged. A serving point's
    metric goes by its scope (sparkfleet.serving.direction: throughput up, latency down)."""
    if metric in serving.SERVING_METRICS:
        return serving.direction(metric)
    return 1 if metric in HIGHER_IS_BETTER else -1 if metric in LOWER_IS_BETTER else 0


#: What a serving row of compare_campaigns adds to the run cell's keys: the engine and the point, named and by
#: its profile (sparkfleet.serving.PROFILE). A row with ``point`` NaN is a run-level comparison.
POINT_COLUMNS = ("engine", "client", "point", *serving.PROFILE)  # a workload measured by another client: not matched


def compare_campaigns(
    baseline: pd.DataFrame,
    current: pd.DataFrame,
    alpha: float = DEFAULT_ALPHA,
    threshold: float = DEFAULT_THRESHOLD,
    match: str = "auto",
    level: float = DEFAULT_LEVEL,
    baseline_points: pd.DataFrame | None = None,
    current_points: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per matched cell and judged metric: Welch comparison and a verdict.

    A change is *reported* only when it is significant (p < alpha) **and** larger than ``threshold``
    (relative); then it is a regression or an improvement by the metric's direction. A side with fewer
    than stats.MIN_N_INTERVAL runs (and not constant) is "undetermined". Anything else is "unchanged"
    (both small and noisy changes: a big change that is not significant is not evidence). ``outcome``,
    ``reason`` and ``required_n`` are ``classify``'s. Cells found on one side only get a row with verdict
    "only in baseline" / "only in current".

    ``baseline_points`` / ``current_points``: the campaigns' serving points (load.LoadResult.serving). Each
    serving point cell (the run cell, the engine and the point: POINT_COLUMNS) is compared per serving metric
    too, with the same rule, and a point measured on one side only of a matched cell gets an "only in" row.
    Every row, run-level and serving, is one family (Holm): the gate answers one question, "did anything
    regress?", so its error rate is held over everything it looked at. The POINT_COLUMNS are there only when
    a side has serving points (the table of a campaign without is what it was).
    """
    base, cur = measured_runs(baseline), measured_runs(current)
    keys = list(cell_keys_for(base, cur, match))
    with_points = any(p is not None and not p.empty for p in (baseline_points, current_points))
    labels = [*keys, *POINT_COLUMNS] if with_points else keys
    columns = [*labels, "metric", "n_baseline", "n_current", "baseline_mean", "current_mean", "sd_baseline",
               "sd_current", "diff", "ratio", "change_pct", "p_value", "ci_low", "ci_high", "df", "significant",
               "large", "outcome", "reason", "cv_pooled", "required_n", "p_family", "family_size", "verdict"]
    pairs = [_run_pairs(base, cur, keys)]
    unmatched = [_only_on_one_side(base, cur, keys)]
    if with_points:
        empty = serving.points_frame([])
        a, b = (_point_frame(p if p is not None else empty) for p in (baseline_points, current_points))
        pairs.append(_point_pairs(a, b, keys))
        unmatched.append(_points_on_one_side(a, b, keys, _cells(base, keys) & _cells(cur, keys)))
    found = [p for p in pairs if not p.empty]
    rows = pd.DataFrame([row for part in unmatched for row in part], columns=columns)
    if found:
        pairs_all = pd.concat(found, ignore_index=True)
        side = {s: pairs_all[[f"{c}_{s}" for c in ("n", "mean", "var")]].set_axis(["n", "mean", "var"], axis=1)
                for s in ("a", "b")}
        compared = compare_moments(side["a"], side["b"], level)
        judged = pd.concat([pairs_all.reindex(columns=[*labels, "metric"]),
                            _judge(compared, pairs_all["metric"], alpha, threshold)],
                           axis=1).rename(columns={"n_a": "n_baseline", "n_b": "n_current",
                                                   "mean_a": "baseline_mean", "mean_b": "current_mean",
                                                   "sd_a": "sd_baseline", "sd_b": "sd_current"})
        rows = judged[columns] if rows.empty else pd.concat([judged[columns], rows], ignore_index=True)
    return rows.reset_index(drop=True)


def _cells(runs: pd.DataFrame, keys: list[str]) -> set[tuple]:
    return set(runs[keys].itertuples(index=False, name=None))


def _only_on_one_side(base: pd.DataFrame, cur: pd.DataFrame, keys: list[str]) -> list[dict]:
    """An "only in baseline" / "only in current" row per run cell that one side lacks."""
    base_cells, cur_cells = _cells(base, keys), _cells(cur, keys)
    return [{**dict(zip(keys, cell, strict=True)), "metric": None,
             "verdict": "only in baseline" if cell in base_cells else "only in current"}
            for cell in sorted(base_cells ^ cur_cells)]


def _run_pairs(base: pd.DataFrame, cur: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per run cell and judged metric present on both sides: each side's n, mean and var (``*_a``, ``*_b``)."""
    metrics = [m for m in COMPARED_METRICS if direction(m) and m in base and m in cur
               and base[m].notna().any() and cur[m].notna().any()]
    if not metrics:
        return pd.DataFrame()
    a = moments(long_table(base, keys, metrics), [*keys, "metric"])
    b = moments(long_table(cur, keys, metrics), [*keys, "metric"])
    return a.merge(b, on=[*keys, "metric"], suffixes=("_a", "_b"))


def _point_frame(points: pd.DataFrame) -> pd.DataFrame:
    """The serving points that enter statistics (the serving report's: measured, what cannot be left out), with
    each point's name from its profile."""
    measured = serving.points_for_statistics(points)
    if measured.empty:
        return measured.assign(point=pd.Series(dtype="string"))
    return measured.assign(point=[point_name(*p) for p in measured[list(serving.PROFILE)].itertuples(
        index=False, name=None)])


def _point_pairs(base: pd.DataFrame, cur: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per serving point cell (``keys`` and POINT_COLUMNS) and metric present on both sides: each side's n, mean
    and var, the serving report's moments (stats.moments over the iterations)."""
    metrics = [m for m in serving.SERVING_METRICS if m in base and m in cur
               and base[m].notna().any() and cur[m].notna().any()]
    if not metrics or base.empty or cur.empty:
        return pd.DataFrame()
    cell = [*keys, *POINT_COLUMNS]
    a = moments(long_table(base, cell, metrics), [*cell, "metric"])
    b = moments(long_table(cur, cell, metrics), [*cell, "metric"])
    pairs = a.merge(b, on=[*cell, "metric"], suffixes=("_a", "_b"))
    order = {m: i for i, m in enumerate(serving.SERVING_METRICS)}  # the serving tables' order, not the alphabet's
    return pairs.sort_values([*keys, "engine", "metric", *serving.PROFILE], kind="stable",
                             key=lambda c: c.map(order) if c.name == "metric" else c).reset_index(drop=True)


def _points_on_one_side(base: pd.DataFrame, cur: pd.DataFrame, keys: list[str], shared: set[tuple]) -> list[dict]:
    """An "only in" row per serving point cell that one side lacks, within the run cells both sides have (a run
    cell on one side only is named once, by _only_on_one_side)."""
    cell = [*keys, *POINT_COLUMNS]
    base_cells, cur_cells = _cells(base, cell), _cells(cur, cell)
    return [{**dict(zip(cell, point, strict=True)), "metric": None,
             "verdict": "only in baseline" if point in base_cells else "only in current"}
            for point in sorted(base_cells ^ cur_cells, key=str) if point[:len(keys)] in shared]


def _judge(table: pd.DataFrame, metrics: pd.Series, alpha: float, threshold: float) -> pd.DataFrame:
    judged = classify(table, alpha, threshold, family=True)  # the regression gate: all its rows are one family
    better = np.sign(table["diff"].to_numpy()) == metrics.map(direction).to_numpy()
    verdict = np.select([judged["outcome"] == "different", judged["reason"] == "n-too-small"],
                        [np.where(better, "improvement", "regression"), "undetermined"], default="unchanged")
    return pd.concat([table, judged], axis=1).assign(verdict=verdict)
