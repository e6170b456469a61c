"""Is my Spark normal? (issue 24) end to end on the fake fleet: three hosts, one of them degraded (its SM clock stuck
in the 690-890 MHz band under load, as Spark owners report) and with another VBIOS.

The readiness probe's GPU load runs in the run's environment (native: chroot into the test image) through the image's
cupy stand-in (tests/fleet/standins/python/cupy); while it runs, the host's nvidia-smi stand-in reports load clocks
(a marker file both see: a directory bound into every host's rootfs at the same path, as a real GPU's device nodes
are). The stand-ins only model the GPU; what is checked is what sparkfleet makes of it: the probe's verdict in each
record, the reproducibility playbook's refusal before any run until the difference is acknowledged, and `sparkfleet
report --hosts` naming the host, the clock and the VBIOS.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker, pytest.mark.slow]

DEGRADED, OTHER_VBIOS = "spark3", "98.00.4B.00.02"
RUNS_PER_HOST = 3
FAST_COOLDOWN = {"threshold_c": 90, "settle_band_c": 3, "settle_window_s": 1, "min_wait_s": 0, "max_wait_s": 5,
                 "poll_interval_s": 0.5, "on_timeout": "continue"}


def _campaign(tmp_path: Path, image: str) -> Path:
    campaign = {
        "name": "normal",
        "image": image,
        "models": [{"name": "matmul-fp32"}],
        "environments": ["native"],
        # numpy on the CPU: the workload is not under test (the image's cupy stand-in serves the probe's load only)
        "workloads": [{"name": "mm", "preset": "matmul", "size": 64, "iterations": 3, "warmup": 0,
                       "extra_args": ["--backend", "numpy"]}],
        "iterations": RUNS_PER_HOST,
        "warmup_runs": 0,
        "cooldown": FAST_COOLDOWN,
        "timeout_s": 120,
    }
    path = tmp_path / "normal.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    return path


def _playbook(cmd_tail: list[str], fleet, campaign: Path, results: Path, models: Path, gpu_dir: Path, repo, env):
    cmd = ["ansible-playbook", "-i", fleet.inventory, "playbooks/reproducibility.yml", "-e", f"@{campaign}",
           "-e", f"sparkfleet_results_dir={results}", "-e", f"sparkfleet_models_dir={models}",
           "-e", "sparkfleet_image_offline=true", "-e", "sparkfleet_readiness_probe_s=2",
           "-e", "sparkfleet_preflight_max_load_per_cpu=100", "-e", "sparkfleet_preflight_min_free_memory_gib=0.5",
           "-e", "sparkfleet_preflight_min_free_disk_gib=1",
           # the fake GPU's load marker, where the probe in the chroot and the host's nvidia-smi both see it
           "-e", json.dumps({"native_rootfs_extra_binds": [{"src": str(gpu_dir), "read_only": False}]}),
           *cmd_tail]
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)


def _sparkfleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "sparkfleet"), *args], capture_output=True, text=True,
                          timeout=300)


def test_a_degraded_host_with_another_vbios_is_refused_until_acknowledged_then_named(
        fleet_factory, test_image, ansible_env, repo, tmp_path):
    gpu_dir, models, results = tmp_path / "fake-gpu", tmp_path / "models", tmp_path / "results"
    models.mkdir()
    names = [f"spark{i}" for i in (1, 2, 3)]
    markers = {name: gpu_dir / name / "load" for name in names}
    for marker in markers.values():
        marker.parent.mkdir(parents=True)
    host_env = {name: {"SPARKFLEET_FAKE_GPU_LOAD": str(markers[name])} for name in names}
    host_env[DEGRADED].update(SPARKFLEET_FAKE_GPU_DEGRADED="1", SPARKFLEET_FAKE_VBIOS=OTHER_VBIOS)
    # the run's environment (env -i in the chroot) gets the marker through the workload's variables
    host_vars = {name: {"sparkfleet_workload_env": "'" + json.dumps({"SPARKFLEET_FAKE_GPU_LOAD": str(markers[name])})
                        + "'"} for name in names}
    fleet = fleet_factory(3, host_env=host_env, host_vars=host_vars)
    campaign = _campaign(tmp_path, test_image)
    campaign_dir = results / "normal"

    # Not acknowledged: refused after preflight, naming the field, the hosts and their values; nothing ran.
    refused = _playbook([], fleet, campaign, results, models, gpu_dir, repo, ansible_env)
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0, out[-4000:]
    assert "the hosts' firmware or driver differ: gpu0.vbios_version (" in out, out[-4000:]
    assert f"{DEGRADED}={OTHER_VBIOS}" in out and "spark1=" in out and "spark2=" in out
    assert "sparkfleet_acknowledge_host_differences=true" in out
    assert not any(Path(h.work_dir, "results", "normal", h.name, "ledger.jsonl").exists() for h in fleet.hosts)
    assert "acknowledge_host_differences" not in json.loads((campaign_dir / "campaign.json").read_text())

    # Acknowledged: the campaign runs, and campaign.json says it was acknowledged.
    done = _playbook(["-e", "sparkfleet_acknowledge_host_differences=true"], fleet, campaign, results, models,
                     gpu_dir, repo, ansible_env)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert json.loads((campaign_dir / "campaign.json").read_text())["acknowledge_host_differences"] is True
    assert not any(m.exists() for m in markers.values())  # every probe's load ended

    for name in names:
        records = [json.loads(p.read_text()) for p in (campaign_dir / name / "runs").glob("*/record.json")]
        assert len(records) == RUNS_PER_HOST, name
        for rec in records:
            readiness = rec["readiness"]
            assert rec["status"] == "ok", (name, rec["reason"])
            assert readiness["load"]["backend"] == "cupy" and readiness["samples"] > 0, readiness
            # what the gpu_state role was asked for is recorded with the controls (a lock cannot be read back)
            assert "locked_clocks" in rec["attestation"]["controls_applied"]["requested"]
            if name == DEGRADED:
                assert readiness["state"] == "suspect", readiness
                assert "degraded_band" in [r["cause"] for r in readiness["reasons"]]
                assert 690 <= readiness["sm_clock_mhz"] <= 890
                assert readiness["action"]["action"] == "mark" and "readiness suspect" in rec["reason"]
            else:
                assert readiness["state"] == "healthy" and readiness["reasons"] == [], readiness
                assert readiness["sm_clock_mhz"] > 890
    att = {name: json.loads((campaign_dir / name / "attestation.json").read_text()) for name in names}
    assert att[DEGRADED]["gpus"][0]["vbios_version"] == OTHER_VBIOS != att["spark1"]["gpus"][0]["vbios_version"]

    # The verdicts: the degraded host named with the clock and the VBIOS; the difference acknowledged.
    report = _sparkfleet("report", "--hosts", str(campaign_dir))
    assert report.returncode in (0, 1), report.stderr
    lines = {line.split(":")[0].strip(): line for line in report.stdout.splitlines()
             if line.strip().startswith("spark") and ": " in line}
    assert "(acknowledged)" in report.stdout and "gpu0.vbios_version" in report.stdout, report.stdout
    degraded = lines[DEGRADED]
    assert f"{DEGRADED}: NOT NORMAL" in degraded or f"{DEGRADED}: SUSPECT" in degraded, report.stdout
    assert "SM clock under load" in degraded and "VBIOS differs" in degraded and OTHER_VBIOS in degraded
    for name in ("spark1", "spark2"):
        assert "SUSPECT" not in lines[name] and "SM clock" not in lines[name] and "VBIOS" not in lines[name]

    # The same tree without the acknowledgement: the comparison is refused, naming the field.
    copy = tmp_path / "unacknowledged" / "normal"
    shutil.copytree(campaign_dir, copy)
    plan = json.loads((copy / "campaign.json").read_text())
    del plan["acknowledge_host_differences"]
    (copy / "campaign.json").write_text(json.dumps(plan))
    unacked = _sparkfleet("report", "--hosts", str(copy))
    assert unacked.returncode == 1 and "REFUSED" in unacked.stdout and "gpu0.vbios_version" in unacked.stdout
