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
    """One warning line; ``details`` holds the single facts it groups (one per metric or run), which the
    reports show collapsed."""

    kind: str
    message: str
    details: tuple[str, ...] = ()
    subject: str = ""  # the cell or host a grouped finding is about

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "message": self.message, "details": list(self.details), "subject": self.subject}


def cell_label(row: pd.Series | dict, keys: tuple[str, ...] = CELL_KEYS) -> str:
    return " / ".join(str(row[k]) for k in keys)


def _capped(kind: str, messages: list[str] | list[Finding]) -> list[Finding]:
    listed = [m if isinstance(m, Finding) else Finding(kind, m) for m in messages[:MAX_LISTED]]
    if len(messages) > MAX_LISTED:
        listed.append(Finding(kind, f"... and {len(messages) - MAX_LISTED} more {kind} findings (see tables)"))
    return listed


def _per_group(frame: pd.DataFrame, keys: list[str]):
    """(label, rows) per group of ``frame`` in key order, the label naming the group's keys."""
    for key, rows in frame.groupby(keys, sort=True, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        yield " / ".join(str(k) for k in key), rows


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
    """One line per cell: every metric over the gate, the worst CV first (each metric's CV in details)."""
    failed = analysis.cells[analysis.cells["cv_ok"].fillna(True).eq(False)]
    failed = failed[~failed["metric"].isin(("device_total_gib", "kv_fraction"))]
    gate = analysis.options.cv_gate * 100
    cells = failed.groupby(list(CELL_KEYS), sort=True).ngroups if len(failed) else 0
    if cells > MAX_LISTED * 4:
        return [Finding("cv-gate", f"CV gate: {cells} cells have metrics above {gate:g}% (see the statistics "
                                   "tables and cells.csv)")]
    findings = []
    for label, cell in _per_group(failed, list(CELL_KEYS)):
        rows = cell.sort_values("cv", ascending=False, kind="stable")
        worst = rows.iloc[0]
        n = "/".join(sorted({str(v) for v in rows["n"]}))
        findings.append(Finding(
            "cv-gate",
            f"CV gate: {label}: {len(rows)} metric(s) above {gate:g}% ({', '.join(cell['metric'])}); worst "
            f"{worst['metric']} CV {worst['cv'] * 100:.1f}% (n={n})",
            tuple(f"{r['metric']} CV {r['cv'] * 100:.1f}% > {gate:g}% (n={r['n']})" for _, r in rows.iterrows()),
            label))
    return _capped("cv-gate", findings)


def outlier_findings(analysis: Analysis) -> list[Finding]:
    """One line per cell: the metrics with outliers and the most extreme value (each value in details)."""
    out = analysis.outliers
    if out.empty:
        return []
    cells = out.groupby(list(CELL_KEYS), sort=True, observed=True).ngroups
    if cells > MAX_LISTED * 4:
        return [Finding("outlier", f"{len(out)} outlier values in {cells} cells (see the outlier table)")]
    findings = []
    for label, rows in _per_group(out, list(CELL_KEYS)):
        rows = rows.assign(_abs=rows["robust_z"].abs()).sort_values("_abs", ascending=False)
        r = rows.iloc[0]
        metrics = ", ".join(dict.fromkeys(rows["metric"].astype(str)))
        findings.append(Finding(
            "outlier",
            f"outliers (kept) in {label}: {len(rows)} value(s) in {metrics}; most extreme {r['metric']} run "
            f"{r['run_id']} = {r['value']:.4g} (cell median {r['cell_median']:.4g}, robust z {r['robust_z']:+.1f})",
            tuple(f"{x['metric']} run {x['run_id']} = {x['value']:.4g} (cell median {x['cell_median']:.4g}, "
                  f"robust z {x['robust_z']:+.1f})" for _, x in rows.head(200).iterrows()), label))
    return _capped("outlier", findings)


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
    """One line per cell whose runs the KV budget formula does not explain (each run in details)."""
    kv = analysis.kv_runs
    if kv.empty:
        return []
    bad = kv[kv["residual_gib"].abs() > KV_RESIDUAL_LIMIT_GIB]
    findings = []
    for label, rows in _per_group(bad, list(CELL_KEYS)):
        findings.append(Finding(
            "kv-budget",
            f"KV budget does not fit {label}: {len(rows)} run(s), measured {rows['kv_cache_gib'].min():.2f}–"
            f"{rows['kv_cache_gib'].max():.2f} GiB against {rows['kv_expected_gib'].min():.2f}–"
            f"{rows['kv_expected_gib'].max():.2f} GiB expected (fraction {rows['fraction'].iloc[0]:g}, "
            f"{rows['fraction_source'].iloc[0]})"
            + ("; tmp_kv is not recorded, so the expected figure leaves it out"
               if (rows.get("tmp_kv_source") == "not recorded").any() else ""),
            tuple(f"run {r['run_id']}: measured {r['kv_cache_gib']:.2f} GiB, expected {r['kv_expected_gib']:.2f} GiB "
                  f"(fraction {r['fraction']:g}, {r['fraction_source']})" for _, r in rows.head(200).iterrows()),
            label))
    return _capped("kv-budget", findings)


def hosts_outside_tolerance(analysis: Analysis) -> list[Finding]:
    """One line per host outside the tolerance somewhere: the worst deviation (each one in details)."""
    dev = analysis.host_deviations
    if dev.empty:
        return []
    out = dev[dev["outside"]]
    tol = analysis.options.tolerance * 100
    findings = []
    for host, rows in _per_group(out, ["host"]):
        rows = rows.assign(_abs=rows["deviation_pct"].abs()).sort_values("_abs", ascending=False)
        r = rows.iloc[0]
        findings.append(Finding(
            "host-deviation",
            f"host {host} deviates from the fleet median (> ±{tol:g}%) on {len(rows)} cell metric(s); worst "
            f"{r['deviation_pct']:+.1f}% on {r['model']} / {r['environment']} / {r['workload']} {r['metric']}",
            tuple(f"{x['deviation_pct']:+.1f}% on {x['model']} / {x['environment']} / {x['workload']} {x['metric']}"
                  for _, x in rows.head(200).iterrows()), f"host {host}"))
    return _capped("host-deviation", findings)
