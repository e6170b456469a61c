"""`sparkfleet parse FILE [--report-json JSON] [--json]`: what the parsers read from one log.

Prints the figures under the run record's metric names (DESIGN.md), where each came from, the model the
log says was loaded, the engine version and what was expected but not found. Exit 0 when the file was
recognised, 1 when nothing in it was, 2 when it cannot be read.
"""

from __future__ import annotations

import json

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import METRICS
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import ParseResult, parse_log
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.files import MAX_LOG_BYTES, decode_text, read_bytes


def register(sub) -> None:
    p = sub.add_parser("parse", help="parse a bench.log (trtllm-bench, memory lines, matmul, vllm) and show the "
                                     "figures with their record names and sources")
    p.add_argument("file", metavar="FILE", help="log or report to parse")
    p.add_argument("--report-json", metavar="JSON", help="trtllm-bench --report_json file; its figures win")
    p.add_argument("--json", action="store_true", help="print the parse result as JSON")
    p.set_defaults(func=run)


def read_input(name: str, what: str = "log file") -> bytes:
    """The file's bytes, or a one-line UsageError (exit 2) saying why not (sparkfleet.files): missing, a
    directory or another non-regular file, no permission, too large. A log must be UTF-8 text (a tail cut
    mid-character by a killed run is fine); a garbled report JSON is the parser's warning, not an error."""
    data = read_bytes(name, what, MAX_LOG_BYTES)
    if what == "log file":
        decode_text(data, name, what, cut_tail_ok=True)
    return data


def format_text(name: str, result: ParseResult) -> str:
    lines = [f"file: {name}", f"kind: {result.kind}", f"model: {result.model or '(not found)'}"]
    engine = " ".join(x for x in (result.engine, result.engine_version) if x) or "(not found)"
    lines.append(f"engine: {engine}" + (f" (backend {result.backend})" if result.backend else ""))
    if result.metrics:
        lines.append("metrics:")
        width = max(len(n) for n in result.metrics)
        for name in METRICS:  # the contract's order, not the log's
            if name in result.metrics:
                value = f"{result.metrics[name]:.6g}"
                lines.append(f"  {name:<{width}}  {value:>12} {METRICS[name]:<10}  from {result.sources[name]}")
    else:
        lines.append("metrics: (none)")
    lines.append(f"missing: {', '.join(result.missing) if result.missing else '(none)'}")
    if result.probe:
        lines.append("ran in: " + ", ".join(f"{k}={v}" for k, v in result.probe.items()))
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


def run(args) -> int:
    data = read_input(args.file)
    report = read_input(args.report_json, "report JSON") if args.report_json else None
    result = parse_log(data, report)
    if args.json:
        print(json.dumps({"file": args.file, "report_json": args.report_json, **result.to_dict()}, indent=2,
                         sort_keys=True))
    else:
        print(format_text(args.file, result))
    return 1 if result.kind == "unknown" else 0
