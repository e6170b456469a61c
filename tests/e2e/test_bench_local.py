"""The README's main job on the default localhost inventory: runs what exists, pretends nothing."""

from __future__ import annotations

import json
import subprocess


def test_bench_on_localhost_records_facts_and_says_what_did_not_run(ansible_env, repo, tmp_path):
    work = tmp_path / "work"
    proc = subprocess.run(["ansible-playbook", "bench.yml", "-e", f"sparkfleet_work_dir={work}"],
                          cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    host = json.loads((work / "results/sanity/localhost/host.json").read_text())
    assert host["host"] == "localhost" and host["kernel"] and host["memory_total_mb"] > 0
    assert "NOT RUN" in proc.stdout
    assert "campaign sanity (" in proc.stdout and "runs planned on localhost" in proc.stdout


def test_bench_rejects_a_bad_campaign_before_touching_the_host(ansible_env, repo, tmp_path):
    work = tmp_path / "work"
    bad = tmp_path / "bad.yml"
    bad.write_text("sparkfleet_campaign:\n  name: x\n  models: []\n  environments: [native]\n  workloads: [T9]\n")
    proc = subprocess.run(["ansible-playbook", "bench.yml", "-e", f"sparkfleet_work_dir={work}", "-e", f"@{bad}"],
                          cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "campaign.models: empty" in proc.stdout and "unknown preset 'T9'" in proc.stdout
    assert not work.exists()  # nothing was written on the host
