"""`sparkfleet report RESULTS`: statistics, comparisons and warnings over every run record under RESULTS."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.fields import field_problem
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.trtllm_cli import KV_FRACTION
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.files import check_dir
from sparkfleet.argtypes import percent
from sparkfleet.thresholds import DEFAULT_ALPHA, DEFAULT_THRESHOLD, DEFAULT_TOLERANCE

# pandas, scipy and matplotlib load inside run(): building the CLI parser must stay fast for every
# other subcommand, so defaults are resolved there too (None = the library default).


def fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def kv_fraction(text: str) -> float:
    """A KV fraction as a trtllm workload's kv_fraction field accepts it (trtllm_cli.KV_FRACTION: 0 < v <= 1)."""
    value = float(text)
    problem = field_problem(KV_FRACTION, value)
    if problem:
        raise argparse.ArgumentTypeError(f"{text} is not a KV fraction: {problem}")
    return value


def register(sub) -> None:
    p = sub.add_parser("report", help="aggregate run records into report/summary.md, index.html, runs.csv/parquet")
    p.add_argument("results", metavar="RESULTS", nargs="?",
                   help="results directory (a campaign, or a tree of campaigns); or give --hosts DIR")
    p.add_argument("--hosts", metavar="DIR",
                   help="print only whether each host of DIR is normal (against its peers and --reference), as a "
                        "compact table; writes no report; exit status 1 when a host is not normal or the comparison "
                        "is refused")
    p.add_argument("--reference", metavar="FILE",
                   help="what a normal host reaches: a previous campaign's results directory, or a YAML/JSON list of "
                        "published figures {metric, model, workload, value, source} (environment optional)")
    p.add_argument("--acknowledge-differences", action="store_true", default=None,
                   help="compare the hosts although their firmware or driver differ (else the comparison is refused "
                        "unless the campaign set sparkfleet_acknowledge_host_differences)")
    p.add_argument("--out", metavar="DIR", help="directory to write the report into (default RESULTS/report)")
    p.add_argument("--json", action="store_true", help="print cells, comparisons and warnings as JSON")
    p.add_argument("--cv-gate", type=fraction,
                   help="coefficient of variation above which a cell fails the quality gate (default 0.05)")
    p.add_argument("--level", type=fraction, help="confidence level (default 0.95)")
    p.add_argument("--resamples", type=int, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, help="bootstrap seed, for reproducible CIs (default 0)")
    p.add_argument("--tolerance", type=percent, metavar="PERCENT",
                   help="percent by which a host must differ (significantly) from the other hosts to be named out or "
                        f"not normal, as for `sparkfleet fleet` (5 or 5%%; default {DEFAULT_TOLERANCE * 100:g})")
    p.add_argument("--kv-fraction", type=kv_fraction,
                   help="KV fraction assumed where a record has none (default 0.9, TensorRT-LLM's default)")
    p.add_argument("--threshold", type=fraction,
                   help="smallest relative difference that matters in the verdicts, as a fraction "
                        f"(default {DEFAULT_THRESHOLD:g})")
    p.add_argument("--alpha", type=fraction, help=f"significance level of the verdicts (default {DEFAULT_ALPHA:g})")
    p.add_argument("--baseline", metavar="DIR",
                   help="results directory to compare against: the verdicts then say whether anything regressed")
    p.set_defaults(func=run)


def check_out_dir(out: Path, what: str) -> None:
    """The report directory must be a directory, or creatable as one: a file there is a one-line error."""
    for path in (out, *out.parents):
        if path.exists() or path.is_symlink():
            if not path.is_dir():
                raise UsageError(f"{what} {out}: {path} is not a directory (give a directory to write the report "
                                 "into)")
            if not os.access(path, os.W_OK | os.X_OK):
                raise UsageError(f"{what} {out}: {path} is not writable")
            return


def options_from(args):
    """The report's Options from the arguments named like its fields (an argument not given: the default)."""
    from sparkfleet.report import Options

    given = {name: getattr(args, name, None) for name in Options.__dataclass_fields__}
    if given.get("tolerance") is not None:  # --tolerance is a percent (as for fleet); Options holds the fraction
        given["tolerance"] = given["tolerance"] / 100
    return Options(**{k: v for k, v in given.items() if v is not None})


def args_for(results: str | os.PathLike[str]) -> argparse.Namespace:
    """The arguments of `sparkfleet report RESULTS` with nothing else given (what `sparkfleet run` reports with)."""
    parser = argparse.ArgumentParser(prog="sparkfleet")
    register(parser.add_subparsers())
    return parser.parse_args(["report", str(results)])


def run(args) -> int:
    if args.hosts is not None:
        text, failing = hosts_table(args)
        print(text)
        return 1 if failing else 0
    print(summarise(args))
    return 0


def host_options(args):
    """The host verdicts' options from --reference and --acknowledge-differences (UsageError: a bad reference)."""
    from sparkfleet.report.host_normal import HostOptions

    reference = getattr(args, "reference", None)
    if reference is not None and not Path(reference).exists():
        raise UsageError(f"--reference {reference}: no such file or directory")
    return HostOptions(reference=reference, acknowledged=getattr(args, "acknowledge_differences", None))


def hosts_table(args) -> tuple[str, bool]:
    """`sparkfleet report --hosts DIR`: (the compact table of each host's verdict, whether any host is not normal
    or the comparison is refused)."""
    from sparkfleet.load import load_runs
    from sparkfleet.report.analysis import check_one_campaign
    from sparkfleet.report.host_normal import check_hosts, failing, text_table

    if args.results is not None:
        raise UsageError(f"give either RESULTS or --hosts DIR, not both ({args.results} and {args.hosts})")
    results = Path(args.hosts)
    check_dir(results, "--hosts directory")
    options = host_options(args)
    loaded = load_runs(results)
    for problem in loaded.problems:
        print(f"sparkfleet report: skipped {problem}", file=sys.stderr)
    if loaded.runs.empty:
        raise UsageError(f"{results}: no valid run records")
    check_one_campaign(loaded.runs, loaded.root)
    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance / 100  # a percent, as for fleet
    check = check_hosts(loaded.root, loaded.runs, tolerance=tolerance,
                        alpha=args.alpha or DEFAULT_ALPHA, reference=options.reference,
                        acknowledged=options.acknowledged, always=True, points=loaded.serving)
    return text_table(check), failing(check)


def summarise(args) -> str:
    """Write the report as `sparkfleet report` does; its terminal summary (or JSON) as text. UsageError on bad
    input (problems with single records go to stderr)."""
    from sparkfleet.load import load_runs

    if args.results is None:
        raise UsageError("give a results directory (sparkfleet report RESULTS), or --hosts DIR")
    results = Path(args.results)
    check_dir(results, "results directory")  # missing, a file, no permission: one line naming it (exit 2)
    if args.resamples is not None and args.resamples < 100:
        raise UsageError("--resamples must be at least 100")
    if args.baseline is not None and not Path(args.baseline).is_dir():
        raise UsageError(f"--baseline {args.baseline}: not a results directory")
    out_dir = Path(args.out) if args.out else results / "report"
    check_out_dir(out_dir, "--out" if args.out else "report directory")
    leave_out: tuple[str, ...] = ()
    if args.baseline is not None:  # a baseline inside RESULTS is not also read as part of it (nor the reverse)
        from sparkfleet.compare import left_out

        leave_out = left_out(args.baseline, results)["current"]
    # scipy and matplotlib (most of a second) are imported while the loader's workers read the records.
    loaded = load_runs(results, while_loading=lambda: importlib.import_module("sparkfleet.report.summary"),
                       exclude=leave_out)
    from sparkfleet.report import analyse, start_run_figures, write_report
    from sparkfleet.report.summary import terminal_summary, to_json

    options = options_from(args)
    for problem in loaded.problems:
        print(f"sparkfleet report: skipped {problem}", file=sys.stderr)
    for missing in loaded.accounting.missing:
        if missing.kind != "unreadable":  # those were just named as skipped
            print(f"sparkfleet report: missing {missing}", file=sys.stderr)
    for point in loaded.accounting.missing_points:  # a serving point or figure an ok run lacks
        print(f"sparkfleet report: missing {point}", file=sys.stderr)
    if loaded.runs.empty:
        raise UsageError(f"{results}: no valid run records ({len(loaded.problems)} skipped; "
                         f"{loaded.accounting.summary().rstrip('.')})")
    from sparkfleet.report.analysis import check_one_campaign

    check_one_campaign(loaded.runs, loaded.root)  # a report's cells never mix campaigns (before any drawing)
    started = start_run_figures(loaded.runs, loaded.root)  # drawn while the statistics are computed
    analysis = analyse(loaded, options, host_options(args))
    for problem in analysis.baseline_problems:
        print(f"sparkfleet report: skipped in the baseline {problem}", file=sys.stderr)
    if args.baseline is not None and analysis.regressions is None:
        raise UsageError(f"--baseline {args.baseline}: no valid run records")
    try:
        written = write_report(analysis, out_dir, started)
    except OSError as exc:  # the disk filled, a file appeared where a directory goes: one line, exit 2
        raise UsageError(f"{out_dir}: cannot write the report: {exc.strerror or exc}"
                         + (f" ({exc.filename})" if exc.filename else "")) from None
    if args.json:
        return to_json(analysis)
    return terminal_summary(analysis, [str(p) for p in written])
