"""Serving samples that cannot be (issue 32): flagged by the one reader (serving.impossible_samples), left out of
every statistic, named in the report ("Serving samples left out", serving_left_out.csv, a warning); and an interval
of a non-negative metric never shown below 0. Real llama-benchy captures pass untouched; stand-ins carry the
cases seen in the field (a per-request sample of 14,244 tok/s at a point whose aggregate was 1,620; a run with 7 of
8 samples). The tests state the data and assert what is flagged and left out, not the rule's arithmetic."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from serving_tree import BASE, CLIENT_RUNS, PER_REQUEST, build_serving_tree

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.serving_client import LlamaBenchy
from sparkfleet import serving
from sparkfleet.load import load_runs
from sparkfleet.report import analyse, sample_checks, serving_plots, write_report

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "serving"
#: The captures' llama-benchy --runs (tests/fixtures/serving/README.md: --runs 2).
FIXTURE_RUNS = 2


def record(points: list[dict], runs: int) -> dict:
    return {"run_id": "r1", "campaign": "c", "host": "h", "model": "m", "environment": "native",
            "workload": "serve", "iteration": 1, "environment_kind": "native", "status": "ok", "warmup": False,
            "workload_params": {"runs": runs}, "serving": {"engine": "llama.cpp", "points": points}}


def point(depth: int, concurrency: int, metrics: dict, samples: dict, pp: int = 512, tg: int = 64) -> dict:
    return {"point": f"d{depth}.c{concurrency}.pp{pp}.tg{tg}", "depth": depth, "concurrency": concurrency, "pp": pp,
            "tg": tg, "order": 0, "status": "ok", "metrics": metrics, "samples": samples}


def flagged(points: list[dict], runs: int) -> pd.DataFrame:
    return serving.impossible_samples(serving.points_frame(serving.point_rows(record(points, runs), "h/runs/r1")))


# --- real captures pass ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("llama-benchy-*.json")))
def test_real_llama_benchy_captures_pass(name: str) -> None:
    """Every measured point of the committed llama-benchy 0.4.0 captures (a loaded 2-vCPU machine: spread wide,
    one per-request decode rate at 1.23 x its run's aggregate at concurrency 2) is kept."""
    data = json.loads((FIXTURES / name).read_text())
    points = []
    for entry in data["benchmarks"]:
        if entry["is_context_prefill_phase"]:
            continue
        profile = {"depth": entry["context_size"], "concurrency": entry["concurrency"],
                   "pp": entry["prompt_size"], "tg": entry["response_size"]}
        parsed = LlamaBenchy.parse_point(json.dumps(data).encode(), profile)
        points.append(point(profile["depth"], profile["concurrency"], parsed["metrics"], parsed["samples"],
                            profile["pp"], profile["tg"]))
    assert points
    found = flagged(points, FIXTURE_RUNS)
    assert found.empty, found.to_dict("records")


# --- the cases, as data -----------------------------------------------------------------------------------------

def test_a_per_request_sample_far_above_its_runs_aggregate_is_flagged() -> None:
    """The field case: one request at 14,244 tok/s in a point whose aggregate was 1,620 (concurrency 2, 2 runs)."""
    samples = {"tg_tok_s": [1580.0, 1660.0], "tg_req_tok_s": [790.0, 14244.0, 812.0, 805.0]}
    metrics = {"tg_tok_s": 1620.0, "tg_req_tok_s": 4162.75}
    found = flagged([point(0, 2, metrics, samples)], 2)
    assert found[["metric", "left_out", "check"]].values.tolist() == [
        ["tg_req_tok_s", "tg_req_tok_s", "request_above_aggregate"]]
    assert "14,244 tok/s in run 1" in found["why"].item()


def test_a_per_user_figure_above_the_aggregate_at_concurrency_one_is_flagged() -> None:
    """At concurrency 1 llama-benchy's per-request and aggregate figures are one figure: above it cannot be."""
    found = flagged([point(0, 1, {"tg_tok_s": 60.0, "tg_req_tok_s": 70.0, "pp_tok_s": 900.0,
                                  "pp_req_tok_s": 900.0}, {})], 3)
    assert found[["left_out", "check"]].values.tolist() == [["tg_req_tok_s", "per_user_above_aggregate"]]


def test_a_run_with_7_of_8_samples_loses_the_short_figures_of_its_point() -> None:
    per_request = [30.0, 31.0, 29.0, 30.5, 30.0, 29.5, 31.0]  # concurrency 4 x 2 runs = 8 requests, 7 answered
    samples = {"tg_tok_s": [120.0, 121.0], "tg_req_tok_s": per_request, "ttfr_ms": [200.0] * 7}
    found = flagged([point(0, 4, {"tg_tok_s": 120.5, "tg_req_tok_s": 30.1, "ttfr_ms": 200.0}, samples)], 2)
    # the two per-request metrics stand for 7 of the 8 requests: each left out there; the aggregate stays
    assert found[["left_out", "check"]].values.tolist() == [["tg_req_tok_s", "sample_count"],
                                                             ["ttfr_ms", "sample_count"]]
    assert "tg_req_tok_s 7 of 8 requests" in found["why"].iloc[0]


def test_negative_and_non_finite_figures_and_samples_are_flagged() -> None:
    found = flagged([point(0, 1, {"tg_tok_s": -5.0, "tg_req_tok_s": 30.0, "ttfr_ms": 200.0},
                           {"ttfr_ms": [200.0, math.nan, 210.0], "tg_req_tok_s": [30.0, -1.0, 31.0]})], 3)
    got = {(r.left_out, r.check) for r in found.itertuples()}
    assert got == {("tg_tok_s", "figure_negative"), ("ttfr_ms", "sample_not_finite"),
                   ("tg_req_tok_s", "sample_negative")}
    assert flagged([point(0, 1, {"tg_tok_s": math.inf}, {})], 3)["check"].tolist() == ["figure_not_finite"]


# --- left out of the statistics and named in the report ------------------------------------------------------

SPIKED_POINT = "d0.c4.pp512.tg64"
SHORT_POINT = "d4096.c4.pp512.tg64"


def _edit(root: Path, iteration: int, point_name: str, change) -> str:
    """Apply ``change`` to one point of the llama.cpp / native run of ``iteration``; returns its run_id."""
    for path in sorted(root.glob("*/runs/*/record.json")):
        data = json.loads(path.read_text())
        if (data["engine"], data["environment"], data["iteration"]) == ("llama.cpp", "native", iteration):
            for entry in data["serving"]["points"]:
                if entry["point"] == point_name:
                    change(entry)
            path.write_text(json.dumps(data))
            return data["run_id"]
    raise AssertionError("no such run")


@pytest.fixture(scope="module")
def spoiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A serving tree (3 iterations) with one per-request decode sample at 8 x its run's aggregate in iteration 2
    and one request missing in iteration 3, reported."""
    root = build_serving_tree(tmp_path_factory.mktemp("spoiled") / "serve", iterations=3, engines=("llama.cpp",),
                              environments=("native",), cv=0.01)

    def spike(entry: dict) -> None:
        entry["samples"]["tg_req_tok_s"][5] = 8 * BASE["tg_tok_s"]

    def drop_one(entry: dict) -> None:
        for metric in PER_REQUEST:
            entry["samples"][metric] = entry["samples"][metric][:-1]

    runs = {"spiked": _edit(root, 2, SPIKED_POINT, spike), "short": _edit(root, 3, SHORT_POINT, drop_one)}
    write_report(analyse(load_runs(root)), root / "report")
    return root, runs


def _cell(cells: pd.DataFrame, point_name: str, metric: str) -> pd.Series:
    depth, concurrency, pp, tg = (int(part[i:]) for part, i in zip(point_name.split("."), (1, 1, 2, 2), strict=True))
    return cells[(cells["depth"] == depth) & (cells["concurrency"] == concurrency) & (cells["pp"] == pp)
                 & (cells["tg"] == tg) & (cells["metric"] == metric)].iloc[0]


def test_what_cannot_be_is_left_out_of_the_cells(spoiled: tuple[Path, dict[str, str]]) -> None:
    root, runs = spoiled
    points = load_runs(root).serving
    found = serving.impossible_samples(points)
    assert sorted(zip(found["run_id"], found["point"], found["left_out"], strict=True)) == sorted([
        (runs["spiked"], SPIKED_POINT, "tg_req_tok_s"), *((runs["short"], SHORT_POINT, m) for m in PER_REQUEST)])
    cells = serving.cell_statistics(points)
    assert _cell(cells, SPIKED_POINT, "tg_req_tok_s")["n"] == 2  # that iteration's per-user figure left out
    assert _cell(cells, SPIKED_POINT, "tg_tok_s")["n"] == 3  # its aggregate kept
    assert all(_cell(cells, SHORT_POINT, m)["n"] == 2 for m in ("tg_req_tok_s", "ttfr_ms"))  # one request short
    assert _cell(cells, SHORT_POINT, "tg_tok_s")["n"] == 3  # the aggregate has all its runs: kept
    assert _cell(cells, "d0.c1.pp512.tg64", "tg_tok_s")["n"] == 3  # nothing else touched


def test_the_report_names_what_was_left_out_and_why(spoiled: tuple[Path, dict[str, str]]) -> None:
    root, runs = spoiled
    summary = (root / "report" / "summary.md").read_text()
    assert f"## {sample_checks.TITLE}" in summary
    assert summary.index("## Serving\n") < summary.index(f"## {sample_checks.TITLE}")
    section = summary[summary.index(f"## {sample_checks.TITLE}"):]
    assert runs["spiked"] in section and runs["short"] in section
    assert "per-request rate above concurrency x its run's aggregate" in section
    assert "11 of 12 requests" in section
    assert "[serving-impossible] 2 serving run x point row(s)" in summary
    left = pd.read_csv(root / "report" / sample_checks.CSV_NAME)
    assert set(left["run_id"]) == set(runs.values())


def test_a_campaign_whose_samples_all_pass_has_no_such_section(tmp_path: Path) -> None:
    root = build_serving_tree(tmp_path / "serve", iterations=3, engines=("llama.cpp",), environments=("native",))
    write_report(analyse(load_runs(root)), root / "report")
    assert sample_checks.TITLE not in (root / "report" / "summary.md").read_text()
    assert pd.read_csv(root / "report" / sample_checks.CSV_NAME).empty
    assert CLIENT_RUNS == 3  # the tree's per-request samples: concurrency x 3 (serving_tree.samples_of)


# --- an interval of a non-negative metric is never shown below 0 ----------------------------------------------

def test_an_interval_reaching_below_zero_is_clipped_and_says_so() -> None:
    """The field case's interval [-1576, 3596] of a throughput, and a latency interval inside its range."""
    table = pd.DataFrame({"metric": ["tg_req_tok_s", "ttfr_ms"], "ci95_low": [-1576.0, 10.0],
                          "ci95_high": [3596.0, 20.0]})
    clipped = serving.clip_to_range(table)
    assert clipped["ci95_low"].tolist() == [0.0, 10.0] and clipped["ci95_high"].tolist() == [3596.0, 20.0]
    assert clipped["ci95_note"].tolist() == [
        "lower bound clipped at 0 (computed -1,576): the normal interval does not fit", ""]


def test_cells_plots_and_report_never_show_a_throughput_below_zero(tmp_path: Path) -> None:
    """Three iterations of one point spread 10 / 20 / 3000 tok/s: the t-interval reaches below 0."""
    root = build_serving_tree(tmp_path / "serve", iterations=3, engines=("llama.cpp",), environments=("native",))
    for iteration, value in ((1, 10.0), (2, 20.0), (3, 3000.0)):
        def spread(entry: dict, value: float = value) -> None:
            entry["metrics"]["tg_tok_s"] = value
            entry["samples"]["tg_tok_s"] = [value] * CLIENT_RUNS
        _edit(root, iteration, "d4096.c4.pp512.tg64", spread)
    cells = serving.cell_statistics(load_runs(root).serving)
    row = _cell(cells, "d4096.c4.pp512.tg64", "tg_tok_s")
    assert row["ci_low"] < 0 and row["ci95_low"] == 0 and row["ci95_note"].startswith("lower bound clipped at 0")
    assert (cells["ci95_low"].dropna() >= 0).all()
    assert "band(s) clipped at 0" in serving_plots._band_words(cells)
    write_report(analyse(load_runs(root)), root / "report")
    section = (root / "report" / "summary.md").read_text()
    section = section[section.index(f"## {sample_checks.TITLE}"):]
    assert "d4096.c4.pp512.tg64, tg_tok_s: lower bound clipped at 0" in section
