"""Serving capacity within the SLA (issue 37 item 3): per (engine, environment, model, depth, pp, tg), the
capacity each run's SLA search found (the record's ``serving.sla``: the largest concurrency meeting the targets),
over the iterations: the median with an exact order-statistic interval for it (distribution-free, so it holds
for a discrete capacity; it needs :data:`MIN_N` iterations for 95%). No verdict is drawn between environments or
engines: the report's rule (compare.classify: Welch's test and a relative threshold on a continuous metric) does
not fit a discrete capacity searched by bisection, so the capacities are shown side by side with their intervals.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import RECORD_NAME
from sparkfleet.load import usable_record
from sparkfleet.report.document import Paragraph, Section, fmt, table

KEYS = ["engine", "environment", "model", "depth", "pp", "tg"]
#: The least iterations whose order statistics give a 95% interval for the median (2 x 0.5^n <= 0.05).
MIN_N = 6
TITLE = "Serving capacity within the SLA"


def capacity_rows(root: Path | None, points: pd.DataFrame) -> pd.DataFrame:
    """One row per measured serving run and searched (depth, pp, tg): KEYS, run_id, iteration, capacity, cap,
    targets (text), stopped. Read from the records (``serving.sla``) of the ok runs that are not warm-ups."""
    rows: list[dict[str, Any]] = []
    runs = points.drop_duplicates("run_id") if root is not None and not points.empty else points.iloc[0:0]
    for run in runs.itertuples():
        if run.status != "ok" or (pd.notna(run.warmup) and bool(run.warmup)):
            continue
        data = usable_record(Path(root) / str(run.record_dir) / RECORD_NAME) or {}
        sla = (data.get("serving") or {}).get("sla") if isinstance(data.get("serving"), dict) else None
        for group in (sla or {}).get("groups") or []:
            rows.append({"engine": run.engine, "environment": run.environment, "model": run.model,
                         "depth": group.get("depth"), "pp": group.get("pp"), "tg": group.get("tg"),
                         "run_id": run.run_id, "iteration": run.iteration, "capacity": group.get("capacity"),
                         "cap": group.get("cap"), "stopped": group.get("stopped"),
                         "targets": targets_words(sla.get("targets") or {})})
    return pd.DataFrame(rows, columns=[*KEYS, "run_id", "iteration", "capacity", "cap", "stopped", "targets"])


def targets_words(targets: dict[str, Any]) -> str:
    """"TTFT p99 <= 2000 ms, TPOT p99 <= 50 ms"."""
    names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}
    return ", ".join(f"{names.get(k, k)} p{fmt(v.get('percentile'))} <= {fmt(v.get('max'))} ms"
                     for k, v in targets.items() if isinstance(v, dict))


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


def capacity_cells(rows: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per KEYS cell: n, the capacities, their median and its interval, the cap and the targets."""
    out = []
    for key, group in rows.groupby(KEYS, sort=True, dropna=False):
        values = [int(v) for v in group["capacity"].dropna()]
        median, low, high = median_interval(values, level)
        out.append(dict(zip(KEYS, key, strict=True), n=len(values), capacities=values, median=median, low=low,
                        high=high,
                        cap=group["cap"].max(), targets="; ".join(sorted(set(group["targets"]))),
                        stopped=int(group["stopped"].notna().sum())))
    return pd.DataFrame(out)


def section(root: Path | None, points: pd.DataFrame, level: float = 0.95) -> Section | None:
    """The section, or None when no serving run searched."""
    cells = capacity_cells(capacity_rows(root, points), level) if not points.empty else pd.DataFrame()
    if cells.empty:
        return None
    text = ("The largest concurrency each run found within its workload's SLA targets (per engine, environment, "
            "model, depth, pp and tg; doubling from the profile's lowest concurrency to a failing level or the cap, "
            "then bisection; latencies at the targets' percentiles from the client's data: llama-benchy's per-request "
            "samples, time per output token as 1000 / each request's decode rate, or AIPerf's exported pNN). Over "
            f"the iterations: the median capacity with an exact {level * 100:g}% order-statistic interval for the "
            f"median (from {MIN_N} iterations on; fewer: none). No verdict is drawn between environments or engines: "
            "the report's rule is for continuous metrics, not a discrete capacity found by bisection; compare the "
            "intervals. A capacity equal to the cap means the cap was never exceeded, not that the server stops there.")
    shown = pd.DataFrame({
        **{k: cells[k] for k in KEYS}, "targets": cells["targets"], "n": cells["n"],
        "capacities": cells["capacities"].map(lambda v: ", ".join(map(str, v))),
        "median": cells["median"].map(fmt),
        "interval": [f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None else "n too small"
                     for lo, hi in zip(cells["low"], cells["high"], strict=True)],
        "cap": cells["cap"].map(fmt), "searches stopped early": cells["stopped"]})
    return Section(TITLE, [Paragraph(text), table(shown, "Capacity within the SLA per cell")])
