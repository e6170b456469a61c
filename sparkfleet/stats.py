"""Per-cell statistics a reviewer can check: n, mean, sample std, CV, median, range, confidence intervals,
robust outliers and a CV quality gate.

A *cell* is one (host, model, environment, workload). Only runs with ``status == "ok"`` that are not
warm-ups and that the readiness probe did not find suspect (:func:`kept_apart`) enter the numbers; every other
run is counted per cell so nothing vanishes silently.
Everything is computed per group with vectorised pandas/numpy so 100k runs take well under a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd
from scipy import stats as sps

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import (
    KV_BUDGET_METRICS,
    METRICS,
    STATUSES,
)
from sparkfleet.thresholds import DEFAULT_ALPHA

CELL_KEYS = ("host", "model", "environment", "workload")
DEFAULT_CV_GATE = 0.05
DEFAULT_LEVEL = 0.95
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
DEFAULT_POWER = 0.8

# --- small samples: the one rule every table, figure and verdict follows ---------------------------------
#: Fewest measured runs per cell (per side of a comparison) for which a t-interval is shown. With n = 2 the
#: 95% t-interval is mean ± 12.7·sd/√2: correct arithmetic, and wide enough to say nothing (for throughput
#: it routinely reaches below zero). Below this the reports say "n too small" and a comparison is
#: "undetermined", unless both sides are constant (an exact difference needs no interval).
MIN_N_INTERVAL = 3
#: Fewest runs for a percentile-bootstrap interval of the median. Resampling fewer values gives a handful
#: of distinct medians, and the interval's coverage is far below its nominal level.
MIN_N_BOOTSTRAP = 10


def interval_allowed(n):
    """Whether a t-interval is shown for ``n`` runs (an array gives an array)."""
    return np.asarray(n, dtype=float) >= MIN_N_INTERVAL if np.ndim(n) else n >= MIN_N_INTERVAL


def bootstrap_allowed(n):
    """Whether a bootstrap interval of the median is computed for ``n`` runs (an array gives an array)."""
    return np.asarray(n, dtype=float) >= MIN_N_BOOTSTRAP if np.ndim(n) else n >= MIN_N_BOOTSTRAP


def physical_range(metric: str) -> tuple[float, float]:
    """The values a metric can take: fractions lie in [0, 1], every other contract metric (throughput,
    latency, memory, time) is non-negative."""
    return (0.0, 1.0) if METRICS.get(metric) == "fraction" else (0.0, math.inf)


def range_violation(metric: str, low: float, high: float) -> str:
    """Why an interval [low, high] of ``metric`` leaves its physical range ("" when it does not). Intervals
    are never clipped: a bound outside the range says the normal approximation does not fit the sample."""
    lowest, highest = physical_range(metric)
    notes = []
    if not math.isnan(low) and low < lowest:
        notes.append(f"lower bound below {lowest:g}")
    if not math.isnan(high) and high > highest:
        notes.append(f"upper bound above {highest:g}")
    return ", ".join(notes)


@cache
def _z_sum(alpha: float, power: float) -> float:
    return float(sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(power))


def required_n(cv, effect, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER):
    """Runs per side for a two-sided test at ``alpha`` to detect a relative difference ``effect`` with
    probability ``power``, given the coefficient of variation ``cv`` of one run (normal approximation):

        n = 2 · ((z(1 − alpha/2) + z(power)) · cv / effect)²   per side, rounded up

    (cv = effect gives Lehr's 16 at alpha 0.05, power 0.8). Scalars give an int (None when cv or effect
    is not a positive number); arrays give a float array with NaN there.
    """
    z = _z_sum(alpha, power)
    if np.ndim(cv) == 0 and np.ndim(effect) == 0:
        cv, effect = float(cv), abs(float(effect))
        if not (math.isfinite(cv) and cv >= 0 and math.isfinite(effect) and effect > 0):
            return None
        return max(1, math.ceil(2 * (z * cv / effect) ** 2 - 1e-9))
    cv, effect = np.asarray(cv, dtype=float), np.abs(np.asarray(effect, dtype=float))
    with np.errstate(invalid="ignore", divide="ignore"):
        n = np.maximum(1, np.ceil(2 * (z * cv / effect) ** 2 - 1e-9))
    return np.where((cv >= 0) & (effect > 0) & np.isfinite(n), n, np.nan)


def mde(cv, n, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER):
    """The minimum detectable effect: the relative difference a two-sided test at ``alpha`` detects with
    probability ``power`` with ``n`` runs per side, given the CV of one run (``required_n`` inverted):

        mde = (z(1 − alpha/2) + z(power)) · cv · √(2 / n)

    Scalars give a float (None when cv is not a non-negative number or n < 1); arrays give NaN there.
    """
    z = _z_sum(alpha, power)
    if np.ndim(cv) == 0 and np.ndim(n) == 0:
        cv, n = float(cv), float(n)
        if not (math.isfinite(cv) and cv >= 0 and math.isfinite(n) and n >= 1):
            return None
        return z * cv * math.sqrt(2 / n)
    cv, n = np.asarray(cv, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = z * cv * np.sqrt(2 / n)
    return np.where((cv >= 0) & (n >= 1) & np.isfinite(out), out, np.nan)


#: Iglewicz & Hoaglin: |0.6745 (x - median) / MAD| > 3.5 marks a likely outlier.
OUTLIER_Z = 3.5
_MAD_TO_SIGMA = 0.6745
#: When more than half the values are equal the MAD is 0; the mean absolute deviation (scaled to sigma
#: for normal data) still separates a lone far value from the rest.
_MEANAD_TO_SIGMA = 1.253314


#: The run's readiness as the loader (load.py) puts it on the runs and the serving points: the record's
#: ``readiness.state``, "suspect" where any node's probe was (a multi-node run's workers too), and its reasons.
READINESS_STATE, READINESS_REASONS = "readiness_state", "readiness_reasons"
SUSPECT = "suspect"


def kept_apart(frame: pd.DataFrame) -> pd.Series:
    """Per row (a run, or a serving point carrying its run's columns): whether the readiness probe found the run
    suspect. Such a run is marked, not refused (``sparkfleet_readiness_policy: mark``), and kept out of every
    statistic: never averaged in (the host verdict, report/host_normal.py, compares it on its own)."""
    if READINESS_STATE not in frame:
        return pd.Series(False, index=frame.index, dtype=bool)
    return frame[READINESS_STATE].eq(SUSPECT).fillna(False).astype(bool)


def ok_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Status ok and not a warm-up, the suspect runs included: what the host verdict reads (it compares a host's
    suspect runs apart, report/host_normal.py). Every statistic reads :func:`measured_runs`."""
    warmup = runs["warmup"].fillna(False).astype(bool) if "warmup" in runs else False
    return runs[(runs["status"] == "ok") & ~warmup]


def measured_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that enter statistics: status ok, not a warm-up, not found suspect by the readiness probe."""
    ok = ok_runs(runs)
    return ok[~kept_apart(ok)]


def metric_columns(runs: pd.DataFrame) -> list[str]:
    """Contract metrics that have at least one value among the measured runs, in contract order; the KV
    budget figures (tmp_kv, the budget line's residual) are the memory decomposition's, not results."""
    measured = measured_runs(runs)
    return [m for m in METRICS if m not in KV_BUDGET_METRICS and m in measured and measured[m].notna().any()]


def status_counts(runs: pd.DataFrame, keys: tuple[str, ...] = CELL_KEYS) -> pd.DataFrame:
    """Per cell: all runs, each status, warm-ups, how many entered statistics and how many ok runs were left out
    of them because the readiness probe found them suspect (``n_suspect``)."""
    keys_list = list(keys)
    counts = pd.crosstab([runs[k] for k in keys_list], runs["status"])
    counts = counts.reindex(columns=list(STATUSES), fill_value=0).add_prefix("n_")
    counts.columns.name = None
    warmup = runs["warmup"].fillna(False).astype(bool)
    counts["n_warmup"] = warmup.groupby([runs[k] for k in keys_list]).sum().astype("int64")
    counts["n_runs"] = runs.groupby(keys_list).size()
    counts["n_measured"] = measured_runs(runs).groupby(keys_list).size()
    ok = ok_runs(runs)
    counts["n_suspect"] = kept_apart(ok).groupby([ok[k] for k in keys_list]).sum()
    counts = counts.fillna(0).astype("int64")
    return counts.reset_index()[keys_list + ["n_runs", "n_measured", *[f"n_{s}" for s in STATUSES], "n_warmup",
                                             "n_suspect"]]


@cache
def _bootstrap_median_positions(n: int, resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (in the sorted sample) of the two middle order statistics of each bootstrap resample.

    A resample's median only depends on which sorted positions land in its middle, so we draw the
    resample indices once per (n, seed) and reuse them for every cell of that size: identical to a plain
    seeded bootstrap, at O(resamples) per cell instead of O(resamples * n).
    """
    rng = np.random.default_rng([seed, n])
    draws = np.sort(rng.integers(0, n, size=(resamples, n)), axis=1)
    return draws[:, (n - 1) // 2], draws[:, n // 2]


#: Cells per bootstrap batch: bounds the (cells x resamples) matrix to about 16 MB.
_BOOTSTRAP_BATCH = 1000


def _grouped_bootstrap(
    long: pd.DataFrame, group_cols: list[str], level: float, resamples: int, seed: int
) -> pd.DataFrame:
    """Bootstrap median CIs for every group of a long (group..., value) frame at once."""
    if long.empty:
        return pd.DataFrame(columns=[*group_cols, "median_ci_low", "median_ci_high"])
    codes = long.groupby(group_cols, sort=True, observed=True).ngroup().to_numpy()
    order = np.lexsort((long["value"].to_numpy(dtype=float), codes))
    values = long["value"].to_numpy(dtype=float)[order]
    counts = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    low = np.full(len(counts), np.nan)
    high = np.full(len(counts), np.nan)
    # A constant sample's median is that constant in every resample.
    constant = (counts >= 2) & (values[starts] == values[starts + counts - 1])
    low[constant] = high[constant] = values[starts[constant]]
    quantiles = [(1 - level) / 2, (1 + level) / 2]
    for n in np.unique(counts[(counts >= 2) & ~constant]):
        lo, hi = _bootstrap_median_positions(int(n), resamples, seed)
        groups = np.flatnonzero((counts == n) & ~constant)
        # Each cell's sorted sample as a row: the resample medians are then two column gathers.
        samples = values[starts[groups][:, None] + np.arange(n)]
        for rows in np.array_split(np.arange(len(groups)), max(1, len(groups) // _BOOTSTRAP_BATCH)):
            block = samples[rows]
            medians = (block[:, lo] + block[:, hi]) / 2
            q = np.quantile(medians, quantiles, axis=1)
            low[groups[rows]], high[groups[rows]] = q[0], q[1]
    out = long.groupby(group_cols, sort=True, observed=True).size().index.to_frame(index=False)
    out["median_ci_low"], out["median_ci_high"] = low, high
    return out


def long_metrics(runs: pd.DataFrame, metrics: list[str], keys: tuple[str, ...]) -> pd.DataFrame:
    """Measured runs as (keys..., run_id, metric, value) rows, NaNs dropped."""
    measured = measured_runs(runs)
    rows, reps = len(measured), len(metrics)
    values = np.concatenate([measured[m].to_numpy(dtype=float) for m in metrics]) if metrics else np.empty(0)
    keep = ~np.isnan(values)
    # Categorical columns built from tiled codes: no string copies, and grouping by codes is fast.
    data: dict[str, object] = {}
    for column in [*keys, "run_id"]:
        labels = pd.Categorical(measured[column])
        data[column] = pd.Categorical.from_codes(np.tile(labels.codes, reps)[keep], labels.categories)
    data["metric"] = pd.Categorical.from_codes(np.repeat(np.arange(reps), rows)[keep], metrics)
    data["value"] = values[keep]
    return pd.DataFrame(data)


def cell_statistics(
    runs: pd.DataFrame,
    metrics: list[str] | None = None,
    keys: tuple[str, ...] = CELL_KEYS,
    cv_gate: float = DEFAULT_CV_GATE,
    level: float = DEFAULT_LEVEL,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    outliers: pd.DataFrame | None = None,
    long: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per (cell, metric): n, mean, std (ddof=1), cv, median, min, max, t CI of the mean (from
    MIN_N_INTERVAL runs on, NaN below), bootstrap CI of the median (from MIN_N_BOOTSTRAP runs on), outlier
    count and whether the CV passes the gate. ``outliers``: the result of ``flag_outliers`` and ``long`` the
    ``long_metrics`` frame, when the caller has them."""
    metrics = metric_columns(runs) if metrics is None else metrics
    group_cols = [*keys, "metric"]
    long = long_metrics(runs, metrics, keys) if long is None else long
    if long.empty:
        return pd.DataFrame(columns=[*group_cols, *STAT_COLUMNS])
    grouped = long.groupby(group_cols, sort=True, observed=True)["value"]
    table = grouped.agg(n="count", mean="mean", std="std", median="median", min="min", max="max").reset_index()
    n = table["n"].to_numpy(dtype=float)
    mean, std = table["mean"].to_numpy(), table["std"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        table["cv"] = np.where(mean != 0, std / np.abs(mean), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):  # Student-t CI of the mean; NaN where n < 2
        half = sps.t.ppf(0.5 + level / 2, np.where(n >= 2, n - 1, np.nan)) * std / np.sqrt(n)
    allowed = interval_allowed(n)  # below MIN_N_INTERVAL: no interval (the tables say "n too small")
    table["ci_low"], table["ci_high"] = np.where(allowed, mean - half, np.nan), np.where(allowed, mean + half, np.nan)
    counts = long.groupby(group_cols, sort=True, observed=True)["value"].transform("size")
    bootstrap = _grouped_bootstrap(long[bootstrap_allowed(counts.to_numpy())], group_cols, level, resamples, seed)
    table = table.merge(bootstrap, on=group_cols, how="left")
    outliers = flag_outliers(runs, metrics, keys, long=long) if outliers is None else outliers
    n_out = outliers.groupby(group_cols, observed=True).size().rename("n_outliers").reset_index()
    table = table.merge(n_out, on=group_cols, how="left")
    table["n_outliers"] = table["n_outliers"].fillna(0).astype("int64")
    # The gate needs a spread to judge; with one run it is undecided rather than passed.
    table["cv_ok"] = pd.array([None if math.isnan(c) else bool(c <= cv_gate) for c in table["cv"]], "boolean")
    table = table.astype({c: "str" for c in group_cols})  # plain labels for callers, not categories
    order = {m: i for i, m in enumerate(METRICS)}
    table = table.sort_values([*keys, "metric"], key=lambda s: s.map(order) if s.name == "metric" else s)
    return table[[*group_cols, *STAT_COLUMNS]].reset_index(drop=True)


#: The statistics columns of each cell (cell_statistics), in order.
STAT_COLUMNS = ("n", "mean", "std", "cv", "median", "min", "max", "ci_low", "ci_high", "median_ci_low",
                "median_ci_high", "n_outliers", "cv_ok")


def robust_z(values: np.ndarray) -> np.ndarray:
    """Modified z-scores 0.6745 (x - median) / MAD, with a mean-absolute-deviation fallback for MAD = 0."""
    x = np.asarray(values, dtype=float)
    deviation = x - np.nanmedian(x)
    mad = np.nanmedian(np.abs(deviation))
    if mad > 0:
        return _MAD_TO_SIGMA * deviation / mad
    mean_ad = np.nanmean(np.abs(deviation))
    if mean_ad > 0:
        return deviation / (_MEANAD_TO_SIGMA * mean_ad)
    return np.zeros_like(x)


def flag_outliers(
    runs: pd.DataFrame, metrics: list[str], keys: tuple[str, ...] = CELL_KEYS, threshold: float = OUTLIER_Z,
    long: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Runs whose value lies far from their cell's median (robust z beyond the threshold). Flagged, kept."""
    group_cols = [*keys, "metric"]
    long = long_metrics(runs, metrics, keys) if long is None else long
    if long.empty:
        return pd.DataFrame(columns=[*group_cols, "run_id", "value", "cell_median", "robust_z"])
    grouped = long.groupby(group_cols, sort=False, observed=True)["value"]
    median = grouped.transform("median")
    deviation = long["value"] - median
    by_cell = deviation.abs().groupby([long[c] for c in group_cols], sort=False, observed=True)
    mad, mean_ad = by_cell.transform("median"), by_cell.transform("mean")
    scale = (mad / _MAD_TO_SIGMA).where(mad > 0, mean_ad * _MEANAD_TO_SIGMA)
    z = (deviation / scale).where(scale > 0, 0.0)
    flagged = long.assign(cell_median=median, robust_z=z)[z.abs() > threshold]
    flagged = flagged.astype({c: "str" for c in [*group_cols, "run_id"]})
    return flagged[[*group_cols, "run_id", "value", "cell_median", "robust_z"]].reset_index(drop=True)


@dataclass(frozen=True)
class Welch:
    """Welch's unequal-variance comparison of ``b`` against ``a`` (difference = mean(b) - mean(a))."""

    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    diff: float
    se: float
    df: float
    t: float
    p_value: float
    ci_low: float
    ci_high: float


def welch(a: np.ndarray, b: np.ndarray, level: float = DEFAULT_LEVEL) -> Welch:
    """Welch t-test and CI of the difference with Welch–Satterthwaite degrees of freedom."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    n_a, n_b = a.size, b.size
    mean_a = float(a.mean()) if n_a else math.nan
    mean_b = float(b.mean()) if n_b else math.nan
    var_a = float(a.var(ddof=1)) if n_a > 1 else math.nan
    var_b = float(b.var(ddof=1)) if n_b > 1 else math.nan
    out = welch_from_moments(np.array([n_a]), np.array([mean_a]), np.array([var_a]),
                             np.array([n_b]), np.array([mean_b]), np.array([var_b]), level)
    return Welch(n_a, n_b, mean_a, mean_b, *(float(out[k][0]) for k in
                                             ("diff", "se", "df", "t", "p_value", "ci_low", "ci_high")))


def welch_from_moments(
    n_a: np.ndarray, mean_a: np.ndarray, var_a: np.ndarray,
    n_b: np.ndarray, mean_b: np.ndarray, var_b: np.ndarray, level: float = DEFAULT_LEVEL,
) -> dict[str, np.ndarray]:
    """Welch for many pairs at once from counts, means and sample variances (ddof=1).

    NaN where a side has fewer than two values. Both sides constant: the difference is exact, so p is 0
    when it is not zero and 1 when it is, and the CI collapses onto it.
    """
    n_a, n_b = np.asarray(n_a, dtype=float), np.asarray(n_b, dtype=float)
    diff = np.asarray(mean_b, dtype=float) - np.asarray(mean_a, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        va, vb = np.asarray(var_a, dtype=float) / n_a, np.asarray(var_b, dtype=float) / n_b
        se = np.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    return _t_test(n_a, n_b, diff, se, df, level)


def student_from_moments(
    n_a: np.ndarray, mean_a: np.ndarray, var_a: np.ndarray,
    n_b: np.ndarray, mean_b: np.ndarray, var_b: np.ndarray, level: float = DEFAULT_LEVEL,
) -> dict[str, np.ndarray]:
    """Student's pooled-variance t for many pairs, in welch_from_moments' keys: exact when both sides come from one
    normal distribution, which is the null of "this host is like the others". Welch's approximation is not: with 3
    runs against 9 it rejects at p < 0.001 about three times as often as it should (its estimated degrees of
    freedom fall towards 2), so a family of host comparisons held by Holm would still cry wolf."""
    n_a, n_b = np.asarray(n_a, dtype=float), np.asarray(n_b, dtype=float)
    diff = np.asarray(mean_b, dtype=float) - np.asarray(mean_a, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        df = n_a + n_b - 2
        pooled = ((n_a - 1) * np.asarray(var_a, dtype=float) + (n_b - 1) * np.asarray(var_b, dtype=float)) / df
        se = np.sqrt(pooled * (1 / n_a + 1 / n_b))
    return _t_test(n_a, n_b, diff, se, df, level)


def _t_test(n_a: np.ndarray, n_b: np.ndarray, diff: np.ndarray, se: np.ndarray, df: np.ndarray,
            level: float) -> dict[str, np.ndarray]:
    """The t statistic, p and CI of ``diff`` from its standard error and degrees of freedom (Welch's or
    Student's), in welch_from_moments' keys. Both sides constant: the difference is exact (p 0 or 1, the CI
    on it, Student's degrees of freedom); NaN where a side has fewer than two values."""
    with np.errstate(invalid="ignore", divide="ignore"):
        t = diff / se
        p = 2 * sps.t.sf(np.abs(t), df)
        half = sps.t.ppf(0.5 + level / 2, df) * se
    exact = se == 0
    df = np.where(exact, n_a + n_b - 2, df)
    t = np.where(exact, np.where(diff == 0, 0.0, np.copysign(np.inf, diff)), t)
    p = np.where(exact, np.where(diff == 0, 1.0, 0.0), p)
    half = np.where(exact, 0.0, half)
    too_few = (n_a < 2) | (n_b < 2)
    nan = np.full(diff.shape, np.nan)
    return {"diff": diff, "se": np.where(too_few, nan, se), "df": np.where(too_few, nan, df),
            "t": np.where(too_few, nan, t), "p_value": np.where(too_few, nan, p),
            "ci_low": np.where(too_few, nan, diff - half), "ci_high": np.where(too_few, nan, diff + half)}


def moments(long: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """n, mean and sample variance of ``value`` per group of a long frame."""
    return long.groupby(keys, sort=True)["value"].agg(n="count", mean="mean", var="var").reset_index()


# --- discrete figures: a distribution-free comparison ------------------------------------------------------
# A figure searched over a grid (the SLA capacity: doubling, then bisection) takes a few values and is often
# constant within a side. Welch's test calls two constant sides "exact" and any gap between them significant,
# so with no true difference two sides of 2-3 runs drawn from {8, 12} would differ in several campaigns in a
# hundred. The rank comparison below has an exact null distribution for any values, ties included.

@dataclass(frozen=True)
class RankShift:
    """``b`` against ``a`` by ranks: the Hodges–Lehmann shift (the median of every b_j − a_i), the two-sided
    exact permutation p of the Mann–Whitney statistic (ties counted one half), the distribution-free interval
    for the shift at ``level`` (None where these n cannot reach it), and the least p any data of these n can
    give (2 / C(n_a + n_b, n_a))."""

    n_a: int
    n_b: int
    shift: float
    p_value: float
    ci_low: float | None
    ci_high: float | None
    p_min: float


def _subset_sum_counts(weights: np.ndarray, size: int) -> np.ndarray:
    """counts[s]: how many subsets of ``size`` of the non-negative integer ``weights`` sum to s (float64)."""
    total = int(weights.sum())
    counts = np.zeros((size + 1, total + 1))
    counts[0, 0] = 1.0
    for i, w in enumerate(weights.astype(int), start=1):
        for k in range(min(i, size), 0, -1):
            counts[k, w:] += counts[k - 1, :total + 1 - w]
    return counts[size]


def rank_shift(a, b, level: float = DEFAULT_LEVEL) -> RankShift:
    """The exact rank comparison of ``b`` against ``a`` (NaN dropped); NaN p and shift where a side is empty.

    p: every split of the pooled values into sides of n_a and n_b is equally likely when nothing differs, so
    P(|R − E R| >= |r − E R|) over all C(N, n_b) splits of the midranks (R: b's midrank sum) is exact, ties
    included (subset-sum counting, no enumeration). Interval: [D(k), D(mn+1−k)] of the sorted differences, k
    the largest with P(U <= k − 1) <= (1 − level) / 2 under the untied null (Bauer 1972; closed, so it does
    not lose coverage on tied data)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    m, n = a.size, b.size
    if not m or not n:
        return RankShift(m, n, math.nan, math.nan, None, None, math.nan)
    splits = math.comb(m + n, n)
    doubled = (2 * sps.rankdata(np.concatenate([a, b]))).round().astype(int)  # midranks are halves
    counts = _subset_sum_counts(doubled, n)
    centre = n * (m + n + 1)  # twice E R
    observed = abs(int(doubled[m:].sum()) - centre)
    extreme = np.abs(np.arange(counts.size) - centre) >= observed
    p_value = float(min(1.0, counts[extreme].sum() / splits))
    differences = np.sort(np.subtract.outer(b, a).ravel())
    untied = np.cumsum(_subset_sum_counts(np.arange(1, m + n + 1), n)[n * (n + 1) // 2:]) / splits  # P(U <= u)
    k = int(np.searchsorted(untied, (1 - level) / 2, side="right"))  # P(U <= k - 1) <= (1 - level) / 2
    low, high = (float(differences[k - 1]), float(differences[-k])) if k >= 1 else (None, None)
    return RankShift(m, n, float(np.median(differences)), p_value, low, high, min(1.0, 2 / splits))
