"""The answers a campaign gives, in words a Spark owner reads: built once from the analysis, rendered alike
by index.html, summary.md, ``--json`` and the terminal summary.

Three questions, each answered only where the campaign can answer it:

* **environment**: per model and workload, is the other environment (container, bare, ...) faster, heavier,
  lighter than native? One line each, from Welch comparisons pooled over the hosts that ran both.
* **hosts**: where a cell ran on two or more hosts, do the hosts agree? Which one is out, by how much?
* **regression**: with ``--baseline``, did anything get worse than the baseline?

Where the records carry a memory section or A/A pairs (issue 15, ``report/memory.py``), "memory" lines say
where the memory went (the largest KV-cache gap per model, decomposed) and which factor moves the KV cache
most, and a "noise" line the A/A noise floor per metric; environment verdicts under that floor say so. An A/A
twin is judged only against its own pair (the noise floor), never again against the other environments.

Every metric's answer comes from one rule, ``sparkfleet.compare.classify``: *different* (significant and
beyond the threshold), *same* (within the threshold, shown by the interval or by identical runs) or
*undetermined* (too few runs, or an interval too wide), with the number of iterations that would settle it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import CONFIG_METRICS
from sparkfleet import compare
from sparkfleet.report.analysis import Analysis
from sparkfleet.report.findings import sequential_blocks
from sparkfleet.report.fingerprints import caveat_text, cell_fingerprints
from sparkfleet.report.fingerprints import caveats as fingerprint_caveats
from sparkfleet.report.memory import memory_lines, under_floor
from sparkfleet.report.types import MemoryStudy, Verdict, VerdictLine
from sparkfleet.report.types import plain as _clean
from sparkfleet.report.wording import num, pct, signed, unit, words
from sparkfleet.stats import physical_range

OUTCOMES = ("different", "same", "undetermined")
#: The metrics an environment verdict speaks about: the first throughput metric a cell has, then memory.
THROUGHPUT_METRICS = ("output_tok_s", "gflops", "total_tok_s", "req_s", "matmul_s_mean")
MEMORY_METRICS = ("peak_memory_gib", "kv_cache_gib")
#: Lines of one question shown before "... and N more" (the tables beside hold every comparison).
MAX_LINES = 30


# --- numbers in words (wording.py has the shared ones) -----------------------------------------------------

def _int(value: Any) -> int | None:
    value = _clean(value)
    return None if value is None else int(value)


def _ratio_words(ratio: float | None) -> str:
    """"2.67× less" / "1.72× more" where the ratio is large enough to read better than a percentage."""
    if ratio is None or ratio <= 0:
        return ""
    if ratio >= 1.5:
        return f"{ratio:.2f}× more"
    if ratio <= 1 / 1.5:
        return f"{1 / ratio:.2f}× less"
    return ""


def _range_note(metric: str, mean_a: float | None, low_pct: float | None, high_pct: float | None) -> str:
    """The interval of a change reaching values ``b`` cannot take (said, never clipped)."""
    if mean_a is None or low_pct is None or high_pct is None:
        return ""
    lowest, highest = physical_range(metric)
    low, high = mean_a * (1 + low_pct / 100), mean_a * (1 + high_pct / 100)
    if low < lowest:
        return f"the interval's lower end implies a {words(metric)} below {lowest:g}, outside its physical range"
    if high > highest:
        return f"the interval's upper end implies a {words(metric)} above {highest:g}, outside its physical range"
    return ""


def metric_clause(v: Verdict, threshold: float, side_name: str) -> str:
    """The words for one metric's verdict (without the subject)."""
    name, tol = words(v.metric), f"±{threshold * 100:g}%"
    size = pct(v.change_pct) if v.change_pct is not None else "–"
    amount = ""
    if v.diff is not None and v.change_pct is not None:
        absolute = f"{signed(v.diff)} {unit(v.metric)}".strip()
        ratio = _ratio_words(v.mean_b / v.mean_a if v.mean_a else None)
        # Memory reads best in GiB and as a ratio, rates and times as a percentage.
        first, rest = (ratio or absolute, [absolute if ratio else "", size]) if unit(v.metric) == "GiB" \
            else (size, [absolute, ratio])
        size, amount = first, ", ".join(x for x in rest if x)
    ci = (f"95% CI {pct(v.ci_low_pct)} to {pct(v.ci_high_pct)}"
          if v.ci_low_pct is not None and v.ci_high_pct is not None else "")
    runs = f"{v.n_a + v.n_b} runs" if v.n_a is not None and v.n_b is not None else "the runs"
    # required_n comes from this comparison's own CV, which is not the A/A pair's: say which
    at_cv = f" at this comparison's run-to-run CV of {v.cv_pct:.2g}%" if v.cv_pct else ""
    need = (f"need ≈ {v.required_n} iterations per {side_name} to resolve {tol}{at_cv}" if v.required_n else "")
    note = f"; {v.note}" if v.note else ""
    if v.reason == "identical":
        return f"{name} identical in all {runs}"
    if v.reason == "exact":
        return f"{name} {size} ({amount}) in every one of {runs}"
    if v.reason == "beyond-threshold":
        return f"{name} {size} ({amount}; {ci}), significant{note}"
    if v.reason == "within-threshold":
        return f"{name} {size} ({amount}; {ci}): significant but within {tol}{note}"
    if v.reason == "equivalent":
        return f"{name} the same within {tol} ({size}, {amount}; {ci}){note}"
    if v.reason == "n-too-small":
        return f"{name} {size} ({amount}): undetermined, n too small ({v.n_a} + {v.n_b} runs); {need}"
    if v.reason == "inconclusive":
        return f"{name} {size} ({amount}): undetermined, the {ci} reaches beyond {tol}; {need}{note}"
    if v.reason == "family":
        alone = f"p = {v.p_value:.2g} alone" if v.p_value is not None else "significant alone"
        among = f"{v.family_size} comparisons" if v.family_size else "its family of comparisons"
        adjusted = f" (Holm-adjusted p = {v.p_family:.2g})" if v.p_family is not None else ""
        return (f"{name} {size} ({amount}; {ci}): undetermined, {alone} but not significant among the {among} of "
                f"this verdict{adjusted}; {need}{note}")
    return f"{name}: no data on one side"


def short_phrase(v: Verdict, threshold: float) -> str:
    """The verdict in a few words, ``b`` being the subject: "30.8 GiB more peak memory", "2.67× less KV
    cache", "8.1% lower output throughput", "the same output throughput", "output throughput undetermined"."""
    name = words(v.metric)
    if v.reason == "identical":
        return f"identical {name}"
    if v.outcome == "same":
        return f"the same {name} (within ±{threshold * 100:g}%)"
    if v.outcome == "undetermined":
        why = {"n-too-small": "n too small", "family": "not significant among this verdict's comparisons"}.get(
            v.reason, "too noisy to tell")
        size = f"{pct(v.change_pct)}, " if v.change_pct is not None else ""
        at_cv = f" at CV {v.cv_pct:.2g}%" if v.cv_pct else ""
        need = f"; ≈ {v.required_n} iterations needed{at_cv}" if v.required_n else ""
        return f"{name} undetermined ({size}{why}{need})"
    if v.diff is None or v.change_pct is None:
        return f"{name} different"
    more = v.diff > 0
    if unit(v.metric) == "GiB":
        ratio = v.mean_b / v.mean_a if v.mean_a else None
        amount = f"{(ratio if more else 1 / ratio):.2f}×" if _ratio_words(ratio) else f"{num(abs(v.diff))} GiB"
        return f"{amount} {'more' if more else 'less'} {name}"
    return f"{pct(abs(v.change_pct)).lstrip('+')} {'higher' if more else 'lower'} {name}"


def headline_of(verdicts: list[Verdict], b: str, a: str, threshold: float) -> str:
    """"container has 30.8 GiB more peak memory and 2.67× less KV cache than native; the same output
    throughput (within ±5%)": differences first, then what is the same, then what is undetermined."""
    by = {o: [v for v in verdicts if v.outcome == o] for o in OUTCOMES}
    identical = [v for v in by["same"] if v.reason == "identical"]
    same = [short_phrase(v, threshold) for v in by["same"] if v.reason != "identical"]
    if identical:
        same.append(f"identical {' and '.join(words(v.metric) for v in identical)}")
    parts = []
    if by["different"]:
        parts.append(f"{b} has {_join_phrases([short_phrase(v, threshold) for v in by['different']])} than {a}")
    if same:
        parts.append((f"{b} and {a} have " if not parts else "") + _join_phrases(same))
    if by["undetermined"]:
        parts.append(_join_phrases([short_phrase(v, threshold) for v in by["undetermined"]]))
    return "; ".join(parts)


def _join_phrases(phrases: list[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _join(clauses: list[str]) -> str:
    return "; ".join(clauses) + "."


def line_outcome(verdicts: list[Verdict]) -> str:
    """A line is "different" when any of its metrics is, else "undetermined" when any is, else "same"."""
    outcomes = {v.outcome for v in verdicts}
    return next((o for o in ("different", "undetermined") if o in outcomes), "same")


def verdicts_from(table: pd.DataFrame, judged: pd.DataFrame, question: str, subject_of, a_col: str, b_col: str,
                  text_side: str, threshold: float) -> list[Verdict]:
    out = []
    for (_, row), (_, j) in zip(table.iterrows(), judged.iterrows(), strict=True):
        mean_a = _clean(row["mean_a"])
        low = _clean(row["ci_low"] / abs(mean_a) * 100) if mean_a else None
        high = _clean(row["ci_high"] / abs(mean_a) * 100) if mean_a else None
        outcome = str(j["outcome"])
        direction = compare.direction(row["metric"])
        better = None if outcome != "different" or not direction else bool(np.sign(row["diff"]) == direction)
        verdict = Verdict(
            question=question, subject=subject_of(row), metric=str(row["metric"]),
            a=str(row[a_col]) if a_col in row else a_col, b=str(row[b_col]) if b_col in row else b_col,
            outcome=outcome, reason=str(j["reason"]), text="", n_a=_int(row["n_a"]), n_b=_int(row["n_b"]),
            mean_a=mean_a, mean_b=_clean(row["mean_b"]), diff=_clean(row["diff"]),
            change_pct=_clean(row["change_pct"]), ci_low_pct=low, ci_high_pct=high,
            p_value=_clean(row["p_value"]), required_n=_int(j["required_n"]), better=better,
            cv_pct=_clean(j["cv_pooled"] * 100) if "cv_pooled" in j else None,
            p_family=_clean(j["p_family"]) if "p_family" in j else None,
            family_size=_int(j["family_size"]) if "family_size" in j else None,
            note=_range_note(str(row["metric"]), mean_a, low, high))
        out.append(replace(verdict, text=metric_clause(verdict, threshold, text_side)))
    return out


# --- question 1: environments ----------------------------------------------------------------------------

def _chosen_metrics(present: set[str]) -> list[str]:
    throughput = next((m for m in THROUGHPUT_METRICS if m in present), None)
    return [m for m in (throughput, *MEMORY_METRICS) if m and m in present]


def environment_lines(analysis: Analysis, floors: dict[str, float]) -> list[VerdictLine]:
    """One line per model, workload and environment against native; ``floors``: the A/A noise floor per
    metric (MemoryStudy.floors), which a verdict under it names."""
    table = analysis.environments_pooled
    if table.empty:
        return []
    options = analysis.options
    paired = table.rename(columns={"n_native": "n_a", "n_env": "n_b", "native_mean": "mean_a", "env_mean": "mean_b",
                                   "sd_native": "sd_a", "sd_env": "sd_b", "overhead_pct": "change_pct"})
    sequential = _sequential_cells(analysis)
    twins = aa_twins(analysis.runs)
    prints = cell_fingerprints(analysis.runs, getattr(analysis, "root", None))
    # The family of the environment verdict: every metric the lines speak about, over every line (Holm).
    groups = []
    for (model, workload, native, environment), group in paired.groupby(
            ["model", "workload", "native", "environment"], sort=True):
        if _twin_elsewhere(native, environment, twins):
            continue
        group = group.set_index("metric", drop=False)
        chosen = group.loc[_chosen_metrics(set(group.index))].reset_index(drop=True)
        if not chosen.empty:
            groups.append(((model, workload, native, environment), chosen))
    if not groups:
        return []
    family = pd.concat([chosen for _, chosen in groups], ignore_index=True)
    judged_all = compare.classify(family, options.alpha, options.threshold, family=True)
    lines = []
    start = 0
    for (model, workload, native, environment), chosen in groups:
        judged = judged_all.iloc[start:start + len(chosen)].reset_index(drop=True)
        start += len(chosen)
        subject = f"{model} / {workload}"
        verdicts = verdicts_from(chosen, judged, "environment", lambda _r, s=subject: s, "native", "environment",
                                 "environment", options.threshold)
        verdicts = [with_floor(v, floors) for v in verdicts]
        hosts = int(chosen["hosts"].max())
        clauses = _merge_identical([v.text for v in verdicts], verdicts, "{names} identical in all {runs} runs")
        head = f"{model} / {workload}, {environment} vs {native}"
        pooled = f" ({hosts} hosts pooled)" if hosts > 1 else ""
        text = f"{head}{pooled}: {_join(clauses)}"
        if {(model, workload, native), (model, workload, environment)} <= sequential:
            text += (f" Caveat: {native} and {environment} ran one after the other, not interleaved, so drift "
                     "over time is confounded with the difference.")
        unlike = caveat_text(fingerprint_caveats(prints, str(model), str(workload), str(native), str(environment)))
        if unlike:
            text += f" Caveat: {unlike}."
        outcome = line_outcome(verdicts)
        headline = f"{model} / {workload}: {headline_of(verdicts, environment, native, options.threshold)}."
        if unlike:
            headline += " Not like for like: their environments differ beyond isolation (see the caveat)."
        lines.append(VerdictLine("environment", subject, outcome, outcome, text, tuple(verdicts), headline,
                                 (unlike,) if unlike else ()))
    return lines


def aa_twins(runs: pd.DataFrame) -> dict[str, str]:
    """Each A/A twin (member b, c, ... of an A/A pair, as the campaign marked it: memstudy.mark_aa) -> the
    environment it twins (member a, the pair's ``aa_group``)."""
    if "aa_member" not in runs or "aa_group" not in runs:
        return {}
    member = runs["aa_member"].astype("string")
    twins = runs[member.notna() & (member != "a") & runs["aa_group"].notna()]
    return dict(zip(twins["environment"].astype(str), twins["aa_group"].astype(str), strict=True))


def _twin_elsewhere(a: str, b: str, twins: dict[str, str]) -> bool:
    """A comparison of an A/A twin with an environment other than its own pair's: it repeats the original's."""
    return (a in twins or b in twins) and twins.get(a, a) != twins.get(b, b)


def twins_note(analysis: Analysis) -> str:
    """The line the verdict block needs when A/A twins were left out of the environment comparisons."""
    table = analysis.environments_pooled
    if table.empty:
        return ""
    twins = aa_twins(analysis.runs)
    left_out = sorted({b if b in twins else a for a, b in zip(table["native"], table["environment"], strict=True)
                       if _twin_elsewhere(a, b, twins)})
    if not left_out:
        return ""
    names = ", ".join(f"{t} (of {twins[t]})" for t in left_out)
    one = len(left_out) == 1
    return (f"A/A twin{'' if one else 's'} {names} {'is' if one else 'are'} compared only with "
            f"{'its' if one else 'their'} own original (the A/A noise floor); {'its' if one else 'their'} "
            "comparisons with other environments would repeat the original's and are left out of the verdicts.")


def with_floor(v: Verdict, floors: dict[str, float]) -> Verdict:
    """The verdict with the metric's A/A noise floor, and "under the noise floor" said where it is."""
    under = under_floor(v.change_pct, v.metric, floors)
    if under is None:
        return v
    floor = floors[v.metric] * 100
    text = v.text + (f", under the noise floor (A/A ±{floor:.2g}%)" if under else "")
    return replace(v, text=text, noise_floor_pct=floor, under_noise_floor=under)


def _merge_identical(clauses: list[str], verdicts: list[Verdict], merged: str) -> list[str]:
    """"peak memory and KV cache identical in all 4 runs" instead of two clauses (``merged`` is the
    pattern, with {names} and {runs})."""
    same = [v for v in verdicts if v.reason == "identical"]
    if len(same) < 2 or len({(v.n_a, v.n_b) for v in same}) > 1:
        return clauses
    text = merged.format(names=" and ".join(words(v.metric) for v in same), runs=same[0].n_a + same[0].n_b)
    return [c for c, v in zip(clauses, verdicts, strict=True) if v.reason != "identical"] + [text]


def _sequential_cells(analysis: Analysis) -> set[tuple[str, str, str]]:
    """(model, workload, environment) of every environment that ran in one block on some host."""
    blocks = sequential_blocks(analysis.runs)
    hits = blocks[blocks["sequential"]]
    return {(str(r.model), str(r.workload), env) for r in hits.itertuples()
            for env in str(r.block_order).split(" -> ")}


# --- question 2: hosts -----------------------------------------------------------------------------------

def host_lines(analysis: Analysis) -> list[VerdictLine]:
    """Each host against the other hosts (sparkfleet.reproducibility.host_deviations: the one decision rule of
    every verdict, compare.classify, with the host tolerance as its threshold). A host is *out* only where
    that comparison is significant and beyond the tolerance, and the line names the host facts in which it
    differs from the others; hosts that cannot be told apart yet get the runs per host that would tell."""
    dev = analysis.host_deviations
    dev = dev[~dev["metric"].isin(CONFIG_METRICS) & dev["deviation_pct"].notna()]
    if dev.empty:
        return []
    tol = analysis.options.tolerance * 100
    hosts = sorted(set(dev["host"].astype(str)))
    cells = dev.groupby(["model", "environment", "workload"]).ngroups
    dev = dev.assign(_abs=dev["deviation_pct"].abs())

    def verdict(row: pd.Series) -> Verdict:
        cell = f"{row['model']} / {row['environment']} / {row['workload']}"
        ci = (f"95% CI {pct(row['ci_low_pct'])} to {pct(row['ci_high_pct'])}, "
              if pd.notna(row["ci_low_pct"]) else "")
        p = f"p = {row['p_value']:.2g}, " if pd.notna(row["p_value"]) else ""
        text = (f"{words(row['metric'])} {pct(row['deviation_pct'])} against the other hosts "
                f"({row['rest_hosts']}) on {cell} ({ci}{p}n = {int(row['n'])} vs {int(row['n_rest'])}; mean "
                f"{num(row['host_mean'], 4)} vs {num(row['rest_mean'], 4)} {unit(row['metric'])})")
        need = row["required_n"]
        return Verdict("hosts", str(row["host"]), str(row["metric"]), "other hosts", str(row["host"]),
                       str(row["outcome"]), str(row["reason"]), text, n_a=int(row["n_rest"]), n_b=int(row["n"]),
                       mean_a=_clean(row["rest_mean"]), mean_b=_clean(row["host_mean"]),
                       diff=_clean(row["host_mean"] - row["rest_mean"]), change_pct=_clean(row["deviation_pct"]),
                       ci_low_pct=_clean(row["ci_low_pct"]), ci_high_pct=_clean(row["ci_high_pct"]),
                       p_value=_clean(row["p_value"]), required_n=int(need) if pd.notna(need) else None,
                       cv_pct=_clean(row["cv_pooled"] * 100))

    lines = []
    outside = dev[dev["outcome"] == "different"]
    for host, part in outside.groupby("host", sort=True):
        worst = part.sort_values("_abs", ascending=False).iloc[0]
        v = verdict(worst)
        others = len(part) - 1
        more = f"; {others} more cell metric(s) out" if others else ""
        hardware = str(worst.get("hardware") or "")
        why = (f" What differs on {host}: {hardware}." if hardware else
               f" No recorded host fact (GPU, driver, CUDA, VBIOS, InfoROM, clocks, power limit, kernel) differs on "
               f"{host} from the other hosts: compare its measured state (sparkfleet fleet).")
        pair = (" With two hosts, either may be the odd one: a third host would tell."
                if int(worst["hosts"]) == 2 else "")
        text = f"Host {host} is out: {v.text}{more}.{why}{pair}"
        higher = "higher" if worst["deviation_pct"] > 0 else "lower"
        headline = (f"Host {host} is out: {pct(abs(worst['deviation_pct'])).lstrip('+')} {higher} "
                    f"{words(worst['metric'])} than the other hosts on {worst['model']} / {worst['workload']}"
                    + (f" ({hardware.split(' (')[0]} differs)." if hardware else "."))
        lines.append(VerdictLine("hosts", str(host), "different", "host out", text, (v,), headline))
    out_hosts = set(outside["host"].astype(str))
    open_rows = dev[(dev["outcome"] == "undetermined") & ~dev["host"].astype(str).isin(out_hosts)]
    if len(open_rows):
        worst = open_rows.sort_values("_abs", ascending=False).iloc[0]
        v = verdict(worst)
        need = open_rows["required_n"].max()
        names = sorted(set(open_rows["host"].astype(str)))
        text = (f"Host(s) {', '.join(names)}: undetermined on {len(open_rows)} cell metric(s), too noisy to tell "
                f"whether they differ from the other hosts by more than ±{tol:g}%; the largest is {worst['host']}'s "
                f"{v.text}"
                + (f"; ≈ {need:.0f} runs per host would tell." if pd.notna(need) else "."))
        lines.append(VerdictLine("hosts", "fleet", "undetermined", "undetermined", text, (v,),
                                 f"Hosts {', '.join(names)}: not enough runs to tell whether they agree."))
    agreeing = [h for h in hosts if h not in out_hosts and h not in set(open_rows["host"].astype(str))]
    if agreeing:
        rows = dev[dev["host"].astype(str).isin(agreeing)]
        worst = rows.sort_values("_abs", ascending=False).iloc[0]
        v = verdict(worst)
        scope = (f"All {len(hosts)} hosts agree" if len(agreeing) == len(hosts)
                 else f"The other {len(agreeing)} host(s) ({', '.join(agreeing)}) agree")
        text = (f"{scope}: within ±{tol:g}% of the other hosts on all {cells} shared cell(s) and every metric (the "
                f"whole 95% interval inside, or significant but smaller); the largest difference is "
                f"{worst['host']}'s {v.text}.")
        lines.append(VerdictLine("hosts", "fleet", "same", "hosts agree", text, (v,),
                                 f"{scope} within ±{tol:g}%."))
    return _capped(lines, "hosts")


# --- question 3: regression against a baseline -----------------------------------------------------------

def regression_lines(analysis: Analysis) -> list[VerdictLine]:
    """Against ``--baseline``: a line per cell that regressed, a line per serving cell and engine with a point that
    regressed, the improvements, and "no regression" over every comparison (run-level and serving points: the
    one family of compare.compare_campaigns) when none did; what could not be matched is named."""
    table = analysis.regressions
    options = analysis.options
    if table is None:
        return [] if not options.baseline else [VerdictLine(
            "regression", "baseline", "undetermined", "undetermined",
            f"The baseline {options.baseline} holds no valid run record: nothing was compared with it.")]
    judged_rows = table[table["metric"].notna() & ~table["metric"].isin(CONFIG_METRICS)]
    if judged_rows.empty:
        return [VerdictLine("regression", "baseline", "undetermined", "undetermined",
                            "No cell and metric was measured both in the baseline and in this campaign: "
                            f"{_unmatched_text(table) or 'the cells both ran share no judged metric'}.")]
    keys = [k for k in ("host", "model", "environment", "workload") if k in judged_rows]
    paired = judged_rows.rename(columns={"n_baseline": "n_a", "n_current": "n_b", "baseline_mean": "mean_a",
                                         "current_mean": "mean_b", "sd_baseline": "sd_a", "sd_current": "sd_b"})
    paired = paired.assign(_a="baseline", _b="current").reset_index(drop=True)
    cells = [" / ".join(str(r[k]) for k in keys) for _, r in paired.iterrows()]
    points = _point_names(paired)
    verdicts = verdicts_from(paired, paired[["outcome", "reason", "required_n", "cv_pooled", "p_family",
                                             "family_size"]], "regression",
                             lambda r: " / ".join([*(str(r[k]) for k in keys), *_point_of(r)]), "_a", "_b",
                             "side", options.threshold)
    run_level = [v for v, point in zip(verdicts, points, strict=True) if point is None]
    lines = _cell_regression_lines(run_level, options.threshold)
    lines += _point_regression_lines(verdicts, cells, paired, points, options.threshold)
    lines = _capped(lines, "regression")
    better = [v for v in verdicts if v.outcome == "different" and v.better]
    undetermined = [v for v in verdicts if v.outcome == "undetermined"]
    if better:
        listed = "; ".join(f"{v.subject} {v.text}" for v in better[:3])
        more = f" and {len(better) - 3} more" if len(better) > 3 else ""
        lines.append(VerdictLine("regression", "baseline", "different", "improved",
                                 f"Improved against the baseline: {listed}{more}.", tuple(better)))
    if not any(line.label == "regression" for line in lines):
        tol = f"±{options.threshold * 100:g}%"
        served = {v.subject: v for v, point in zip(verdicts, points, strict=True) if point is not None}
        of_points = (f" ({sum(p is not None for p in points)} of them serving figures at {len(served)} point(s))"
                     if served else "")
        text = (f"No regression against the baseline: {len(verdicts)} comparisons in {len(set(cells))} cell(s)"
                f"{of_points}, none significantly worse by more than {tol}.")
        if undetermined:
            need = max((v.required_n or 0) for v in undetermined)
            text += (f" {len(undetermined)} of them are undetermined (too few runs or too wide an interval)"
                     + (f"; ≈ {need} iterations per side would resolve {tol}." if need else "."))
        outcome = "undetermined" if undetermined else "same"
        lines.insert(0, VerdictLine("regression", "baseline", outcome, "no regression", text,
                                    tuple(undetermined)))
    unmatched = _unmatched_text(table)
    if unmatched:
        lines.append(VerdictLine("regression", "baseline", "undetermined", "unmatched", f"Not compared: {unmatched}."))
    return lines


def _point_of(row: pd.Series) -> list[str]:
    """A serving row's engine and point (compare.POINT_COLUMNS), for its subject; [] for a run-level row."""
    point = row.get("point")
    return [str(row["engine"]), str(point)] if isinstance(point, str) else []


def _point_names(table: pd.DataFrame) -> list[str | None]:
    """Each row's serving point name, None for a run-level row."""
    if "point" not in table:
        return [None] * len(table)
    return [p if isinstance(p, str) else None for p in table["point"]]


def _unmatched_text(table: pd.DataFrame) -> str:
    """"2 cell(s) only in baseline, 3 serving point(s) only in current": the rows compare_campaigns could not
    match, cells and points apart; "" when every one matched."""
    rows = table[table["metric"].isna()]
    if rows.empty:
        return ""
    kind = pd.Series(np.where(pd.Series(_point_names(rows)).notna(), "serving point(s)", "cell(s)"))
    counts = pd.DataFrame({"kind": kind.to_numpy(), "verdict": rows["verdict"].to_numpy()}).value_counts(sort=False)
    return ", ".join(f"{n} {k} {verdict}" for (k, verdict), n in sorted(counts.items()))


def _cell_regression_lines(verdicts: list[Verdict], threshold: float) -> list[VerdictLine]:
    """A "regression" line per run cell with a metric significantly worse beyond the threshold."""
    by_subject: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_subject.setdefault(v.subject, []).append(v)
    lines = []
    for subject, group in by_subject.items():
        worse = [v for v in group if v.outcome == "different" and v.better is False]
        if worse:
            phrases = [short_phrase(v, threshold) for v in worse]
            lines.append(VerdictLine("regression", subject, "different", "regression",
                                     f"Regression on {subject} against the baseline: {_join([v.text for v in worse])}",
                                     tuple(worse), f"{subject}: {_join_phrases(phrases)} than the baseline."))
    return lines


def _point_regression_lines(verdicts: list[Verdict], cells: list[str], table: pd.DataFrame,
                            points: list[str | None], threshold: float) -> list[VerdictLine]:
    """A "regression" line per serving cell and engine with a point metric significantly worse beyond the
    threshold: per metric, at how many of the points it was compared at, which and by how much (the table in
    the Serving section and serving_baseline.csv hold each point)."""
    groups: dict[str, list[tuple[Verdict, str]]] = {}
    for v, cell, engine, point in zip(verdicts, cells, table.get("engine", pd.Series([None] * len(table))), points,
                                      strict=True):
        if point is not None:
            groups.setdefault(f"{cell} ({engine})", []).append((v, point))
    lines = []
    for subject, group in groups.items():
        worse = [(v, p) for v, p in group if v.outcome == "different" and v.better is False]
        if not worse:
            continue
        clauses = [_points_clause(metric, [(v, p) for v, p in worse if v.metric == metric],
                                  sum(v.metric == metric for v, _ in group))
                   for metric in dict.fromkeys(v.metric for v, _ in worse)]
        where = len({p for _, p in worse})
        lines.append(VerdictLine(
            "regression", subject, "different", "regression",
            f"Serving regression on {subject} against the baseline, per point (±{threshold * 100:g}%): "
            f"{'; '.join(clauses)}.", tuple(v for v, _ in worse),
            f"{subject}: serving worse than the baseline at {where} point(s): "
            f"{_join_phrases(list(dict.fromkeys(words(v.metric) for v, _ in worse)))}."))
    return lines


def _points_clause(metric: str, worse: list[tuple[Verdict, str]], compared: int) -> str:
    """"generation throughput (per user) worse at 3 of 4 points (d0.c1…, …) (−20.4% to −19.9%)"."""
    changes = [v.change_pct for v, _ in worse if v.change_pct is not None]
    low, high = (min(changes), max(changes)) if changes else (None, None)
    size = "" if low is None else f" ({pct(low)})" if low == high else f" ({pct(low)} to {pct(high)})"
    where = (f"all {compared} points" if len(worse) == compared else
             f"{len(worse)} of {compared} points ({', '.join(p for _, p in worse)})")
    return f"{words(metric)} worse at {where}{size}"


def _capped(lines: list[VerdictLine], question: str) -> list[VerdictLine]:
    if len(lines) <= MAX_LINES:
        return lines
    rest = len(lines) - MAX_LINES
    return [*lines[:MAX_LINES], VerdictLine(question, "more", "undetermined", "more",
                                            f"... and {rest} more line(s) of this kind (see the tables below).")]


def build_verdicts(analysis: Analysis, memory: MemoryStudy) -> list[VerdictLine]:
    """Every verdict line, in question order; one line saying so when the campaign answers none. ``memory``:
    the memory study of the same runs (report/memory.py), whose lines and noise floors the verdicts include."""
    lines = [*_capped(environment_lines(analysis, memory.floors()), "environment"),
             *memory_lines(memory, analysis.options.alpha), *host_lines(analysis), *regression_lines(analysis)]
    if not lines:
        lines.append(VerdictLine(
            "none", "campaign", "undetermined", "no comparison",
            "Nothing to compare: one environment kind per host, model and workload, one host per cell"
            + ("" if analysis.options.baseline else " and no --baseline") + ". Add a native and a container "
            "environment on one host, a second host" + ("" if analysis.options.baseline else ", or pass --baseline DIR")
            + "."))
    return lines
