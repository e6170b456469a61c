"""A run the readiness probe found suspect (recorded with status ok under the policy mark) is never averaged in:
the loader gives each run its readiness state (a worker node's folded in), every statistic leaves the suspect runs
out (cell statistics, the environment comparison, serving cells, their comparisons), and the report names each one
left out with its reason, in the text, the HTML and the JSON; a campaign without suspect runs says nothing of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from node_tree import pair_campaign, ready
from serving_tree import build_serving_tree

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet import serving, stats
from sparkfleet.cli import main
from sparkfleet.load import load_runs
from sparkfleet.report import analyse, suspect_runs
from sparkfleet.report import serving as report_serving

WHY = "SM clock under load 850 MHz is in the known degraded band 690-890 MHz"
SUSPECT = {"state": "suspect", "reasons": [{"cause": "degraded_band", "message": WHY}], "sm_clock_mhz": 850.0,
           "power_w": 20.0, "expected_clock_mhz": 2400.0}
HEALTHY = {"state": "healthy", "reasons": [], "sm_clock_mhz": 2400.0, "power_w": 45.0, "expected_clock_mhz": 2400.0}


def write_run(root: Path, environment: str, iteration: int, tok_s: float, suspect: bool = False) -> str:
    """One ok run of spark1 / llama / ``environment`` / T1; a suspect one as the policy mark records it."""
    fields = {"status": "ok", "engine": "hf-generate", "warmup": False, "order_index": iteration,
              "metrics": {"output_tok_s": tok_s}, "metric_sources": {"output_tok_s": "log"}, "samples": {},
              "readiness": SUSPECT if suspect else HEALTHY, "reason": f"readiness suspect: {WHY}" if suspect else None}
    rec = contract.new_record("fleet", "spark1", "llama", environment, "T1", iteration, **fields)
    data, problems = contract.sealed(rec)
    assert not problems, problems
    contract.write_json_atomic(root / "spark1" / "runs" / data["run_id"] / contract.RECORD_NAME, data)
    return data["run_id"]


def campaign(root: Path, suspect: bool = True) -> str | None:
    """Five native and five container runs; the third container run suspect (and far off: pooled, it would pull
    the container's mean down by a fifth) unless ``suspect`` is False. Returns its run id."""
    marked = None
    for environment, base in (("native", 100.0), ("container", 95.0)):
        for i in range(1, 6):
            odd = suspect and environment == "container" and i == 3
            run_id = write_run(root, environment, i, 20.0 if odd else base + 0.1 * i, suspect=odd)
            marked = run_id if odd else marked
    return marked


def test_the_loader_gives_each_run_its_readiness(tmp_path: Path) -> None:
    run_id = campaign(tmp_path)
    runs = load_runs(tmp_path).runs.set_index("run_id")
    assert runs.loc[run_id, stats.READINESS_STATE] == "suspect" and runs.loc[run_id, stats.READINESS_REASONS] == WHY
    assert set(runs.drop(index=run_id)[stats.READINESS_STATE]) == {"healthy"}


def test_a_suspect_run_is_out_of_the_cell_statistics_and_the_environment_comparison(tmp_path: Path) -> None:
    run_id = campaign(tmp_path)
    report = analyse(load_runs(tmp_path))
    cells = report.cells.set_index("environment")
    assert cells.loc["container", "n"] == 4 and cells.loc["native", "n"] == 5  # one of five left out
    assert cells.loc["container", "mean"] == pytest.approx(95.3)  # 95.1, 95.2, 95.4, 95.5: not the 20
    counts = report.counts.set_index("environment")
    assert (counts.loc["container", "n_measured"], counts.loc["container", "n_suspect"]) == (4, 1)
    assert (counts.loc["native", "n_measured"], counts.loc["native", "n_suspect"]) == (5, 0)
    row = report.environments.iloc[0]
    assert (row["n_native"], row["n_env"]) == (5, 4) and row["env_mean"] == pytest.approx(95.3)
    named = report.suspect_runs
    assert list(named["run_id"]) == [run_id] and named.iloc[0]["reason"] == f"readiness suspect: {WHY}"
    assert [f.kind for f in report.findings].count(suspect_runs.FINDING_KIND) == 1


def test_the_report_names_the_suspect_run_with_its_reason(tmp_path: Path, capsys) -> None:
    run_id = campaign(tmp_path / "tree")
    out = tmp_path / "out"
    assert main(["report", str(tmp_path / "tree"), "--out", str(out), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["suspect_runs"] == [{"host": "spark1", "model": "llama", "environment": "container",
                                        "workload": "T1", "run_id": run_id, "iteration": 3,
                                        "reason": f"readiness suspect: {WHY}"}]
    assert {c["environment"]: c["n_suspect"] for c in payload["cell_counts"]} == {"container": 1, "native": 0}
    for page in ("summary.md", "index.html"):
        text = (out / page).read_text()
        assert suspect_runs.TITLE in text and run_id in text and f"readiness suspect: {WHY}" in text, page
        assert "the 1 run(s) the readiness probe found suspect" in text, page
    assert (out / suspect_runs.CSV_NAME).read_text().count(run_id) == 1


def test_a_campaign_without_suspect_runs_says_nothing_of_them(tmp_path: Path, capsys) -> None:
    campaign(tmp_path / "tree", suspect=False)
    out = tmp_path / "out"
    assert main(["report", str(tmp_path / "tree"), "--out", str(out), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["suspect_runs"] == [] and {c["n_suspect"] for c in payload["cell_counts"]} == {0}
    summary = (out / "summary.md").read_text()
    for said in (suspect_runs.TITLE, "readiness suspect", "found suspect (", "| suspect |", "[suspect-run]"):
        assert said not in summary, said
    assert not (out / suspect_runs.CSV_NAME).exists()


def _mark_suspect(root: Path, run_id: str) -> None:
    """Give one serving run's record the readiness section of a suspect probe, as the policy mark records it."""
    path = next(root.rglob(f"{run_id}/{contract.RECORD_NAME}"))
    data = json.loads(path.read_text())
    data |= {"readiness": SUSPECT, "reason": f"readiness suspect: {WHY}"}
    path.write_text(json.dumps(data))


def test_a_suspect_serving_run_is_out_of_the_serving_cells_and_comparisons(tmp_path: Path, capsys) -> None:
    root = build_serving_tree(tmp_path / "tree", engines=("vllm",), iterations=4)
    runs = load_runs(root).runs
    marked = runs[(runs["environment"] == "container") & (runs["iteration"] == 2)]["run_id"].iloc[0]
    _mark_suspect(root, marked)
    loaded = load_runs(root)
    points = loaded.serving
    assert set(points.loc[points["run_id"] == marked, stats.READINESS_STATE]) == {"suspect"}
    assert marked not in set(serving.measured_points(points)["run_id"])
    assert marked in set(serving.measured_points(points, keep_suspect=True)["run_id"])  # the host verdict's
    cells = serving.cell_statistics(points)
    assert set(cells.loc[cells["environment"] == "container", "n"]) == {3}
    assert set(cells.loc[cells["environment"] == "native", "n"]) == {4}
    paired = report_serving.paired_points(points, report_serving.ENVIRONMENT)
    assert set(paired["n_a"]) == {4} and set(paired["n_b"]) == {3}
    assert list(suspect_runs.suspect_runs(loaded.runs)["run_id"]) == [marked]
    out = tmp_path / "out"
    assert main(["report", str(root), "--out", str(out), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in payload["suspect_runs"]] == [marked]
    summary = (out / "summary.md").read_text()
    assert "not found suspect by the readiness probe (1 run(s) left out)" in summary
    assert f"run {marked} (iteration 2): readiness suspect: {WHY}" in summary


def test_a_run_whose_worker_node_was_suspect_is_left_out_too(tmp_path: Path) -> None:
    ids = pair_campaign(tmp_path, [ready(), ready("suspect", 850.0, WHY), ready()])
    loaded = load_runs(tmp_path)
    runs = loaded.runs.set_index("run_id")
    assert runs.loc[ids[1], stats.READINESS_STATE] == "suspect"
    assert runs.loc[ids[1], stats.READINESS_REASONS] == f"spark2 (rank 1): {WHY}"  # rank 0's own probe was healthy
    assert set(stats.measured_runs(loaded.runs)["run_id"]) == {ids[0], ids[2]}
    assert set(serving.cell_statistics(loaded.serving)["n"]) == {2}
    named = suspect_runs.suspect_runs(loaded.runs)
    assert list(named["run_id"]) == [ids[1]]
    assert named.iloc[0]["reason"] == f"readiness suspect: spark2 (rank 1): {WHY}"
