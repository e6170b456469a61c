"""`sparkfleet` console script.

Each subcommand lives in its own module under ``sparkfleet.commands`` and exposes
``register(subparsers)``; the parser sets ``func`` (``args -> int`` exit code). Discovery keeps
subcommands independent of each other and of this file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from sparkfleet import __version__, commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkfleet",
        description="Benchmark a fleet of DGX Spark machines: parse trtllm-bench logs, aggregate run "
        "records, compare native vs container and hosts, gate regressions.",
    )
    parser.add_argument("--version", action="version", version=f"sparkfleet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"sparkfleet {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"sparkfleet {args.command}: error: no such file: {exc.filename}", file=sys.stderr)
        return 2
