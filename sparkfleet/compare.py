"""Comparisons: each environment against native on one host, the KV-cache budget that explains memory
differences, and a campaign against a baseline (the regression gate).

Every difference comes with Welch's t-test (unequal variances) and a CI with Welch–Satterthwaite degrees
of freedom, so "the container uses 30 GiB more" carries its uncertainty and "throughput is identical" is a
statement about a p-value and an interval, not about two means that happen to look close.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sparkfleet.stats import CELL_KEYS, DEFAULT_LEVEL, measured_runs, moments, welch_from_moments

#: TensorRT-LLM's default ``free_gpu_memory_fraction``; used where a record does not say its kv_fraction.
DEFAULT_KV_FRACTION = 0.9
DEFAULT_ALPHA = 0.05
DEFAULT_THRESHOLD = 0.05

#: Which way is better. KV cache is memory the engine *could* give to requests, so more is better; peak
#: memory, latencies and times are costs. device_total_gib and kv_fraction are configuration, not results.
HIGHER_IS_BETTER = ("output_tok_s", "total_tok_s", "req_s", "kv_cache_gib", "gflops")
LOWER_IS_BETTER = (
    "latency_ms_avg",
    "latency_ms_p50",
    "latency_ms_p90",
    "latency_ms_p95",
    "latency_ms_p99",
    "ttft_ms",
    "tpot_ms",
    "peak_memory_gib",
    "matmul_s_mean",
)
#: The memory story first, then throughput, then latency (the order tables are shown in).
COMPARED_METRICS = (
    "peak_memory_gib",
    "kv_cache_gib",
    "output_tok_s",
    "total_tok_s",
    "req_s",
    "gflops",
    *LOWER_IS_BETTER[:7],  # latencies, ttft, tpot
    "matmul_s_mean",
)

_PAIR_KEYS = ("host", "model", "workload")


def _present(runs: pd.DataFrame, metrics: tuple[str, ...]) -> list[str]:
    return [m for m in dict.fromkeys(metrics) if m in runs and runs[m].notna().any()]


def _long(runs: pd.DataFrame, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    long = runs.melt(id_vars=keys, value_vars=metrics, var_name="metric", value_name="value")
    return long[long["value"].notna()]


def _paired(a: pd.DataFrame, b: pd.DataFrame, level: float) -> pd.DataFrame:
    """Welch columns for rows holding n/mean/var of side a (``*_a``) and side b (``*_b``)."""
    w = welch_from_moments(a["n"], a["mean"], a["var"], b["n"], b["mean"], b["var"], level)
    mean_a = a["mean"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(mean_a != 0, b["mean"].to_numpy(dtype=float) / mean_a, np.nan)
        change = np.where(mean_a != 0, w["diff"] / np.abs(mean_a) * 100, np.nan)
    return pd.DataFrame({"n_a": a["n"].to_numpy(), "n_b": b["n"].to_numpy(), "mean_a": mean_a,
                         "mean_b": b["mean"].to_numpy(dtype=float), "diff": w["diff"], "ratio": ratio,
                         "change_pct": change, "p_value": w["p_value"], "ci_low": w["ci_low"],
                         "ci_high": w["ci_high"], "df": w["df"]})


def native_environment(environments: pd.Series) -> str:
    """The environment compared against: kind native, preferring one literally named 'native'."""
    names = set(environments)
    return "native" if "native" in names else min(names)


def compare_environments(
    runs: pd.DataFrame, metrics: tuple[str, ...] = COMPARED_METRICS, level: float = DEFAULT_LEVEL
) -> pd.DataFrame:
    """Every non-native environment against native, per (host, model, workload) and metric.

    ``diff`` = environment - native, ``ratio`` = environment / native, ``overhead_pct`` = (environment -
    native) / native x 100; ``p_value`` and ``ci_*`` from Welch.
    """
    columns = [*_PAIR_KEYS, "native", "environment", "metric", "n_native", "n_env", "native_mean", "env_mean",
               "diff", "ratio", "overhead_pct", "p_value", "ci_low", "ci_high", "df"]
    measured = measured_runs(runs)
    present = _present(measured, metrics)
    natives = measured[measured["environment_kind"] == "native"].groupby(list(_PAIR_KEYS))["environment"]
    if not present or natives.ngroups == 0:
        return pd.DataFrame(columns=columns)
    native = natives.agg(native_environment).rename("native").reset_index()
    stats = moments(_long(measured, [*_PAIR_KEYS, "environment"], present), [*_PAIR_KEYS, "environment", "metric"])
    stats = stats.merge(native, on=list(_PAIR_KEYS))
    base = stats[stats["environment"] == stats["native"]].drop(columns=["environment"])
    other = stats[stats["environment"] != stats["native"]]
    pairs = other.merge(base, on=[*_PAIR_KEYS, "native", "metric"], suffixes=("_b", "_a"))
    if pairs.empty:
        return pd.DataFrame(columns=columns)
    side = {s: pairs[[f"{c}_{s}" for c in ("n", "mean", "var")]].set_axis(["n", "mean", "var"], axis=1)
            for s in ("a", "b")}
    result = _paired(side["a"], side["b"], level)
    table = pd.concat([pairs[[*_PAIR_KEYS, "native", "environment", "metric"]].reset_index(drop=True),
                       result], axis=1).rename(columns={
        "n_a": "n_native", "n_b": "n_env", "mean_a": "native_mean", "mean_b": "env_mean",
        "change_pct": "overhead_pct"})
    order = {m: i for i, m in enumerate(present)}
    table = table.sort_values([*_PAIR_KEYS, "environment", "metric"],
                              key=lambda c: c.map(order) if c.name == "metric" else c)
    return table[columns].reset_index(drop=True)


@dataclass(frozen=True)
class KvFit:
    """How well ``kv = fraction x (total - peak)`` explains the runs."""

    runs: int
    assumed_fraction: float
    runs_with_recorded_fraction: int
    fitted_fraction: float
    residual_min: float
    residual_max: float
    residual_mean: float
    fitted_residual_max_abs: float


#: Engines whose KV cache grows with the sequence instead of being preallocated from the free memory.
GROWING_KV_ENGINES = ("hf-generate", "matmul")


def kv_decomposition(
    runs: pd.DataFrame, assumed_fraction: float = DEFAULT_KV_FRACTION
) -> tuple[pd.DataFrame, KvFit | None]:
    """Each run's KV cache against the budget ``fraction x (device_total - peak)``.

    The fraction is the record's ``kv_fraction`` where present, otherwise ``assumed_fraction`` (TensorRT-
    LLM's default 0.9). A least-squares fit through the origin says whether the assumption holds.
    Residual = measured KV - expected KV; DESIGN: TensorRT-LLM adds a small tmp_kv term, so residuals are
    small and positive (the study's are 0.05-0.07 GiB).
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
    recorded = usable["kv_fraction"].notna() if "kv_fraction" in usable else pd.Series(False, usable.index)
    fraction = usable["kv_fraction"].where(recorded, assumed_fraction) if "kv_fraction" in usable else \
        pd.Series(assumed_fraction, usable.index)
    headroom = usable["device_total_gib"] - usable["peak_memory_gib"]
    expected = fraction * headroom
    table = usable[[*CELL_KEYS, "run_id", "order_index", "peak_memory_gib", "device_total_gib",
                    "kv_cache_gib"]].assign(
        fraction=fraction,
        fraction_source=np.where(recorded, "recorded", "assumed"),
        headroom_gib=headroom,
        kv_expected_gib=expected,
        residual_gib=usable["kv_cache_gib"] - expected,
    )
    h, kv = headroom.to_numpy(dtype=float), usable["kv_cache_gib"].to_numpy(dtype=float)
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

MATCH_MODES = ("auto", "host", "pooled")


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


def direction(metric: str) -> int:
    """+1 when higher is better, -1 when lower is better, 0 when the metric is not judged."""
    return 1 if metric in HIGHER_IS_BETTER else -1 if metric in LOWER_IS_BETTER else 0


def compare_campaigns(
    baseline: pd.DataFrame,
    current: pd.DataFrame,
    alpha: float = DEFAULT_ALPHA,
    threshold: float = DEFAULT_THRESHOLD,
    match: str = "auto",
    level: float = DEFAULT_LEVEL,
) -> pd.DataFrame:
    """Per matched cell and judged metric: Welch comparison and a verdict.

    A change is *reported* only when it is significant (p < alpha) **and** larger than ``threshold``
    (relative); then it is a regression or an improvement by the metric's direction. Anything else is
    "unchanged" (both small and noisy changes: a big change that is not significant is not evidence).
    Cells found on one side only get a row with verdict "only in baseline" / "only in current".
    """
    base, cur = measured_runs(baseline), measured_runs(current)
    keys = list(cell_keys_for(base, cur, match))
    metrics = [m for m in COMPARED_METRICS if direction(m) and m in base and m in cur
               and base[m].notna().any() and cur[m].notna().any()]
    columns = [*keys, "metric", "n_baseline", "n_current", "baseline_mean", "current_mean", "diff", "ratio",
               "change_pct", "p_value", "ci_low", "ci_high", "df", "significant", "large", "verdict"]
    base_cells = set(base[keys].itertuples(index=False, name=None))
    cur_cells = set(cur[keys].itertuples(index=False, name=None))
    unmatched = [{**dict(zip(keys, cell, strict=True)), "metric": None,
                  "verdict": "only in baseline" if cell in base_cells else "only in current"}
                 for cell in sorted(base_cells ^ cur_cells)]
    rows = pd.DataFrame(unmatched, columns=columns)
    if metrics:
        a = moments(_long(base, keys, metrics), [*keys, "metric"])
        b = moments(_long(cur, keys, metrics), [*keys, "metric"])
        pairs = a.merge(b, on=[*keys, "metric"], suffixes=("_a", "_b"))
        side = {s: pairs[[f"{c}_{s}" for c in ("n", "mean", "var")]].set_axis(["n", "mean", "var"], axis=1)
                for s in ("a", "b")}
        judged = pd.concat([pairs[[*keys, "metric"]].reset_index(drop=True),
                            _judge(_paired(side["a"], side["b"], level), pairs["metric"], alpha, threshold)],
                           axis=1).rename(columns={"n_a": "n_baseline", "n_b": "n_current",
                                                   "mean_a": "baseline_mean", "mean_b": "current_mean"})
        rows = judged[columns] if rows.empty else pd.concat([judged[columns], rows], ignore_index=True)
    return rows.reset_index(drop=True)


def _judge(table: pd.DataFrame, metrics: pd.Series, alpha: float, threshold: float) -> pd.DataFrame:
    significant = (table["p_value"] < alpha).fillna(False).astype(bool)
    large = (table["change_pct"].abs() > threshold * 100).fillna(False).astype(bool)
    better = np.sign(table["diff"].to_numpy()) == metrics.map(direction).to_numpy()
    verdict = np.where(significant & large, np.where(better, "improvement", "regression"), "unchanged")
    return table.assign(significant=significant.to_numpy(), large=large.to_numpy(), verdict=verdict)
