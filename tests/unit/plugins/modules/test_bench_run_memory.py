"""bench_run records each run's memory state (issue 15): kv_fraction through the LLM API options file,
the page-cache drop when the workload asks for it, and the record's memory section."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module

record = host_util("record")
memstate = host_util("memstate")


@pytest.fixture
def standin_path(monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDINS}:{os.environ['PATH']}")


def _run(tmp_path: Path, workload: dict, environment: dict | None = None) -> dict:
    environment = environment or {"name": "bare", "kind": "bare"}
    runs = [{"run_id": record.run_id("c1", "h1", "m", environment["name"], workload["name"], 1), "order_index": 0,
             "model": {"name": "m", "path": str(STANDINS)}, "environment": environment,
             "workload": {"engine": "trtllm", "preset": "T1", "requests": 2, **workload},
             "iteration": 1, "warmup": False}]
    args = {"runs": runs, "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
            "cooldown": {"enabled": False}, "timeout_s": 60, "telemetry_interval_s": 0.05,
            # the bare host's trtllm-bench is the 1.1.0rc3 stand-in; datasets from the script stand-in
            "trtllm": {"version": "1.1.0rc3",
                       "surface": {"prepare_dataset_script": str(STANDINS / "prepare_dataset.py")}},
            "env": {"SPARKFLEET_FAKE_RUNTIME_S": "0.3", "SPARKFLEET_FAKE_ALLOC_MIB": "1"}}
    out = run_module(load_module("bench_run"), args)
    assert not out.get("failed"), out
    return json.loads(Path(out["runs"][0]["record_path"]).read_text())


def test_kv_fraction_and_memory_state_are_recorded(tmp_path, standin_path):
    rec = _run(tmp_path, {"name": "kv", "kv_fraction": 0.5})
    assert rec["status"] == "ok", rec["reason"]
    assert record.validate(rec) == []
    run_dir = tmp_path / "results/c1/h1/runs" / rec["run_id"]
    assert (run_dir / "extra_llm_api_options.yaml").read_text() == "kv_cache_config:\n  free_gpu_memory_fraction: 0.5\n"
    assert "--extra_llm_api_options" in rec["command"] and rec["metrics"]["kv_fraction"] == 0.5
    mem = rec["memory"]
    assert mem["version"] == 2 and "kv_fraction" not in mem and rec["workload_params"]["kv_fraction"] == 0.5
    assert mem["drop_caches"] == {"requested": False, "done": False}
    assert mem["start"]["meminfo"]["mem_total_gib"] > 0 and mem["start"]["cuda"]["source"] in ("nvml", "nvidia-smi")
    assert mem["peak"]["meminfo"]["not_free_gib"] > 0 and mem["samples"] >= 1
    assert mem["cgroup"] is None and mem["container_memory_flags"] is None  # bare: no container
    assert mem["environment"]["name"] == "bare" and mem["environment"]["aa_group"] is None


def test_drop_caches_is_done_before_the_run_and_recorded(tmp_path, standin_path, monkeypatch):
    knob = tmp_path / "drop_caches"
    knob.write_text("")
    real = memstate.drop_page_cache
    monkeypatch.setattr(memstate, "drop_page_cache", lambda: real(str(knob), sync=lambda: None))
    rec = _run(tmp_path, {"name": "drop", "drop_caches": True})
    assert rec["status"] == "ok", rec["reason"]
    assert knob.read_text() == "3\n"
    drop = rec["memory"]["drop_caches"]
    assert drop["requested"] and drop["done"] and drop["cached_before_gib"] is not None


def test_a_drop_that_cannot_be_done_fails_the_run_naming_it(tmp_path, standin_path, monkeypatch):
    real = memstate.drop_page_cache
    monkeypatch.setattr(memstate, "drop_page_cache", lambda: real(str(tmp_path / "no/drop_caches")))
    rec = _run(tmp_path, {"name": "drop", "drop_caches": True})
    assert rec["status"] == "failed" and "drop_caches" in rec["reason"]
    assert rec["memory"]["drop_caches"]["done"] is False
