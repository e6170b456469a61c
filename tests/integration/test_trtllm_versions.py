"""A trtllm campaign on the fake fleet against TensorRT-LLM versions of the test image (issues 21 and 35).

The image is built as 1.1.0rc3 (spark-single-gpu-dev: no ``trtllm-bench prepare-dataset``, the dataset comes
from the image's ``benchmarks/cpp/prepare_dataset.py --stdout``), as 1.2.1 (the subcommand;
``--extra_llm_api_options``), as 1.3.0rc13 and as 1.3.0rc29 (the subcommand; ``--config``; rc29 without the
standalone script). Each image carries click sources shaped like NVIDIA's (tests/fleet/trtllm_sources.py) and
stand-ins that enforce that version's command tree with click's wording and exit code 2, so yesterday's commands
(``prepare-dataset`` on 1.1, ``latency --max_batch_size`` anywhere) fail here. Every campaign must complete:
engine_probe reads the image's CLI from its files (the native rootfs, or the image through docker create +
docker cp when there is none), bench_run builds every command from it, and each record says which version and
surface its commands were built for.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker, pytest.mark.slow]

FAST = {"SPARKFLEET_FAKE_RUNTIME_S": "0.2", "SPARKFLEET_FAKE_ALLOC_MIB": "16"}
COOLDOWN = {"threshold_c": 90, "settle_band_c": 3, "settle_window_s": 1, "min_wait_s": 0, "max_wait_s": 5,
            "poll_interval_s": 0.5, "on_timeout": "continue"}


def _campaign(tmp_path: Path, image: str, models_dir: Path, environments: list) -> Path:
    model = models_dir / "deepseek-ai" / "DeepSeek-R1-Distill-Qwen-7B"  # <models_dir>/<hf_id>
    model.mkdir(parents=True, exist_ok=True)
    (model / "tokenizer.json").write_text("{}")
    campaign = {
        "name": "versions", "image": image,
        "models": [{"name": "deepseek", "hf_id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "path": str(model)}],
        "environments": environments,
        # latency on a preset with a batch (today's --max_batch_size), and kv_fraction (the options file flag)
        "workloads": [{"name": "tput", "preset": "T1", "requests": 4, "kv_fraction": 0.5, "env": FAST},
                      {"name": "lat", "preset": "T2", "mode": "latency", "requests": 3, "env": FAST}],
        "iterations": 1, "cooldown": COOLDOWN, "timeout_s": 120,
    }
    path = tmp_path / "campaign.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    return path


@pytest.mark.parametrize(("version", "environments"), [
    ("1.1.0rc3", ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}]),
    ("1.2.1", ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}]),
    ("1.3.0rc13", ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}]),
    ("1.3.0rc29", [{"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}]),  # probe via image
], ids=["1.1.0rc3", "1.2.1", "1.3.0rc13", "1.3.0rc29-container-only"])
def test_a_trtllm_campaign_runs_on_each_supported_version(
        fleet_factory, docker_engine, ansible_env, repo, tmp_path, version, environments):
    from testimage import build_image

    image = build_image(version)
    fleet = fleet_factory(1)
    models_dir = tmp_path / "models"
    campaign = _campaign(tmp_path, image, models_dir, environments)
    results = tmp_path / "results"
    proc = subprocess.run(
        ["ansible-playbook", "-i", fleet.inventory, "bench.yml", "-e", f"@{campaign}",
         "-e", f"sparkfleet_results_dir={results}", "-e", "sparkfleet_image_offline=true",
         "-e", f"sparkfleet_models_dir={models_dir}",
         "-e", "sparkfleet_preflight_max_load_per_cpu=100", "-e", "sparkfleet_preflight_min_free_memory_gib=0.5",
         "-e", "sparkfleet_preflight_min_free_disk_gib=1"],
        cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert f"TensorRT-LLM {version} (CLI read from the image)" in proc.stdout

    records = [json.loads(p.read_text()) for p in sorted(results.glob("versions/*/runs/*/record.json"))]
    assert len(records) == 2 * len(environments)
    for rec in records:
        assert validate(rec) == [], rec["run_id"]
        assert rec["status"] == "ok", (rec["run_id"], rec["reason"])
        built = rec["versions"]["trtllm"]
        assert built["version"] == version and rec["engine_version"] == version and built["profile"] == "image"
        assert built["dataset"] == ("script" if version == "1.1.0rc3" else "subcommand")
        assert "--max_batch_size" not in rec["command"] or rec["workload"] == "tput"
        host = fleet.hosts[0]
        prepare = Path(host.work_dir, "results/versions", host.name, "runs", rec["run_id"], "prepare.log").read_text()
        assert ("benchmarks/cpp/prepare_dataset.py" in prepare) == (version == "1.1.0rc3")
        assert ("prepare-dataset" in prepare) == (version != "1.1.0rc3")
        assert "HF_HUB_OFFLINE=1" in prepare and "Error:" not in prepare
        if rec["workload"] == "tput":
            flag = "--config" if version.startswith("1.3") else "--extra_llm_api_options"
            assert flag in rec["command"]
    assert subprocess.run(["docker", "ps", "-aq", "--filter", "label=sparkfleet.campaign=versions"],
                          capture_output=True, text=True).stdout.split() == []
