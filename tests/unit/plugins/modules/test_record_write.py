"""bench_run writes every record through the contract's builder: valid records at the current format version,
raw per-iteration samples kept, and a record that breaks the contract is a failed run naming the violation."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from _ansible_modules import REPO, STANDINS, host_util, load_module, run_module

record = host_util("record")
parsers = host_util("parsers")


# The bare host's trtllm-bench is the 1.1.0rc3 stand-in: datasets come from the script stand-in, the tokenizer
# from the model's local directory (any directory serves the stand-ins).
TRTLLM = {"version": "1.1.0rc3", "surface": {"prepare_dataset_script": str(STANDINS / "prepare_dataset.py")}}
MODEL = {"name": "m", "path": str(STANDINS)}


def _plan(campaign: str, host: str, workload: dict, n: int = 1) -> list[dict]:
    return [{"run_id": record.run_id(campaign, host, "m", "bare", workload["name"], i), "order_index": i - 1,
             "model": MODEL, "environment": {"name": "bare", "kind": "bare"}, "workload": workload,
             "iteration": i, "warmup": False} for i in range(1, n + 1)]


def _args(tmp_path: Path, runs: list) -> dict:
    return {"runs": runs, "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
            "cooldown": {"enabled": False}, "timeout_s": 60, "trtllm": TRTLLM,
            "env": {"SPARKFLEET_FAKE_RUNTIME_S": "0.1", "SPARKFLEET_FAKE_ALLOC_MIB": "1"}}


def _records(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "results/c1/h1/runs").glob("*/record.json"))]


def _ledger(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "results/c1/h1/ledger.jsonl").read_text().splitlines()]


@pytest.fixture
def python_and_standins(monkeypatch):
    """The workloads' `python3` is this interpreter (numpy for matmul); `trtllm-bench` is the stand-in."""
    monkeypatch.setenv("PATH", f"{STANDINS}:{Path(sys.executable).parent}:{os.environ['PATH']}")


def test_matmul_records_keep_every_iteration_timing(tmp_path, python_and_standins):
    workloads = tmp_path / "results/.sparkfleet/workloads"
    workloads.mkdir(parents=True)
    for name in ("matmul.py", "sparkfleet_probe.py"):
        shutil.copy(REPO / "roles/matrix/files" / name, workloads / name)
    workload = {"name": "matmul", "engine": "matmul", "iterations": 4, "warmup": 1, "size": 64}
    out = run_module(load_module("bench_run"), _args(tmp_path, _plan("c1", "h1", workload, 2)))
    assert out["counts"] == {"ok": 2}, out
    for rec in _records(tmp_path):
        assert rec["schema_version"] == record.SCHEMA_VERSION == 2
        assert record.validate(rec) == []
        timings = rec["samples"]["matmul_s"]
        assert len(timings) == 4 and all(t > 0 for t in timings)
        assert rec["metrics"]["matmul_s_mean"] == pytest.approx(sum(timings) / 4, rel=0.01)
        # what the workload said of how it measured stays with the figures; the timings list is the samples
        facts = rec["extra"]["engine"]
        assert facts["size"] == 64 and facts["status"] == "ok" and "iteration_s" not in facts


def test_engine_facts_keep_scalars_bounded_and_json_safe():
    run_judge = host_util("run_judge")
    facts = run_judge.engine_facts({"decode_path": "cuda-graph", "launch_bound": False, "decoder_setup_s": 13.1,
                                    "compile_tuning": "none", "iteration_ttft_ms": [1.0, 2.0], "odd": {"a": 1},
                                    "nan": float("nan"), "inf": float("inf"), "long": "x" * 1000, "none": None})
    assert facts == {"compile_tuning": "none", "decode_path": "cuda-graph", "decoder_setup_s": 13.1,
                     "inf": None, "launch_bound": False, "long": "x" * run_judge.ENGINE_FACT_CHARS, "nan": None,
                     "none": None}
    assert len(run_judge.engine_facts({f"k{i:03d}": i for i in range(500)})) == run_judge.ENGINE_FACTS_MAX
    assert run_judge.engine_facts(None) == {}


def test_trtllm_records_are_current_and_valid(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDINS}:{os.environ['PATH']}")
    workload = {"name": "w", "engine": "trtllm", "preset": "T1", "requests": 2}
    out = run_module(load_module("bench_run"), _args(tmp_path, _plan("c1", "h1", workload, 1)))
    assert out["counts"] == {"ok": 1}, out
    (rec,) = _records(tmp_path)
    assert record.validate(rec) == [] and rec["schema_version"] == 2
    assert set(rec) == set(record.FIELD_NAMES)  # every field written, unset ones null: one shape
    assert rec["samples"] == {}  # trtllm-bench prints no per-iteration figures


def test_a_record_that_breaks_the_contract_is_a_failed_run_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDINS}:{os.environ['PATH']}")
    run_judge = host_util("run_judge")  # where bench_run's job parses a run's output
    real = run_judge.parse_log

    def broken(text, json_data=None):
        parsed = real(text, json_data)
        parsed.metrics["tokens_per_joule"] = 3.0  # a name the contract does not have
        parsed.samples["latency_ms"] = [1.0, float("nan")]  # and a sample that is not a finite number
        return parsed

    monkeypatch.setattr(run_judge, "parse_log", broken)
    workload = {"name": "w", "engine": "trtllm", "preset": "T1", "requests": 2}
    out = run_module(load_module("bench_run"), _args(tmp_path, _plan("c1", "h1", workload, 1)))
    assert not out.get("failed"), out  # the matrix goes on
    assert out["counts"] == {"failed": 1}
    (rec,) = _records(tmp_path)
    assert rec["status"] == "failed" and record.validate(rec) == []
    assert "broke the run-record contract" in rec["reason"] and "unknown metric 'tokens_per_joule'" in rec["reason"]
    assert "samples 'latency_ms'" in rec["reason"] and "(the run was ok" in rec["reason"]
    assert rec["metrics"] == {} and rec["samples"] == {}
    assert out["runs"][0]["reason"] == rec["reason"]
    finished = [e for e in _ledger(tmp_path) if e["event"] == "finished"]
    assert [e["status"] for e in finished] == ["failed"]


def test_sealed_names_fields_json_cannot_hold():
    rec = record.new_record("c", "h", "m", "native", "w", 1, status="ok", metrics={"gflops": 1.0},
                            telemetry={"gpu_temp_c_mean": float("inf")})
    data, problems = record.sealed(rec)
    assert problems == ["field 'telemetry' holds NaN, an infinity or a value JSON cannot hold"]
    assert data["status"] == "failed" and data["telemetry"] is None and record.validate(data) == []


def test_a_nested_section_of_the_wrong_shape_is_a_failed_run_with_the_section_dropped():
    rec = record.new_record("c", "h", "m", "native", "w", 1, status="ok", metrics={"gflops": 1.0},
                            cooldown={"waited_s": "12", "reason": "ok"}, versions={"image": "sha256:1"})
    data, problems = record.sealed(rec)
    assert problems == ["field 'cooldown.waited_s' has type str, expected number"]
    assert data["status"] == "failed" and "(the run was ok)" in data["reason"]
    assert data["cooldown"] is None and data["versions"] == {"image": "sha256:1"} and record.validate(data) == []


def test_sealed_refuses_a_record_whose_identity_is_broken():
    rec = record.new_record("c", "h", "m", "native", "w", 1, status="ok")
    rec.run_id = "forged"
    with pytest.raises(record.ContractError, match="does not match its identity"):
        record.sealed(rec)


def test_parsers_refuse_sample_names_outside_the_contract():
    result = parsers.ParseResult()
    assert not result.set_samples("watts", [1.0], "test")
    assert result.samples == {} and "not a record sample series" in result.warnings[0]
