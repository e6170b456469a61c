"""Preflight gates and host metadata on a fake fleet: a hot GPU fails its host, the others pass and go on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.fleet]


def test_hot_gpu_fails_its_host_only(fleet_factory, ansible_env, repo, tmp_path):
    fleet = fleet_factory(3, host_env={"spark2": {"SPARKFLEET_FAKE_IDLE_TEMP": "85"}})
    extra = tmp_path / "vars.json"
    # Thresholds this build machine meets whatever else runs on it; the temperature gate stays at its default.
    extra.write_text(json.dumps({"sparkfleet_preflight_max_load_per_cpu": 1000,
                                 "sparkfleet_preflight_min_free_memory_gib": 0.01,
                                 "sparkfleet_preflight_min_free_disk_gib": 0.01}))
    cmd = ["ansible-playbook", "-i", fleet.inventory, "-e", f"@{extra}", "playbooks/preflight_gates.yml"]
    run = subprocess.run(cmd, env=ansible_env, cwd=repo, capture_output=True, text=True, timeout=180)
    out = run.stdout + run.stderr
    assert run.returncode == 2, out
    assert "gpu_temperature measured 85.0 C (limit 60.0 C)" in out, out
    assert "spark1" in out and "failed=0" in out.split("spark1 ", 2)[-1].splitlines()[0]

    for host in fleet.hosts:
        results = Path(host.work_dir, "results", "study", host.name)  # the sparks group's default campaign
        gates = json.loads((results / "preflight.json").read_text())["gates"]
        assert set(gates) == {"gpu_temperature", "performance_state", "cpu_load", "free_memory", "free_disk",
                              "gpu_processes"}
        hot = host.name == "spark2"
        assert gates["gpu_temperature"] == {**gates["gpu_temperature"], "value": 85.0 if hot else 38.0,
                                            "limit": 60.0, "pass": not hot}
        assert gates["performance_state"]["value"] == ["P8"] and gates["performance_state"]["pass"] is True
        for name in ("cpu_load", "free_memory", "free_disk"):
            assert gates[name]["pass"] is True and isinstance(gates[name]["value"], float), (name, gates[name])
        # The nvidia-smi stand-in has no --query-compute-apps: recorded as unknown, warned, not failed.
        assert gates["gpu_processes"]["pass"] is None and gates["gpu_processes"]["error"]

        meta = json.loads((results / "host_metadata.json").read_text())
        assert meta["gpu_count"] == 1 and meta["gpu_name"] == "NVIDIA GB10"
        assert meta["gpus"][0]["uuid"].startswith("GPU-") and meta["driver_version"] == "580.95.05"
        assert meta["cuda_version"] == "13.0" and meta["kernel"] and meta["os"] and meta["memory_total_mb"] > 0
        assert meta["python"]["packages"] and len(meta["python"]["packages_sha256"]) == 64
        assert "CUDA Version" in (results / "nvidia-smi-q.txt").read_text()


def test_max_fail_percentage_stops_the_whole_fleet_before_any_change(fleet_factory, ansible_env, repo, tmp_path):
    fleet = fleet_factory(3, host_env={"spark2": {"SPARKFLEET_FAKE_IDLE_TEMP": "85"}})
    extra = tmp_path / "vars.json"
    models_dir = tmp_path / "models"  # trtllm reads the model from its local directory, under the models dir
    (models_dir / "org" / "m").mkdir(parents=True)
    extra.write_text(json.dumps({"sparkfleet_preflight_max_load_per_cpu": 1000,
                                 "sparkfleet_preflight_min_free_memory_gib": 0.01,
                                 "sparkfleet_preflight_min_free_disk_gib": 0.01, "sparkfleet_max_fail_percentage": 20,
                                 "sparkfleet_models_dir": str(models_dir),
                                 "sparkfleet_results_dir": str(tmp_path / "results"),  # not the checkout's
                                 "sparkfleet_campaign": {"name": "mfp", "environments": ["native"],
                                                         "models": [{"name": "m", "path": str(models_dir / "org/m")}],
                                                         "workloads": ["T1"]}}))
    # One host of three (33 %) fails a gate: above the 20 % allowed, so no host may go on to the matrix.
    run = subprocess.run(["ansible-playbook", "-i", fleet.inventory, "-e", f"@{extra}", "bench.yml"],
                         env=ansible_env, cwd=repo, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "gpu_temperature measured 85.0 C" in run.stdout, run.stdout[-5000:]  # stopped by the gate, not before
    assert "NO MORE HOSTS LEFT" in run.stdout
    assert "Provision, tune and run" not in run.stdout and "PLAY [Benchmark matrix]" not in run.stdout
    for host in fleet.hosts:
        assert not Path(host.work_dir, "rootfs").exists()
