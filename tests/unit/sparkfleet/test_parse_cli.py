"""`sparkfleet parse FILE [--report-json JSON] [--json]`."""

from __future__ import annotations

import json
import os

import pytest
from _shared import own_fixture, trtllm_fixture

from sparkfleet.cli import main


def test_text_output_names_metrics_sources_model_version_missing(capsys):
    code = main(["parse", str(trtllm_fixture("throughput-0.21.0rc0-pytorch-streaming.txt"))])
    out = capsys.readouterr().out
    assert code == 0
    assert "model: meta-llama/Llama-3.1-8B-Instruct" in out
    assert "engine: trtllm-bench 0.21.0rc0 (backend pytorch)" in out
    assert "output_tok_s" in out and "11076.8" in out and "tokens/s" in out
    assert "from trtllm-bench report text" in out
    assert "missing: peak_memory_gib, kv_cache_gib, device_total_gib" in out


def test_json_output_with_report_json(capsys, tmp_path):
    log = tmp_path / "bench.log"
    log.write_text(trtllm_fixture("gb10-1.1.0rc3-memory-excerpt.log").read_text())
    report = own_fixture("trtllm-bench/report-1.2.0-pytorch-streaming.json")
    code = main(["parse", str(log), "--report-json", str(report), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["file"] == str(log) and data["report_json"] == str(report)
    assert data["metrics"]["req_s"] == 7.025151783021553
    assert data["metrics"]["peak_memory_gib"] == 113.65
    assert data["sources"]["peak_memory_gib"] == "log: Peak memory during memory usage profiling"
    assert data["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert data["engine_version"] == "1.2.0"
    assert data["missing"] == []


def test_missing_file_is_a_clear_error_exit_2(capsys, tmp_path):
    code = main(["parse", str(tmp_path / "nope.log")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == f"sparkfleet parse: error: {tmp_path / 'nope.log'}: no such file"


def test_missing_report_json_is_exit_2(capsys):
    code = main(["parse", str(trtllm_fixture("throughput-0.17.0-tensorrt.log")), "--report-json", "/nonexistent.json"])
    assert code == 2
    assert "/nonexistent.json: no such file" in capsys.readouterr().err


def test_directory_is_exit_2(capsys, tmp_path):
    assert main(["parse", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_exit_2(capsys, tmp_path):
    log = tmp_path / "secret.log"
    log.write_text("x")
    log.chmod(0)
    assert main(["parse", str(log)]) == 2
    assert "permission denied" in capsys.readouterr().err


def test_unrecognised_content_exits_1(capsys, tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("nothing to see\n")
    assert main(["parse", str(log)]) == 1
    out = capsys.readouterr().out
    assert "kind: unknown" in out and "missing: recognisable benchmark output" in out


def test_garbled_report_json_is_a_warning_not_a_crash(capsys, tmp_path):
    report = tmp_path / "report.json"
    report.write_bytes(b"{\x00\xff garbage")
    code = main(["parse", str(trtllm_fixture("throughput-0.17.0-tensorrt.log")), "--report-json", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    assert "warning: report_json is not valid JSON" in out
