#!/usr/bin/env python3
"""Compare thermal_wait's stop rule with the study's cooldown policy, on replayed and simulated cooldowns.

The study waited until the GPU read < 45 C and then always five more minutes. thermal_wait stops once every
GPU has settled (fitted trend over `settle_window` within `settle_band`). For each cooldown both policies poll
the same noisy sensor (the study every 5 s); we report seconds waited per run and the spread of the
temperature the next run starts at.

Cooldowns:
  * h200-trace   the real H200 trace (tests/data/gpu-traces/h200-heat-cool.json) from the end of its load
  * spark-tauN   Newton cooling from a peak of 55-65 C toward an ambient that drifts 37-39 C over the campaign,
                 time constant N s, integer readings with +-1 C uniform sensor noise (a DGX Spark cools slowly)

Our rule runs through the real module (plugins/modules/thermal_wait.py) with a fake clock and sensor, so this
measures the code that ships. Usage:

    .venv/bin/python benchmarks/thermal_policy.py [--runs 63] [--seed 1] [--taus 120,240]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import importlib.util
import io
import json
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "tests" / "data" / "gpu-traces" / "h200-heat-cool.json"
POLL_S = 5.0
STUDY_THRESHOLD, STUDY_EXTRA_S = 45.0, 300.0

from ansible.module_utils.testing import patch_module_args  # noqa: E402

gpu = importlib.import_module("ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors.gpu")


def load_thermal_wait() -> Any:
    return importlib.import_module("ansible_collections.sparkfleet.bench.plugins.modules.thermal_wait")


@dataclass
class Cooldown:
    true_temp: Callable[[float], float]  # seconds since the load stopped -> C
    reading: Callable[[float], float]  # what the sensor reports (integer, noisy)
    ambient: float


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class Sensor(gpu.GpuSensor):
    kind = "sim"

    def __init__(self, clock: Clock, cooldown: Cooldown) -> None:
        self.clock, self.cooldown = clock, cooldown

    def read(self, indices: Sequence[int] | None = None) -> list[Any]:
        return [gpu.GpuReading(index=0, temperature_c=self.cooldown.reading(self.clock.t))]


def ours(tw: Any, cooldown: Cooldown, args: dict[str, Any]) -> tuple[float, float, float]:
    """(seconds waited, start reading, true start temperature) under thermal_wait."""
    clock = Clock()
    tw._monotonic, tw._sleep = clock.monotonic, clock.sleep
    tw._open_sensor = lambda kind, runner, nvidia_smi: Sensor(clock, cooldown)
    out = io.StringIO()
    with (
        patch_module_args({"max_wait": 3600, "on_timeout": "continue", **args}),
        contextlib.redirect_stdout(out),
        contextlib.suppress(SystemExit),
    ):
        tw.main()
    res = json.loads(out.getvalue().strip().splitlines()[-1])
    assert res["reason"] != "max_wait", res["msg"]
    return res["waited"], res["end_temp"], cooldown.true_temp(clock.t)


def study(cooldown: Cooldown) -> tuple[float, float, float]:
    """Poll until a reading is below 45 C, then wait five minutes more."""
    t = 0.0
    while cooldown.reading(t) >= STUDY_THRESHOLD:
        t += POLL_S
    t += STUDY_EXTRA_S
    return t, cooldown.reading(t), cooldown.true_temp(t)


def h200_cooldown() -> Cooldown:
    rows = json.loads(TRACE.read_text())
    end = max(r[0] for r in rows if r[1] == "hot")
    pts = [(r[0] - end, float(r[2])) for r in rows if r[0] >= end]
    times = [p[0] for p in pts]

    def temp(t: float) -> float:
        return pts[max(0, bisect.bisect_right(times, t) - 1)][1]

    return Cooldown(temp, temp, pts[-1][1])


def spark_cooldowns(n: int, tau: float, seed: int) -> list[Cooldown]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ambient = 38.0 + math.sin(i / n * 2 * math.pi)  # the room drifts by +-1 C over the campaign
        peak = rng.uniform(55.0, 65.0)
        run_seed = rng.randrange(2**32)

        def true_temp(t: float, a: float = ambient, p: float = peak) -> float:
            return a + (p - a) * math.exp(-t / tau)

        def reading(t: float, f: Callable[[float], float] = true_temp, k: int = run_seed) -> float:
            # Noise is a function of (run, instant), so every policy sees the same sensor.
            return float(round(f(t) + random.Random(k * 100_003 + round(t * 10)).uniform(-1.0, 1.0)))

        out.append(Cooldown(true_temp, reading, ambient))
    return out


def summarize(name: str, policy: str, results: list[tuple[float, float, float]], ambients: list[float]) -> dict:
    waited = [r[0] for r in results]
    starts = [r[1] for r in results]
    excess = [r[2] - a for r, a in zip(results, ambients, strict=True)]
    return {
        "cooldown": name,
        "policy": policy,
        "runs": len(results),
        "wait_mean_s": statistics.fmean(waited),
        "wait_max_s": max(waited),
        "wait_total_h": sum(waited) / 3600,
        "start_read_min": min(starts),
        "start_read_max": max(starts),
        "start_excess_mean": statistics.fmean(excess),
        "start_excess_sd": statistics.pstdev(excess),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=63, help="runs per simulated campaign (the study had 63)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--taus", default="120,240", help="Spark cooling time constants in seconds")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    opts = ap.parse_args(argv)

    tw = load_thermal_wait()
    ours_policies = {
        "ours 60 s/1 C/poll 1": {},  # the module's defaults
        "ours 60 s/1 C/poll 5": {"poll_interval": 5},
        "ours 120 s/1 C/poll 1": {"settle_window": 120},
        "ours 120 s/1 C/poll 5": {"settle_window": 120, "poll_interval": 5},
    }
    campaigns: list[tuple[str, list[Cooldown]]] = [("h200-trace", [h200_cooldown()])]
    for tau in (float(x) for x in opts.taus.split(",")):
        campaigns.append((f"spark-tau{tau:g}", spark_cooldowns(opts.runs, tau, opts.seed)))

    rows = []
    for name, cooldowns in campaigns:
        ambients = [c.ambient for c in cooldowns]
        rows.append(summarize(name, "study (<45 C + 300 s)", [study(c) for c in cooldowns], ambients))
        for label, args in ours_policies.items():
            rows.append(summarize(name, label, [ours(tw, c, args) for c in cooldowns], ambients))

    if opts.json:
        print(json.dumps(rows, indent=1))
        return 0
    head = (
        f"{'cooldown':<14}{'policy':<23}{'runs':>5}{'wait/run s':>11}{'max s':>7}{'total h':>8}"
        f"{'start C (read)':>16}{'above ambient C':>17}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['cooldown']:<14}{r['policy']:<23}{r['runs']:>5}{r['wait_mean_s']:>11.0f}{r['wait_max_s']:>7.0f}"
            f"{r['wait_total_h']:>8.2f}{r['start_read_min']:>9.0f}-{r['start_read_max']:<6.0f}"
            f"{r['start_excess_mean']:>9.2f} ± {r['start_excess_sd']:<5.2f}"
        )
    print("\n'above ambient': true temperature at the start of the next run minus the room's, mean ± sd")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
