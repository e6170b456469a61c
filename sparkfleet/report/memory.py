"""Where the memory went, which factor moves the KV cache, and how large a difference must be to mean
anything (issue 15): computed once from the loaded runs, rendered by the report like every other answer.

* **Decomposition** (per run, then per cell): the engine's device total split into the KV cache, the reserve
  the fraction keeps back, page cache, cgroup-accounted memory, the engine's own peak and the unexplained rest;
  with each run's KV formula residual. Between an environment and its native reference the KV-cache gap is
  attributed to the same parts.
* **Factor effects**: per model, each factor's (environment kind, memory limit, the campaign's factors)
  effect on the KV cache and the peak, Welch with its CI; the largest is named.
* **A/A noise floor**: per metric, from the A/A pairs (``aa_group``/``aa_member``): the pooled run-to-run CV,
  the noise floor, the minimum detectable effect for the campaign's iterations and the iterations a 2% and a
  5% effect need. docs/MEMORY.md ("The report") defines each figure.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.trtllm_memory import (
    kv_source_kind,
)
from sparkfleet import compare, load, stats
from sparkfleet.report.types import MemoryStudy, Verdict, VerdictLine
from sparkfleet.report.wording import pct, words

#: The parts of device_total, bottom to top in the figure.
PARTS = ("model_gib", "page_cache_gib", "cgroup_gib", "unexplained_gib", "kv_gib", "reserve_gib")
PART_WORDS = {
    "model_gib": "engine peak (model)",
    "page_cache_gib": "page cache",
    "cgroup_gib": "cgroup-accounted",
    "unexplained_gib": "unexplained",
    "kv_gib": "KV cache",
    "reserve_gib": "reserve (1 − fraction)",
}
#: The metrics whose A/A noise floor is reported (throughput, latency and memory: not configuration).
AA_METRICS = compare.COMPARED_METRICS
EFFECT_METRICS = ("kv_cache_gib", "peak_memory_gib")
#: The effects the A/A table recommends iterations for.
TARGET_EFFECTS = (0.02, 0.05)
_KEYS = ["host", "model", "workload"]
#: How a true/false factor's effect is worded (default: "<name> true vs false").
FLAG_WORDS = {"drop_caches": "page cache dropped vs kept"}


def _is_reference(runs: pd.DataFrame) -> pd.Series:
    """Native runs that are not the second member of an A/A pair."""
    member = runs["aa_member"].astype("string") if "aa_member" in runs else pd.Series(pd.NA, index=runs.index)
    return (runs["environment_kind"].astype("string") == "native") & (member.fillna("a") == "a")


def run_parts(runs: pd.DataFrame, kv_runs: pd.DataFrame) -> pd.DataFrame:
    """Each measured KV-sizing run's device total in parts (GiB; docs/MEMORY.md, "The report")."""
    measured = stats.measured_runs(runs)
    needed = ["peak_memory_gib", "kv_cache_gib", "device_total_gib"]
    if measured.empty or not all(c in measured for c in needed) or "mem_start_cached_gib" not in measured:
        return pd.DataFrame()
    m = measured.dropna(subset=needed)
    if "engine" in m:
        m = m[~m["engine"].isin(compare.GROWING_KV_ENGINES)]
    cached = load.numbers(m, "mem_peak_cached_gib").fillna(load.numbers(m, "mem_start_cached_gib"))
    m = m[cached.notna()]
    if m.empty:
        return pd.DataFrame()
    cached = cached[m.index]
    total, peak, kv = (m[c].astype(float) for c in ("device_total_gib", "peak_memory_gib", "kv_cache_gib"))
    buffers = load.numbers(m, "mem_peak_buffers_gib").fillna(load.numbers(m, "mem_start_buffers_gib")).fillna(0.0)
    host_cache = cached + buffers
    container = m["environment_kind"].astype("string") == "container"
    limit = load.numbers(m, "mem_cgroup_limit_gib").fillna(load.numbers(m, "mem_peak_cgroup_limit_gib"))
    limited = container & limit.notna() & (limit < total)
    # The cgroup's own high-water mark (the kernel's memory.peak), else the highest sampled charge: the charge at
    # the machine-wide peak sample can predate the container's allocation (sampling races a short run).
    current = (load.numbers(m, "mem_cgroup_peak_gib").fillna(load.numbers(m, "mem_cgroup_current_max_gib"))
               .fillna(load.numbers(m, "mem_peak_cgroup_current_gib")))
    file_pages = load.numbers(m, "mem_peak_cgroup_file_gib").fillna(0.0)
    charged = (current - file_pages).clip(lower=0).fillna(0.0)  # the cgroup's charge beyond its page cache
    # The engine's own peak: what the reference (native) runs of the same cell had beyond the page cache.
    own = (peak - host_cache).rename("own")
    reference = own[_is_reference(m)].groupby([m.loc[_is_reference(m), k] for k in _KEYS]).median()
    keys = pd.MultiIndex.from_frame(m[_KEYS].astype(str))
    reference.index = reference.index.map(lambda t: tuple(str(x) for x in t))
    engine = pd.Series(reference.reindex(keys).to_numpy(), index=m.index).clip(lower=0)
    has_reference = engine.notna()
    engine = engine.fillna(0.0)
    page = host_cache.where(~limited, file_pages)
    model = engine.where(~limited, np.minimum(engine, charged))
    cgroup = (charged - model).clip(lower=0).where(container, 0.0) + (total - limit).where(limited, 0.0)
    fraction, _ = load.kv_fraction(m)
    tmp_kv = load.numbers(m, "tmp_kv_gib")  # NaN: the record does not carry it, and the residual leaves it out
    residual = compare.kv_residual(m, fraction)
    if not kv_runs.empty and "residual_gib" in kv_runs:
        recorded = kv_runs.set_index("run_id")["residual_gib"]
        residual = m["run_id"].map(recorded).astype(float).fillna(residual)
    out = m[["host", "model", "environment", "workload", "environment_kind", "run_id"]].copy()
    for column in ("aa_group", "aa_member", *(levels.name for _, levels in load.factors(m))):
        out[column] = m.get(column)
    out["kv_is_budget"] = kv_figure(m).eq("budget").fillna(False).astype(bool)
    out = out.assign(
        device_total_gib=total, peak_gib=peak, fraction=fraction, model_gib=model, page_cache_gib=page,
        cgroup_gib=cgroup, unexplained_gib=peak - page - model - cgroup, kv_gib=kv,
        reserve_gib=total - peak - kv, kv_residual_gib=residual, tmp_kv_gib=tmp_kv,
        line_residual_gib=load.numbers(m, "kv_budget_residual_gib"), limit_gib=limit.where(limited),
        engine_reference=has_reference)
    return out.reset_index(drop=True)


def decomposition(parts: pd.DataFrame) -> pd.DataFrame:
    """Mean parts per (host, model, workload, environment); ``tmp_kv_gib`` and ``line_residual_gib`` are means
    over the runs whose records carry them, ``n_without_tmp_kv`` counts the runs whose KV residual leaves
    tmp_kv out."""
    if parts.empty:
        return pd.DataFrame()
    keys = [*_KEYS, "environment", "environment_kind"]
    columns = ["device_total_gib", "peak_gib", "fraction", *PARTS, "kv_residual_gib", "tmp_kv_gib",
               "line_residual_gib", "limit_gib"]
    grouped = parts.groupby(keys, sort=True, dropna=False)
    table = grouped[columns].mean().round(4)  # the records' precision
    table.insert(0, "n", grouped.size())
    table.insert(table.columns.get_loc("tmp_kv_gib") + 1, "n_without_tmp_kv",
                 table["n"] - grouped["tmp_kv_gib"].count())
    table["n_kv_budget"] = grouped["kv_is_budget"].sum().astype(int) if "kv_is_budget" in parts else 0
    return table.reset_index()


#: The runs frame's column (sparkfleet.load: ``source_`` + metric) that says where kv_cache_gib came from.
KV_SOURCE_COLUMN = "source_kv_cache_gib"


def kv_figure(runs: pd.DataFrame) -> pd.Series:
    """Per run, what its kv_cache_gib is: 'allocation' (the engine's [MemUsageChange] allocation line),
    'budget' (no allocation line: the memory profiling's figure, e.g. TensorRT-LLM 1.3+ with the KV cache
    manager V2) or NA (no KV figure, or a source that does not say)."""
    if KV_SOURCE_COLUMN not in runs:
        return pd.Series(pd.NA, index=runs.index, dtype="string")
    return runs[KV_SOURCE_COLUMN].map(lambda s: kv_source_kind(s) if isinstance(s, str) else None).astype("string")


def kv_figure_label(n_budget: float, n: float) -> str:
    """A cell's KV figure in the report's tables: allocation, budget, or budget in k of n runs."""
    n_budget, n = int(n_budget or 0), int(n or 0)
    return "allocation" if n_budget == 0 else "budget" if n_budget >= n else f"budget in {n_budget} of {n} runs"


def budget_kv_cells(runs: pd.DataFrame) -> pd.DataFrame:
    """The cells (host, model, environment, workload) where a measured run's kv_cache_gib is a budget, not
    an allocation: ``n`` runs with a KV figure, ``n_budget`` of them budgets, and one such run."""
    columns = [*stats.CELL_KEYS, "n", "n_budget", "run_id", "source"]
    measured = stats.measured_runs(runs)
    if measured.empty or "kv_cache_gib" not in measured or KV_SOURCE_COLUMN not in measured:
        return pd.DataFrame(columns=columns)
    m = measured[pd.to_numeric(measured["kv_cache_gib"], errors="coerce").notna()]
    m = m.assign(_budget=kv_figure(m).eq("budget").fillna(False).astype(bool))
    rows = []
    for key, cell in m.groupby(list(stats.CELL_KEYS), sort=True, observed=True):
        budget = cell[cell["_budget"]]
        if not budget.empty:
            first = budget.iloc[0]
            rows.append([*key, len(cell), len(budget), first["run_id"], first[KV_SOURCE_COLUMN]])
    return pd.DataFrame(rows, columns=columns)


def runs_without_tmp_kv(parts: pd.DataFrame) -> int:
    """How many runs of the decomposition have a KV residual without the tmp_kv term (their records lack it)."""
    return 0 if parts.empty or "tmp_kv_gib" not in parts else int(parts["tmp_kv_gib"].isna().sum())


def kv_gaps(parts: pd.DataFrame, level: float = stats.DEFAULT_LEVEL) -> pd.DataFrame:
    """Each environment's KV cache against the cell's native reference, the gap attributed to the parts:
    a part that grew by Δ takes fraction × Δ out of the KV cache (the budget formula). Vectorised over cells."""
    if parts.empty:
        return pd.DataFrame()
    keys = [*_KEYS, "environment"]
    grouped = parts.groupby(keys, sort=True)
    side = grouped["kv_gib"].agg(n="count", mean="mean", var="var").join(
        grouped[["page_cache_gib", "cgroup_gib", "kv_residual_gib", "fraction"]].mean()).reset_index()
    reference = parts[_is_reference(parts)]
    if reference.empty:
        return pd.DataFrame()
    native = reference.groupby(_KEYS, sort=True)["environment"].agg(compare.native_environment) \
        .rename("native").reset_index()
    side = side.merge(native, on=_KEYS)
    a = side[side["environment"] == side["native"]].drop(columns=["environment"])
    b = side[side["environment"] != side["native"]]
    pairs = b.merge(a, on=[*_KEYS, "native"], suffixes=("_b", "_a"))
    if pairs.empty:
        return pd.DataFrame()
    w = compare.compare_sides(pairs, "_a", "_b", level)  # CI: the small-n rule
    weights = pairs["n_a"] + pairs["n_b"]
    fraction = (pairs["fraction_a"] * pairs["n_a"] + pairs["fraction_b"] * pairs["n_b"]) / weights
    page = fraction * (pairs["page_cache_gib_b"] - pairs["page_cache_gib_a"])
    cgroup = fraction * (pairs["cgroup_gib_b"] - pairs["cgroup_gib_a"])
    loss = -w["diff"].to_numpy()  # KV cache the environment lacks (negative: it has more)
    out = pairs[[*_KEYS, "native", "environment"]].assign(
        n_native=pairs["n_a"].to_numpy(), n_env=pairs["n_b"].to_numpy(), kv_native_gib=pairs["mean_a"].to_numpy(),
        kv_env_gib=pairs["mean_b"].to_numpy(), kv_diff_gib=w["diff"].to_numpy(), ci_low_gib=w["ci_low"].to_numpy(),
        ci_high_gib=w["ci_high"].to_numpy(), p_value=w["p_value"].to_numpy(), fraction=fraction.to_numpy(),
        loss_gib=loss, page_cache_share_gib=page.to_numpy(),
        cgroup_share_gib=cgroup.to_numpy(), unexplained_share_gib=loss - page.to_numpy() - cgroup.to_numpy(),
        residual_share_gib=-(pairs["kv_residual_gib_b"] - pairs["kv_residual_gib_a"]).to_numpy())
    return out.reset_index(drop=True)


# --- factors -----------------------------------------------------------------------------------------------

def _factor_levels(runs: pd.DataFrame) -> list[tuple[str, pd.Series, object, object, str]]:
    """(factor, level per run, reference level a, level b, words) for every factor with two levels."""
    out = []
    kind = runs["environment_kind"].astype("string")
    if {"native", "container"} <= set(kind.dropna()):
        out.append(("environment", kind.where(kind.isin(["native", "container"])), "native", "container",
                    "container vs native"))
    limit = load.numbers(runs, "mem_cgroup_limit_gib").fillna(load.numbers(runs, "mem_peak_cgroup_limit_gib"))
    if "mem_container_flags" in runs:  # a container run whose flags set --memory / -m
        flags = runs["mem_container_flags"].astype("string").fillna("")
        limit = limit.where(limit.notna() | ~flags.str.contains(r"(?:^| )(?:--memory|-m)[= ]\s*[1-9]", regex=True),
                            1.0)
    limited = pd.Series(np.where(limit.notna(), "limit", "none"), index=runs.index).where(kind == "container")
    if limited.nunique() == 2:
        out.append(("memory_limit", limited, "none", "limit", "memory-limited container vs container"))
    for name, levels in load.factors(runs):  # the campaign's own factors, as data
        if load.is_flag(levels):  # true/false: false is the reference
            if levels.dropna().nunique() == 2:
                out.append((name, levels.astype("boolean").astype("object"), False, True,
                            FLAG_WORDS.get(name, f"{name} true vs false")))
            continue
        number = load.numbers(runs, levels.name)
        if number.nunique() >= 2:  # numbers: the highest level is the reference, the lowest is compared with it
            high, low = float(number.max()), float(number.min())
            out.append((name, number.where(number.isin([high, low])), high, low, f"{name} {low:g} vs {high:g}"))
    return out


def factor_effects(runs: pd.DataFrame, alpha: float, threshold: float,
                   level: float = stats.DEFAULT_LEVEL) -> pd.DataFrame:
    """Per model, factor and metric: level b against level a, pooled over every other factor (a balanced
    design makes the marginal difference the main effect; the other factors' spread widens the CI). Only
    where the campaign varies two factors or more."""
    measured = stats.measured_runs(runs)
    if measured.empty:
        return pd.DataFrame()
    factors = _factor_levels(measured)
    if len(factors) < 2:  # native vs container alone: the environment verdicts say it already
        return pd.DataFrame()
    rows = []
    for factor, levels, level_a, level_b, text in factors:
        for model, group in measured.groupby("model", sort=True):
            lv = levels[group.index]
            for metric in EFFECT_METRICS:
                if metric not in group:
                    continue
                a = group.loc[lv == level_a, metric].dropna().to_numpy(dtype=float)
                b = group.loc[lv == level_b, metric].dropna().to_numpy(dtype=float)
                if not len(a) or not len(b):
                    continue
                w = stats.welch(a, b, level)
                rows.append({"model": model, "factor": factor, "words": text, "level_a": str(level_a),
                             "level_b": str(level_b), "metric": metric, "n_a": w.n_a, "n_b": w.n_b,
                             "mean_a": w.mean_a, "mean_b": w.mean_b,
                             "sd_a": float(np.std(a, ddof=1)) if len(a) > 1 else np.nan,
                             "sd_b": float(np.std(b, ddof=1)) if len(b) > 1 else np.nan, "diff": w.diff,
                             "change_pct": w.diff / abs(w.mean_a) * 100 if w.mean_a else np.nan,
                             "p_value": w.p_value,
                             "ci_low": w.ci_low if stats.interval_allowed(min(w.n_a, w.n_b)) else np.nan,
                             "ci_high": w.ci_high if stats.interval_allowed(min(w.n_a, w.n_b)) else np.nan})
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame(rows)
    judged = compare.classify(table, alpha, threshold, family=True)  # the "largest factor" lines' family
    return pd.concat([table, judged[["outcome", "reason", "required_n", "p_family", "family_size"]]], axis=1)


# --- A/A noise floor ---------------------------------------------------------------------------------------

def twin_pairs(side: pd.DataFrame, cell: list[str], level: float) -> pd.DataFrame:
    """Member b, c, ... of each A/A pair against member a, from each side's moments (``cell``, aa_member,
    environment, metric, n, mean, var): the columns noise_floor reads; empty when no pair has both."""
    a = side[side["aa_member"] == "a"].drop(columns=["aa_member"])
    b = side[side["aa_member"] != "a"].drop(columns=["aa_member"])
    pairs = b.merge(a, on=[*cell, "metric"], suffixes=("_b", "_a"))
    if pairs.empty:
        return pd.DataFrame()
    w = compare.compare_sides(pairs, "_a", "_b", level)  # CI: the small-n rule
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.abs(pairs["mean_a"].to_numpy(float))
        scale = np.where(scale > 0, scale, np.nan)
        return pairs[cell].assign(
            a=pairs["environment_a"].astype(str), b=pairs["environment_b"].astype(str), metric=pairs["metric"],
            n_a=pairs["n_a"], n_b=pairs["n_b"], mean_a=pairs["mean_a"], mean_b=pairs["mean_b"],
            diff=w["diff"].to_numpy(), change_pct=w["change_pct"].to_numpy(), p_value=w["p_value"].to_numpy(),
            ci_low_pct=w["ci_low"].to_numpy() / scale * 100, ci_high_pct=w["ci_high"].to_numpy() / scale * 100,
            cv_a=np.sqrt(pairs["var_a"].to_numpy(float)) / scale, cv_b=np.sqrt(pairs["var_b"].to_numpy(float)) / scale)


def aa_pairs(runs: pd.DataFrame, level: float = stats.DEFAULT_LEVEL) -> pd.DataFrame:
    """Every A/A twin (member b, c, ...) against member a of its pair, per cell and metric (vectorised)."""
    measured = stats.measured_runs(runs)
    if "aa_group" not in measured or measured["aa_group"].isna().all():
        return pd.DataFrame()
    measured = measured[measured["aa_group"].notna()].assign(aa_member=lambda f: f["aa_member"].astype(str))
    metrics = [m for m in AA_METRICS if m in measured and measured[m].notna().any()]
    if not metrics:
        return pd.DataFrame()
    keys = ["aa_group", *_KEYS, "aa_member", "environment"]
    long = measured.melt(id_vars=keys, value_vars=metrics, var_name="metric", value_name="value").dropna(
        subset=["value"])
    out = twin_pairs(stats.moments(long, [*keys, "metric"]), ["aa_group", *_KEYS], level)
    if out.empty:
        return out
    order = {m: i for i, m in enumerate(metrics)}
    out = out.sort_values(["aa_group", *_KEYS, "b", "metric"], key=lambda c: c.map(order) if c.name == "metric" else c)
    return out.reset_index(drop=True)


def noise_floor(pairs: pd.DataFrame, alpha: float = stats.DEFAULT_ALPHA,
                power: float = stats.DEFAULT_POWER) -> pd.DataFrame:
    """Per metric, from the A/A pairs: the pooled CV of one run, the noise floor, the minimum detectable
    effect at the campaign's runs per side, and the runs per side a 2% and a 5% effect need.

    cv (pooled): √(Σ (n−1)·cv² / Σ (n−1)) over both members of every A/A cell. n: the median runs per side.
    noise floor: the larger of the largest |A/A relative difference| observed and z(1−alpha/2)·cv·√(2/n), the
    half-width of the 95% interval of a difference of two n-run means at that spread. Runs needed: never fewer
    than stats.MIN_N_INTERVAL, the fewest a verdict draws an interval from.
    """
    if pairs.empty:
        return pd.DataFrame()
    z = float(sps.norm.ppf(1 - alpha / 2))
    rows = []
    for metric, part in pairs.groupby("metric", sort=False):
        dof = np.concatenate([part["n_a"].to_numpy(float) - 1, part["n_b"].to_numpy(float) - 1])
        cvs = np.concatenate([part["cv_a"].to_numpy(float), part["cv_b"].to_numpy(float)])
        ok = (dof >= 1) & np.isfinite(cvs)
        cv = float(np.sqrt((dof[ok] * cvs[ok] ** 2).sum() / dof[ok].sum())) if ok.any() else np.nan
        n = float(np.median(np.concatenate([part["n_a"].to_numpy(float), part["n_b"].to_numpy(float)])))
        observed = float(np.nanmax(np.abs(part["change_pct"].to_numpy(float)))) / 100 \
            if part["change_pct"].notna().any() else np.nan
        half = z * cv * math.sqrt(2 / n) if not math.isnan(cv) and n >= 1 else np.nan
        floor = np.nanmax([observed, half]) if not (math.isnan(observed) and math.isnan(half)) else np.nan
        mde = stats.mde(cv, n, alpha, power)
        # never fewer than the runs a verdict needs for an interval (the small-n rule), as classify says
        need = {f"required_n_{round(e * 100)}pct": max(stats.required_n(cv, e, alpha, power), stats.MIN_N_INTERVAL)
                if not math.isnan(cv) else None for e in TARGET_EFFECTS}
        rows.append({"metric": metric, "pairs": len(part), "n": n, "cv": cv, "observed_pct": observed * 100,
                     "half_width_pct": half * 100, "floor": floor, "floor_pct": floor * 100,
                     "mde_pct": np.nan if mde is None else mde * 100,
                     **need})
    return pd.DataFrame(rows)


def memory_study(runs: pd.DataFrame, kv_runs: pd.DataFrame, alpha: float, threshold: float,
                 level: float = stats.DEFAULT_LEVEL) -> MemoryStudy:
    parts = run_parts(runs, kv_runs)
    pairs = aa_pairs(runs, level)
    return MemoryStudy(parts=parts, decomposition=decomposition(parts), gaps=kv_gaps(parts, level),
                       effects=factor_effects(runs, alpha, threshold, level), aa_pairs=pairs,
                       noise=noise_floor(pairs, alpha))


# --- verdict lines -----------------------------------------------------------------------------------------

def _gib(value: float) -> str:
    return f"{abs(value):.3g} GiB" if abs(value) < 100 else f"{abs(value):.0f} GiB"


def _signed(value: float, unit: str = " GiB") -> str:
    """+1.23 GiB / −1.23 GiB (the report's minus sign); 0 GiB for what rounds to nothing."""
    if abs(value) < 0.0005:
        return f"0{unit}"
    return ("+" if value > 0 else "−") + f"{abs(value):.3g}{unit}"


def gap_sentence(row: pd.Series) -> str:
    """"container has 12.3 GiB less KV cache than native (…); of the gap, Y GiB is page cache, …"."""
    more = row["loss_gib"] < 0
    ci = ""
    if not math.isnan(row["ci_low_gib"]):
        ci = f", 95% CI {_signed(row['ci_low_gib'], '')} to {_signed(row['ci_high_gib'])}"
    head = (f"{row['environment']} has {_gib(row['loss_gib'])} {'more' if more else 'less'} KV cache than "
            f"{row['native']} ({row['kv_native_gib']:.3g} → {row['kv_env_gib']:.3g} GiB, n = "
            f"{int(row['n_native'])}/{int(row['n_env'])}{ci})")
    sign = -1 if more else 1

    def share(value: float) -> str:
        return _signed(value * sign)

    return (f"{head}; of the gap, {share(row['page_cache_share_gib'])} is page cache, "
            f"{share(row['cgroup_share_gib'])} cgroup-accounted, {share(row['unexplained_share_gib'])} unexplained "
            f"(of which the KV formula's residual {share(row['residual_share_gib'])})")


def memory_lines(study: MemoryStudy, alpha: float) -> list[VerdictLine]:
    """"memory" lines: the largest KV gap per model with its decomposition, the factor with the largest
    effect; "noise" lines: the A/A noise floor per metric with the MDE and the iterations needed. A gap is
    "different" where its interval exists and Welch's p is below ``alpha``."""
    lines: list[VerdictLine] = []
    gaps = study.gaps
    if not gaps.empty:
        gaps = gaps.assign(p_family=compare.holm(np.where(gaps["ci_low_gib"].notna(), gaps["p_value"], np.nan)))
        for model, part in gaps.groupby("model", sort=True):
            real = part[~part["environment"].str.endswith(".aa")]
            worst = (real if not real.empty else part).sort_values("loss_gib", key=abs, ascending=False).iloc[0]
            subject = f"{model} / {worst['workload']}"
            text = f"Where the memory went, {subject}: {gap_sentence(worst)}."
            others = len(part) - 1
            if others:
                text += f" {others} more comparison(s) in the decomposition table."
            loss = worst["loss_gib"]
            parts = {"page cache": worst["page_cache_share_gib"], "cgroup-accounted": worst["cgroup_share_gib"],
                     "unexplained": worst["unexplained_share_gib"]}
            main = max(parts, key=lambda k: abs(parts[k]))
            headline = (f"{subject}: {worst['environment']} has {_gib(loss)} {'less' if loss > 0 else 'more'} KV "
                        f"cache than {worst['native']}, mostly {main} ({_gib(parts[main])}).")
            # the gap is a finding where its interval exists (the small-n rule) and Welch says it is real among
            # every gap of the campaign (the worst is picked from them: Holm over all of them, compare.FAMILY_METHOD)
            real_gap = not math.isnan(worst["ci_low_gib"]) and worst["p_family"] < alpha
            lines.append(VerdictLine("memory", subject, "different" if real_gap else "undetermined", "memory gap",
                                     text, (), headline))
    effects = study.effects
    if not effects.empty:
        kv = effects[effects["metric"] == "kv_cache_gib"]
        for model, part in kv.groupby("model", sort=True):
            ranked = part.sort_values("diff", key=abs, ascending=False)
            clauses = []
            verdicts = []
            for r in ranked.itertuples():
                ci = (f", 95% CI {_signed(r.ci_low, '')} to {_signed(r.ci_high)}" if not math.isnan(r.ci_low)
                      else f", no CI: n too small ({r.n_a}/{r.n_b})" if r.reason == "n-too-small" else "")
                clauses.append(f"{r.words}: {_signed(r.diff)} KV cache ({pct(r.change_pct)}{ci}; {r.outcome})")
                verdicts.append(Verdict("memory", str(model), "kv_cache_gib", f"{r.factor}={r.level_a}",
                                        f"{r.factor}={r.level_b}", str(r.outcome), str(r.reason), clauses[-1],
                                        n_a=int(r.n_a), n_b=int(r.n_b), mean_a=float(r.mean_a),
                                        mean_b=float(r.mean_b), diff=float(r.diff),
                                        change_pct=None if math.isnan(r.change_pct) else float(r.change_pct),
                                        p_value=None if math.isnan(r.p_value) else float(r.p_value),
                                        required_n=None if pd.isna(r.required_n) else int(r.required_n)))
            top = ranked.iloc[0]
            text = (f"{model}: the factor with the largest effect on the KV cache is {top['factor']} "
                    f"({'; '.join(clauses[:1])}); then " + "; ".join(clauses[1:]) + "."
                    if len(clauses) > 1 else f"{model}: factor effect on the KV cache: {clauses[0]}.")
            headline = (f"{model}: the largest KV-cache effect is {top['factor']} ({top['words']}: "
                        f"{_signed(top['diff'])}).")
            lines.append(VerdictLine("memory", str(model), str(top["outcome"]), "largest factor", text,
                                     tuple(verdicts), headline))
    noise = study.noise
    if not noise.empty:
        # decode speed (tpot_ms) beside throughput: an LLM run's throughput carries its prefill's noise too
        shown = noise[noise["metric"].isin([*EFFECT_METRICS, "output_tok_s", "tpot_ms", "gflops", "total_tok_s"])]
        shown = shown if not shown.empty else noise
        clauses = []
        for r in shown.itertuples():
            need = ", ".join(f"{getattr(r, f'required_n_{round(e * 100)}pct') or '–'} for {e * 100:g}%"
                             for e in TARGET_EFFECTS)
            clauses.append(f"{words(r.metric)} ±{r.floor_pct:.2g}% (CV {r.cv * 100:.2g}%, MDE {r.mde_pct:.2g}% at "
                           f"{r.n:g} runs per side; iterations needed: {need})")
        pairs = int(study.aa_pairs[["aa_group", *_KEYS]].drop_duplicates().shape[0])
        text = (f"A/A noise floor from {pairs} A/A cell(s): " + "; ".join(clauses) + ". A difference between "
                "environments smaller than the floor is labelled \"under the noise floor\".")
        # The headline names the metrics the question is about (KV cache, then throughput), leaving out those
        # that did not vary at all (an engine whose KV cache is not preallocated reports the same bytes).
        order = {m: i for i, m in enumerate(("kv_cache_gib", "output_tok_s", "tpot_ms", "gflops"))}
        lead = noise[noise["metric"].isin(order) & (noise["floor_pct"] > 0)]
        lead = lead.sort_values("metric", key=lambda c: c.map(order)) if not lead.empty else noise.iloc[:1]
        headline = "Noise floor (A/A): " + "; ".join(
            f"{words(r.metric)} ±{r.floor_pct:.2g}%, minimum detectable effect {r.mde_pct:.2g}% at {r.n:g} iterations"
            for r in lead.itertuples()) + "."
        lines.append(VerdictLine("noise", "A/A", "same", "noise floor", text, (), headline))
    return lines


def under_floor(change_pct: float | None, metric: str, floors: dict[str, float]) -> bool | None:
    """Whether a relative difference (%) lies under the metric's A/A noise floor (None: no floor)."""
    floor = floors.get(metric)
    if floor is None or change_pct is None or math.isnan(change_pct):
        return None
    return abs(change_pct) / 100 < floor
