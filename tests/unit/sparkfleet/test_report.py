"""`sparkfleet report` on a synthetic fleet: files written, warnings present, HTML self-contained."""

from __future__ import annotations

import base64
import json
import re
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _record(host: str, model: str, environment: str, workload: str, iteration: int, order: int,
            rng: np.random.Generator, **extra) -> dict:
    batch = {"T1": 1, "T2": 8, "T3": 32}[workload]
    peak = 70.0 + (25 if environment != "native" else 0) + rng.normal(0, 0.3)
    metrics = {"output_tok_s": 40.0 * batch ** 0.6 * (1 + rng.normal(0, 0.01)),
               "latency_ms_avg": 900 + 30 * batch + rng.normal(0, 5), "peak_memory_gib": peak,
               "kv_cache_gib": 0.9 * (119.64 - peak) + 0.06, "device_total_gib": 119.64}
    rec = {"schema_version": 1, "campaign": "synthetic", "host": host, "model": model,
           "environment": environment, "environment_kind": "native" if environment == "native" else "container",
           "workload": workload, "workload_params": {"batch": batch, "input_len": 128, "output_len": 128},
           "iteration": iteration, "order_index": order, "status": "ok", "exit_code": 0,
           "model_loaded": model, "started_utc": f"2025-11-10T{order // 60:02d}:{order % 60:02d}:00Z",
           "metrics": metrics,
           "metric_sources": {"peak_memory_gib": "log", "kv_cache_gib": "log", "device_total_gib": "nvml"}}
    rec.update(extra)
    rec["run_id"] = contract.run_id("synthetic", host, model, environment, workload, iteration)
    return rec


def build_fleet(root: Path) -> Path:
    rng = np.random.default_rng(0)
    plan = []
    for workload in ("T1", "T2", "T3"):
        for i in range(1, 6):
            plan += [("spark-01", "qwen", "native", workload, i), ("spark-01", "qwen", "container", workload, i)]
            plan += [("spark-02", "qwen", "native", workload, i), ("spark-03", "qwen", "native", workload, i)]
    # spark-02 runs its environments in one block: all native first, then a docker variant.
    plan += [("spark-02", "qwen", "docker", "T1", i) for i in range(1, 6)]
    for order, (host, model, env, workload, iteration) in enumerate(plan):
        rec = _record(host, model, env, workload, iteration, order, rng)
        if host == "spark-02" and env == "native":
            rec["metrics"]["output_tok_s"] *= 1.12  # one host 12% off the fleet
        contract.write_json_atomic(root / host / "runs" / rec["run_id"] / "record.json", rec)
    extras = [
        _record("spark-01", "qwen", "native", "T1", 20, 900, rng, status="failed", exit_code=1,
                reason="engine crashed: CUDA error"),
        _record("spark-01", "qwen", "native", "T1", 21, 901, rng, status="timeout", reason="exceeded 1800 s"),
        _record("spark-01", "qwen", "native", "T1", 22, 902, rng, status="invalid", model_loaded="other-7b",
                reason="model loaded differs from requested"),
        _record("spark-01", "qwen", "native", "T1", 23, 903, rng, warmup=True),
    ]
    outlier = _record("spark-01", "qwen", "native", "T2", 24, 904, rng)
    outlier["metrics"]["latency_ms_avg"] = 5000.0
    for rec in [*extras, outlier]:
        contract.write_json_atomic(root / rec["host"] / "runs" / rec["run_id"] / "record.json", rec)
    first = next((root / "spark-01" / "runs").iterdir())
    t = np.arange(0, 60, 1.0)
    pd.DataFrame({"t_s": t, "gpu_temp_c": 40 + 20 * (1 - np.exp(-t / 15)), "mem_used_gib": 70 + t / 10,
                  "extra_column": 1}).to_csv(first / "telemetry.csv", index=False)
    broken = root / "spark-01" / "runs" / "broken" / "record.json"
    broken.parent.mkdir()
    broken.write_text("{truncated")
    return root


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fleet(tmp_path_factory.mktemp("fleet") / "synthetic")


@pytest.fixture(scope="module")
def report_json(fleet: Path) -> dict:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["report", str(fleet), "--json"]) == 0
    return json.loads(buffer.getvalue())


def test_report_files_are_written(fleet: Path, report_json: dict) -> None:
    report = fleet / "report"
    for name in ("summary.md", "index.html", "runs.csv", "runs.parquet", "cells.csv", "environments.csv",
                 "kv_residuals.csv", "host_variance.csv", "host_deviations.csv", "outliers.csv"):
        assert (report / name).is_file(), name
    for plot in ("box_per_cell", "ci_bars", "throughput_batch", "kv_budget", "timeline", "telemetry"):
        assert (report / "plots" / f"{plot}.png").read_bytes().startswith(PNG_MAGIC), plot
    assert len(pd.read_parquet(report / "runs.parquet")) == report_json["runs"]["total"] == 70


def test_warnings_cover_every_kind(report_json: dict) -> None:
    messages = {w["kind"]: [] for w in report_json["warnings"]}
    for w in report_json["warnings"]:
        messages[w["kind"]].append(w["message"])
    assert any("broken/record.json" in m for m in messages["skipped"])
    assert any("engine crashed" in m for m in messages["not-ok"])
    assert any("exceeded 1800 s" in m for m in messages["not-ok"])
    assert any("loaded other-7b" in m for m in messages["invalid"])
    assert any("latency_ms_avg" in m and "5000" in m for m in messages["outlier"])
    # spark-02 ran all native before docker; spark-01 interleaved native and container.
    assert [m for m in messages["sequential"] if "spark-02 / qwen / T1" in m]
    assert not [m for m in messages["sequential"] if "spark-01" in m]
    assert any("host spark-02" in m and "output_tok_s" in m for m in messages["host-deviation"])
    assert "cv-gate" in messages  # the latency outlier pushes its cell's CV over 5%


def test_json_cells_and_comparisons(report_json: dict) -> None:
    cells = report_json["cells"]
    t1_native = [c for c in cells if c["host"] == "spark-01" and c["environment"] == "native"
                 and c["workload"] == "T1" and c["metric"] == "output_tok_s"][0]
    assert t1_native["n"] == 5 and t1_native["n_runs"] == 9 and t1_native["n_failed"] == 1
    assert t1_native["n_timeout"] == 1 and t1_native["n_invalid"] == 1 and t1_native["n_warmup"] == 1
    assert set(t1_native) >= {"mean", "std", "cv", "median", "min", "max", "ci_low", "ci_high",
                              "median_ci_low", "median_ci_high", "n_outliers", "cv_ok"}
    envs = report_json["comparisons"]["environments"]
    assert {(e["host"], e["environment"]) for e in envs} == {("spark-01", "container"), ("spark-02", "docker")}
    deviations = report_json["reproducibility"]["deviations"]
    assert {d["host"] for d in deviations if d["outside"]} == {"spark-02"}
    peak = [e for e in envs if e["host"] == "spark-01" and e["metric"] == "peak_memory_gib"][0]
    assert peak["diff"] == pytest.approx(25, abs=1) and peak["p_value"] < 1e-6
    assert report_json["reproducibility"]["variance"]


def test_json_is_stable(fleet: Path, report_json: dict, capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    assert main(["report", str(fleet), "--json"]) == 0
    again = capsys.readouterr().out
    assert json.loads(again) == report_json
    keys = re.findall(r'^  "(\w+)":', again, flags=re.M)
    assert keys == sorted(keys)


def test_terminal_summary(fleet: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(fleet)]) == 0
    out = capsys.readouterr().out
    assert "70 runs" in out and "1 record(s) skipped" in out
    assert "sequential order on spark-02" in out and "wrote" in out


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(PNG_MAGIC) and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_html_is_self_contained_and_every_image_decodes(fleet: Path, report_json: dict) -> None:
    page = (fleet / "report" / "index.html").read_text()
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:|//|file:)', page)
    assert "<link" not in page and "<script" not in page
    images = re.findall(r'<img [^>]*src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == page.count("<img") >= 6
    for data in images:
        width, height = png_size(base64.b64decode(data, validate=True))
        assert width > 100 and height > 100


def test_no_records_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert main(["report", str(tmp_path / "missing")]) == 2
