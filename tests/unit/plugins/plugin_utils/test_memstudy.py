"""Memory-state factors as campaign axes, A/A pairs and the memory-study preset (issue 15)."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, plan, resolve

BASE = {"name": "m", "models": ["llama"], "environments": ["native", "container"], "workloads": ["T1"],
        "iterations": 2}


def test_factors_cross_every_workload_and_interleave_with_the_environments():
    c = resolve({**BASE, "factors": {"kv_fraction": [0.9, 0.5], "drop_caches": [False, True]}})
    names = [w["name"] for w in c["workloads"]]
    assert names == ["T1.kv0.9.keep", "T1.kv0.9.drop", "T1.kv0.5.keep", "T1.kv0.5.drop"]
    w = c["workloads"][3]
    assert (w["kv_fraction"], w["drop_caches"], w["base"]) == (0.5, True, "T1")
    assert w["factors"] == ["kv_fraction", "drop_caches"] and w["batch"] == 1  # the preset's fields
    assert c["factors"] == {"kv_fraction": [0.9, 0.5], "drop_caches": [False, True]}
    runs = plan(c, "h1")
    assert len(runs) == 2 * 4 * 2
    first = [(r.environment["name"], r.workload["name"]) for r in runs[:4]]
    assert first == [("native", "T1.kv0.9.keep"), ("container", "T1.kv0.9.keep"),
                     ("native", "T1.kv0.9.drop"), ("container", "T1.kv0.9.drop")]
    assert len({r.run_id for r in runs}) == len(runs)


def test_kv_fraction_crosses_trtllm_workloads_only():
    c = resolve({**BASE, "workloads": ["T1", "matmul"], "factors": {"kv_fraction": [0.5], "drop_caches": [True]}})
    assert [w["name"] for w in c["workloads"]] == ["T1.kv0.5.drop", "matmul.drop"]
    assert "kv_fraction" not in c["workloads"][1]


@pytest.mark.parametrize(("factors", "message"), [
    ({"kv_fraction": [1.5]}, "campaign.factors: kv_fraction: every level must be at most 1"),
    ({"kv_fraction": [0]}, "campaign.factors: kv_fraction: every level must be positive"),
    ({"kv_fraction": [None]}, "campaign.factors: kv_fraction: every level must not be null"),
    ({"kv_fraction": []}, "non-empty list"),
    ({"drop_caches": ["yes"]}, "drop_caches: every level must be a boolean"),
    ({"swap": [True]}, "unknown factor 'swap'"),
    ({"kv_fraction": [0.5, 0.5]}, "listed twice"),
    ([0.5], "campaign.factors: must be a mapping"),
])
def test_bad_factors_name_the_field(factors, message):
    with pytest.raises(CampaignError, match=message):
        resolve({**BASE, "factors": factors})


def test_a_workload_field_and_a_factor_for_the_same_thing_conflict():
    with pytest.raises(CampaignError, match=r"campaign.workloads\[0\].kv_fraction: set here and in campaign.factors"):
        resolve({**BASE, "workloads": [{"name": "w", "preset": "T1", "kv_fraction": 0.5}],
                 "factors": {"kv_fraction": [0.9]}})


def test_workload_memory_fields_are_checked():
    c = resolve({**BASE, "workloads": [{"name": "w", "preset": "T1", "kv_fraction": 0.7, "drop_caches": True}]})
    assert c["workloads"][0]["kv_fraction"] == 0.7 and c["workloads"][0]["drop_caches"] is True
    with pytest.raises(CampaignError, match=r"campaign.workloads\[0\].kv_fraction: must be at most 1"):
        resolve({**BASE, "workloads": [{"name": "w", "preset": "T1", "kv_fraction": 1.5}]})
    with pytest.raises(CampaignError, match=r"campaign.workloads\[0\].drop_caches: must be a boolean"):
        resolve({**BASE, "workloads": [{"name": "w", "preset": "T1", "drop_caches": "yes"}]})


def test_the_same_environment_twice_is_an_aa_pair():
    c = resolve({**BASE, "environments": ["native", "native", "container"]})
    envs = {e["name"]: e for e in c["environments"]}
    assert list(envs) == ["native", "native.aa", "container"]
    assert envs["native"]["aa_group"] == envs["native.aa"]["aa_group"] == "native"
    assert (envs["native"]["aa_member"], envs["native.aa"]["aa_member"]) == ("a", "b")
    assert envs["native.aa"]["kind"] == "native" and "aa_group" not in envs["container"]
    runs = plan(c, "h1")
    assert [r.environment["name"] for r in runs[:3]] == ["native", "native.aa", "container"]


def test_the_same_name_with_other_settings_is_still_a_duplicate():
    with pytest.raises(CampaignError, match="duplicate name 'container'"):
        resolve({**BASE, "environments": ["container", {"name": "container", "docker_flags": ["--ipc=host"]}]})


def test_aa_true_twins_every_environment_and_a_list_only_those_named():
    both = resolve({**BASE, "aa": True})
    assert [e["name"] for e in both["environments"]] == ["native", "native.aa", "container", "container.aa"]
    assert both["aa"] is True
    one = resolve({**BASE, "environments": ["native", {"name": "docker", "kind": "container",
                                                       "docker_flags": ["--ipc=host"]}], "aa": ["docker"]})
    envs = {e["name"]: e for e in one["environments"]}
    assert list(envs) == ["native", "docker", "docker.aa"]
    assert envs["docker.aa"]["docker_flags"] == ["--ipc=host"] and envs["docker.aa"]["aa_group"] == "docker"
    with pytest.raises(CampaignError, match="campaign.aa: 'nope' is not one of the campaign's environments"):
        resolve({**BASE, "aa": ["nope"]})
    with pytest.raises(CampaignError, match="campaign.aa: must be true, false or a list"):
        resolve({**BASE, "aa": "yes"})


def test_identical_settings_under_two_names_are_an_aa_pair():
    c = resolve({**BASE, "environments": [{"name": "d1", "kind": "container", "variant": "study"},
                                          {"name": "d2", "kind": "container", "variant": "study"},
                                          {"name": "d3", "kind": "container", "variant": "no-shm-size"}]})
    envs = {e["name"]: e for e in c["environments"]}
    assert envs["d1"]["aa_group"] == envs["d2"]["aa_group"] == "d1" and "aa_group" not in envs["d3"]


def test_a_campaign_without_the_new_keys_is_resolved_as_before():
    c = resolve(BASE)
    assert not {"factors", "aa", "preset"} & set(c)
    assert all("aa_group" not in e for e in c["environments"])
    assert [w["name"] for w in c["workloads"]] == ["T1"] and "base" not in c["workloads"][0]


def test_memory_study_preset():
    assert "memory-study" in settings.CAMPAIGN_PRESET_NAMES  # a campaign of the catalogue
    c = resolve({"preset": "memory-study"})
    assert c["name"] == "memory-study" and c["preset"] == "memory-study"
    assert [e["name"] for e in c["environments"]] == ["native", "container", "container.aa", "container-memlimit"]
    assert [w["name"] for w in c["workloads"]] == ["study.kv0.9.keep", "study.kv0.9.drop", "study.kv0.5.keep",
                                                   "study.kv0.5.drop"]
    assert "--memory=96g" in c["environments"][3]["docker_flags"]
    assert len(plan(c, "spark1")) == 4 * 4 * (5 + 1)
    own = resolve({"preset": "memory-study", "name": "mine", "models": ["qwen"], "iterations": 2})
    assert own["name"] == "mine" and own["models"][0]["name"] == "qwen" and own["iterations"] == 2
    with pytest.raises(CampaignError, match="campaign.preset: 'nope' is not one of memory-study"):
        resolve({**BASE, "preset": "nope"})


def test_workload_names_do_not_depend_on_the_order_of_the_factors():
    a = resolve({**BASE, "factors": {"drop_caches": [True], "kv_fraction": [0.5]}})
    assert [w["name"] for w in a["workloads"]] == ["T1.kv0.5.drop"]


def test_kv_fraction_on_a_workload_without_a_kv_cache_is_refused():
    with pytest.raises(CampaignError, match=r"campaign.workloads\[0\].kv_fraction: only a trtllm workload"):
        resolve({**BASE, "workloads": [{"name": "mm", "preset": "matmul", "kv_fraction": 0.5}]})
