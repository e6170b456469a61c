"""What the fleet benchmarks share: their stand-in campaign and one timed `bench.yml` on a fake fleet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write_campaign(path: Path, name: str, image: str, iterations: int, runtime: float) -> Path:
    """1 model x native + container x ``iterations``; the trtllm-bench stand-in runs ``runtime`` s; no cooldown.
    The model's local directory (trtllm reads its tokenizer there, offline) lies in a models directory next to
    ``path``, which the same extra-vars file gives the hosts as ``sparkfleet_models_dir`` (the namespace hosts
    share one file system)."""
    models_dir = path.parent / "models"
    model = models_dir / "deepseek-ai" / "DeepSeek-R1-Distill-Qwen-7B"
    model.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sparkfleet_models_dir": str(models_dir), "sparkfleet_campaign": {
        "name": name, "image": image, "models": [{"name": "deepseek", "path": str(model)}],
        "environments": ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}],
        "workloads": [{"name": "w", "preset": "T1", "requests": 4,
                       "env": {"SPARKFLEET_FAKE_RUNTIME_S": str(runtime), "SPARKFLEET_FAKE_ALLOC_MIB": "16"}}],
        "iterations": iterations, "cooldown": {"enabled": False}, "timeout_s": 300}}))
    return path


def run_bench(inventory: str, campaign: Path, results: Path, checkout: Path = REPO,
              env: dict[str, str] | None = None) -> float:
    """Run ``checkout``'s bench.yml (gates relaxed for namespace hosts on one VM); its wall time in seconds."""
    full = dict(os.environ, ANSIBLE_CONFIG=str(checkout / "ansible.cfg"), **(env or {}))
    full["PATH"] = f"{Path(sys.executable).parent}:{full['PATH']}"
    started = time.monotonic()
    proc = subprocess.run(
        ["ansible-playbook", "-i", inventory, "bench.yml", "-e", f"@{campaign}",
         "-e", f"sparkfleet_results_dir={results}", "-e", "sparkfleet_image_offline=true",
         "-e", "sparkfleet_preflight_max_load_per_cpu=100", "-e", "sparkfleet_preflight_min_free_memory_gib=0.5",
         "-e", "sparkfleet_preflight_min_free_disk_gib=1"],
        cwd=checkout, env=full, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench.yml of {checkout} failed on {inventory}:\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.monotonic() - started
