"""The report's "Pair preflight" section (issue 36): each cluster's pair_preflight.json (rank 0's results directory)
as a table of its checks with one sentence of verdict and causes, in index.html and in --json; a malformed file is a
warning naming it and never stops the report."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main

PASSED = {"cluster": "pair", "nodes": ["spark1", "spark2"], "pass": True, "causes": [],
          "checks": [{"check": "mtu", "node": "spark1", "pass": True, "reason": "MTU >= 9000 on enp1s0f0np0",
                      "floor": "mtu_min=9000"},
                     {"check": "nccl_busbw", "node": "spark1", "pass": True,
                      "reason": "all-reduce bus bandwidth at >= 1 GiB 23.70 GB/s (floor 20.00)",
                      "floor": "nccl_busbw_gbs_min=20.0"}],
          "floors": {"mtu_min": 9000, "nccl_busbw_gbs_min": 20.0}}
DRIFT = "differ: nccl_version: spark3='2.27.7+cuda13.0', spark4='2.26.2+cuda12.9'"
FAILED = {"cluster": "duo", "nodes": ["spark3", "spark4"], "pass": False,
          "causes": [f"parity on spark3: {DRIFT}"],
          "checks": [{"check": "parity", "node": "spark3", "pass": False, "reason": DRIFT,
                      "floor": "equal on every node"},
                     # a file written before the floors were recorded
                     {"check": "subnets", "node": "spark4", "pass": True, "reason": "distinct subnets"}]}


def _record(iteration: int) -> dict:
    rec = {"schema_version": 1, "campaign": "study", "host": "spark1", "model": "qwen", "environment": "native",
           "environment_kind": "native", "workload": "T1", "workload_params": {"batch": 1}, "iteration": iteration,
           "order_index": iteration, "status": "ok", "exit_code": 0, "model_loaded": "qwen",
           "started_utc": f"2026-11-28T06:{iteration:02d}:00Z", "metrics": {"output_tok_s": 40.0 + iteration},
           "metric_sources": {}}
    rec["run_id"] = contract.run_id("study", "spark1", "qwen", "native", "T1", iteration)
    return rec


@pytest.fixture
def campaign(tmp_path: Path) -> Path:
    root = tmp_path / "study"
    for iteration in range(1, 4):
        rec = _record(iteration)
        contract.write_json_atomic(root / "spark1" / "runs" / rec["run_id"] / "record.json", rec)
    (root / "spark1" / "pair_preflight.json").write_text(json.dumps(PASSED))
    (root / "spark3").mkdir()
    (root / "spark3" / "pair_preflight.json").write_text(json.dumps(FAILED))
    return root


def _report_json(root: Path) -> dict:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["report", str(root), "--json"]) == 0
    return json.loads(buffer.getvalue())


def test_the_report_shows_each_cluster_s_checks_verdict_and_causes(campaign: Path) -> None:
    data = _report_json(campaign)
    html = (campaign / "report" / "index.html").read_text()
    assert "Pair preflight" in html
    assert "Cluster pair (spark1, spark2) passed the pair preflight" in html
    assert "Cluster duo (spark3, spark4) failed the pair preflight" in html
    assert "2.26.2+cuda12.9" in html and "nccl_busbw_gbs_min=20.0" in html  # a cause, a floor
    verdicts = {v["cluster"]: v for v in data["pair_preflight"]["verdicts"]}
    assert verdicts["pair"]["passed"] is True and verdicts["duo"]["passed"] is False
    assert verdicts["duo"]["causes"] == [f"parity on spark3: {DRIFT}"]
    assert verdicts["duo"]["path"] == "spark3/pair_preflight.json"
    assert data["pair_preflight"]["unreadable"] == []
    # the refused pair is a warning too, its cause among the details
    (warning,) = [w for w in data["warnings"] if w["kind"] == "pair-preflight"]
    assert "duo" in warning["message"] and warning["details"] == [f"parity on spark3: {DRIFT}"]


def test_a_checks_table_row_per_check_with_its_floor_or_a_dash(campaign: Path) -> None:
    from sparkfleet.report import pair

    study = pair.pair_study(campaign)
    frame = pair.checks_frame(next(v for v in study.verdicts if v.cluster == "duo"))
    assert frame.to_dict("records") == [
        {"check": "parity", "node": "spark3", "verdict": "fail", "reading": DRIFT, "floor": "equal on every node"},
        {"check": "subnets", "node": "spark4", "verdict": "pass", "reading": "distinct subnets", "floor": "-"}]


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", json.dumps({"cluster": "x", "pass": "yes"})])
def test_a_malformed_file_is_a_warning_naming_it_and_the_report_goes_on(campaign: Path, text: str) -> None:
    (campaign / "spark2").mkdir()
    (campaign / "spark2" / "pair_preflight.json").write_text(text)
    data = _report_json(campaign)
    assert data["pair_preflight"]["unreadable"] == ["spark2/pair_preflight.json"]
    assert len(data["pair_preflight"]["verdicts"]) == 2
    assert any(w["kind"] == "pair-preflight" and w["message"].startswith("spark2/pair_preflight.json: not a pair")
               for w in data["warnings"])
    assert "spark2/pair_preflight.json: not a pair preflight verdict" in (campaign / "report" / "index.html"
                                                                          ).read_text()


def test_no_pair_preflight_no_section(campaign: Path) -> None:
    for path in campaign.glob("*/pair_preflight.json"):
        path.unlink()
    data = _report_json(campaign)
    assert "pair_preflight" not in data
    assert "Pair preflight" not in (campaign / "report" / "index.html").read_text()
