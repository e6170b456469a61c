#!/usr/bin/env python3
"""Orchestration overhead per run, and fleet scaling over 1, 4 and 8 namespace hosts.

For each fleet size N: a fake fleet of N hosts (tests/fleet/fakefleet.py) first runs a small campaign
through bench.yml (cold: it also extracts the image's rootfs on every host), then the measured per-host
campaign on the provisioned hosts (its matrix stage is timed from the ledger: first `started` to last
`finished` on each host). The workload is the trtllm-bench stand-in with a fixed run time, cooldown off.

  overhead per run = (matrix wall time − Σ run durations − Σ cooldown waits) / runs     (per host)
  scaling          = the fleet's matrix wall time (first run started on any host to last run finished on
                     any host) / that of 1 host

Needs root and Docker (like the end-to-end tests). Usage:
  sudo .venv/bin/python benchmarks/fleet_scaling.py [--sizes 1,4,8] [--runs 6] [--runtime 2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "fleet"), str(REPO / "benchmarks")]

from fakefleet import FakeFleet  # noqa: E402
from fleetbench import run_bench, write_campaign  # noqa: E402
from testimage import ensure_dockerd, ensure_test_image  # noqa: E402


def _ts(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC).timestamp()


def measure(n: int, runs: int, runtime: float, image: str, base: Path) -> dict:
    fleet = FakeFleet.up(n, base / f"fleet{n}")
    try:
        # Cold: the first campaign on fresh hosts also extracts the image's rootfs on each (here all N on
        # one disk and two cores). Measured: the next campaign on the provisioned hosts, as a fleet runs them.
        cold = run_bench(fleet.inventory, write_campaign(base / f"warm{n}.json", f"warm{n}", image, 1, runtime),
                         base / "results")
        total = run_bench(fleet.inventory, write_campaign(base / f"c{n}.json", f"scale{n}", image, runs // 2, runtime),
                          base / "results")
        per_host = []
        by_kind: dict[str, list[float]] = {}
        for host in fleet.hosts:
            hdir = Path(host.work_dir, "results", f"scale{n}", host.name)
            events = [json.loads(line) for line in (hdir / "ledger.jsonl").read_text().splitlines()]
            first = min(_ts(e["ts"]) for e in events if e["event"] == "started")
            last = max(_ts(e["ts"]) for e in events if e["event"] == "finished")
            recs = [json.loads(p.read_text()) for p in (hdir / "runs").glob("*/record.json")]
            work = sum(r["duration_s"] for r in recs)
            cool = sum((r.get("cooldown") or {}).get("waited_s") or 0 for r in recs)
            for r in recs:
                by_kind.setdefault(r["environment_kind"], []).append(r["duration_s"])
            per_host.append({"first": first, "last": last, "matrix_s": last - first,
                             "overhead_per_run_s": (last - first - work - cool) / len(recs),
                             "run_s_mean": work / len(recs)})
        return {"hosts": n, "runs_per_host": runs, "cold_playbook_s": round(cold, 1), "playbook_s": round(total, 1),
                "matrix_s": round(max(h["matrix_s"] for h in per_host), 2),
                # the fleet's matrix: first run started on any host to last run finished on any host
                "fleet_matrix_s": round(max(h["last"] for h in per_host) - min(h["first"] for h in per_host), 2),
                "overhead_per_run_s": round(statistics.mean(h["overhead_per_run_s"] for h in per_host), 3),
                "run_s_mean": round(statistics.mean(h["run_s_mean"] for h in per_host), 3),
                "run_s_by_kind": {k: round(statistics.mean(v), 3) for k, v in sorted(by_kind.items())}}
    finally:
        fleet.down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,8")
    parser.add_argument("--runs", type=int, default=6, help="runs per host (even: native + container)")
    parser.add_argument("--runtime", type=float, default=2.0, help="stand-in run time per run, seconds")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, chroot, Docker)", file=sys.stderr)
        return 2
    ensure_dockerd()
    image = ensure_test_image()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sparkfleet-scale-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            rows.append(measure(n, args.runs, args.runtime, image, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    base = rows[0]["fleet_matrix_s"]
    print(f"\n{'hosts':>5} {'runs/host':>9} {'cold s':>7} {'playbook s':>10} {'host matrix s':>13} "
          f"{'fleet matrix s':>14} {'x 1 host':>8} {'run s':>6} {'overhead/run s':>14}")
    for r in rows:
        print(f"{r['hosts']:>5} {r['runs_per_host']:>9} {r['cold_playbook_s']:>7} {r['playbook_s']:>10} "
              f"{r['matrix_s']:>13} {r['fleet_matrix_s']:>14} "
              f"{r['fleet_matrix_s'] / base:>8.2f} {r['run_s_mean']:>6} {r['overhead_per_run_s']:>14}")
    print(f"load average after: {os.getloadavg()[0]:.2f}, cpus: {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
