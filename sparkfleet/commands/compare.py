"""`sparkfleet compare BASELINE CURRENT`: the regression gate between two results directories.

Exit 1 when any judged metric regressed (significant and larger than the threshold), 0 otherwise, 2 on
bad input. A serving run's metrics are judged per point (sparkfleet.compare.compare_campaigns' serving rows),
in the one family of the gate: a serving point that regressed exits 1 like a run-level metric.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.files import check_dir
from sparkfleet.argtypes import finite_float
from sparkfleet.thresholds import DEFAULT_ALPHA, DEFAULT_THRESHOLD, MATCH_MODES

# Analysis modules (pandas, scipy) load inside run() so that building the CLI parser stays fast.


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare a campaign against a baseline; exit 1 on a regression")
    p.add_argument("baseline", metavar="BASELINE", help="baseline results directory")
    p.add_argument("current", metavar="CURRENT", help="current results directory")
    p.add_argument("--alpha", type=finite_float, default=DEFAULT_ALPHA, help="significance level (default 0.05)")
    p.add_argument("--threshold", type=finite_float, default=DEFAULT_THRESHOLD,
                   help="smallest relative change reported, as a fraction (default 0.05 = 5%%)")
    p.add_argument("--match", choices=MATCH_MODES, default="auto",
                   help="match cells per host, pooled over hosts, or auto (per host when hosts are shared)")
    p.add_argument("--json", action="store_true", help="print every comparison as JSON")
    p.set_defaults(func=run)


def _load(path: str, role: str, exclude: tuple[str, ...] = ()):
    """The runs and serving points of a results directory (already checked by _nested)."""
    from sparkfleet.load import load_runs

    directory = Path(path)
    loaded = load_runs(directory, exclude=exclude)
    for problem in loaded.problems:
        print(f"sparkfleet compare: skipped {problem}", file=sys.stderr)
    if loaded.runs.empty:
        raise UsageError(f"{role} {directory}: no valid run records")
    return loaded


def run(args) -> int:
    from sparkfleet.compare import compare_campaigns
    from sparkfleet.report.summary import records

    if not 0 < args.alpha < 1:
        raise UsageError("--alpha must be between 0 and 1")
    if args.threshold < 0:
        raise UsageError("--threshold must not be negative")
    leave_out = _nested(args.baseline, args.current)
    base = _load(args.baseline, "baseline", leave_out["baseline"])
    cur = _load(args.current, "current", leave_out["current"])
    table = compare_campaigns(base.runs, cur.runs, alpha=args.alpha, threshold=args.threshold, match=args.match,
                              baseline_points=base.serving, current_points=cur.serving)
    judged = table[table["metric"].notna()]
    if judged.empty:
        raise UsageError(f"no cell and metric is present in both baseline and current: {_why_nothing(table)}")
    regressions = judged[judged["verdict"] == "regression"]
    if args.json:
        print(json.dumps({"alpha": args.alpha, "threshold": args.threshold, "regressions": len(regressions),
                          "comparisons": records(table)}, sort_keys=True, indent=2))
    else:
        print(_text(table, args))
    return 1 if len(regressions) else 0


def _nested(baseline: str, current: str) -> dict[str, tuple[str, ...]]:
    """What each side leaves out (sparkfleet.compare.left_out), with a note on stderr when a side does.
    CURRENT inside BASELINE once made a -50% regression "no regression"."""
    from sparkfleet.compare import left_out

    for path, role in ((baseline, "baseline"), (current, "current")):
        check_dir(Path(path), f"{role} results directory")  # missing, a file, no permission: one line
    leave_out = left_out(baseline, current)
    for role, other in (("baseline", "current"), ("current", "baseline")):
        if leave_out[role]:
            inner = leave_out[role][0]
            outer = baseline if role == "baseline" else current
            print(f"sparkfleet compare: {other} {inner} lies inside {role} {outer}: its runs are left out of the "
                  f"{role}", file=sys.stderr)
    return leave_out


def _why_nothing(table) -> str:
    """Why no comparison was made, from the "only in" rows: the cells each side lacks, or no shared metric."""
    counts = table["verdict"].value_counts()
    if counts.empty:
        return "the cells both sides ran share no judged metric and no serving point"
    return ", ".join(f"{n} cell(s) or point(s) {verdict}" for verdict, n in sorted(counts.items()))


def _subject(r, keys) -> str:
    return " / ".join(str(r[k]) for k in keys)


def _run_lines(rows, keys, family: bool) -> list[str]:
    from sparkfleet.report.document import fmt, fmt_p, fmt_pct

    return [f"  {r['verdict'].upper()}: {_subject(r, keys)} {r['metric']}: {fmt(r['baseline_mean'])} -> "
            f"{fmt(r['current_mean'])} ({fmt_pct(r['change_pct'], 1)}, p={fmt_p(r['p_value'])}"
            + (f", Holm p={fmt_p(r['p_family'])})" if family else ")") for _, r in rows.iterrows()]


def _point_lines(rows, keys, all_points) -> list[str]:
    """One line per serving cell, engine, metric and verdict: at how many of the points it compared, which, and
    the range of the change (the JSON and the report's serving_baseline.csv hold each point)."""
    from sparkfleet.report.document import fmt_p, fmt_pct

    if rows.empty:  # no serving row listed (a campaign without serving points has no engine column)
        return []
    lines = []
    for (subject, engine, metric, verdict), group in rows.groupby(
            [rows.apply(lambda r: _subject(r, keys), axis=1), "engine", "metric", "verdict"], sort=False):
        compared = all_points[(all_points["engine"] == engine) & (all_points["metric"] == metric)
                              & (all_points.apply(lambda r: _subject(r, keys), axis=1) == subject)]
        low, high = group["change_pct"].min(), group["change_pct"].max()
        change = fmt_pct(low, 1) if low == high else f"{fmt_pct(low, 1)} to {fmt_pct(high, 1)}"
        where = (f"all {len(compared)} points" if len(group) == len(compared) else
                 f"{len(group)} of {len(compared)} points ({', '.join(group['point'].astype(str))})")
        held = (f"Holm p <= {fmt_p(group['p_family'].max())}" if group["p_family"].notna().any()
                else "n too small")  # rows with too few runs are left out of the family
        lines.append(f"  {verdict.upper()}: {subject} ({engine}) {metric} at {where}: {change}, {held}")
    return lines


def _text(table, args) -> str:
    from sparkfleet.report.document import fmt
    from sparkfleet.stats import MIN_N_INTERVAL

    judged = table[table["metric"].notna()]
    keys = [c for c in ("host", "model", "environment", "workload") if c in table]
    reported = judged[judged["verdict"].isin(["regression", "improvement"])]
    listed = judged[judged["verdict"] != "unchanged"]  # the reported changes, and the undetermined rows
    # the gate's rule as the table applied it: Holm over the family when the table says so (p_family)
    family = "p_family" in judged and judged["p_family"].notna().any()
    size = int(judged["family_size"].max()) if family and "family_size" in judged else len(judged)
    rule = (f"p < {args.alpha:g} after Holm's adjustment over a family of {size} comparisons" if family
            else f"p < {args.alpha:g}")
    points = judged["point"].notna() if "point" in judged else judged["metric"].isna()  # isna: all False
    of_points = f" ({int(points.sum())} of them serving point metrics)" if points.any() else ""
    lines = [f"{len(judged)} comparisons{of_points}; reported only when {rule} and |change| > "
             f"{args.threshold * 100:g}%: {len(reported)}"]
    lines += _run_lines(listed[~points.reindex(listed.index)], keys, family)
    lines += _point_lines(listed[points.reindex(listed.index)], keys, judged[points])
    undetermined = judged[judged["verdict"] == "undetermined"]
    too_few = undetermined[undetermined["reason"] == "n-too-small"] if "reason" in undetermined else undetermined
    if len(too_few):
        need = too_few["required_n"].max()
        lines.append(f"  undetermined: {len(too_few)} comparisons have fewer than {MIN_N_INTERVAL} runs on a side"
                     + (f" (about {fmt(need)} runs per side would resolve ±{args.threshold * 100:g}%)"
                        if need == need else ""))
    if len(undetermined) > len(too_few):
        lines.append(f"  undetermined: {len(undetermined) - len(too_few)} comparisons too noisy to tell")
    unmatched = table[table["metric"].isna()]
    for _, r in unmatched.iterrows():
        point = f" ({r['engine']}) {r['point']}" if "point" in r and isinstance(r["point"], str) else ""
        lines.append(f"  note: {_subject(r, keys)}{point} {r['verdict']}")
    regressions = int((judged["verdict"] == "regression").sum())
    lines.append("regression" if regressions else "no regression")
    return "\n".join(lines)
