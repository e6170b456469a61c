"""Serving runs in the report (issue 25): the points table, per-point statistics, verdicts between environments
and engines, the A/A noise floor of the serving metrics, failed points named, the Serving section, CSVs and
JSON; and nothing of it in a report without serving runs. Synthetic trees with stated gaps (serving_tree.py):
the tests assert what the report concludes, not the formulas behind it."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest
from serving_tree import BASE, build_serving_tree, serving_record
from test_report import build_fleet

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving_client
from sparkfleet import serving
from sparkfleet.cli import main
from sparkfleet.load import load_runs
from sparkfleet.report import analyse
from sparkfleet.report import serving as report_serving

#: The metrics these records carry: llama-benchy's (AIPerf's others are absent from its records).
LLAMA_BENCHY = [m for m in serving.SERVING_METRICS
                if m in {name for _, name in serving_client.LLAMA_BENCHY_METRICS}]


def report_json(results: Path) -> dict:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["report", str(results), "--json"]) == 0
    return json.loads(buffer.getvalue())


def container_slower_generation(engine: str, environment: str, metric: str, point: dict[str, int]) -> float:
    """The container's aggregate generation throughput 30% below native; every other figure alike."""
    return 0.7 if environment == "container" and metric == "tg_tok_s" else 1.0


def vllm_faster_but_later(engine: str, environment: str, metric: str, point: dict[str, int]) -> float:
    """vllm: 30% more aggregate generation throughput and 30% longer time to first token than llama.cpp."""
    if engine != "vllm":
        return 1.0
    return {"tg_tok_s": 1.3, "e2e_ttft_ms": 1.3}.get(metric, 1.0)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Two engines, native / container / an A/A twin of native, a failed point and a dead server, reported."""
    root = build_serving_tree(
        tmp_path_factory.mktemp("serving") / "serve", factor=container_slower_generation,
        environments=("native", "container", "native.aa"), aa_pairs={"native.aa": "native"},
        failed={("vllm", "native", 2): ("d4096.c4.pp512.tg64",)}, dead=[("llama.cpp", "container", 3)])
    return root, report_json(root)


def verdict_rows(out: dict, question: str) -> pd.DataFrame:
    rows = pd.DataFrame(out["serving"]["comparisons"])
    return rows[rows["question"] == question]


# --- the points table --------------------------------------------------------------------------------------

def test_points_table_has_one_row_per_run_and_point_and_leaves_the_runs_table_alone(tmp_path: Path) -> None:
    root = build_serving_tree(tmp_path / "serve", iterations=3)
    loaded = load_runs(root)
    points = loaded.serving
    assert loaded.problems == []
    assert len(loaded.runs) == 2 * 2 * 3 and len(points) == 2 * 2 * 3 * 4  # engines x envs x iterations (x points)
    for column in ("run_id", "host", "model", "environment", "iteration", "engine", "depth", "concurrency", "pp",
                   "tg", "point", "point_status", *serving.SERVING_METRICS):
        assert column in points, column
    assert set(points["point"]) == {"d0.c1.pp512.tg64", "d0.c4.pp512.tg64", "d4096.c1.pp512.tg64",
                                    "d4096.c4.pp512.tg64"}
    assert set(points["engine"]) == {"vllm", "llama.cpp"}
    raw = json.loads(points["samples_tg_tok_s"].iloc[0])  # the client's raw values, as JSON text
    assert isinstance(raw, list) and len(raw) == 3
    assert points["depth"].dtype == "Int64" and points["tg_tok_s"].dtype == "float64"
    assert not any(c in loaded.runs for c in ("depth", "point", "tg_tok_s", "serving"))  # runs: one row per run


def test_a_tree_without_serving_runs_loads_no_points_and_reports_nothing_of_serving(tmp_path: Path) -> None:
    """The byte-identical check itself was made by hand (the synthetic fleet and the GPU example reported before
    and after this change: every file the same); here: nothing of serving reaches such a report."""
    results = build_fleet(tmp_path / "synthetic")
    assert load_runs(results).serving.empty
    out = report_json(results)
    assert "serving" not in out
    assert not any(line["question"] == "serving" for line in out["verdicts"])
    summary = (results / "report" / "summary.md").read_text()
    html = (results / "report" / "index.html").read_text()
    assert "## Serving" not in summary and 'id="section-serving"' not in html and 'id="fig-serving' not in html
    assert not list((results / "report").glob("serving*")) and not list((results / "report").glob("plots/serving*"))


# --- statistics -----------------------------------------------------------------------------------------------

def test_cells_keep_every_iteration_value_in_point_order(tmp_path: Path) -> None:
    profile = {"depth": (0, 4096, 16384), "concurrency": (1, 2), "pp": (512,), "tg": (64,)}
    root = build_serving_tree(tmp_path / "serve", engines=("vllm",), environments=("native",), iterations=4,
                              profile=profile)
    cells = serving.cell_statistics(load_runs(root).serving)
    tg = cells[cells["metric"] == "tg_tok_s"]
    assert list(tg["depth"]) == [0, 0, 4096, 4096, 16384, 16384]  # numbers, not text order (16384 < 4096)
    assert list(tg["concurrency"]) == [1, 2] * 3
    assert (tg["n"] == 4).all()
    values = [json.loads(v) for v in tg["values"]]
    assert all(len(v) == 4 for v in values)
    assert all(row.ci95_low <= row.median <= row.ci95_high for row in tg.itertuples())
    assert set(tg["ci95_of"]) == {"mean (t)"}  # 4 iterations: the t-interval; the bootstrap needs 10
    assert list(dict.fromkeys(cells["metric"])) == list(LLAMA_BENCHY)


def test_a_failed_point_is_left_out_of_its_cell_and_named(campaign: tuple[Path, dict]) -> None:
    root, out = campaign
    cells = pd.DataFrame(out["serving"]["cells"])
    cell = cells[(cells["engine"] == "vllm") & (cells["environment"] == "native") & (cells["metric"] == "tg_tok_s")]
    n = dict(zip(zip(cell["depth"], cell["concurrency"], strict=True), cell["n"], strict=True))
    assert n == {(0, 1): 5, (0, 4): 5, (4096, 1): 5, (4096, 4): 4}  # iteration 2's failed point left out
    failed = out["serving"]["failed_points"]
    assert [(f["point"], f["iteration"], f["engine"]) for f in failed] == [("d4096.c4.pp512.tg64", 2, "vllm")]
    warning = next(w for w in out["warnings"] if w["kind"] == "serving-point")
    assert "d4096.c4.pp512.tg64" in warning["message"] and "client exited 1: timeout" in warning["details"][0]
    summary = (root / "report" / "summary.md").read_text()
    section = summary[summary.index("## Serving"):]
    assert "Failed points, left out of every statistic (1)" in section
    assert "d4096.c4.pp512.tg64 in qwen.native.serve-quick.vllm.i002" in section


def test_a_serving_run_without_an_ok_point_is_a_failed_run(tmp_path: Path) -> None:
    root = build_serving_tree(tmp_path / "serve", engines=("vllm",), environments=("native",), iterations=3,
                              dead=[("vllm", "native", 3)])
    # A record that says ok although no point is: read as failed, the reason naming its points.
    import numpy as np
    rec = serving_record("vllm", "native", 9, 99, np.random.default_rng(0), lambda *a: 1.0, 0.01,
                         failed=("d0.c1.pp512.tg64", "d0.c4.pp512.tg64", "d4096.c1.pp512.tg64",
                                 "d4096.c4.pp512.tg64"))
    assert rec["status"] == "ok"
    contract.write_json_atomic(root / "spark-01" / "runs" / rec["run_id"] / "record.json", rec)
    loaded = load_runs(root)
    status = dict(zip(loaded.runs["iteration"], loaded.runs["status"], strict=True))
    assert status == {1: "ok", 2: "ok", 3: "failed", 9: "failed"}
    reason = loaded.runs.loc[loaded.runs["iteration"] == 9, "reason"].item()
    assert reason.startswith("serving: no point is ok") and "d0.c1.pp512.tg64" in reason
    report = analyse(loaded)
    assert sorted(report.serving.failed_runs["run_id"]) == sorted(
        loaded.runs.loc[loaded.runs["status"] == "failed", "run_id"])
    assert any(f.kind == "not-ok" for f in report.findings)  # shown as failed like any other run
    assert (report.serving.cells["n"] == 2).all()  # only the two ok runs are measured


# --- verdicts -----------------------------------------------------------------------------------------------

def test_a_30_percent_gap_with_a_tight_spread_is_different_and_per_user_stays_apart(
        campaign: tuple[Path, dict]) -> None:
    _, out = campaign
    env = verdict_rows(out, report_serving.ENVIRONMENT)
    aggregate = env[env["metric"] == "tg_tok_s"]
    assert len(aggregate) == 2 * 4  # per engine and point
    assert set(aggregate["outcome"]) == {"different"}
    assert (aggregate["change_pct"] < -20).all() and (aggregate["change_pct"] > -40).all()
    assert set(aggregate["better"]) == {False}  # less throughput is worse
    per_user = env[env["metric"] == "tg_req_tok_s"]  # the per-user figure did not move: never mixed in
    assert set(per_user["outcome"]) <= {"same", "undetermined"} and "same" in set(per_user["outcome"])
    line = next(v for v in out["verdicts"] if v["question"] == "serving" and v["subject"] == "qwen / engine vllm")
    assert line["outcome"] == "different"
    assert "generation throughput (aggregate): different at 4 of 4 points" in line["headline"]
    assert "generation throughput (per user)" not in line["headline"]


def test_identical_distributions_are_never_different(campaign: tuple[Path, dict]) -> None:
    _, out = campaign
    engines = verdict_rows(out, report_serving.ENGINE)  # vllm and llama.cpp drawn from the same distribution
    assert len(engines) > 0
    assert set(engines["outcome"]) <= {"same", "undetermined"}
    assert {(a, b) for a, b in zip(engines["a"], engines["b"], strict=True)} == {("llama.cpp", "vllm")}


def test_the_a_a_twin_sets_a_serving_noise_floor_and_is_compared_with_nothing_else(
        campaign: tuple[Path, dict]) -> None:
    _, out = campaign
    noise = pd.DataFrame(out["serving"]["noise_floor"])
    assert set(noise["metric"]) == set(LLAMA_BENCHY)
    assert (noise["floor_pct"] > 0).all() and (noise["floor_pct"] < 10).all()
    rows = pd.DataFrame(out["serving"]["comparisons"])
    assert "native.aa" not in set(rows["a"]) | set(rows["b"]) | set(rows["environment"].dropna())
    env = rows[rows["question"] == report_serving.ENVIRONMENT]
    assert env["noise_floor_pct"].notna().all()  # every serving verdict says where the floor lies
    assert set(env.loc[env["metric"] == "tg_tok_s", "under_noise_floor"]) == {False}  # 30% is above it


def test_engine_verdicts_follow_each_metrics_direction(tmp_path: Path) -> None:
    root = build_serving_tree(tmp_path / "serve", environments=("native",), factor=vllm_faster_but_later)
    report = analyse(load_runs(root))
    rows = report.serving.comparisons
    assert set(rows["question"]) == {report_serving.ENGINE}
    throughput, ttft = (rows[rows["metric"] == m] for m in ("tg_tok_s", "e2e_ttft_ms"))
    assert set(throughput["outcome"]) == set(ttft["outcome"]) == {"different"}
    assert set(throughput["better"]) == {True} and set(ttft["better"]) == {False}  # vllm: faster, later
    assert (throughput["change_pct"] > 20).all() and (ttft["change_pct"] > 20).all()


def test_a_noisy_gap_with_few_iterations_is_undetermined_with_the_runs_it_needs(tmp_path: Path) -> None:
    root = build_serving_tree(tmp_path / "serve", engines=("vllm",), iterations=3, cv=0.3,
                              factor=lambda e, env, m, p: 1.1 if env == "container" else 1.0)
    rows = analyse(load_runs(root)).serving.comparisons
    undetermined = rows[rows["outcome"] == "undetermined"]
    assert len(undetermined) > len(rows) / 2
    assert (undetermined["required_n"] > 3).all()


# --- files, figures, JSON ---------------------------------------------------------------------------------

def test_serving_section_tables_keep_aggregate_and_per_user_apart(campaign: tuple[Path, dict]) -> None:
    root, _ = campaign
    summary = (root / "report" / "summary.md").read_text()
    section = summary[summary.index("## Serving"):summary.index("\n## ", summary.index("## Serving") + 3)]
    tables = {}
    for caption in ("Aggregate throughput per point", "Per-user throughput per point", "Latency per point"):
        header = section[section.index(caption):].splitlines()[2]
        tables[caption] = header
    assert "tg_tok_s median" in tables["Aggregate throughput per point"]
    assert "_req_tok_s" not in tables["Aggregate throughput per point"]
    per_user = [c.strip() for c in tables["Per-user throughput per point"].split("|") if "median" in c]
    assert per_user and all("_req_tok_s" in c for c in per_user)
    assert "e2e_ttft_ms median" in tables["Latency per point"] and "tok_s" not in tables["Latency per point"]
    assert "Each point compared" in section
    html = (root / "report" / "index.html").read_text()
    for name in report_serving.SERVING_TITLES:
        assert f'<figure id="fig-{name}"' in html
        assert (root / "report" / "plots" / f"{name}.png").stat().st_size > 0


def test_serving_csvs_hold_every_point_row_and_every_cell(campaign: tuple[Path, dict], tmp_path: Path) -> None:
    root, _ = campaign
    loaded = load_runs(root)
    report = analyse(loaded)
    written = report_serving.write_tables(report.serving, tmp_path)
    assert [p.name for p in written] == list(report_serving.CSV_NAMES)
    points = pd.read_csv(tmp_path / "serving_points.csv")
    assert len(points) == len(loaded.serving)
    assert set(points["point_status"]) == {"ok", "failed"}
    ok = points[points["point_status"] == "ok"]
    assert all(len(json.loads(s)) == 3 for s in ok["samples_tg_tok_s"])
    cells = pd.read_csv(tmp_path / "serving_cells.csv")
    assert {"median", "ci95_low", "ci95_high", "n", "values", "scope"} <= set(cells.columns)
    assert all(len(json.loads(v)) == n for v, n in zip(cells["values"], cells["n"], strict=True))
    assert set(cells.loc[cells["metric"].str.endswith("_req_tok_s"), "scope"]) == {"per user"}
    assert set(cells.loc[cells["metric"].isin(["tg_tok_s", "pp_tok_s"]), "scope"]) == {"aggregate"}


def test_base_values_are_what_the_cells_report(campaign: tuple[Path, dict]) -> None:
    """A sanity check of the tree itself: native medians lie within a few percent of the stated base."""
    _, out = campaign
    cells = pd.DataFrame(out["serving"]["cells"])
    native = cells[cells["environment"] == "native"]
    for metric, base in BASE.items():
        medians = native.loc[native["metric"] == metric, "median"]
        assert ((medians / base - 1).abs() < 0.05).all(), metric


def test_a_campaign_of_two_iterations_reports_with_no_interval_shown(tmp_path):
    # two iterations a side: no t-interval (MIN_N_INTERVAL is 3), every CI column empty - the report still writes,
    # its tables say so rather than fail (the serving e2e campaign has 2 iterations)
    root = build_serving_tree(tmp_path / "tree", iterations=2)
    assert main(["report", str(root)]) == 0
    with (root / "report" / "serving_cells.csv").open() as fh:
        cells = list(csv.DictReader(fh))
    assert cells and all(c["ci95_low"] in ("", "nan") and c["n"] == "2" for c in cells)
    assert "Serving" in (root / "report" / "summary.md").read_text()


@pytest.mark.parametrize("engines, environments", [(("llama.cpp",), ("native", "container")),
                                                   (("vllm", "llama.cpp"), ("native",))])
def test_a_campaign_with_one_question_reports(tmp_path, engines, environments):
    # one engine: only environment comparisons; one environment: only engine comparisons
    root = build_serving_tree(tmp_path / "tree", engines=engines, environments=environments, iterations=3)
    assert main(["report", str(root)]) == 0
    with (root / "report" / "serving_comparisons.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {r["question"] for r in rows} == {"serving-environment" if len(engines) == 1 else "serving-engine"}


def test_a_point_significant_alone_is_not_a_different_verdict_and_says_why(tmp_path: Path) -> None:
    """No true difference at CV 5%: among 64 point comparisons some are significant alone and beyond ±5% (seed 3
    has them). The headline holds the family (Holm): none is DIFFERENT; each such point says so in its row."""
    root = build_serving_tree(tmp_path / "serve", cv=0.05, seed=3)
    out = report_json(root)
    rows = pd.DataFrame(out["serving"]["comparisons"])
    alone = rows[(rows["p_value"] < 0.05) & (rows["change_pct"].abs() > 5)]
    assert len(alone) > 0, "seed 3 no longer draws a point significant alone: pick another"
    assert set(alone["outcome"]) == {"undetermined"} and set(alone["reason"]) == {"family"}
    assert (rows["family_size"] == rows["family_size"].iloc[0]).all() and rows["family_size"].iloc[0] > 1
    serving_lines = [line for line in out["verdicts"] if line["question"] == "serving"]
    assert serving_lines and all(line["outcome"] != "different" for line in serving_lines)


def test_points_of_two_clients_never_pool_and_are_never_compared(tmp_path: Path) -> None:
    """llama-benchy's and AIPerf's figures of one server differ by definition: the container's runs measured by
    AIPerf, native's by llama-benchy, make cells of their own, and no environment verdict sets one against the
    other (it would compare the clients, not the environments)."""
    from sparkfleet.load import load_runs
    from sparkfleet.report.compose import analyse

    root = build_serving_tree(tmp_path / "results", engines=("vllm",), iterations=5)
    for path in root.rglob("record.json"):
        rec = json.loads(path.read_text())
        if rec["environment"] == "container":
            rec["serving"]["client"] = {"name": "aiperf", "version": "0.13.0"}
            path.write_text(json.dumps(rec))
    study = analyse(load_runs(root)).serving
    pairs = set(zip(study.cells["environment"], study.cells["client"], strict=True))
    assert pairs == {("native", "llama-benchy"), ("container", "aiperf")}
    assert study.comparisons.empty or not (study.comparisons["question"] == report_serving.ENVIRONMENT).any()
