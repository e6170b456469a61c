"""Resume checks the campaign's configuration: a changed campaign under the same name is refused, naming what
changed, or runs under a new campaign id (``-e sparkfleet_campaign_on_change=new``); never mixed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import resolve
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.planning import (
    HostCheck,
    PlanningError,
    decide_resume,
    kept_reader,
)

resume = host_util("resume")
record = host_util("record")


def _campaign(**over):
    data = {"name": "c1", "models": [{"name": "m", "path": str(STANDINS)}],
            "environments": [{"name": "bare", "kind": "bare"}],
            "workloads": [{"name": "w", "preset": "T1", "requests": 2}], "iterations": 2}
    data.update(over)
    return resolve(data)


def _config(campaign):
    return {"config_hash": campaign["config_hash"], "resolved": campaign}


# ------------------------------------------------------------------------------------- what changed


def test_changes_name_each_changed_field_and_match_named_entries_by_name():
    old = _campaign()
    new = _campaign(iterations=3, workloads=[{"name": "w", "preset": "T1", "requests": 4},
                                             {"name": "w2", "preset": "T2"}], models=["m", "m2"])
    listed = resume.changes(old, new)
    assert "iterations: 2 -> 3" in listed
    assert "workloads[w].requests: 2 -> 4" in listed
    assert "workloads[w2]: added" in listed and "models[m2]: added" in listed
    assert not any(line.startswith("config_hash") for line in listed)
    assert resume.changes(old, _campaign()) == []


def test_a_moved_results_directory_alone_is_no_change():
    old, new = _campaign(), _campaign(results_dir="/elsewhere")
    assert old["config_hash"] != new["config_hash"]
    assert resume.changes(old, new) == [] and resume.same_measurement(_config(old), _config(new))


def test_a_field_that_only_one_version_resolves_is_no_change_at_its_empty_default():
    old = _campaign()
    assert resume.changes(old, {**old, "factors": None, "aa": False}) == []
    assert resume.changes(old, {**old, "aa": True}) == ["aa: (absent) -> true"]


def test_reordered_entries_are_a_change():
    old = _campaign(workloads=["T1", "T2"])
    assert resume.changes(old, _campaign(workloads=["T2", "T1"])) == ["workloads: order ['T1', 'T2'] -> ['T2', 'T1']"]


# ---------------------------------------------------------------------------------- the controller


def _kept(results: Path, campaign) -> None:
    (results / campaign["name"]).mkdir(parents=True, exist_ok=True)
    (results / campaign["name"] / "campaign.json").write_text(json.dumps(
        {"campaign": campaign["name"], "config_hash": campaign["config_hash"], "resolved": campaign}))


def campaign_resume(campaign, results_dir: str, on_change: str = "refuse", hosts_keep=None):
    """The validate stage's decision (campaign_plan): the campaign that runs; hosts_keep: host -> kept config."""
    checks = [HostCheck(h, campaign, {}, kept={campaign["name"]: kept}) for h, kept in (hosts_keep or {}).items()]
    return decide_resume(campaign, checks, kept_reader(results_dir), results_dir, on_change)[0]


def test_controller_resumes_a_new_or_unchanged_campaign(tmp_path):
    campaign = _campaign()
    assert campaign_resume(campaign, str(tmp_path)) == campaign  # never run
    _kept(tmp_path, campaign)
    assert campaign_resume(_campaign(), str(tmp_path)) == campaign  # same configuration


def test_controller_refuses_a_changed_campaign_naming_what_changed(tmp_path):
    _kept(tmp_path, _campaign())
    changed = _campaign(iterations=3, cooldown={"threshold_c": 50})
    with pytest.raises(PlanningError) as err:
        campaign_resume(changed, str(tmp_path))
    message = str(err.value)
    assert "campaign 'c1' was started with another configuration" in message
    assert "iterations: 2 -> 3" in message and "cooldown.threshold_c: 45 -> 50" in message
    assert f"-e sparkfleet_campaign_on_change=new to run it as campaign 'c1-{changed['config_hash'][:8]}'" in message


def test_controller_runs_a_changed_campaign_under_a_new_id_when_asked(tmp_path):
    _kept(tmp_path, _campaign())
    changed = _campaign(iterations=3)
    renamed = campaign_resume(changed, str(tmp_path), "new")
    assert renamed["name"] == f"c1-{changed['config_hash'][:8]}"
    assert renamed["config_hash"] == _campaign(iterations=3, name=renamed["name"])["config_hash"]
    _kept(tmp_path, renamed)  # its own results start; the same changed campaign again resumes them
    assert campaign_resume(_campaign(iterations=3), str(tmp_path), "new") == renamed
    with pytest.raises(PlanningError, match="is not one of refuse, new"):
        campaign_resume(changed, str(tmp_path), "mix")


# ----------------------------------------------------------------------------------------- the host


def _plan(campaign) -> list[dict]:
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import plan

    return [run.to_dict() for run in plan(campaign, "h1")]


def _args(tmp_path: Path, campaign, config=None) -> dict:
    return {"runs": _plan(campaign), "campaign": campaign["name"], "host": "h1",
            "results_root": str(tmp_path / "results"), "cooldown": {"enabled": False}, "timeout_s": 60,
            # the 1.1.0rc3 stand-in makes its dataset with the script stand-in; any directory serves as tokenizer
            "trtllm": {"version": "1.1.0rc3",
                       "surface": {"prepare_dataset_script": str(STANDINS / "prepare_dataset.py")}},
            "env": {"SPARKFLEET_FAKE_RUNTIME_S": "0.05", "SPARKFLEET_FAKE_ALLOC_MIB": "1"},
            "campaign_config": _config(campaign) if config is None else config,
            "versions": {"campaign_config_hash": campaign["config_hash"]}}


@pytest.fixture
def standins(monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDINS}:{os.environ['PATH']}")


def test_host_keeps_its_configuration_and_refuses_a_changed_one(tmp_path, standins):
    first = run_module(load_module("bench_run"), _args(tmp_path, _campaign()))
    assert first["counts"] == {"ok": 2} and first["summary"] == "2 runs \u2014 ok 2", first
    host_dir = tmp_path / "results/c1/h1"
    kept = json.loads((host_dir / resume.CONFIG_FILE).read_text())
    assert kept["config_hash"] == _campaign()["config_hash"] and kept["resolved"]["iterations"] == 2
    ledger = (host_dir / "ledger.jsonl").read_bytes()

    again = run_module(load_module("bench_run"), _args(tmp_path, _campaign()))
    assert again["counts"] == {"skipped": 2}  # unchanged: resumed

    changed = _campaign(iterations=3, workloads=[{"name": "w", "preset": "T1", "requests": 3}])
    for check_mode in (True, False):
        out = run_module(load_module("bench_run"), _args(tmp_path, changed), check_mode=check_mode)
        assert out.get("failed"), out
        assert out["msg"].startswith("h1: campaign 'c1' was started with another configuration (on this host")
        assert "iterations: 2 -> 3" in out["msg"] and "workloads[w].requests: 2 -> 3" in out["msg"]
    assert (host_dir / "ledger.jsonl").read_bytes() == ledger  # nothing ran, nothing was mixed in
    assert json.loads((host_dir / resume.CONFIG_FILE).read_text()) == kept


def test_host_results_from_before_the_kept_configuration_are_judged_by_their_records(tmp_path, standins):
    old = _campaign()
    args = _args(tmp_path, old)
    del args["campaign_config"]  # an older sparkfleet: no campaign-config.json, the hash only in the records
    assert run_module(load_module("bench_run"), args)["counts"] == {"ok": 2}
    host_dir = tmp_path / "results/c1/h1"
    assert not (host_dir / resume.CONFIG_FILE).exists()

    out = run_module(load_module("bench_run"), _args(tmp_path, _campaign(iterations=3)))
    assert out.get("failed") and f"config hash {old['config_hash']}" in out["msg"]
    assert "the fields that changed are unknown" in out["msg"]

    same = run_module(load_module("bench_run"), _args(tmp_path, old))  # the same campaign adopts them
    assert same["counts"] == {"skipped": 2} and (host_dir / resume.CONFIG_FILE).exists()


def test_equal_values_of_other_classes_are_no_change_but_true_is_not_one():
    """Ansible hands filters str/dict subclasses (data tags): equal values are the same setting."""

    class TaggedStr(str):
        pass

    old = _campaign()
    new = json.loads(json.dumps(old))
    new["name"] = TaggedStr(new["name"])
    new["workloads"][0]["name"] = TaggedStr("w")
    assert resume.changes(old, new) == []
    assert resume.changes({"a": 1}, {"a": True}) == ["a: 1 -> true"]
