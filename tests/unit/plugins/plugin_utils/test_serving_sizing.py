"""Campaigns a Spark can run (issue 33 item 12): llama.cpp's -c/-np from the points, its KV cache checked against
the host's memory at plan time, a point deeper than the model's context window refused, and the README's serving
example both runnable and stating its estimated duration.

The figures: the Spark Arena v1 profile's deepest point is depth 100,000 + pp 2,048 + tg 128 (+ the 512-token slot
margin) = 102,688 tokens a slot, 10 concurrent requests; Qwen3-8B (36 layers x 8 KV heads x head dim 128, f16 K
and V) takes 147,456 bytes a token; gpt-oss-20b (12 full-attention layers x 8 x 64) 24,576.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate, planning, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, plan, resolve

REPO = Path(__file__).resolve().parents[4]
GGUF = "/var/lib/sparkfleet/models/qwen3-8b.gguf"
QWEN = {"name": "qwen3-8b", "hf_id": "Qwen/Qwen3-8B", "path": "/var/lib/sparkfleet/models/Qwen/Qwen3-8B",
        "gguf": GGUF}
#: Qwen3-8B told to use YaRN (its window then 131,072): the Arena's depths pass the window, not the memory
QWEN_YARN = {**QWEN, "context_window": 131072}
OSS = {"name": "gpt-oss-20b", "hf_id": "openai/gpt-oss-20b", "path": "/var/lib/sparkfleet/models/openai/gpt-oss-20b",
       "gguf": "/var/lib/sparkfleet/models/gpt-oss-20b-mxfp4.gguf"}
ARENA_SLOT = 100000 + 2048 + 128 + serving.LLAMACPP_SLOT_MARGIN  # 102,688


def _campaign(models, engines=("vllm", "llama.cpp"), **workload):
    return resolve({"name": "arena", "models": models, "environments": ["native"],
                    "workloads": [{"name": "arena", "preset": "spark-arena", **workload}],
                    "factors": {"engine": list(engines)}, "iterations": 1})


def _refusal(fn, *args) -> str:
    with pytest.raises(CampaignError) as err:
        fn(*args)
    assert len(err.value.problems) == 1, err.value.problems
    return err.value.problems[0]


def _llamacpp(campaign):
    return next(w for w in campaign["workloads"] if w["engine"] == "llama.cpp")


# ------------------------------------------------------------------------------------- -c and -np


def test_the_arenas_llamacpp_server_gets_a_slot_per_concurrent_request_each_holding_the_deepest_point():
    workload = _llamacpp(_campaign([QWEN_YARN]))
    argv = serving.server_argv(workload, {**QWEN_YARN, "path": GGUF})
    assert argv[argv.index("-np") + 1] == "10"  # the highest concurrency
    assert argv[argv.index("-c") + 1] == str(10 * ARENA_SLOT) == "1026880"  # -c is the TOTAL of the 10 slots
    # split slots (llama.cpp's layout with an explicit -np): a unified buffer would not be smaller, and slower
    assert not {"-kvu", "--kv-unified"} & set(argv)
    sizing = serving.llamacpp_sizing(workload)
    assert sizing["point"]["point"] == "d100000.c10.pp2048.tg128" and sizing["per_slot"] == ARENA_SLOT
    assert sizing["given"] == []


@pytest.mark.parametrize("server_args, ctx, slots", [
    (["-np", "4"], 4 * ARENA_SLOT, 4),               # fewer slots: requests beyond 4 queue; each slot still deep
    (["--parallel=2", "--flash-attn", "on"], 2 * ARENA_SLOT, 2),
    (["-c", "65536"], 65536, 10),                    # the owner's own -c: kept, and checked as it is
    (["--ctx-size", "0"], None, 10),                 # 0: the model's own context, unknown here
])
def test_server_args_that_set_the_context_or_the_slots_are_what_the_sizing_and_the_argv_use(server_args, ctx, slots):
    workload = _llamacpp(_campaign([QWEN_YARN], server_args=server_args))
    sizing = serving.llamacpp_sizing(workload)
    assert (sizing["ctx"], sizing["slots"]) == (ctx, slots)
    argv = serving.server_argv(workload, {**QWEN_YARN, "path": GGUF})
    assert argv.count("-c") + argv.count("--ctx-size") + sum(a.startswith("--ctx-size=") for a in argv) == 1
    assert argv.count("-np") + argv.count("--parallel") + sum(a.startswith("--parallel=") for a in argv) == 1
    assert argv[-len(server_args):] == server_args


# ------------------------------------------------------------------------------------- context window


def test_a_depth_beyond_the_models_context_window_is_refused_naming_the_point_the_workload_and_the_window():
    problem = _refusal(_campaign, [QWEN])
    # one problem for the workload, though two engines cross it: the window is the model's
    assert problem.startswith("campaign.workloads[0].profile: workload arena: 8 of its 28 points need more tokens "
                              "than model qwen3-8b's context window of 40,960 tokens")
    assert "the catalogue's figure for Qwen/Qwen3-8B" in problem
    assert "d100000.c10.pp2048.tg128, holds depth 100,000 + pp 2,048 + tg 128 = 102,176 tokens" in problem
    assert "the depths that fit: 0, 4,096, 8,192, 16,384, 32,768" in problem


def test_the_models_own_context_window_wins_over_the_catalogue_and_a_model_without_one_is_not_checked():
    assert _campaign([QWEN_YARN], engines=["vllm"])  # YaRN: 131,072
    assert _campaign([{**QWEN, "hf_id": None}], engines=["vllm"])  # nothing known: not checked
    problem = _refusal(_campaign, [{**OSS, "context_window": 16384}], ["vllm"])
    assert "window of 16,384 tokens (its context_window)" in problem and "16 of its 28 points" in problem


def test_a_window_that_holds_every_point_passes_for_every_engine():
    campaign = _campaign([OSS], engines=["vllm", "llama.cpp", "sglang", "trtllm-serve"])
    assert len(campaign["workloads"]) == 4


@pytest.mark.parametrize("bad, field", [(0, "context_window"), (True, "context_window"),
                                        ({"layers": 36, "kv_heads": 8}, "kv_shape"),
                                        ({"layers": 36, "kv_heads": 8, "head_dim": "128"}, "kv_shape")])
def test_malformed_model_facts_are_refused_naming_the_field(bad, field):
    with pytest.raises(CampaignError, match=rf"campaign\.models\[0\]\.{field}"):
        _campaign([{**QWEN, field: bad}], engines=["vllm"])


# ------------------------------------------------------------------------------------- KV vs memory


def test_a_llamacpp_kv_cache_larger_than_a_spark_is_refused_at_plan_time_naming_every_figure():
    campaign = _campaign([QWEN_YARN])
    problem = _refusal(plan, campaign, "spark1", {})
    assert problem.startswith("campaign.workloads: workload arena.llama.cpp, model qwen3-8b, host spark1: "
                              "llama.cpp's KV cache would take 141.0 GiB, more than the host's 119.2 GiB (assumed: a "
                              "DGX Spark's 128 GB of unified memory; set sparkfleet_serving_memory_gib for another "
                              "host)")
    for part in ("-c 1,026,880 tokens (10 slots (-np) of 102,688 tokens: the deepest point, d100000.c10.pp2048.tg128, "
                 "runs 10 requests", "147,456 bytes a token (36 layers x 8 KV heads x head dim 128 x K f16 + V f16",
                 "the catalogue's figure for Qwen/Qwen3-8B",
                 "give server_args [-ctk, q8_0, -ctv, q8_0] (74.9 GiB: a quantised KV cache)"):
        assert part in problem, part
    # vLLM sizes its cache from free memory: the same model and points pass for it
    assert plan(_campaign([QWEN_YARN], engines=["vllm"]), "spark1", {})


def test_a_quantised_kv_cache_that_fits_passes_and_the_plan_says_its_size():
    campaign = _campaign([QWEN_YARN], server_args=["-ctk", "q8_0", "--cache-type-v=q8_0"])
    assert plan(campaign, "spark1", {})
    assert "llama.cpp KV cache 74.9 GiB (-c 1,026,880 x q8_0/q8_0) for model qwen3-8b" in \
        estimate.serving_text(campaign, _llamacpp(campaign))


def test_the_hosts_memory_setting_replaces_the_spark_assumption_in_the_plan_and_the_validate_play():
    campaign = _campaign([QWEN_YARN])
    assert plan(campaign, "gh200", {"sparkfleet_serving_memory_gib": 480})
    oss = _campaign([OSS])
    assert plan(oss, "spark1", {})  # 23.5 GiB
    problem = _refusal(plan, oss, "small", {"sparkfleet_serving_memory_gib": 16})
    assert "23.5 GiB, more than the host's 16.0 GiB (sparkfleet_serving_memory_gib)" in problem
    # the validate play: the host's setting travels in its check, and the fleet's plan refuses naming the host
    check = planning.HostCheck("small", oss, planning.plan_settings({"sparkfleet_serving_memory_gib": 16}))
    with pytest.raises(CampaignError, match=r"host small: llama.cpp's KV cache would take 23\.5 GiB"):
        planning.plan_fleet([check], "/tmp/results-unused", "/", check_mode=True)
    assert settings.SETTINGS_BY_NAME["sparkfleet_serving_memory_gib"].default is None


def test_a_model_whose_shape_is_unknown_or_an_own_context_of_zero_is_not_checked():
    assert plan(_campaign([{**QWEN_YARN, "hf_id": None}]), "spark1", {})
    assert plan(_campaign([QWEN_YARN], server_args=["-c", "0"]), "spark1", {})
    assert estimate.llamacpp_kv(_llamacpp(_campaign([QWEN_YARN], server_args=["-ctk", "q3_k"])), QWEN_YARN) is None


def test_the_catalogues_models_pass_the_model_fields_checks():
    assert set(estimate.MODEL_FACTS) >= {"Qwen/Qwen3-8B", "openai/gpt-oss-20b", "openai/gpt-oss-120b"}
    for hf_id, facts in estimate.MODEL_FACTS.items():
        assert set(facts) == {"context_window", "kv_shape"}, hf_id
        resolve({"name": "c", "models": [{"name": "m", "hf_id": hf_id, **facts}], "environments": ["bare"],
                 "workloads": ["matmul"]})


# ------------------------------------------------------------------------------------- the README's example


def _readme_arena() -> tuple[dict, str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("### Serving: the engines Spark owners run")
    block = re.search(r"```yaml\n(sparkfleet_campaign:.*?)```", text[start:], re.S)
    return yaml.safe_load(block.group(1))["sparkfleet_campaign"], text[start:start + block.end() + 2000]


def test_the_readmes_serving_example_is_a_campaign_a_spark_can_run_and_states_its_estimated_duration():
    data, section = _readme_arena()
    campaign = resolve(data)
    runs = plan(campaign, "spark1", {})  # neither the window nor the KV check refuses it
    workload = _llamacpp(campaign)
    argv = serving.server_argv(workload, next(r.model for r in runs if r.workload is workload))
    assert argv[argv.index("-c") + 1] == "1026880" and argv[argv.index("-np") + 1] == "10"
    assert estimate.llamacpp_kv(workload, campaign["models"][0])["bytes"] / estimate.GIB < 25
    typical, upper = estimate.estimate_s(campaign)
    stated = (f"{len(runs)} runs per host: estimated about {estimate.duration_text(typical)} per host, at most "
              f"{estimate.duration_text(upper)}")
    assert stated in section, stated
