"""Environment comparison, KV decomposition and the regression gate (exit codes on synthetic baselines)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main
from sparkfleet.compare import (
    classify,
    compare_campaigns,
    compare_environments,
    kv_decomposition,
    kv_residual,
    kv_shift,
)


def write_campaign(root: Path, cells: dict[tuple[str, str], dict[str, list[float]]], host: str = "h1",
                   campaign: str = "c") -> Path:
    """cells: (model, environment) -> metric -> values (one run per value index)."""
    for (model, environment), metrics in cells.items():
        n = len(next(iter(metrics.values())))
        for i in range(n):
            values = {m: v[i] for m, v in metrics.items()}
            sources = {m: "test" for m in values if m in contract.MEMORY_METRICS}
            rec = {"schema_version": 1, "campaign": campaign, "host": host, "model": model,
                   "environment": environment, "workload": "w", "iteration": i + 1, "order_index": i,
                   "status": "ok", "metrics": values, "metric_sources": sources,
                   "environment_kind": "native" if environment == "native" else "container",
                   "run_id": contract.run_id(campaign, host, model, environment, "w", i + 1)}
            contract.write_json_atomic(root / host / "runs" / rec["run_id"] / "record.json", rec)
    return root


def frame(cells: dict[tuple[str, str], dict[str, list[float]]], host: str = "h1") -> pd.DataFrame:
    rows = []
    for (model, environment), metrics in cells.items():
        n = len(next(iter(metrics.values())))
        for i in range(n):
            rows.append({"run_id": f"{host}.{model}.{environment}.{i}", "host": host, "model": model,
                         "environment": environment, "workload": "w", "status": "ok", "warmup": False,
                         "order_index": i, "kv_fraction": np.nan,
                         "environment_kind": "native" if environment == "native" else "container",
                         **{m: v[i] for m, v in metrics.items()}})
    return pd.DataFrame(rows)


def test_environment_difference_ratio_overhead_and_welch() -> None:
    # native 1..5 (mean 3), container 2..10 step 2 (mean 6): diff 3, ratio 2, overhead (6-3)/3 = 100%;
    # Welch p 0.1075, CI [-0.8877, 6.8877] (R t.test, see test_stats).
    runs = frame({("m", "native"): {"peak_memory_gib": [1, 2, 3, 4, 5.0]},
                  ("m", "container"): {"peak_memory_gib": [2, 4, 6, 8, 10.0]}})
    row = compare_environments(runs).iloc[0]
    assert (row["native"], row["environment"], row["metric"]) == ("native", "container", "peak_memory_gib")
    assert row["diff"] == 3.0 and row["ratio"] == 2.0 and row["overhead_pct"] == pytest.approx(100.0)
    assert row["p_value"] == pytest.approx(0.10753, abs=1e-5)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((-0.8877416, 6.8877416), abs=1e-5)


def test_each_named_container_variant_is_compared_against_native() -> None:
    runs = frame({("m", "native"): {"output_tok_s": [100, 101, 99.0]},
                  ("m", "docker"): {"output_tok_s": [90, 91, 89.0]},
                  ("m", "podman"): {"output_tok_s": [100, 100, 101.0]}})
    table = compare_environments(runs)
    assert list(table["environment"]) == ["docker", "podman"]
    assert set(table["native"]) == {"native"}
    assert table.iloc[0]["overhead_pct"] == pytest.approx(-10.0)


def test_kv_decomposition_residuals_and_shift() -> None:
    # Study run: total 119.64, peak 70.05, kv 44.69 -> expected 0.9 * 49.59 = 44.631, residual 0.059.
    # Container: peak 101.56, kv 16.33 -> expected 0.9 * 18.08 = 16.272, residual 0.058.
    runs = frame({("m", "native"): {"peak_memory_gib": [70.05, 70.05], "kv_cache_gib": [44.69, 44.69],
                                    "device_total_gib": [119.64, 119.64]},
                  ("m", "container"): {"peak_memory_gib": [101.56, 101.56], "kv_cache_gib": [16.33, 16.33],
                                       "device_total_gib": [119.64, 119.64]}})
    table, fit = kv_decomposition(runs)
    by_env = table.groupby("environment")["residual_gib"].first()
    assert by_env["native"] == pytest.approx(0.059, abs=1e-9)
    assert by_env["container"] == pytest.approx(0.058, abs=1e-9)
    assert set(table["fraction_source"]) == {"assumed"}
    assert fit.runs == 4 and fit.residual_max == pytest.approx(0.059)
    # Δpeak = 31.51 -> predicted ΔKV = -0.9 * 31.51 = -28.359; measured 16.33 - 44.69 = -28.36.
    shift = kv_shift(compare_environments(runs), table).iloc[0]
    assert shift["kv_diff_predicted_gib"] == pytest.approx(-28.359)
    assert shift["kv_diff_gib"] == pytest.approx(-28.36)
    assert shift["unexplained_gib"] == pytest.approx(-0.001, abs=1e-9)


def test_recorded_fraction_wins_over_the_assumed_one() -> None:
    runs = frame({("m", "native"): {"peak_memory_gib": [70.0], "kv_cache_gib": [39.64],
                                    "device_total_gib": [120.0]}}).assign(kv_fraction=0.8)
    table, fit = kv_decomposition(runs)
    assert table.iloc[0]["fraction_source"] == "recorded"
    assert table.iloc[0]["residual_gib"] == pytest.approx(-0.36)  # 39.64 - 0.8 * 50
    assert fit.runs_with_recorded_fraction == 1


def test_the_kv_residual_adds_tmp_kv_to_the_budget_only_where_the_record_has_it() -> None:
    """One formula for every reader of the KV residual (compare.kv_decomposition, report.memory.run_parts)."""
    runs = pd.DataFrame({"device_total_gib": [120.0, 120.0], "peak_memory_gib": [70.0, 70.0],
                         "kv_cache_gib": [45.5, 45.5], "tmp_kv_gib": [0.5, np.nan]})
    assert list(kv_residual(runs, 0.9)) == pytest.approx([45.5 - 0.9 * 50.5, 45.5 - 0.9 * 50.0])


def _normal(mean: float, sd: float, n: int, seed: int) -> list[float]:
    return list(np.random.default_rng(seed).normal(mean, sd, n))


def test_real_ten_percent_throughput_regression_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = write_campaign(tmp_path / "base", {("m", "native"): {"output_tok_s": _normal(100, 1, 10, 1)}})
    cur = write_campaign(tmp_path / "cur", {("m", "native"): {"output_tok_s": _normal(90, 1, 10, 2)}})
    assert main(["compare", str(base), str(cur)]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    assert main(["compare", str(cur), str(base)]) == 0  # the other way round it is an improvement


def test_noise_level_change_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = write_campaign(tmp_path / "base", {("m", "native"): {"output_tok_s": _normal(100, 1, 10, 1)}})
    cur = write_campaign(tmp_path / "cur", {("m", "native"): {"output_tok_s": _normal(99.5, 1, 10, 3)}})
    assert main(["compare", str(base), str(cur), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["regressions"] == 0
    assert [c["verdict"] for c in out["comparisons"]] == ["unchanged"]


def test_big_but_not_significant_change_is_not_reported() -> None:
    # -20% in the mean but with huge spread on 3 runs each: p is large, so it is not evidence.
    base = frame({("m", "native"): {"output_tok_s": [100, 40, 160.0]}})
    cur = frame({("m", "native"): {"output_tok_s": [80, 20, 140.0]}})
    row = compare_campaigns(base, cur).iloc[0]
    assert row["change_pct"] == pytest.approx(-20.0)
    assert row["large"] and not row["significant"]
    assert row["verdict"] == "unchanged"


def test_significant_but_small_change_is_not_reported() -> None:
    base = frame({("m", "native"): {"output_tok_s": [100.0, 100.1, 99.9, 100.0]}})
    cur = frame({("m", "native"): {"output_tok_s": [98.0, 98.1, 97.9, 98.0]}})  # -2%, p tiny
    row = compare_campaigns(base, cur).iloc[0]
    assert row["significant"] and not row["large"] and row["verdict"] == "unchanged"


def test_direction_latency_and_memory_higher_is_a_regression() -> None:
    base = frame({("m", "native"): {"latency_ms_avg": [10, 10.1, 9.9], "peak_memory_gib": [70, 70.1, 69.9],
                                    "kv_cache_gib": [44, 44.1, 43.9]}})
    cur = frame({("m", "native"): {"latency_ms_avg": [12, 12.1, 11.9], "peak_memory_gib": [60, 60.1, 59.9],
                                   "kv_cache_gib": [30, 30.1, 29.9]}})
    verdicts = compare_campaigns(base, cur).set_index("metric")["verdict"]
    assert verdicts["latency_ms_avg"] == "regression"
    assert verdicts["peak_memory_gib"] == "improvement"
    assert verdicts["kv_cache_gib"] == "regression"  # less KV cache is less capacity


def test_hosts_are_pooled_when_campaigns_share_none() -> None:
    base = frame({("m", "native"): {"output_tok_s": [100, 101, 99.0]}}, host="spark-study")
    cur = frame({("m", "native"): {"output_tok_s": [100, 101, 99.0]}}, host="spark-01")
    table = compare_campaigns(base, cur)
    assert "host" not in table.columns and table.iloc[0]["verdict"] == "unchanged"
    per_host = compare_campaigns(base, cur, match="host")
    assert set(per_host["verdict"]) == {"only in baseline", "only in current"}


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good = write_campaign(tmp_path / "good", {("m", "native"): {"output_tok_s": [1.0, 2.0]}})
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "missing"), str(good)]) == 2
    assert main(["compare", str(tmp_path / "empty"), str(good)]) == 2
    assert main(["compare", str(good), str(good), "--alpha", "2"]) == 2
    assert "error" in capsys.readouterr().err


def _row(n_a, n_b, mean_a, mean_b, sd_a, sd_b, p, ci=(np.nan, np.nan)) -> dict:
    diff = mean_b - mean_a
    return {"n_a": n_a, "n_b": n_b, "mean_a": mean_a, "mean_b": mean_b, "sd_a": sd_a, "sd_b": sd_b, "diff": diff,
            "change_pct": diff / mean_a * 100, "p_value": p, "ci_low": ci[0], "ci_high": ci[1]}


def test_classify_the_one_decision_rule() -> None:
    from sparkfleet.compare import classify

    table = pd.DataFrame([
        _row(10, 10, 100, 130, 2, 2, 1e-9, (28, 32)),      # significant, +30%: different
        _row(10, 10, 100, 102, 1, 1, 1e-4, (1, 3)),        # significant, +2%: the same within 5%
        _row(10, 10, 100, 100.5, 2, 2, 0.6, (-1.5, 2.5)),  # CI inside ±5%: the same
        _row(5, 5, 100, 97, 8, 8, 0.6, (-14, 8)),          # CI beyond ±5%, not significant: undetermined
        _row(2, 2, 100, 90, 3, 3, 0.1),                    # two runs a side: undetermined
        _row(2, 2, 2.373, 2.373, 0, 0, 1.0),               # identical bytes in all runs
        _row(2, 2, 70.0, 100.0, 0, 0, 0.0),                # constant, 30 GiB apart in every run
        _row(1, 1, 100, 90, np.nan, np.nan, np.nan),       # one run a side
    ])
    out = classify(table, alpha=0.05, threshold=0.05)
    assert list(out["reason"]) == ["beyond-threshold", "within-threshold", "equivalent", "inconclusive",
                                   "n-too-small", "identical", "exact", "n-too-small"]
    assert list(out["outcome"]) == ["different", "same", "same", "undetermined", "undetermined", "same",
                                    "different", "undetermined"]
    # Undetermined rows say how many runs per side would resolve 5%: pooled CV 8% -> 2 (2.8016 * 1.6)^2 = 40.2.
    assert out["required_n"].iloc[3] == 41
    assert out["required_n"].iloc[4] == 6  # CV 3%: 2 (2.8016 * 0.6)^2 = 5.65
    assert np.isnan(out["required_n"].iloc[0]) and np.isnan(out["required_n"].iloc[2])


def test_environments_pooled_over_the_hosts_that_ran_both() -> None:
    a = frame({("m", "native"): {"output_tok_s": [100, 102, 98.0]},
               ("m", "container"): {"output_tok_s": [90, 91, 89.0]}}, host="h1")
    b = frame({("m", "native"): {"output_tok_s": [110, 111, 109.0]},
               ("m", "container"): {"output_tok_s": [99, 100, 101.0]}}, host="h2")
    c = frame({("m", "native"): {"output_tok_s": [500, 500, 500.0]}}, host="h3")  # no container: left out
    pooled = compare_environments(pd.concat([a, b, c], ignore_index=True), pool_hosts=True).iloc[0]
    native, container = [100, 102, 98, 110, 111, 109.0], [90, 91, 89, 99, 100, 101.0]
    assert pooled["hosts"] == 2 and pooled["n_native"] == pooled["n_env"] == 6
    assert pooled["native_mean"] == pytest.approx(np.mean(native))
    assert pooled["sd_native"] == pytest.approx(np.std(native, ddof=1))
    assert pooled["sd_env"] == pytest.approx(np.std(container, ddof=1))
    assert pooled["diff"] == pytest.approx(np.mean(container) - np.mean(native))


def test_two_runs_a_side_are_undetermined_not_a_regression() -> None:
    base = frame({("m", "native"): {"output_tok_s": [100.0, 100.2]}})
    cur = frame({("m", "native"): {"output_tok_s": [80.0, 80.1]}})  # p < 0.05 even with n = 2
    row = compare_campaigns(base, cur).iloc[0]
    assert row["p_value"] < 0.05 and np.isnan(row["ci_low"])  # no interval from two runs a side
    assert row["verdict"] == "undetermined" and row["required_n"] >= 3


@pytest.mark.parametrize("option", [["--threshold", "nan"], ["--threshold", "inf"], ["--alpha", "nan"],
                                    ["--alpha", "1.5"]])
def test_compare_refuses_a_threshold_or_alpha_that_is_not_a_finite_number_in_range(tmp_path, capsys, option):
    from sparkfleet.cli import main  # noqa: PLC0415

    try:
        code = main(["compare", str(tmp_path), str(tmp_path), *option])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2
    assert option[0] in capsys.readouterr().err


# --- overlapping trees (issue 23): CURRENT inside BASELINE once made both sides the same runs ---------------


def _halved(tmp_path: Path, outer: str, inner: str) -> tuple[Path, Path]:
    """A baseline at 100 tok/s and a current at 50 (same campaign, so the same run ids), one inside the other."""
    outer_dir = tmp_path / "results"
    inner_dir = outer_dir / "cur"
    dirs = {"outer": outer_dir, "inner": inner_dir}
    write_campaign(dirs[outer], {("m", "native"): {"output_tok_s": _normal(100, 1, 10, 1)}})
    write_campaign(dirs[inner], {("m", "native"): {"output_tok_s": _normal(50, 1, 10, 2)}})
    return dirs[outer], dirs[inner]


def test_current_inside_baseline_gives_the_separate_directory_verdict(tmp_path: Path, capsys) -> None:
    base, cur = _halved(tmp_path, "outer", "inner")  # baseline results/, current results/cur
    assert main(["compare", str(base), str(cur), "--json"]) == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    (row,) = out["comparisons"]
    assert row["verdict"] == "regression" and row["change_pct"] == pytest.approx(-50, abs=2)
    assert row["n_baseline"] == 10 and row["n_current"] == 10
    assert f"current {cur} lies inside baseline {base}" in captured.err
    separate = tmp_path / "separate"  # the same data side by side: the same answer
    (separate / "base").mkdir(parents=True)
    (base / "h1").rename(separate / "base" / "h1")
    cur.rename(separate / "cur")
    assert main(["compare", str(separate / "base"), str(separate / "cur"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["comparisons"] == out["comparisons"]


def test_baseline_inside_current_is_left_out_of_the_current(tmp_path: Path, capsys) -> None:
    base, cur = _halved(tmp_path, "inner", "outer")  # baseline results/cur at 100, current results/ at 50
    assert main(["compare", str(base), str(cur), "--json"]) == 1
    captured = capsys.readouterr()
    (row,) = json.loads(captured.out)["comparisons"]
    assert row["verdict"] == "regression" and row["n_baseline"] == 10 and row["n_current"] == 10
    assert row["change_pct"] == pytest.approx(-50, abs=2)
    assert f"baseline {base} lies inside current {cur}" in captured.err


def test_the_same_directory_on_both_sides_is_refused(tmp_path: Path, capsys) -> None:
    base = write_campaign(tmp_path / "base", {("m", "native"): {"output_tok_s": _normal(100, 1, 10, 1)}})
    (tmp_path / "link").symlink_to(base)
    for other in (base, tmp_path / "link", base / "." ):
        assert main(["compare", str(base), str(other)]) == 2
        err = capsys.readouterr().err
        assert "are the same directory" in err and "Traceback" not in err and err.count("\n") == 1


def test_report_baseline_nested_either_way_gives_the_separate_directory_verdict(tmp_path: Path, capsys) -> None:
    for outer_role in ("baseline", "current"):
        root = tmp_path / outer_role
        base, cur = _halved(root, "outer", "inner") if outer_role == "baseline" else _halved(root, "inner", "outer")
        assert main(["report", str(cur), "--baseline", str(base), "--json", "--out", str(tmp_path / "out")]) == 0
        out = json.loads(capsys.readouterr().out)
        (row,) = [r for r in out["baseline"]["comparisons"] if r["metric"] == "output_tok_s"]
        assert row["verdict"] == "regression" and row["n_baseline"] == 10 and row["n_current"] == 10, row
    same = tmp_path / "baseline" / "results"
    assert main(["report", str(same), "--baseline", str(same)]) == 2
    assert "are the same directory" in capsys.readouterr().err


def test_holm_adjusts_step_down_and_leaves_nan_out_of_the_family() -> None:
    from sparkfleet.compare import family_size, holm

    # Holm (1979): sorted p 0.01, 0.02, 0.04 of m = 3 -> 0.03, 0.04, 0.04 (the running maximum of (m - i) p)
    adjusted = holm([0.04, np.nan, 0.01, 0.02])
    assert np.isnan(adjusted[1]) and family_size([0.04, np.nan, 0.01, 0.02]) == 3
    np.testing.assert_allclose(adjusted[[2, 3, 0]], [0.03, 0.04, 0.04])
    assert holm([0.6, 0.9])[1] == 1.0  # capped at 1


def _rows(p_values: list[float], change_pct: float = 8.0, n: int = 5) -> pd.DataFrame:
    """Rows as compare.compare_moments makes them: every row beyond the 5% threshold, with the given p-values."""
    k = len(p_values)
    return pd.DataFrame({"n_a": [n] * k, "n_b": [n] * k, "mean_a": [100.0] * k, "mean_b": [100 + change_pct] * k,
                         "sd_a": [3.0] * k, "sd_b": [3.0] * k, "diff": [change_pct] * k,
                         "change_pct": [change_pct] * k, "p_value": p_values,
                         "ci_low": [change_pct - 4] * k, "ci_high": [change_pct + 4] * k})


def test_a_family_holds_its_comparisons_to_alpha_together() -> None:
    # 20 comparisons each significant alone at p = 0.04: alone every one is different; as one family none is.
    alone = classify(_rows([0.04] * 20))
    assert set(alone["outcome"]) == {"different"}
    family = classify(_rows([0.04] * 20), family=True)
    assert set(family["outcome"]) == {"undetermined"} and set(family["reason"]) == {"family"}
    assert (family["family_size"] == 20).all() and (family["p_family"] >= 0.05).all()
    # ... and it needs more runs than one comparison alone would (alpha / 20).
    assert (family["required_n"] > classify(_rows([0.2] * 20))["required_n"]).all()
    # A difference strong enough for the family stays one; the others are judged with it.
    mixed = classify(_rows([1e-6, 0.04, 0.04]), family=True)
    assert list(mixed["outcome"]) == ["different", "undetermined", "undetermined"]


def test_a_larger_family_is_never_less_strict_than_its_part() -> None:
    from sparkfleet.compare import hold_to_family

    part = classify(_rows([0.001, 0.01]), family=True)  # Holm over 2: 0.002, 0.01: both different
    assert set(part["outcome"]) == {"different"}
    union = hold_to_family(pd.concat([part, part.assign(p_value=0.5, outcome="same", reason="equivalent")]
                                     ).reset_index(drop=True).assign(p_value=[0.001, 0.01, 0.5, 0.5]))
    # over 4: 0.004, 0.03 -> still below alpha; the same answers untouched
    assert list(union["outcome"]) == ["different", "different", "same", "same"]
    wider = hold_to_family(pd.concat([part] + [part.assign(outcome="same", reason="equivalent")] * 5)
                           .reset_index(drop=True).assign(p_value=[0.001, 0.01] + [0.5] * 10))
    assert list(wider["outcome"][:2]) == ["different", "undetermined"]  # 0.01 x 11 > alpha
