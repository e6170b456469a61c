"""Every planned run accounted for (issue 23): a report names the runs it has no usable record of.

A run directory without record.json, a planned run without a directory, a truncated record and an ok run
without metrics are each named, by the loader's accounting, in `sparkfleet report`'s text, JSON and files;
`report --out FILE` is a one-line error.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main
from sparkfleet.load import load_runs


def make_record(host: str, i: int, env: str = "native", **extra) -> dict:
    rec = {"schema_version": 1, "campaign": "c", "host": host, "model": "m", "environment": env,
           "environment_kind": "native" if env == "native" else "container", "workload": "w",
           "iteration": i, "order_index": i, "status": "ok", "exit_code": 0,
           "started_utc": f"2026-01-01T00:{i:02d}:00Z", "ended_utc": f"2026-01-01T00:{i:02d}:30Z",
           "metrics": {"output_tok_s": 100.0 + i % 3, "peak_memory_gib": 70.0},
           "metric_sources": {"peak_memory_gib": "log"}}
    rec.update(extra)
    rec["run_id"] = contract.run_id("c", host, "m", env, "w", i)
    return rec


def build_campaign(root: Path, hosts=("h1", "h2"), runs: int = 6) -> tuple[Path, dict[str, list[str]]]:
    """results/c with campaign.json planning ``runs`` runs per host, every run recorded and in the ledger."""
    campaign = root / "c"
    plan: dict[str, list[str]] = {}
    for host in hosts:
        ledger = []
        for i in range(1, runs + 1):
            rec = make_record(host, i, "native" if i % 2 else "container")
            plan.setdefault(host, []).append(rec["run_id"])
            contract.write_json_atomic(campaign / host / "runs" / rec["run_id"] / "record.json", rec)
            ledger += [{"event": "started", "run_id": rec["run_id"]},
                       {"event": "finished", "run_id": rec["run_id"], "status": "ok"}]
        (campaign / host / "ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ledger))
    (campaign / "campaign.json").write_text(json.dumps({
        "campaign": "c", "config_hash": "0" * 16,
        "hosts": {h: {"planned": len(ids), "run_ids": ids} for h, ids in plan.items()}}))
    return campaign, plan


def _report(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_a_complete_campaign_counts_every_planned_run(tmp_path: Path) -> None:
    campaign, _ = build_campaign(tmp_path)
    acc = load_runs(campaign).accounting
    assert (acc.planned, acc.records, acc.missing, acc.no_metrics) == (12, 12, [], [])
    assert acc.planned_hosts == {"c/h1": {"planned": 6, "with_record": 6, "missing": 0},
                                 "c/h2": {"planned": 6, "with_record": 6, "missing": 0}}
    assert "12 run(s) planned (campaign.json); 12 have a usable record; none missing" in acc.summary()


def test_every_kind_of_missing_run_is_named(tmp_path: Path) -> None:
    campaign, plan = build_campaign(tmp_path)
    h1 = campaign / "h1" / "runs"
    (h1 / plan["h1"][0] / "record.json").unlink()  # a run directory without its record
    (h1 / plan["h1"][1] / "record.json").write_text('{"schema_version": 1, "run_')  # truncated
    for name in (h1 / plan["h1"][2]).iterdir():  # a planned run without a directory
        name.unlink()
    (h1 / plan["h1"][2]).rmdir()
    bare = json.loads((h1 / plan["h1"][3] / "record.json").read_text())
    bare["metrics"] = {}  # ok, and no metric at all
    (h1 / plan["h1"][3] / "record.json").write_text(json.dumps(bare))
    (h1 / "stray-run").mkdir()  # a run directory nobody planned, without a record
    lines = (campaign / "h2" / "ledger.jsonl").read_text().splitlines()
    (campaign / "h2" / "ledger.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # h2's last run: started only
    (campaign / "h2" / "runs" / plan["h2"][-1] / "record.json").unlink()

    acc = load_runs(campaign).accounting
    by_id = {m.run_id: m for m in acc.missing}
    assert by_id[plan["h1"][0]].kind == "no-record" and "finished (ok)" in by_id[plan["h1"][0]].detail
    assert by_id[plan["h1"][1]].kind == "unreadable"
    assert by_id[plan["h1"][2]].kind == "not-run" and "no run directory" in by_id[plan["h1"][2]].detail
    assert by_id["stray-run"].kind == "no-record"
    assert "started and never finished" in by_id[plan["h2"][-1]].detail
    assert [m.run_id for m in acc.no_metrics] == [plan["h1"][3]]
    assert acc.planned == 12 and acc.records == 8
    assert acc.planned_hosts["c/h1"] == {"planned": 6, "with_record": 3, "missing": 3}

    code, out, err = _report(["report", str(campaign), "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["accounting"]["planned"] == 12 and data["accounting"]["missing_total"] == 5
    assert data["accounting"]["missing_by_kind"] == {"not-run": 1, "no-record": 3, "unreadable": 1}
    assert [m["run_id"] for m in data["accounting"]["ok_without_metrics"]] == [plan["h1"][3]]
    kinds = {w["kind"] for w in data["warnings"]}
    assert {"missing", "no-metrics", "skipped"} <= kinds
    for rid in (plan["h1"][0], plan["h1"][2], plan["h2"][-1]):
        assert rid in err  # named on stderr too
    summary = (campaign / "report" / "summary.md").read_text()
    assert "12 run(s) planned (campaign.json); 8 have a usable record; 5 missing" in summary
    assert plan["h1"][2] in summary


def test_an_unreachable_host_is_counted_as_planned_and_never_run(tmp_path: Path) -> None:
    campaign, plan = build_campaign(tmp_path, hosts=("h1",))
    doc = json.loads((campaign / "campaign.json").read_text())
    doc["hosts"]["gone"] = {"planned": 2, "run_ids": ["gone-1", "gone-2"]}
    (campaign / "campaign.json").write_text(json.dumps(doc))
    acc = load_runs(campaign).accounting
    assert [(m.kind, m.run_id) for m in acc.missing] == [("not-run", "gone-1"), ("not-run", "gone-2")]
    assert "no directory for host gone" in acc.missing[0].detail


def test_a_tree_without_any_usable_record_says_what_is_missing(tmp_path: Path) -> None:
    campaign, plan = build_campaign(tmp_path, hosts=("h1",), runs=2)
    for rid in plan["h1"]:
        (campaign / "h1" / "runs" / rid / "record.json").unlink()
    code, out, err = _report(["report", str(campaign)])
    assert code == 2 and "Traceback" not in err
    assert "2 run(s) planned (campaign.json); 0 have a usable record; 2 missing" in err


def test_kept_aside_attempts_are_not_missing_runs(tmp_path: Path) -> None:
    campaign, plan = build_campaign(tmp_path, hosts=("h1",), runs=2)
    (campaign / "h1" / "runs" / f"{plan['h1'][0]}.interrupted-1").mkdir()
    assert load_runs(campaign).accounting.missing == []


@pytest.mark.parametrize("make", ["file", "file-parent"])
def test_report_out_that_is_a_file_is_a_one_line_error(tmp_path: Path, make: str) -> None:
    campaign, _ = build_campaign(tmp_path, hosts=("h1",), runs=2)
    target = tmp_path / "out.txt"
    target.write_text("not a directory")
    out = target if make == "file" else target / "report"
    code, _, err = _report(["report", str(campaign), "--out", str(out)])
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "--out" in err and "not a directory" in err
    assert target.read_text() == "not a directory"
