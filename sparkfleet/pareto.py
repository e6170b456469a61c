"""The Pareto front of serving (issue 37): per-user against aggregate output throughput across concurrency, per
configuration, with the uncertainty of each coordinate over the iterations.

A *configuration* is (engine, environment, workload): the workload names the config (its factors, e.g.
``arena.vllm``). A *panel* is what its configurations are compared on: (model, depth, pp, tg) and the client's pair
of output rates (OUTPUT_PAIRS: llama-benchy's ``tg_tok_s`` / ``tg_req_tok_s``, AIPerf's ``out_tok_s`` /
``out_req_tok_s``; one client's figures are never set against another's). In a panel each configuration is a curve
over its concurrencies; each *point* (configuration, concurrency) has two coordinates, x the aggregate output
tok/s and y the per-user output tok/s, each from the serving section's own statistics over the iterations
(serving.cell_statistics, no second routine): the 95% interval the section shows (the median's bootstrap interval
from stats.MIN_N_BOOTSTRAP iterations, else the mean's t-interval from stats.MIN_N_INTERVAL, none below;
``ci95_of`` says which) and as the estimate the statistic that interval is of: the median where the interval is
the median's, else the mean. Median and mean are both kept. Both axes are
maximized.

The rule, exactly (:func:`front`), within one panel:

* **dominated**: point B is dominated by point A when A belongs to *another* configuration, both have an interval
  on both axes, and A's lower bound is at or above B's upper bound on both axes, strictly above on at least one:
  ``A.x_low >= B.x_high and A.y_low >= B.y_high and (A.x_low > B.x_high or A.y_low > B.y_high)``. Such a B is
  ``dominated`` and every such A is named (``dominated_by``). The front is over the whole (aggregate, per-user)
  plane: A may run at another concurrency than B.
* **on the front**: a point no other point of the panel (any configuration, any concurrency) beats on the
  estimates (at least as high on both axes, higher on one) and that is not dominated.
* **not separated**: every other point. It lies behind the front on the estimates, but no other configuration is
  apart from it on both axes by the intervals (or it or they have none): it is never called dominated.

A configuration is named dominated at a load (a concurrency) only where its point there is ``dominated``.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import (
    SERVING_METRICS,
)
from sparkfleet import serving, stats

#: The output rates compared, per client: (aggregate, per user), from the contract's registry.
OUTPUT_PAIRS = tuple((SERVING_METRICS[m].aggregate or "", m) for m in ("tg_req_tok_s", "out_req_tok_s"))
CONFIGURATION = ("engine", "environment", "workload")
PANEL = ("model", "depth", "pp", "tg", "aggregate_metric", "per_user_metric")
#: What makes a cell of the front's statistics: the serving point cell with the workload.
CELL_KEYS = ("engine", "environment", "workload", "model", *serving.PROFILE)
FRONT, DOMINATED, NOT_SEPARATED = "on the front", "dominated", "not separated"
COORDINATES = ("aggregate", "aggregate_low", "aggregate_high", "aggregate_median", "aggregate_mean", "per_user",
               "per_user_low", "per_user_high", "per_user_median", "per_user_mean")
COLUMNS = (*PANEL, "configuration", *CONFIGURATION, "concurrency", "n", *COORDINATES, "ci95_of", "status",
           "on_front", "dominated_by")
SUMMARY_COLUMNS = (*PANEL, "configuration", "points", "front_at", "dominated_at", "dominated_by",
                   "not_separated_at", "dominated_everywhere")
NO_WORKLOAD = "(no workload)"


def label(engine: Any, environment: Any, workload: Any) -> str:
    """A configuration in words: "engine / environment / workload"."""
    return f"{engine} / {environment} / {workload}"


def curves(points: pd.DataFrame, level: float = stats.DEFAULT_LEVEL, resamples: int = stats.DEFAULT_RESAMPLES,
           seed: int = stats.DEFAULT_SEED) -> pd.DataFrame:
    """From the serving points table (sparkfleet.serving, the one reader's): one row per panel, configuration and
    concurrency with both coordinates (estimate, 95% interval, median, mean) where both were measured, in COLUMNS
    without the front's (status, on_front, dominated_by: :func:`front`). Measured points only, as every serving
    statistic (serving.screened_points); a caller leaves out what must not compete (the report: the A/A twins)."""
    empty = pd.DataFrame(columns=[c for c in COLUMNS if c not in ("status", "on_front", "dominated_by")])
    if points.empty:
        return empty
    points = points.assign(workload=points["workload"].astype("string").fillna(NO_WORKLOAD))
    wanted = tuple(m for pair in OUTPUT_PAIRS for m in pair)
    cells = serving.cell_statistics(points, level, resamples, seed, keys=CELL_KEYS, metrics=wanted)
    if cells.empty:
        return empty
    keys = list(CELL_KEYS)
    taken = ["n", "median", "mean", "ci95_low", "ci95_high", "ci95_of"]
    frames = []
    for aggregate, per_user in OUTPUT_PAIRS:
        x = cells[cells["metric"] == aggregate][[*keys, *taken]]
        y = cells[cells["metric"] == per_user][[*keys, *taken]]
        both = x.merge(y, on=keys, suffixes=("_x", "_y"))
        for side in ("x", "y"):  # the statistic the interval is of: the median's bootstrap, else the mean
            bootstrap = both[f"ci95_of_{side}"].astype(str).str.startswith("median")
            both[f"estimate_{side}"] = both[f"median_{side}"].where(bootstrap, both[f"mean_{side}"])
        if both.empty:
            continue
        frames.append(pd.DataFrame({
            **{k: both[k] for k in ("model", "depth", "pp", "tg")},
            "aggregate_metric": aggregate, "per_user_metric": per_user,
            "configuration": [label(*r) for r in zip(*(both[k] for k in CONFIGURATION), strict=True)],
            **{k: both[k].astype(str) for k in CONFIGURATION}, "concurrency": both["concurrency"],
            "n": both[["n_x", "n_y"]].min(axis=1).astype("int64"),
            **{f"{axis}{column}": both[f"{source}_{side}"] for axis, side in (("aggregate", "x"), ("per_user", "y"))
               for column, source in (("", "estimate"), ("_low", "ci95_low"), ("_high", "ci95_high"),
                                      ("_median", "median"), ("_mean", "mean"))},
            "ci95_of": [a if a == b else f"{a or '–'} / {b or '–'}" for a, b in
                        zip(both["ci95_of_x"], both["ci95_of_y"], strict=True)]}))
    if not frames:
        return empty
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values([*PANEL, "configuration", "concurrency"], kind="stable").reset_index(drop=True)


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def separated(a: Any, b: Any) -> bool:
    """Whether point ``a`` dominates point ``b`` by the intervals (the module's rule: a's lower bounds at or above
    b's upper bounds on both axes, one strictly); False where either lacks an interval on an axis."""
    bounds = (a.aggregate_low, a.per_user_low, b.aggregate_high, b.per_user_high)
    if not _finite(*bounds):
        return False
    x, y = a.aggregate_low - b.aggregate_high, a.per_user_low - b.per_user_high
    return x >= 0 and y >= 0 and (x > 0 or y > 0)


def beaten(a: Any, b: Any) -> bool:
    """Whether ``a``'s estimates beat ``b``'s: at least as high on both axes, higher on one."""
    return (a.aggregate >= b.aggregate and a.per_user >= b.per_user
            and (a.aggregate > b.aggregate or a.per_user > b.per_user))


def point_name(row: Any) -> str:
    return f"{row.configuration} at concurrency {int(row.concurrency)}"


def front(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (:func:`curves`' rows, or any with PANEL, configuration, concurrency and COORDINATES) with
    ``status`` (FRONT, DOMINATED or NOT_SEPARATED, by the module's rule), ``on_front`` and ``dominated_by`` (the
    dominating points, "configuration at concurrency c", "; "-joined; "" when none) per panel."""
    out = table.copy().reset_index(drop=True)
    status, by = [NOT_SEPARATED] * len(out), [""] * len(out)
    for _, group in out.groupby(list(PANEL), sort=False, dropna=False):
        rows = list(group.itertuples())
        for b in rows:
            dominators = [a for a in rows if a.configuration != b.configuration and separated(a, b)]
            if dominators:
                status[b.Index] = DOMINATED
                by[b.Index] = "; ".join(point_name(a) for a in dominators)
            elif not any(beaten(a, b) for a in rows if a.Index != b.Index):
                status[b.Index] = FRONT
    out["status"], out["dominated_by"] = status, by
    out["on_front"] = out["status"] == FRONT
    return out


def pareto_table(points: pd.DataFrame, level: float = stats.DEFAULT_LEVEL,
                 resamples: int = stats.DEFAULT_RESAMPLES, seed: int = stats.DEFAULT_SEED) -> pd.DataFrame:
    """:func:`curves` marked by :func:`front`: COLUMNS, one row per panel, configuration and concurrency."""
    marked = front(curves(points, level, resamples, seed))
    return marked[list(COLUMNS)]


def _levels(values: pd.Series) -> str:
    return ", ".join(str(int(c)) for c in sorted(values))


def by_configuration(table: pd.DataFrame) -> pd.DataFrame:
    """Per panel and configuration (SUMMARY_COLUMNS): the concurrencies on the front, dominated (with the
    configurations that dominate it there, each once, " and "-joined) and not separated;
    ``dominated_everywhere`` when every point it has in the panel is dominated."""
    rows = []
    for keys, group in table.groupby([*PANEL, "configuration"], sort=True, dropna=False):
        dominated = group[group["status"] == DOMINATED]
        names = [n.rsplit(" at concurrency ", 1)[0] for text in dominated["dominated_by"] for n in text.split("; ")]
        rows.append({**dict(zip([*PANEL, "configuration"], keys, strict=True)), "points": len(group),
                     "front_at": _levels(group.loc[group["status"] == FRONT, "concurrency"]),
                     "dominated_at": _levels(dominated["concurrency"]),
                     "dominated_by": " and ".join(dict.fromkeys(sorted(names))),
                     "not_separated_at": _levels(group.loc[group["status"] == NOT_SEPARATED, "concurrency"]),
                     "dominated_everywhere": len(dominated) == len(group)})
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


__all__ = ["COLUMNS", "DOMINATED", "FRONT", "NOT_SEPARATED", "OUTPUT_PAIRS", "PANEL", "SUMMARY_COLUMNS",
           "by_configuration", "curves", "front", "pareto_table", "separated"]
