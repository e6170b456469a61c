"""`sparkfleet run -i INVENTORY [-e EXTRA ...]`: run the benchmark playbook with a live progress display.

Drives ``bench.yml`` (or ``--playbook``) through ansible-runner with the ``sparkfleet.bench.progress`` callback
enabled and shows, per host, runs done / planned, the cell in progress and an ETA: redrawn in place on a
terminal, one line per event otherwise. Exit code = the playbook's; 2 on bad arguments.
"""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("run", help="run the benchmark playbook through ansible-runner with live progress and ETA")
    p.add_argument("-i", "--inventory", required=True, metavar="INVENTORY", help="Ansible inventory (e.g. sparks.ini)")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="EXTRA",
                   help="extra variables as for ansible-playbook: k=v, JSON/YAML, or @file (repeatable)")
    p.add_argument("--playbook", default="bench.yml",
                   help="playbook to run, relative to the current directory or the repo (default bench.yml)")
    p.add_argument("--json-events", metavar="FILE",
                   help="also keep the progress events (JSON lines) in FILE (replaced)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment variable for ansible-playbook, on top of this process's (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no live display; only the final summary")
    p.set_defaults(func=run)


def run(args) -> int:
    from sparkfleet.progress import Display
    from sparkfleet.runner import RunRequest, parse_env, run_playbook, runner_kwargs

    request = RunRequest(inventory=args.inventory, playbook=args.playbook, extra_vars=list(args.extra_vars),
                         env=parse_env(args.env), events_path=args.json_events)
    runner_kwargs(request, "/nonexistent", "/nonexistent")  # bad arguments fail (exit 2) before anything starts
    display = Display(quiet=args.quiet)
    outcome = run_playbook(request, display.feed)
    display.close(outcome.rc)
    if outcome.rc != 0:
        print(f"sparkfleet run: playbook {outcome.status} (rc={outcome.rc}); last lines of its output:",
              file=sys.stderr)
        for line in outcome.stdout_tail:
            print(f"  {line}", file=sys.stderr)
    return outcome.rc
