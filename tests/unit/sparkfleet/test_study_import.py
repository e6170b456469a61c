"""The published study as run records, and the report on it (63 runs, cells, sequential warning)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from _shared import STUDY_JSON

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main
from sparkfleet.study import study_records

STUDY = STUDY_JSON


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("results")
    assert main(["import", "benchmark-spark", str(STUDY), "--out", str(out)]) == 0
    return out / "benchmark-spark"


def test_records_follow_the_contract_and_the_study() -> None:
    records = study_records(STUDY)
    assert len(records) == 63
    assert all(contract.validate(r) == [] for r in records)
    assert [r["order_index"] for r in records] == list(range(63))
    starts = [r["started_utc"] for r in records]
    assert starts == sorted(starts) and starts[0] == "2025-11-08T19:51:54"  # no offset: zone unknown
    assert {r["campaign"] for r in records} == {"benchmark-spark"}
    assert {r["host"] for r in records} == {"spark-study"}
    assert {r["metrics"]["device_total_gib"] for r in records} == {119.64}
    assert all(r["status"] == "ok" for r in records)
    assert all("all_benchmark_results.json" in r["metric_sources"]["peak_memory_gib"] for r in records)
    gpt_native = [r for r in records if r["model"] == "gpt120b" and r["environment"] == "native"]
    assert [r["iteration"] for r in gpt_native] == list(range(1, 14))  # study repeated "1" four times
    assert [r["extra"]["study_iteration"] for r in gpt_native][:4] == [1, 1, 1, 1]
    first = records[0]
    assert first["metrics"]["peak_memory_gib"] == 74.23 and first["metrics"]["kv_cache_gib"] == 40.93


def test_report_on_the_study(imported: Path, capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    assert main(["report", str(imported), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"] == {"total": 63, "status_ok": 63}
    assert len(out["cell_counts"]) == 6
    assert sum(c["n_runs"] for c in out["cell_counts"]) == 63
    kinds = [w["kind"] for w in out["warnings"]]
    assert kinds.count("sequential") == 3
    envs = {(c["model"], c["metric"]): c for c in out["comparisons"]["environments"]}
    deepseek_peak = envs[("deepseek", "peak_memory_gib")]
    # Means by hand from the study file: native 70.47, container 101.30 GiB.
    assert deepseek_peak["native_mean"] == pytest.approx(70.47)
    assert deepseek_peak["env_mean"] == pytest.approx(101.30)
    assert deepseek_peak["p_value"] < 1e-10
    assert envs[("deepseek", "output_tok_s")]["p_value"] > 0.05  # identical throughput
    fit = out["kv_fit"]
    assert fit["assumed_fraction"] == 0.9 and fit["runs"] == 63
    assert 0.05 <= fit["residual_min"] <= fit["residual_max"] <= 0.07  # DESIGN: within 0.07 GiB
    assert len(out["kv_residuals"]) == 63

    report = imported / "report"
    summary = (report / "summary.md").read_text()
    assert "sequential order on spark-study / deepseek / study" in summary
    assert "Each run's residual" in summary and "assumed to be 0.9" in summary
    assert summary.count("| spark-study |") >= 63  # every run listed in the residual table
    runs = pd.read_parquet(report / "runs.parquet")
    assert len(runs) == 63 == len(pd.read_csv(report / "runs.csv"))
    assert (report / "index.html").stat().st_size > 10_000


def test_import_bad_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nothing": 1}')
    assert main(["import", "benchmark-spark", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert main(["import", "benchmark-spark", str(tmp_path / "missing.json"), "--out", str(tmp_path)]) == 2
