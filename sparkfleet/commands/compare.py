"""`sparkfleet compare BASELINE CURRENT`: the regression gate between two results directories.

Exit 1 when any judged metric regressed (significant and larger than the threshold), 0 otherwise, 2 on
bad input.
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
    """The runs of a results directory (already checked by _nested)."""
    from sparkfleet.load import load_runs

    directory = Path(path)
    loaded = load_runs(directory, exclude=exclude)
    for problem in loaded.problems:
        print(f"sparkfleet compare: skipped {problem}", file=sys.stderr)
    if loaded.runs.empty:
        raise UsageError(f"{role} {directory}: no valid run records")
    return loaded.runs


def run(args) -> int:
    from sparkfleet.compare import compare_campaigns
    from sparkfleet.report.summary import records

    if not 0 < args.alpha < 1:
        raise UsageError("--alpha must be between 0 and 1")
    if args.threshold < 0:
        raise UsageError("--threshold must not be negative")
    leave_out = _nested(args.baseline, args.current)
    table = compare_campaigns(_load(args.baseline, "baseline", leave_out["baseline"]),
                              _load(args.current, "current", leave_out["current"]),
                              alpha=args.alpha, threshold=args.threshold, match=args.match)
    judged = table[table["metric"].notna()]
    if judged.empty:
        raise UsageError("no cell and metric is present in both baseline and current")
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


def _text(table, args) -> str:
    from sparkfleet.report.document import fmt, fmt_p, fmt_pct
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
    lines = [f"{len(judged)} comparisons; reported only when {rule} and |change| > "
             f"{args.threshold * 100:g}%: {len(reported)}"]
    for _, r in listed.iterrows():
        lines.append(f"  {r['verdict'].upper()}: {' / '.join(str(r[k]) for k in keys)} {r['metric']}: "
                     f"{fmt(r['baseline_mean'])} -> {fmt(r['current_mean'])} ({fmt_pct(r['change_pct'], 1)}, "
                     f"p={fmt_p(r['p_value'])}" + (f", Holm p={fmt_p(r['p_family'])})" if family else ")"))
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
        lines.append(f"  note: {' / '.join(str(r[k]) for k in keys)} {r['verdict']}")
    regressions = int((judged["verdict"] == "regression").sum())
    lines.append("regression" if regressions else "no regression")
    return "\n".join(lines)
