"""A memory-study campaign end to end on the fake fleet (issue 15): memory-state factors crossed with the
environments, an A/A pair, and the record's memory section checked against the stand-in's model of a GB10's
unified memory (SPARKFLEET_FAKE_UNIFIED_MEMORY: device total = MemTotal, CUDA free = MemFree, capped by a
memory-limited container's headroom; kv = fraction x (free + tmp_kv)).
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from sparkfleet_host.record import validate

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker, pytest.mark.slow]

FAST_COOLDOWN = {"threshold_c": 90, "settle_band_c": 3, "settle_window_s": 1, "min_wait_s": 0, "max_wait_s": 5,
                 "poll_interval_s": 0.5, "on_timeout": "continue"}
TMP_KV_GIB = 8224 * 131072 / 2**30  # the stand-in's profiling KV allocation
LIMIT_GIB = 1.0


def test_memory_study_records_memory_state_and_kv_follows_the_unified_memory_model(
        fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(1)
    campaign = {
        "name": "memstudy",
        "image": test_image,
        "models": [{"name": "deepseek", "hf_id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"}],
        "environments": ["native",
                         {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]},
                         {"name": "container-memlimit", "kind": "container",
                          "docker_flags": ["--ipc=host", f"--memory={int(LIMIT_GIB * 1024)}m"]}],
        "aa": ["native"],
        "workloads": [{"name": "small", "preset": "T1", "requests": 4,
                       "env": {"SPARKFLEET_FAKE_RUNTIME_S": "1.0", "SPARKFLEET_FAKE_ALLOC_MIB": "32",
                               "SPARKFLEET_FAKE_UNIFIED_MEMORY": "1"}}],
        "factors": {"kv_fraction": [0.9, 0.5], "drop_caches": [False, True]},
        "iterations": 1,
        "cooldown": FAST_COOLDOWN,
        "timeout_s": 120,
    }
    path = tmp_path / "memstudy.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    results = tmp_path / "results"
    proc = subprocess.run(
        ["ansible-playbook", "-i", fleet.inventory, "bench.yml", "-e", f"@{path}",
         "-e", f"sparkfleet_results_dir={results}", "-e", "sparkfleet_image_offline=true",
         "-e", "sparkfleet_telemetry_interval_s=0.2",
         "-e", "sparkfleet_preflight_max_load_per_cpu=100", "-e", "sparkfleet_preflight_min_free_memory_gib=0.5",
         "-e", "sparkfleet_preflight_min_free_disk_gib=1"],
        cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]

    records = [json.loads(p.read_text()) for p in sorted((results / "memstudy").glob("*/runs/*/record.json"))]
    assert len(records) == 4 * 4  # native, native.aa, container, container-memlimit x 2 fractions x 2 drops
    cells = {}
    for rec in records:
        assert validate(rec) == [], rec["run_id"]
        assert rec["status"] == "ok", (rec["run_id"], rec["reason"])
        params, m, mem = rec["workload_params"], rec["metrics"], rec["memory"]
        fraction, drop = params["factors"]["kv_fraction"], params["factors"]["drop_caches"]
        assert params["base"] == "small" and mem["version"] == 1 and mem["kv_fraction"] == fraction
        assert m["kv_fraction"] == pytest.approx(fraction, abs=1e-6)
        # the record's memory state: meminfo at start and peak, CUDA's view (a GB10 stand-in: not reported)
        start, peak = mem["start"]["meminfo"], mem["peak"]["meminfo"]
        assert start["mem_total_gib"] > 0 and start["cached_gib"] is not None and peak["not_free_gib"] > 0
        assert mem["start"]["cuda"]["source"] == "nvidia-smi" and mem["start"]["cuda"]["free_gib"] is None
        assert mem["drop_caches"]["requested"] is drop
        if drop:
            assert mem["drop_caches"]["done"] is True
            assert mem["drop_caches"]["cached_after_gib"] <= mem["drop_caches"]["cached_before_gib"] + 0.5
        # unified memory: the device is the machine's memory, and the KV budget decomposes
        assert m["device_total_gib"] == pytest.approx(start["mem_total_gib"], abs=0.02)
        assert m["kv_cache_gib"] == pytest.approx(
            fraction * (m["device_total_gib"] - m["peak_memory_gib"] + TMP_KV_GIB), abs=0.05)
        free_seen = m["device_total_gib"] - m["peak_memory_gib"]  # what the engine saw free (GiB)
        env = rec["environment"]
        if env == "container-memlimit":
            assert mem["container_memory_flags"] == ["--ipc=host", "--memory=1024m"]
            assert mem["cgroup"]["limit_gib"] == LIMIT_GIB and mem["cgroup"]["current_gib_max"] > 0
            assert mem["peak"]["cgroup"]["current_gib"] > 0
            assert free_seen <= LIMIT_GIB  # the cgroup limit, not the machine, bounds the KV cache
        else:
            # page cache and everything else count as used: what the engine saw free is MemFree during the run
            assert mem["peak"]["meminfo"]["mem_free_gib"] - 1.0 <= free_seen <= start["mem_free_gib"] + 1.0
            if env == "container":
                assert mem["cgroup"]["paths"] and mem["cgroup"]["limit_gib"] is None
            else:
                assert mem["cgroup"] is None
        assert mem["environment"]["name"] == env
        cells[(env, fraction, drop)] = rec

    for fraction in (0.9, 0.5):
        for drop in (False, True):
            native, limited = cells[("native", fraction, drop)], cells[("container-memlimit", fraction, drop)]
            assert limited["metrics"]["kv_cache_gib"] <= fraction * (LIMIT_GIB + TMP_KV_GIB) + 0.01
            assert native["metrics"]["kv_cache_gib"] > 2 * limited["metrics"]["kv_cache_gib"]
            twin = cells[("native.aa", fraction, drop)]
            assert (twin["memory"]["environment"]["aa_group"], twin["memory"]["environment"]["aa_member"]) == (
                "native", "b")
            assert native["memory"]["environment"]["aa_member"] == "a"
    assert cells[("container", 0.5, False)]["memory"]["environment"].get("aa_group") is None
    campaign_json = json.loads((results / "memstudy" / "campaign.json").read_text())
    assert json.dumps(campaign_json).count("native.aa") >= 1
    leftovers = subprocess.run(["docker", "ps", "-aq", "--filter", "label=sparkfleet.campaign=memstudy"],
                               capture_output=True, text=True).stdout.split()
    assert leftovers == []
