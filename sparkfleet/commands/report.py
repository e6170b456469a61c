"""`sparkfleet report RESULTS`: statistics, comparisons and warnings over every run record under RESULTS."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from sparkfleet.errors import UsageError
from sparkfleet.files import check_dir
from sparkfleet.thresholds import DEFAULT_ALPHA, DEFAULT_THRESHOLD

# pandas, scipy and matplotlib load inside run(): building the CLI parser must stay fast for every
# other subcommand, so defaults are resolved there too (None = the library default).


def fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def register(sub) -> None:
    p = sub.add_parser("report", help="aggregate run records into report/summary.md, index.html, runs.csv/parquet")
    p.add_argument("results", metavar="RESULTS", help="results directory (a campaign, or a tree of campaigns)")
    p.add_argument("--out", metavar="DIR", help="where to write the report (default RESULTS/report)")
    p.add_argument("--json", action="store_true", help="print cells, comparisons and warnings as JSON")
    p.add_argument("--cv-gate", type=fraction,
                   help="coefficient of variation above which a cell fails the quality gate (default 0.05)")
    p.add_argument("--level", type=fraction, help="confidence level (default 0.95)")
    p.add_argument("--resamples", type=int, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, help="bootstrap seed, for reproducible CIs (default 0)")
    p.add_argument("--tolerance", type=fraction,
                   help="host deviation from the fleet median that gets a host named (default 0.05)")
    p.add_argument("--kv-fraction", type=fraction,
                   help="KV fraction assumed where a record has none (default 0.9, TensorRT-LLM's default)")
    p.add_argument("--threshold", type=fraction,
                   help="smallest relative difference that matters in the verdicts, as a fraction "
                        f"(default {DEFAULT_THRESHOLD:g})")
    p.add_argument("--alpha", type=fraction, help=f"significance level of the verdicts (default {DEFAULT_ALPHA:g})")
    p.add_argument("--baseline", metavar="DIR",
                   help="results directory to compare against: the verdicts then say whether anything regressed")
    p.set_defaults(func=run)


def options_from(args):
    from sparkfleet.report import Options

    given = {"cv_gate": args.cv_gate, "level": args.level, "resamples": args.resamples, "seed": args.seed,
             "tolerance": args.tolerance, "kv_fraction": args.kv_fraction, "threshold": args.threshold,
             "alpha": args.alpha, "baseline": args.baseline}
    return Options(**{k: v for k, v in given.items() if v is not None})


def run(args) -> int:
    from sparkfleet.load import load_runs

    results = Path(args.results)
    check_dir(results, "results directory")  # missing, a file, no permission: one line naming it (exit 2)
    if not results.is_dir():
        raise UsageError(f"{results}: not a results directory")
    if args.resamples is not None and args.resamples < 100:
        raise UsageError("--resamples must be at least 100")
    if args.baseline is not None and not Path(args.baseline).is_dir():
        raise UsageError(f"--baseline {args.baseline}: not a results directory")
    # scipy and matplotlib (most of a second) are imported while the loader's workers read the records.
    loaded = load_runs(results, while_loading=lambda: importlib.import_module("sparkfleet.report.summary"))
    from sparkfleet.report import analyse, start_run_figures, write_report
    from sparkfleet.report.summary import terminal_summary, to_json

    options = options_from(args)
    for problem in loaded.problems:
        print(f"sparkfleet report: skipped {problem}", file=sys.stderr)
    if loaded.runs.empty:
        raise UsageError(f"{results}: no valid run records ({len(loaded.problems)} skipped)")
    started = start_run_figures(loaded.runs, loaded.root)  # drawn while the statistics are computed
    analysis = analyse(loaded, options)
    for problem in analysis.baseline_problems:
        print(f"sparkfleet report: skipped in the baseline {problem}", file=sys.stderr)
    if args.baseline is not None and analysis.regressions is None:
        raise UsageError(f"--baseline {args.baseline}: no valid run records")
    written = write_report(analysis, args.out or results / "report", started)
    if args.json:
        print(to_json(analysis))
    else:
        print(terminal_summary(analysis, [str(p) for p in written]))
    return 0
