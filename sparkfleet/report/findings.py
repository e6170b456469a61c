"""Warnings a report must put in front of the reader: what makes a number less trustworthy than it looks."""

from __future__ import annotations

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import CONFIG_METRICS
from sparkfleet.report.analysis import Analysis
from sparkfleet.report.host_facts import facts_for_runs, unread_sentences
from sparkfleet.report.memory import budget_kv_cells
from sparkfleet.report.types import Finding
from sparkfleet.stats import CELL_KEYS

#: A residual this large means the KV budget formula does not describe the run (DESIGN: study fits 0.07 GiB).
KV_RESIDUAL_LIMIT_GIB = 0.5
#: Findings of one kind listed one by one up to this many; the rest are counted (tables hold them all).
MAX_LISTED = 25


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
        *missing_runs(analysis),
        *skipped_records(analysis),
        *sequential_order(analysis.runs),
        *invalid_runs(analysis.runs),
        *runs_not_ok(analysis.runs),
        *rejected_metric_values(analysis.runs),
        *cv_gate_failures(analysis),
        *outlier_findings(analysis),
        *unconfirmed_models(analysis.runs),
        *kv_budget_misfits(analysis),
        *kv_budget_figures(analysis.runs),
        *hosts_outside_tolerance(analysis),
        *unread_host_facts(analysis),
    ]


def missing_runs(analysis: Analysis) -> list[Finding]:
    """Planned or started runs without a usable record, ok runs without metrics, leftover staging
    directories (sparkfleet.accounting): each named, so that no run disappears from a report unseen."""
    acc = analysis.accounting
    out = _capped("missing", [f"missing run {m.run_id or m.path.name} ({m.host}): {m}" for m in acc.missing
                              if m.kind != "unreadable"])  # unreadable records: the skipped findings name them
    out += _capped("no-metrics", [f"ok run without metrics {m.run_id} ({m.host}): {m.path}" for m in acc.no_metrics])
    out += _capped("missing-point", [f"{m}: its point cell has one iteration less" + ("" if m.metric is None else
                                                                                    " of this figure")
                                     for m in acc.missing_points])
    out += _capped("leftover", [f"leftover unpack staging directory {p} ignored (an interrupted or running "
                                "unpack; the next collect removes it)" for p in acc.leftovers])
    return out + _capped("tree", list(acc.notes))


def unread_host_facts(analysis: Analysis) -> list[Finding]:
    """Each host fact (firmware, driver, VBIOS, ...) one host could not read while another did: named as not read
    there, never as a difference (a missing fwupdmgr is not other firmware)."""
    if analysis.runs.empty or analysis.runs["host"].nunique() < 2:
        return []
    return _capped("host-unread", unread_sentences(facts_for_runs(analysis.root, analysis.runs)))


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
    failed = failed[~failed["metric"].isin(CONFIG_METRICS)]
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


def rejected_metric_values(runs: pd.DataFrame) -> list[Finding]:
    """Metrics left out of a run because their value was outside its physical range (a negative throughput,
    1.7e308, NaN: sparkfleet_host.contract.record.METRIC_RANGES), by the host that wrote the record or by the loader;
    the run itself is counted with its other figures."""
    if "rejected_metrics" not in runs.columns:
        return []
    hit = runs[runs["rejected_metrics"].notna()]
    return _capped("rejected-metric", [
        f"run {r.run_id} ({r.host} / {r.model} / {r.environment} / {r.workload}): {r.rejected_metrics}; the run is "
        "counted without that figure" for r in hit.itertuples()])


def unconfirmed_models(runs: pd.DataFrame) -> list[Finding]:
    """The study ran one checkpoint under three model names; an ok run whose provenance is not
    ``confirmed`` (the engine's output showed nothing that identifies the model directory it was asked
    for, or the record predates the check) cannot rule that out. One line naming the cells; each cell's
    runs and first reason in details. Runs that load no model (matmul) are not counted."""
    ok = runs[runs["status"] == "ok"]
    if ok.empty:
        return []
    status = (ok["provenance_status"] if "provenance_status" in ok.columns
              else pd.Series(pd.NA, index=ok.index, dtype="object")).astype("string")
    no_model = status.eq("not_applicable").fillna(False) | (
        status.isna() & ok["engine"].astype("string").eq("matmul").fillna(False))
    unconfirmed = ok[~status.eq("confirmed").fillna(False) & ~no_model]
    if unconfirmed.empty:
        return []
    reasons = (unconfirmed["provenance_reason"] if "provenance_reason" in unconfirmed.columns
               else pd.Series(pd.NA, index=unconfirmed.index, dtype="object"))
    unconfirmed = unconfirmed.assign(_why=reasons.where(reasons.notna(), "the record has no provenance check"))
    details, labels = [], []
    for label, rows in _per_group(unconfirmed, list(CELL_KEYS)):
        labels.append(label)
        details.append(f"{label}: {len(rows)} run(s); {rows['_why'].iloc[0]}")
    shown = "; ".join(labels[:MAX_LISTED]) + (f"; ... and {len(labels) - MAX_LISTED} more" if len(labels) > MAX_LISTED
                                              else "")
    return [Finding("model-unconfirmed",
                    f"provenance unconfirmed: {len(unconfirmed)} ok run(s) in {len(labels)} cell(s) ({shown}): the "
                    "engine's output did not show that the requested model was loaded; differences between "
                    "'models' may not be real", tuple(details))]


def kv_budget_figures(runs: pd.DataFrame) -> list[Finding]:
    """One line per cell whose KV figure is a budget, not an allocation: the log had no '[MemUsageChange]
    Allocated ... paged KV cache' line (TensorRT-LLM 1.3+ may use the KV cache manager V2, which does not print
    it), so kv_cache_gib is what the memory profiling set aside, not what was allocated."""
    cells = budget_kv_cells(runs)
    findings = [Finding(
        "kv-source",
        f"KV figure is a budget, not an allocation, in {cell_label(r)}: {r['n_budget']} of {r['n']} run(s) "
        "logged no '[MemUsageChange] Allocated ... paged KV cache' line, so their kv_cache_gib is the memory "
        "profiling's budget (the KV-budget residual cannot test it; a KV difference there is one of budgets)",
        (f"run {r['run_id']}: kv_cache_gib from {r['source']}",), cell_label(r))
        for _, r in cells.iterrows()]
    return _capped("kv-source", findings)


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
    """One line per host that is out (significantly different from the other hosts and beyond the tolerance:
    reproducibility.host_deviations) somewhere: the worst difference and what differs on the host (each
    difference in details)."""
    dev = analysis.host_deviations
    if dev.empty:  # its "outside" column has no dtype then: no boolean mask
        return []
    out = dev[dev["outside"]]
    tol = analysis.options.tolerance * 100
    findings = []
    for host, rows in _per_group(out, ["host"]):
        rows = rows.assign(_abs=rows["deviation_pct"].abs()).sort_values("_abs", ascending=False)
        r = rows.iloc[0]
        hardware = str(r.get("hardware") or "")
        findings.append(Finding(
            "host-deviation",
            f"host {host} is out: significantly different from the other hosts (> ±{tol:g}%) on {len(rows)} cell "
            f"metric(s); worst {r['deviation_pct']:+.1f}% (p = {r['p_value']:.2g}) on {r['model']} / "
            f"{r['environment']} / {r['workload']} {r['metric']}; "
            + (f"what differs on {host}: {hardware}" if hardware else "no recorded host fact differs"),
            tuple(f"{x['deviation_pct']:+.1f}% on {x['model']} / {x['environment']} / {x['workload']} {x['metric']}"
                  for _, x in rows.head(200).iterrows()), f"host {host}"))
    return _capped("host-deviation", findings)
