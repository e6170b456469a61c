"""bench.yml itself with one host of the fleet unreachable from the start (issue 23): the unreachable host is
reported, and the reachable one is validated, planned, provisioned, measured, collected and reported.

The unreachable host is a fake-fleet host (a network namespace this test created) whose sshd was stopped:
its address answers, nothing listens on port 22.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playrecap import play_recap

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker, pytest.mark.slow]


def test_bench_goes_on_without_an_unreachable_host(fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(2)
    up, gone = fleet.hosts
    fleet.stop_sshd(gone)
    campaign = {
        "name": "partial",
        "image": test_image,
        # the sanity check's matmul (numpy, in the test image): the fleet's behaviour is under test, not an engine
        "models": [{"name": "matmul-fp32"}],
        "environments": ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}],
        "workloads": [{"name": "mm", "preset": "matmul", "size": 128, "iterations": 2}],
        "iterations": 1,
        "cooldown": {"enabled": False},
        "timeout_s": 300,
    }
    path = tmp_path / "partial.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    results = tmp_path / "results"
    env = dict(ansible_env)
    env["ANSIBLE_SSH_ARGS"] = "-o ControlMaster=auto -o ControlPersist=60s -o ConnectTimeout=10"
    proc = subprocess.run(
        ["ansible-playbook", "-i", fleet.inventory, "bench.yml", "-e", f"@{path}",
         "-e", f"sparkfleet_results_dir={results}", "-e", "sparkfleet_image_offline=true",
         "-e", "sparkfleet_preflight_max_load_per_cpu=100", "-e", "sparkfleet_preflight_min_free_memory_gib=0.5",
         "-e", "sparkfleet_preflight_min_free_disk_gib=1"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    out = proc.stdout[-6000:] + proc.stderr[-3000:]
    # ansible-playbook's rc when a host was unreachable (and none failed): the run says so
    assert proc.returncode == 4, out
    recap = play_recap(proc.stdout)
    assert recap[gone.name]["unreachable"] == 1 and recap[gone.name]["changed"] == 0, out
    assert recap[up.name]["unreachable"] == 0 and recap[up.name]["failed"] == 0, out

    campaign_dir = results / "partial"
    doc = json.loads((campaign_dir / "campaign.json").read_text())
    # both hosts' runs are planned: the unreachable one's are on record as not delivered
    assert {h: v["planned"] for h, v in doc["hosts"].items()} == {up.name: 2, gone.name: 2}
    records = [json.loads(p.read_text()) for p in (campaign_dir / up.name / "runs").glob("*/record.json")]
    assert sorted(r["environment"] for r in records) == ["container", "native"]
    assert all(r["status"] == "ok" for r in records), [(r["run_id"], r["reason"]) for r in records]
    assert not (campaign_dir / gone.name / "runs").exists()
    assert not Path(gone.work_dir, "results").exists()  # nothing ran there
    # A plain ansible-playbook user then writes the report: it covers what was measured, names the rest missing.
    report = subprocess.run([str(Path(sys.executable).parent / "sparkfleet"), "report", str(campaign_dir)],
                            capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    assert (campaign_dir / "report" / "summary.md").exists()
