"""Serving points against a baseline and a reference (issue 33 item 8): `sparkfleet compare`, `report --baseline`
and `report --hosts --reference` judge each serving point and metric by the regression gate's rule (threshold and
significant after Holm over the gate's one family, direction by the metric), and a serving regression counts in
the exit status like a run-level one. Synthetic trees (serving_tree.py) with stated gaps: the tests assert the
verdicts, the flagged points and the exit statuses, not the wording."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from serving_tree import build_serving_tree

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving_client
from sparkfleet import serving
from sparkfleet.cli import main
from sparkfleet.compare import compare_campaigns
from sparkfleet.load import load_runs
from sparkfleet.report import analyse
from sparkfleet.report import serving as report_serving
from sparkfleet.report.analysis import Options
from sparkfleet.report.host_normal import check_hosts

#: The metrics these records carry: llama-benchy's (AIPerf's others are absent from its records).
LLAMA_BENCHY = [m for m in serving.SERVING_METRICS
                if m in {name for _, name in serving_client.LLAMA_BENCHY_METRICS}]

#: One engine, native and container, 4 points: small enough to build quickly, every serving metric present.
SHAPE = {"engines": ("vllm",), "environments": ("native", "container"), "iterations": 5}


def container_worse(engine: str, environment: str, metric: str, point: dict[str, int]) -> float:
    """The container 20% worse on every serving figure (throughput down, latency up); native unchanged."""
    if environment != "container":
        return 1.0
    return 0.8 if serving.direction(metric) > 0 else 1.25


def run_level_metrics_removed(root: Path) -> Path:
    """A real llama.cpp campaign's records: no run-level metric at all, only the serving points."""
    for path in root.rglob("record.json"):
        data = json.loads(path.read_text())
        data["metrics"], data["metric_sources"] = {}, {}
        path.write_text(json.dumps(data))
    return root


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A baseline, a copy of it (same distribution, other noise) and a campaign whose container is 20% worse."""
    root = tmp_path_factory.mktemp("serving-compare")
    return {"a": build_serving_tree(root / "a", seed=1, **SHAPE),
            "copy": build_serving_tree(root / "copy", seed=2, **SHAPE),
            "worse": build_serving_tree(root / "worse", seed=3, factor=container_worse, **SHAPE)}


def compare_json(baseline: Path, current: Path) -> tuple[int, dict]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        status = main(["compare", str(baseline), str(current), "--json"])
    return status, json.loads(buffer.getvalue())


def served(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    return table[table["point"].notna() & table["metric"].notna()]


# --- sparkfleet compare ----------------------------------------------------------------------------------------

def test_serving_twenty_percent_worse_is_a_regression_and_exits_1(trees: dict[str, Path]) -> None:
    status, out = compare_json(trees["a"], trees["worse"])
    assert status == 1
    points = served(out["comparisons"])
    flagged = points[points["verdict"] == "regression"]
    # every serving figure of the container at every point, and nothing of native
    assert set(flagged["environment"]) == {"container"}
    container = points[points["environment"] == "container"]
    assert len(flagged) == len(container) == len(LLAMA_BENCHY) * 4
    assert set(points.loc[points["environment"] == "native", "verdict"]) == {"unchanged"}
    assert out["regressions"] == len(flagged)


def test_same_distribution_is_no_regression_and_exits_0(trees: dict[str, Path]) -> None:
    status, out = compare_json(trees["a"], trees["copy"])
    assert status == 0
    points = served(out["comparisons"])
    assert len(points) == 2 * 4 * len(LLAMA_BENCHY)  # both environments, every point and metric
    assert set(points["verdict"]) == {"unchanged"}
    assert out["regressions"] == 0


def test_serving_rows_share_the_gate_family_with_the_run_level_rows(trees: dict[str, Path]) -> None:
    a, b = load_runs(trees["a"]), load_runs(trees["worse"])
    table = compare_campaigns(a.runs, b.runs, baseline_points=a.serving, current_points=b.serving)
    judged = table[table["metric"].notna()]
    assert judged["point"].isna().any() and judged["point"].notna().any()  # KV cache per run, figures per point
    assert set(judged["family_size"]) == {len(judged)}


def test_campaign_without_serving_points_keeps_its_table(trees: dict[str, Path]) -> None:
    a, b = load_runs(trees["a"]), load_runs(trees["worse"])
    table = compare_campaigns(a.runs, b.runs)
    assert "point" not in table and set(table["metric"]) == {"kv_cache_gib"}


def test_serving_only_campaigns_are_compared(tmp_path: Path) -> None:
    """Records with no run-level metric (llama.cpp's): the points are what is compared, never "nothing"."""
    a = run_level_metrics_removed(build_serving_tree(tmp_path / "a", seed=1, **SHAPE))
    b = run_level_metrics_removed(build_serving_tree(tmp_path / "b", seed=3, factor=container_worse, **SHAPE))
    status, out = compare_json(a, b)
    assert status == 1
    assert set(served(out["comparisons"]).query("verdict == 'regression'")["environment"]) == {"container"}
    status, _ = compare_json(a, run_level_metrics_removed(build_serving_tree(tmp_path / "c", seed=2, **SHAPE)))
    assert status == 0


def test_a_point_on_one_side_only_is_named_not_judged(tmp_path: Path) -> None:
    a = build_serving_tree(tmp_path / "a", seed=1, **SHAPE)
    b = build_serving_tree(tmp_path / "b", seed=2, profile={"depth": (0,), "concurrency": (1, 4), "pp": (512,),
                                                            "tg": (64,)}, **SHAPE)
    status, out = compare_json(a, b)
    assert status == 0
    table = pd.DataFrame(out["comparisons"])
    only = table[table["metric"].isna()]
    assert set(only["verdict"]) == {"only in baseline"} and set(only["depth"]) == {4096}
    assert set(served(out["comparisons"])["depth"]) == {0}


# --- sparkfleet report --baseline ------------------------------------------------------------------------------

def test_report_against_a_baseline_shows_the_serving_regression(trees: dict[str, Path], tmp_path: Path) -> None:
    report = analyse(load_runs(trees["worse"]), Options(baseline=str(trees["a"])))
    regression = [line for line in report.verdicts if line.question == "regression" and line.label == "regression"]
    assert regression and all(v.outcome == "different" and v.better is False for line in regression
                               for v in line.verdicts)
    assert {v.metric for line in regression for v in line.verdicts} == set(LLAMA_BENCHY)
    assert not any(line.question == "none" for line in report.verdicts)
    rows = report.serving.baseline
    assert set(rows.loc[rows["verdict"] == "regression", "environment"]) == {"container"}
    written = report_serving.write_tables(report.serving, tmp_path)
    assert report_serving.BASELINE_CSV in {p.name for p in written}


def test_report_against_a_copy_says_no_regression(trees: dict[str, Path]) -> None:
    report = analyse(load_runs(trees["copy"]), Options(baseline=str(trees["a"])))
    labels = [line.label for line in report.verdicts if line.question == "regression"]
    assert "no regression" in labels and "regression" not in labels
    assert len(report.serving.baseline) == 2 * 4 * len(LLAMA_BENCHY)


def test_report_cli_with_a_baseline_of_serving_only_campaigns(tmp_path: Path) -> None:
    a = run_level_metrics_removed(build_serving_tree(tmp_path / "a", seed=1, **SHAPE))
    b = run_level_metrics_removed(build_serving_tree(tmp_path / "b", seed=3, factor=container_worse, **SHAPE))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["report", str(b), "--baseline", str(a), "--json"]) == 0
    out = json.loads(buffer.getvalue())
    labels = {line["label"] for line in out["verdicts"] if line["question"] == "regression"}
    assert "regression" in labels
    assert not any(line["question"] == "none" for line in out["verdicts"])
    assert len(served(out["baseline"]["comparisons"])) == 2 * 4 * len(LLAMA_BENCHY)


# --- sparkfleet report --hosts --reference ---------------------------------------------------------------------

def test_hosts_against_a_reference_campaign_count_the_serving_metrics(trees: dict[str, Path]) -> None:
    assert main(["report", "--hosts", str(trees["worse"]), "--reference", str(trees["a"])]) == 1
    assert main(["report", "--hosts", str(trees["copy"]), "--reference", str(trees["a"])]) == 0
    loaded = load_runs(trees["worse"])
    check = check_hosts(loaded.root, loaded.runs, reference=trees["a"], always=True, points=loaded.serving)
    compared = check.comparisons
    assert set(LLAMA_BENCHY) <= set(compared["metric"])
    different = compared[compared["outcome"] == "different"]
    assert set(different["metric"]) == set(LLAMA_BENCHY)
    assert set(different["environment"]) == {"container"}
    assert set(compared["family_size"]) == {len(compared)}  # serving and run metrics: one family


def test_published_serving_figure_is_compared_at_its_point(trees: dict[str, Path], tmp_path: Path) -> None:
    figures = tmp_path / "published.yml"
    figures.write_text(yaml.safe_dump([
        {"metric": "tg_req_tok_s", "model": "qwen", "workload": "serve-quick.vllm", "environment": "native",
         "point": "d0.c1.pp512.tg64", "value": 30.0, "source": "vendor"},
        {"metric": "tg_req_tok_s", "model": "qwen", "workload": "serve-quick.vllm", "value": 30.0,
         "source": "no point"}]))
    loaded = load_runs(trees["a"])
    check = check_hosts(loaded.root, loaded.runs, reference=figures, always=True, points=loaded.serving)
    against = check.comparisons[check.comparisons["against"] != "the other hosts"]
    assert list(against["metric"]) == ["tg_req_tok_s"] and list(against["outcome"]) == ["same"]
    assert len(check.unmatched) == 1 and "no point" in check.unmatched[0]
