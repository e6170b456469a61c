"""bench.yml end to end on the fake fleet: provision, tune, matrix, collect, report — and resume.

The engine is the trtllm-bench stand-in inside the offline test image; native runs chroot into the
image's extracted rootfs, container runs use Docker. Where each run really ran is proved from inside the
workload (its probe lines: /.dockerenv and the device/inode of its "/"), not assumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from modeldirs import make_model

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker, pytest.mark.slow]

FAST_COOLDOWN = {"threshold_c": 90, "settle_band_c": 3, "settle_window_s": 1, "min_wait_s": 0, "max_wait_s": 5,
                 "poll_interval_s": 0.5, "on_timeout": "continue"}


HF_IDS = {"deepseek": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "qwen": "Qwen/Qwen2.5-0.5B"}


def _models(models_dir: Path, *names: str) -> list[dict]:
    """The campaign's models, each with its local directory <models_dir>/<hf_id>: a trtllm run reads its
    tokenizer and weights from there, offline. The fake fleet's hosts share one filesystem, so one models
    directory (-e sparkfleet_models_dir) serves every host."""
    for name in names:
        if not (models_dir / HF_IDS[name]).is_dir():
            make_model(models_dir, HF_IDS[name], layers=2, hidden=1024)
    return [{"name": n, "hf_id": HF_IDS[n], "path": str(models_dir / HF_IDS[n])} for n in names]


def _campaign(tmp_path: Path, image: str, **over) -> Path:
    campaign = {
        "name": "e2e",
        "image": image,
        "environments": ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}],
        "workloads": [{"name": "small", "preset": "T1", "requests": 4,
                       "env": {"SPARKFLEET_FAKE_RUNTIME_S": "0.2", "SPARKFLEET_FAKE_ALLOC_MIB": "16"}}],
        "iterations": 2,
        "order": "interleaved",
        "cooldown": FAST_COOLDOWN,
        "timeout_s": 120,
    }
    if "models" not in over:
        campaign["models"] = _models(tmp_path / "models", "deepseek", "qwen")
    campaign.update(over)
    path = tmp_path / f"campaign-{campaign['name']}.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    return path


def _bench(repo, env, inventory, campaign, results, *extra) -> subprocess.CompletedProcess:
    cmd = ["ansible-playbook", "-i", inventory, "bench.yml", "-e", f"@{campaign}",
           "-e", f"sparkfleet_results_dir={results}", "-e", "sparkfleet_image_offline=true",
           # The build machine runs other tests at the same time: gates that would refuse it are relaxed.
           "-e", "sparkfleet_preflight_max_load_per_cpu=100", "-e", "sparkfleet_preflight_min_free_memory_gib=0.5",
           "-e", "sparkfleet_preflight_min_free_disk_gib=1", *extra]
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1200)


def _records(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/runs/*/record.json"))]


def _tree_digest(root: Path) -> dict[str, str]:
    """Every file of every run (host.json and preflight.json are fresh facts on each run, by design)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.glob("*/runs/**/*")) if p.is_file()}


def test_campaign_on_three_hosts_completes_resumes_and_proves_where_runs_ran(
        fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(3)
    campaign = _campaign(tmp_path, test_image)  # its models under tmp_path/models, the hosts' models directory
    models_dir = ("-e", f"sparkfleet_models_dir={tmp_path / 'models'}")
    results = tmp_path / "results"
    first = _bench(repo, ansible_env, fleet.inventory, campaign, results, *models_dir)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]

    records = _records(results / "e2e")
    assert len(records) == 3 * 2 * 2 * 2
    for rec in records:
        assert validate(rec) == [], rec["run_id"]
        assert rec["status"] == "ok", (rec["run_id"], rec["reason"])
        assert rec["metrics"]["output_tok_s"] > 0 and rec["metrics"]["peak_memory_gib"] > 0
        assert rec["model_loaded"] == next(m for m in ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen/Qwen2.5-0.5B")
                                           if m.lower().endswith(rec["model_id"].split("/")[-1].lower()))
        assert rec["cooldown"]["reason"] and "no GPU sensor" not in rec["cooldown"]["reason"]

    for host in fleet.hosts:
        mine = sorted((r for r in records if r["host"] == host.name), key=lambda r: r["order_index"])
        # interleaved: environments alternate, and the order flips every iteration
        assert [(r["environment"], r["iteration"]) for r in mine] == [
            ("native", 1), ("container", 1), ("native", 1), ("container", 1),
            ("container", 2), ("native", 2), ("container", 2), ("native", 2)]
        rootfs = next(Path(host.work_dir, "rootfs").glob("sha256-*"))
        root_id = f"{rootfs.stat().st_dev}:{rootfs.stat().st_ino}"
        for rec in mine:
            probe = rec["probe"]
            if rec["environment"] == "native":   # "/" of the workload is the host's rootfs tree, not Docker's
                assert probe["dockerenv"] == "no" and probe["root_dev_ino"] == root_id
            else:
                assert probe["dockerenv"] == "yes" and probe["root_dev_ino"] != root_id
        telemetry = Path(host.work_dir, "results/e2e", host.name, "runs", mine[0]["run_id"], "telemetry.csv")
        assert telemetry.read_text().startswith("t_s,gpu,gpu_temp_c")
        assert not [line for line in Path("/proc/self/mounts").read_text().splitlines() if host.work_dir in line]

    # bench.yml leaves the results tree; the report is the package's, written after it as a user would.
    made = subprocess.run([str(Path(sys.executable).parent / "sparkfleet"), "report", str(results / "e2e")],
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    report = results / "e2e" / "report"
    assert (report / "index.html").stat().st_size > 10_000 and (report / "summary.md").exists()
    leftovers = subprocess.run(["docker", "ps", "-aq", "--filter", "label=sparkfleet.campaign=e2e"],
                               capture_output=True, text=True).stdout.split()
    assert leftovers == []

    before = _tree_digest(results / "e2e")
    ledgers = {h.name: Path(h.work_dir, "results/e2e", h.name, "ledger.jsonl").read_text() for h in fleet.hosts}
    again = _bench(repo, ansible_env, fleet.inventory, campaign, results, *models_dir)
    assert again.returncode == 0, again.stdout[-4000:]
    for host in fleet.hosts:
        assert f"8 runs already done on {host.name}" in again.stdout and "nothing measured" in again.stdout
        assert Path(host.work_dir, "results/e2e", host.name, "ledger.jsonl").read_text() == ledgers[host.name]
    assert _tree_digest(results / "e2e") == before  # nothing re-run, nothing rewritten


HANG_LIMIT_S = 60  # a container's start on a busy machine plus the 0.2 s workloads, many times over


def test_failures_timeouts_and_wrong_models_are_recorded_and_the_matrix_goes_on(
        fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(1)
    fast = {"SPARKFLEET_FAKE_RUNTIME_S": "0.2", "SPARKFLEET_FAKE_ALLOC_MIB": "16"}
    models = tmp_path / "models"  # a trtllm run loads its model from the models directory
    model = make_model(models, "deepseek-r1-distill-qwen-7b", layers=2, hidden=1024)
    # The run's limit covers the container's start as well as the workload: on a loaded 2-core machine that
    # start alone has taken over 8 s, and the crash (exit 3 after 0.2 s) was then recorded `timeout`. The limit
    # is sized for that start; only the hang reaches it.
    campaign = _campaign(
        tmp_path, test_image, name="faults", iterations=1, timeout_s=HANG_LIMIT_S,
        models=[{"name": "deepseek", "hf_id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "path": model["path"]}],
        environments=["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}],
        workloads=[
            {"name": "crash", "preset": "T1", "requests": 2, "env": {**fast, "SPARKFLEET_FAKE_EXIT": "3"}},
            {"name": "hang", "preset": "T1", "requests": 2, "env": {**fast, "SPARKFLEET_FAKE_HANG": "1"}},
            {"name": "wrongmodel", "preset": "T1", "requests": 2,
             "env": {**fast, "SPARKFLEET_FAKE_LOADED_MODEL": "deepseek-ai/DeepSeek-R1-Distill-Llama-70B"}},
            {"name": "fine", "preset": "T1", "requests": 2, "env": fast},
        ])
    results = tmp_path / "results"
    proc = _bench(repo, ansible_env, fleet.inventory, campaign, results, "-e", f"sparkfleet_models_dir={models}")
    assert proc.returncode == 0, proc.stdout[-6000:]
    by = {(r["workload"], r["environment"]): r for r in _records(results / "faults")}
    assert len(by) == 8
    for env in ("native", "container"):
        assert by[("crash", env)]["status"] == "failed" and "exited 3" in by[("crash", env)]["reason"]
        assert by[("crash", env)]["exit_code"] == 3
        assert by[("hang", env)]["status"] == "timeout"
        assert f"timed out after {HANG_LIMIT_S} s" in by[("hang", env)]["reason"]
        assert by[("wrongmodel", env)]["status"] == "invalid"
        assert "DeepSeek-R1-Distill-Llama-70B" in by[("wrongmodel", env)]["reason"]
        assert by[("fine", env)]["status"] == "ok"
    # the hung workload left nothing behind: no process in the rootfs, no container
    assert subprocess.run(["docker", "ps", "-aq", "--filter", "label=sparkfleet.campaign=faults"],
                          capture_output=True, text=True).stdout.split() == []
    assert _workloads_under(fleet.dir) == []


def _workloads_under(fleet_dir: str) -> list[str]:
    """trtllm-bench processes chrooted into (or started from) this fleet's directories. Tests on other
    pytest-xdist workers run their own stand-ins at the same time; those are not this test's leftovers."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            places = [os.readlink(f"/proc/{pid}/root"), os.readlink(f"/proc/{pid}/cwd"), cmdline]
        except OSError:
            continue
        if "trtllm-bench" in cmdline and any(p.startswith(fleet_dir) or fleet_dir in p for p in places):
            found.append(f"{pid}: {cmdline.replace(chr(0), ' ')}")
    return found


def test_a_changed_campaign_is_refused_naming_what_changed_or_runs_under_a_new_id(
        fleet_factory, test_image, ansible_env, repo, tmp_path):
    """Resume never mixes two configurations of one campaign: the controller refuses, each host refuses
    (should the controller's results be gone), and -e sparkfleet_campaign_on_change=new runs it afresh."""
    fleet = fleet_factory(1)
    (host,) = fleet.hosts
    small = {"name": "small", "preset": "T1", "requests": 2,
             "env": {"SPARKFLEET_FAKE_RUNTIME_S": "0.1", "SPARKFLEET_FAKE_ALLOC_MIB": "16"}}
    over = {"name": "changing", "iterations": 1, "environments": ["native"], "workloads": [small],
            "models": _models(tmp_path / "models", "deepseek")}
    models_dir = ("-e", f"sparkfleet_models_dir={tmp_path / 'models'}")
    results = tmp_path / "results"
    first = _bench(repo, ansible_env, fleet.inventory, _campaign(tmp_path, test_image, **over), results, *models_dir)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    host_dir = Path(host.work_dir, "results/changing", host.name)
    ledger = (host_dir / "ledger.jsonl").read_text()
    assert len(_records(results / "changing")) == 1

    changed = _campaign(tmp_path, test_image, **{**over, "iterations": 2,
                                                  "workloads": [{**small, "requests": 3}]})
    refused = _bench(repo, ansible_env, fleet.inventory, changed, results, *models_dir)
    assert refused.returncode != 0
    assert "campaign 'changing' was started with another configuration" in refused.stdout
    assert "iterations: 1 -> 2" in refused.stdout and "workloads[small].requests: 2 -> 3" in refused.stdout
    assert (host_dir / "ledger.jsonl").read_text() == ledger  # nothing ran

    renamed = _bench(repo, ansible_env, fleet.inventory, changed, results, *models_dir,
                     "-e", "sparkfleet_campaign_on_change=new")
    assert renamed.returncode == 0, renamed.stdout[-6000:]
    (new_dir,) = [p for p in results.iterdir() if p.name.startswith("changing-")]
    assert {(r["campaign"], r["iteration"]) for r in _records(new_dir)} == {(new_dir.name, 1), (new_dir.name, 2)}
    assert all(validate(r) == [] and r["status"] == "ok" for r in _records(new_dir))
    assert len(_records(results / "changing")) == 1 and (host_dir / "ledger.jsonl").read_text() == ledger

    # The controller's copy of the campaign is gone (another checkout, a wiped results directory): the host,
    # which keeps its own, still refuses.
    (results / "changing" / "campaign.json").unlink()
    on_host = _bench(repo, ansible_env, fleet.inventory, changed, results, *models_dir)
    assert on_host.returncode != 0
    assert f"{host.name}: campaign 'changing' was started with another configuration (on this host" in on_host.stdout
    assert "iterations: 1 -> 2" in on_host.stdout
    assert (host_dir / "ledger.jsonl").read_text() == ledger
