"""`sparkfleet run [-i INVENTORY] [-e EXTRA ...]`: run the benchmark playbook with a live progress display.

Drives ``bench.yml`` (or ``--playbook``) through ansible-runner and shows, from its event stream, per host,
runs done / planned, the cell in progress and an ETA: redrawn in place on a terminal, one line per event
otherwise. After ``bench.yml`` it writes the campaign's report (as `sparkfleet report results/<campaign>`)
and ends with its verdicts and numbers; then one line per planned run that failed, with its cause as the engine
or client gave it (the record's reason, a serving point's reason), read from the collected results tree.

Exit status (EXIT_STATUSES): 0 every planned run ok; the playbook's own when it failed (ansible-playbook's: 1
error, 2 a host failed, 4 a host unreachable or a parse error, 5 bad options, 99 interrupted, 250 unexpected; 130
after Ctrl-C, 143 after SIGTERM: then what the run started on the hosts is stopped, stop_hosts); else 10 when some
planned run failed (not ok, no usable record, or a serving point failed) and 11 when no planned run succeeded; 12
(before 10 and 11) when the playbook measured nothing because every planned run was already done (each host said "N
runs already done on HOST (dates); nothing measured"); else 2 when the report could not be written; 2 on bad
arguments. ``--fresh`` measures again, the previous results moved aside (kept) as a campaign instance of their own,
``<campaign>.<UTC stamp>``, on the hosts and on the controller.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("run", help="run the benchmark playbook through ansible-runner with live progress and ETA",
                       epilog="exit status: " + "; ".join(f"{code} {words}" for code, words in EXIT_STATUSES))
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
    p.add_argument("--fresh", action="store_true",
                   help="measure again even where every planned run is already done: the previous results are moved "
                        "aside, never deleted, to <campaign>.<UTC stamp> on each host and on the controller "
                        "(-e sparkfleet_fresh=true)")
    p.set_defaults(func=run)


#: `sparkfleet run`'s own exit statuses, beside the playbook's (passed on as they are): none of
#: ansible-playbook's (0, 1, 2, 4, 5, 99, 250, and the bit flags 1 | 2 | 4 its task queue may OR together).
EXIT_RUNS_FAILED = 10
EXIT_NONE_OK = 11
EXIT_NOTHING_MEASURED = 12
EXIT_STATUSES = (
    (0, "every planned run ok"),
    (1, "the playbook failed: ansible-playbook's own status is passed on (1 error, 2 a host failed, 4 a host "
        "unreachable, 5 bad options, 99 interrupted, 250 unexpected)"),
    (2, "also bad arguments, or the report could not be written after a playbook that succeeded"),
    (EXIT_RUNS_FAILED, "some planned run failed (each named with its cause)"),
    (EXIT_NONE_OK, "no planned run succeeded"),
    (EXIT_NOTHING_MEASURED, "nothing measured: every planned run was already done (--fresh measures again, keeping "
                            "the old results)"),
    (130, "interrupted (Ctrl-C): what the run started on the hosts was stopped (finished runs kept for a resume)"),
    (143, "terminated (SIGTERM): the same"),
)
#: Failed runs named one by one on the terminal (the report names every one).
MAX_FAILED_LINES = 30

#: What the package makes of a playbook's results tree once it has run (playbooks relative to the repo).
AFTER = {"bench.yml": "report", "playbooks/reproducibility.yml": "fleet"}


def playbook_kind(playbook: str) -> str | None:
    """AFTER's kind of a playbook that measures (the repo's bench.yml or reproducibility.yml), else None."""
    from sparkfleet.runner import REPO

    return next((k for name, k in AFTER.items() if Path(playbook).resolve() == (REPO / name).resolve()), None)


def after_playbook(playbook: str, outcome) -> tuple[str | None, list[str]]:
    """(what to write: "report", "fleet" or None, the campaign directories): after the repo's bench.yml or
    reproducibility.yml, when some host got to its end and the run was not cancelled."""
    kind = playbook_kind(playbook)
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
    one-line error, also for an unexpected exception)."""
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
    from sparkfleet.commands import fleet, report

    try:
        if kind == "report":
            return report.summarise(report.args_for(campaign_dir)).splitlines(), None
        return fleet.analyse_and_write(Path(campaign_dir), fleet_tolerance(tolerances))[1].splitlines(), None
    except UsageError as exc:
        return [], str(exc)
    except Exception as exc:  # a bug in the report must not hide how the runs went (run_status comes after)
        return [], (f"failed: {type(exc).__name__}: {exc} (`sparkfleet {kind} {campaign_dir}` shows the "
                    "traceback)")


def _one_line(text) -> str:
    return " ".join(str(text).split())


def _point_causes(points) -> list[str]:
    """A serving run's failed points grouped by cause, as the client or server said it: "2 of 4 points
    (d0.c1.pp512.tg64, d0.c4.pp512.tg64): <reason>"."""
    if points is None or points.empty:
        return []
    failed = points[points["point_status"].astype("string").fillna("") != "ok"]
    causes: dict[str, list[str]] = {}
    for name, status, reason in zip(failed["point"], failed["point_status"], failed["point_reason"], strict=True):
        cause = _one_line(reason) if isinstance(reason, str) and reason.strip() else f"point {status or 'no status'}"
        causes.setdefault(cause, []).append(str(name))
    out = []
    for cause, names in causes.items():
        listed = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        which = f"every point ({len(names)})" if len(names) == len(points) else \
            f"{len(names)} of {len(points)} point(s) ({listed})"
        out.append(f"{which}: {cause}")
    return out


def failure_cause(reason, points) -> str:
    """A failed run's cause: the record's reason and its failed serving points' reasons (each said once), the
    record's reason left out where it only repeats the points (it names each failed point or holds each cause)."""
    reason = _one_line(reason) if isinstance(reason, str) and reason.strip() else ""
    causes = _point_causes(points)
    if causes and reason:
        failed = points[points["point_status"].astype("string").fillna("") != "ok"]
        reasons = [_one_line(r) for r in failed["point_reason"] if isinstance(r, str) and r.strip()]
        if all(str(n) in reason for n in failed["point"]) or (reasons and all(r in reason for r in reasons)):
            reason = ""
    return "; ".join([*([reason] if reason else []), *causes]) or "no reason recorded"


def failed_runs(campaign_dir: str | os.PathLike[str]) -> tuple[int, int, list[str]]:
    """(planned runs, runs ok, one line per planned run that failed with its cause) of a collected campaign
    directory, read with the one reader (sparkfleet.load.load_runs: the runs' status and reason, the serving
    points' point_status and point_reason; the accounting's runs without a usable record). A run fails when its
    status is not ok, when it is ok with a failed serving point, and when it has no usable record or no metric.
    The planned count is campaign.json's, else the records'."""
    from sparkfleet.load import load_runs

    loaded = load_runs(campaign_dir)
    runs, points = loaded.runs, loaded.serving
    by_run = dict(tuple(points.groupby(points["run_id"].astype(str), sort=False))) if len(points) else {}
    lines = []
    for row in runs.sort_values(["host", "order_index"] if "order_index" in runs else ["host"]).itertuples():
        run_points = by_run.get(str(row.run_id))
        bad_points = run_points is not None and (run_points["point_status"].astype("string").fillna("") != "ok").any()
        if row.status == "ok" and not bad_points:
            continue
        warmup = " (warm-up)" if str(getattr(row, "warmup", "")) == "True" else ""
        cause = failure_cause(getattr(row, "reason", None), run_points)
        lines.append(f"{row.host} / {row.model} / {row.environment} / {row.workload}, iteration {row.iteration}"
                     f"{warmup} [{row.run_id}]: {'ok but' if row.status == 'ok' else row.status}: {cause}")
    for missing in [*loaded.accounting.missing, *loaded.accounting.no_metrics]:
        words = "ok without any metric" if missing.kind == "no-metrics" else missing.kind
        lines.append(f"{missing.host or '?'} [{missing.run_id or missing.path}]: {words}: {_one_line(missing.detail)}")
    planned = loaded.accounting.planned if loaded.accounting.planned is not None else len(runs)
    ok = int((runs["status"] == "ok").sum()) if len(runs) else 0
    return planned, ok, lines


def run_status(campaign_dirs: list[str], playbook_rc: int) -> tuple[int, list[str]]:
    """The exit status of `sparkfleet run` (EXIT_STATUSES) and the lines naming each planned run that failed,
    from the playbook's status and the collected campaign directories: the playbook's own status when it failed,
    else EXIT_NONE_OK when no planned run is ok, EXIT_RUNS_FAILED when some failed, 0 when none did. A directory
    that is missing or cannot be read is named and counts for nothing."""
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError

    planned, ok, failures, notes = 0, 0, [], []
    for campaign_dir in campaign_dirs:
        if not Path(campaign_dir).is_dir():
            continue
        try:
            n_planned, n_ok, lines = failed_runs(campaign_dir)
        except (OSError, UsageError) as exc:
            notes.append(f"sparkfleet run: cannot read the runs of {campaign_dir}: {exc}")
            continue
        planned, ok, failures = planned + n_planned, ok + n_ok, failures + lines
    status = playbook_rc
    if not status and planned and not ok:
        status = EXIT_NONE_OK
    elif not status and failures:
        status = EXIT_RUNS_FAILED
    if not failures:
        return status, notes
    head = (f"{len(failures)} of {planned} planned run(s) failed" + ("; none succeeded" if planned and not ok else "")
            + ":")
    shown = [f"  {line}" for line in failures[:MAX_FAILED_LINES]]
    if len(failures) > MAX_FAILED_LINES:
        shown.append(f"  ... and {len(failures) - MAX_FAILED_LINES} more (`sparkfleet report DIR` names each)")
    return status, [*notes, head, *shown]


def already_done(events: list[dict]) -> list[str]:
    """From `run`'s progress events: one "N runs already done on HOST (dates); nothing measured" line per host
    when no host measured anything because every run it reported was already done (skipped), else []."""
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.reuse import (
        done_message,
        nothing_measured,
    )

    by_host: dict[str, dict[str, dict]] = {}
    for event in events:
        if event.get("event") == "run" and event.get("host") and event.get("run_id"):
            by_host.setdefault(str(event["host"]), {})[str(event["run_id"])] = event
    if not by_host or not all(nothing_measured(e.get("status") for e in runs.values()) for runs in by_host.values()):
        return []
    return [done_message(host, [e.get("finished_ts") for e in runs.values()]) for host, runs in sorted(by_host.items())]


#: Playbooks that stop what a cancelled run started on the hosts (its jobs, mounts, GPU state, lease): restore.yml
#: for the run's token, which leaves alone a host that another run holds. Those that change nothing need none.
STOPS_WITH_RESTORE = ("bench.yml", "playbooks/matrix.yml", "playbooks/reproducibility.yml")


def stops_with_restore(playbook: str) -> bool:
    from sparkfleet.runner import REPO

    return any((REPO / name).resolve() == Path(playbook).resolve() for name in STOPS_WITH_RESTORE)


def stop_hosts(request) -> list[str]:
    """After Ctrl-C or SIGTERM: run playbooks/restore.yml for the run's token (its jobs, servers, clients and
    containers stopped, the native rootfs unmounted, the GPU state restored, the host lease given back; the ledger
    keeps every finished run for a resume). Lines to print; where it could not finish, the command that does."""
    import shlex

    from sparkfleet.runner import RunRequest, run_playbook

    # request.extra_vars carry the run's token (sparkfleet_run_token): restore.yml acts where that run holds the host
    stop = RunRequest(inventory=request.inventory, playbook="playbooks/restore.yml", extra_vars=request.extra_vars,
                      env=request.env)
    inventory = ["-i", request.inventory] if request.inventory else []
    by_hand = shlex.join(["ansible-playbook", "playbooks/restore.yml", *inventory,
                          *[a for v in request.extra_vars for a in ("-e", v)]])
    print("sparkfleet run: interrupted: stopping what this run started on the hosts (its jobs, servers, clients and "
          "containers; mounts and GPU state undone); finished runs are kept for a resume. Ctrl-C again leaves them "
          "running.", file=sys.stderr, flush=True)
    outcome = run_playbook(stop, lambda events: None)
    if outcome.cancelled or outcome.rc != 0:
        why = "interrupted" if outcome.cancelled else f"failed (rc={outcome.rc})"
        return [f"sparkfleet run: the stop {why}: what this run started may still run on the hosts; stop it with: "
                f"{by_hand}", *[f"  {line}" for line in ([] if outcome.cancelled else outcome.stdout_tail[-8:])]]
    hosts = ", ".join(sorted(outcome.stats or {})) or "no host"
    return [f"sparkfleet run: stopped on {hosts}: nothing this run started still runs; `sparkfleet run` with the "
            "same arguments resumes (finished runs are kept)"]


def run(args) -> int:
    import uuid

    from sparkfleet.progress import Display, progress_event
    from sparkfleet.runner import RunRequest, parse_env, run_playbook, runner_kwargs

    extra_vars = list(args.extra_vars)
    if getattr(args, "fresh", False):
        extra_vars.append(json.dumps({"sparkfleet_fresh": True}))
    request = RunRequest(inventory=args.inventory, playbook=args.playbook, extra_vars=extra_vars,
                         env=parse_env(args.env))
    playbook = runner_kwargs(request, "/nonexistent")["playbook"]  # bad arguments fail (exit 2) before anything
    if stops_with_restore(playbook):  # the run's token names its host leases: a stop touches only what it started
        request.extra_vars.append(json.dumps({"sparkfleet_run_token": uuid.uuid4().hex}))
    display = Display(quiet=args.quiet)
    path = Path(args.json_events or os.devnull).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    seen: list[dict] = []  # the run events, for "nothing measured"
    with path.open("w", encoding="utf-8") as log:

        def feed(events: list[dict]) -> None:
            seen.extend(e for e in events if e.get("event") == "run")
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
    if outcome.cancelled:
        if stops_with_restore(playbook):
            for line in stop_hosts(request):
                print(line, file=sys.stderr)
        return rc
    if outcome.rc != 0:
        print(f"sparkfleet run: playbook {outcome.status} (rc={outcome.rc}); last lines of its output:",
              file=sys.stderr)
        for line in outcome.stdout_tail:
            print(f"  {line}", file=sys.stderr)
    if playbook_kind(playbook) is None:  # a playbook that measures nothing
        return rc
    status, lines = run_status(list(outcome.campaign_dirs), outcome.rc)
    idle = [] if outcome.rc else already_done(seen)
    if idle:
        status = EXIT_NOTHING_MEASURED
    for line in [*lines, *idle]:
        print(line)
    if status in (EXIT_RUNS_FAILED, EXIT_NONE_OK, EXIT_NOTHING_MEASURED):
        print(f"sparkfleet run: exit status {status}: {dict(EXIT_STATUSES)[status]}")
    return status or rc
