"""Serving runs (issue 25, docs/serving-contract): the record's ``serving`` section as a table of points, and
per point the statistics over iterations.

A serving run drives one engine server through every point of its profile (depth x concurrency x pp x tg);
the record keeps one entry per point with its metrics, the client's raw values and a status. The loader
(sparkfleet.load) explodes these into the *points table*: one row per run x point, with the run's identity,
the point's profile and status, each point metric and the raw samples as JSON text. A *point cell* is
(engine, environment, model, depth, concurrency, pp, tg): its statistics over the iterations are the
report's own (stats.cell_statistics), from the measured points only: run status ok, not a warm-up, point ok.
A failed point never enters a statistic and is named by ``failed_points``.

Aggregate (``*_tok_s``, all concurrent requests together) and per-user (``*_req_tok_s``, per request) figures
are separate metrics with separate scopes (SCOPES): nothing here mixes them.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from sparkfleet import stats

#: The point metrics (llama-benchy's figures; docs/serving-contract.md, "Record").
SERVING_METRICS = ("pp_tok_s", "tg_tok_s", "peak_tg_tok_s", "pp_req_tok_s", "tg_req_tok_s", "ttfr_ms",
                   "e2e_ttft_ms", "est_ppt_ms")
AGGREGATE, PER_USER, LATENCY = "aggregate", "per user", "latency"
#: Each metric's scope: a table or a figure shows one scope only.
SCOPES = {"pp_tok_s": AGGREGATE, "tg_tok_s": AGGREGATE, "peak_tg_tok_s": AGGREGATE,
          "pp_req_tok_s": PER_USER, "tg_req_tok_s": PER_USER,
          "ttfr_ms": LATENCY, "e2e_ttft_ms": LATENCY, "est_ppt_ms": LATENCY}
UNITS = {m: "ms" if SCOPES[m] == LATENCY else "tok/s" for m in SERVING_METRICS}
WORDS = {
    "pp_tok_s": "prompt throughput (aggregate)",
    "tg_tok_s": "generation throughput (aggregate)",
    "peak_tg_tok_s": "peak generation throughput (aggregate)",
    "pp_req_tok_s": "prompt throughput (per user)",
    "tg_req_tok_s": "generation throughput (per user)",
    "ttfr_ms": "time to first response",
    "e2e_ttft_ms": "end-to-end time to first token",
    "est_ppt_ms": "estimated prompt processing time",
}


def direction(metric: str) -> int:
    """+1: higher is better (throughput), -1: lower is better (latency)."""
    return -1 if SCOPES.get(metric) == LATENCY else 1


PROFILE = ("depth", "concurrency", "pp", "tg")
#: One point cell: its statistics pool the iterations (and the hosts that ran it).
POINT_KEYS = ("engine", "environment", "model", *PROFILE)
RUN_COLUMNS = ("run_id", "campaign", "host", "model", "environment", "workload", "iteration", "environment_kind",
               "engine", "status", "reason", "warmup", "aa_group", "aa_member", "prefix_caching")
POINT_COLUMNS = (*RUN_COLUMNS, "point", *PROFILE, "point_status", "point_reason", "point_order", "point_duration_s",
                 *SERVING_METRICS, *(f"samples_{m}" for m in SERVING_METRICS), "raw", "record_dir")
POINT_OK = "ok"


def has_points(data: dict[str, Any]) -> bool:
    """Whether a record is a serving run (a ``serving`` section holding a list of points)."""
    serving = data.get("serving")
    return isinstance(serving, dict) and isinstance(serving.get("points"), list)


def screen_status(data: dict[str, Any]) -> dict[str, Any]:
    """A serving run marked ok with no ok point is read as failed (the contract's rule: none ok, failed), with
    a reason naming it; every other record is returned as it is."""
    if data.get("status") != "ok" or not has_points(data):
        return data
    points = [p for p in data["serving"]["points"] if isinstance(p, dict)]
    if any(p.get("status") == POINT_OK for p in points):
        return data
    named = "; ".join(f"{p.get('point', '?')}: {p.get('reason') or p.get('status')}" for p in points[:5])
    return {**data, "status": "failed",
            "reason": f"serving: no point is ok ({len(points)} point(s){': ' + named if named else ''})"}


def _number(value: Any) -> float:
    """A metric value as a float; NaN for anything that is not a finite non-negative number (never a figure)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return math.nan
    return float(value)


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def point_rows(data: dict[str, Any], record_dir: str) -> list[dict[str, Any]]:
    """One row per point of a serving record (POINT_COLUMNS); [] for any other record."""
    if not has_points(data):
        return []
    serving = data["serving"]
    environment = (data.get("memory") or {}).get("environment") if isinstance(data.get("memory"), dict) else None
    environment = environment if isinstance(environment, dict) else {}
    params = data.get("workload_params") if isinstance(data.get("workload_params"), dict) else {}
    run = {key: data.get(key) for key in RUN_COLUMNS[:12]}
    run["engine"] = serving.get("engine") or data.get("engine")
    run |= {"aa_group": environment.get("aa_group"), "aa_member": environment.get("aa_member"),
            "prefix_caching": params.get("prefix_caching")}
    rows = []
    for point in serving["points"]:
        if not isinstance(point, dict):
            continue
        metrics = point.get("metrics") if isinstance(point.get("metrics"), dict) else {}
        samples = point.get("samples") if isinstance(point.get("samples"), dict) else {}
        row = dict(run)
        row |= {"point": point.get("point"), **{k: _integer(point.get(k)) for k in PROFILE},
                "point_status": point.get("status"), "point_reason": point.get("reason"),
                "point_order": _integer(point.get("order")),
                "point_duration_s": _number(point.get("duration_s"))}
        row |= {m: _number(metrics.get(m)) for m in SERVING_METRICS}
        row |= {f"samples_{m}": json.dumps(samples[m]) if m in samples else None for m in SERVING_METRICS}
        row |= {"raw": point.get("raw"), "record_dir": record_dir}
        rows.append(row)
    return rows


def points_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The points table with fixed columns and dtypes (an empty one for no rows)."""
    frame = pd.DataFrame.from_records(rows, columns=list(POINT_COLUMNS)) if rows else \
        pd.DataFrame(columns=list(POINT_COLUMNS))
    types = {m: "float64" for m in (*SERVING_METRICS, "point_duration_s")}
    types |= {k: "Int64" for k in (*PROFILE, "point_order")} | {"iteration": "Int64"}
    frame = frame.astype(types)
    frame["warmup"] = frame["warmup"].astype("boolean")
    return frame


def measured_points(points: pd.DataFrame) -> pd.DataFrame:
    """The points that enter statistics: the run ok and not a warm-up, the point ok, its profile complete."""
    if points.empty:
        return points
    warmup = points["warmup"].fillna(False).astype(bool)
    complete = points[list(PROFILE)].notna().all(axis=1)
    return points[(points["status"] == "ok") & ~warmup & (points["point_status"] == POINT_OK) & complete]


def failed_points(points: pd.DataFrame) -> pd.DataFrame:
    """The points left out of the statistics because the point itself failed (or has no status), each with its
    run and reason; points of a run that is not ok are counted with the run (the report names those runs)."""
    if points.empty:
        return points.assign(why=pd.Series(dtype="string"))
    warmup = points["warmup"].fillna(False).astype(bool)
    bad = points[(points["status"] == "ok") & ~warmup & (points["point_status"] != POINT_OK)]
    why = bad["point_reason"].astype("string").fillna(bad["point_status"].astype("string")).fillna("no status")
    return bad.assign(why=why)[["host", "run_id", "engine", "environment", "model", "iteration", "point",
                                "point_status", "why"]].reset_index(drop=True)


def metrics_present(points: pd.DataFrame) -> list[str]:
    measured = measured_points(points)
    return [m for m in SERVING_METRICS if m in measured and measured[m].notna().any()]


def _stat_frame(points: pd.DataFrame) -> pd.DataFrame:
    """The measured points in the shape stats.cell_statistics reads (keys, run_id, status, warmup, metrics)."""
    measured = measured_points(points)
    return measured.assign(engine=measured["engine"].astype("string").fillna("(no engine)"),
                           status="ok", warmup=False)


def _sorted(table: pd.DataFrame, keys: tuple[str, ...] = POINT_KEYS) -> pd.DataFrame:
    """Rows in point order: the profile numerically, the metrics in SERVING_METRICS order."""
    order = {m: i for i, m in enumerate(SERVING_METRICS)}
    columns = [k for k in (*keys, "metric") if k in table]
    return table.sort_values(columns, key=lambda c: c.map(order) if c.name == "metric" else c,
                             kind="stable").reset_index(drop=True)


def cell_statistics(points: pd.DataFrame, level: float = stats.DEFAULT_LEVEL,
                    resamples: int = stats.DEFAULT_RESAMPLES, seed: int = stats.DEFAULT_SEED,
                    cv_gate: float = stats.DEFAULT_CV_GATE) -> pd.DataFrame:
    """Per point cell and metric: stats.cell_statistics' columns (n, mean, std, cv, median, min, max, t CI of
    the mean from MIN_N_INTERVAL runs, bootstrap CI of the median from MIN_N_BOOTSTRAP runs, outliers, CV gate)
    plus ``scope``, ``hosts``, the 95% interval shown around the median (``ci95_low``/``ci95_high``: the
    median's bootstrap interval where it exists, else the mean's t-interval, ``ci95_of`` says which, "" with
    neither) and ``values``: the raw per-iteration values as JSON text, in iteration order."""
    metrics = metrics_present(points)
    frame = _stat_frame(points)
    columns = [*POINT_KEYS, "metric", "scope", "hosts", *stats._STAT_COLUMNS, "ci95_low", "ci95_high", "ci95_of",
               "values"]
    if not metrics or frame.empty:
        return pd.DataFrame(columns=columns)
    table = stats.cell_statistics(frame, metrics, keys=POINT_KEYS, cv_gate=cv_gate, level=level,
                                  resamples=resamples, seed=seed)
    table = table.astype({k: "int64" for k in PROFILE})  # cell_statistics gives labels as text
    bootstrap = table["median_ci_low"].notna()
    table["ci95_low"] = table["median_ci_low"].where(bootstrap, table["ci_low"])
    table["ci95_high"] = table["median_ci_high"].where(bootstrap, table["ci_high"])
    table["ci95_of"] = np.where(bootstrap, "median (bootstrap)", np.where(table["ci_low"].notna(), "mean (t)", ""))
    table["scope"] = table["metric"].map(SCOPES)
    keys = list(POINT_KEYS)
    ordered = frame.sort_values(["iteration", "host", "run_id"], kind="stable")
    long = ordered.melt(id_vars=[*keys, "host"], value_vars=metrics, var_name="metric", value_name="value")
    long = long[long["value"].notna()].astype({k: "int64" for k in PROFILE})
    grouped = long.groupby([*keys, "metric"], sort=False)
    extra = pd.DataFrame({"values": grouped["value"].agg(lambda v: json.dumps([float(x) for x in v])),
                          "hosts": grouped["host"].nunique()}).reset_index()
    table = table.merge(extra, on=[*keys, "metric"], how="left")
    return _sorted(table[columns])
