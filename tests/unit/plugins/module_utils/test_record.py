"""The run-record contract: identity, validation, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _shared import trtllm_fixture

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import (
    METRICS,
    run_id,
    slug,
    validate,
    write_json_atomic,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import parse_file


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
        ({"metrics": {"tmp_kv_gib": 0.56}, "metric_sources": {}}, "memory metric 'tmp_kv_gib' has no entry"),
        ({"iteration": "3"}, "field 'iteration' has type str"),
        ({"run_id": "forged"}, "does not match its identity fields"),
        ({"schema_version": 99}, "schema_version 99"),
        ({"cooldown": {"waited_s": "12"}}, "field 'cooldown.waited_s' has type str"),
        ({"telemetry": {"gpu_temp_c_max": True}}, "field 'telemetry.gpu_temp_c_max' has type bool"),
        ({"versions": {"image": ["a"]}}, "field 'versions.image' has type list"),
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


# ------------------------------------------------------------------ one definition, its schema, its versions

REPO = Path(__file__).resolve().parents[4]
#: The GPU example as committed on 2026-11-21 (format version 1), kept as a fixture for the migration.
GPU_V1 = REPO / "tests/fixtures/records-v1/gpu"


def test_the_committed_json_schema_is_generated_from_the_python_definition():
    committed = json.loads((REPO / "docs/record.schema.json").read_text())
    assert committed == record.json_schema(), \
        "regenerate: python -m" \
        " ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record" \
        " > docs/record.schema.json"
    assert committed["required"] == list(record.REQUIRED_FIELDS)
    assert set(committed["properties"]) == set(record.FIELD_NAMES)


@pytest.mark.parametrize(
    "change",
    [{}, {"status": "great"}, {"metrics": {"tokens": 1.0}}, {"iteration": "3"}, {"samples": {"watts": [1.0]}},
     {"samples": {"matmul_s": ["fast"]}}, {"surprise": 1}, {"warmup": 1}, {"schema_version": 3},
     {"cooldown": {"waited_s": None, "start_temp_c": 41, "producer_detail": "kept"}}, {"cooldown": {"polls": 1.5}},
     {"memory": {"samples": "9"}}, {"provenance": {"status": "confirmed", "checks": []}}],
)
def test_the_generated_schema_and_validate_agree(change):
    """What jsonschema says of a record (current version) and what validate says: valid for both, or neither."""
    jsonschema = pytest.importorskip("jsonschema")
    rec = record.new_record("c", "spark1", "deepseek", "native", "study", 3, status="ok",
                            metrics={"output_tok_s": 119.4}, samples={"matmul_s": [0.1, 0.2]}).to_dict()
    rec.update(change)
    by_schema = not list(jsonschema.Draft202012Validator(record.json_schema()).iter_errors(rec))
    assert by_schema == (validate(rec) == []), (change, validate(rec))


def test_the_builder_derives_the_identity_and_refuses_unknown_fields():
    rec = record.new_record("c", "spark1", "deepseek", "native", "study", 3)
    assert rec.run_id == run_id("c", "spark1", "deepseek", "native", "study", 3)
    assert rec.schema_version == record.SCHEMA_VERSION and rec.status == "failed"
    with pytest.raises(AttributeError, match="not a field of the run record"):
        rec.metrcs = {}  # a typo never becomes a field
    with pytest.raises(TypeError):
        record.new_record("c", "spark1", "deepseek", "native", "study", 3, surprise=1)


def test_version_1_records_are_migrated_to_the_current_version():
    v1 = _record(parse_warnings=[], probe={"dockerenv": "no"}, study_iteration=4, started_tz="local")
    upgraded = record.upgrade(v1)
    assert upgraded is not v1 and v1["schema_version"] == 1  # the input is left as it was
    assert upgraded["schema_version"] == record.SCHEMA_VERSION
    assert upgraded["samples"] == {}  # v1 kept no per-iteration samples
    assert upgraded["probe"] == {"dockerenv": "no"}  # written by v1 producers, defined in v2
    assert upgraded["extra"] == {"study_iteration": 4, "started_tz": "local"}  # outside the contract: kept
    assert validate(upgraded) == [] and validate(v1) == []
    assert record.upgrade(upgraded) is upgraded  # current: nothing to do


def test_a_future_or_unknown_version_is_refused_by_name():
    with pytest.raises(record.RecordVersionError, match="schema_version 7 is newer than this sparkfleet reads"):
        record.upgrade(_record(schema_version=7))
    with pytest.raises(record.RecordVersionError, match="schema_version 0 is not a record format version"):
        record.upgrade(_record(schema_version=0))


def test_the_one_reader_migrates_screens_and_validates():
    """checked_record: what every controller reader of record.json takes (the loader, the report, the unpack)."""
    read = record.checked_record(_record(study_iteration=4, metrics={"output_tok_s": -5.0}))
    assert read["schema_version"] == record.SCHEMA_VERSION and read["extra"] == {"study_iteration": 4}
    assert read["metrics"] == {} and record.rejected_metrics(read)  # out of its physical range: named, dropped
    with pytest.raises(record.RecordError, match="status 'failed' without a reason"):
        record.checked_record(_record(status="failed"))
    with pytest.raises(record.RecordError, match="schema_version 7 is newer"):  # a RecordVersionError
        record.checked_record(_record(schema_version=7))
    with pytest.raises(record.RecordError, match="not a JSON object"):
        record.checked_record([1])


def test_every_migration_step_is_defined():
    assert sorted(record.MIGRATIONS) == list(range(1, record.SCHEMA_VERSION))


def test_the_committed_version_1_gpu_records_still_validate():
    paths = sorted(GPU_V1.glob("*/runs/*/record.json"))
    assert len(paths) == 16
    for path in paths:
        data = json.loads(path.read_text())
        assert data["schema_version"] == 1
        assert validate(data) == [], path


def test_the_kv_budget_metrics_are_optional_and_a_real_gb10_log_fills_them():
    """The Peak memory line of a real DGX Spark log (tests/data) gives tmp_kv and the line's budget residual; a
    record carries them as metrics with their sources, and a version-2 record without them stays valid."""
    parsed = parse_file(trtllm_fixture("gb10-1.1.0rc3-memory-excerpt.log"))
    rec = record.new_record("c", "spark1", "deepseek", "native", "study", 3, status="ok",
                            metrics=dict(parsed.metrics), metric_sources=dict(parsed.sources))
    data, problems = record.sealed(rec)
    assert problems == [] and data["status"] == "ok"
    assert data["metrics"]["tmp_kv_gib"] == 0.56 and abs(data["metrics"]["kv_budget_residual_gib"]) <= 0.01
    assert all(data["metric_sources"][name] for name in record.KV_BUDGET_METRICS)
    assert record.SCHEMA_VERSION == 2  # an optional metric name, no new format version
    for name in record.KV_BUDGET_METRICS:
        del data["metrics"][name], data["metric_sources"][name]
    assert validate(data) == []


def test_a_failed_run_names_its_reason():
    assert "status 'failed' without a reason" in validate(_record(status="failed"))
    assert validate(_record(status="failed", reason="exit 3")) == []


def test_the_serving_point_metrics_are_one_table():
    """Each serving point metric has a unit, one of the three scopes, a direction and words; a per-user rate
    names the aggregate rate of the same requests, itself in the table."""
    for name, spec in record.SERVING_METRICS.items():
        assert spec.scope in (record.AGGREGATE, record.PER_USER, record.LATENCY), name
        assert spec.direction == (-1 if spec.scope == record.LATENCY else 1), name
        units = {record.LATENCY: ("ms",), record.PER_USER: ("tokens/s",)}.get(  # AIPerf's: requests/s, tokens/J
            spec.scope, ("tokens/s", "requests/s", "tokens/J"))
        assert spec.unit in units and spec.words, name
        assert (spec.aggregate is not None) == (spec.scope == record.PER_USER), name
        assert spec.aggregate is None or record.SERVING_METRICS[spec.aggregate].scope == record.AGGREGATE, name
    assert not set(record.SERVING_METRICS) & set(record.METRICS)  # a point's figures, never a run's
