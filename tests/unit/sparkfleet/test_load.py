"""Loading run records: one tidy row per run, bad records reported by path and skipped."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.load import export_runs, load_runs


def make_record(host: str = "h1", model: str = "m", environment: str = "native", workload: str = "w",
                iteration: int = 1, **overrides: Any) -> dict[str, Any]:
    rec = {
        "schema_version": 1, "campaign": "c", "host": host, "model": model, "environment": environment,
        "environment_kind": "native" if environment == "native" else "container", "workload": workload,
        "iteration": iteration, "order_index": iteration, "status": "ok", "exit_code": 0,
        "started_utc": "2025-11-09T02:26:26Z",
        "workload_params": {"batch": 8, "input_len": 128},
        "metrics": {"output_tok_s": 100.0 + iteration, "peak_memory_gib": 70.0, "kv_cache_gib": 44.6,
                    "device_total_gib": 119.64},
        "metric_sources": {"peak_memory_gib": "log", "kv_cache_gib": "log", "device_total_gib": "nvml"},
        "telemetry": {"gpu_temp_max_c": 61.0}, "versions": {"tensorrt_llm": "1.1.0"},
    }
    rec.update(overrides)
    rec["run_id"] = overrides.get("run_id") or contract.run_id(
        rec["campaign"], host, model, environment, workload, iteration)
    return rec


def write(root: Path, rec: dict[str, Any] | str, name: str | None = None) -> Path:
    run = name or (rec["run_id"] if isinstance(rec, dict) else "x")
    host = rec["host"] if isinstance(rec, dict) else "h1"
    path = root / host / "runs" / run / "record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rec if isinstance(rec, str) else json.dumps(rec))
    return path


def test_one_row_per_run_with_metric_columns(tmp_path: Path) -> None:
    for i in range(1, 4):
        write(tmp_path, make_record(iteration=i))
    write(tmp_path, make_record(environment="container", iteration=1))
    result = load_runs(tmp_path)
    runs = result.runs
    assert result.problems == []
    assert len(runs) == 4
    for column in contract.METRICS:  # every DESIGN metric name is a column, missing ones NaN
        assert column in runs.columns
    assert runs["output_tok_s"].dtype == "float64"
    assert sorted(runs["output_tok_s"]) == [101.0, 101.0, 102.0, 103.0]
    assert runs["total_tok_s"].isna().all()
    assert set(runs["workload_batch"]) == {8}
    assert set(runs["source_peak_memory_gib"]) == {"log"}
    assert set(runs["telemetry_gpu_temp_max_c"]) == {61.0}
    assert set(runs["version_tensorrt_llm"]) == {"1.1.0"}
    assert str(runs["started_utc"].dtype) .startswith("datetime64")
    assert runs["record_dir"].str.endswith(tuple(runs["run_id"])).all()


def test_bad_records_are_reported_by_path_and_skipped(tmp_path: Path) -> None:
    good = write(tmp_path, make_record())
    not_json = write(tmp_path, "{not json", name="broken")
    missing = make_record(iteration=2)
    del missing["metrics"]
    missing_path = write(tmp_path, missing)
    bad_status = write(tmp_path, make_record(iteration=3, status="great"))
    wrong_id = write(tmp_path, make_record(iteration=4, run_id="forged"), name="forged")
    array = write(tmp_path, "[1, 2]", name="array")
    duplicate = write(tmp_path, make_record(), name="zz-copy-of-first")  # sorted after the original
    report_dir = tmp_path / "report" / "record.json"  # the report's own folder is never scanned
    report_dir.parent.mkdir()
    report_dir.write_text("{}")

    result = load_runs(tmp_path)
    assert list(result.runs["run_id"]) == [make_record()["run_id"]]
    reasons = {p.path: p.reason for p in result.problems}
    assert set(reasons) == {not_json, missing_path, bad_status, wrong_id, array, duplicate}
    assert "not readable JSON" in reasons[not_json]
    assert "missing field 'metrics'" in reasons[missing_path]
    assert "status 'great'" in reasons[bad_status]
    assert "does not match" in reasons[wrong_id]
    assert "duplicate run_id" in reasons[duplicate]
    assert good not in reasons


def test_a_fifo_or_a_huge_file_named_record_json_is_a_problem_not_a_hang(tmp_path: Path) -> None:
    import os  # noqa: PLC0415

    good = write(tmp_path, make_record())
    fifo = tmp_path / "runs" / "fifo-run" / "record.json"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)  # nobody ever writes to it: opening it blocking would wait forever
    huge = tmp_path / "runs" / "huge-run" / "record.json"
    huge.parent.mkdir(parents=True)
    with huge.open("wb") as fh:
        fh.truncate(17 * 1024 * 1024)  # sparse: larger than any record
    result = load_runs(tmp_path)
    assert list(result.runs["run_id"]) == [make_record()["run_id"]]
    reasons = {p.path: p.reason for p in result.problems}
    assert "not a regular file" in reasons[fifo] and "more than a record's" in reasons[huge]
    assert good not in reasons


def test_missing_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_runs(tmp_path / "nope")


def test_export_csv_and_parquet_round_trip(tmp_path: Path) -> None:
    for i in range(1, 3):
        write(tmp_path / "results", make_record(iteration=i, versions={"tensorrt_llm": "1.1.0", "cuda": 13}))
    runs = load_runs(tmp_path / "results").runs
    csv_path, parquet_path = export_runs(runs, tmp_path / "out")
    from_csv, from_parquet = pd.read_csv(csv_path), pd.read_parquet(parquet_path)
    assert len(from_csv) == len(from_parquet) == 2
    assert list(from_parquet.columns) == list(runs.columns)
    assert sorted(from_parquet["output_tok_s"]) == [101.0, 102.0]


_mutations = st.sampled_from([
    ("drop", "metrics"), ("drop", "run_id"), ("drop", "host"), ("set", "status", "weird"),
    ("set", "iteration", "1"), ("set", "iteration", True), ("set", "schema_version", 2),
    ("metric", "bogus", 1.0), ("metric", "output_tok_s", "fast"), ("metric", "kv_fraction", 0.9),
    ("set", "run_id", "other"), ("set", "metric_sources", []), ("set", "host", 5), ("none",),
])


@settings(max_examples=60, deadline=None)
@given(st.lists(_mutations, max_size=3))
def test_every_broken_record_is_named_and_rejected(mutations: list[tuple]) -> None:
    rec = copy.deepcopy(make_record())
    for mutation in mutations:
        if mutation[0] == "drop":
            rec.pop(mutation[1], None)
        elif mutation[0] == "set":
            rec[mutation[1]] = mutation[2]
        elif mutation[0] == "metric" and isinstance(rec.get("metrics"), dict):
            rec["metrics"][mutation[1]] = mutation[2]
    problems = contract.validate(rec)  # never raises, whatever the record holds
    assert all(isinstance(p, str) and p for p in problems)
    assert bool(problems) == any(m != ("none",) for m in mutations), (mutations, problems)


def test_version_1_records_load_through_their_migration(tmp_path: Path) -> None:
    """The GPU example as committed in format version 1 loads whole, as does a v1 record beside a current one."""
    example = Path(__file__).resolve().parents[3] / "tests/fixtures/records-v1/gpu"
    result = load_runs(example)
    assert result.problems == [] and len(result.runs) == 16
    assert (result.runs["status"] == "ok").all() and result.runs["gflops"].notna().sum() == 4

    write(tmp_path, make_record(iteration=1))  # schema_version 1
    current = contract.new_record("c", "h1", "m", "native", "w", 2, status="ok", metrics={"gflops": 1.0},
                                  samples={"matmul_s": [0.5, 0.25]}).to_dict()
    write(tmp_path, current)
    runs = load_runs(tmp_path).runs
    assert sorted(runs["iteration"]) == [1, 2]
    assert json.loads(runs.set_index("iteration").loc[2, "samples_matmul_s"]) == [0.5, 0.25]


def test_a_record_from_a_newer_sparkfleet_is_reported_not_guessed(tmp_path: Path) -> None:
    path = write(tmp_path, make_record(schema_version=contract.SCHEMA_VERSION + 1))
    result = load_runs(tmp_path)
    assert len(result.runs) == 0
    assert [(p.path, p.reason) for p in result.problems] == [
        (path, f"schema_version {contract.SCHEMA_VERSION + 1} is newer than this sparkfleet reads "
               f"({contract.SCHEMA_VERSION}): upgrade sparkfleet to read it")]
