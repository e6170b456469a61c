"""Serving runs (issue 25, docs/serving-contract): the record's ``serving`` section as a table of points, and
per point the statistics over iterations.

A serving run drives one engine server through every point of its profile (depth x concurrency x pp x tg);
the record keeps one entry per point with its metrics, the client's raw values and a status. The loader
(sparkfleet.load) explodes these into the *points table*: one row per run x point, with the run's identity,
the point's profile and status, each point metric and the raw samples as JSON text. A *point cell* is
(engine, environment, model, depth, concurrency, pp, tg): its statistics over the iterations are the
report's own (stats.cell_statistics), from the measured points only: run status ok, not a warm-up, not found
suspect by the readiness probe (stats.kept_apart, as for the runs), point ok. A failed point never enters a statistic
and is named by ``failed_points``.

A figure or a sample that cannot be (issue 32) is left out of every statistic too and named by
:func:`impossible_samples`, with the reason: a negative or non-finite figure or sample; fewer (or more) samples
than the point's requests or runs (llama-benchy drops a request that failed, so a point's figures then stand for
fewer requests than it names: every figure of that point is left out); a per-request rate above ``concurrency x``
its own run's aggregate rate, or a per-user figure above ``concurrency x`` the point's aggregate figure (a
request's tokens are part of its run's aggregate and its decode lies inside the run's span, so at concurrency 1
the two are one figure, and beyond ``c x`` the request would have taken under 1/c² of the span: a stream whose
tokens arrived in one burst, not a rate). :func:`screened_points` is what the statistics read.

Aggregate (``*_tok_s``, all concurrent requests together) and per-user (``*_req_tok_s``, per request) figures
are separate metrics with separate scopes (SCOPES): nothing here mixes them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import (
    AGGREGATE,
    SERVING_METRICS,
)
from sparkfleet import stats

#: The point metrics, their scopes (a table or a figure shows one scope only) and words: the contract's table.
SCOPES = {m: spec.scope for m, spec in SERVING_METRICS.items()}
WORDS = {m: spec.words for m, spec in SERVING_METRICS.items()}


def direction(metric: str) -> int:
    """+1: higher is better (throughput), -1: lower is better (latency)."""
    spec = SERVING_METRICS.get(metric)
    return spec.direction if spec else 1


PROFILE = ("depth", "concurrency", "pp", "tg")
#: One point cell: its statistics pool the iterations (and the hosts that ran it).
#: The client is part of it: llama-benchy's and AIPerf's figures of one server differ by definition (TTFT, aggregate
#: rates; BENCHMARKS.md, "llama-benchy and AIPerf against the same server"), so their points never pool and a
#: comparison holds the client fixed.
POINT_KEYS = ("engine", "environment", "client", "model", *PROFILE)
#: A run's SLA search (issue 37) of the point's (depth, pp, tg), on each of its points: the capacity found, the cap,
#: why the search stopped early (None: it settled) and the targets (JSON); None where the workload set no sla.
SLA_COLUMNS = ("sla_capacity", "sla_cap", "sla_stopped", "sla_targets")
RUN_COLUMNS = ("run_id", "campaign", "host", "model", "environment", "workload", "iteration", "environment_kind",
               "engine", "status", "reason", "warmup", "aa_group", "aa_member", "prefix_caching", "client")
POINT_COLUMNS = (*RUN_COLUMNS, "point", *PROFILE, "point_status", "point_reason", "point_order", "point_duration_s",
                 *SERVING_METRICS, *(f"samples_{m}" for m in SERVING_METRICS), "raw", "record_dir", "client_runs",
                 "bad_figures", *SLA_COLUMNS)
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


def _bad_figures(metrics: dict[str, Any]) -> str | None:
    """The point's figures that are numbers but not finite or negative, as JSON text {metric: "value"} (None when
    there are none): _number turns them into NaN, impossible_samples names them."""
    bad = {m: str(v) for m, v in metrics.items() if m in SCOPES and isinstance(v, (int, float))
           and not isinstance(v, bool) and (not math.isfinite(v) or v < 0)}
    return json.dumps(bad) if bad else None


def engine_configuration(serving: dict[str, Any], engine: Any = None) -> Any:
    """The engine as the serving comparisons see it: its name, and for a multi-node run the nodes and topology
    (``llama.cpp on 2 nodes (layers)``), so that one host, a model spread over two and two replicas are cells of
    their own, compared with each other as engines are (the first by name, the single host, the reference)."""
    name = serving.get("engine") or engine
    cluster = serving.get("cluster")
    if not isinstance(cluster, dict) or not isinstance(cluster.get("nodes"), list):
        return name
    return NODES_LABEL.format(engine=name, nodes=len(cluster["nodes"]), topology=cluster.get("topology") or "layers")


#: A multi-node configuration's name, and its reading back (configuration_of).
NODES_LABEL = "{engine} on {nodes} nodes ({topology})"
_NODES_PATTERN = re.compile(r"^(?P<engine>.+) on (?P<nodes>\d+) nodes \((?P<topology>[^)]+)\)$")


def configuration_of(label: Any) -> tuple[str, int, str | None]:
    """(engine, nodes, topology) of an engine_configuration label: (label, 1, None) for a single host."""
    found = _NODES_PATTERN.match(str(label))
    if not found:
        return str(label), 1, None
    return found["engine"], int(found["nodes"]), found["topology"]


#: The client of a record that names none (a hand-made or damaged record): a cell of its own, never pooled.
NO_CLIENT = "(no client)"


def point_rows(data: dict[str, Any], record_dir: str) -> list[dict[str, Any]]:
    """One row per point of a serving record (POINT_COLUMNS); [] for any other record."""
    if not has_points(data):
        return []
    serving = data["serving"]
    environment = (data.get("memory") or {}).get("environment") if isinstance(data.get("memory"), dict) else None
    environment = environment if isinstance(environment, dict) else {}
    params = data.get("workload_params") if isinstance(data.get("workload_params"), dict) else {}
    run = {key: data.get(key) for key in RUN_COLUMNS[:12]}
    run["engine"] = engine_configuration(serving, data.get("engine"))
    client = serving.get("client") if isinstance(serving.get("client"), dict) else {}
    run |= {"aa_group": environment.get("aa_group"), "aa_member": environment.get("aa_member"),
            "prefix_caching": params.get("prefix_caching"), "client": client.get("name") or NO_CLIENT}
    client_runs = _integer(params.get("runs"))  # llama-benchy --runs per point
    searched = _sla_groups(serving)
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
        row |= {"raw": point.get("raw"), "record_dir": record_dir,
                "client_runs": client_runs if client_runs and client_runs > 0 else None,
                "bad_figures": _bad_figures(metrics)}
        row |= searched.get((row["depth"], row["pp"], row["tg"]), {})
        rows.append(row)
    return rows


def _sla_groups(serving: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    """The record's SLA searches (``serving.sla.groups``) by (depth, pp, tg), in SLA_COLUMNS."""
    sla = serving.get("sla") if isinstance(serving.get("sla"), dict) else {}
    targets = json.dumps(sla.get("targets"), sort_keys=True) if isinstance(sla.get("targets"), dict) else None
    out = {}
    for group in sla.get("groups") or []:
        if isinstance(group, dict):
            out[tuple(_integer(group.get(k)) for k in ("depth", "pp", "tg"))] = {
                "sla_capacity": _integer(group.get("capacity")), "sla_cap": _integer(group.get("cap")),
                "sla_stopped": group.get("stopped"), "sla_targets": targets}
    return out


def points_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The points table with fixed columns and dtypes (an empty one for no rows)."""
    frame = pd.DataFrame.from_records(rows, columns=list(POINT_COLUMNS)) if rows else \
        pd.DataFrame(columns=list(POINT_COLUMNS))
    types = {m: "float64" for m in (*SERVING_METRICS, "point_duration_s")}
    types |= {k: "Int64" for k in (*PROFILE, "point_order", "client_runs", "sla_capacity", "sla_cap")}
    types |= {"iteration": "Int64"}
    frame = frame.astype(types)
    frame["warmup"] = frame["warmup"].astype("boolean")
    return frame


def measured_points(points: pd.DataFrame, keep_suspect: bool = False) -> pd.DataFrame:
    """The points that enter statistics: the run ok, not a warm-up and not found suspect by the readiness probe
    (stats.kept_apart), the point ok, its profile complete. ``keep_suspect``: the suspect runs' points too (the host
    verdict compares them on their own, report/host_normal.py)."""
    if points.empty:
        return points
    runs_ok = stats.ok_runs(points) if keep_suspect else stats.measured_runs(points)  # the run's own predicate
    return runs_ok[(runs_ok["point_status"] == POINT_OK) & runs_ok[list(PROFILE)].notna().all(axis=1)]


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


#: llama-benchy's samples per point (llama_benchy/results.py, 0.4.0): one per run for the aggregate figures, one per
#: request (concurrency x runs) for the per-user and latency figures.
PER_RUN_SAMPLES = tuple(m for m, spec in SERVING_METRICS.items() if spec.scope == AGGREGATE)
#: Each per-user rate and the aggregate rate of the same requests.
AGGREGATE_OF = {m: spec.aggregate for m, spec in SERVING_METRICS.items()
                if spec.aggregate and spec.bounded_by_aggregate}
#: The checks impossible_samples makes, in words (``check`` column).
CHECKS = {
    "figure_negative": "negative figure",
    "figure_not_finite": "figure not a finite number",
    "sample_negative": "negative sample",
    "sample_not_finite": "sample not a finite number",
    "sample_count": "samples do not match the point's requests",
    "request_above_aggregate": "per-request rate above concurrency x its run's aggregate",
    "per_user_above_aggregate": "per-user figure above concurrency x the aggregate figure",
    "no_gap_between_tokens": "inter-token latency 0 over several tokens: the client read them in one piece",
}
#: The per-token latencies that cannot be 0 over more than one output token: a client starved on a loaded machine
#: (or a buffer in between) reads every token at once and times no gap (AIPerf's inter-token latency read 0.0 ms,
#: and it gave no per-user rate, in 2 of 24 points of test_aiperf_sla.py beside two other test suites on 2 cores).
PER_TOKEN_LATENCIES = ("itl_ms",)
IMPOSSIBLE_COLUMNS = ("host", "model", "environment", "workload", "engine", "run_id", "iteration", "point", "metric",
                      "left_out", "check", "why")
#: Relative slack of the rate comparisons: floating point only (at concurrency 1 llama-benchy's per-request and
#: aggregate figures are the same numbers).
_ROUNDING = 1e-9


def _samples(text: Any) -> list[Any] | None:
    if not isinstance(text, str):
        return None
    try:
        values = json.loads(text)
    except ValueError:
        return None
    return values if isinstance(values, list) else None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: float) -> str:
    return f"{value:,.6g}"


def _checks_of(row: Any) -> list[tuple[str, str, str, str]]:
    """(metric, left_out, check, why) of one measured run x point row."""
    out: list[tuple[str, str, str, str]] = []
    bad = json.loads(row.bad_figures) if isinstance(row.bad_figures, str) else {}
    tokens = row.tg if isinstance(row.tg, (int, np.integer)) else None
    for metric in PER_TOKEN_LATENCIES:
        value = getattr(row, metric)
        if tokens and tokens > 1 and _finite(value) and value == 0:
            out.append((metric, metric, "no_gap_between_tokens", f"{metric} 0 ms over {tokens} output tokens"))
    for metric, text in bad.items():
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        check = "figure_negative" if math.isfinite(value) and value < 0 else "figure_not_finite"
        out.append((metric, metric, check, f"{metric} is {text}"))
    samples = {m: _samples(getattr(row, f"samples_{m}")) for m in SERVING_METRICS}
    for metric, values in samples.items():
        if values is None:
            continue
        odd = [v for v in values if not _finite(v)]
        negative = [v for v in values if _finite(v) and v < 0]
        if odd:
            out.append((metric, metric, "sample_not_finite", f"{len(odd)} of {len(values)} {metric} samples are "
                                                               f"not finite numbers ({', '.join(map(str, odd[:3]))})"))
        elif negative:
            out.append((metric, metric, "sample_negative", f"{len(negative)} of {len(values)} {metric} samples are "
                                                            f"negative ({', '.join(map(_fmt, negative[:3]))})"))
    runs, concurrency = row.client_runs, row.concurrency
    known = not pd.isna(runs) and not pd.isna(concurrency)
    if known:
        runs, concurrency = int(runs), int(concurrency)
        # Real llama-benchy output lacks a request's figure now and then (3 of 4 at a point): that metric stands
        # for fewer requests than its point names and is left out there; the point's other figures stay.
        for metric, values in samples.items():
            expected = runs if metric in PER_RUN_SAMPLES else runs * concurrency
            if values is not None and len(values) != expected:
                per = "runs" if metric in PER_RUN_SAMPLES else f"requests (concurrency {concurrency} x {runs} runs)"
                out.append((metric, metric, "sample_count", f"{metric} {len(values)} of {expected} {per}: a request "
                                                            "or a run gave no figure, so it stands for fewer than "
                                                            "its point names"))
    flagged = {metric for metric, *_ in out}
    for per_user, aggregate in AGGREGATE_OF.items():
        if per_user in flagged or aggregate in flagged or pd.isna(concurrency):
            continue
        c = int(concurrency)
        requests, totals = samples.get(per_user), samples.get(aggregate)
        if (requests and totals and len(requests) == c * len(totals) and all(map(_finite, requests))
                and all(map(_finite, totals))):
            above = [(i // c, r, totals[i // c]) for i, r in enumerate(requests)
                     if r > c * totals[i // c] * (1 + _ROUNDING)]
            if above:
                run, value, total = max(above, key=lambda x: x[1] / x[2] if x[2] > 0 else math.inf)
                out.append((per_user, per_user, "request_above_aggregate",
                            f"{len(above)} of {len(requests)} per-request samples above concurrency x their run's "
                            f"aggregate, e.g. {_fmt(value)} tok/s in run {run + 1} against {c} x {_fmt(total)} tok/s"))
                continue
        user, total = getattr(row, per_user), getattr(row, aggregate)
        if _finite(user) and _finite(total) and user > c * total * (1 + _ROUNDING):
            out.append((per_user, per_user, "per_user_above_aggregate",
                        f"{per_user} {_fmt(user)} tok/s above {c} x {aggregate} {_fmt(total)} tok/s"))
    return out


def impossible_samples(points: pd.DataFrame, keep_suspect: bool = False) -> pd.DataFrame:
    """The measured run x point rows with a figure or a sample that cannot be (the module's doc), one row per
    (run, point, check): IMPOSSIBLE_COLUMNS, ``metric`` the metric checked, ``left_out`` the metric left out of
    every statistic there, ``check`` a CHECKS key, ``why`` in words with the values. Failed points and
    runs are named elsewhere (failed_points) and not checked, nor (without ``keep_suspect``) the points of a run the
    readiness probe found suspect: the whole run is left out, and named (report/suspect_runs.py)."""
    measured = measured_points(points, keep_suspect)
    rows = []
    if not measured.empty:
        for row in measured.itertuples(index=False):
            for metric, left_out, check, why in _checks_of(row):
                rows.append({"host": row.host, "model": row.model, "environment": row.environment,
                             "workload": row.workload, "engine": row.engine, "run_id": row.run_id,
                             "iteration": row.iteration, "point": row.point, "metric": metric,
                             "left_out": left_out, "check": check, "why": why})
    return pd.DataFrame(rows, columns=list(IMPOSSIBLE_COLUMNS))


def screened_points(points: pd.DataFrame, flagged: pd.DataFrame | None = None,
                    keep_suspect: bool = False) -> pd.DataFrame:
    """The measured points with what impossible_samples names left out: a figure it names is NaN, a point it
    names whole is dropped. ``flagged``: impossible_samples(points), when the caller has it; ``keep_suspect``: as
    measured_points."""
    measured = measured_points(points, keep_suspect)
    flagged = impossible_samples(points, keep_suspect) if flagged is None else flagged
    if measured.empty or flagged.empty:
        return measured
    screened = measured.copy()
    for metric, group in flagged.groupby("left_out"):
        if metric in screened:
            hit = set(zip(group["run_id"], group["point"], strict=True))
            mask = [(r, p) in hit for r, p in zip(screened["run_id"], screened["point"], strict=True)]
            screened.loc[mask, metric] = np.nan
    return screened


def metrics_present(points: pd.DataFrame) -> list[str]:
    measured = screened_points(points)
    return [m for m in SERVING_METRICS if m in measured and measured[m].notna().any()]


def points_for_statistics(points: pd.DataFrame) -> pd.DataFrame:
    """The measured points in the shape stats.cell_statistics reads (keys, run_id, status, warmup, metrics), with
    what impossible_samples names left out (screened_points)."""
    measured = screened_points(points)
    return measured.assign(engine=measured["engine"].astype("string").fillna("(no engine)"),
                           status="ok", warmup=False)


def shown_keys(frame: pd.DataFrame) -> list[str]:
    """The POINT_KEYS a table shows: the client only where ``frame`` holds more than one (a column that says the
    same on every row is noise; the CSVs keep every key)."""
    one_client = "client" not in frame or frame["client"].nunique(dropna=False) <= 1
    return [k for k in POINT_KEYS if not (k == "client" and one_client)]


def in_point_order(table: pd.DataFrame, keys: tuple[str, ...] = POINT_KEYS) -> pd.DataFrame:
    """Rows in point order: the profile numerically, the metrics in SERVING_METRICS order."""
    order = {m: i for i, m in enumerate(SERVING_METRICS)}
    columns = [k for k in (*keys, "metric") if k in table]
    return table.sort_values(columns, key=lambda c: c.map(order) if c.name == "metric" else c,
                             kind="stable").reset_index(drop=True)


def clip_to_range(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (cell_statistics' columns) with each shown interval (ci95_low, ci95_high) held inside its metric's
    physical range (stats.physical_range: throughput and latency are never below 0) and ``ci95_note`` naming a
    bound that was moved, with the bound as computed: a normal interval reaching below 0 says the normal
    approximation does not fit the sample (stats.range_violation), and an interval drawn below 0 would say the
    metric could be negative."""
    table = table.copy()
    notes = []
    for i, (metric, low, high) in enumerate(zip(table["metric"], table["ci95_low"], table["ci95_high"], strict=True)):
        lowest, highest = stats.physical_range(str(metric))
        said = []
        if _finite(low) and low < lowest:
            said.append(f"lower bound clipped at {lowest:g} (computed {_fmt(low)}): the normal interval does not fit")
            table.iloc[i, table.columns.get_loc("ci95_low")] = lowest
        if _finite(high) and high > highest:
            said.append(f"upper bound clipped at {highest:g} (computed {_fmt(high)}): the normal interval does not fit")
            table.iloc[i, table.columns.get_loc("ci95_high")] = highest
        notes.append("; ".join(said))
    table["ci95_note"] = notes
    return table


def cell_statistics(points: pd.DataFrame, level: float = stats.DEFAULT_LEVEL,
                    resamples: int = stats.DEFAULT_RESAMPLES, seed: int = stats.DEFAULT_SEED,
                    cv_gate: float = stats.DEFAULT_CV_GATE, keys: tuple[str, ...] = POINT_KEYS,
                    metrics: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Per point cell and metric: stats.cell_statistics' columns (n, mean, std, cv, median, min, max, t CI of
    the mean from MIN_N_INTERVAL runs, bootstrap CI of the median from MIN_N_BOOTSTRAP runs, outliers, CV gate)
    plus ``scope``, ``hosts``, the 95% interval shown around the median (``ci95_low``/``ci95_high``: the
    median's bootstrap interval where it exists, else the mean's t-interval, ``ci95_of`` says which, "" with
    neither; a bound outside the metric's physical range, stats.physical_range, is drawn and printed at the range's
    end and ``ci95_note`` says so: the computed bounds stay in ``ci_low``/``ci_high``) and ``values``: the raw
    per-iteration values as JSON text, in iteration order. What impossible_samples names is left out.
    ``keys``: what makes a cell (POINT_KEYS, or those with ``workload``: the Pareto front's configurations, whose
    rows must hold no missing key); ``metrics``: only these (every metric with a figure by default)."""
    frame = points_for_statistics(points)
    wanted = [m for m in SERVING_METRICS if metrics is None or m in metrics]
    present = [m for m in wanted if m in frame and frame[m].notna().any()]
    columns = [*keys, "metric", "scope", "hosts", *stats.STAT_COLUMNS, "ci95_low", "ci95_high", "ci95_of",
               "ci95_note", "values"]
    if not present or frame.empty:
        return pd.DataFrame(columns=columns)
    table = stats.cell_statistics(frame, present, keys=keys, cv_gate=cv_gate, level=level,
                                  resamples=resamples, seed=seed)
    table = table.astype({k: "int64" for k in PROFILE})  # cell_statistics gives labels as text
    bootstrap = table["median_ci_low"].notna()
    table["ci95_low"] = table["median_ci_low"].where(bootstrap, table["ci_low"])
    table["ci95_high"] = table["median_ci_high"].where(bootstrap, table["ci_high"])
    table["ci95_of"] = np.where(bootstrap, "median (bootstrap)", np.where(table["ci_low"].notna(), "mean (t)", ""))
    table = clip_to_range(table)
    table["scope"] = table["metric"].map(SCOPES)
    ordered = frame.sort_values(["iteration", "host", "run_id"], kind="stable")
    long = ordered.melt(id_vars=[*keys, "host"], value_vars=present, var_name="metric", value_name="value")
    long = long[long["value"].notna()].astype({k: "int64" for k in PROFILE})
    grouped = long.groupby([*keys, "metric"], sort=False)
    extra = pd.DataFrame({"values": grouped["value"].agg(lambda v: json.dumps([float(x) for x in v])),
                          "hosts": grouped["host"].nunique()}).reset_index()
    table = table.merge(extra, on=[*keys, "metric"], how="left")
    return in_point_order(table[columns], keys)
