""""Is this host normal?": each host against its fleet peers and against a reference, with the likely cause
where the host's recorded state shows one (issue 24).

The rule is every other verdict's (sparkfleet.compare.classify): a host is *not normal* only where its difference
is significant and beyond the tolerance. Against the peers, sparkfleet.reproducibility.host_deviations on the runs
whose readiness probe did not mark them ``suspect``; a host's suspect runs are never averaged in: they are compared
on their own with the other hosts' unmarked runs and named as such. Against a reference (``--reference``): a
previous campaign's results directory (Welch, as the fleet), or a file of published figures (the host's runs
against one value: a one-sample t-test, which is Welch's with a side of zero spread).

A serving run's figures are compared per point: each measured point (sparkfleet.serving.screened_points) is a
run-shaped row whose workload names its point (``serve-quick.vllm @ d0.c1.pp512.tg64``), so every point is a cell
of its own, against the peers and the reference alike, in the one family of the host verdict.

Causes, from the evidence sparkfleet.hostcheck reads: the readiness probe's reasons and the SM clock it reached
under load against the other hosts', throttle counters that grew during runs, firmware / VBIOS / driver / kernel /
CUDA / image that differ from the other hosts (attestation.json), and memory fragmented at a run's start (no free
2 MiB blocks). A firmware or driver mismatch across hosts is blocking: the fleet comparison is *refused* unless
the campaign acknowledged it (``sparkfleet_acknowledge_host_differences``, or ``--acknowledge-differences``).

Example line: ``spark3: NOT NORMAL: decode rate −31% vs the other hosts (suspect runs) on llama / native / T1;
SM clock under load 850 MHz vs 2 400 MHz on the others; firmware differs (bios_version 1.0 vs 1.1)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import (
    CONFIG_METRICS,
    METRICS,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.serving import point_name
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import readiness
from sparkfleet import hostcheck, reproducibility, serving
from sparkfleet.compare import FAMILY_METHOD, classify, compare_sides, hold_to_family
from sparkfleet.report.document import Bullets, Paragraph, Section, fmt, table
from sparkfleet.report.types import Finding, plain
from sparkfleet.report.wording import num, pct, words
from sparkfleet.stats import DEFAULT_LEVEL, metric_columns, ok_runs
from sparkfleet.thresholds import DEFAULT_ALPHA, DEFAULT_TOLERANCE

KEYS = ["model", "environment", "workload"]
#: The figures a verdict sentence names first, in this order: decode throughput is what an owner feels.
PREFERRED = ("decode_tok_s", "output_tok_s", "tpot_ms", "total_tok_s", "req_s", "tg_req_tok_s", "tg_tok_s")
#: A host whose SM clock under load is below this fraction of the other hosts' median names it as a cause.
CLOCK_FRACTION = 0.9
#: identity field -> the word a cause uses for it (attestation.identity's keys).
IDENTITY_WORDS = (("firmware.", "firmware"), ("bios_", "firmware"), (".vbios_version", "VBIOS"),
                  ("driver_version", "driver"), ("kernel", "kernel"), ("cuda_version", "CUDA"),
                  ("image_digest", "image"), (".product_name", "GPU"), ("product_name", "product"))
COMPARISON_COLUMNS = [*KEYS, "metric", "host", "against", "runs", "n", "n_ref", "host_mean", "ref_mean",
                      "deviation_pct", "ci_low_pct", "ci_high_pct", "p_value", "p_family", "family_size", "outcome",
                      "reason", "required_n", "source"]
HOST_COLUMNS = ["host", "verdict", "sentence", "runs", "suspect_runs", "clock_mhz", "causes", "readiness"]


def _words(metric: str) -> str:
    return {"decode_tok_s": "decode rate", "tg_req_tok_s_c1": "serving decode (concurrency 1)"}.get(metric,
                                                                                                   words(metric))


@dataclass
class HostCheck:
    """Every host's verdict and the tables behind it."""

    hosts: pd.DataFrame  # HOST_COLUMNS, one row per host
    comparisons: pd.DataFrame  # COMPARISON_COLUMNS: against the fleet (runs "unmarked" / "suspect"), the reference
    roofline: pd.DataFrame  # hostcheck.ROOFLINE_COLUMNS
    energy: pd.DataFrame  # hostcheck.ENERGY_COLUMNS
    differences: dict[str, dict[str, Any]] = field(default_factory=dict)  # identity field -> {host: value}
    blocking: dict[str, dict[str, Any]] = field(default_factory=dict)  # the firmware/driver part
    acknowledged: bool = False
    tolerance: float = DEFAULT_TOLERANCE
    reference: str | None = None
    unmatched: list[str] = field(default_factory=list)  # reference entries that matched nothing, and why

    @property
    def refused(self) -> bool:
        """A firmware or driver mismatch across hosts that nobody acknowledged: the comparison is refused."""
        return bool(self.blocking) and not self.acknowledged

    def blocking_text(self) -> str:
        return "; ".join(f"{name}: " + ", ".join(f"{h}={v}" for h, v in sorted(values.items()))
                         for name, values in sorted(self.blocking.items()))

    def to_dict(self) -> dict[str, Any]:
        def rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
            return [{c: plain(v) for c, v in r.items()} for r in frame.to_dict("records")]
        return {"hosts": rows(self.hosts), "comparisons": rows(self.comparisons), "roofline": rows(self.roofline),
                "energy": rows(self.energy), "differences": self.differences, "blocking": self.blocking,
                "acknowledged": self.acknowledged, "refused": self.refused, "tolerance": self.tolerance,
                "reference": self.reference, "reference_unmatched": self.unmatched}


# --- the comparisons ----------------------------------------------------------------------------------------

def with_decode_rate(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with ``decode_tok_s`` = batch x 1000 / tpot_ms where both are known (hostcheck.decode_figures)."""
    figures = hostcheck.decode_figures(runs, pd.DataFrame(columns=hostcheck.STATE_COLUMNS))
    rate = figures[figures["metric"] == "decode_tok_s"].set_index("run_id")["value"]
    return runs.assign(decode_tok_s=runs["run_id"].map(rate).astype("float64")) if len(rate) else runs


def point_workload(workload: object, point: str) -> str:
    """The workload of a serving point's cell: ``serve-quick.vllm @ d0.c1.pp512.tg64``."""
    return f"{workload} @ {point}"


def serving_rows(points: pd.DataFrame | None) -> pd.DataFrame:
    """The measured serving points (serving.screened_points: what cannot be left out) as run-shaped rows, one per
    run x point: run_id, host, model, environment, the point's workload (point_workload), status, warmup and the
    serving metrics; the comparisons then treat each point as a cell and a run's points share its run_id (a
    suspect run's points are kept apart with it)."""
    columns = ["run_id", "host", *KEYS, "status", "warmup", *serving.SERVING_METRICS]
    if points is None or points.empty:
        return pd.DataFrame(columns=columns)
    measured = serving.screened_points(points, keep_suspect=True)  # a suspect run's points, compared apart
    if measured.empty:
        return pd.DataFrame(columns=columns)
    names = [point_workload(w, point_name(*p)) for w, *p in measured[["workload", *serving.PROFILE]].itertuples(
        index=False, name=None)]
    return measured.assign(workload=names, status="ok", warmup=False)[columns].reset_index(drop=True)


def with_points(measured: pd.DataFrame, points: pd.DataFrame | None) -> tuple[pd.DataFrame, list[str]]:
    """(``measured`` with the serving points' rows below it, the serving metrics they hold): what the fleet and the
    reference comparisons read."""
    rows = serving_rows(points)
    metrics = [m for m in serving.SERVING_METRICS if rows[m].notna().any()] if len(rows) else []
    if not metrics:
        return measured, []
    return pd.concat([measured, rows.astype({"warmup": "boolean"})], ignore_index=True), metrics


def _moments(runs: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    long = runs.melt(id_vars=KEYS, value_vars=metrics, var_name="metric", value_name="value").dropna(
        subset=["value"])
    return long.groupby([*KEYS, "metric"], sort=True)["value"].agg(n="count", mean="mean", var="var").reset_index()


def two_groups(reference: pd.DataFrame, runs: pd.DataFrame, metrics: list[str], alpha: float, tolerance: float,
               level: float) -> pd.DataFrame:
    """``runs`` (side b) against ``reference`` (side a) per cell and metric, by compare.classify."""
    ref, mine = _moments(reference, metrics), _moments(runs, metrics)
    t = mine.merge(ref, on=[*KEYS, "metric"], suffixes=("", "_ref"))
    if t.empty:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    paired = compare_sides(t, "_ref", "", level, same_distribution=True)  # like its peers/reference
    judged = classify(paired, alpha=alpha, threshold=tolerance)
    scale = t["mean_ref"].abs().where(t["mean_ref"] != 0)
    return t.assign(n_ref=t["n_ref"].astype("int64"), host_mean=t["mean"], ref_mean=t["mean_ref"],
                    deviation_pct=paired["change_pct"], ci_low_pct=paired["ci_low"] / scale * 100,
                    ci_high_pct=paired["ci_high"] / scale * 100, p_value=paired["p_value"],
                    outcome=judged["outcome"].to_numpy(), reason=judged["reason"].to_numpy(),
                    required_n=judged["required_n"].to_numpy())


def against_figures(figures: pd.DataFrame, runs: pd.DataFrame, alpha: float, tolerance: float,
                    level: float) -> pd.DataFrame:
    """``runs`` against published single figures (hostcheck.load_reference_figures): a one-sample t-test, i.e.
    Welch's with a reference side of zero spread (its degrees of freedom reduce to n - 1)."""
    rows = []
    for fig in figures.itertuples(index=False):
        if fig.metric not in runs:
            continue
        match = runs[(runs["model"] == fig.model) & (runs["workload"] == figure_workload(fig))]
        if isinstance(fig.environment, str) and fig.environment:
            match = match[match["environment"] == fig.environment]
        for env, cell in match.groupby("environment", sort=True):
            values = cell[fig.metric].dropna()
            if values.empty:
                continue
            rows.append({"model": fig.model, "environment": env, "workload": figure_workload(fig),
                         "metric": fig.metric, "n": len(values), "mean": values.mean(), "var": values.var(),
                         "n_ref": len(values), "mean_ref": fig.value, "var_ref": 0.0, "source": fig.source})
    if not rows:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    t = pd.DataFrame(rows)
    paired = compare_sides(t, "_ref", "", level)
    judged = classify(paired, alpha=alpha, threshold=tolerance)
    scale = t["mean_ref"].abs()
    return t.assign(n_ref=0, host_mean=t["mean"], ref_mean=t["mean_ref"], deviation_pct=paired["change_pct"],
                    ci_low_pct=paired["ci_low"] / scale * 100, ci_high_pct=paired["ci_high"] / scale * 100,
                    p_value=paired["p_value"], outcome=judged["outcome"].to_numpy(),
                    reason=judged["reason"].to_numpy(), required_n=judged["required_n"].to_numpy())


def figure_workload(fig: Any) -> str:
    """The workload a published figure is matched on: a serving figure's names its point (point_workload)."""
    point = getattr(fig, "point", None)
    return point_workload(fig.workload, point) if isinstance(point, str) and point else str(fig.workload)


def _tagged(frame: pd.DataFrame, host: str, against: str, runs: str, source: str = "") -> pd.DataFrame:
    out = frame.assign(host=host, against=against, runs=runs)
    if "source" not in out:
        out["source"] = source
    return out.reindex(columns=COMPARISON_COLUMNS)


def fleet_comparisons(measured: pd.DataFrame, suspect_ids: set[str], metrics: list[str], tolerance: float,
                      alpha: float, level: float) -> pd.DataFrame:
    """Each host's unmarked runs against its peers (host_deviations), and each host's suspect runs, on their own,
    against the unmarked runs of the peers that are not out."""
    marked = measured["run_id"].isin(suspect_ids)
    healthy = measured[~marked]
    dev = reproducibility.host_deviations(healthy, metrics, tolerance, alpha=alpha, level=level)
    parts = [dev.rename(columns={"rest_mean": "ref_mean", "n_rest": "n_ref"}).assign(
        against="the other hosts", runs="unmarked", source="")[COMPARISON_COLUMNS]] if len(dev) else []
    out_hosts = set(dev.loc[dev["outside"].astype(bool), "host"].astype(str)) if len(dev) else set()
    for host, mine in measured[marked].groupby("host", sort=True):
        peers = healthy[(healthy["host"] != host) & ~healthy["host"].astype(str).isin(out_hosts)]
        if peers.empty:
            peers = healthy[healthy["host"] != host]
        judged = two_groups(peers, mine, metrics, alpha, tolerance, level)
        if len(judged):
            parts.append(_tagged(judged, str(host), "the other hosts", "suspect"))
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COMPARISON_COLUMNS)


def unmatched_figures(figures: pd.DataFrame, measured: pd.DataFrame, metrics: list[str]) -> list[str]:
    """Each published figure that no measured run matches, with why: a figure compared with nothing is named,
    never dropped silently (a model not in the campaign, a metric misspelt or not compared here)."""
    out = []
    for fig in figures.itertuples(index=False):
        workload = figure_workload(fig)
        where = f"{fig.metric} for {fig.model} / {workload}" + (
            f" / {fig.environment}" if isinstance(fig.environment, str) and fig.environment else "")
        model = measured[measured["model"].astype(str) == fig.model]
        cell = model[model["workload"].astype(str) == workload]
        if isinstance(fig.environment, str) and fig.environment:
            cell = cell[cell["environment"].astype(str) == fig.environment]
        if fig.metric in serving.SERVING_METRICS and workload == str(fig.workload):
            why = "a serving metric without its point: give point (e.g. d0.c1.pp512.tg64) with the figure"
        elif fig.metric not in {*METRICS, "decode_tok_s", *serving.SERVING_METRICS}:
            why = f"not a metric sparkfleet records (one of {', '.join(sorted(metrics)) or 'none measured'})"
        elif fig.metric not in metrics:
            why = "not measured in this campaign"
        elif model.empty:
            why = f"model {fig.model} is not in this campaign"
        elif cell.empty:
            why = "no measured run of that workload" + (" and environment" if isinstance(fig.environment, str)
                                                           and fig.environment else "")
        elif cell[fig.metric].isna().all():
            why = "no run of that cell has the metric"
        else:
            continue
        out.append(f"{where} ({fig.source}): {why}")
    return out


def reference_comparisons(reference: str | Path, measured: pd.DataFrame, suspect_ids: set[str], metrics: list[str],
                          tolerance: float, alpha: float, level: float) -> pd.DataFrame:
    """Each host (its unmarked and its suspect runs apart) against a previous campaign's results directory (its
    own unmarked runs, all hosts pooled) or a file of published figures."""
    path = Path(reference)
    parts = []
    if path.is_dir():
        from sparkfleet.load import load_runs  # noqa: PLC0415 - only with a reference campaign

        ref = load_runs(path)
        ref_runs = with_decode_rate(ok_runs(ref.runs))
        ref_states = hostcheck.run_states(ref.root, ref_runs)
        ref_runs, _ = with_points(ref_runs, ref.serving)  # its serving points too, each a cell
        ref_runs = ref_runs[~ref_runs["run_id"].isin(set(ref_states.loc[ref_states["readiness_state"] == "suspect",
                                                                        "run_id"]))]
        shared = [m for m in metrics if m in ref_runs]
        judge = lambda runs: two_groups(ref_runs, runs, shared, alpha, tolerance, level)  # noqa: E731
        label = f"the reference campaign {path}"
    else:
        figures = hostcheck.load_reference_figures(path)
        judge = lambda runs: against_figures(figures, runs, alpha, tolerance, level)  # noqa: E731
        label = f"the published figures in {path}"
    marked = measured["run_id"].isin(suspect_ids)
    for (host, is_marked), runs in measured.groupby([measured["host"], marked], sort=True):
        judged = judge(runs)
        if len(judged):
            parts.append(_tagged(judged, str(host), label, "suspect" if is_marked else "unmarked"))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COMPARISON_COLUMNS)


def reference_unmatched(path: Path, measured: pd.DataFrame, compared: pd.DataFrame, metrics: list[str]) -> list[str]:
    """What of ``--reference`` was compared with nothing: each published figure that matched no run, or, for a
    reference campaign, the whole campaign when it shares no cell and metric with this one."""
    if not path.is_dir():
        return unmatched_figures(hostcheck.load_reference_figures(path), measured, metrics)
    return [] if len(compared) else [f"the reference campaign {path} shares no model, environment, workload and "
                                     "metric with this campaign: nothing was compared with it"]


# --- the causes ---------------------------------------------------------------------------------------------

def _identity_word(name: str) -> str:
    for pattern, word in IDENTITY_WORDS:
        if name.startswith(pattern) or name.endswith(pattern) or name == pattern:
            return word
    return name


def identity_causes(differences: dict[str, dict[str, Any]], host: str) -> list[str]:
    """"firmware differs (bios_version 1.0 vs 1.1)": one clause per kind of identity field in which ``host``'s
    value is found on no other host."""
    by_word: dict[str, list[str]] = {}
    for name, values in sorted(differences.items()):
        if host not in values:
            continue
        mine = json.dumps(values[host], sort_keys=True)
        others = {json.dumps(v, sort_keys=True): v for h, v in values.items() if h != host}
        if not others or mine in others:
            continue
        theirs = ", ".join(sorted(str(v) for v in others.values()))
        by_word.setdefault(_identity_word(name), []).append(f"{name} {values[host]} vs {theirs}")
    return [f"{word} differs ({'; '.join(parts)})" for word, parts in by_word.items()]


def state_causes(states: pd.DataFrame, host: str) -> tuple[list[str], float | None]:
    """(the causes the runs' readiness and attestation sections show for ``host``, its median SM clock under
    load)."""
    causes: list[str] = []
    mine = states[states["host"] == host]
    others = states[states["host"] != host]
    clock = mine["clock_mhz"].median() if mine["clock_mhz"].notna().any() else None
    theirs = others["clock_mhz"].median() if others["clock_mhz"].notna().any() else None
    suspect = mine[mine["readiness_state"] == "suspect"]
    # a power-limited clock is what a healthy GPU at its cap runs at (readiness.judge): never named as a cause
    limited = mine["power_limited"].eq(True).all() if "power_limited" in mine and len(mine) else False
    invalid = mine[mine["readiness_state"] == "invalid"]
    if clock is not None and theirs is not None and clock < CLOCK_FRACTION * theirs and not limited:
        causes.append(f"SM clock under load {num(clock)} MHz vs {num(theirs)} MHz on the others")
    elif len(suspect):
        reason = suspect["readiness_reasons"].dropna()
        causes.append("readiness probe: " + (str(reason.iloc[0]) if len(reason) else "suspect"))
    if len(invalid):
        causes.append(f"readiness probe invalid in {len(invalid)} run(s): its load did not run, nothing was judged")
    grew = mine[mine["throttle_grew"].notna()]
    if len(grew):
        causes.append(f"throttle counters grew in {len(grew)} of {len(mine)} run(s) ({grew['throttle_grew'].iloc[0]})")
    fragmented = mine[mine["free_huge_blocks"].eq(0)]
    if len(fragmented):
        causes.append(f"memory fragmented at the start of {len(fragmented)} run(s) (no free 2 MiB blocks)")
    return causes, clock


def probe_against_peers(states: pd.DataFrame) -> dict[str, str]:
    """host -> the warning of readiness.compare_to_peers (rule 5, SuperBench-style: the probe's delivered TFLOP/s
    below 0.9 x the other hosts' median), for the hosts it warns about; each host's figure is its runs' median."""
    if states.empty or "tflops" not in states or states["tflops"].isna().all():
        return {}
    figures = states.dropna(subset=["tflops"]).groupby(states["host"].astype(str))["tflops"].median()
    judged = readiness.compare_to_peers(figures.to_dict())
    return {host: str(r["message"]).split(": ", 1)[-1] for host, r in judged.items() if r["warn"]}


# --- the verdict --------------------------------------------------------------------------------------------

def _worst(rows: pd.DataFrame) -> pd.Series:
    rank = rows["metric"].map(lambda m: PREFERRED.index(m) if m in PREFERRED else len(PREFERRED))
    return rows.assign(_rank=rank, _abs=-rows["deviation_pct"].abs()).sort_values(["_rank", "_abs"]).iloc[0]


def _clause(row: pd.Series) -> str:
    runs = " (suspect runs)" if row["runs"] == "suspect" else ""
    return (f"{_words(str(row['metric']))} {pct(float(row['deviation_pct']))} vs {row['against']}{runs} on "
            f"{row['model']} / {row['environment']} / {row['workload']}")


#: The readiness states (readiness.judge) in the order a host's line counts them after "healthy".
READINESS_STATES = ("suspect", "invalid", "unknown")


def readiness_line(states: pd.DataFrame, host: str) -> str:
    """What the readiness probe found on ``host`` before its runs, whatever the verdict: "readiness: 9 of 9 probes
    healthy (power-limited at the 700 W limit)", the other states counted after it ("; 1 suspect"); "" when no run
    of the host carries a probe. A healthy probe whose clock the power cap held is power-limited, as a GPU at its
    cap runs (readiness.judge), never a cause."""
    # the host's own probes: a run another node made suspect (hostcheck.with_node_readiness) was healthy here
    state = "own_readiness_state" if "own_readiness_state" in states else "readiness_state"
    if states.empty or state not in states:
        return ""
    mine = states[(states["host"].astype(str) == host) & states[state].notna()]
    if mine.empty:
        return ""
    counts = mine[state].astype(str).value_counts()
    healthy = int(counts.get("healthy", 0))
    text = f"{healthy} of {len(mine)} probe{'s' if len(mine) != 1 else ''} healthy"
    limited = mine[(mine[state] == "healthy") & mine["power_limited"].eq(True)]
    if len(limited):
        limits = limited["power_limit_w"].dropna() if "power_limit_w" in limited else pd.Series(dtype="float64")
        at = f" at the {num(float(limits.median()))} W limit" if len(limits) else ""
        share = "" if len(limited) == healthy else f"{len(limited)} of them "
        text += f" ({share}power-limited{at})"
    others = [f"{int(counts[s])} {s}" for s in READINESS_STATES if counts.get(s)]
    others += [f"{int(n)} {s}" for s, n in counts.items() if s not in ("healthy", *READINESS_STATES)]
    return "readiness: " + "; ".join([text, *others])


def host_verdict(host: str, comparisons: pd.DataFrame, causes: list[str], suspect_runs: int,
                 tolerance: float, readiness: str = "") -> tuple[str, str]:
    """(verdict, sentence) of one host: not normal (different somewhere), suspect (runs the probe marked),
    undetermined, normal (the same everywhere it was compared), no peers (compared with nothing). ``readiness``:
    the host's readiness line (:func:`readiness_line`), said last whatever the verdict."""
    mine = comparisons[comparisons["host"] == host]
    different = mine[mine["outcome"] == "different"]
    open_rows = mine[mine["outcome"] == "undetermined"]
    marked = f"{suspect_runs} run(s) marked suspect by the readiness probe, kept apart" if suspect_runs else ""
    if len(different):
        verdict, clause = "not normal", _clause(_worst(different))
    elif suspect_runs:
        verdict, clause = "suspect", marked
        marked = ""
    elif mine.empty:
        verdict, clause = "no peers", "no other host or reference ran its cells"
    elif open_rows.empty:
        verdict, clause = "normal", (f"within ±{tolerance * 100:g}% of {', '.join(sorted(set(mine['against'])))} "
                                     f"on {len(mine)} cell metric(s)")
    else:
        need = open_rows["required_n"].max()
        verdict = "undetermined"
        clause = (f"{len(open_rows)} of {len(mine)} comparison(s) too noisy to tell"
                  + (f" (≈ {need:.0f} runs per side would)" if need == need else ""))
    parts = [clause, *([marked] if marked else []), *causes, *([readiness] if readiness else [])]
    return verdict, f"{host}: {verdict.upper()}: " + "; ".join(parts)


def check_hosts(root: str | Path, runs: pd.DataFrame, *, tolerance: float = DEFAULT_TOLERANCE,
                alpha: float = DEFAULT_ALPHA, level: float = DEFAULT_LEVEL, reference: str | Path | None = None,
                acknowledged: bool | None = None, always: bool = False,
                points: pd.DataFrame | None = None) -> HostCheck | None:
    """Every host's verdict from the runs loaded from ``root`` (sparkfleet.load) and the host-state evidence
    under it. ``acknowledged`` None: read from campaign.json (hostcheck.acknowledged_in). Without ``always``, None
    when the tree holds none of the evidence (no readiness/attestation section, no attestation.json or
    bandwidth.json) and no reference is given: the report then says nothing new. ``points``: the serving points
    loaded with the runs (load.LoadResult.serving), compared per point like the runs (serving_rows)."""
    root = Path(root)
    dirs = hostcheck.host_dirs(root, runs)
    states = hostcheck.run_states(root, runs)
    atts = hostcheck.attestations(dirs)
    bandwidth = hostcheck.bandwidths(dirs)
    if not always and states.empty and not atts and not bandwidth and reference is None:
        return None
    # the suspect runs too, which every statistic leaves out (stats.measured_runs): a host's are compared apart here
    measured = with_decode_rate(ok_runs(runs))
    metrics = [m for m in metric_columns(runs) if m not in CONFIG_METRICS]
    metrics += [m for m in ("decode_tok_s",) if m in measured and measured[m].notna().any()]
    suspect_ids = set(states.loc[states["readiness_state"] == "suspect", "run_id"].astype(str))
    compared, point_metrics = with_points(measured, points)  # the runs, and each serving point as a cell
    metrics += point_metrics
    parts = [fleet_comparisons(compared, suspect_ids, metrics, tolerance, alpha, level)]
    unmatched: list[str] = []
    if reference is not None:
        parts.append(reference_comparisons(reference, compared, suspect_ids, metrics, tolerance, alpha, level))
        unmatched = reference_unmatched(Path(reference), compared, parts[-1], metrics)
    parts = [p for p in parts if len(p)]
    comparisons = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COMPARISON_COLUMNS)
    # every comparison behind a "not normal" (peers, suspect runs, the reference) is one family (Holm)
    comparisons = hold_to_family(comparisons, alpha)[COMPARISON_COLUMNS]
    differences, blocking = hostcheck.identity_differences(atts)
    peers = probe_against_peers(states)
    rows = []
    for host in sorted(set(runs["host"].astype(str))):
        causes, clock = state_causes(states, host)
        causes += [peers[host]] if host in peers else []
        causes += identity_causes(differences, host)
        n_suspect = int(measured["run_id"].isin(suspect_ids)[measured["host"] == host].sum())
        ready = readiness_line(states, host)
        verdict, sentence = host_verdict(host, comparisons, causes, n_suspect, tolerance, ready)
        rows.append({"host": host, "verdict": verdict, "sentence": sentence,
                     "runs": int((measured["host"] == host).sum()), "suspect_runs": n_suspect, "clock_mhz": clock,
                     "causes": "; ".join(causes), "readiness": ready})
    weights = hostcheck.model_weights(root, runs) if any(b.get("bytes_per_s") for b in bandwidth.values()) else {}
    return HostCheck(
        hosts=pd.DataFrame(rows, columns=HOST_COLUMNS), comparisons=comparisons,
        roofline=hostcheck.roofline_cells(ok_runs(runs), states, bandwidth, weights),
        energy=hostcheck.energy_cells(ok_runs(runs), states), differences=differences, blocking=blocking,
        acknowledged=hostcheck.acknowledged_in(root) if acknowledged is None else acknowledged,
        tolerance=tolerance, reference=None if reference is None else str(reference), unmatched=unmatched)


# --- what the report and the terminal show ------------------------------------------------------------------

def refusal_text(check: HostCheck) -> str:
    return (f"REFUSED: firmware or driver differs across hosts ({check.blocking_text()}); hosts that differ there "
            "are not comparable. Make them the same, or acknowledge the difference "
            "(sparkfleet_acknowledge_host_differences: true, or --acknowledge-differences)")


def findings(check: HostCheck | None) -> list[Finding]:
    """Warnings: a blocking firmware/driver mismatch, each host not normal or with suspect runs, each decode
    cell above its bandwidth roofline (implausible)."""
    if check is None:
        return []
    out = []
    if check.blocking:
        out.append(Finding("host-differences", refusal_text(check) if check.refused else
                           f"firmware or driver differs across hosts, acknowledged: {check.blocking_text()}"))
    if check.unmatched:
        out.append(Finding("reference-unmatched", f"{len(check.unmatched)} --reference entr"
                           f"{'y' if len(check.unmatched) == 1 else 'ies'} matched nothing and compared with no "
                           "run: " + "; ".join(check.unmatched), tuple(check.unmatched)))
    for row in check.hosts.itertuples(index=False):
        if row.verdict in ("not normal", "suspect"):
            out.append(Finding("host-not-normal", row.sentence, subject=f"host {row.host}"))
    for r in check.roofline[check.roofline["implausible"].astype(bool)].itertuples(index=False):
        out.append(Finding(
            "roofline-implausible",
            f"implausible: {r.host} / {r.model} / {r.environment} / {r.workload} {_words(r.metric)}"
            f"{f' at depth {r.depth}' if r.point else ''} reaches "
            f"{r.max_percent:.0f}% of the bandwidth roofline ({num(r.max_tok_s)} tok/s against {num(r.roofline_tok_s)} "
            f"tok/s at batch {r.batch}): decode cannot read the weights faster than the memory delivers them; wrong "
            "model, tokens miscounted or a cache that served the output", subject=f"{r.host} / {r.model}"))
    return out


def _roofline_cell(r: Any) -> str:
    if r.percent is None or r.percent != r.percent:
        return f"– ({r.note})"
    return f"{r.percent:.1f}%" + (" IMPLAUSIBLE" if r.implausible else "")


def section(check: HostCheck | None) -> Section | None:
    """The report's "Is this host normal?" section: the verdict per host, the roofline and energy per cell."""
    if check is None:
        return None
    blocks: list = [Paragraph(
        f"Each host against the other hosts (and the reference, where given) by the rule of every verdict: not "
        f"normal where a difference is significant and beyond ±{check.tolerance * 100:g}%, significance by "
        f"{FAMILY_METHOD} (every host, cell, metric and reference comparison here is one family). Runs the "
        "readiness probe marked suspect are compared on their own, never averaged in. Causes come from the "
        "readiness probe, the throttle counters, the hosts' attestation (firmware, VBIOS, driver, kernel) and the "
        "memory state at start.")]
    if check.refused:
        blocks.append(Paragraph(refusal_text(check)))
    blocks.append(Bullets(list(check.hosts["sentence"]), "hosts"))
    roof = check.roofline
    if len(roof):
        columns = {
            "host": roof["host"], "model": roof["model"], "environment": roof["environment"],
            "workload": roof["workload"], "figure": roof["metric"].map(_words), "depth": roof["depth"].map(fmt),
            "batch": roof["batch"].map(fmt),
            "n": roof["n"].map(fmt), "mean tok/s": roof["mean_tok_s"].map(fmt),
            "roofline tok/s": roof["roofline_tok_s"].map(fmt),
            "% of the bandwidth roofline": [_roofline_cell(r) for r in roof.itertuples(index=False)],
            "bandwidth": [f"{b / 1e9:.0f} GB/s ({m})" if b == b and b else "–"
                          for b, m in zip(roof["bandwidth_bytes_s"].astype(float), roof["bandwidth_method"],
                                          strict=True)],
            "weights": [f"{w / 1e9:.2f} GB ({s})" if w == w and w else "–"
                        for w, s in zip(roof["weight_bytes"].astype(float), roof["weight_source"], strict=True)],
        }
        if roof["decoder"].fillna("").astype(bool).any():  # how the engine said it decoded, where it said
            columns["decoder (as the engine said)"] = roof["decoder"].fillna("").replace("", "–")
        blocks.append(table(pd.DataFrame(columns), "Decode against the memory-bandwidth roofline (batch x bandwidth / "
                            "weight bytes; weights only, so the percentage is a lower bound)"))
    energy = check.energy
    if len(energy):
        blocks.append(table(pd.DataFrame({
            "host": energy["host"], "model": energy["model"], "environment": energy["environment"],
            "workload": energy["workload"], "n": energy["n"].map(fmt),
            "J per output token (steady)": energy["j_per_output_token_steady"].map(fmt),
            "power under load (W)": energy["steady_power_w"].map(fmt),
            "start-up J per run": energy["startup_j_mean"].map(fmt),
            "whole run: J per output token / J per run": energy["j_per_output_token"].map(fmt) + " / "
            + energy["joules_mean"].map(fmt),
            "scope": energy["scope"], "steady window": energy["steady_note"].replace("", "–"),
        }), "Energy per output token over the load's steady window (mean power under load / the run's output rate); "
            "start-up (model load, compilation, graph capture, a server's start) apart, never in J per output token; "
            "the whole run's figures as recorded (scope: what the power sensor covers)"))
    return Section("Is this host normal?", blocks)


def text_table(check: HostCheck) -> str:
    """The compact terminal table of `sparkfleet report --hosts`: one line per host, then its sentence."""
    frame = check.hosts
    width = max([4, *frame["host"].map(len)])
    lines = []
    if check.refused:
        lines.append(refusal_text(check))
    elif check.blocking:
        lines.append(f"firmware or driver differs across hosts (acknowledged): {check.blocking_text()}")
    lines.append(f"{'host':<{width}}  {'verdict':<12}  {'runs':>4}  {'suspect':>7}  {'clock MHz':>9}  likely cause")
    for r in frame.itertuples(index=False):
        clock = "–" if r.clock_mhz is None or r.clock_mhz != r.clock_mhz else num(r.clock_mhz)
        lines.append(f"{r.host:<{width}}  {r.verdict:<12}  {r.runs:>4}  {r.suspect_runs:>7}  {clock:>9}  "
                     f"{r.causes or '–'}")
    lines.append("")
    lines += [f"  {s}" for s in frame["sentence"]]
    lines += [f"  ! --reference entry matched nothing: {u}" for u in check.unmatched]
    implausible = check.roofline[check.roofline["implausible"].astype(bool)]
    lines += [f"  ! implausible: {r.host} / {r.model} / {r.workload} {_words(r.metric)} at {r.max_percent:.0f}% of "
              "the bandwidth roofline" for r in implausible.itertuples(index=False)]
    shown = check.roofline[check.roofline["percent"].notna()]
    if len(shown):
        lines.append("decode against the bandwidth roofline: " + "; ".join(
            f"{r.host} {r.model}/{r.workload} {r.metric}{'@' + r.point if r.point else ''} {r.percent:.0f}%"
            for r in shown.itertuples(index=False)))
    for r in check.energy.itertuples(index=False):
        lines.append(f"energy: {r.host} {r.model}/{r.environment}/{r.workload} "
                     f"{fmt(r.j_per_output_token_steady)} J per output token over the load, start-up "
                     f"{fmt(r.startup_j_mean)} J apart ({r.scope})")
    return "\n".join(lines)


def says_something(check: HostCheck) -> bool:
    """Whether the verdicts tell the terminal anything: not when every host was compared with nothing and shows
    no cause (a one-host campaign without a reference)."""
    hosts = check.hosts
    return bool(check.refused or (hosts["verdict"] != "no peers").any() or (hosts["causes"].astype(str) != "").any())


def failing(check: HostCheck) -> bool:
    """For an exit status: refused, some host not normal, or a --reference that matched nothing at all (every
    entry unmatched: the question asked was not answered)."""
    nothing = bool(check.unmatched) and not (check.comparisons["against"].astype(str) != "the other hosts").any()
    return check.refused or nothing or bool(np.any(check.hosts["verdict"] == "not normal"))


@dataclass(frozen=True)
class HostOptions:
    """What `sparkfleet report` adds for the host verdicts: ``--reference`` and ``--acknowledge-differences``
    (None: campaign.json says whether differences were acknowledged)."""

    reference: str | None = None
    acknowledged: bool | None = None


def for_report(facts: Any, options: HostOptions | None = None,
               points: pd.DataFrame | None = None) -> HostCheck | None:
    """The report's host check (None when the tree holds no host-state evidence and no reference is given);
    ``facts`` is the report's Analysis (root, runs, options), ``points`` its serving points."""
    options = options or HostOptions()
    o = facts.options
    return check_hosts(facts.root, facts.runs, tolerance=o.tolerance, alpha=o.alpha, level=o.level,
                       reference=options.reference, acknowledged=options.acknowledged, points=points)


#: Finding kinds the terminal summary prints one by one (the host lines are printed already).
TERMINAL_KINDS = ("host-differences", "roofline-implausible", "reference-unmatched")
