"""Limits and messages (issue 23): the matrix size is capped before it is expanded, validate prints runs and an
estimated duration per host, image references follow Docker's grammar, '~' is refused, a workload named like a
preset does not silently inherit another engine's parameters."""

from __future__ import annotations

import json
import time

import pytest

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, plan, resolve
from sparkfleet.cli import main


def base(**extra) -> dict:
    return {"name": "c", "models": ["m"], "environments": ["native", "container"], "workloads": ["T1"], **extra}


# ----------------------------------------------------------------------------------------- matrix size cap


def test_a_million_run_campaign_is_refused_before_the_matrix_is_built():
    campaign = base(models=[f"m{i}" for i in range(200)], workloads=["T1", "T2", "T3", "T4", "T5", "T6"],
                    iterations=10000, warmup_runs=100)  # 200 x 2 x 6 x 10100 = 24,240,000 runs per host
    start = time.perf_counter()
    with pytest.raises(CampaignError) as err:
        resolve(campaign)
    assert time.perf_counter() - start < 0.5  # counted, not planned (was: minutes)
    assert err.value.problems == [f"campaign.max_runs: {estimate.too_many(24_240_000, 10_000)}"]


def test_the_cap_counts_twins_and_factors_and_names_other_problems_too():
    with pytest.raises(CampaignError) as err:
        resolve(base(iterations=6000, timeout_s=-1))
    assert any(p.startswith("campaign.timeout_s:") for p in err.value.problems)
    assert any("12,000 runs per host" in p for p in err.value.problems)
    with pytest.raises(CampaignError, match="12,000 runs per host"):  # 2 kv_fraction levels double the workloads
        resolve(base(iterations=3000, factors={"kv_fraction": [0.5, 0.9]}))


def test_max_runs_raises_the_cap_and_does_not_change_the_campaign_identity():
    big = base(iterations=6000)  # 12,000 runs
    with pytest.raises(CampaignError, match="set max_runs to at least that number"):
        resolve(big)
    accepted = resolve({**big, "max_runs": 12000})
    assert "max_runs" not in accepted and len(plan(accepted, "h")) == 12000
    assert accepted["config_hash"] == resolve({**big, "max_runs": 20000})["config_hash"]
    with pytest.raises(CampaignError, match=r"campaign.max_runs: the matrix plans 4 runs per host, above the limit "
                                            "of 3"):
        resolve(base(iterations=2, max_runs=3))


def test_the_estimate_states_its_assumptions():
    c = resolve(base(iterations=5, timeout_s=600, cooldown={"min_wait_s": 60, "settle_window_s": 30,
                                                            "max_wait_s": 900}))
    typical, upper = estimate.estimate_s(c)
    assert typical == 10 * (60 + estimate.nominal_run_s("trtllm"))  # min_wait + a nominal trtllm run
    assert upper == 10 * (900 + 600)  # max_wait + timeout
    off = resolve(base(iterations=5, timeout_s=100, cooldown={"enabled": False}))
    assert estimate.estimate_s(off) == (10 * 100, 10 * 100)  # the nominal run capped by the timeout
    assert estimate.duration_text(45) == "45 s" and estimate.duration_text(3 * 3600) == "3.0 h"
    assert estimate.duration_text(5 * 86400) == "5.0 days"


def test_validate_prints_runs_and_the_estimated_duration_per_host(tmp_path, capsys):
    path = tmp_path / "c.yml"
    path.write_text(json.dumps(base(iterations=5, timeout_s=600, cooldown={"max_wait_s": 900},
                                    models=[{"name": "m", "path": "/var/lib/sparkfleet/models/m"}])))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "= 10 runs per host" in out
    assert "estimated about 55 min, at most 4.2 h per host" in out  # 10 x (30 s settle + 300 s); 10 x 1500 s
    assert "cooldown max_wait_s + timeout_s per run" in out
    assert main(["validate", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["estimated_s_per_host"]["upper_bound"] == 15000


# ------------------------------------------------------------------------------------ image references

GOOD_IMAGES = [
    "ubuntu", "ubuntu:22.04", "library/ubuntu:latest", "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13",
    "nvcr.io/nvidia/tensorrt-llm/release:spark-single-gpu-dev", "localhost/x", "localhost:5000/team/img:v1",
    "[::1]:5000/img", "192.168.1.10:5000/a_b/c__d/e--f:T_a.g-1", "Registry.Example.com/lower/name",
    "docker.io/library/busybox@sha256:" + "a" * 64, "busybox:1.36@sha256:" + "0" * 64, "a" * 200,
    "overlay:/", "overlay:/srv/rootfs",
]
BAD_IMAGES = [
    "Nvcr.io/UPPER:tag!", "UPPER", "nvcr.io/nvidia/Tensorrt:1", "with space:1", "nvcr.io/x::1", "x:", "x/",
    "/x", "-x", "x..y", "x:tag with space", "x:" + "t" * 129, "x@sha256:short", "f" * 64, "x:-tag", "",
    "nvcr.io/" + "a" * 300, "x:tag!", "x\ny",
]


@pytest.mark.parametrize("image", GOOD_IMAGES)
def test_references_docker_parses_are_accepted(image):
    assert settings.image_reference_problem(image) is None
    environments = ["native", "container"] if not image.startswith("overlay:") else ["native", "bare"]
    assert resolve(base(image=image, environments=environments))["image"] == image


@pytest.mark.parametrize("image", BAD_IMAGES)
def test_references_docker_cannot_parse_are_refused_naming_the_field(image):
    with pytest.raises(CampaignError) as err:
        resolve(base(image=image))
    assert [p for p in err.value.problems if p.startswith("campaign.image: ")], err.value.problems


def test_an_overlay_label_is_no_image_for_a_container():
    with pytest.raises(CampaignError, match="campaign.image: 'overlay:/' is an overlay of a host directory"):
        resolve(base(image="overlay:/"))


def test_the_host_image_setting_is_checked_the_same_way():
    errors, _ = settings.setting_problems("h1", {"sparkfleet_image": "Nvcr.io/UPPER:tag!"})
    assert errors and errors[0].startswith("h1: sparkfleet_image: ")
    assert settings.setting_problems("h1", {"sparkfleet_image": "nvcr.io/nvidia/x:1"}) == ([], [])


def test_a_long_hostile_reference_is_refused_quickly():
    start = time.perf_counter()
    assert settings.image_reference_problem("a" + "-a" * 2000 + "!") is not None
    assert settings.image_reference_problem("a." * 2000 + "!/x") is not None
    assert time.perf_counter() - start < 1.0


# ------------------------------------------------------------------------------ results_dir and presets


@pytest.mark.parametrize("value", ["~/x", "~", "~user/results"])
def test_a_literal_tilde_in_results_dir_is_refused(value):
    with pytest.raises(CampaignError, match=r"campaign.results_dir: .* starts with '~', which is not expanded"):
        resolve(base(results_dir=value))
    errors, _ = settings.setting_problems("h1", {"sparkfleet_results_dir": value})
    assert errors and errors[0].startswith("h1: sparkfleet_results_dir: ")


def test_results_dirs_without_a_tilde_are_accepted():
    assert resolve(base(results_dir="results/x~1"))["results_dir"] == "results/x~1"
    assert resolve(base(results_dir="/srv/results"))["results_dir"] == "/srv/results"


def test_a_workload_named_like_a_preset_with_another_engine_is_refused():
    with pytest.raises(CampaignError) as err:
        resolve(base(workloads=[{"name": "T1", "engine": "matmul", "size": 1024}]))
    assert err.value.problems[0].startswith("campaign.workloads[0].engine: 'matmul', but the workload is named like "
                                            "the preset 'T1', whose engine is 'trtllm'")


def test_presets_asked_for_are_still_inherited():
    same_engine = resolve(base(workloads=[{"name": "T1", "engine": "trtllm", "batch": 2}]))["workloads"][0]
    assert same_engine["input_len"] == 128 and same_engine["batch"] == 2
    explicit = resolve(base(workloads=[{"name": "T1", "preset": "T1", "engine": "hf-generate"}]))["workloads"][0]
    assert explicit["engine"] == "hf-generate" and explicit["input_len"] == 128  # asked for: T1's shape
    own = resolve(base(workloads=[{"name": "mm", "engine": "matmul", "size": 64}]))["workloads"][0]
    assert "input_len" not in own
