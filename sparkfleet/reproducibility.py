"""Cross-host reproducibility: do several Sparks give the same numbers for the same work?

For each (model, environment, workload) measured on two or more hosts and each metric, a one-way
random-effects ANOVA splits the variance into within-host (run-to-run noise) and between-host (machine
differences) parts; each host's median is set against the fleet median, and hosts outside the tolerance
are named.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from sparkfleet.stats import measured_runs, metric_columns
from sparkfleet.thresholds import DEFAULT_TOLERANCE

FLEET_KEYS = ("model", "environment", "workload")


def variance_components(groups: list[np.ndarray]) -> dict[str, float]:
    """One-way random-effects ANOVA for one cell's per-host samples (see ``anova_from_moments``)."""
    groups = [g[~np.isnan(g)] for g in (np.asarray(g, dtype=float) for g in groups)]
    groups = [g for g in groups if g.size]
    frame = pd.DataFrame({
        "cell": 0,
        "n": [g.size for g in groups],
        "mean": [g.mean() for g in groups],
        "ss": [((g - g.mean()) ** 2).sum() for g in groups],
    })
    return anova_from_moments(frame, ["cell"]).drop(columns=["cell"]).iloc[0].to_dict()


def anova_from_moments(per_host: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One-way random-effects ANOVA for unbalanced groups, for many cells at once.

    ``per_host`` holds, per cell (``keys``) and host: n, mean and ss (sum of squared deviations).
    MSB = sum n_i (mean_i - grand)^2 / (k - 1), MSW = sum ss_i / (N - k);
    n0 = (N - sum n_i^2 / N) / (k - 1); sigma2_between = max(0, (MSB - MSW) / n0), sigma2_within = MSW;
    ICC = sigma2_between / (sigma2_between + sigma2_within) is the share of variance due to the host.
    """
    data = per_host.assign(weighted=per_host["n"] * per_host["mean"], n2=per_host["n"] ** 2)
    cell = data.groupby(keys, sort=True).agg(hosts=("n", "size"), n=("n", "sum"), total=("weighted", "sum"),
                                             n2=("n2", "sum"), ss=("ss", "sum"))
    grand = (cell["total"] / cell["n"]).rename("grand")
    data = data.join(grand, on=keys)
    between = (data["n"] * (data["mean"] - data["grand"]) ** 2).groupby([data[k] for k in keys]).sum()
    k, total = cell["hosts"].astype(float), cell["n"].astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ms_between = (between / (k - 1)).where(k >= 2)
        ms_within = (cell["ss"] / (total - k)).where(total - k >= 1)
        n0 = (total - cell["n2"] / total) / (k - 1)
        sigma2_between = ((ms_between - ms_within) / n0).clip(lower=0)
        denominator = sigma2_between + ms_within
        icc = (sigma2_between / denominator).where(denominator > 0)
        f = ms_between / ms_within
    # No spread inside hosts: any difference between hosts is certain (F infinite, p 0).
    f = f.where(ms_within > 0, np.where(ms_between > 0, np.inf, np.nan))
    p = pd.Series(sps.f.sf(f.to_numpy(dtype=float), k - 1, total - k), index=cell.index)
    p = p.where(ms_within > 0, np.where(ms_between > 0, 0.0, np.nan))
    out = pd.DataFrame({
        "hosts": cell["hosts"].astype("int64"), "n": cell["n"].astype("int64"),
        "ms_between": ms_between, "ms_within": ms_within, "sigma2_between": sigma2_between,
        "sigma2_within": ms_within, "sd_between": np.sqrt(sigma2_between), "sd_within": np.sqrt(ms_within),
        "icc": icc, "f": f, "p_value": p,
    })
    return out.reset_index()


def multi_host_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Measured runs of the (model, environment, workload) cells that ran on at least two hosts."""
    measured = measured_runs(runs)
    hosts = measured.groupby(list(FLEET_KEYS))["host"].transform("nunique")
    return measured[hosts >= 2]


def host_variance(runs: pd.DataFrame, metrics: list[str] | None = None) -> pd.DataFrame:
    """Within- vs between-host variance per fleet cell and metric."""
    shared = multi_host_runs(runs)
    metrics = metric_columns(runs) if metrics is None else metrics
    columns = [*FLEET_KEYS, "metric", "hosts", "n", "ms_between", "ms_within", "sigma2_between", "sigma2_within",
               "sd_between", "sd_within", "icc", "f", "p_value"]
    long = _long(shared, metrics)
    if long.empty:
        return pd.DataFrame(columns=columns)
    per_host = long.groupby([*FLEET_KEYS, "metric", "host"], sort=True)["value"].agg(
        n="count", mean="mean", var="var").reset_index()
    per_host["ss"] = per_host["var"].fillna(0) * (per_host["n"] - 1)
    table = anova_from_moments(per_host, [*FLEET_KEYS, "metric"])
    table = table[table["hosts"] >= 2]
    order = {m: i for i, m in enumerate(metrics)}
    table = table.sort_values([*FLEET_KEYS, "metric"], key=lambda c: c.map(order) if c.name == "metric" else c)
    return table[columns].reset_index(drop=True)


def _long(shared: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    if shared.empty or not metrics:
        return pd.DataFrame(columns=[*FLEET_KEYS, "host", "metric", "value"])
    long = shared.melt(id_vars=[*FLEET_KEYS, "host"], value_vars=metrics, var_name="metric", value_name="value")
    return long[long["value"].notna()]


def host_deviations(
    runs: pd.DataFrame, metrics: list[str] | None = None, tolerance: float = DEFAULT_TOLERANCE
) -> pd.DataFrame:
    """Each host's median against the fleet median (all hosts' runs of the cell pooled), in percent.

    ``outside`` is True where |deviation| exceeds the tolerance; those hosts are the ones to look at.
    """
    shared = multi_host_runs(runs)
    metrics = metric_columns(runs) if metrics is None else metrics
    columns = [*FLEET_KEYS, "metric", "host", "n", "host_median", "fleet_median", "deviation_pct", "outside"]
    long = _long(shared, metrics)
    if long.empty:
        return pd.DataFrame(columns=columns)
    fleet = long.groupby([*FLEET_KEYS, "metric"])["value"].median().rename("fleet_median")
    per_host = long.groupby([*FLEET_KEYS, "metric", "host"])["value"].agg(n="count", host_median="median")
    table = per_host.reset_index().merge(fleet.reset_index(), on=[*FLEET_KEYS, "metric"])
    with np.errstate(invalid="ignore", divide="ignore"):
        table["deviation_pct"] = np.where(
            table["fleet_median"] != 0,
            (table["host_median"] - table["fleet_median"]) / table["fleet_median"].abs() * 100,
            np.nan,
        )
    table["outside"] = table["deviation_pct"].abs() > tolerance * 100
    return table[columns]
