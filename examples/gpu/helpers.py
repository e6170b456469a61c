#!/usr/bin/env python3
"""Helpers of run-on-device.sh (stdlib only).

    helpers.py binds WORK_DIR PATH...   -> JSON extra vars: native_rootfs_extra_binds for the mounts (other than /)
                                           that hold PATH... (the Python that runs the workloads, its packages);
                                           an overlay of / does not show them
    helpers.py summary CAMPAIGN_DIR     -> Markdown: bare vs native per workload, from the run records
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

PSEUDO = ("/proc", "/sys", "/dev", "/run")


def mount_point(path: str) -> str:
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def binds(work_dir: str, paths: list[str]) -> dict:
    work = os.path.realpath(work_dir)
    found: list[str] = []
    for p in paths:
        if not p or not os.path.exists(p):
            continue
        mp = mount_point(p)
        if mp == "/" or mp in found:
            continue
        if any(mp == d or mp.startswith(d + "/") for d in PSEUDO):
            continue
        if mp == work or mp.startswith(work + "/") or work.startswith(mp + "/"):
            continue
        found.append(mp)
    return {"native_rootfs_extra_binds": [{"src": mp, "read_only": True} for mp in sorted(found)]}


def _median(values: list) -> float | None:
    vals = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(vals) if vals else None


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def summary(campaign_dir: str) -> str:
    records = []
    for path in sorted(Path(campaign_dir).glob("*/runs/*/record.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    if not records:
        return f"no run records under {campaign_dir}\n"
    envs = sorted({r.get("environment") for r in records})
    workloads = list(dict.fromkeys(r.get("workload") for r in sorted(records, key=lambda r: r.get("order_index") or 0)))
    lines = [f"# {Path(campaign_dir).name}: {len(records)} runs", ""]
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r.get("status")] = statuses.get(r.get("status"), 0) + 1
    lines.append("Status: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    bad = [r for r in records if r.get("status") != "ok"]
    for r in bad:
        lines.append(f"- {r.get('run_id')}: {r.get('status')}: {r.get('reason')}")
    lines += ["", "Medians over the measured iterations (each run is its own process).", ""]
    cols = [
        ("throughput", lambda r: (r.get("metrics") or {}).get("gflops")
         or (r.get("metrics") or {}).get("output_tok_s")),
        ("latency ms", lambda r: (r.get("metrics") or {}).get("latency_ms_avg")),
        ("TTFT ms", lambda r: (r.get("metrics") or {}).get("ttft_ms")),
        ("TPOT ms", lambda r: (r.get("metrics") or {}).get("tpot_ms")),
        ("peak mem GiB", lambda r: (r.get("metrics") or {}).get("peak_memory_gib")),
        ("KV GiB", lambda r: (r.get("metrics") or {}).get("kv_cache_gib")),
        ("host mem used GiB (max)", lambda r: (r.get("telemetry") or {}).get("mem_used_gib_max")),
        ("temp max °C", lambda r: (r.get("telemetry") or {}).get("gpu_temp_c_max")),
        ("power max W", lambda r: (r.get("telemetry") or {}).get("gpu_power_w_max")),
        ("cooldown s", lambda r: (r.get("cooldown") or {}).get("waited_s")),
        ("temp at start °C", lambda r: (r.get("cooldown") or {}).get("start_temp_c")),
        ("run s", lambda r: r.get("duration_s")),
    ]
    lines.append("| workload | env | n | " + " | ".join(c for c, _ in cols) + " |")
    lines.append("|---|---|---|" + "---|" * len(cols))
    ratios = []
    for wl in workloads:
        per_env = {}
        for env in envs:
            rs = [r for r in records if r.get("workload") == wl and r.get("environment") == env
                  and r.get("status") == "ok" and not r.get("warmup")]
            if not rs:
                continue
            vals = [_median([f(r) for r in rs]) for _, f in cols]
            per_env[env] = vals
            unit = "GFLOP/s" if rs[0].get("engine") == "matmul" else "tok/s"
            cells = [_fmt(vals[0], 1) + f" {unit}"] + [_fmt(v, 1 if i in (7, 8) else 3 if i in (4, 5, 6) else 2)
                                                      for i, v in enumerate(vals[1:], start=1)]
            lines.append(f"| {wl} | {env} | {len(rs)} | " + " | ".join(cells) + " |")
        if "bare" in per_env and "native" in per_env and per_env["bare"][0] and per_env["native"][0]:
            ratios.append((wl, per_env["native"][0] / per_env["bare"][0],
                           per_env["bare"][4], per_env["native"][4]))
    if ratios:
        lines += ["", "| workload | native / bare throughput | peak mem bare GiB | peak mem native GiB |",
                  "|---|---|---|---|"]
        for wl, ratio, pb, pn in ratios:
            lines.append(f"| {wl} | {ratio:.3f} | {_fmt(pb, 3)} | {_fmt(pn, 3)} |")
    probes = {}
    for r in records:
        probe = r.get("probe") or {}
        if probe:
            probes.setdefault(r.get("environment"), probe)
    if probes:
        lines += ["", "Where the runs ran (`[sparkfleet-probe]` lines of the first run per environment):", ""]
        for env, probe in sorted(probes.items()):
            lines.append(f"- {env}: " + ", ".join(f"{k}={v}" for k, v in sorted(probe.items()) if k != "pid"))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "binds":
        print(json.dumps(binds(argv[1], argv[2:])))
        return 0
    if len(argv) == 2 and argv[0] == "summary":
        sys.stdout.write(summary(argv[1]))
        return 0
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
