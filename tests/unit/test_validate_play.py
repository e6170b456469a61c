"""playbooks/validate.yml itself, on two local hosts: campaign_check on each, campaign_plan once, each host
handed its plan; a change kept only on a host is refused though the controller's campaign.json is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CAMPAIGN = {"name": "c1", "models": ["m"], "environments": ["native"], "workloads": ["matmul"], "iterations": 2,
            "cooldown": {"enabled": False}}


@pytest.fixture
def play(tmp_path):
    def run(*extra: str, campaign=None, hosts=None, check: bool = False) -> subprocess.CompletedProcess:
        hosts = hosts or {"h1": {}, "h2": {}}
        inventory = {"fleet": {"hosts": {
            name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                   "sparkfleet_work_dir": str(tmp_path / name), **over} for name, over in hosts.items()}}}
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
        (tmp_path / "campaign.yml").write_text(yaml.safe_dump({"sparkfleet_campaign": campaign or CAMPAIGN}))
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
        argv = [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "validate.yml"),
                "-i", str(tmp_path / "inventory.yml"), "-e", f"@{tmp_path / 'campaign.yml'}",
                "-e", f"sparkfleet_results_dir={tmp_path / 'results'}", *extra] + (["--check"] if check else [])
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return run


def test_each_host_is_handed_its_plan_and_campaign_json_records_the_fleet(play, tmp_path):
    checked = play(check=True)
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert "2 runs planned on h1" in checked.stdout and not (tmp_path / "results").exists()  # check mode

    proc = play("-e", "sparkfleet_telemetry_intervall_s=1")
    assert proc.returncode == 0, proc.stdout[-3000:]
    doc = json.loads((tmp_path / "results" / "c1" / "campaign.json").read_text())
    assert sorted(doc["hosts"]) == ["h1", "h2"] and doc["hosts"]["h2"]["planned"] == 2
    assert f"campaign c1 ({doc['config_hash']}): 2 runs planned on h2, order interleaved" in proc.stdout
    assert "h1: sparkfleet_telemetry_intervall_s: not a sparkfleet setting (a typo?); ignored" in \
        proc.stdout + proc.stderr
    assert "changed=1" in proc.stdout  # campaign.json written...
    again = play()
    assert again.returncode == 0 and "changed=0" in again.stdout.split("PLAY RECAP")[1]  # ...once


def test_a_change_kept_only_on_a_host_is_refused_and_new_renames_the_whole_fleet(play, tmp_path):
    assert play().returncode == 0
    kept = tmp_path / "h2" / "results" / "c1" / "h2" / "campaign-config.json"
    kept.parent.mkdir(parents=True)
    doc = json.loads((tmp_path / "results" / "c1" / "campaign.json").read_text())
    kept.write_text(json.dumps({"config_hash": doc["config_hash"], "resolved": doc["resolved"]}))
    (tmp_path / "results" / "c1" / "campaign.json").unlink()  # the controller's copy is gone

    changed = {**CAMPAIGN, "iterations": 3}
    refused = play(campaign=changed)
    assert refused.returncode != 0
    assert "h2: campaign 'c1' was started with another configuration (on this host" in refused.stdout
    assert "iterations: 2 -> 3" in refused.stdout
    assert not (tmp_path / "results" / "c1" / "campaign.json").exists()  # refused before anything was written

    renamed = play("-e", "sparkfleet_campaign_on_change=new", campaign=changed)
    assert renamed.returncode == 0, renamed.stdout[-3000:]
    (new_dir,) = [p for p in (tmp_path / "results").iterdir() if p.name.startswith("c1-")]
    doc = json.loads((new_dir / "campaign.json").read_text())
    assert doc["campaign"] == new_dir.name and sorted(doc["hosts"]) == ["h1", "h2"]
    assert "renamed from c1: its configuration changed" in renamed.stdout


def test_hosts_given_different_campaigns_are_refused(play, tmp_path):
    other = {**CAMPAIGN, "iterations": 5}
    proc = play(hosts={"h1": {}, "h2": {"sparkfleet_campaign": other}}, campaign=None)
    # -e wins over the host variable: one campaign
    assert proc.returncode == 0, proc.stdout[-3000:]
    (tmp_path / "campaign.yml").unlink()
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    split = subprocess.run([str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "validate.yml"),
                            "-i", str(tmp_path / "inventory.yml"), "-e", f"sparkfleet_results_dir={tmp_path}/r"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert split.returncode != 0
    assert "the hosts were given different campaigns (h1: campaign sanity" in split.stdout
    assert "h2: campaign c1" in split.stdout


def test_a_model_outside_the_models_directory_is_refused_before_any_host_is_changed(play, tmp_path):
    models = tmp_path / "models"
    (models / "org" / "inside").mkdir(parents=True)
    (tmp_path / "elsewhere" / "outside").mkdir(parents=True)  # it exists: only where it lies is wrong
    hosts = {"h1": {"sparkfleet_models_dir": str(models)}, "h2": {"sparkfleet_models_dir": str(models)}}
    outside = {**CAMPAIGN, "models": [{"name": "inside", "path": str(models / "org" / "inside")},
                                      {"name": "far", "path": str(tmp_path / "elsewhere" / "outside")}]}
    refused = play(campaign=outside, hosts=hosts)
    assert refused.returncode != 0
    assert (f"model far: path {tmp_path / 'elsewhere' / 'outside'} lies outside the models directory {models} "
            "(sparkfleet_models_dir)") in refused.stdout
    assert "model inside:" not in refused.stdout
    assert not (tmp_path / "results").exists() and not (tmp_path / "h1").exists()  # nothing written anywhere

    # the default models directory, <work_dir>/models, when the host does not set one
    refused = play(campaign={**CAMPAIGN, "models": [{"name": "inside", "path": str(models / "org" / "inside")}]})
    assert refused.returncode != 0
    assert f"h1: model inside: path {models / 'org' / 'inside'} lies outside the models directory " \
           f"{tmp_path / 'h1' / 'models'}" in refused.stdout

    # a link under the models directory that leads out of it: the chroot and the container cannot follow it
    (models / "org" / "linked").symlink_to(tmp_path / "elsewhere" / "outside")
    linked = play(campaign={**CAMPAIGN, "models": [{"name": "linked", "path": str(models / "org" / "linked")}]},
                  hosts=hosts)
    assert linked.returncode != 0
    assert f"model path {models / 'org' / 'linked'} is a link to {tmp_path / 'elsewhere' / 'outside'}, outside " \
           f"the models directory {models}" in linked.stdout

    ok = play(campaign={**CAMPAIGN, "models": [{"name": "inside", "path": str(models / "org" / "inside")}]},
              hosts=hosts)
    assert ok.returncode == 0, ok.stdout[-3000:]


def _show_plan(tmp_path, *imports: str) -> Path:
    """A playbook that imports ``imports`` (playbooks/...) and writes each host's sparkfleet_plan to <host>.json."""
    book = tmp_path / "show.yml"
    plays = [{"name": f"import {name}", "ansible.builtin.import_playbook": str(REPO / "playbooks" / name)}
             for name in imports]
    plays.append({"name": "Write the plan", "hosts": "all", "gather_facts": False, "tasks": [{
        "name": "Write it", "ansible.builtin.copy": {"dest": str(tmp_path / "{{ inventory_hostname }}.json"),
                                                     "content": "{{ sparkfleet_plan | to_json }}", "mode": "0644"},
        "delegate_to": "localhost"}]})
    book.write_text(yaml.safe_dump(plays))
    return book


def test_the_plan_carries_each_hosts_paths_and_knobs_and_a_stage_alone_gets_them_too(play, tmp_path):
    hosts = {"h1": {"sparkfleet_gpu_power_limit": 150}, "h2": {"sparkfleet_drop_caches": False}}
    proc = play(hosts=hosts)
    assert proc.returncode == 0, proc.stdout[-3000:]
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    base = [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "inventory.yml")]

    # after validate.yml (as bench.yml runs it): host_plan.yml keeps the full plan
    full = subprocess.run([*base, str(_show_plan(tmp_path, "validate.yml", "host_plan.yml")),
                           "-e", f"@{tmp_path / 'campaign.yml'}", "-e", f"sparkfleet_results_dir={tmp_path / 'r'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert full.returncode == 0, full.stdout[-3000:]
    h1 = json.loads((tmp_path / "h1.json").read_text())
    assert h1["total"] == 2 and h1["gpu_state"]["power_limit"] == 150 and h1["gpu_state"]["drop_caches"] is True
    assert h1["paths"]["results_dir"] == str(tmp_path / "h1" / "results" / "c1" / "h1")
    assert h1["paths"]["models_dir"] == str(tmp_path / "h1" / "models")
    assert json.loads((tmp_path / "h2.json").read_text())["gpu_state"]["drop_caches"] is False

    # a stage run alone (provision, restore, gpu_state, preflight): settings only, checked, no runs
    alone = subprocess.run([*base, str(_show_plan(tmp_path, "host_plan.yml")), "-e", "sparkfleet_rootfs_prune=yes"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0, alone.stdout[-3000:]
    h2 = json.loads((tmp_path / "h2.json").read_text())
    assert h2["runs"] == [] and h2["rootfs"]["prune"] is True and h2["gpu_state"]["drop_caches"] is False
    assert h2["paths"]["work_dir"] == str(tmp_path / "h2")
    bad = subprocess.run([*base, str(_show_plan(tmp_path, "host_plan.yml")), "-e", '{"sparkfleet_gpus": [-1]}'],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "sparkfleet_gpus: must be a list of GPU indices" in bad.stdout
