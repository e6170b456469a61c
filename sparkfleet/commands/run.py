"""`sparkfleet run [-i INVENTORY] [-e EXTRA ...]`: run the benchmark playbook with a live progress display.

Drives ``bench.yml`` (or ``--playbook``) through ansible-runner and shows, from its event stream, per host,
runs done / planned, the cell in progress and an ETA: redrawn in place on a terminal, one line per event
otherwise. After ``bench.yml`` it writes the campaign's report (as `sparkfleet report results/<campaign>`)
and ends with its verdicts. Exit code = the playbook's (2 when the report could not be written); 2 on bad
arguments.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("run", help="run the benchmark playbook through ansible-runner with live progress and ETA")
    p.add_argument("-i", "--inventory", metavar="INVENTORY",
                   help="Ansible inventory (e.g. sparks.ini; default: ansible.cfg's, this machine)")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="EXTRA",
                   help="extra variables as for ansible-playbook: k=v, JSON/YAML, or @file (repeatable)")
    p.add_argument("--playbook", default="bench.yml",
                   help="playbook to run, relative to the current directory or the repo (default bench.yml, which "
                        "is followed by the campaign's report)")
    p.add_argument("--json-events", metavar="FILE",
                   help="also keep the progress events (JSON lines) in FILE (replaced)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment variable for ansible-playbook, on top of this process's (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no live display; only the final summary")
    p.set_defaults(func=run)


#: What the package makes of a playbook's results tree once it has run (playbooks relative to the repo).
AFTER = {"bench.yml": "report", "playbooks/reproducibility.yml": "fleet"}


def after_playbook(playbook: str, outcome) -> tuple[str | None, list[str]]:
    """(what to write: "report", "fleet" or None, the campaign directories): after the repo's bench.yml or
    reproducibility.yml, when some host got to its end and the run was not cancelled."""
    from sparkfleet.runner import REPO

    kind = next((k for name, k in AFTER.items() if Path(playbook).resolve() == (REPO / name).resolve()), None)
    finished = [h for h, s in (outcome.stats or {}).items() if not s.get("failed") and not s.get("unreachable")]
    if kind is None or outcome.cancelled or not finished:
        return None, []
    return kind, list(outcome.campaign_dirs)


def fleet_tolerance(tolerances: dict[str, float]) -> float:
    """The one tolerance (percent) of the hosts' plans (sparkfleet_reproducibility_tolerance_pct; the default
    when no plan carried one). Hosts whose plans disagree: UsageError naming them, as one fleet comparison has
    one tolerance."""
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
    from sparkfleet.thresholds import DEFAULT_TOLERANCE

    values = set(tolerances.values())
    if len(values) > 1:
        hosts = ", ".join(f"{h}={t:g}" for h, t in sorted(tolerances.items()))
        raise UsageError(f"the hosts' sparkfleet_reproducibility_tolerance_pct differ ({hosts}): set one for all "
                         f"hosts, or compare with `sparkfleet fleet DIR --tolerance T`")
    return values.pop() if values else DEFAULT_TOLERANCE * 100


def write_results(campaign_dir: str, kind: str, tolerances: dict[str, float]) -> tuple[list[str], str | None]:
    """In this process, `sparkfleet report DIR` (kind "report": its terminal summary) or `sparkfleet fleet DIR
    --tolerance T`, T the hosts' plans' (:func:`fleet_tolerance`; report/fleet.md): (its lines, or [] and a
    one-line error)."""
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
    from sparkfleet.commands import fleet, report

    try:
        if kind == "report":
            return report.summarise(report.args_for(campaign_dir)).splitlines(), None
        return fleet.analyse_and_write(Path(campaign_dir), fleet_tolerance(tolerances))[1].splitlines(), None
    except UsageError as exc:
        return [], str(exc)


def run(args) -> int:
    from sparkfleet.progress import Display, progress_event
    from sparkfleet.runner import RunRequest, parse_env, run_playbook, runner_kwargs

    request = RunRequest(inventory=args.inventory, playbook=args.playbook, extra_vars=list(args.extra_vars),
                         env=parse_env(args.env))
    playbook = runner_kwargs(request, "/nonexistent")["playbook"]  # bad arguments fail (exit 2) before anything
    display = Display(quiet=args.quiet)
    path = Path(args.json_events or os.devnull).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as log:

        def feed(events: list[dict]) -> None:
            log.writelines(json.dumps(e, sort_keys=True, default=str) + "\n" for e in events)
            log.flush()
            display.feed(events)

        outcome = run_playbook(request, feed)
        rc = outcome.rc
        kind, campaign_dirs = after_playbook(playbook, outcome)
        for campaign_dir in campaign_dirs:
            lines, error = write_results(campaign_dir, kind, outcome.tolerances)
            if error:
                print(f"sparkfleet run: {kind}: {error}", file=sys.stderr)
                rc = rc or 2
            else:
                feed([progress_event("report", lines=lines)])
    display.close(rc)
    if outcome.rc != 0:
        print(f"sparkfleet run: playbook {outcome.status} (rc={outcome.rc}); last lines of its output:",
              file=sys.stderr)
        for line in outcome.stdout_tail:
            print(f"  {line}", file=sys.stderr)
    return rc
