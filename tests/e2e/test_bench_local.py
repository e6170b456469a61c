"""The README's main job on the default localhost inventory (the sanity campaign), and bad input."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from sparkfleet_host.record import validate


@pytest.mark.root
@pytest.mark.docker
@pytest.mark.slow
def test_the_localhost_sanity_campaign_completes(docker_engine, ansible_env, repo, tmp_path):
    work, results = tmp_path / "work", tmp_path / "results"
    proc = subprocess.run(["ansible-playbook", "bench.yml", "-e", f"sparkfleet_work_dir={work}",
                           "-e", f"sparkfleet_results_dir={results}"],
                          cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert "campaign sanity (" in proc.stdout and "6 runs planned on localhost" in proc.stdout
    records = [json.loads(p.read_text()) for p in (results / "sanity/localhost/runs").glob("*/record.json")]
    assert sorted(r["environment"] for r in records) == ["container"] * 3 + ["native"] * 3
    for rec in records:
        assert validate(rec) == [] and rec["status"] == "ok", rec["reason"]
        assert rec["metrics"]["gflops"] > 0 and rec["model_loaded"] == "matmul-fp32"
        assert rec["probe"]["dockerenv"] == ("yes" if rec["environment"] == "container" else "no")
    host = json.loads((results / "sanity/localhost/host.json").read_text())
    assert host["host"] == "localhost" and host["memory_total_mb"] > 0
    assert (results / "sanity/report/index.html").exists() and (results / "sanity/report/summary.md").exists()
    # The report's first answer, on the terminal: native vs container for the matmul cell, in words.
    assert re.search(r"(SAME|DIFFERENT|UNDETERMINED): matmul-fp32 / matmul: .*matmul throughput", proc.stdout)
    assert "matmul-fp32 / matmul, container vs native: matmul throughput" in proc.stdout, proc.stdout[-3000:]
    assert str(work) not in Path("/proc/self/mounts").read_text()  # restored: nothing left mounted


def test_bench_rejects_a_bad_campaign_before_touching_the_host(ansible_env, repo, tmp_path):
    work = tmp_path / "work"
    bad = tmp_path / "bad.yml"
    bad.write_text("sparkfleet_campaign:\n  name: x\n  models: []\n  environments: [native]\n  workloads: [T9]\n")
    proc = subprocess.run(["ansible-playbook", "bench.yml", "-e", f"sparkfleet_work_dir={work}", "-e", f"@{bad}"],
                          cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "campaign.models: empty" in proc.stdout and "unknown preset 'T9'" in proc.stdout
    assert not work.exists()  # nothing was written on the host


def test_bad_inventory_variables_and_missing_model_paths_stop_before_the_host_changes(ansible_env, repo, tmp_path):
    work = tmp_path / "work"
    campaign = tmp_path / "c.yml"
    # under the models directory (<work_dir>/models), where validation looks for it: it is only missing there
    campaign.write_text(f"sparkfleet_campaign:\n  name: x\n  models: [{{name: m, path: {work}/models/absent}}]\n"
                        "  environments: [native]\n  workloads: [T1]\n")
    bad_var = subprocess.run(["ansible-playbook", "bench.yml", "-e", f"sparkfleet_work_dir={work}",
                              "-e", "sparkfleet_telemetry_interval_s=0", "-e", f"@{campaign}"],
                             cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=300)
    assert bad_var.returncode != 0
    assert "localhost: sparkfleet_telemetry_interval_s: must be positive, got 0" in bad_var.stdout
    missing = subprocess.run(["ansible-playbook", "bench.yml", "-e", f"sparkfleet_work_dir={work}",
                              "-e", f"@{campaign}"],
                             cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=300)
    assert missing.returncode != 0
    assert f"localhost: model path(s) not found: {work}/models/absent (models m)" in missing.stdout
    assert not work.exists()
