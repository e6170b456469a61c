"""The console script: --help, --version, subcommand discovery, clear errors."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import run_id
from sparkfleet import __version__
from sparkfleet.cli import main
from sparkfleet.commands.report import kv_fraction


def test_version_and_help_through_the_console_script():
    exe = [sys.executable, "-m", "sparkfleet"]
    version = subprocess.run([*exe, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"sparkfleet {__version__}"
    helptext = subprocess.run([*exe, "--help"], capture_output=True, text=True, check=True).stdout
    assert "validate-record" in helptext


def test_building_the_parser_imports_neither_pandas_nor_scipy():
    # Every subcommand's start (doctor, validate, parse in scripts) must stay light.
    code = ("import sys; from sparkfleet.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('pandas', 'scipy', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_validate_record_reports_problems_and_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({
        "schema_version": 1, "run_id": run_id("c", "h", "m", "native", "w", 1), "campaign": "c", "host": "h",
        "model": "m", "environment": "native", "workload": "w", "iteration": 1, "status": "ok", "metrics": {},
        "metric_sources": {}}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"status": "ok"}))
    assert main(["validate-record", str(good)]) == 0
    assert main(["validate-record", str(good), str(bad)]) == 1
    assert "missing field 'host'" in capsys.readouterr().out


def test_bad_files_are_one_line_errors(tmp_path, capsys):
    garbled = tmp_path / "x.json"
    garbled.write_text("{not json")
    assert main(["validate-record", str(garbled)]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main(["validate-record", str(tmp_path / "absent.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_report_takes_a_kv_fraction_as_the_workload_field_does():
    # trtllm_cli.KV_FRACTION: 0 < v <= 1, one definition for the campaign's field and the report's option
    assert kv_fraction("1") == 1.0 and kv_fraction("0.9") == 0.9
    for text in ("0", "1.5", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"{text} is not a KV fraction"):
            kv_fraction(text)
