"""The README's main job on the default localhost inventory (the sanity campaign, then its report), and bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate


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
    # bench_follow prints each finished run once over its until-retries (on ansible-core 2.19 and 2.21 alike)
    shown = re.findall(r"localhost: run (\d+)/6 ", proc.stdout)
    assert sorted(shown, key=int) == [str(n) for n in range(1, 7)], shown
    records = [json.loads(p.read_text()) for p in (results / "sanity/localhost/runs").glob("*/record.json")]
    assert sorted(r["environment"] for r in records) == ["container"] * 3 + ["native"] * 3
    for rec in records:
        assert validate(rec) == [] and rec["status"] == "ok", rec["reason"]
        assert rec["metrics"]["gflops"] > 0 and rec["model_loaded"] == "matmul-fp32"
        assert rec["probe"]["dockerenv"] == ("yes" if rec["environment"] == "container" else "no")
    host = json.loads((results / "sanity/localhost/host.json").read_text())
    assert host["host"] == "localhost" and host["memory_total_mb"] > 0
    # bench.yml ends by saying how to write the report; the README's next step writes it.
    assert f"write the report with: sparkfleet report {results}/sanity" in proc.stdout
    assert not (results / "sanity/report").exists()
    report = subprocess.run([sys.executable, "-m", "sparkfleet", "report", str(results / "sanity")],
                            cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-2000:]
    assert (results / "sanity/report/index.html").exists() and (results / "sanity/report/summary.md").exists()
    # The report's first answer, on the terminal: native vs container for the matmul cell, in words.
    assert re.search(r"(SAME|DIFFERENT|UNDETERMINED): matmul-fp32 / matmul: .*matmul throughput", report.stdout)
    assert "matmul-fp32 / matmul, container vs native: matmul throughput" in report.stdout, report.stdout[-3000:]
    assert str(work) not in Path("/proc/self/mounts").read_text()  # restored: nothing left mounted


@pytest.mark.root
@pytest.mark.docker
@pytest.mark.slow
def test_sparkfleet_run_runs_bench_then_writes_the_report_and_ends_with_its_verdicts(docker_engine, ansible_env, repo,
                                                                                      tmp_path):
    work, results, events = tmp_path / "work", tmp_path / "results", tmp_path / "events.jsonl"
    # sparkfleet run sets ANSIBLE_CONFIG itself; no -i: ansible.cfg's inventory (inventory/local.ini)
    env = {k: v for k, v in ansible_env.items() if k not in ("ANSIBLE_CONFIG", "ANSIBLE_INVENTORY")}
    proc = subprocess.run([sys.executable, "-m", "sparkfleet", "run",
                           "-e", f"sparkfleet_work_dir={work}", "-e", f"sparkfleet_results_dir={results}",
                           "--json-events", str(events)],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert "localhost: 6 runs planned (campaign sanity)" in lines
    assert any(line.startswith("localhost: run 6/6 matmul-fp32/") for line in lines), lines
    assert (results / "sanity/report/index.html").exists() and (results / "sanity/report/summary.md").exists()
    start = lines.index("verdicts:")
    assert re.match(r"  (SAME|DIFFERENT|UNDETERMINED): matmul-fp32 / matmul: .*matmul throughput", lines[start + 1])
    assert lines[-2:] == [f"report: {results / 'sanity' / 'report' / 'index.html'}", "playbook finished: rc=0"]
    kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    assert kinds.count("run") == 6 and kinds[-1] == "report"


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
