"""Cross-host reproducibility: do several Sparks give the same numbers for the same work?

For each (model, environment, workload) measured on two or more hosts and each metric, a one-way
random-effects ANOVA splits the variance into within-host (run-to-run noise) and between-host (machine
differences) parts; each host is set against the rest of the fleet (leave-one-out) by the rule of every
other verdict (sparkfleet.compare.classify): *out* only when its difference is significant and beyond the
tolerance, *same* when the whole 95% interval lies inside it, otherwise undetermined with the runs that
would tell; an out host is named with the host facts in which it differs from the others.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from sparkfleet.compare import classify, compare_sides, long_table
from sparkfleet.stats import DEFAULT_LEVEL, measured_runs, metric_columns
from sparkfleet.thresholds import DEFAULT_ALPHA, DEFAULT_TOLERANCE

FLEET_KEYS = ("model", "environment", "workload")


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
    long = long_table(shared, [*FLEET_KEYS, "host"], metrics)
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


def host_deviations(
    runs: pd.DataFrame, metrics: list[str] | None = None, tolerance: float = DEFAULT_TOLERANCE,
    alpha: float = DEFAULT_ALPHA, level: float = DEFAULT_LEVEL, facts: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Each host against the rest of the fleet, per shared cell and metric, by the rule of every other
    verdict (sparkfleet.compare.classify, ``tolerance`` as its threshold).

    First every pair of hosts is compared: a host that is *different* (significant and beyond the
    tolerance) from a strict majority of the other hosts, all in one direction, is a suspect. Then each
    host is compared with the pooled runs of the other hosts that are not suspects (all other hosts when
    every one is): Student's pooled-variance t and CI of the difference of means (the null: the host's runs
    come from its peers' distribution; Welch's approximation is liberal for 3 runs against 6 or 9). So one
    slow host does not make the healthy ones look out (leave-one-out against a fleet that includes the slow
    host would), and a host between two others is not out because it differs from both in opposite directions.

    ``outcome`` "different" (the host is *out*, ``outside``) only when that comparison is significant
    (p < alpha) and beyond the tolerance; "same" when significant but small or when the whole CI lies
    inside ±tolerance; otherwise "undetermined", with ``required_n`` the runs per side that would tell.
    ``deviation_pct`` (with ``ci_low_pct``/``ci_high_pct``) is the host's mean against the reference's,
    in percent; ``host_median`` and ``fleet_median`` (all hosts pooled) are for reference. ``hardware``
    names the host facts (``facts``: host x fact, sparkfleet.report.host_facts) in which this host differs from
    every other host, e.g. ``vbios 96.00.B1 (others: 96.00.A5)``: the first suspects of a difference.
    """
    shared = multi_host_runs(runs)
    metrics = metric_columns(runs) if metrics is None else metrics
    long = long_table(shared, [*FLEET_KEYS, "host"], metrics)
    if long.empty:
        return pd.DataFrame(columns=DEVIATION_COLUMNS)
    keys = [*FLEET_KEYS, "metric"]
    per_host = long.groupby([*keys, "host"], sort=True)["value"].agg(
        n="count", mean="mean", var="var", host_median="median").reset_index()
    cell = long.groupby(keys).agg(hosts=("host", "nunique"), fleet_median=("value", "median")).reset_index()
    pairs = per_host.merge(per_host, on=keys, suffixes=("", "_o"))
    pairs = pairs[pairs["host"] != pairs["host_o"]].reset_index(drop=True)
    # 1. pairs: this host (b) against each other host (a)
    verdict = classify(compare_sides(pairs, "_o", "", level, same_distribution=True), alpha=alpha,
                       threshold=tolerance)
    different = verdict["outcome"].to_numpy() == "different"
    higher = (pairs["mean"] > pairs["mean_o"]).to_numpy()
    votes = pairs[keys + ["host"]].assign(up=different & higher, down=different & ~higher, others=1)
    votes = votes.groupby([*keys, "host"], sort=True)[["up", "down", "others"]].sum().reset_index()
    votes["suspect"] = np.maximum(votes["up"], votes["down"]) * 2 > votes["others"]
    # 2. each host against the pooled runs of the other hosts that are not suspects (all others if none is)
    pairs = pairs.merge(votes[[*keys, "host", "suspect"]].rename(columns={"host": "host_o",
                                                                          "suspect": "suspect_o"}),
                        on=[*keys, "host_o"])
    unmarked = ~pairs["suspect_o"].astype(bool)
    some_unmarked = unmarked.groupby([pairs[k] for k in [*keys, "host"]]).transform("any")
    reference = _pooled(pairs[unmarked | ~some_unmarked], [*keys, "host"])
    t = per_host.merge(reference, on=[*keys, "host"]).merge(cell, on=keys)
    t = t.merge(votes[[*keys, "host", "suspect"]], on=[*keys, "host"])
    paired = compare_sides(t, "_ref", "", level, same_distribution=True)  # a host like the others
    # one family: every host x cell x metric behind the "out" verdict (Holm, compare.FAMILY_METHOD); the votes
    # of step 1 only choose the reference and are not held to it
    judged = classify(paired, alpha=alpha, threshold=tolerance, family=True)
    scale = t["mean_ref"].abs().where(t["mean_ref"] != 0)
    t = t.assign(host_mean=t["mean"], rest_mean=t["mean_ref"], n_rest=t["n_ref"].astype("int64"),
                 rest_hosts=t["hosts_ref"], deviation_pct=paired["change_pct"],
                 ci_low_pct=paired["ci_low"] / scale * 100, ci_high_pct=paired["ci_high"] / scale * 100,
                 p_value=paired["p_value"], **{c: judged[c].to_numpy() for c in ("outcome", "reason", "required_n",
                                                                                  "cv_pooled", "p_family",
                                                                                  "family_size")})
    t["outside"] = t["outcome"] == "different"
    t["hardware"] = [hardware_difference(facts, h) for h in t["host"]] if facts is not None else ""
    return t[DEVIATION_COLUMNS].reset_index(drop=True)


def _pooled(pairs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """n, mean and sample variance of the pooled runs of the ``_o`` hosts per group (from their moments)."""
    data = pairs.assign(weighted=pairs["n_o"] * pairs["mean_o"],
                        ss=pairs["var_o"].fillna(0) * (pairs["n_o"] - 1))
    g = data.groupby(keys, sort=True)
    out = g.agg(n_ref=("n_o", "sum"), total=("weighted", "sum"), ss=("ss", "sum"),
                hosts_ref=("host_o", lambda h: ", ".join(sorted(map(str, h))))).reset_index()
    out["mean_ref"] = out["total"] / out["n_ref"]
    data = data.merge(out[[*keys, "mean_ref"]], on=keys)
    between = (data["n_o"] * (data["mean_o"] - data["mean_ref"]) ** 2).groupby(
        [data[k] for k in keys], sort=True).sum().rename("between").reset_index()
    out = out.merge(between, on=keys)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["var_ref"] = ((out["ss"] + out["between"]) / (out["n_ref"] - 1)).where(out["n_ref"] >= 2)
    return out[[*keys, "n_ref", "mean_ref", "var_ref", "hosts_ref"]]


DEVIATION_COLUMNS = [*FLEET_KEYS, "metric", "host", "hosts", "n", "n_rest", "rest_hosts", "suspect", "host_median",
                     "fleet_median", "host_mean", "rest_mean", "deviation_pct", "ci_low_pct", "ci_high_pct",
                     "p_value", "p_family", "family_size", "outcome", "reason", "required_n", "cv_pooled", "outside",
                     "hardware"]


def hardware_difference(facts: pd.DataFrame | None, host: str) -> str:
    """The facts in which ``host`` differs from every other host (its value found on none of them), as
    ``fact value (others: value, ...)`` joined by "; "; "" when none does or nothing is known."""
    if facts is None or facts.empty or host not in facts.index or len(facts.index) < 2:
        return ""
    parts = []
    for column in facts.columns:
        mine = facts.at[host, column]
        others = [v for h, v in facts[column].items() if h != host and not _missing(v)]
        if _missing(mine) or not others or str(mine) in {str(v) for v in others}:
            continue
        parts.append(f"{column} {mine} (others: {', '.join(sorted({str(v) for v in others}))})")
    return "; ".join(parts)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))
