"""The Pareto front of serving (issue 37, item 4): the rule as data (hand-made points with known intervals:
separated, overlapping, touching, without an interval, the same configuration), the curves from a points table, and
the report's section, figure, pareto.csv and JSON on a synthetic campaign (serving_tree.py) where one engine is
stated to be half as fast on both axes."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from serving_tree import build_serving_tree

from sparkfleet import pareto
from sparkfleet.cli import main
from sparkfleet.load import load_runs
from sparkfleet.report import serving_pareto

PANEL = {"model": "m", "depth": 0, "pp": 512, "tg": 64, "aggregate_metric": "tg_tok_s",
         "per_user_metric": "tg_req_tok_s"}
NAN = math.nan


def point(configuration: str, concurrency: int, x: tuple[float, float, float], y: tuple[float, float, float],
          **panel: object) -> dict:
    """One point: x and y as (low, estimate, high)."""
    return {**PANEL, **panel, "configuration": configuration, "concurrency": concurrency,
            "aggregate_low": x[0], "aggregate": x[1], "aggregate_high": x[2],
            "per_user_low": y[0], "per_user": y[1], "per_user_high": y[2]}


def marked(*points: dict) -> pd.DataFrame:
    return pareto.front(pd.DataFrame(list(points))).set_index(["configuration", "concurrency"])


# --- the rule, as data ---------------------------------------------------------------------------------------

def test_a_point_apart_on_both_axes_is_dominated_and_its_dominator_named() -> None:
    out = marked(point("A", 4, (95, 100, 105), (48, 50, 52)), point("B", 4, (78, 80, 85), (38, 40, 45)))
    assert out.loc[("B", 4), "status"] == pareto.DOMINATED
    assert out.loc[("B", 4), "dominated_by"] == "A at concurrency 4"
    assert out.loc[("A", 4), "status"] == pareto.FRONT and bool(out.loc[("A", 4), "on_front"])


def test_overlapping_intervals_are_not_separated_never_dominated() -> None:
    # B is behind A on both estimates, but its aggregate interval reaches into A's
    out = marked(point("A", 4, (95, 100, 105), (48, 50, 52)), point("B", 4, (78, 80, 96), (38, 40, 45)))
    assert out.loc[("B", 4), "status"] == pareto.NOT_SEPARATED
    assert out.loc[("B", 4), "dominated_by"] == "" and not out.loc[("B", 4), "on_front"]
    assert out.loc[("A", 4), "status"] == pareto.FRONT


def test_touching_bounds_dominate_only_with_one_axis_strictly_apart() -> None:
    both_touch = marked(point("A", 1, (95, 100, 105), (45, 50, 52)), point("B", 1, (90, 92, 95), (40, 42, 45)))
    assert both_touch.loc[("B", 1), "status"] == pareto.NOT_SEPARATED
    one_apart = marked(point("A", 1, (95, 100, 105), (46, 50, 52)), point("B", 1, (90, 92, 95), (40, 42, 45)))
    assert one_apart.loc[("B", 1), "status"] == pareto.DOMINATED


def test_the_front_is_over_the_plane_not_per_concurrency() -> None:
    # A at concurrency 8 beats B at concurrency 2 on both axes, apart: B is dominated there, by A at 8
    out = marked(point("A", 8, (190, 200, 210), (30, 31, 32)), point("A", 1, (58, 60, 62), (58, 60, 62)),
                 point("B", 2, (90, 95, 100), (20, 22, 24)))
    assert out.loc[("B", 2), "dominated_by"] == "A at concurrency 8"
    assert out.loc[("A", 1), "status"] == out.loc[("A", 8), "status"] == pareto.FRONT  # a trade-off: both on it


def test_a_configuration_is_never_dominated_by_itself() -> None:
    # A at 1 is behind A at 4 on both axes and apart, but that is its own curve: behind the front, not dominated
    out = marked(point("A", 4, (95, 100, 105), (48, 50, 52)), point("A", 1, (58, 60, 62), (28, 30, 32)))
    assert out.loc[("A", 1), "status"] == pareto.NOT_SEPARATED


def test_without_an_interval_nothing_is_dominated() -> None:
    out = marked(point("A", 4, (NAN, 100, NAN), (NAN, 50, NAN)), point("B", 4, (NAN, 10, NAN), (NAN, 5, NAN)))
    assert out.loc[("B", 4), "status"] == pareto.NOT_SEPARATED
    assert out.loc[("A", 4), "status"] == pareto.FRONT


def test_panels_are_separate_fronts() -> None:
    # B at depth 4096 is far behind A at depth 0, but they are not on one front
    out = marked(point("A", 1, (95, 100, 105), (48, 50, 52)),
                 point("B", 1, (8, 10, 12), (4, 5, 6), depth=4096))
    assert set(out["status"]) == {pareto.FRONT}


def test_by_configuration_names_the_dominated_configuration_at_every_level_it_ran() -> None:
    table = pareto.front(pd.DataFrame([point("A", 1, (58, 60, 62), (29, 30, 31)),
                                       point("A", 4, (150, 160, 170), (19, 20, 21)),
                                       point("B", 1, (28, 30, 32), (14, 15, 16)),
                                       point("B", 4, (75, 80, 85), (9, 10, 11)),
                                       point("C", 4, (150, 158, 171), (18, 20, 22))]))
    summary = pareto.by_configuration(table).set_index("configuration")
    assert summary.loc["B", "dominated_at"] == "1, 4" and bool(summary.loc["B", "dominated_everywhere"])
    assert summary.loc["B", "dominated_by"] == "A and C"
    assert summary.loc["A", "front_at"] == "1, 4" and summary.loc["A", "dominated_at"] == ""
    assert summary.loc["C", "not_separated_at"] == "4" and summary.loc["C", "dominated_at"] == ""


# --- the curves from a points table ---------------------------------------------------------------------------

def llama_cpp_half(engine: str, environment: str, metric: str, p: dict[str, int]) -> float:
    """Aggregate output up and per-user output down with concurrency; llama.cpp half of vllm on both."""
    c, scale = p["concurrency"], 0.5 if engine == "llama.cpp" else 1.0
    return {"tg_tok_s": scale * c ** 0.7, "tg_req_tok_s": scale * c ** -0.3}.get(metric, 1.0)


def test_curves_take_the_serving_cells_statistics_per_configuration(tmp_path: Path) -> None:
    root = build_serving_tree(tmp_path / "serve", factor=llama_cpp_half, environments=("native",), iterations=3)
    table = pareto.pareto_table(load_runs(root).serving)
    assert list(table.columns) == list(pareto.COLUMNS)
    assert len(table) == 2 * 2 * 2  # engines x depths x concurrencies, one client pair
    assert set(table["aggregate_metric"]) == {"tg_tok_s"} and set(table["per_user_metric"]) == {"tg_req_tok_s"}
    assert set(table["ci95_of"]) == {"mean (t)"} and (table["n"] == 3).all()
    assert (table["aggregate"] == table["aggregate_mean"]).all()  # the estimate is the interval's statistic
    vllm = table[table["engine"] == "vllm"].set_index(["depth", "concurrency"])
    assert vllm.loc[(0, 4), "aggregate"] > vllm.loc[(0, 1), "aggregate"]
    assert vllm.loc[(0, 4), "per_user"] < vllm.loc[(0, 1), "per_user"]
    assert set(table.loc[table["engine"] == "llama.cpp", "status"]) == {pareto.DOMINATED}
    assert set(table.loc[table["engine"] == "vllm", "status"]) == {pareto.FRONT}


def test_one_clients_rates_are_never_set_against_anothers(tmp_path: Path) -> None:
    # llama.cpp measured by AIPerf (out_tok_s / out_req_tok_s), vllm by llama-benchy: two panels of one configuration
    # each, though llama.cpp is half as fast
    root = build_serving_tree(tmp_path / "serve", factor=llama_cpp_half, environments=("native",), iterations=3)
    points = load_runs(root).serving
    aiperf = points["engine"] == "llama.cpp"
    points.loc[aiperf, "out_tok_s"] = points.loc[aiperf, "tg_tok_s"]
    points.loc[aiperf, "out_req_tok_s"] = points.loc[aiperf, "tg_req_tok_s"]
    points.loc[aiperf, ["tg_tok_s", "tg_req_tok_s"]] = NAN
    points.loc[aiperf, ["samples_tg_tok_s", "samples_tg_req_tok_s"]] = None
    table = pareto.pareto_table(points)
    pairs = table.groupby("engine")[["aggregate_metric", "per_user_metric"]].first()
    assert pairs.loc["llama.cpp"].tolist() == ["out_tok_s", "out_req_tok_s"]
    assert pairs.loc["vllm"].tolist() == ["tg_tok_s", "tg_req_tok_s"]
    assert pareto.DOMINATED not in set(table["status"])


# --- the report ------------------------------------------------------------------------------------------------

def section_of(root: Path) -> str:
    summary = (root / "report" / "summary.md").read_text()
    start = summary.index("## Serving: the Pareto front")
    end = summary.find("\n## ", start + 3)
    return summary[start:end if end > 0 else None]


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = build_serving_tree(tmp_path_factory.mktemp("pareto") / "serve", factor=llama_cpp_half, iterations=3,
                              environments=("native", "native.aa"), aa_pairs={"native.aa": "native"})
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["report", str(root), "--json"]) == 0
    return root, json.loads(buffer.getvalue())


def test_the_report_names_the_dominated_configuration_and_writes_pareto_csv(reported: tuple[Path, dict]) -> None:
    root, out = reported
    section = section_of(root)
    assert "dominated: llama.cpp / native / serve-quick.llama.cpp at concurrency 1, 4 (every level it ran) by " \
           "vllm / native / serve-quick.vllm" in section
    assert "on the front: vllm / native / serve-quick.vllm at concurrency 1, 4" in section
    assert "A/A twin environment(s) left out, they repeat their original: native.aa" in section
    assert "native.aa /" not in section  # the twin is no configuration of its own
    with (root / "report" / serving_pareto.CSV).open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and list(rows[0]) == list(pareto.COLUMNS)
    dominated = {(r["configuration"], r["dominated_by"]) for r in rows if r["status"] == pareto.DOMINATED}
    assert {c for c, _ in dominated} == {"llama.cpp / native / serve-quick.llama.cpp"}
    assert all("vllm / native / serve-quick.vllm at concurrency" in by for _, by in dominated)
    assert all(r["aggregate_low"] not in ("", "nan") for r in rows)
    html = (root / "report" / "index.html").read_text()
    assert f'<figure id="fig-{serving_pareto.FIGURE}"' in html
    assert (root / "report" / "plots" / f"{serving_pareto.FIGURE}.png").stat().st_size > 0
    assert {r["status"] for r in out["serving"]["pareto"]} == {pareto.DOMINATED, pareto.FRONT}


def test_one_configuration_has_nothing_to_compare(tmp_path: Path) -> None:
    root = build_serving_tree(tmp_path / "serve", engines=("vllm",), environments=("native",), iterations=3)
    assert main(["report", str(root)]) == 0
    section = section_of(root)
    assert "one configuration (vllm / native / serve-quick.vllm, 2 concurrency level(s)): nothing to compare it " \
           "with, no configuration is dominated." in section
    assert "dominated:" not in section and " by vllm" not in section


def test_two_iterations_call_nothing_dominated(tmp_path: Path) -> None:
    root = build_serving_tree(tmp_path / "serve", factor=llama_cpp_half, environments=("native",), iterations=2)
    assert main(["report", str(root)]) == 0
    section = section_of(root)
    assert "no point has an interval on both axes (fewer than 3 iterations): none can be called dominated" in section
    assert "no configuration is dominated at any concurrency" in section
    assert "dominated: " not in section
