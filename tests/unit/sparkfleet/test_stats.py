"""Statistics against values worked out by hand (or from a textbook/R), never from the code under test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sparkfleet.stats import (
    MIN_N_BOOTSTRAP,
    bootstrap_allowed,
    cell_statistics,
    flag_outliers,
    interval_allowed,
    physical_range,
    range_violation,
    required_n,
    robust_z,
    status_counts,
    welch,
)


def runs_frame(values_by_cell: dict[tuple[str, str], list[float]], metric: str = "output_tok_s",
               status: str = "ok") -> pd.DataFrame:
    rows = []
    for (model, environment), values in values_by_cell.items():
        for i, value in enumerate(values):
            rows.append({"run_id": f"{model}.{environment}.{i}", "host": "h1", "model": model,
                         "environment": environment, "workload": "w", "status": status, "warmup": False,
                         metric: value})
    return pd.DataFrame(rows)


def test_cell_statistics_on_one_to_five() -> None:
    # Hand: mean 3; sample variance (4+1+0+1+4)/4 = 2.5 -> std sqrt(2.5) = 1.5811388;
    # CV = 1.5811388 / 3 = 0.5270463; t(0.975, 4) = 2.7764451 (table) -> half width
    # 2.7764451 * 1.5811388 / sqrt(5) = 1.9632432 -> CI [1.0367568, 4.9632432].
    table = cell_statistics(runs_frame({("m", "native"): [5.0, 1.0, 4.0, 2.0, 3.0]}), ["output_tok_s"])
    row = table.iloc[0]
    assert row["n"] == 5
    assert row["mean"] == pytest.approx(3.0)
    assert row["std"] == pytest.approx(1.5811388, abs=1e-7)
    assert row["cv"] == pytest.approx(0.5270463, abs=1e-7)
    assert row["median"] == 3.0 and row["min"] == 1.0 and row["max"] == 5.0
    assert row["ci_low"] == pytest.approx(1.0367568, abs=1e-6)
    assert row["ci_high"] == pytest.approx(4.9632432, abs=1e-6)
    # n = 5 < MIN_N_BOOTSTRAP: no bootstrap interval of the median (the tables say "n too small").
    assert math.isnan(row["median_ci_low"]) and math.isnan(row["median_ci_high"])
    assert not bool(row["cv_ok"])  # 52.7% > 5%


def test_cv_gate_pass_fail_and_undecided() -> None:
    # CV of [99, 100, 101] = 1/100 = 1% (pass); of [90, 100, 110] = 10/100 = 10% (fail); one run: undecided.
    frame = runs_frame({("a", "native"): [99, 100, 101], ("b", "native"): [90, 100, 110], ("c", "native"): [7]})
    table = cell_statistics(frame, ["output_tok_s"], cv_gate=0.05).set_index("model")
    assert table.loc["a", "cv"] == pytest.approx(0.01)
    assert bool(table.loc["a", "cv_ok"]) is True
    assert table.loc["b", "cv"] == pytest.approx(0.10)
    assert bool(table.loc["b", "cv_ok"]) is False
    assert pd.isna(table.loc["c", "cv_ok"]) and math.isnan(table.loc["c", "ci_low"])


def test_only_ok_runs_enter_statistics_and_others_are_counted() -> None:
    ok = runs_frame({("m", "native"): [10.0, 12.0]})
    failed = runs_frame({("m", "native"): [1000.0]}, status="failed").assign(run_id="f1")
    invalid = runs_frame({("m", "native"): [500.0]}, status="invalid").assign(run_id="i1")
    warm = runs_frame({("m", "native"): [999.0]}).assign(run_id="w1", warmup=True)
    frame = pd.concat([ok, failed, invalid, warm], ignore_index=True)
    row = cell_statistics(frame, ["output_tok_s"]).iloc[0]
    assert row["n"] == 2 and row["mean"] == 11.0
    counts = status_counts(frame).iloc[0]
    assert (counts["n_runs"], counts["n_measured"], counts["n_ok"], counts["n_failed"], counts["n_invalid"],
            counts["n_warmup"]) == (5, 2, 3, 1, 1, 1)


def test_outliers_by_median_and_mad_are_flagged_not_dropped() -> None:
    # median 10; |x - 10| = 0, .1, .1, 0, .05, .05, 5 -> MAD 0.05; z(15) = 0.6745 * 5 / 0.05 = 67.45;
    # z(10.1) = 0.6745 * 0.1 / 0.05 = 1.349 (kept quiet).
    values = [10, 10.1, 9.9, 10, 10.05, 9.95, 15]
    frame = runs_frame({("m", "native"): values})
    out = flag_outliers(frame, ["output_tok_s"])
    assert list(out["value"]) == [15]
    assert out.iloc[0]["robust_z"] == pytest.approx(67.45)
    row = cell_statistics(frame, ["output_tok_s"]).iloc[0]
    assert row["n"] == 7 and row["n_outliers"] == 1  # still counted in n, mean, ...
    assert row["max"] == 15


def test_robust_z_falls_back_to_mean_absolute_deviation_when_mad_is_zero() -> None:
    # median 5, MAD 0; mean |x - 5| = 4/5 = 0.8; z(9) = 4 / (1.253314 * 0.8) = 3.98942.
    z = robust_z(np.array([5, 5, 5, 5, 9.0]))
    assert z[-1] == pytest.approx(3.98942, abs=1e-4)
    assert list(z[:4]) == [0, 0, 0, 0]
    assert list(robust_z(np.array([2.0, 2.0, 2.0]))) == [0, 0, 0]


def test_welch_matches_hand_and_r() -> None:
    # a = 1..5 (mean 3, var 2.5), b = 2,4,..,10 (mean 6, var 10): se^2 = 2.5/5 + 10/5 = 2.5,
    # t = 3 / 1.5811388 = 1.8973666, df = 2.5^2 / (0.5^2/4 + 2^2/4) = 6.25 / 1.0625 = 5.8823529.
    # R: t.test(c(2,4,6,8,10), 1:5) -> t = 1.8974, df = 5.8824, p-value = 0.1075,
    # 95 percent CI -0.8877416 6.8877416.
    result = welch(np.array([1, 2, 3, 4, 5.0]), np.array([2, 4, 6, 8, 10.0]))
    assert result.diff == 3.0
    assert result.t == pytest.approx(1.8973666, abs=1e-6)
    assert result.df == pytest.approx(5.8823529, abs=1e-6)
    assert result.p_value == pytest.approx(0.10753, abs=1e-5)
    assert result.ci_low == pytest.approx(-0.8877416, abs=1e-5)
    assert result.ci_high == pytest.approx(6.8877416, abs=1e-5)


def test_welch_degenerate_cases() -> None:
    same = welch(np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    assert same.p_value == 1.0 and same.ci_low == same.ci_high == 0.0
    shifted = welch(np.array([1.0, 1.0]), np.array([2.0, 2.0]))
    assert shifted.p_value == 0.0 and shifted.diff == 1.0
    assert math.isnan(welch(np.array([1.0]), np.array([2.0, 3.0])).p_value)


def plain_bootstrap(values, seed: int, resamples: int = 2000) -> tuple[float, float]:
    """A plain seeded percentile bootstrap of the median: the draws the code makes ([seed, n]), np.median of
    each resample, the 2.5 and 97.5 percentiles."""
    x = np.sort(np.asarray(values, dtype=float))
    draws = np.random.default_rng([seed, x.size]).integers(0, x.size, size=(resamples, x.size))
    return tuple(np.quantile(np.median(x[draws], axis=1), [0.025, 0.975]))


def test_the_median_interval_is_seeded_and_equals_a_plain_bootstrap() -> None:
    values = [3.1, 2.7, 3.3, 2.9, 3.0, 3.6, 2.8, 3.2, 3.4, 2.95]
    cells = {("a", "native"): values, ("k", "native"): [4.0] * 10}

    def interval(model: str) -> tuple[float, float]:
        row = cell_statistics(runs_frame(cells), ["output_tok_s"], resamples=1000, seed=7).set_index("model")
        return row.loc[model, "median_ci_low"], row.loc[model, "median_ci_high"]

    first = interval("a")
    assert first == interval("a") and first == pytest.approx(plain_bootstrap(values, 7, 1000))
    assert first[0] <= np.median(values) <= first[1]
    assert interval("k") == (4.0, 4.0)  # a constant sample's median is that constant in every resample


def test_cell_statistics_bootstrap_matches_a_plain_bootstrap_per_cell() -> None:
    rng = np.random.default_rng(1)
    cells = {("a", "native"): list(rng.normal(100, 3, 12)), ("b", "native"): list(rng.normal(50, 1, 10)),
             ("c", "native"): list(rng.normal(10, 1, 4))}
    table = cell_statistics(runs_frame(cells), ["output_tok_s"], seed=3).set_index("model")
    for model, values in [(k[0], v) for k, v in cells.items() if k[0] != "c"]:
        low, high = plain_bootstrap(values, seed=3)
        assert table.loc[model, "median_ci_low"] == pytest.approx(low)
        assert table.loc[model, "median_ci_high"] == pytest.approx(high)
    # Four runs: below MIN_N_BOOTSTRAP, so no bootstrap (but a t-interval: n >= MIN_N_INTERVAL).
    assert math.isnan(table.loc["c", "median_ci_low"]) and not math.isnan(table.loc["c", "ci_low"])


def test_required_n_against_lehr_and_the_normal_formula() -> None:
    # n = 2 (z_.975 + z_.8)^2 (cv/effect)^2 = 2 (1.959964 + 0.841621)^2 = 15.698 -> 16 when cv = effect
    # (Lehr's rule "16 / d^2" at d = 1); cv 10% for a 5% effect: 15.698 * 4 = 62.79 -> 63 per side.
    assert required_n(0.05, 0.05) == 16
    assert required_n(0.10, 0.05) == 63
    assert required_n(0.02, 0.05) == 3  # 15.698 * 0.16 = 2.51
    assert required_n(0.10, -0.05) == 63  # the direction of the effect does not matter
    # alpha 0.01, power 0.9: 2 (2.575829 + 1.281552)^2 = 29.76 -> 30.
    assert required_n(0.05, 0.05, alpha=0.01, power=0.9) == 30
    assert required_n(float("nan"), 0.05) is None and required_n(0.05, 0) is None
    many = required_n(np.array([0.05, 0.10, np.nan]), 0.05)
    assert list(many[:2]) == [16, 63] and math.isnan(many[2])


def test_small_n_rule_no_t_interval_below_three_runs() -> None:
    frame = runs_frame({("two", "native"): [100.0, 140.0], ("three", "native"): [100.0, 140.0, 120.0]})
    table = cell_statistics(frame, ["output_tok_s"]).set_index("model")
    # The n = 2 interval would be 120 ± 12.706 * 28.28 / sqrt(2) = [-134.1, 374.1]: not shown.
    assert math.isnan(table.loc["two", "ci_low"]) and math.isnan(table.loc["two", "ci_high"])
    assert table.loc["three", "ci_low"] == pytest.approx(120 - 4.302653 * 20 / math.sqrt(3), abs=1e-4)
    assert not interval_allowed(2) and interval_allowed(3) and list(interval_allowed(np.array([2, 3]))) == [0, 1]
    assert not bootstrap_allowed(MIN_N_BOOTSTRAP - 1) and bootstrap_allowed(MIN_N_BOOTSTRAP)


def test_physical_range_is_reported_never_clipped() -> None:
    assert range_violation("output_tok_s", -229.7, 381.1) == "lower bound below 0"
    assert range_violation("output_tok_s", 1.0, 381.1) == ""
    assert range_violation("kv_fraction", 0.8, 1.2) == "upper bound above 1"
    assert physical_range("peak_memory_gib") == (0.0, math.inf)
