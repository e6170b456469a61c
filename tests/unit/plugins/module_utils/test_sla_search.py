"""The SLA question (issue 37 item 3): the sla field's validation, the bracketing search over concurrency, the
percentiles per client, and a serving run that searches on the host against a stand-in OpenAI server."""

from __future__ import annotations

import json

import pytest
from _ansible_modules import host_util

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, resolve

sla_search = host_util("sla_search")
serving_client = host_util("serving_client")

MODEL = {"name": "qwen", "path": "/var/lib/sparkfleet/models/Qwen3-8B"}
BASE = {"name": "s", "models": [MODEL], "environments": ["bare"], "iterations": 1}
PROFILE = {"depth": [0], "concurrency": [1, 2], "pp": [64], "tg": [16]}
SLA = {"ttft_ms": {"percentile": 99, "max": 2000}, "tpot_ms": {"percentile": 99, "max": 50}}


def test_a_good_sla_resolves_and_other_workloads_keep_their_config():
    w = resolve({**BASE, "workloads": [{"name": "v", "engine": "vllm", "profile": PROFILE, "sla": SLA}]})
    assert w["workloads"][0]["sla"] == SLA
    plain = resolve({**BASE, "workloads": [{"name": "v", "engine": "vllm", "profile": PROFILE}]})["workloads"][0]
    assert "sla" not in plain and "sla" not in settings.serving_defaults()


@pytest.mark.parametrize("sla, part", [
    ({}, "names no target"),
    ({"ttft_ms": {"percentile": 49, "max": 1}}, "ttft_ms.percentile must be a number in 50..99.9"),
    ({"ttft_ms": {"percentile": 99.95, "max": 1}}, "50..99.9"),
    ({"tpot_ms": {"percentile": 99, "max": 0}}, "tpot_ms.max must be a positive number"),
    ({"tpot_ms": {"percentile": 99}}, "tpot_ms must be {percentile, max}"),
    ({"tpot_ms": {"percentile": 99, "max": 5}, "max_concurrency": 0}, "max_concurrency must be an integer"),
    ({"e2e_ms": {"percentile": 99, "max": 5}}, "unknown key e2e_ms"),
    ("fast", "must be a mapping"),
])
def test_a_bad_sla_is_refused_naming_why(sla, part):
    with pytest.raises(CampaignError) as err:
        resolve({**BASE, "workloads": [{"name": "v", "engine": "vllm", "profile": PROFILE, "sla": sla}]})
    assert any(p.startswith("campaign.workloads[0].sla: ") and part in p for p in err.value.problems), \
        err.value.problems


def test_sla_is_a_serving_field_and_aiperf_takes_its_own_percentiles_only():
    with pytest.raises(CampaignError) as err:
        resolve({**BASE, "workloads": [{"name": "t", "preset": "T1", "sla": SLA}]})
    assert any(p.startswith("campaign.workloads[0].sla: only a serving workload") for p in err.value.problems)
    aiperf = {"name": "a", "engine": "vllm", "profile": PROFILE, "client": "aiperf"}
    assert resolve({**BASE, "workloads": [{**aiperf, "sla": SLA}]})
    with pytest.raises(CampaignError) as err:
        resolve({**BASE, "workloads": [{**aiperf, "sla": {"ttft_ms": {"percentile": 99.9, "max": 9}}}]})
    assert any("sla.ttft_ms.percentile 99.9: client aiperf exports the percentiles 50, 75, 90, 95, 99 only" in p
               for p in err.value.problems), err.value.problems


def search(low, cap, passing):
    s, order = sla_search.Bracket(low, cap), []
    while (level := s.next()) is not None:
        order.append(level)
        s.record(level, passing(level))
    return s.capacity, order


@pytest.mark.parametrize("low, cap, limit, capacity, order", [
    (1, 64, 100, 64, [1, 2, 4, 8, 16, 32, 64]),          # every level passes: the cap
    (1, 64, 20, 20, [1, 2, 4, 8, 16, 32, 24, 20, 22, 21]),  # doubling, then bisection between 16 and 32
    (1, 64, 0, 0, [1]),                                  # the lowest level fails: none passes
    (4, 64, 2, 2, [4, 2, 3]),                            # bisection below the lowest from 0
    (2, 10, 9, 9, [2, 4, 8, 10, 9]),                     # the cap is not a power of two
    (3, 3, 5, 3, [3]),
])
def test_the_bracketing_search(low, cap, limit, capacity, order):
    assert search(low, cap, lambda c: c <= limit) == (capacity, order)


def test_percentiles_are_linear_between_order_statistics():
    assert sla_search.percentile([1, 2, 3, 4], 50) == 2.5 and sla_search.percentile([5.0], 99) == 5.0
    assert sla_search.percentile(list(range(101)), 99) == pytest.approx(99.0)
    assert sla_search.percentile([], 99) is None


def test_llama_benchys_latencies_come_from_its_per_request_samples():
    entry = {"samples": {"e2e_ttft_ms": [100.0, 200.0, 300.0], "tg_req_tok_s": [50.0, 25.0, 20.0]}}
    got = serving_client.LlamaBenchy.sla_latencies(entry, "/nonexistent", sla_search.targets(SLA))
    assert got["ttft_ms"] == pytest.approx(298.0) and got["tpot_ms"] == pytest.approx(49.8)  # 1000/20 = 50 at most
    assert serving_client.LlamaBenchy.sla_latencies({"samples": {}}, "/x", sla_search.targets(SLA)) == {
        "ttft_ms": None, "tpot_ms": None}
    assert not sla_search.passes({"ttft_ms": None, "tpot_ms": 1.0}, sla_search.targets(SLA))


def test_aiperfs_latencies_come_from_its_export(tmp_path):
    (tmp_path / "points").mkdir()
    export = {"time_to_first_token": {"unit": "ms", "avg": 90.0, "p99": 180.0, "p90": 150.0},
              "inter_token_latency": {"unit": "ms", "avg": 20.0, "p99": 41.0}}
    (tmp_path / "points" / "x.json").write_text(json.dumps(export))
    got = serving_client.AIPerf.sla_latencies({"raw": "points/x.json"}, str(tmp_path), sla_search.targets(SLA))
    assert got == {"ttft_ms": 180.0, "tpot_ms": 41.0} and sla_search.passes(got, sla_search.targets(SLA))
    goals = {"ttft_ms": {"percentile": 95, "max": 1}}
    assert serving_client.AIPerf.sla_latencies({"raw": "points/x.json"}, str(tmp_path), goals) == {"ttft_ms": None}


def test_the_reports_capacity_interval_is_an_exact_order_statistic_interval():
    import pandas as pd

    from sparkfleet.report import serving_sla

    assert serving_sla.median_interval([4, 4, 8]) == (4.0, None, None)  # n too small for 95%
    assert serving_sla.median_interval([8, 4, 6, 6, 8, 6]) == (6.0, 4.0, 8.0)  # n = 6: [x(1), x(6)], 96.9%
    median, low, high = serving_sla.median_interval(list(range(1, 21)))
    assert (median, low, high) == (10.5, 6.0, 15.0)  # n = 20: k = 6, coverage 95.9%
    rows = pd.DataFrame([{"engine": "vllm", "environment": e, "client": "llama-benchy", "model": "m", "depth": 0,
                          "pp": 64, "tg": 16,
                          "run_id": f"r{i}{e}", "iteration": i, "capacity": c, "cap": 16, "stopped": None,
                          "targets": "TTFT p99 <= 2000 ms"} for e, caps in (("native", [8, 8, 6]),
                                                                             ("container", [6, 6, 6]))
                         for i, c in enumerate(caps, 1)])
    cells = serving_sla.capacity_cells(rows)
    assert cells[["environment", "n", "median"]].values.tolist() == [["container", 3, 6.0], ["native", 3, 8.0]]
    assert cells["capacities"].tolist() == [[6, 6, 6], [8, 8, 6]]
