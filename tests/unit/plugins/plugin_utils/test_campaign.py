"""Campaign validation (errors name the field) and the run plan (order, identity, warm-ups)."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, load, plan, resolve
from sparkfleet.cli import main


def _good(**over):
    c = {"name": "t", "models": [{"name": "deepseek", "hf_id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"},
                                  {"name": "qwen72b"}],
         "environments": ["native", "container"], "workloads": ["study"], "iterations": 2}
    c.update(over)
    return c


def test_presets_resolve_to_the_study_method():
    c = resolve(_good(workloads=["study", "T1", "T3", "T6"]))
    study, t1, t3, t6 = c["workloads"]
    assert (study["requests"], study["output_len"]) == (50, 128)
    assert (t1["batch"], t1["input_len"], t1["output_len"]) == (1, 128, 32)
    assert (t3["batch"], t3["input_len"], t3["output_len"]) == (1, 2048, 512)
    assert (t6["batch"], t6["input_len"], t6["output_len"]) == (32, 512, 128)


def test_wrapped_and_bare_forms_are_the_same_campaign():
    assert resolve({"sparkfleet_campaign": _good()}) == resolve(_good())


BAD = [
    ({"models": []}, "campaign.models: empty"),
    ({"models": "deepseek"}, "campaign.models: must be a list"),
    ({"models": [{"name": ""}]}, "campaign.models[0].name: required"),
    ({"models": [{"name": "a"}, {"name": "a"}]}, "campaign.models[1].name: duplicate name 'a'"),
    ({"models": [{"name": "a", "size": 7}]}, "campaign.models[0].size: unknown key"),
    ({"models": [{"name": "a", "path": "relative/dir"}]}, "campaign.models[0].path: must be absolute"),
    ({"models": [{"name": "a\nb"}]}, "campaign.models[0].name: 'a\\nb' contains a newline"),
    ({"environments": []}, "campaign.environments: empty"),
    ({"environments": [{"name": "x", "kind": "vm"}]}, "campaign.environments[0].kind: 'vm' is not one of"),
    ({"environments": [{"name": "native", "docker_flags": ["--x"]}]}, "only a container environment"),
    ({"environments": [{"name": "c", "kind": "container", "docker_flags": "--ipc=host"}]},
     "campaign.environments[0].docker_flags: must be a list"),
    ({"environments": [{"name": "c", "kind": "container", "docker_flags": [1]}]}, "every entry must be a string"),
    ({"workloads": []}, "campaign.workloads: empty"),
    ({"workloads": ["T9"]}, "campaign.workloads[0].preset: unknown preset 'T9'"),
    ({"workloads": [{"name": "w", "engine": "onnx"}]}, "campaign.workloads[0].engine: 'onnx' is not one of"),
    ({"workloads": [{"name": "w", "preset": "T1", "batch": 0}]}, "workloads[0].batch: must be between 1 and"),
    ({"workloads": [{"name": "w", "preset": "T1", "batch": "4"}]}, "campaign.workloads[0].batch: must be an integer"),
    ({"workloads": [{"name": "w", "preset": "T1", "mode": "offline"}]}, "campaign.workloads[0].mode"),
    ({"iterations": 0}, "campaign.iterations: must be between 1 and 10000"),
    ({"iterations": "10"}, "campaign.iterations: must be an integer"),
    ({"iterations": True}, "campaign.iterations: must be an integer, got a boolean"),
    ({"warmup_runs": -1}, "campaign.warmup_runs: must not be negative"),
    ({"order": "alphabetical"}, "campaign.order: 'alphabetical' is not one of"),
    ({"timeout_s": 0}, "campaign.timeout_s: must be positive"),
    ({"cooldown": {"min_wait_s": 600, "max_wait_s": 60}}, "campaign.cooldown.min_wait_s: 600 is above max_wait_s 60"),
    ({"cooldown": {"poll_interval_s": 0}}, "campaign.cooldown.poll_interval_s: must be positive"),
    ({"cooldown": {"on_timeout": "retry"}}, "campaign.cooldown.on_timeout: 'retry' is not one of continue, fail"),
    ({"cooldown": {"threshold": 45}}, "campaign.cooldown.threshold: unknown key"),
    ({"cooldown": 300}, "campaign.cooldown: must be a mapping"),
    ({"name": "my campaign/../x"}, "campaign.name: 'my campaign/../x' must use only letters"),
    ({"colour": "blue"}, "campaign.colour: unknown key"),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_campaigns_are_rejected_naming_the_field(change, message):
    with pytest.raises(CampaignError) as err:
        resolve(_good(**change))
    assert any(message in p for p in err.value.problems), err.value.problems


def test_missing_required_fields_and_wrong_top_level_type():
    with pytest.raises(CampaignError) as err:
        resolve({"iterations": 3})
    assert {"campaign.name: required", "campaign.models: required"} <= set(err.value.problems)
    with pytest.raises(CampaignError, match="campaign must be a mapping, got a list"):
        resolve([1, 2])


def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "c.yml"
    bad.write_text("name: t\nmodels: [a, b\nworkloads: [study]\n")
    with pytest.raises(CampaignError, match=r"c\.yml: not valid YAML line \d+ column \d+"):
        load(bad)


def test_interleaved_order_alternates_environments_and_flips_each_iteration():
    runs = plan(resolve(_good(models=["m"])), "h")
    assert [(r.environment["name"], r.iteration) for r in runs] == [
        ("native", 1), ("container", 1), ("container", 2), ("native", 2)]
    assert [r.order_index for r in runs] == [0, 1, 2, 3]


def test_sequential_order_is_the_studys():
    runs = plan(resolve(_good(order="sequential")), "h")
    assert [(r.model["name"], r.environment["name"], r.iteration) for r in runs][:4] == [
        ("deepseek", "native", 1), ("deepseek", "native", 2), ("deepseek", "container", 1),
        ("deepseek", "container", 2)]


def test_randomized_order_is_seeded_same_on_every_host_and_complete():
    c = resolve(_good(order="randomized", seed=7, iterations=5))
    a, b = plan(c, "h1"), plan(c, "h2")
    key = [(r.model["name"], r.environment["name"], r.iteration) for r in a]
    assert key == [(r.model["name"], r.environment["name"], r.iteration) for r in b]
    other = plan(resolve(_good(order="randomized", seed=8, iterations=5)), "h1")
    assert key != [(r.model["name"], r.environment["name"], r.iteration) for r in other]
    assert len(set(key)) == 2 * 2 * 5


def test_warmups_come_first_and_run_ids_are_unique():
    runs = plan(resolve(_good(warmup_runs=1)), "h")
    assert all(r.warmup for r in runs[:4]) and not any(r.warmup for r in runs[4:])
    assert len({r.run_id for r in runs}) == len(runs) == 4 + 8


MODELS_UNDER_THE_DEFAULT_DIR = [{"name": "deepseek", "path": "/var/lib/sparkfleet/models/deepseek"},
                                {"name": "qwen72b", "path": "/var/lib/sparkfleet/models/qwen72b"}]


def test_validate_command(tmp_path, capsys):
    good = tmp_path / "good.yml"
    good.write_text(yaml.safe_dump({"sparkfleet_campaign": _good(models=MODELS_UNDER_THE_DEFAULT_DIR)}))
    assert main(["validate", str(good)]) == 0
    assert "8 runs per host" in capsys.readouterr().out
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump(_good(iterations=0)))
    assert main(["validate", str(bad)]) == 2
    assert "campaign.iterations" in capsys.readouterr().err


def test_validate_command_refuses_a_model_outside_the_models_dir_it_is_given(tmp_path, capsys):
    models = [{"name": "deepseek", "path": "/data/models/huggingface/deepseek"}]
    campaign = tmp_path / "c.yml"
    campaign.write_text(yaml.safe_dump(_good(models=models)))
    assert main(["validate", str(campaign), "--models-dir", "/data/models/huggingface"]) == 0
    capsys.readouterr()
    assert main(["validate", str(campaign), "--models-dir", "/var/lib/sparkfleet/models"]) == 2
    err = capsys.readouterr().err
    assert "model deepseek: path /data/models/huggingface/deepseek lies outside the models directory " \
           "/var/lib/sparkfleet/models" in err
    assert main(["validate", str(campaign), "--models-dir", "models"]) == 2
    assert "--models-dir: must be an absolute path" in capsys.readouterr().err


# Issue 33: validate uses the hosts' default models directory, as plan and the playbooks do, and refuses a trtllm
# model without a path. (models, environments, workloads, extra arguments) -> (exit status, models named).
VALIDATE_CASES = {
    "outside the default models dir": ([{"name": "far", "path": "/data/far"}], None, None, [], 2, ["far"]),
    "under the default models dir": ([{"name": "near", "path": "/var/lib/sparkfleet/models/near"}], None, None, [],
                                     0, []),
    "under the work dir's models dir": ([{"name": "w", "path": "/srv/sf/models/w"}], None, None,
                                        ["-e", "sparkfleet_work_dir=/srv/sf"], 0, []),
    "the host's models dir by --vars' setting": ([{"name": "v", "path": "/data/v"}], None, None,
                                                 ["-e", "sparkfleet_models_dir=/data"], 0, []),
    "a bare environment binds nothing": ([{"name": "far", "path": "/data/far"}], [{"name": "b", "kind": "bare"}],
                                         None, [], 0, []),
    "trtllm without a path": ([{"name": "nopath", "hf_id": "org/m"}], None, None, [], 2, ["nopath"]),
    "trtllm without a path, an HF cache bound": ([{"name": "nopath", "hf_id": "org/m"}], None, None,
                                                 ["-e", "sparkfleet_hf_cache_dir=/srv/hf"], 0, []),
    "matmul needs no path": ([{"name": "matmul-fp32"}], None, ["matmul"], [], 0, []),
}


@pytest.mark.parametrize("case", list(VALIDATE_CASES))
def test_validate_checks_models_as_the_hosts_would(tmp_path, capsys, case):
    models, environments, workloads, extra, code, named = VALIDATE_CASES[case]
    over = {"models": models, **({"environments": environments} if environments else {}),
            **({"workloads": workloads} if workloads else {})}
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(_good(**over)))
    assert main(["validate", str(path), *extra]) == code
    err = capsys.readouterr().err
    for name in named:
        assert f"model {name}:" in err


def test_every_catalogue_campaign_passes_validate_on_default_hosts(capsys):
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.settings import CAMPAIGN_PRESET_NAMES, CATALOGUE

    for name in CAMPAIGN_PRESET_NAMES:
        assert main(["validate", f"{CATALOGUE}/campaigns/{name}.yml"]) == 0, capsys.readouterr().err


def test_the_plan_carries_each_runs_full_launch_spec():
    """Resolved once on the controller (issue 14): a container's docker flags from the host's settings, the
    timeout and the cooldown; the matrix role passes the plan to bench_run as it is."""
    c = resolve(_good(environments=["native", "container", {"name": "lean", "kind": "container",
                                                             "variant": "no-shm-size"},
                                    {"name": "own", "kind": "container", "docker_flags": ["--ipc=host"]}],
                      timeout_s=600, cooldown={"max_wait_s": 120}))
    runs = [r.to_dict() for r in plan(c, "h1", {"sparkfleet_docker_flags": ["--ipc=host", "--shm-size=1g"]})]
    flags = {r["environment"]["name"]: r["environment"]["docker_flags"] for r in runs}
    assert flags == {"native": None, "container": ["--ipc=host", "--shm-size=1g"], "lean": ["--ipc=host"],
                     "own": ["--ipc=host"]}
    assert all(r["timeout_s"] == 600 and r["cooldown"] == c["cooldown"] and r["cooldown"]["max_wait_s"] == 120
               for r in runs)
    default = plan(c, "h1")[1].to_dict()["environment"]  # no host settings: the registry's study flags
    assert default["docker_flags"] == ["--gpus", "all", "--ipc=host", "--shm-size=60g", "--ulimit", "memlock=-1",
                                       "--ulimit", "stack=67108864"]


def test_a_variant_the_host_does_not_define_is_refused_naming_host_and_field():
    c = resolve(_good(environments=[{"name": "x", "kind": "container", "variant": "tiny"}]))
    with pytest.raises(CampaignError, match=r"campaign\.environments\[0\]\.variant: on h1: unknown Docker "
                                            r"environment variant 'tiny'"):
        plan(c, "h1")
    assert plan(c, "h1", {"sparkfleet_docker_variants": {"tiny": {"extra_flags": ["--memory=1g"]}}})
