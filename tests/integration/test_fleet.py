"""Fleet scale: 4 hosts in parallel, one lost mid-campaign, one slower — and the reproducibility report.

Driven through `sparkfleet run` (ansible-runner's event stream), so the progress events are
counted against the plan too. The lost host's cable is pulled (its veth goes down) while it runs; the
other three finish; the report names the slower host and what the lost one did not deliver. The lost
host's matrix job goes on behind the pulled cable; when the cable is back, the same command collects what
it measured without running anything again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from modeldirs import make_model

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker, pytest.mark.slow]

RUNS_PER_HOST = 6


def _campaign(tmp_path: Path, image: str, models_dir: Path) -> Path:
    # trtllm reads the model's tokenizer and weights from its local directory, under the hosts' models
    # directory (the fake fleet's hosts share one filesystem: one directory serves them all).
    model = make_model(models_dir, "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", layers=2, hidden=1024)
    campaign = {
        "name": "repro",
        "image": image,
        "models": [{"name": "deepseek", "hf_id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "path": model["path"]}],
        "environments": ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}],
        "workloads": [{"name": "small", "preset": "T1", "requests": 4,
                       "env": {"SPARKFLEET_FAKE_RUNTIME_S": "1.5", "SPARKFLEET_FAKE_ALLOC_MIB": "16"}}],
        "iterations": 3,
        "order": "randomized",
        "seed": 7,
        "cooldown": {"threshold_c": 90, "settle_band_c": 3, "settle_window_s": 1, "max_wait_s": 5,
                     "poll_interval_s": 0.5},
        "timeout_s": 120,
    }
    path = tmp_path / "repro.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    return path


def _finished(ledger: Path) -> int:
    try:
        return sum(1 for line in ledger.read_text().splitlines() if '"finished"' in line)
    except OSError:
        return 0


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_four_hosts_one_lost_one_slow_then_resume(fleet_factory, test_image, ansible_env, repo, tmp_path):
    slow = {"sparkfleet_workload_env": "'{\"SPARKFLEET_FAKE_SPEED\": \"0.8\"}'"}
    fleet = fleet_factory(4, host_vars={"spark4": slow})
    lost = fleet.hosts[2]
    results = tmp_path / "results"
    events = tmp_path / "events.jsonl"
    models_dir = tmp_path / "models"
    env = dict(ansible_env)
    # Notice a pulled cable within seconds rather than the minute that suits real networks.
    env["ANSIBLE_SSH_ARGS"] = "-o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=2 " \
                              "-o ServerAliveCountMax=3 -o ConnectTimeout=5"
    cmd = [str(Path(sys.executable).parent / "sparkfleet"), "run", "-i", fleet.inventory,
           "--playbook", "playbooks/reproducibility.yml", "--json-events", str(events), "--quiet",
           "-e", f"@{_campaign(tmp_path, test_image, models_dir)}", "-e", f"sparkfleet_results_dir={results}",
           "-e", f"sparkfleet_models_dir={models_dir}",
           "-e", "sparkfleet_image_offline=true", "-e", "sparkfleet_preflight_max_load_per_cpu=100",
           "-e", "sparkfleet_preflight_min_free_memory_gib=0.5", "-e", "sparkfleet_preflight_min_free_disk_gib=1"]
    ledger = Path(lost.work_dir, "results/repro", lost.name, "ledger.jsonl")
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600
        while _finished(ledger) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _finished(ledger) >= 2, "the lost host never got going"
        fleet.cut_network(lost)
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out  # a host was lost: the run says so
    # The lost host's matrix job does not need the controller: it goes on measuring behind the pulled cable.
    deadline = time.monotonic() + 300
    while _finished(ledger) < RUNS_PER_HOST and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _finished(ledger) == RUNS_PER_HOST

    campaign_dir = results / "repro"
    for host in fleet.hosts:
        records = list((campaign_dir / host.name / "runs").glob("*/record.json"))
        if host is lost:
            assert not records  # never collected
        else:
            assert len(records) == RUNS_PER_HOST
            assert all(json.loads(r.read_text())["status"] == "ok" for r in records)
    fleet_report = json.loads((campaign_dir / "report/fleet.json").read_text())
    assert fleet_report["outside_hosts"] == ["spark4"]
    assert fleet_report["missing_runs"] == {lost.name: {"planned": RUNS_PER_HOST, "found": 0,
                                                         "missing": RUNS_PER_HOST}}
    assert "spark4" in (campaign_dir / "report/fleet.md").read_text()

    evts = _events(events)
    planned = {e["host"]: e["total"] for e in evts if e["event"] == "planned"}
    assert planned == {h.name: RUNS_PER_HOST for h in fleet.hosts}
    runs = Counter(e["host"] for e in evts if e["event"] == "run")
    for host in ("spark1", "spark2", "spark4"):
        assert runs[host] == RUNS_PER_HOST
    assert any(e["event"] == "host_unreachable" and e["host"] == lost.name for e in evts)
    last = [e for e in evts if e["event"] == "run" and e["host"] == "spark1"][-1]
    assert last["done"] == last["total"] == RUNS_PER_HOST

    # The cable is back: the same command picks the lost host up where it stopped.
    fleet.restore_network(lost)
    again = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    # the lost host finished its runs while cut off: this run collects them and measures nothing, and says so
    # (sparkfleet run's status 12; any run measured now would make it 0)
    assert again.returncode in (0, 12), again.stdout[-4000:] + again.stderr[-2000:]
    assert again.returncode == 0 or "nothing measured" in again.stdout
    started = Counter(json.loads(line)["run_id"] for line in ledger.read_text().splitlines()
                      if '"started"' in line)
    assert len(started) == RUNS_PER_HOST
    assert set(started.values()) == {1}  # what was measured while the host was cut off was not re-run
    evts = _events(events)
    second = evts[max(i for i, e in enumerate(evts) if e["event"] == "playbook_start"):]
    assert sorted(e["status"] for e in second if e["event"] == "run" and e["host"] == lost.name) \
        == ["skipped"] * RUNS_PER_HOST
    assert len(list((campaign_dir / lost.name / "runs").glob("*/record.json"))) == RUNS_PER_HOST
    assert not json.loads((campaign_dir / "report/fleet.json").read_text())["missing_runs"]
    assert os.path.exists(campaign_dir / "campaign.json")
