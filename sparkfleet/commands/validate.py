"""`sparkfleet validate-record FILE...`: check run records against the contract (DESIGN.md)."""

from __future__ import annotations

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.files import read_json


def register(sub) -> None:
    p = sub.add_parser("validate-record", help="check record.json files against the run-record schema")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=run)


def run(args) -> int:
    bad = 0
    for name in args.files:
        data = read_json(name, "run record")  # missing, a directory, not UTF-8, not JSON: one line, exit 2
        problems = validate(data)
        for problem in problems:
            print(f"{name}: {problem}")
        bad += bool(problems)
    return 1 if bad else 0
