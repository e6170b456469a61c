#!/usr/bin/env python3
"""CPU cost of the run fingerprint (plugins/module_utils/sparkfleet_host/sensors/fingerprint.py) on the measured step.

bench_run samples the benchmark process's fingerprint in a thread while the measured step runs: at 0.1, 0.3, 0.6,
1, 1.5, 2, 3, 4.5, 6, 9, 12, 20, 30, 45 and 60 s, then once a minute, at most 60 samples (SCHEDULE_S,
LATE_INTERVAL_S, MAX_SAMPLES). Each sample walks /proc for the process tree, reads the chosen process's maps,
environ and mountinfo, and the versions of its Python packages under /proc/PID/root. This script starts a target
process that maps many shared libraries (a Python importing numpy and pandas; --torch adds torch, as the GPU
workloads do), takes --samples samples of it, and prints the CPU time per sample (user + system of this process,
from getrusage: the sampler's own work) and what a whole run's schedule costs: the samples of a run of --run-s
seconds times the CPU per sample, as a share of that run's wall time on one core.

Usage:
    .venv/bin/python benchmarks/fingerprint_cost.py [--samples 200] [--run-s 300] [--torch]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins" / "module_utils"))

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors import fingerprint  # noqa: E402


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def samples_in(run_s: float) -> int:
    due = list(fingerprint.SCHEDULE_S)
    while len(due) < fingerprint.MAX_SAMPLES and due[-1] + fingerprint.LATE_INTERVAL_S <= run_s:
        due.append(due[-1] + fingerprint.LATE_INTERVAL_S)
    return sum(1 for t in due if t <= run_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--run-s", type=float, default=300.0, help="a measured step this long (default 300 s)")
    ap.add_argument("--torch", action="store_true", help="the target imports torch too")
    args = ap.parse_args()
    imports = "import numpy, pandas" + (", torch" if args.torch else "")
    target = subprocess.Popen([sys.executable, "-c", f"{imports}; import sys, time; print('ready', flush=True); "
                               "time.sleep(3600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        fp = fingerprint.sample(target.pid)
        with open(f"/proc/{target.pid}/maps") as fh:
            n_maps = sum(1 for _ in fh)
        per = []
        for _ in range(args.samples):
            c0 = cpu_s()
            fingerprint.sample(target.pid)
            per.append(cpu_s() - c0)
    finally:
        target.kill()
        target.wait()
    mean_ms = statistics.fmean(per) * 1000
    n_run = samples_in(args.run_s)
    print(f"target: python {imports!r}: {n_maps} mappings, {len(fp['libraries'])} listed libraries, "
          f"packages {fp.get('packages')}")
    print(f"CPU per sample: mean {mean_ms:.2f} ms, median {statistics.median(per) * 1000:.2f} ms, "
          f"max {max(per) * 1000:.2f} ms over {args.samples} samples (getrusage resolution is the kernel tick)")
    print(f"a {args.run_s:.0f} s measured step: {n_run} samples, {n_run * mean_ms:.0f} ms of CPU, "
          f"{n_run * mean_ms / 1000 / args.run_s * 100:.3f} % of one core over the step")
    print(f"cpu: {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
