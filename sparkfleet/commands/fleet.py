"""`sparkfleet fleet RESULTS/<campaign>`: do the hosts agree, and if not, what differed about them."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import write_json_atomic
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from sparkfleet.argtypes import percent
from sparkfleet.thresholds import DEFAULT_TOLERANCE


def register(sub) -> None:
    p = sub.add_parser("fleet", help="cross-host reproducibility: outlier hosts and the state that differed")
    p.add_argument("results", metavar="RESULTS", help="a campaign's results directory (results/<campaign>)")
    p.add_argument("--tolerance", type=percent, metavar="PERCENT", default=DEFAULT_TOLERANCE * 100,
                   help="percent by which a host must differ (significantly) from the other hosts to be named out, "
                        "as for `sparkfleet report` and sparkfleet_reproducibility_tolerance_pct (5 or 5%%; default "
                        "%(default)g)")
    p.add_argument("--acknowledge-differences", action="store_true", default=None,
                   help="compare the hosts although their firmware or driver differ (else the comparison is refused "
                        "unless the campaign set sparkfleet_acknowledge_host_differences)")
    p.add_argument("--json", action="store_true", help="print the analysis as JSON")
    p.set_defaults(func=run)


def analyse_and_write(root: Path, tolerance_pct: float, acknowledged: bool | None = None):
    """The fleet's state, written as report/fleet.md and report/fleet.json: (state, the markdown). ``acknowledged``
    None: campaign.json says whether firmware/driver differences across hosts were acknowledged."""
    from sparkfleet.fleet_state import analyse, render_markdown  # noqa: PLC0415 - pandas/scipy: only when used

    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    if not 0 < tolerance_pct < 100:  # what percent() refuses on the command line, for a plan's tolerance_pct too
        raise UsageError(f"--tolerance {tolerance_pct:g}: a percent above 0 and below 100 (e.g. 5 for ±5%)")
    state = analyse(root, tolerance=tolerance_pct / 100, acknowledged=acknowledged)
    if not state.hosts:
        raise UsageError(f"{root}: no host directories (expected <host>/host.json or <host>/runs/)")
    text = render_markdown(state, tolerance_pct / 100)
    (root / "report").mkdir(exist_ok=True)
    (root / "report" / "fleet.md").write_text(text)
    write_json_atomic(root / "report" / "fleet.json", state.to_dict())
    return state, text


def run(args) -> int:
    state, text = analyse_and_write(Path(args.results), args.tolerance,
                                    getattr(args, "acknowledge_differences", None))
    print(json.dumps(state.to_dict(), indent=2, default=str) if args.json else text, end="")
    # Non-zero when the fleet does not reproduce (an outlier host or missing runs) or the comparison is refused
    # (firmware or driver differ, not acknowledged): usable as a CI gate.
    return 1 if state.outside_hosts or state.missing or state.refused else 0
