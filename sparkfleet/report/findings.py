"""Warnings a report must put in front of the reader: what makes a number less trustworthy than it looks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from sparkfleet.stats import CELL_KEYS

if TYPE_CHECKING:
    from sparkfleet.report.analysis import Analysis

#: A residual this large means the KV budget formula does not describe the run (DESIGN: study fits 0.07 GiB).
KV_RESIDUAL_LIMIT_GIB = 0.5
#: Findings of one kind listed one by one up to this many; the rest are counted (tables hold them all).
MAX_LISTED = 25


@dataclass(frozen=True)
class Finding:
    kind: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


def cell_label(row: pd.Series | dict, keys: tuple[str, ...] = CELL_KEYS) -> str:
    return " / ".join(str(row[k]) for k in keys)


def _capped(kind: str, messages: list[str]) -> list[Finding]:
    listed = [Finding(kind, m) for m in messages[:MAX_LISTED]]
    if len(messages) > MAX_LISTED:
        listed.append(Finding(kind, f"... and {len(messages) - MAX_LISTED} more {kind} findings (see tables)"))
    return listed


def collect_findings(analysis: Analysis) -> list[Finding]:
    return [
        *skipped_records(analysis),
        *sequential_order(analysis.runs),
        *invalid_runs(analysis.runs),
        *runs_not_ok(analysis.runs),
        *cv_gate_failures(analysis),
        *outlier_findings(analysis),
        *unconfirmed_models(analysis.runs),
        *kv_budget_misfits(analysis),
        *hosts_outside_tolerance(analysis),
    ]


def skipped_records(analysis: Analysis) -> list[Finding]:
    return _capped("skipped", [f"skipped record {p.path}: {p.reason}" for p in analysis.problems])


def sequential_blocks(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (host, model, workload) with two or more environments: whether each environment's runs form
    one contiguous block in run order (all native, then all container), and the block order."""
    keys = ["host", "model", "workload"]
    timed = runs[~runs["warmup"].fillna(False).astype(bool)]
    # order_index is the plan position; records without it are ordered by their start time instead.
    if timed["order_index"].notna().all():
        order = timed["order_index"].astype("float64")
    else:
        order = (timed["started_utc"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    timed = timed.assign(_order=order).dropna(subset=["_order"]).sort_values([*keys, "_order"], kind="stable")
    if timed.empty:
        return pd.DataFrame(columns=[*keys, "environments", "sequential", "block_order"])
    new_block = timed["environment"].ne(timed.groupby(keys)["environment"].shift())
    grouped = timed.assign(_new_block=new_block).groupby(keys, sort=True)
    table = pd.DataFrame({
        "environments": grouped["environment"].nunique(),
        "blocks": grouped["_new_block"].sum(),
    })
    table["sequential"] = (table["environments"] >= 2) & (table["blocks"] == table["environments"])
    first = timed[new_block].groupby(keys, sort=True)["environment"].agg(lambda s: " -> ".join(s))
    table["block_order"] = first
    return table.reset_index()[[*keys, "environments", "sequential", "block_order"]]


def sequential_order(runs: pd.DataFrame) -> list[Finding]:
    table = sequential_blocks(runs)
    hits = table[table["sequential"]]
    messages = [
        f"sequential order on {r.host} / {r.model} / {r.workload}: all runs of each environment ran in one "
        f"block ({r.block_order}); drift over time (temperature, page cache, memory fragmentation) is "
        "confounded with the environment difference. Interleave or randomise the order."
        for r in hits.itertuples()
    ]
    return _capped("sequential", messages)


def invalid_runs(runs: pd.DataFrame) -> list[Finding]:
    bad = runs[runs["status"] == "invalid"]
    messages = [
        f"invalid run {r.run_id} ({r.host} / {r.model} / {r.environment} / {r.workload}): requested "
        f"{r.model_id or r.model!s}, loaded {r.model_loaded or 'unknown'}"
        f"{'; ' + str(r.reason) if isinstance(r.reason, str) and r.reason else ''}"
        for r in bad.itertuples()
    ]
    return _capped("invalid", messages)


def runs_not_ok(runs: pd.DataFrame) -> list[Finding]:
    bad = runs[runs["status"].isin(["failed", "timeout"])]
    messages = [
        f"{r.status} run {r.run_id} ({r.host} / {r.model} / {r.environment} / {r.workload}): "
        f"{r.reason if isinstance(r.reason, str) and r.reason else 'no reason given'}"
        f"{'' if pd.isna(r.exit_code) else f' (exit code {r.exit_code})'}"
        for r in bad.itertuples()
    ]
    return _capped("not-ok", messages)


def cv_gate_failures(analysis: Analysis) -> list[Finding]:
    failed = analysis.cells[analysis.cells["cv_ok"].fillna(True).eq(False)]
    gate = analysis.options.cv_gate * 100
    messages = [
        f"CV gate: {cell_label(r)} {r['metric']} CV {r['cv'] * 100:.1f}% > {gate:g}% (n={r['n']})"
        for _, r in failed.iterrows()
    ] if len(failed) <= MAX_LISTED * 4 else [
        f"CV gate: {len(failed)} cell metrics exceed {gate:g}% (see the statistics tables)"
    ]
    return _capped("cv-gate", messages)


def outlier_findings(analysis: Analysis) -> list[Finding]:
    out = analysis.outliers
    messages = [
        f"outlier (kept): {cell_label(r)} {r['metric']} run {r['run_id']} = {r['value']:.4g} "
        f"(cell median {r['cell_median']:.4g}, robust z {r['robust_z']:+.1f})"
        for _, r in out.head(MAX_LISTED + 1).iterrows()
    ]
    if len(out) > MAX_LISTED + 1:
        messages.append(f"{len(out)} outlier values in all (see the outlier table)")
    return _capped("outlier", messages)


def unconfirmed_models(runs: pd.DataFrame) -> list[Finding]:
    """The study ran one checkpoint under three model names; a run whose log did not confirm the model
    cannot rule that out."""
    ok = runs[runs["status"] == "ok"]
    unknown = ok[ok["model_loaded"].isna()]
    if unknown.empty:
        return []
    models = ", ".join(sorted(set(unknown["model"].astype(str).unique())))  # unique first: 100k runs, few models
    return [Finding("model-unconfirmed",
                    f"{len(unknown)} ok runs do not record which model was loaded ({models}): the model "
                    "under test is unconfirmed; differences between 'models' may not be real")]


def kv_budget_misfits(analysis: Analysis) -> list[Finding]:
    kv = analysis.kv_runs
    if kv.empty:
        return []
    bad = kv[kv["residual_gib"].abs() > KV_RESIDUAL_LIMIT_GIB]
    return _capped("kv-budget", [
        f"KV budget does not fit run {r['run_id']}: measured {r['kv_cache_gib']:.2f} GiB, expected "
        f"{r['kv_expected_gib']:.2f} GiB (fraction {r['fraction']:g}, {r['fraction_source']})"
        for _, r in bad.iterrows()
    ])


def hosts_outside_tolerance(analysis: Analysis) -> list[Finding]:
    dev = analysis.host_deviations
    if dev.empty:
        return []
    out = dev[dev["outside"]]
    tol = analysis.options.tolerance * 100
    return _capped("host-deviation", [
        f"host {r['host']} deviates {r['deviation_pct']:+.1f}% (> ±{tol:g}%) from the fleet median on "
        f"{r['model']} / {r['environment']} / {r['workload']} {r['metric']}"
        for _, r in out.iterrows()
    ])
