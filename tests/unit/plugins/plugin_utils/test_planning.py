"""The validate stage's Python (sparkfleet.planning): a host's check, then one plan for the fleet."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _ansible_modules import PLUGINS
from ansible.errors import AnsibleActionFail

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import resume
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import plan, resolve

REPO = Path(__file__).resolve().parents[4]
RAW = {"name": "c1", "models": [{"name": "m", "path": "/var/lib/sparkfleet/models/org/m"}],  # trtllm needs a path
       "environments": ["native"], "workloads": ["T1"]}


def _campaign(**over):
    data = {"name": "c1", "models": ["m"], "environments": [{"name": "bare", "kind": "bare"}, "container"],
            "workloads": [{"name": "w", "preset": "T1", "requests": 2}], "iterations": 2,
            "cooldown": {"max_wait_s": 100}, "timeout_s": 50}
    data.update(over)
    return resolve(data)


def _check(host, campaign=None, kept=None, **variables):
    """A host's check result for an already resolved campaign."""
    return planning.HostCheck(host, campaign or _campaign(), planning.plan_settings(variables), kept=kept or {})


def _config(campaign):
    return {"config_hash": campaign["config_hash"], "resolved": campaign}


# ----------------------------------------------------------------------------------------- step 1


def test_a_host_check_resolves_the_campaign_and_fills_the_settings_a_plan_needs():
    check = planning.check_host("h1", RAW, {"sparkfleet_report_after_s": 5})
    assert check.campaign["config_hash"] and check.campaign["iterations"] == 10  # the default
    assert check.settings["sparkfleet_report_after_s"] == 5
    assert check.settings["sparkfleet_work_dir"] == "/var/lib/sparkfleet"  # the registry default
    assert check.settings["sparkfleet_docker_variant"] == "study"


def test_a_host_check_names_every_bad_variable_with_its_host_and_warns_about_unknown_ones():
    with pytest.raises(planning.PlanningError) as err:
        planning.check_host("h1", RAW, {"sparkfleet_telemetry_interval_s": 0, "sparkfleet_work_dir": "rel"})
    message = str(err.value)
    assert message.startswith("bad inventory variables: 2 problems")
    assert "h1: sparkfleet_telemetry_interval_s: must be positive, got 0" in message
    assert "h1: sparkfleet_work_dir:" in message
    check = planning.check_host("h1", RAW, {"sparkfleet_telemetry_intervall_s": None})
    assert check.warnings == ["h1: sparkfleet_telemetry_intervall_s: not a sparkfleet setting (a typo?); ignored"]


def test_a_bad_campaign_is_refused_in_the_host_check_naming_its_fields():
    with pytest.raises(planning.CampaignError, match="campaign.workloads\\[0\\].preset: unknown preset 'T9'"):
        planning.check_host("h1", {"name": "x", "models": ["m"], "environments": ["native"], "workloads": ["T9"]},
                            {})


def test_the_default_campaign_depends_on_the_groups_and_the_kind():
    assert planning.default_campaign(["local"], "campaign")["name"] == "sanity"
    assert planning.default_campaign(["sparks"], "campaign")["name"] != "sanity"
    assert planning.default_campaign([], "reference")["name"]
    with pytest.raises(planning.PlanningError, match="default: must be one of campaign, reference"):
        planning.default_campaign([], "other")


# ----------------------------------------------------------------------------------------- step 2


def test_the_fleet_plan_gives_each_host_its_runs_async_limit_and_follower(tmp_path):
    checks = [_check("h1"), _check("h2", sparkfleet_report_after_s=10, sparkfleet_poll_interval_s=0.5)]
    fleet = planning.plan_fleet(checks, str(tmp_path), "/elsewhere")
    assert fleet.results_dir == str(tmp_path) and fleet.renamed_from is None
    for host in ("h1", "h2"):
        hp = fleet.hosts[host]
        assert hp.runs == [r.to_dict() for r in plan(fleet.campaign, host, {})]
        assert len(hp.runs) == 4 and hp.needs_native is False and hp.needs_container is True
        # 2 x (4 runs x (timeout 50 + max cooldown 100 + 120 slack) + 600 slack)
        assert hp.async_s == 2 * (4 * (50 + 100 + 120) + 600) == 3360
        # the estimate: 4 x (50 s timeout + 100 s max cooldown) at most; the nominal trtllm run is capped by timeout
        assert hp.summary.startswith(f"campaign c1 ({fleet.campaign['config_hash']}): 4 runs planned on {host}, "
                                     "order interleaved; estimated about ")
        assert ", at most 10 min per host (typical: cooldown" in hp.summary
    assert fleet.hosts["h1"].follow == {"poll_interval_s": 2.0, "report_after_s": 60.0,
                                        "retries": 4 * 2 + 3360 // 60 + 10}
    assert fleet.hosts["h2"].follow == {"poll_interval_s": 0.5, "report_after_s": 10, "retries": 4 * 2 + 336 + 10}


def test_a_disabled_cooldown_and_check_mode_shorten_the_async_limit(tmp_path):
    campaign = _campaign(cooldown={"enabled": False})
    fleet = planning.plan_fleet([_check("h1", campaign)], str(tmp_path), "/")
    assert fleet.hosts["h1"].async_s == 2 * (4 * (50 + 120) + 600)
    checked = planning.plan_fleet([_check("h1", campaign)], str(tmp_path), "/", check_mode=True)
    assert checked.hosts["h1"].async_s == 0  # Ansible runs a check-mode task in the foreground
    assert checked.hosts["h1"].follow["retries"] == fleet.hosts["h1"].follow["retries"]


def test_a_relative_results_dir_is_relative_to_the_directory_ansible_runs_in():
    campaign = _campaign(results_dir="out")
    assert planning.plan_fleet([_check("h1", campaign)], None, "/work").results_dir == "/work/out"
    assert planning.plan_fleet([_check("h1", campaign)], "/abs", "/work").results_dir == "/abs"


def test_hosts_given_different_campaigns_are_refused_naming_them(tmp_path):
    checks = [_check("h1"), _check("h2", _campaign(iterations=5)), _check("h3")]
    with pytest.raises(planning.PlanningError) as err:
        planning.plan_fleet(checks, str(tmp_path), "/")
    assert "the hosts were given different campaigns (h1, h3: campaign c1" in str(err.value)
    assert "h2: campaign c1" in str(err.value)


def test_a_change_kept_only_on_a_host_is_refused_though_the_controller_kept_nothing(tmp_path):
    """The controller's campaign.json is gone (another checkout, a wiped results directory): the host that
    keeps the old configuration still decides the resume, for the whole fleet."""
    old, new = _campaign(), _campaign(iterations=3)
    checks = [_check("h1", new), _check("h2", new, kept={"c1": _config(old)})]
    with pytest.raises(planning.PlanningError) as err:
        planning.plan_fleet(checks, str(tmp_path), "/")
    assert "h2: campaign 'c1' was started with another configuration (on this host" in str(err.value)
    assert "iterations: 2 -> 3" in str(err.value)

    fleet = planning.plan_fleet(checks, str(tmp_path), "/", on_change="new")
    renamed = resume.new_campaign_name("c1", new["config_hash"])
    assert fleet.campaign["name"] == renamed and fleet.renamed_from == "c1"
    for host in ("h1", "h2"):  # every host runs the same new id, not only the one that kept the old config
        assert fleet.hosts[host].runs == [r.to_dict() for r in plan(fleet.campaign, host, {})]
        assert "renamed from c1" in fleet.hosts[host].summary


def test_a_new_id_that_holds_yet_another_configuration_is_refused_too(tmp_path):
    old, new = _campaign(), _campaign(iterations=3)
    renamed = resume.new_campaign_name("c1", new["config_hash"])
    other = {**_campaign(iterations=4), "name": renamed}
    checks = [_check("h1", new, kept={"c1": _config(old), renamed: _config(other)})]
    with pytest.raises(planning.PlanningError, match=f"h1: campaign '{renamed}' was started with another"):
        planning.plan_fleet(checks, str(tmp_path), "/", on_change="new")
    with pytest.raises(planning.PlanningError, match="'mix' is not one of refuse, new"):
        planning.plan_fleet(checks, str(tmp_path), "/", on_change="mix")


def test_an_unchanged_campaign_resumes_whatever_the_controller_and_hosts_keep(tmp_path):
    campaign = _campaign()
    (tmp_path / "c1").mkdir()
    (tmp_path / "c1" / "campaign.json").write_text(json.dumps(_config(campaign)))
    moved = _campaign(results_dir="/elsewhere")  # where results go is no change
    fleet = planning.plan_fleet([_check("h1", moved, kept={"c1": _config(campaign)})], str(tmp_path), "/")
    assert fleet.campaign["name"] == "c1" and fleet.renamed_from is None


def test_an_unreadable_controller_copy_is_named(tmp_path):
    (tmp_path / "c1").mkdir()
    (tmp_path / "c1" / "campaign.json").write_text("{half")
    with pytest.raises(planning.PlanningError, match="campaign.json: cannot read the campaign kept there"):
        planning.plan_fleet([_check("h1")], str(tmp_path), "/")


def test_campaign_json_records_every_host_and_is_rewritten_only_when_it_changes(tmp_path):
    fleet = planning.plan_fleet([_check("h1"), _check("h2")], str(tmp_path), "/")
    path, changed = planning.write_campaign_file(fleet, {"ansible": "x"}, check_mode=True)
    assert changed and not Path(path).exists()  # check mode writes nothing
    path, changed = planning.write_campaign_file(fleet, {"ansible": "x"})
    doc = json.loads(Path(path).read_text())
    assert changed and path == str(tmp_path / "c1" / "campaign.json")
    assert doc["config_hash"] == fleet.campaign["config_hash"] and doc["resolved"] == fleet.campaign
    assert doc["hosts"]["h2"] == {"planned": 4, "run_ids": [r["run_id"] for r in fleet.hosts["h2"].runs]}
    assert planning.write_campaign_file(fleet, {"ansible": "x"}) == (path, False)
    assert list((tmp_path / "c1").iterdir()) == [Path(path)]  # no temporary file left behind


# ------------------------------------------------------------------- the action's one host command


def _action():
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("sparkfleet_action_campaign_check",
                                                  PLUGINS / "action" / "campaign_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_host_command_reports_missing_paths_and_kept_configurations(tmp_path):
    action = _action()
    (tmp_path / "model").mkdir()
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps({"config_hash": "abc", "resolved": {"name": "c1"}}))
    (tmp_path / "bad.json").write_text("{half")
    paths = [str(tmp_path / "model"), str(tmp_path / "it's gone; $(true)")]
    files = [str(kept), str(tmp_path / "none.json"), str(tmp_path / "bad.json")]
    out = subprocess.run(["sh", "-c", action.probe_command(paths, files)], capture_output=True, text=True)
    assert out.returncode == 0
    missing, configs = action.parse_probe(out.stdout, paths, files)
    assert missing == [paths[1]]
    assert configs == [{"config_hash": "abc", "resolved": {"name": "c1"}}, None, None]
    with pytest.raises(AnsibleActionFail, match="could not read the host's answer"):
        action.parse_probe("garbage", paths, files)


# ------------------------------------------------------------- models are where the engine looks


def _with_models(*paths, environments=("native",)):
    return {"name": "c1", "models": [{"name": f"m{i}", "path": p} for i, p in enumerate(paths)],
            "environments": list(environments), "workloads": ["T1"]}


def test_a_model_outside_the_models_directory_is_refused_naming_model_path_and_directory():
    campaign = _with_models("/var/lib/sparkfleet/models/org/ok", "/data/models/huggingface/org/far")
    with pytest.raises(planning.PlanningError) as err:
        planning.check_host("h1", campaign, {})
    message = str(err.value)
    assert "h1: model m1: path /data/models/huggingface/org/far lies outside the models directory " \
           "/var/lib/sparkfleet/models (sparkfleet_models_dir)" in message
    assert "m0" not in message and "\n" not in message  # one line, the model inside is not named
    # the directory follows the host's settings: its own models dir, or <work_dir>/models
    assert planning.check_host("h1", _with_models("/data/models/huggingface/org/far"),
                               {"sparkfleet_models_dir": "/data/models/"}).host == "h1"
    with pytest.raises(planning.PlanningError, match="outside the models directory /srv/sf/models"):
        planning.check_host("h1", campaign, {"sparkfleet_work_dir": "/srv/sf"})
    # '..' does not lead out unnoticed, a sibling with a common prefix is not inside
    with pytest.raises(planning.PlanningError, match="model m0: path /var/lib/sparkfleet/models/../x"):
        planning.check_host("h1", _with_models("/var/lib/sparkfleet/models/../x"), {})
    with pytest.raises(planning.PlanningError, match="model m0: path /var/lib/sparkfleet/models-old/x"):
        planning.check_host("h1", _with_models("/var/lib/sparkfleet/models-old/x"), {})


def test_a_trtllm_model_without_a_path_is_refused_naming_it_unless_a_hugging_face_cache_is_bound():
    campaign = {"name": "c1", "models": [{"name": "org/ok", "path": "/var/lib/sparkfleet/models/org/ok"}, "org/bare"],
                "environments": ["native"], "workloads": ["T1"]}
    with pytest.raises(planning.PlanningError) as err:
        planning.check_host("h1", campaign, {})
    message = str(err.value)
    assert message.startswith("sparkfleet_campaign") and "h1: model org/bare: no path" in message
    assert "org/ok" not in message and "\n" not in message
    assert planning.check_host("h1", campaign, {"sparkfleet_hf_cache_dir": "/data/hf"}).host == "h1"


def test_only_environments_that_see_the_host_through_binds_need_the_models_directory():
    far = "/data/models/huggingface/org/far"
    assert planning.check_host("h1", _with_models(far, environments=[{"name": "b", "kind": "bare"}]), {})
    with pytest.raises(planning.PlanningError, match="model m0: path /data/models"):
        planning.check_host("h1", _with_models(far, environments=["container"]), {})


def test_the_shipped_default_campaigns_lie_under_the_default_models_directory():
    for groups, kind in ((["sparks"], "campaign"), ([], "reference")):
        campaign = planning.default_campaign(groups, kind)
        assert all(m.get("path") for m in campaign["models"])
        assert planning.check_host("h1", campaign, {}).campaign["models"]


def test_the_host_command_tells_a_model_linked_out_of_the_models_directory(tmp_path):
    action = _action()
    models, far = tmp_path / "models", tmp_path / "far"
    (models / "org" / "real").mkdir(parents=True)
    (far / "m").mkdir(parents=True)
    (models / "org" / "linked").symlink_to(far / "m")
    (tmp_path / "dir-link").symlink_to(models)  # a models dir that is itself a link is fine
    paths = [str(tmp_path / "dir-link" / "org" / "real"), str(models / "org" / "linked"), str(models / "gone")]
    out = subprocess.run(["sh", "-c", action.probe_command(paths, [], str(tmp_path / "dir-link"))],
                         capture_output=True, text=True)
    assert out.returncode == 0
    assert action.parse_probe(out.stdout, paths, []) == ([paths[2]], [])
    assert action.linked_outside(out.stdout, paths, str(tmp_path / "dir-link")) == \
        [(paths[1], str(far / "m"), str(models))]


# ------------------------------------------------------------------------------- the plan's settings


def test_the_plan_carries_every_path_and_knob_with_the_registry_defaults_applied_once(tmp_path):
    check = planning.check_host("h1", RAW, {"sparkfleet_gpu_power_limit": "150", "sparkfleet_retry_failed": "yes",
                                            "sparkfleet_workload_env": {"CUDA_VISIBLE_DEVICES": "0"}})
    fleet = planning.plan_fleet([check], str(tmp_path), "/")
    got = fleet.to_dict()["hosts"]["h1"]
    assert got["paths"] == {"work_dir": "/var/lib/sparkfleet", "models_dir": "/var/lib/sparkfleet/models",
                            "results_root": "/var/lib/sparkfleet/results",
                            "results_dir": "/var/lib/sparkfleet/results/c1/h1", "hf_cache_dir": None}
    assert got["workload"] == {"env": {"CUDA_VISIBLE_DEVICES": "0"}, "telemetry_interval_s": 1.0,
                               "retry_failed": True, "fresh": False, "trtllm_unknown_version": "refuse"}
    assert got["gpu_state"] == {"gpus": None, "persistence_mode": None, "locked_clocks": None, "power_limit": 150.0,
                                "cpu_governor": None, "drop_caches": True}
    assert got["image"] == {"ref": check.campaign["image"], "offline": False, "archive": ""}
    assert got["rootfs"] == {"source": "image", "prune": False}
    assert got["preflight"]["max_gpu_temp_c"] == 60.0 and got["preflight"]["max_fail_percentage"] == 100
    assert got["docker"]["variant"] == "study" and got["reproducibility"] == {"tolerance_pct": 5.0,
                                                                             "acknowledge_host_differences": False}
    # the corpus: the collection's, which the serving_client role installs under the work directory
    assert got["serving"] == {"client": None, "aiperf": None, "corpus": "/var/lib/sparkfleet/clients/corpus.txt",
                              "install": []}
    assert got["needs_serving"] is False
    assert got["readiness"] == {"policy": "mark", "min_fraction": 0.9, "expected_clock_mhz": None, "probe_s": 3.0,
                                "degraded_bands": [[500, 890]]}
    assert got["campaign"] == "c1" and got["runs"] and got["total"] == len(got["runs"])
    # every setting a host can give reaches the plan, except the controller's own (campaign.json, the follower)
    carried = {name for keys in planning.PLAN_GROUPS.values() for name in keys.values()}
    controller_only = {"sparkfleet_results_dir", "sparkfleet_campaign_on_change", "sparkfleet_poll_interval_s",
                       "sparkfleet_report_after_s", "sparkfleet_serving_memory_gib"}
    assert carried | controller_only | {"sparkfleet_models_dir", "sparkfleet_image"} == \
        set(planning.settings.SETTINGS_BY_NAME)


def test_a_renamed_campaign_moves_the_plans_results_dir_with_it(tmp_path):
    check = _check("h1", kept={"c1": {"config_hash": "old", "resolved": {**_campaign(), "iterations": 9}}})
    check.knobs = planning.host_settings("h1", {"sparkfleet_work_dir": "/w"}, check.campaign)
    fleet = planning.plan_fleet([check], str(tmp_path), "/", on_change="new")
    paths = fleet.to_dict()["hosts"]["h1"]["paths"]
    assert fleet.renamed_from == "c1" and paths["results_dir"] == f"/w/results/{fleet.campaign['name']}/h1"


def test_a_standalone_plan_has_the_settings_and_no_runs_and_refuses_a_bad_variable():
    got = planning.standalone_plan("h1", {"sparkfleet_work_dir": "/w", "sparkfleet_rootfs_source": "overlay",
                                          "sparkfleet_campaign": {"name": "c9"}, "sparkfleet_typo": 1})
    assert got["runs"] == [] and got["campaign"] == "c9" and got["rootfs"]["source"] == "overlay"
    assert got["paths"]["models_dir"] == "/w/models" and got["paths"]["results_dir"] == "/w/results/c9/h1"
    assert got["image"]["ref"] == planning.settings.DEFAULT_IMAGE
    assert planning.standalone_plan("h1", {})["paths"]["results_dir"] == "/var/lib/sparkfleet/results/sanity/h1"
    # no campaign given, the host's groups known (playbooks/host_plan.yml): the default campaign's name and image
    local = planning.standalone_plan("h1", {}, ["local"])
    assert local["campaign"] == "sanity" and local["image"]["ref"] == "sparkfleet-local/sanity:bookworm"
    assert planning.standalone_plan("h1", {}, ["sparks"])["campaign"] == "study"
    with pytest.raises(planning.PlanningError, match="h1: sparkfleet_drop_caches: must be a boolean"):
        planning.standalone_plan("h1", {"sparkfleet_drop_caches": "maybe"})


# ------------------------------------------------------- the acknowledgement of host differences (issue 24)


def _acknowledging(host, value):
    """A host's check whose inventory gives sparkfleet_acknowledge_host_differences ``value`` (None: not given)."""
    variables = {} if value is None else {"sparkfleet_acknowledge_host_differences": value}
    return planning.check_host(host, RAW, variables)


def _campaign_text(tmp_path, name, checks):
    fleet = planning.plan_fleet(checks, str(tmp_path / name), "/")
    path, changed = planning.write_campaign_file(fleet, {"ansible": "x"})
    assert changed
    return Path(path).read_text()


def test_campaign_json_acknowledges_host_differences_only_when_every_host_does(tmp_path):
    doc = planning.plan_fleet([_acknowledging("h1", True), _acknowledging("h2", "yes")], str(tmp_path), "/") \
        .document({"ansible": "x"})
    assert doc["acknowledge_host_differences"] is True
    # one host's inventory does not speak for the fleet
    for values in ((True, False), (True, None), (False, False)):
        checks = [_acknowledging(f"h{i}", v) for i, v in enumerate(values, 1)]
        assert "acknowledge_host_differences" not in planning.plan_fleet(checks, str(tmp_path), "/") \
            .document({"ansible": "x"}), values


def test_campaign_json_without_the_acknowledgement_is_the_same_bytes_as_before(tmp_path):
    unset = _campaign_text(tmp_path, "unset", [_acknowledging("h1", None), _acknowledging("h2", None)])
    refused = _campaign_text(tmp_path, "false", [_acknowledging("h1", False), _acknowledging("h2", True)])
    assert refused == unset and "acknowledge" not in unset
    assert set(json.loads(unset)) == {"campaign", "config_hash", "order", "seed", "resolved", "hosts", "controller"}
    acknowledged = json.loads(_campaign_text(tmp_path, "true", [_acknowledging("h1", True),
                                                                _acknowledging("h2", True)]))
    # the flag is the only addition
    assert acknowledged.pop("acknowledge_host_differences") is True and acknowledged == json.loads(unset)


# ----------------------------------------------------------------------------------------- unmanaged endpoints

def _endpoint_campaign(url: str):
    profile = {"depth": [0], "concurrency": [1], "pp": [32], "tg": [8]}
    return _campaign(environments=[{"name": "bare", "kind": "bare"}], models=[{"name": "m", "path": "/m.gguf"}],
                     workloads=[{"name": "ext", "engine": "external", "profile": profile,
                                 "endpoint": {"url": url, "model": "m"}},
                                {"name": "own", "engine": "llama.cpp", "profile": profile}])


def _fleet_runs(campaign, tmp_path, **addresses) -> dict[str, set[str]]:
    checks = [planning.HostCheck(h, campaign, planning.plan_settings({}), address=a) for h, a in addresses.items()]
    fleet = planning.plan_fleet(checks, str(tmp_path), "/")
    return {h: {r["workload"]["name"] for r in p.runs} for h, p in fleet.hosts.items()}


def test_an_endpoint_on_an_inventory_host_is_measured_from_that_host_alone(tmp_path):
    """Two clients at their own pace against one server would measure each other: the host the URL names runs
    the workload (its state control and attestation cover the server); every host runs its own workloads."""
    runs = _fleet_runs(_endpoint_campaign("http://10.0.0.2:8000/v1"), tmp_path, h1="10.0.0.1", h2="10.0.0.2")
    assert runs == {"h1": {"own"}, "h2": {"own", "ext"}}
    by_name = _fleet_runs(_endpoint_campaign("http://h1:8000"), tmp_path, h1="10.0.0.1", h2="10.0.0.2")
    assert by_name == {"h1": {"own", "ext"}, "h2": {"own"}}


def test_an_endpoint_outside_the_inventory_is_measured_from_the_first_host_only(tmp_path):
    runs = _fleet_runs(_endpoint_campaign("http://serving.example:8000"), tmp_path, h1="10.0.0.1", h2="10.0.0.2")
    assert runs == {"h1": {"own", "ext"}, "h2": {"own"}}


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "http://localhost:8000", "http://[::1]:8000"])
def test_a_loopback_endpoint_is_each_hosts_own_server(tmp_path, url):
    runs = _fleet_runs(_endpoint_campaign(url), tmp_path, h1="10.0.0.1", h2="10.0.0.2")
    assert runs == {"h1": {"own", "ext"}, "h2": {"own", "ext"}}
