"""The SLA capacity and its verdicts (issue 37 item 3): the rank test as data (checked against scipy's own exact
tests), and the report on synthetic campaigns (serving_tree.py) whose capacities are stated: the same distribution
on both sides, a clear gap, constant sides that Welch's test would call an exact difference, a capacity at the
search's cap. The report's words are read for what they must say, never the statistic recomputed."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from serving_tree import build_serving_tree

from sparkfleet import stats
from sparkfleet.cli import main
from sparkfleet.load import load_runs
from sparkfleet.report import serving_sla
from sparkfleet.report.compose import analyse

# --- the rank test, as data ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("a", "b"), [
    ([1.1, 2.0, 3.3, 4.0, 5.0], [3.1, 4.2, 5.5, 6.0, 7.5]),
    ([10.0, 11.0, 12.5], [9.0, 13.0, 14.0, 15.5]),
    ([5.0, 6.0, 7.0, 8.0], [1.0, 2.0, 3.0, 4.0]),
])
def test_untied_p_is_scipys_exact_mann_whitney(a: list[float], b: list[float]) -> None:
    assert stats.rank_shift(a, b).p_value == pytest.approx(sps.mannwhitneyu(b, a, method="exact").pvalue)


def test_tied_p_is_the_permutation_distribution_of_the_rank_sum() -> None:
    a, b = [8, 12, 8, 12, 12, 8], [12, 12, 16, 12, 16, 12]
    by_scipy = sps.permutation_test(
        (b, a), lambda x, y: sps.rankdata(np.concatenate([x, y]))[:len(x)].sum(), permutation_type="independent",
        n_resamples=np.inf, alternative="two-sided").pvalue
    assert stats.rank_shift(a, b).p_value == pytest.approx(by_scipy)


def test_constant_sides_of_three_cannot_be_significant() -> None:
    out = stats.rank_shift([8, 8, 8], [12, 12, 12])
    assert out.p_value == pytest.approx(0.1) and out.p_min == pytest.approx(0.1)
    assert out.ci_low is None  # no 95% interval from 3 a side
    four = stats.rank_shift([8] * 4, [12] * 4)
    assert four.p_value < 0.05 and (four.ci_low, four.ci_high, four.shift) == (4.0, 4.0, 4.0)


def test_interval_covers_the_shift_at_its_level_on_tied_data() -> None:
    rng = np.random.default_rng(7)
    levels, covered, trials = np.array([4, 6, 8, 12, 16]), 0, 400
    for _ in range(trials):  # the same distribution on both sides: the true shift is 0
        a, b = rng.choice(levels, 5, p=[.1, .2, .4, .2, .1]), rng.choice(levels, 5, p=[.1, .2, .4, .2, .1])
        out = stats.rank_shift(a, b)
        covered += out.ci_low <= 0 <= out.ci_high
    assert covered / trials >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / trials)


# --- the report, on stated capacities -------------------------------------------------------------------------

def capacity_of(table: dict[tuple[str, str], list[int]]):
    """Each run's capacity drawn from the list its (engine, environment) states."""
    def draw(engine: str, environment: str, rng: np.random.Generator) -> int:
        return int(rng.choice(table[(engine, environment)]))
    return draw


def tree(tmp_path: Path, table: dict[tuple[str, str], list[int]], iterations: int, cap: int = 64,
         engines: tuple[str, ...] = ("vllm",), environments: tuple[str, ...] = ("native", "container")) -> Path:
    return build_serving_tree(tmp_path / "results", engines=engines, environments=environments,
                              iterations=iterations, sla=(capacity_of(table), cap), seed=3)


def judged(root: Path):
    return analyse(load_runs(root)).serving


def test_capacities_are_read_per_cell_with_the_median_interval(tmp_path: Path) -> None:
    root = tree(tmp_path, {("vllm", "native"): [16], ("vllm", "container"): [8]}, iterations=6)
    cells = judged(root).capacity
    native = cells[cells["environment"] == "native"]
    assert sorted(native["depth"]) == [0, 4096]  # one cell per searched (depth, pp, tg)
    assert [list(v) for v in native["capacities"]] == [[16] * 6] * 2 and set(cells["n"]) == {6}
    native = native.iloc[0]
    assert (native["median"], native["low"], native["high"]) == (16, 16, 16)
    assert "TTFT p99 <= 2000 ms" in native["targets"]


def test_a_clear_gap_with_enough_iterations_is_different_and_named(tmp_path: Path) -> None:
    root = tree(tmp_path, {("vllm", "native"): [16], ("vllm", "container"): [8]}, iterations=6)
    rows = judged(root).capacity_comparisons
    assert set(rows["outcome"]) == {"different"} and set(rows["b"]) == {"container"}
    lines = [line for line in analyse(load_runs(root)).verdicts if line.question == serving_sla.QUESTION]
    assert lines and all("container median 8 vs native median 16" in line.text for line in lines)


def test_constant_sides_of_three_are_undetermined_not_an_exact_difference(tmp_path: Path) -> None:
    root = tree(tmp_path, {("vllm", "native"): [16], ("vllm", "container"): [8]}, iterations=3)
    rows = judged(root).capacity_comparisons
    assert set(rows["outcome"]) == {"undetermined"}
    assert set(rows["required_n"]) == {serving_sla.least_n(0.05 / 2)}  # a family of two depths


def test_equal_capacities_are_the_same_once_the_interval_can_say_so(tmp_path: Path) -> None:
    root = tree(tmp_path, {("vllm", "native"): [12], ("vllm", "container"): [12]}, iterations=4)
    assert set(judged(root).capacity_comparisons["outcome"]) == {"same"}


def test_equal_capacities_at_the_cap_are_never_the_same(tmp_path: Path) -> None:
    root = tree(tmp_path, {("vllm", "native"): [16], ("vllm", "container"): [16]}, iterations=6, cap=16)
    rows = judged(root).capacity_comparisons
    assert set(rows["outcome"]) == {"undetermined"} and set(rows["reason"]) == {"at-cap"}


def test_engines_are_compared_in_one_environment(tmp_path: Path) -> None:
    root = tree(tmp_path, {("vllm", "native"): [4], ("llama.cpp", "native"): [16]}, iterations=6,
                engines=("llama.cpp", "vllm"), environments=("native",))
    rows = judged(root).capacity_comparisons
    assert set(rows["question"]) == {"serving-engine"} and set(rows["outcome"]) == {"different"}
    assert set(rows["a"]) == {"llama.cpp"} and set(rows["held"]) == {"environment native"}


def test_no_true_difference_is_rarely_called_different(tmp_path: Path) -> None:
    """20 campaigns from one discrete distribution on both sides, 5 iterations: Welch's test on these would call
    constant sides an exact difference; the rank test's family is held to alpha, so at most a few fire."""
    levels = [8, 12, 16]
    fired = 0
    for seed in range(20):
        root = build_serving_tree(tmp_path / str(seed), engines=("vllm",), iterations=5, seed=seed,
                                  sla=(lambda _e, _v, rng: int(rng.choice(levels)), 64))
        fired += "different" in set(judged(root).capacity_comparisons["outcome"])
    assert fired <= 4  # binomial(20, 0.05): P(X >= 5) < 0.003


def test_report_shows_the_section_the_csvs_and_the_json(tmp_path: Path) -> None:
    root = tree(tmp_path, {("vllm", "native"): [16], ("vllm", "container"): [8]}, iterations=6)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(root), "--json"]) == 0
    data = json.loads(out.getvalue())["serving"]
    assert {row["outcome"] for row in data["capacity_comparisons"]} == {"different"}
    assert main(["report", str(root)]) == 0
    html = (root / "report" / "index.html").read_text()
    assert serving_sla.TITLE in html and "Capacity comparisons" in html
    with (root / "report" / serving_sla.COMPARISONS_CSV).open() as handle:
        assert {row["outcome"] for row in csv.DictReader(handle)} == {"different"}
    assert (root / "report" / serving_sla.CSV).is_file()


def test_a_campaign_without_sla_has_no_capacity(tmp_path: Path) -> None:
    root = build_serving_tree(tmp_path / "results", engines=("vllm",), iterations=3)
    study = judged(root)
    assert study.capacity.empty and study.capacity_comparisons.empty
    assert main(["report", str(root)]) == 0
    assert serving_sla.TITLE not in (root / "report" / "index.html").read_text()


def test_no_level_met_on_either_side_is_said_not_put_off_to_more_iterations(tmp_path: Path) -> None:
    root = tree(tmp_path, {("vllm", "native"): [0], ("vllm", "container"): [0]}, iterations=6)
    rows = judged(root).capacity_comparisons
    assert set(rows["reason"]) == {"none-met"} and rows["required_n"].isna().all()
