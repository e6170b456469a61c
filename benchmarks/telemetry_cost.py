#!/usr/bin/env python3
"""CPU cost and timing jitter of run telemetry: TelemetrySampler against the study's per-second spawning loop.

Approaches, each run for --seconds in its own process so that its CPU can be attributed:

  ours/<sensor>   sparkfleet_host/sensors/telemetry.py: a sampler thread on deadlines; GPU figures from
                  NVML in-process (``nvml``) or ONE ``nvidia-smi -lms`` child (``nvidia-smi``); host memory from
                  /proc/meminfo and a cgroup memory file by pread. ``none`` = host memory and cgroup only (the floor).
  study           bash loop: every period ``nvidia-smi --query-gpu=... --format=csv`` and
                  ``docker stats --no-stream <container>``, then ``sleep`` (the study's monitor).
  spawn floor     the same bash loop spawning ``/bin/true`` twice instead: what any spawn-per-sample design costs
                  at least, whatever tool it spawns.

CPU per sample = (user + system CPU of the process and all its reaped descendants, from getrusage/wait4) /
samples taken. Docker's daemons do the work of ``docker stats`` server-side: their CPU over the run (from
/proc/<pid>/stat of dockerd, containerd and the container's shim) is shown apart, as ``+daemon``; other users of
the same Docker engine add noise to it. Jitter = actual - scheduled sample time, scheduled = t0 + k * period (the
bash loop sleeps a period after its work, so its lateness grows with every sample).

Usage:
    .venv/bin/python benchmarks/telemetry_cost.py [--seconds 30] [--rates 1,10]
    python3 benchmarks/telemetry_cost.py --gpu [--seconds 30]   # on a GPU machine: real NVML and nvidia-smi

Without --gpu, nvidia-smi is whatever is first on PATH; tests/fleet/standins is put first when no real nvidia-smi
answers (a Python program: spawning it costs far more than a real nvidia-smi, hence the spawn floor). Docker, when
it runs, gets a sleeping container from sparkfleet-test/trtllm:latest labelled sparkfleet.test=1, removed after;
without Docker the docker-stats part of the study loop is left out, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STANDINS = REPO / "tests" / "fleet" / "standins"
IMAGE = "sparkfleet-test/trtllm:latest"
STUDY_FIELDS = "timestamp,name,temperature.gpu,power.draw,utilization.gpu,memory.used,memory.total"


def rusage_cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def daemon_pids(container_id: str | None) -> list[int]:
    """dockerd, containerd and the container's shim (found by /proc/*/comm and cmdline; read only)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if comm in ("dockerd", "containerd") or (
            comm.startswith("containerd-shim") and container_id and container_id[:12] in cmdline
        ):
            pids.append(int(entry))
    return pids


def jitter_stats(lateness_s: list[float]) -> dict[str, float | None]:
    if not lateness_s:
        return {"p50": None, "p95": None, "max": None}
    ms = sorted(x * 1000.0 for x in lateness_s)
    return {
        "p50": round(statistics.median(ms), 2),
        "p95": round(ms[max(0, int(0.95 * len(ms) + 0.5) - 1)], 2),
        "max": round(ms[-1], 2),
    }


# --------------------------------------------------------------------------- workers (each in its own process)


def worker_ours(sensor: str, interval: float, seconds: float, cgroup_file: str | None) -> dict[str, Any]:
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors.telemetry import (
        TelemetrySampler,  # noqa: PLC0415
    )

    with tempfile.TemporaryDirectory() as tmp:
        sampler = TelemetrySampler(
            os.path.join(tmp, "telemetry.csv"), interval_s=interval, sensor=sensor, cgroup_memory_file=cgroup_file
        )
        self0, child0, wall0 = rusage_cpu(resource.RUSAGE_SELF), rusage_cpu(resource.RUSAGE_CHILDREN), time.time()
        sampler.start()
        # One-off cost of start(): opening NVML, or starting the nvidia-smi child and its first reading.
        pid = sampler.child_pid
        startup_self = rusage_cpu(resource.RUSAGE_SELF) - self0
        startup_child = (proc_cpu(pid) or 0.0) if pid else 0.0
        time.sleep(seconds)
        summary = sampler.stop()
        wall = time.time() - wall0
        cpu_self = rusage_cpu(resource.RUSAGE_SELF) - self0
        cpu_children = rusage_cpu(resource.RUSAGE_CHILDREN) - child0
    return {
        "sensor_used": summary["sensor"],
        "samples": summary["samples"],
        "wall_s": wall,
        "cpu_self_s": cpu_self,
        "cpu_children_s": cpu_children,
        "cpu_startup_self_s": startup_self,
        "cpu_startup_child_s": startup_child,
        "jitter_ms": summary["jitter_ms"],
        "processes": summary["processes_spawned"],
        "errors": summary["errors"],
    }


def bash_loop(commands: list[str], interval: float, seconds: float, stamps: str) -> str:
    """The study's monitor: run the commands, sleep a period, repeat (bash 5's $EPOCHREALTIME stamps each)."""
    body = "; ".join(commands)
    return (
        f"end=$(( ${{EPOCHSECONDS}} + {int(round(seconds))} )); "
        f"while (( EPOCHSECONDS < end )); do echo $EPOCHREALTIME >> {stamps}; {body}; sleep {interval:g}; done"
    )


def run_spawning(
    commands: list[str], interval: float, seconds: float, container_id: str | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        stamps = os.path.join(tmp, "stamps")
        script = bash_loop(commands, interval, seconds, stamps)
        daemons = daemon_pids(container_id) if container_id else []
        d0 = sum(proc_cpu(p) or 0.0 for p in daemons)
        wall0 = time.time()
        proc = subprocess.Popen(["bash", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.time() - wall0
        d1 = sum(proc_cpu(p) or 0.0 for p in daemons)
        times = [float(x) for x in Path(stamps).read_text().split()] if os.path.exists(stamps) else []
    err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
    lateness = [t - (times[0] + k * interval) for k, t in enumerate(times)] if times else []
    return {
        "samples": len(times),
        "wall_s": wall,
        "cpu_self_s": 0.0,
        "cpu_children_s": usage.ru_utime + usage.ru_stime,
        "cpu_daemon_s": (d1 - d0) if daemons else None,
        "jitter_ms": jitter_stats(lateness),
        "processes": None,
        "errors": [err[-300:]] if proc.returncode or err else [],
    }


# --------------------------------------------------------------------------- harness


def run_worker(args: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", *args], capture_output=True, text=True, check=False, env=os.environ
    )
    if out.returncode:
        raise SystemExit(f"worker {args} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def start_container() -> tuple[str | None, str]:
    """A sleeping test container (or None and why not)."""
    if not shutil.which("docker"):
        return None, "no docker CLI"
    probe = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if probe.returncode:
        return None, "Docker engine not running"
    run = subprocess.run(
        ["docker", "run", "-d", "--rm", "--label", "sparkfleet.test=1", "--entrypoint", "sleep", IMAGE, "3600"],
        capture_output=True, text=True,
    )
    if run.returncode:
        return None, f"cannot start {IMAGE}: {run.stderr.strip()[:200]}"
    return run.stdout.strip(), ""


def cgroup_file_of(container_id: str | None) -> str | None:
    if not container_id:
        return None
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors.memstate import (
        cgroup_dir_of_pid,  # noqa: PLC0415
    )

    pid = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Pid}}", container_id], capture_output=True, text=True
    ).stdout.strip()
    # The sampler takes the cgroup directory and reads its memory.current (v2) or memory.usage_in_bytes (v1).
    return cgroup_dir_of_pid(int(pid)) if pid.isdigit() else None


def real_nvidia_smi() -> str | None:
    found = shutil.which("nvidia-smi")
    if not found or Path(found).resolve() == (STANDINS / "nvidia-smi").resolve():
        return None
    ok = subprocess.run([found, "-L"], capture_output=True, text=True, check=False).returncode == 0
    return found if ok else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each measurement (default 30)")
    ap.add_argument("--rates", default="1,10", help="sampling rates in Hz (default 1,10)")
    ap.add_argument("--gpu", action="store_true", help="GPU machine: real NVML and nvidia-smi, never the stand-in")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--worker", nargs=4, metavar=("SENSOR", "INTERVAL", "SECONDS", "CGROUP"), help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:
        sensor, interval, seconds, cgroup = a.worker
        print(json.dumps(worker_ours(sensor, float(interval), float(seconds), None if cgroup == "-" else cgroup)))
        return

    notes: list[str] = []
    smi = real_nvidia_smi()
    if a.gpu:
        if not smi:
            raise SystemExit("--gpu: no working nvidia-smi on PATH")
        try:
            import pynvml  # noqa: F401, PLC0415
        except ImportError:
            notes.append("pynvml is not importable: ours/nvml falls back (see 'sensor used')")
        sensors = ["nvml", "nvidia-smi", "none"]
    else:
        if not smi:
            os.environ["PATH"] = f"{STANDINS}{os.pathsep}{os.environ['PATH']}"
            os.environ.setdefault("SPARKFLEET_FAKE_GPU_STATE", os.path.join(tempfile.gettempdir(), "tc-gpu.json"))
            notes.append("nvidia-smi is the Python stand-in (tests/fleet/standins): a spawn of it costs far more "
                         "CPU than a real nvidia-smi; compare with the spawn floor")
        sensors = ["nvidia-smi", "none"]
    smi_path = shutil.which("nvidia-smi")
    container, why = start_container()
    if not container:
        notes.append(f"docker stats left out of the study loop ({why})")
    rates = [float(r) for r in a.rates.split(",") if r.strip()]
    results: list[dict[str, Any]] = []
    try:
        cgroup = cgroup_file_of(container)
        for rate in rates:
            interval = 1.0 / rate
            for sensor in sensors:
                r = run_worker([sensor, repr(interval), repr(a.seconds), cgroup or "-"])
                results.append({"approach": f"ours/{sensor}", "rate_hz": rate, **r})
            study = [f"{smi_path} --query-gpu={STUDY_FIELDS} --format=csv >/dev/null"]
            if container:
                study.append(f"docker stats --no-stream {container} >/dev/null")
            label = "study (smi + docker stats)" if container else "study (smi only)"
            if rate <= 1.0:  # the study sampled at 1 Hz; docker stats alone takes longer than 0.1 s
                results.append({"approach": label, "rate_hz": rate,
                                **run_spawning(study, interval, a.seconds, container)})
            floor = ["/bin/true", "/bin/true"]
            results.append({"approach": "spawn floor (2x /bin/true)", "rate_hz": rate,
                            **run_spawning(floor, interval, a.seconds, None)})
    finally:
        if container:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)

    print_table(results, notes)
    if a.json:
        Path(a.json).write_text(json.dumps({"results": results, "notes": notes}, indent=1))


def per_sample_ms(r: dict[str, Any]) -> float:
    """All CPU of an approach (own process, children, Docker daemons) per sample, start-up included, in ms."""
    total = r["cpu_self_s"] + r["cpu_children_s"] + (r.get("cpu_daemon_s") or 0.0)
    return 1000.0 * total / max(1, r["samples"])


def print_table(results: list[dict[str, Any]], notes: list[str]) -> None:
    head = (
        f"{'approach':<28}{'Hz':>4}{'samples':>8}{'got Hz':>7}{'start ms':>9}{'self ms/s':>10}{'child ms/s':>11}"
        f"{'daemon ms/s':>12}{'all ms/s':>9}{'% core':>8}{'jitter p50/p95/max ms':>24}  sensor"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        n = max(1, r["samples"])
        start_self, start_child = r.get("cpu_startup_self_s", 0.0), r.get("cpu_startup_child_s", 0.0)
        start = None if "cpu_startup_self_s" not in r else start_self + start_child
        daemon = r.get("cpu_daemon_s")
        j = r["jitter_ms"]
        jit = "/".join("-" if j[k] is None else f"{j[k]:.1f}" for k in ("p50", "p95", "max"))
        total_s = r["cpu_self_s"] + r["cpu_children_s"] + (daemon or 0.0)
        print(
            f"{r['approach']:<28}{r['rate_hz']:>4g}{r['samples']:>8}{r['samples'] / r['wall_s']:>7.2f}"
            f"{'' if start is None else f'{start * 1000:.1f}':>9}{(r['cpu_self_s'] - start_self) * 1000 / n:>10.3f}"
            f"{(r['cpu_children_s'] - start_child) * 1000 / n:>11.3f}"
            f"{'' if daemon is None else f'{daemon * 1000 / n:.1f}':>12}"
            f"{per_sample_ms(r):>9.3f}{100 * total_s / r['wall_s']:>8.3f}{jit:>24}  {r.get('sensor_used', '')}"
        )
        if r["errors"]:
            print(f"    errors: {r['errors']}")
    print("ms/s = CPU ms per sample; 'self' (this process) and 'child' leave out start-up ('start ms', once per run);")
    print("'all' is everything, start-up and Docker daemons included, per sample; '% core' likewise over the run.")
    print()
    for rate in sorted({r["rate_hz"] for r in results}):
        ours = [r for r in results if r["rate_hz"] == rate and r["approach"].startswith("ours/")]
        others = [r for r in results if r["rate_hz"] == rate and not r["approach"].startswith("ours/")]
        for x in others:
            for o in ours:
                ratio = per_sample_ms(x) / per_sample_ms(o) if per_sample_ms(o) > 0 else float("inf")
                print(f"{rate:g} Hz: {x['approach']} costs {ratio:,.1f}x the CPU per sample of {o['approach']}")
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
