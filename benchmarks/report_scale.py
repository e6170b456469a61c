"""Time `sparkfleet report` on 100,000 synthetic run records (wall time and peak memory).

    .venv/bin/python benchmarks/report_scale.py [--runs 100000] [--keep DIR] [--repeat N]

Records are sharded like a real fleet: hosts x models x environments x workloads x iterations, written
as ``<campaign>/<host>/runs/<run_id>/record.json``; one run in 2,000 also gets a telemetry.csv. The report
runs in a child process, so its peak RSS (ru_maxrss of the children) is the report's alone. Target: at most
10 s and 2 GiB on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import run_id  # noqa: E402

HOSTS = 20
MODELS = ("deepseek-7b", "qwen-72b", "gpt-oss-120b", "llama-8b", "mistral-7b")
ENVIRONMENTS = ("native", "container")
WORKLOADS = {f"T{i + 1}": 2**i for i in range(10)}  # name -> batch size
TELEMETRY_EVERY = 2000


def generate(root: Path, runs: int, seed: int = 0) -> int:
    """Write ``runs`` records (iterations fill the last dimension); returns how many were written."""
    rng = np.random.default_rng(seed)
    cells = HOSTS * len(MODELS) * len(ENVIRONMENTS) * len(WORKLOADS)
    iterations = max(1, runs // cells)
    host_factor = 1 + rng.normal(0, 0.01, HOSTS)
    written = 0
    for h in range(HOSTS):
        host = f"spark-{h + 1:02d}"
        runs_dir = root / host / "runs"
        order = 0
        for model in MODELS:
            for workload, batch in WORKLOADS.items():
                for iteration in range(1, iterations + 1):
                    for environment in ENVIRONMENTS:  # interleaved, as a campaign should be
                        if written >= runs:
                            return written
                        rec = _record(host, model, environment, workload, batch, iteration, order,
                                      host_factor[h], rng)
                        run_dir = runs_dir / rec["run_id"]
                        run_dir.mkdir(parents=True)
                        (run_dir / "record.json").write_text(json.dumps(rec))
                        if written % TELEMETRY_EVERY == 0:
                            _telemetry(run_dir / "telemetry.csv", rng)
                        order += 1
                        written += 1
    return written


def _record(host: str, model: str, environment: str, workload: str, batch: int, iteration: int, order: int,
            host_factor: float, rng: np.random.Generator) -> dict:
    container = environment != "native"
    peak = 70.0 + 22.0 * container + rng.normal(0, 0.5)
    throughput = 40.0 * batch**0.6 * host_factor * (1 + rng.normal(0, 0.01))
    status = "ok" if rng.random() > 0.002 else "failed"
    return {
        "schema_version": 1, "campaign": "scale", "host": host, "model": model, "environment": environment,
        "environment_kind": environment, "workload": workload,
        "workload_params": {"engine": "trtllm-bench", "batch": batch, "input_len": 128, "output_len": 128},
        "iteration": iteration, "order_index": order, "warmup": False,
        "started_utc": "2025-11-10T00:00:00Z", "duration_s": 60.0,
        "exit_code": 0 if status == "ok" else 1, "status": status,
        "reason": None if status == "ok" else "synthetic failure",
        "metrics": {"output_tok_s": throughput, "total_tok_s": 2 * throughput, "req_s": throughput / 128,
                    "latency_ms_avg": 1000 * batch / throughput * 128 * (1 + rng.normal(0, 0.02)),
                    "latency_ms_p50": 950.0, "latency_ms_p99": 1400.0, "peak_memory_gib": peak,
                    "kv_cache_gib": 0.9 * (119.64 - peak) + 0.06, "device_total_gib": 119.64},
        "metric_sources": {"peak_memory_gib": "log", "kv_cache_gib": "log", "device_total_gib": "nvml"},
        "telemetry": {"gpu_temp_max_c": 60.0, "gpu_power_avg_w": 80.0},
        "versions": {"tensorrt_llm": "1.1.0rc3", "driver": "580.95.05"},
        "run_id": run_id("scale", host, model, environment, workload, iteration),
    }


def _telemetry(path: Path, rng: np.random.Generator) -> None:
    t = np.arange(0, 60.0)
    rows = ["t_s,gpu_temp_c,gpu_power_w,sm_clock_mhz,gpu_util_pct,mem_used_gib"]
    rows += [f"{s:.0f},{40 + 20 * (1 - np.exp(-s / 15)):.1f},{80 + rng.normal(0, 2):.1f},2400,98,"
             f"{70 + s / 10:.2f}" for s in t]
    path.write_text("\n".join(rows) + "\n")


def time_report(campaign: Path) -> dict[str, float]:
    """Wall and CPU seconds (the report and its loader workers), peak RSS in GiB, exit code.

    CPU time is reported beside wall time because a shared machine's load stretches the wall clock.
    """
    command = [sys.executable, "-m", "sparkfleet", "report", str(campaign)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        print(done.stderr, file=sys.stderr)
    return {
        "exit": done.returncode,
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_rss_gib": after.ru_maxrss / 1024**2,  # KiB on Linux; the largest single process
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="time the report N times (default 1)")
    args = parser.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sparkfleet-scale-"))
    campaign = base / "scale"
    try:
        if not (campaign / "report").exists() or not args.keep:
            start = time.perf_counter()
            count = generate(campaign, args.runs)
            print(f"generated {count} records in {time.perf_counter() - start:.1f} s under {campaign}")
        status = 0
        for _ in range(max(1, args.repeat)):
            load = os.getloadavg()[0]
            result = time_report(campaign)
            print(f"sparkfleet report: exit {result['exit']}, wall {result['wall_s']:.2f} s, "
                  f"cpu {result['cpu_s']:.2f} s, peak RSS {result['peak_rss_gib']:.2f} GiB, "
                  f"cpus {len(os.sched_getaffinity(0))}, load average before {load:.2f}", flush=True)
            status = status or int(result["exit"])
        return status
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
