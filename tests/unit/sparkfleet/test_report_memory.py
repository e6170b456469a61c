"""The memory study in the report (issue 15): a known decomposition of the device total, the factor with the
largest KV-cache effect, the A/A noise floor with its MDE and the iterations needed, and the "under the noise
floor" label, on synthetic records that carry the record's memory section."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _shared import trtllm_fixture

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import parse_file, parse_log
from sparkfleet import load, stats
from sparkfleet.cli import main
from sparkfleet.load import load_runs
from sparkfleet.report.memory import aa_pairs, noise_floor

TOTAL = 119.64
ENGINE = 20.0  # the engine's own peak
EXTRA = 8.0  # what the container's cgroup charges beyond the engine and its page cache
LIMIT = 96.0
FILE = 2.0  # the container's own file pages
CACHE = {False: 10.0, True: 1.0}  # host page cache with drop_caches false / true
TMP_KV = 0.06


def _meminfo(cached: float, used: float) -> dict:
    return {"mem_total_gib": TOTAL, "mem_free_gib": TOTAL - used, "mem_available_gib": TOTAL - used + cached,
            "buffers_gib": 0.0, "cached_gib": cached, "shmem_gib": 0.1, "used_gib": used - cached,
            "not_free_gib": used}


def _record(environment: str, kind: str, fraction: float, drop: bool, iteration: int, order: int,
            rng: np.random.Generator, aa: tuple[str, str] | None = None, noise: float = 0.0) -> dict:
    cache = CACHE[drop]
    workload = f"study.kv{fraction:g}.{'drop' if drop else 'keep'}"
    cgroup = limit = None
    flags = None
    if environment == "container-memlimit":
        current = ENGINE + FILE + 0.5
        peak = TOTAL - LIMIT + current
        limit = LIMIT
        flags = ["--ipc=host", "--memory=96g"]
    elif kind == "container":
        current = ENGINE + EXTRA + FILE
        peak = ENGINE + cache + EXTRA
        flags = ["--ipc=host"]
    else:
        current, peak = None, ENGINE + cache
    peak += rng.normal(0, noise)
    kv = fraction * (TOTAL - peak) + TMP_KV
    if current is not None:
        cgroup = {"current_gib": current, "peak_gib": current, "limit_gib": limit, "file_gib": FILE,
                  "anon_gib": current - FILE, "shmem_gib": 0.0}
    memory = {
        "version": 1, "kv_fraction": fraction, "drop_caches": {"requested": drop, "done": drop},
        "container_memory_flags": flags,
        "start": {"meminfo": _meminfo(cache, ENGINE * 0.1 + cache), "cuda": {"source": None, "gpus": [],
                                                                            "free_gib": None}},
        "peak": {"t_s": 5.0, "meminfo": _meminfo(cache, peak), "cgroup": cgroup, "cuda_free_gib": None},
        "cgroup": None if cgroup is None else {"paths": ["/sys/fs/cgroup/x"], "limit_gib": limit,
                                               "peak_gib": current, "current_gib_max": current, "first": cgroup},
        "max_cached_gib": cache, "min_mem_available_gib": 50.0, "min_cuda_free_gib": None, "samples": 10,
        "errors": [],
        "environment": {"name": environment, "kind": kind, "variant": None,
                        **({"aa_group": aa[0], "aa_member": aa[1]} if aa else {})},
    }
    rec = contract.new_record("memstudy", "spark-01", "deepseek", environment, workload, iteration,
                              environment_kind=kind, engine="trtllm", warmup=False, order_index=order,
                              workload_params={"engine": "trtllm", "base": "study",
                                               "factors": {"kv_fraction": fraction, "drop_caches": drop}},
                              model_loaded="deepseek", exit_code=0)
    rec.status = "ok"
    rec.metrics = {"output_tok_s": 100.0 * (1 + rng.normal(0, 0.01)), "peak_memory_gib": peak,
                   "kv_cache_gib": kv, "device_total_gib": TOTAL, "kv_fraction": fraction}
    rec.metric_sources = {m: "log" for m in ("peak_memory_gib", "kv_cache_gib", "device_total_gib", "kv_fraction")}
    rec.memory = memory
    return rec.to_dict()


ENVIRONMENTS = (("native", "native", ("native", "a")), ("native.aa", "native", ("native", "b")),
                ("container", "container", None), ("container-memlimit", "container", None))


def build_memory_campaign(root: Path, iterations: int = 3, noise: float = 0.0,
                          environments: tuple = ENVIRONMENTS) -> Path:
    rng = np.random.default_rng(1)
    order = 0
    for iteration in range(iterations):
        for fraction in (0.9, 0.5):
            for drop in (False, True):
                for environment, kind, aa in environments:
                    rec = _record(environment, kind, fraction, drop, iteration, order, rng, aa, noise)
                    contract.write_json_atomic(root / "spark-01" / "runs" / rec["run_id"] / "record.json", rec)
                    order += 1
    return root


def report_json(results: Path) -> dict:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["report", str(results), "--json"]) == 0
    return json.loads(buffer.getvalue())


def test_loader_flattens_the_memory_section_and_factor_levels(tmp_path: Path) -> None:
    runs = load_runs(build_memory_campaign(tmp_path / "r", iterations=1)).runs
    row = runs[(runs["environment"] == "container-memlimit") & (runs["workload"] == "study.kv0.9.keep")].iloc[0]
    assert row["mem_start_cached_gib"] == CACHE[False] and row["mem_peak_total_gib"] == TOTAL
    assert row["mem_peak_cgroup_current_gib"] == ENGINE + FILE + 0.5 and row["mem_cgroup_limit_gib"] == LIMIT
    assert row["mem_container_flags"] == "--ipc=host --memory=96g" and math.isnan(row["cuda_free_start_gib"])
    assert row["factor_kv_fraction"] == 0.9 and not row["factor_drop_caches"]
    twin = runs[runs["environment"] == "native.aa"].iloc[0]
    assert (twin["aa_group"], twin["aa_member"]) == ("native", "b")
    assert pd.isna(runs[runs["environment"] == "container"].iloc[0]["aa_group"])


def test_factor_levels_are_the_workloads_own_parameters(tmp_path: Path) -> None:
    """A record names its factors (``workload_params.factors``) and keeps each level once, as the workload's own
    parameter; the loader's factor columns read it there, numbers first (older records' {name: level} too)."""
    rec = _record("native", "native", 0.5, True, 0, 0, np.random.default_rng(1))
    del rec["memory"]["kv_fraction"]
    rec["workload_params"] = {"engine": "trtllm", "base": "study", "kv_fraction": 0.5, "drop_caches": True,
                              "factors": ["drop_caches", "kv_fraction"]}
    contract.write_json_atomic(tmp_path / "r" / "h" / "runs" / rec["run_id"] / "record.json", rec)
    runs = load_runs(tmp_path / "r").runs
    assert [(name, list(levels)) for name, levels in load.factors(runs)] == [("kv_fraction", [0.5]),
                                                                            ("drop_caches", [True])]
    assert load.kv_fraction(runs)[0].tolist() == [0.5] and "mem_kv_fraction" not in runs


def test_decomposition_gap_and_factor_on_a_known_campaign(tmp_path: Path) -> None:
    out = report_json(build_memory_campaign(tmp_path / "r"))
    dec = {(r["environment"], r["workload"]): r for r in out["memory"]["decomposition"]}
    for fraction in (0.9, 0.5):
        for drop in (False, True):
            workload = f"study.kv{fraction:g}.{'drop' if drop else 'keep'}"
            native, container = dec[("native", workload)], dec[("container", workload)]
            limited = dec[("container-memlimit", workload)]
            for row in (native, container, limited):  # the parts sum to the device total
                parts = sum(row[p] for p in ("model_gib", "page_cache_gib", "cgroup_gib", "unexplained_gib",
                                             "kv_gib", "reserve_gib"))
                assert parts == pytest.approx(TOTAL, abs=1e-6)
                assert row["kv_residual_gib"] == pytest.approx(TMP_KV, abs=1e-6)
                assert row["unexplained_gib"] == pytest.approx(0, abs=1e-6)
            assert native["model_gib"] == pytest.approx(ENGINE) and native["page_cache_gib"] == CACHE[drop]
            assert native["cgroup_gib"] == 0
            assert container["cgroup_gib"] == pytest.approx(EXTRA) and container["model_gib"] == pytest.approx(ENGINE)
            assert limited["page_cache_gib"] == FILE and limited["limit_gib"] == LIMIT
            assert limited["cgroup_gib"] == pytest.approx(TOTAL - LIMIT + 0.5)
    gaps = {(r["environment"], r["workload"]): r for r in out["memory"]["kv_gaps"]}
    gap = gaps[("container", "study.kv0.9.keep")]
    assert gap["loss_gib"] == pytest.approx(0.9 * EXTRA)  # the KV cache lost to the cgroup's charge
    assert gap["cgroup_share_gib"] == pytest.approx(0.9 * EXTRA) and gap["page_cache_share_gib"] == pytest.approx(0)
    assert gap["unexplained_share_gib"] == pytest.approx(0, abs=1e-6)
    memory = [line for line in out["verdicts"] if line["question"] == "memory"]
    where = next(line for line in memory if line["label"] == "memory gap")
    assert "container-memlimit has" in where["text"] and "of the gap" in where["text"]
    assert "cgroup-accounted" in where["headline"] and where["outcome"] == "different"  # 3 runs a side, exact
    factor = next(line for line in memory if line["label"] == "largest factor")
    # 0.9 vs 0.5 of ~90 GiB headroom moves more KV cache than the limit (13 GiB more peak) or a dropped cache
    assert "largest effect on the KV cache is kv_fraction" in factor["text"]
    assert "memory-limited container vs container" in factor["text"]
    effects = {(r["factor"], r["metric"]): r for r in out["memory"]["factor_effects"]}
    assert effects[("kv_fraction", "kv_cache_gib")]["diff"] < 0
    assert effects[("drop_caches", "kv_cache_gib")]["diff"] > 0  # dropping the cache gives KV back
    assert abs(effects[("kv_fraction", "kv_cache_gib")]["diff"]) == max(
        abs(r["diff"]) for (f, m), r in effects.items() if m == "kv_cache_gib")
    assert effects[("memory_limit", "peak_memory_gib")]["diff"] == pytest.approx(
        (TOTAL - LIMIT + ENGINE + FILE + 0.5) - (ENGINE + EXTRA + np.mean(list(CACHE.values()))))
    assert all(v["ci_low"] is not None for v in effects.values())  # 12+ runs a side: intervals


def test_noise_floor_mde_and_required_iterations_from_a_known_cv() -> None:
    cv, n = 0.02, 3
    pairs = pd.DataFrame([{"aa_group": "native", "host": "h", "model": "m", "workload": w, "a": "native",
                           "b": "native.aa", "metric": "output_tok_s", "n_a": n, "n_b": n, "mean_a": 100.0,
                           "mean_b": 100.5, "diff": 0.5, "change_pct": 0.5, "p_value": 0.5, "ci_low_pct": -3.0,
                           "ci_high_pct": 4.0, "cv_a": cv, "cv_b": cv} for w in ("a", "b")])
    row = noise_floor(pairs).iloc[0]
    z = 1.959963984540054
    assert row["cv"] == pytest.approx(cv)
    assert row["floor"] == pytest.approx(z * cv * math.sqrt(2 / n))  # above the observed 0.5%
    assert row["mde_pct"] == pytest.approx((z + 0.8416212335729143) * cv * math.sqrt(2 / n) * 100)
    assert row["required_n_2pct"] == 16 and row["required_n_5pct"] == 3  # Lehr: 16 (cv/effect)^2, ceil
    quiet = noise_floor(pairs.assign(cv_a=0.001, cv_b=0.001)).iloc[0]
    assert quiet["required_n_2pct"] == quiet["required_n_5pct"] == stats.MIN_N_INTERVAL  # the small-n rule's floor
    # the MDE inverts required_n
    assert stats.mde(0.05, 16) == pytest.approx(0.05 * math.sqrt(15.698 / 16), rel=1e-3)  # n = 15.698 (cv/e)^2
    for c, effect in ((0.01, 0.02), (0.03, 0.05), (0.1, 0.02)):
        assert stats.mde(c, stats.required_n(c, effect)) <= effect + 1e-12
    assert stats.mde(float("nan"), 3) is None and stats.mde(0.1, 0) is None


def test_aa_noise_floor_labels_small_differences(tmp_path: Path) -> None:
    results = build_memory_campaign(tmp_path / "r", iterations=4, noise=0.3)
    out = report_json(results)
    runs = load_runs(results).runs
    pairs = aa_pairs(runs)
    assert set(pairs["b"]) == {"native.aa"} and set(pairs["a"]) == {"native"} and len(pairs["workload"].unique()) == 4
    floors = {r["metric"]: r for r in out["memory"]["noise_floor"]}
    kv = floors["kv_cache_gib"]
    assert kv["cv"] > 0 and kv["n"] == 4 and kv["floor"] >= kv["observed_pct"] / 100 - 1e-12
    assert kv["required_n_2pct"] >= kv["required_n_5pct"] >= 1
    noise = next(line for line in out["verdicts"] if line["question"] == "noise")
    assert "A/A noise floor" in noise["text"] and "iterations needed" in noise["text"]
    env = [m for line in out["verdicts"] if line["question"] == "environment" for m in line["metrics"]]
    twin = [m for m in env if m["b"] == "native.aa" and m["metric"] == "kv_cache_gib"]
    assert twin and all(m["noise_floor_pct"] is not None for m in twin)
    assert any(m["under_noise_floor"] for m in twin)
    assert all("under the noise floor" in m["text"] for m in twin if m["under_noise_floor"])
    big = [m for m in env if m["b"] == "container-memlimit" and m["metric"] == "kv_cache_gib"]
    assert big and not any(m["under_noise_floor"] for m in big)
    html = (results / "report" / "index.html").read_text()
    assert 'id="section-where-the-memory-went"' in html and 'id="section-a-a-noise-floor"' in html
    assert "under the noise floor" in html and 'id="fig-memory_decomposition"' in html
    assert (results / "report" / "aa_noise.csv").is_file()


def test_a_twin_is_compared_with_its_original_only(tmp_path: Path) -> None:
    """native.aa against native is the A/A pair's own comparison and stays a verdict; container.aa against
    native would repeat container's verdict, so it is left out, and the verdict block says so in one line."""
    environments = (*ENVIRONMENTS[:2], ("container", "container", ("container", "a")),
                    ("container.aa", "container", ("container", "b")), ENVIRONMENTS[3])
    results = build_memory_campaign(tmp_path / "r", iterations=3, noise=0.3, environments=environments)
    out = report_json(results)
    env = [line for line in out["verdicts"] if line["question"] == "environment"]
    compared = {(m["a"], m["b"]) for line in env for m in line["metrics"]}
    assert compared == {("native", "native.aa"), ("native", "container"), ("native", "container-memlimit")}
    assert len(env) == 3 * 4  # three comparisons in each of the four workloads, none of them container.aa's
    assert not any("container.aa" in line["text"] or "container.aa" in line["headline"] for line in env)
    # the A/A pairs' own comparisons are all there, in the noise floor
    assert {(r["a"], r["b"]) for r in out["memory"]["aa_pairs"]} == {("native", "native.aa"),
                                                                     ("container", "container.aa")}
    # the tables beside keep every comparison
    assert "container.aa" in {r["environment"] for r in out["comparisons"]["environments"]}
    note = ("A/A twin container.aa (of container) is compared only with its own original (the A/A noise floor); "
            "its comparisons with other environments would repeat the original's and are left out of the verdicts.")
    for name in ("index.html", "summary.md"):
        page = (results / "report" / name).read_text().replace("&#x27;", "'")
        verdicts = page[:page.index("Different: significant")]  # the verdict block, before its rule
        assert verdicts.count(note) == 1, name


def test_memory_sections_render_in_chromium(tmp_path: Path) -> None:
    """The decomposition and the A/A noise floor as the browser lays them out (no fleet needed; the e2e memory
    study checks the same on a real campaign)."""
    from test_report_browser import CHROMIUM, distinct_colours, dump_dom, screenshot

    if CHROMIUM is None:
        pytest.skip("chromium not installed")
    results = build_memory_campaign(tmp_path / "r", iterations=3, noise=0.3)
    assert main(["report", str(results)]) == 0
    page = results / "report" / "index.html"
    dom = dump_dom(page, tmp_path / "profile-dom")
    verdicts = dom[dom.index('<section class="verdicts"'):dom.index("</section>")]
    assert "memory gap" in verdicts and "noise floor" in verdicts and "largest factor" in verdicts
    for section in ("where-the-memory-went", "a-a-noise-floor"):
        assert f'id="section-{section}"' in dom
    html = page.read_text()
    start = html.index('<figure id="fig-memory_decomposition"')
    alone = tmp_path / "figure.html"
    alone.write_text(f"<!DOCTYPE html><html><body style='margin:0'>{html[start:html.index('</figure>', start)]}"
                     "</figure></body></html>")
    pixels = screenshot(alone, tmp_path / "figure.png", tmp_path / "profile-shot", "900,1200")
    assert distinct_colours(pixels) > 100  # the stacked bars drawn, not a blank or broken image


def _gb10_campaign(root: Path, keep_budget_metrics: bool) -> Path:
    """Three native runs whose figures are the real DGX Spark log's (tests/data, TensorRT-LLM 1.1.0rc3), as
    bench_run records them (the parser's metrics and sources); without the KV budget metrics, as records written
    before the record carried them."""
    parsed = parse_file(trtllm_fixture("gb10-1.1.0rc3-memory-excerpt.log"))
    rng = np.random.default_rng(3)
    for iteration in range(3):
        rec = _record("native", "native", 0.9, False, iteration, iteration, rng)
        rec["metrics"] = {"output_tok_s": 100.0 + iteration, **parsed.metrics}
        rec["metric_sources"] = dict(parsed.sources)
        if not keep_budget_metrics:
            for name in contract.KV_BUDGET_METRICS:
                del rec["metrics"][name], rec["metric_sources"][name]
        assert contract.validate(rec) == []
        contract.write_json_atomic(root / "spark-01" / "runs" / rec["run_id"] / "record.json", rec)
    return root


def test_kv_residual_takes_the_records_tmp_kv_from_a_real_gb10_log(tmp_path: Path) -> None:
    """The GB10 log: kv 5.95 GiB = 0.9 x (119.70 - 113.65 + 0.56 tmp_kv). With the record's tmp_kv_gib the
    decomposition's KV residual is the log's rounding (0.001 GiB); without it, 0.9 x 0.56 = 0.505 GiB, which is
    beyond the report's 0.5 GiB misfit limit, and the report says the records lack tmp_kv."""
    new = _gb10_campaign(tmp_path / "new", keep_budget_metrics=True)
    out = report_json(new)
    (row,) = out["memory"]["decomposition"]
    assert row["kv_residual_gib"] == pytest.approx(0.001, abs=2e-4)
    assert row["tmp_kv_gib"] == 0.56 and row["n_without_tmp_kv"] == 0
    assert row["line_residual_gib"] == pytest.approx(0.001, abs=1e-4)  # the engine's own line, as recorded
    assert out["kv_fit"]["runs_with_tmp_kv"] == 3 and out["kv_fit"]["residual_max"] < 0.01
    assert {r["tmp_kv_source"] for r in out["kv_residuals"]} == {"recorded"}
    assert not [w for w in out["warnings"] if w["kind"] == "kv-budget"]
    # figures of the budget, not results: no cell statistics, no comparisons of their own
    assert not {c["metric"] for c in out["cells"]} & set(contract.KV_BUDGET_METRICS)
    html = (new / "report" / "index.html").read_text()
    assert "kv − fraction × (device_total − peak + tmp_kv)" in html and "lack tmp_kv_gib" not in html
    assert "carries tmp_kv_gib" not in html

    old = _gb10_campaign(tmp_path / "old", keep_budget_metrics=False)
    out = report_json(old)
    (row,) = out["memory"]["decomposition"]
    assert row["kv_residual_gib"] == pytest.approx(0.9 * 0.56, abs=2e-3)  # tmp_kv left out: ≈ fraction × tmp_kv
    assert row["tmp_kv_gib"] is None and row["n_without_tmp_kv"] == 3
    assert out["kv_fit"]["runs_with_tmp_kv"] == 0
    (misfit,) = [w for w in out["warnings"] if w["kind"] == "kv-budget"]
    assert "tmp_kv is not recorded" in misfit["message"]
    html = (old / "report" / "index.html").read_text()
    # said in the decomposition's text and in the KV-budget section's, and marked in the table
    assert html.count("No run&#x27;s record carries tmp_kv_gib") == 2
    assert "<td>not recorded</td>" in html


def test_runs_whose_kv_figure_is_a_budget_are_flagged_per_cell_and_marked(tmp_path: Path) -> None:
    """Native runs: the real GB10 log (an allocation line). Container runs: the same log without its
    '[MemUsageChange] ... paged KV cache' lines, as TensorRT-LLM 1.3+ with the KV cache manager V2 may write it,
    so their kv_cache_gib is the profiling's budget; and a third environment with records written before the
    sources said so ('log: available KV cache memory ...'). One warning per budget cell, a marker in the tables."""
    real = trtllm_fixture("gb10-1.1.0rc3-memory-excerpt.log").read_text()
    allocated = parse_log(real)
    budget = parse_log("\n".join(line for line in real.splitlines() if "[MemUsageChange]" not in line))
    assert allocated.sources["kv_cache_gib"] != budget.sources["kv_cache_gib"]
    root = tmp_path / "r"
    rng = np.random.default_rng(5)
    order = 0
    for iteration in range(3):
        for environment, kind, parsed in (("native", "native", allocated), ("container", "container", budget),
                                          ("old-container", "container", budget)):
            rec = _record(environment, kind, 0.9, False, iteration, order, rng)
            rec["metrics"] = {"output_tok_s": 100.0 + iteration, **parsed.metrics}
            rec["metric_sources"] = dict(parsed.sources)
            if environment == "old-container":
                rec["metric_sources"]["kv_cache_gib"] = "log: available KV cache memory when calculating max tokens"
            assert contract.validate(rec) == []
            contract.write_json_atomic(root / "spark-01" / "runs" / rec["run_id"] / "record.json", rec)
            order += 1
    out = report_json(root)
    flagged = [w for w in out["warnings"] if w["kind"] == "kv-source"]
    assert sorted(w["subject"] for w in flagged) == ["spark-01 / deepseek / container / study.kv0.9.keep",
                                                     "spark-01 / deepseek / old-container / study.kv0.9.keep"]
    assert all("KV figure is a budget, not an allocation" in w["message"] and "3 of 3 run(s)" in w["message"]
               for w in flagged)
    dec = {r["environment"]: r for r in out["memory"]["decomposition"]}
    assert (dec["native"]["n_kv_budget"], dec["container"]["n_kv_budget"], dec["old-container"]["n_kv_budget"]) \
        == (0, 3, 3)
    html = (root / "report" / "index.html").read_text()
    assert "<th>KV figure</th>" in html and html.count("<td>budget</td>") == 2  # the two budget cells' mark
    assert "logged no &#x27;[MemUsageChange] Allocated ... paged KV cache&#x27; line" in html
    assert html.count("(budget)") == 6  # the six budget runs in the per-run residual table, not the native ones


def test_no_kv_source_warning_where_the_sources_do_not_say(tmp_path: Path) -> None:
    out = report_json(build_memory_campaign(tmp_path / "r", iterations=1))  # sources are just "log"
    assert not [w for w in out["warnings"] if w["kind"] == "kv-source"]
    assert {r["n_kv_budget"] for r in out["memory"]["decomposition"]} == {0}


def test_a_limited_containers_engine_part_comes_from_its_cgroups_own_peak() -> None:
    """The cgroup charge at the machine-wide peak sample can predate the container's allocation (a short run,
    a busy machine); the decomposition takes the cgroup's own high-water mark (memory.peak) instead."""
    from sparkfleet.report.memory import run_parts

    common = {"host": "h", "model": "m", "workload": "w", "status": "ok", "warmup": False, "run_id": "",
              "device_total_gib": 100.0, "kv_fraction": 0.9, "mem_start_cached_gib": 2.0, "mem_peak_cached_gib": 2.0}
    native = {**common, "run_id": "n", "environment": "native", "environment_kind": "native",
              "peak_memory_gib": 2.5, "kv_cache_gib": 87.75}  # the engine's own peak: 0.5 GiB beyond the cache
    limited = {**common, "run_id": "c", "environment": "limited", "environment_kind": "container",
               "peak_memory_gib": 99.0, "kv_cache_gib": 0.9, "mem_cgroup_limit_gib": 1.0,
               "mem_peak_cgroup_current_gib": 0.05,  # sampled before the engine allocated
               "mem_cgroup_current_max_gib": 0.55, "mem_cgroup_peak_gib": 0.6, "mem_peak_cgroup_file_gib": 0.0}
    parts = run_parts(pd.DataFrame([native, limited]), pd.DataFrame()).set_index("run_id")
    assert parts.loc["c", "model_gib"] == pytest.approx(0.5)  # the engine's part, not the 0.05 of a racing sample
    assert parts.loc["c", "cgroup_gib"] == pytest.approx(99.0 + 0.1)  # outside the limit + the charge beyond it
