"""Property test over results trees (issue 23): whatever happens to a campaign's results tree (records deleted
or truncated, run directories deleted or duplicated, foreign files, leftover unpack staging directories, a lost
ledger), loading it never raises, and every planned run is either loaded or named as missing; every record file
on disk is either loaded or named as skipped; `sparkfleet report` exits 0 or 2, never with a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.unpack import STAGING_PREFIXES
from sparkfleet.cli import main
from sparkfleet.load import load_runs

HOSTS = ("h1", "h2")
RUNS = 5  # per host


def _record(host: str, i: int) -> dict:
    env = "native" if i % 2 else "container"
    return {"schema_version": 1, "run_id": contract.run_id("c", host, "m", env, "w", i), "campaign": "c",
            "host": host, "model": "m", "environment": env,
            "environment_kind": env, "workload": "w", "iteration": i, "order_index": i, "status": "ok",
            "exit_code": 0, "started_utc": f"2026-01-01T00:{i:02d}:00Z", "ended_utc": f"2026-01-01T00:{i:02d}:30Z",
            "metrics": {"output_tok_s": 100.0 + i, "peak_memory_gib": 70.0 + i / 10},
            "metric_sources": {"peak_memory_gib": "log"}}


def build(root: Path) -> tuple[Path, dict[str, list[str]]]:
    campaign = root / "c"
    plan: dict[str, list[str]] = {}
    for host in HOSTS:
        ledger = ""
        for i in range(1, RUNS + 1):
            rec = _record(host, i)
            run = campaign / host / "runs" / rec["run_id"]
            run.mkdir(parents=True)
            (run / "record.json").write_text(json.dumps(rec))
            (run / "bench.log").write_text("log\n")
            plan.setdefault(host, []).append(rec["run_id"])
            ledger += json.dumps({"event": "started", "run_id": rec["run_id"]}) + "\n"
            ledger += json.dumps({"event": "finished", "run_id": rec["run_id"], "status": "ok"}) + "\n"
        (campaign / host / "ledger.jsonl").write_text(ledger)
        (campaign / host / "host.json").write_text("{}")
    (campaign / "campaign.json").write_text(json.dumps(
        {"campaign": "c", "config_hash": "0" * 16,
         "hosts": {h: {"planned": len(ids), "run_ids": ids} for h, ids in plan.items()}}))
    return campaign, plan


RUN = st.tuples(st.sampled_from(HOSTS), st.integers(0, RUNS - 1))
OPS = st.one_of(
    st.tuples(st.just("delete-record"), RUN),
    st.tuples(st.just("delete-run"), RUN),
    st.tuples(st.just("truncate"), RUN, st.floats(0, 0.99)),
    st.tuples(st.just("no-metrics"), RUN),
    st.tuples(st.just("duplicate-same-host"), RUN, st.sampled_from(["copy", "x.interrupted-1", "bak"])),
    st.tuples(st.just("duplicate-other-host"), RUN),
    st.tuples(st.just("foreign"), st.sampled_from(["c/notes.txt", "c/h1/runs/README", "c/h2/runs/x/data.bin",
                                                   "c/stray/record.json", "c/h1/runs/ghost/record.json",
                                                   "c/h1/record.json", "c/h2/telemetry.csv"]), st.binary(max_size=40)),
    st.tuples(st.just("staging"), RUN, st.sampled_from(STAGING_PREFIXES)),
    st.tuples(st.just("lose-ledger"), st.sampled_from(HOSTS)),
    st.tuples(st.just("lose-host"), st.sampled_from(HOSTS)),
    st.tuples(st.just("empty-run-dir"), st.sampled_from(["h1", "h2"]), st.text("abcxyz0123.-", min_size=1,
                                                                              max_size=8)),
)


def apply(campaign: Path, plan: dict[str, list[str]], op: tuple) -> None:
    kind = op[0]
    if kind in ("delete-record", "delete-run", "truncate", "no-metrics", "duplicate-same-host",
                "duplicate-other-host", "staging"):
        host, k = op[1]
        run = campaign / host / "runs" / plan[host][k]
        rec = run / "record.json"
        if not rec.is_file():
            return
        if kind == "delete-record":
            rec.unlink()
        elif kind == "delete-run":
            shutil.rmtree(run)
        elif kind == "truncate":
            data = rec.read_bytes()
            rec.write_bytes(data[:int(len(data) * op[2])])
        elif kind == "no-metrics":
            try:
                data = json.loads(rec.read_text())
            except ValueError:
                return
            data["metrics"] = {}
            rec.write_text(json.dumps(data))
        elif kind == "duplicate-same-host":
            target = run.parent / f"{run.name}.{op[2]}"
            if not target.exists():
                shutil.copytree(run, target)
        elif kind == "duplicate-other-host":
            other = next(h for h in HOSTS if h != host)
            target = campaign / other / "runs" / run.name
            if not target.exists():
                shutil.copytree(run, target)
        else:
            target = campaign / host / f"{op[2]}99999999-x" / "new" / "runs" / run.name
            if not target.exists():
                shutil.copytree(run, target)
    elif kind == "foreign":
        path = campaign.parent / op[1]
        if path.exists() and path.is_dir():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(op[2])
    elif kind == "lose-ledger":
        (campaign / op[1] / "ledger.jsonl").unlink(missing_ok=True)
    elif kind == "lose-host":
        shutil.rmtree(campaign / op[1], ignore_errors=True)
    elif kind == "empty-run-dir":
        (campaign / op[1] / "runs" / op[2]).mkdir(parents=True, exist_ok=True)


def _inside_staging(path: Path, root: Path) -> bool:
    return any(part.startswith(STAGING_PREFIXES) for part in path.relative_to(root).parts)


def check_accounted(campaign: Path, plan: dict[str, list[str]]) -> None:
    loaded = load_runs(campaign)  # never raises
    acc = loaded.accounting
    runs = loaded.runs
    loaded_ids = set(runs["run_id"])
    missing_ids = {m.run_id for m in acc.missing}
    planned = [rid for ids in plan.values() for rid in ids]
    # every planned run: loaded, or named as missing, exactly once
    assert acc.planned == len(planned)
    for rid in planned:
        assert (rid in loaded_ids) != (rid in missing_ids), rid
    for key, counts in acc.planned_hosts.items():
        assert counts["with_record"] + counts["missing"] == counts["planned"], key
    assert sum(c["planned"] for c in acc.planned_hosts.values()) == len(planned)
    # every record file on disk outside staging: loaded or named as skipped (a duplicate included)
    loaded_dirs = {campaign / d for d in runs["record_dir"]}
    skipped = {p.path for p in loaded.problems}
    for rec in campaign.rglob("record.json"):
        if _inside_staging(rec, campaign):
            continue
        assert rec.parent in loaded_dirs or rec in skipped, rec
    assert not any(_inside_staging(d, campaign) for d in loaded_dirs)  # staging never counted
    # every run directory without a record (other than a kept-aside attempt): named
    for runs_dir in campaign.glob("*/runs"):
        for run in runs_dir.iterdir():
            if run.is_dir() and not (run / "record.json").exists() and ".interrupted-" not in run.name:
                assert run in {m.path for m in acc.missing} or any(n.startswith(f"{run}: ") for n in acc.notes), run
    # every staging directory: named as a leftover
    staged = {p for p in campaign.glob("*/*") if p.name.startswith(STAGING_PREFIXES)}
    assert staged == set(acc.leftovers)
    # every ok run without a metric: named
    metrics = [c for c in contract.METRICS if c in runs.columns]
    bare = set(runs.loc[(runs["status"] == "ok") & runs[metrics].isna().all(axis=1), "run_id"])
    assert bare == {m.run_id for m in acc.no_metrics}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(st.lists(OPS, max_size=8))
def test_every_planned_run_is_loaded_or_named_whatever_happens_to_the_tree(tmp_path_factory, ops):
    campaign, plan = build(tmp_path_factory.mktemp("tree"))
    for op in ops:
        apply(campaign, plan, op)
    check_accounted(campaign, plan)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=6))
def test_the_report_counts_every_planned_run_or_names_what_is_missing(tmp_path_factory, ops):
    campaign, plan = build(tmp_path_factory.mktemp("tree"))
    for op in ops:
        apply(campaign, plan, op)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", str(campaign), "--json", "--resamples", "100"])
    assert "Traceback" not in err.getvalue()
    planned = [rid for ids in plan.values() for rid in ids]
    if code == 2:  # nothing usable at all: the one line says how many runs were planned and are missing
        assert f"{len(planned)} run(s) planned (campaign.json); 0 have a usable record" in err.getvalue()
        return
    assert code == 0, err.getvalue()
    data = json.loads(out.getvalue())
    acc = data["accounting"]
    assert acc["planned"] == len(planned)
    named = {m["run_id"] for m in acc["missing"]}
    counted = acc["records"]
    assert counted == data["runs"]["total"]
    in_report = _report_run_ids(campaign)
    for rid in planned:  # in the report's runs, or named as missing: one of the two
        assert (rid in named) != (rid in in_report), rid


def _report_run_ids(campaign: Path) -> set[str]:
    import pandas as pd

    return set(pd.read_parquet(campaign / "report" / "runs.parquet")["run_id"])
