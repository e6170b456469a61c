"""The run-record contract: identity, validation, atomic writes."""

from __future__ import annotations

import json

import pytest

from sparkfleet_host.record import METRICS, run_id, slug, validate, write_json_atomic


def _record(**over):
    rec = {
        "schema_version": 1, "campaign": "c", "host": "spark1", "model": "deepseek", "environment": "native",
        "workload": "study", "iteration": 3, "status": "ok", "metrics": {"output_tok_s": 119.4,
        "peak_memory_gib": 73.1}, "metric_sources": {"peak_memory_gib": "log: Peak memory during profiling"},
    }
    rec["run_id"] = run_id("c", "spark1", "deepseek", "native", "study", 3)
    rec.update(over)
    return rec


def test_run_id_is_stable_and_distinguishes_every_identity_field():
    base = ("camp", "spark1", "qwen72b", "container", "T1", 1)
    assert run_id(*base) == run_id(*base)
    variants = {run_id(*base[:i], f"{base[i]}x" if i < 5 else 2, *base[i + 1:]) for i in range(6)}
    assert len(variants | {run_id(*base)}) == 7


def test_run_id_is_a_safe_path_component_even_for_hostile_names():
    rid = run_id("c", "h", "../../etc/passwd; $(rm -rf /)", "native", "a b\nc", 1)
    assert "/" not in rid and "\n" not in rid and " " not in rid and not rid.startswith(".")
    assert slug("..") == "x" and slug("") == "x"


def test_valid_record_has_no_problems():
    assert validate(_record()) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"status": "great"}, "status 'great' is not one of"),
        ({"metrics": {"tokens": 1.0}}, "unknown metric 'tokens'"),
        ({"metrics": {"kv_cache_gib": 3.0}, "metric_sources": {}}, "memory metric 'kv_cache_gib' has no entry"),
        ({"iteration": "3"}, "field 'iteration' has type str"),
        ({"run_id": "forged"}, "does not match its identity fields"),
        ({"schema_version": 99}, "schema_version 99"),
    ],
)
def test_invalid_records_name_the_problem(change, problem):
    assert any(problem in p for p in validate(_record(**change))), validate(_record(**change))


def test_missing_fields_are_named():
    rec = _record()
    del rec["host"]
    assert "missing field 'host'" in validate(rec)


def test_metric_names_match_design():
    for name in ("output_tok_s", "total_tok_s", "req_s", "latency_ms_avg", "latency_ms_p50", "latency_ms_p90",
                 "latency_ms_p95", "latency_ms_p99", "ttft_ms", "tpot_ms", "peak_memory_gib", "kv_cache_gib",
                 "device_total_gib", "kv_fraction"):
        assert name in METRICS


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "runs" / "r1" / "record.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["record.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "record.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"a": object()})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
