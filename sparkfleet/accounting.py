"""Every planned run accounted for: what a results tree should hold (``campaign.json``, the ledgers) against
what it holds (the loaded records), naming every run that has no usable record and why.

A report counts the runs it has; this says which runs it does not have, so nothing disappears without a
word (issue 23):

* ``no-record``: a run directory without ``record.json`` (the ledger says whether the run was interrupted,
  is still going, or finished and lost its record);
* ``not-run``: a planned run (campaign.json) with no run directory at all (never started, a host that was
  not reachable, a collect that did not finish);
* ``unreadable``: a record that is not JSON, truncated, or breaks the contract (also listed as skipped);
* ``no-metrics``: a run whose status is ``ok`` but whose record holds no metric at all;
* leftover unpack staging directories (``plugin_utils.unpack.STAGING_PREFIXES``): never read as results,
  named so that they can be deleted.

A run directory named ``<run_id>.interrupted-N`` is an earlier attempt a resume kept aside (DESIGN.md):
not a run of its own, never counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import ledger as ledger_mod
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import record as contract

RECORD_NAME = "record.json"
LEDGER_NAME = "ledger.jsonl"
#: An earlier attempt kept aside by a resume (run_record.Recorder.move_aside): not a run of its own.
_ASIDE = re.compile(r"\.(interrupted|retried)-\d+$")
#: Kinds of missing runs, in the order a report lists them.
KINDS = ("not-run", "no-record", "unreadable")
_KIND_WORDS = {"not-run": "never run or not collected", "no-record": "without a record",
               "unreadable": "with an unreadable record"}


@dataclass(frozen=True)
class MissingRun:
    """A run the tree should hold a usable record of, and does not (or an ok run without metrics)."""

    kind: str
    path: Path
    detail: str
    run_id: str | None = None
    host: str | None = None
    campaign: str | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "detail": self.detail, "run_id": self.run_id,
                "host": self.host, "campaign": self.campaign}


@dataclass
class Accounting:
    """``planned``: runs the campaign.json files found plan (None: no plan found). ``planned_hosts``:
    ``campaign/host`` -> {planned, with_record, missing}."""

    planned: int | None = None
    records: int = 0
    planned_hosts: dict[str, dict[str, int]] = field(default_factory=dict)
    missing: list[MissingRun] = field(default_factory=list)
    no_metrics: list[MissingRun] = field(default_factory=list)
    leftovers: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for item in self.missing:
            out[item.kind] = out.get(item.kind, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"planned": self.planned, "records": self.records, "missing_total": len(self.missing),
                "missing_by_kind": self.counts(), "hosts": self.planned_hosts,
                "missing": [m.as_dict() for m in self.missing],
                "ok_without_metrics": [m.as_dict() for m in self.no_metrics],
                "staging_leftovers": [str(p) for p in self.leftovers], "notes": list(self.notes)}

    def summary(self) -> str:
        """One sentence: planned, with a record, missing by kind, ok runs without metrics, leftovers."""
        counts = {k: n for k, n in self.counts().items() if n}
        missing = ", ".join(f"{n} {_KIND_WORDS[k]}" for k, n in counts.items())
        if self.planned is None:
            text = (f"No campaign.json found: the planned runs cannot be counted; {self.records} run(s) have a "
                    "usable record")
        else:
            text = f"{self.planned} run(s) planned (campaign.json); {self.records} have a usable record"
        text += f"; {len(self.missing)} missing ({missing})" if self.missing else "; none missing"
        if self.no_metrics:
            text += f"; {len(self.no_metrics)} ok run(s) without any metric"
        if self.leftovers:
            text += (f"; {len(self.leftovers)} leftover unpack staging director"
                     f"{'y' if len(self.leftovers) == 1 else 'ies'} ignored")
        return text + "."


def _ledger_word(state: dict[str, Any] | None) -> str:
    if not state:
        return "the ledger has no event of it"
    if state.get("event") == "finished":
        return f"the ledger says it finished ({state.get('status') or 'no status'})"
    return "the ledger says it started and never finished (interrupted, or still running)"


def _read_plan(path: Path) -> tuple[dict[str, list[str]] | None, str | None]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, f"{path}: unreadable campaign.json ({str(exc).splitlines()[0] if str(exc) else exc!r}); " \
                     "its planned runs cannot be counted"
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, dict):
        return None, None  # an imported study's campaign.json: no plan to count against
    plan: dict[str, list[str]] = {}
    for host, info in hosts.items():
        ids = info.get("run_ids") if isinstance(info, dict) else None
        if isinstance(host, str) and isinstance(ids, list):
            plan[host] = [r for r in dict.fromkeys(ids) if isinstance(r, str)]
    return plan, None


def account(root: Path, runs: pd.DataFrame, problem_paths: Iterable[tuple[Path, str]],
            no_record: Iterable[str], plans: Iterable[str], staging: Iterable[str],
            serving_ids: set[str] | None = None) -> Accounting:
    """The accounting of one loaded tree. ``runs``: the loaded (deduplicated) runs; ``problem_paths``:
    (record path, reason) of every record skipped; ``no_record``: candidate record paths that did not exist;
    ``plans``: campaign.json paths found; ``staging``: staging directories found (and not read);
    ``serving_ids``: the runs whose record has a serving section (their figures are their points')."""
    root = Path(root)
    acc = Accounting(records=len(runs), leftovers=sorted(Path(p) for p in staging))
    loaded_ids = set(runs["run_id"].astype(str)) if len(runs) else set()
    problems = {Path(p).parent: reason for p, reason in problem_paths if Path(p).name == RECORD_NAME}
    empty_dirs = {Path(p).parent for p in no_record}
    named: set[Path] = set()
    ledgers: dict[Path, dict[str, dict[str, Any]]] = {}

    def states(host_dir: Path) -> dict[str, dict[str, Any]]:
        if host_dir not in ledgers:
            ledgers[host_dir] = ledger_mod.last_by_run(ledger_mod.read_events(str(host_dir / LEDGER_NAME)),
                                                       ("started", "finished"))
        return ledgers[host_dir]

    planned_total = None
    for plan_path in sorted(Path(p) for p in plans):
        plan, note = _read_plan(plan_path)
        if note:
            acc.notes.append(note)
        if plan is None:
            continue
        planned_total = (planned_total or 0) + sum(len(ids) for ids in plan.values())
        cdir = plan_path.parent
        for host, ids in sorted(plan.items()):
            host_dir = cdir / host
            lost = 0
            for rid in ids:
                if rid in loaded_ids:
                    continue
                run_dir = host_dir / "runs" / rid
                lost += 1
                named.add(run_dir)
                if run_dir in problems:
                    acc.missing.append(MissingRun("unreadable", run_dir / RECORD_NAME, problems[run_dir], rid, host,
                                                  cdir.name))
                elif run_dir in empty_dirs:
                    acc.missing.append(MissingRun("no-record", run_dir, "run directory without record.json; "
                                                  + _ledger_word(states(host_dir).get(rid)), rid, host, cdir.name))
                else:
                    state = states(host_dir).get(rid) if host_dir.is_dir() else None
                    where = "no run directory" if host_dir.is_dir() else f"no directory for host {host}"
                    acc.missing.append(MissingRun("not-run", run_dir, f"planned run with {where}; "
                                                  + _ledger_word(state), rid, host, cdir.name))
            acc.planned_hosts[f"{cdir.name}/{host}"] = {"planned": len(ids), "with_record": len(ids) - lost,
                                                        "missing": lost}
    acc.planned = planned_total
    for run_dir in sorted(empty_dirs - named):  # run directories outside any plan (or without one)
        if _ASIDE.search(run_dir.name):
            continue
        if run_dir.name in loaded_ids:  # the run is counted, from a record in another directory
            acc.notes.append(f"{run_dir}: run directory without record.json; run {run_dir.name} was loaded from "
                             "a record in another directory")
            continue
        host_dir = run_dir.parent.parent
        acc.missing.append(MissingRun("no-record", run_dir, "run directory without record.json; "
                                      + _ledger_word(states(host_dir).get(run_dir.name)), run_dir.name,
                                      host_dir.name, host_dir.parent.name))
    # an unreadable record outside any plan: already skipped; named here too so that the count is whole
    for run_dir, reason in sorted(problems.items()):
        if run_dir not in named and run_dir.parent.name == "runs" and run_dir.name not in loaded_ids:
            acc.missing.append(MissingRun("unreadable", run_dir / RECORD_NAME, reason, run_dir.name,
                                          run_dir.parent.parent.name, run_dir.parent.parent.parent.name))
    if len(runs):
        metrics = [c for c in contract.METRICS if c in runs.columns]
        # a serving run's figures are its points' (the serving table), not the run's flat metrics
        serving = runs["run_id"].astype(str).isin(serving_ids or set())
        bare = runs[(runs["status"] == "ok") & runs[metrics].isna().all(axis=1) & ~serving]
        acc.no_metrics = [MissingRun("no-metrics", root / str(d), "status ok but the record holds no metric",
                                     str(r), str(h), str(c))
                          for r, h, c, d in zip(bare["run_id"], bare["host"], bare["campaign"], bare["record_dir"],
                                                strict=True)]
    acc.missing.sort(key=lambda m: (KINDS.index(m.kind), str(m.path)))
    return acc
