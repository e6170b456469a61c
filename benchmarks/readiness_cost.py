#!/usr/bin/env python3
"""What the readiness probe (issue 24) costs each run, from the records of a campaign that ran it.

bench_run probes the GPU after each cooldown (plugins/module_utils/sparkfleet_host/host_state.readiness_probe):
gpu_probe.py starts in the run's environment (Python, torch or cupy, CUDA context), keeps a matrix product
loop on the GPU for ``probe_s`` seconds while the SM clock and power are read, and exits. Each record keeps the
probe's wall time (``readiness.duration_s``) beside the run's own (``duration_s``: its commands, the probe not
included). This script prints, per workload: the probe's time, the run's, and the probe as a share of the run
as measured; and the share the same probe would be of a run of ``--typical-s`` seconds (default 300 s: the
planner's nominal trtllm run, plugins/plugin_utils/estimate.py), since the runs of a small GPU example are much
shorter than a Spark campaign's.

Usage:
    .venv/bin/python benchmarks/readiness_cost.py examples/gpu/results/gpu [--typical-s 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a campaign's results directory (results/<campaign>)")
    parser.add_argument("--typical-s", type=float, default=300.0, help="a typical run's length, seconds")
    args = parser.parse_args(argv)
    by_workload: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for path in sorted(args.results.glob("*/runs/*/record.json")):
        record = json.loads(path.read_text())
        probe = record.get("readiness") or {}
        if probe.get("duration_s") is None or record.get("duration_s") is None:
            continue
        by_workload[record["workload"]].append((float(probe["duration_s"]), float(record["duration_s"]),
                                                str(probe.get("state"))))
    if not by_workload:
        print(f"no record under {args.results} carries a readiness probe")
        return 1
    print(f"| workload | runs | probe s (median, min-max) | run s (median) | probe / run (median) | probe / "
          f"{args.typical_s:g} s run | states |")
    print("|---|---|---|---|---|---|---|")
    for workload, rows in sorted(by_workload.items()):
        probes, runs = [r[0] for r in rows], [r[1] for r in rows]
        shares = [p / r for p, r, _ in rows if r > 0]
        states = ", ".join(f"{s} {n}" for s, n in sorted({s: sum(1 for r in rows if r[2] == s)
                                                          for _, _, s in rows}.items()))
        print(f"| {workload} | {len(rows)} | {statistics.median(probes):.2f} ({min(probes):.2f}-{max(probes):.2f}) | "
              f"{statistics.median(runs):.1f} | {statistics.median(shares) * 100:.0f}% | "
              f"{statistics.median(probes) / args.typical_s * 100:.1f}% | {states} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
