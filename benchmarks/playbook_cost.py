#!/usr/bin/env python3
"""Whole-playbook cost on a fleet: bench.yml's wall time per play, for one or more checkouts (A/B).

One fake fleet of N namespace hosts (tests/fleet/fakefleet.py) runs a cold campaign first (rootfs
extraction), then, REPEAT times and in alternating order, a fresh small campaign through each checkout's
bench.yml on the same provisioned hosts. A benchmark-only callback (benchmarks/callback/play_timer.py)
times every play and task. Prints the median wall time of the playbook and of each play, per checkout.

Needs root and Docker (like the end-to-end tests). Usage, e.g. before/after a change:
  git worktree add /tmp/sf-before <commit>
  sudo .venv/bin/python benchmarks/playbook_cost.py --hosts 8 --repeat 3 --checkout before=/tmp/sf-before \\
      --checkout after=.
"""

from __future__ import annotations

import argparse
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


def bench(checkout: Path, fleet, campaign: Path, results: Path, times: Path) -> float:
    """bench.yml of ``checkout`` with the play timer on; its per-play times land in ``times``."""
    return run_bench(fleet.inventory, campaign, results, checkout, env={
        "ANSIBLE_CALLBACK_PLUGINS": f"{checkout / 'plugins' / 'callback'}:{REPO / 'benchmarks' / 'callback'}",
        "ANSIBLE_CALLBACKS_ENABLED": "play_timer", "SPARKFLEET_PLAY_TIMES": str(times)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runtime", type=float, default=2.0, help="stand-in run time per run, seconds")
    parser.add_argument("--checkout", action="append", default=[], metavar="NAME=PATH",
                        help="a sparkfleet checkout to time (repeatable; default: this one)")
    parser.add_argument("--keep", metavar="DIR", help="also keep each run's per-play and per-task times here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, chroot, Docker)", file=sys.stderr)
        return 2
    checkouts = {}
    for item in args.checkout or [f"this={REPO}"]:
        name, sep, path = item.partition("=")
        if not sep or not Path(path, "bench.yml").is_file():
            print(f"--checkout wants NAME=PATH of a sparkfleet checkout, got {item!r}", file=sys.stderr)
            return 2
        checkouts[name] = Path(path).resolve()
    ensure_dockerd()
    image = ensure_test_image()
    samples: dict[str, list[dict]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory(prefix="sparkfleet-cost-") as tmp:
        base = Path(tmp)
        fleet = FakeFleet.up(args.hosts, base / "fleet")
        try:
            first = next(iter(checkouts.values()))
            bench(first, fleet, write_campaign(base / "cold.json", "cold", image, 1, args.runtime), base / "results",
                  base / "cold-times.json")
            for r in range(args.repeat):
                order = list(checkouts) if r % 2 == 0 else list(reversed(checkouts))
                for name in order:
                    times = base / f"times-{name}-{r}.json"
                    wall = bench(checkouts[name], fleet,
                                 write_campaign(base / f"c-{name}-{r}.json", f"cost-{name}-{r}", image, 1,
                                                args.runtime),
                                 base / "results", times)
                    plays = json.loads(times.read_text())
                    if args.keep:
                        Path(args.keep).mkdir(parents=True, exist_ok=True)
                        (Path(args.keep) / times.name).write_text(times.read_text())
                    samples[name].append({"wall_s": wall, "plays": plays})
                    print(json.dumps({"checkout": name, "repeat": r, "wall_s": round(wall, 1),
                                      "plays": {p["play"]: p["s"] for p in plays}}), flush=True)
        finally:
            fleet.down()
    print(f"\n{args.hosts} hosts, {args.repeat} repeats, median seconds")
    plays = [p["play"] for p in samples[next(iter(samples))][0]["plays"]]
    print(f"{'':<44}" + "".join(f"{name:>12}" for name in samples))
    print(f"{'bench.yml (wall)':<44}" + "".join(
        f"{statistics.median(s['wall_s'] for s in samples[name]):>12.1f}" for name in samples))
    for i, play in enumerate(plays):
        print(f"{play[:43]:<44}" + "".join(
            f"{statistics.median(s['plays'][i]['s'] for s in samples[name]):>12.1f}" for name in samples))
    print(f"load average after: {os.getloadavg()[0]:.2f}, cpus: {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
