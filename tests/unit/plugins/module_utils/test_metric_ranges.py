"""Every metric has a physical range (sparkfleet_host.contract.record.METRIC_RANGES); a value outside it is rejected,
named, and its run still counted (issue 23).

Once, -5 tok/s entered the statistics, 1.7e308 tok/s crashed the report with a traceback and wrote nothing, and
"NaN" as a string made the whole run disappear as a skipped file. Now, both where the host writes the record
(record.sealed / write_record, as bench_run does) and where the controller loads it (sparkfleet.load), the
metric is left out, the reason named in parse_warnings and in the report's warnings, and the run counted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main
from sparkfleet.load import load_runs

BAD_VALUES = {  # output_tok_s of one run each -> what the warning says
    -5.0: "is outside its physical range",
    1.7e308: "is outside its physical range",
    "NaN": "is not a number",
    "inf": "is not a number",
    "-Infinity": "is not a number",
}


def _record(iteration: int, environment: str, tok_s, **metrics) -> dict:
    rec = contract.new_record("c", "h1", "m", environment, "w", iteration).to_dict()
    rec.update(environment_kind=environment, order_index=iteration, status="ok",
               metrics={"output_tok_s": tok_s, "latency_ms_avg": 900.0 + iteration, **metrics})
    return rec


def _write_raw(root: Path, rec: dict, text: str | None = None) -> None:
    path = root / "h1" / "runs" / rec["run_id"] / "record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text is not None else json.dumps(rec))


def test_every_metric_has_a_physical_range() -> None:
    assert set(contract.METRIC_RANGES) == set(contract.METRICS)
    assert all(math.isfinite(low) and math.isfinite(high) and low < high
               for low, high in contract.METRIC_RANGES.values())


@pytest.mark.parametrize("value", [-5.0, -1e-9, 1.7e308, math.nan, math.inf, -math.inf, "12", True])
def test_the_contract_refuses_a_metric_outside_its_range(value) -> None:
    assert any("output_tok_s" in p for p in contract.validate(_record(1, "native", value)))
    assert contract.validate(_record(1, "native", 12.5)) == []


def test_the_host_writes_the_run_with_the_metric_left_out_and_named(tmp_path: Path) -> None:
    rec = contract.new_record("c", "h1", "m", "native", "w", 1)
    rec.status, rec.metrics = "ok", {"output_tok_s": -5.0, "latency_ms_avg": 1.7e308, "req_s": 2.0}
    data, problems = contract.write_record(tmp_path / "record.json", rec)
    assert problems == []  # not a contract break: the run is kept as it was
    written = json.loads((tmp_path / "record.json").read_text())
    assert written == data and written["status"] == "ok" and written["metrics"] == {"req_s": 2.0}
    notes = contract.rejected_metrics(written)
    assert len(notes) == 2 and "'output_tok_s': -5.0 is outside its physical range" in notes[0]
    assert "'latency_ms_avg': 1.7e+308 is outside" in notes[1]
    assert contract.validate(written) == []


def _bad_tree(root: Path) -> Path:
    """Native: 5 good runs and one per bad value; container: 5 good runs."""
    for i in range(1, 6):
        _write_raw(root, _record(i, "native", 100.0 + i % 3))
        _write_raw(root, _record(i, "container", 90.0 + i % 3))
    for i, value in enumerate(BAD_VALUES, start=10):
        _write_raw(root, _record(i, "native", value))
    nan = _record(20, "native", 0.0)  # JSON literals NaN and Infinity (Python's json writes and reads them)
    _write_raw(root, nan, json.dumps(nan).replace('"output_tok_s": 0.0', '"output_tok_s": NaN')
               .replace('"latency_ms_avg": 920.0', '"latency_ms_avg": Infinity'))
    return root


def test_the_loader_keeps_the_run_and_drops_only_the_metric(tmp_path: Path) -> None:
    loaded = load_runs(_bad_tree(tmp_path / "r"))
    assert loaded.problems == []  # nothing skipped
    runs = loaded.runs.set_index("iteration")
    native = runs[runs["environment"] == "native"]
    assert len(native) == 5 + len(BAD_VALUES) + 1  # every run counted
    bad = native.loc[native.index >= 10]
    assert bad["output_tok_s"].isna().all() and (bad["status"] == "ok").all()
    assert bad.loc[bad.index < 20, "latency_ms_avg"].notna().all()  # the run's other figures kept
    assert math.isnan(bad.loc[20, "latency_ms_avg"])
    for i, (value, why) in enumerate(BAD_VALUES.items(), start=10):
        assert f"'output_tok_s': {value!r} {why}" in bad.loc[i, "rejected_metrics"]
    assert native["output_tok_s"].dropna().between(100, 103).all()


def test_the_report_names_each_rejection_and_writes_its_files(tmp_path: Path, capsys) -> None:
    root = _bad_tree(tmp_path / "r")
    assert main(["report", str(root), "--json"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    out = json.loads(captured.out)
    assert out["runs"]["total"] == 10 + len(BAD_VALUES) + 1 and out["skipped"] == []
    warnings = [w["message"] for w in out["warnings"] if w["kind"] == "rejected-metric"]
    assert len(warnings) == len(BAD_VALUES) + 1
    for i, value in enumerate(BAD_VALUES, start=10):
        rid = contract.run_id("c", "h1", "m", "native", "w", i)
        assert any(rid in w and f"{value!r}" in w for w in warnings), (rid, warnings)
    cell = next(c for c in out["cells"] if c["environment"] == "native" and c["metric"] == "output_tok_s")
    assert cell["n"] == 5 and 100 <= cell["mean"] <= 103  # only the physical values in the statistics
    assert (root / "report" / "summary.md").exists() and (root / "report" / "index.html").exists()
    assert "rejected metric 'output_tok_s': -5.0" in (root / "report" / "summary.md").read_text()
