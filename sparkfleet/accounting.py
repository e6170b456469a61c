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
  named so that they can be deleted;
* a serving run's points (issue 32): a point of the workload's profile (``workload_params.profile``, else the
  points the other runs of the workload hold) that an ok run's record lacks, and a figure an ok point lacks
  (null, NaN, negative) though the other iterations of its cell have it at that point: each would take its point
  cell down an iteration without a word.

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

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import ledger as ledger_mod
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import RECORD_NAME
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.serving import profile_points
from sparkfleet import serving as serving_points

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


@dataclass(frozen=True)
class MissingPoint:
    """A serving point an ok run's record lacks (``metric`` None), or one figure an ok point lacks: null or absent
    (``value`` None), or a number that cannot be a figure (``value``: NaN, infinite, negative, as recorded)."""

    run_id: str
    point: str
    metric: str | None = None
    host: str | None = None
    campaign: str | None = None
    iteration: int | None = None
    value: str | None = None

    def __str__(self) -> str:
        run = f"run {self.run_id} ({self.host}, iteration {self.iteration})"
        if self.metric is None:
            return f"{run}: point {self.point} missing"
        figure = f"{serving_points.WORDS.get(self.metric, self.metric)} ({self.metric})"
        if self.value is None:
            return f"{run}: {figure} missing (null or absent) at {self.point}"
        return f"{run}: {figure} is {self.value} at {self.point}, not a figure"

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "point": self.point, "metric": self.metric, "host": self.host,
                "campaign": self.campaign, "iteration": self.iteration, "value": self.value}


#: Missing points named one by one in the summary sentence (all in to_dict and the report's warnings).
SUMMARY_POINTS = 3


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
    missing_points: list[MissingPoint] = field(default_factory=list)  # serving points / figures of ok runs

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
                "staging_leftovers": [str(p) for p in self.leftovers], "notes": list(self.notes),
                "missing_points": [m.as_dict() for m in self.missing_points]}

    def points_summary(self) -> str:
        """"2 serving point(s) and 1 figure missing in ok runs (run X: point d4096.c2 missing; ...)"; "" for none."""
        if not self.missing_points:
            return ""
        points = sum(m.metric is None for m in self.missing_points)
        figures = len(self.missing_points) - points
        parts = [f"{points} serving point(s)" if points else "", f"{figures} serving figure(s)" if figures else ""]
        named = "; ".join(str(m) for m in self.missing_points[:SUMMARY_POINTS])
        more = f"; and {len(self.missing_points) - SUMMARY_POINTS} more" \
            if len(self.missing_points) > SUMMARY_POINTS else ""
        return (f"{' and '.join(p for p in parts if p)} missing in ok runs, so their point cells count an iteration "
                f"less ({named}{more})")

    def summary(self) -> str:
        """One sentence: planned, with a record, missing by kind, ok runs without metrics, leftovers."""
        counts = {k: n for k, n in self.counts().items() if n}
        missing = ", ".join(f"{n} {_KIND_WORDS[k]}" for k, n in counts.items())
        if self.planned is None:
            text = (f"No campaign.json found: the planned runs cannot be counted; {self.records} run(s) have a "
                    "usable record")
        else:
            text = f"{self.planned} run(s) planned (campaign.json); {self.records} have a usable record"
        text += f"; {len(self.missing)} missing ({missing})" if self.missing else \
            ("" if self.missing_points else "; none missing")
        if self.missing_points:
            text += "; " + self.points_summary()
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


def _profile_names(value: Any) -> set[str]:
    """The point names a workload's profile crosses (``workload_params.profile``, a mapping or its JSON text);
    an empty set for none or a malformed one."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return set()
    if not isinstance(value, dict):
        return set()
    try:
        return {p["point"] for p in profile_points({"profile": value})}
    except (ValueError, TypeError):
        return set()


_CELL = ["campaign", "host", "model", "environment", "workload"]


def _recorded(text: Any) -> dict[str, str]:
    """The points table's ``bad_figures`` (JSON {metric: "value"}, where a loader records them); {} otherwise."""
    try:
        values = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in values.items()} if isinstance(values, dict) else {}


def missing_serving_points(runs: pd.DataFrame, points: pd.DataFrame) -> list[MissingPoint]:
    """Per ok serving run (not a warm-up): each point its workload expects that the record lacks, and each figure
    (sparkfleet.serving.SERVING_METRICS) an ok point lacks though another iteration of the same cell has it at
    that point. A workload expects the points of its profile (``workload_params.profile``) and every point any
    of its runs holds. Points that failed are not here: the report's Serving section names them."""
    if points.empty:
        return []
    keyed = points.assign(**{k: points[k].astype("string").fillna("") for k in _CELL},
                          point=points["point"].astype("string"))
    warmup = keyed["warmup"].fillna(False).astype(bool)
    ok = keyed[(keyed["status"] == "ok") & ~warmup]
    if ok.empty:
        return []
    expected: dict[tuple[str, str], set[str]] = {}
    for key, names in keyed[~warmup].groupby(["campaign", "workload"])["point"]:  # a warm-up may run fewer
        expected[key] = set(names.dropna())
    if "workload_profile" in runs:
        profiled = runs[runs["run_id"].astype(str).isin(set(ok["run_id"].astype(str)))]
        for campaign, workload, profile in zip(profiled["campaign"].astype("string").fillna(""),
                                               profiled["workload"].astype("string").fillna(""),
                                               profiled["workload_profile"], strict=True):
            expected.setdefault((campaign, workload), set()).update(_profile_names(profile))
    out: list[MissingPoint] = []
    for (run_id, campaign, workload), rows in ok.groupby(["run_id", "campaign", "workload"], sort=True):
        first = rows.iloc[0]
        iteration = None if pd.isna(first["iteration"]) else int(first["iteration"])
        for name in sorted(expected.get((campaign, workload), set()) - set(rows["point"].dropna())):
            out.append(MissingPoint(str(run_id), name, None, str(first["host"]), campaign, iteration))
    measured = ok[ok["point_status"] == serving_points.POINT_OK]
    metrics = [m for m in serving_points.SERVING_METRICS if m in measured]
    if not measured.empty and metrics:
        # a figure is expected at a point where another iteration of the same cell has it
        held = measured[metrics].notna()
        others = held.groupby([measured[k] for k in [*_CELL, "point"]]).transform("sum").sub(held.astype(int))
        lacking = ~held & others.gt(0)
        for index, metric in zip(*lacking.to_numpy().nonzero(), strict=True):
            row = measured.iloc[index]
            bad = _recorded(row.get("bad_figures"))  # a number that is no figure (NaN, negative), as recorded
            out.append(MissingPoint(str(row["run_id"]), str(row["point"]), metrics[metric], str(row["host"]),
                                    str(row["campaign"]), None if pd.isna(row["iteration"]) else int(row["iteration"]),
                                    bad.get(metrics[metric])))
    return sorted(out, key=lambda m: (m.campaign or "", m.run_id, m.point, m.metric or ""))


def account(root: Path, runs: pd.DataFrame, problem_paths: Iterable[tuple[Path, str]],
            no_record: Iterable[str], plans: Iterable[str], staging: Iterable[str],
            serving_ids: set[str] | None = None, serving: pd.DataFrame | None = None) -> Accounting:
    """The accounting of one loaded tree. ``runs``: the loaded (deduplicated) runs; ``problem_paths``:
    (record path, reason) of every record skipped; ``no_record``: candidate record paths that did not exist;
    ``plans``: campaign.json paths found; ``staging``: staging directories found (and not read);
    ``serving_ids``: the runs whose record has a serving section (their figures are their points'; by default
    those of ``serving``); ``serving``: the serving points table (sparkfleet.serving), whose missing points and
    figures are named (:func:`missing_serving_points`)."""
    if serving_ids is None and serving is not None and len(serving):
        serving_ids = set(serving["run_id"].astype(str))
    root = Path(root)
    acc = Accounting(records=len(runs), leftovers=sorted(Path(p) for p in staging))
    loaded_ids = set(runs["run_id"].astype(str)) if len(runs) else set()
    problems = {Path(p).parent: reason for p, reason in problem_paths if Path(p).name == RECORD_NAME}
    empty_dirs = {Path(p).parent for p in no_record}
    named: set[Path] = set()
    ledgers: dict[Path, dict[str, dict[str, Any]]] = {}

    def states(host_dir: Path) -> dict[str, dict[str, Any]]:
        if host_dir not in ledgers:
            ledgers[host_dir] = ledger_mod.last_by_run(ledger_mod.read_events(str(host_dir / ledger_mod.LEDGER_NAME)),
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
        is_serving = runs["run_id"].astype(str).isin(serving_ids or set())
        bare = runs[(runs["status"] == "ok") & runs[metrics].isna().all(axis=1) & ~is_serving]
        acc.no_metrics = [MissingRun("no-metrics", root / str(d), "status ok but the record holds no metric",
                                     str(r), str(h), str(c))
                          for r, h, c, d in zip(bare["run_id"], bare["host"], bare["campaign"], bare["record_dir"],
                                                strict=True)]
    acc.missing.sort(key=lambda m: (KINDS.index(m.kind), str(m.path)))
    if serving is not None and len(runs):
        acc.missing_points = missing_serving_points(runs, serving)
    return acc
