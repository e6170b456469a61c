# Copyright: sparkfleet contributors
# Apache-2.0
"""Host state around each run (issue 24): the readiness probe before it and the attestation over it, as the run
record's ``readiness`` and ``attestation`` sections (record.SECTION_KEYS).

* :func:`readiness_probe` runs the short fixed GPU load (``gpu_probe.py load``, copied with the workload scripts,
  run with the host's python3) while reading the SM clock, power, utilisation and clock-event reasons under load
  through gpu.py's sensor and the cumulative clock-event counters at the start and the end of its window, then
  judges them with what the load delivered (readiness.judge) and decides under the campaign's policy
  (readiness.action).
* A lost cap is put back by gpu_control.reapply_lost_controls (with the controls the gpu_state role applied,
  gpu_control.read_applied_controls), which probes again: that verdict counts.
* :func:`run_state_before` / :func:`run_state_after` bracket the measured run: ``nvidia-smi -q -d PERFORMANCE``
  event/throttle counters as deltas, memory at start (MemFree/MemAvailable/Cached, free 2 MiB blocks of
  /proc/buddyinfo), the controls sparkfleet applied (the gpu_state role's files: a ``-lgc`` lock cannot be read
  back) and the energy over the run's telemetry.csv.

Nothing here raises into a run: a failing piece is recorded (``error`` / ``errors``) and the run goes on, except
where the probe's verdict under the ``refuse`` policy says it must not.

Stdlib only, Python 3.8+, relative imports: shipped to the hosts with the other module_utils.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import subprocess
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import gpu_control
from ..sensors.gpu import (
    PERFORMANCE_ARGS,
    GpuSensor,
    GpuSensorError,
    Runner,
    find_nvidia_smi,
    open_sensor,
    parse_int,
    parse_number,
    performance_argv,
    query_gpu,
    smi_facts,
    subprocess_runner,
)
from . import attestation, readiness

#: The probe's load script, in the workloads directory (roles/matrix/files/gpu_probe.py).
PROBE_SCRIPT = "gpu_probe.py"
#: Printed by gpu_probe.py when its load loop begins (its LOAD_STARTED).
LOAD_STARTED = "sparkfleet-gpu-probe: load started"
#: ... and when it ends (LOAD_ENDED): readings from then on are the teardown's idle clocks, not the load's.
LOAD_ENDED = "sparkfleet-gpu-probe: load ended"
#: gpu_probe.py's exit code when neither torch with CUDA nor cupy is importable.
RC_NO_BACKEND = 3

#: The plan group ``readiness`` with its defaults (the planner's; repeated so a plan without it still probes).
DEFAULT_SETTINGS: Dict[str, Any] = {"policy": "mark", "min_fraction": readiness.DEFAULT_MIN_FRACTION,
                                    "expected_clock_mhz": None, "probe_s": 3.0,
                                    "degraded_bands": [list(b) for b in readiness.DEFAULT_DEGRADED_BANDS]}
#: readiness.PROBE_S_MAX: the settings' range ends there too (one home).
PROBE_S_MAX = readiness.PROBE_S_MAX
#: Seconds the probe may take beyond probe_s: importing torch and starting CUDA (tens of seconds on a cold host).
STARTUP_ALLOWANCE_S = 120.0
SAMPLE_INTERVAL_S = 0.25
#: The first part of the load window is ramp-up (clock boost, the first kernels): samples there are left out.
RAMP_FRACTION = 1.0 / 3

#: Read back before each run: what nvidia-smi *can* report of the controls (a lock it cannot).
READBACK_FIELDS = ("index", "name", "persistence_mode", "power.limit", "clocks.max.sm")

#: Energy scope labels: NVML's power on a GB10 is the GPU rail (about half the system's draw under load).
SCOPE_GB10 = "GPU rail only"
SCOPE_BOARD = "GPU board"


# --------------------------------------------------------------------------- settings


def probe_settings(settings: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The plan's ``readiness`` group over :data:`DEFAULT_SETTINGS`, checked; ValueError naming a bad key."""
    out = dict(DEFAULT_SETTINGS)
    if settings:
        unknown = sorted(set(settings) - set(DEFAULT_SETTINGS) - {"min_fraction_of_max"})
        if unknown:
            raise ValueError("readiness: unknown key(s) %s" % ", ".join(unknown))
        out.update({k: v for k, v in settings.items() if v is not None or k == "expected_clock_mhz"})
    if out["policy"] not in readiness.POLICIES:
        raise ValueError("readiness.policy: one of %s, got %r" % (", ".join(readiness.POLICIES), out["policy"]))
    probe_s = out["probe_s"]
    if isinstance(probe_s, bool) or not isinstance(probe_s, (int, float)) or not 0 < probe_s <= PROBE_S_MAX:
        raise ValueError("readiness.probe_s: seconds in (0, %g], got %r" % (PROBE_S_MAX, probe_s))
    return out


# --------------------------------------------------------------------------- the readiness probe


class _ProbeProcess:
    """``python3 gpu_probe.py load --seconds S``, its stdout read on a thread: when the load began and ended,
    its last line."""

    def __init__(self, argv: List[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # noqa: S603 (argv)
                                     stderr=subprocess.PIPE, text=True, errors="replace",
                                     env=dict(os.environ, LC_ALL="C"))
        self.started_at: Optional[float] = None
        self.ended_at: Optional[float] = None
        self.lines: List[str] = []
        self.stderr = ""
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == LOAD_STARTED and self.started_at is None:
                self.started_at = time.monotonic()
            elif line.strip() == LOAD_ENDED and self.ended_at is None:
                self.ended_at = time.monotonic()
            elif line.strip():
                self.lines.append(line.strip())

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()[-2000:]

    def running(self) -> bool:
        return self.proc.poll() is None

    def loaded(self) -> bool:
        """Between the load's start and its end (an older probe that never says it ended: until it exits)."""
        return self.started_at is not None and self.ended_at is None

    def finish(self, kill: bool = False) -> Optional[int]:
        if kill and self.proc.poll() is None:
            self.proc.kill()
        rc = self.proc.wait()
        self._out.join(timeout=5)
        self._err.join(timeout=5)
        return rc

    def result(self) -> Optional[Dict[str, Any]]:
        for line in reversed(self.lines):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
        return None


def _median(values: List[float]) -> Optional[float]:
    return round(statistics.median(values), 2) if values else None


def _section(cfg: Mapping[str, Any], started: float, verdict: Optional[Mapping[str, Any]] = None,
             decided: Optional[Mapping[str, Any]] = None, error: Optional[str] = None,
             **extra: Any) -> Dict[str, Any]:
    verdict = verdict or {}
    reasons = list(verdict.get("reasons") or [])
    if decided is None:  # nothing judged (an error): unknown, marked and warned as readiness.action does
        decided = readiness.action({"state": "unknown", "reasons": reasons}, cfg.get("policy", "mark"))
    out = {
        "state": verdict.get("state", "unknown"),
        "reasons": reasons,
        "action": dict(decided),
        "sm_clock_mhz": verdict.get("sm_clock_mhz"),
        "power_w": verdict.get("power_w"),
        "expected_clock_mhz": verdict.get("effective_expected_mhz"),
        "expected_source": verdict.get("expected_source"),
        "duration_s": round(time.monotonic() - started, 3),
        "policy": cfg.get("policy", "mark"),
        "error": error,
        "min_fraction": verdict.get("min_fraction"),
        "fraction": None if verdict.get("fraction") is None else round(verdict["fraction"], 4),
        "applied_lock_mhz": verdict.get("applied_lock_mhz"),
        "reapplied": None,  # reapply_lost_controls: what it put back, and the probe before it
        "before_reapply": None,
    }
    # issue 32: what the verdict was built on (readiness.judge's keys, null where not read)
    out.update({key: verdict.get(key) for key in VERDICT_KEYS})
    out.update(extra)
    return out


#: readiness.judge's keys the section carries besides the ones above (docs/RECORD.md, readiness).
VERDICT_KEYS = ("notes", "gpu_name", "gpu_class", "max_clock_mhz", "clock_floor_mhz", "utilization_pct",
                "active_reasons", "reason_share", "counter_deltas_us", "window_s", "fault_counter_us",
                "power_mean_w", "power_limit_w", "power_limit_source", "power_limited", "tflops", "tflops_reference",
                "tflops_floor")


def _unknown(cfg: Mapping[str, Any], started: float, cause: str, message: str, error: Optional[str] = None,
             **extra: Any) -> Dict[str, Any]:
    verdict = {"state": "unknown", "reasons": [{"cause": cause, "message": message}]}
    return _section(cfg, started, verdict, readiness.action(verdict, cfg.get("policy", "mark")), error, **extra)


def gpu_facts(sensor: Optional[GpuSensor], gpu: int = 0, nvidia_smi: str = "nvidia-smi",
              runner: Runner = subprocess_runner) -> Dict[str, Any]:
    """GPU ``gpu``'s name, maximum SM clock and enforced power limit (gpu.GpuSensor.facts), from ``sensor`` when it
    can tell, else from one nvidia-smi query; ``{}`` when neither answers."""
    try:
        facts = dict(sensor.facts(gpu)) if sensor is not None else {}
    except Exception:  # GpuSensorError, an NVML error: asked of nvidia-smi instead
        facts = {}
    if not facts:
        try:
            facts = smi_facts(gpu, find_nvidia_smi(nvidia_smi), runner)
        except GpuSensorError:
            facts = {}
    return facts


def probe_counters(sensor: Optional[GpuSensor], gpu: int = 0, nvidia_smi: str = "nvidia-smi",
                   runner: Runner = subprocess_runner
                   ) -> Tuple[Optional[Dict[str, int]], Optional[str], Optional[str]]:
    """(GPU ``gpu``'s cumulative clock-event counters in us, their source, None) or (None, None, why):
    ``nvidia-smi -q -d PERFORMANCE -i GPU`` (driver 580+: the driver's own labels), else NVML's field values when
    ``sensor`` reads them (their IDs moved between binding releases: gpu.CLOCK_EVENT_COUNTER_FIELDS)."""
    snapshot, why = performance_snapshot(nvidia_smi, runner, gpu=gpu)
    gpus = (snapshot or {}).get("gpus") or []
    counters = gpus[0].get("clock_event_counters_us") if gpus else None
    if counters:
        return dict(counters), "nvidia-smi " + " ".join(PERFORMANCE_ARGS), None
    if snapshot is not None:
        why = "nvidia-smi -q reports no clock event counters (a driver before the 580 series)"
    try:
        fallback = sensor.clock_event_counters_us(gpu) if sensor is not None else None
    except Exception:  # an NVML error: no counters
        fallback = None
    if fallback:
        return dict(fallback), "nvml field values", None
    return None, None, why


def _sample(sensor: GpuSensor, gpu: int) -> Dict[str, Any]:
    reading = sensor.read([gpu])[0]
    return {"sm_clock_mhz": reading.sm_clock_mhz, "power_w": reading.power_w,
            "utilization_pct": reading.utilization_pct, "reasons": reading.throttle_reasons, "name": reading.name}


def _figure(value: Any) -> Optional[float]:
    """A positive finite number of the probe's output or a sensor, else None (never judged on garbage)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


#: A counter's growth over the probe's window may exceed the window by this factor plus this many us (the two
#: reads take time of their own) before it is taken for another field.
COUNTER_SLACK = 1.1
COUNTER_SLACK_US = 500_000

#: gpu_probe.py's array library -> the element type of its products (its ``dtype``, for older outputs).
PROBE_DTYPES = {"torch": "bf16", "cupy": "fp16"}


def readiness_probe(settings: Optional[Mapping[str, Any]], applied_controls: Optional[Mapping[str, Any]],
                    gpu_present: bool, *, script: Optional[str] = None, python: str = "python3",
                    sensor: Optional[GpuSensor] = None, gpu: int = 0, max_clock_mhz: Optional[float] = None,
                    nvidia_smi: str = "nvidia-smi", sample_interval_s: float = SAMPLE_INTERVAL_S,
                    wrap=None) -> Dict[str, Any]:
    """The record's ``readiness`` section: run ``script`` (gpu_probe.py) ``load`` for ``probe_s`` seconds with
    ``python``, read the SM clock, power, utilisation and clock-event reasons of GPU ``gpu`` every
    ``sample_interval_s`` through ``sensor`` (gpu.py's, opened here when None) from the moment the load loop
    started (the ramp-up third left out), the cumulative clock-event counters when that window opens and when the
    load ends (:func:`probe_counters`), and judge them (readiness.judge) with the GPU's name, maximum SM clock and
    enforced power limit (:func:`gpu_facts`; ``max_clock_mhz`` overrides the maximum), the TFLOP/s the load
    delivered, the degraded bands and the lock and power limit recorded in ``applied_controls``
    (gpu_control.read_applied_controls). The informational clock ratio is against ``expected_clock_mhz`` of the
    settings (``expected_source`` "campaign", ``min_fraction``), else the maximum SM clock (source "max_clock",
    ``min_fraction_of_max``, default readiness.DEFAULT_MIN_FRACTION_OF_MAX).
    ``action`` is readiness.action under the policy: ``{"action": "run" | "mark" | "refuse", "warn", ...}``.

    No GPU (``gpu_present`` False): state ``unknown`` (cause ``no_gpu``) and action ``run``: nothing to probe,
    nothing to mark. No torch/cupy for the load (gpu_probe.py exits 3): ``unknown`` (cause ``no_load``) with
    the script's reason, marked and warned as readiness.action decides. Never raises: a bad setting, a
    missing script, a sensor or probe failure is ``unknown`` with ``error``.

    ``wrap``: argv -> argv that runs the load where the run's workload runs (the Launcher's command for its
    environment: the image's torch, not the host's); None runs it straight on the host."""
    started = time.monotonic()
    try:
        cfg = probe_settings(settings)
    except ValueError as exc:
        return _unknown({"policy": "mark"}, started, "bad_settings", str(exc), error=str(exc))
    if not gpu_present:
        verdict = {"state": "unknown", "reasons": [{"cause": "no_gpu", "message": "no GPU on this host: "
                                                    "nothing to probe"}]}
        return _section(cfg, started, verdict, {"action": "run", "warn": False, "state": "unknown",
                                                "reasons": verdict["reasons"]})
    if not script or not os.path.isfile(script):
        message = "probe script %s not found" % (script or PROBE_SCRIPT)
        return _unknown(cfg, started, "no_load", message, error=message)
    own_sensor = sensor is None
    try:
        if sensor is None:
            sensor = open_sensor("auto", nvidia_smi=nvidia_smi)
    except GpuSensorError as exc:
        return _unknown(cfg, started, "missing_reading", "no GPU sensor: %s" % exc, error=str(exc))
    clocks: List[float] = []
    powers: List[float] = []
    samples: List[Dict[str, Any]] = []
    errors: List[str] = []
    probe_s = float(cfg["probe_s"])
    window: Dict[str, Any] = {"start": None, "end": None, "t_start": None, "t_end": None, "source": None}

    def snapshot(edge: str) -> None:
        t0 = time.monotonic()
        counters, source, why = probe_counters(sensor, gpu, nvidia_smi)
        window[edge], window["t_" + edge] = counters, (t0 + time.monotonic()) / 2  # the read's midpoint
        window["source"] = window["source"] or source
        if why and "counters: %s" % why not in errors:
            errors.append("counters: %s" % why)

    try:
        facts = gpu_facts(sensor, gpu, nvidia_smi)
        try:
            argv = [python, script, "load", "--seconds", "%g" % probe_s]
            proc = _ProbeProcess(wrap(argv) if wrap else argv)
        except OSError as exc:
            return _unknown(cfg, started, "no_load", "cannot start %s: %s" % (python, exc), error=str(exc))
        deadline = started + probe_s + STARTUP_ALLOWANCE_S
        killed = False
        while proc.running():
            now = time.monotonic()
            if now > deadline:
                killed = True
                break
            if proc.loaded() and now >= proc.started_at + RAMP_FRACTION * probe_s:
                try:
                    reading = _sample(sensor, gpu)
                except Exception as exc:  # GpuSensorError, NVMLError: recorded, the probe goes on
                    if str(exc) not in errors:
                        errors.append(str(exc))
                else:
                    if not proc.loaded():  # the load ended while it was read: an idle reading, left out
                        continue
                    samples.append(reading)
                    if reading["sm_clock_mhz"] is not None:
                        clocks.append(reading["sm_clock_mhz"])
                    if reading["power_w"] is not None:
                        powers.append(reading["power_w"])
                if window["t_start"] is None and proc.loaded():  # the window opens: the counters' first reading
                    snapshot("start")
            elif window["start"] is not None and window["t_end"] is None and proc.ended_at is not None:
                snapshot("end")  # the load said it ended: the window closes
            time.sleep(sample_interval_s)
        rc = proc.finish(kill=killed)
        if window["start"] is not None and window["t_end"] is None and not killed:
            snapshot("end")  # a load that never said it ended: at its exit
    finally:
        if own_sensor and sensor is not None:
            sensor.close()
    load = proc.result()
    deltas = None
    span = None
    if window["start"] is not None and window["end"] is not None:
        grown = attestation.counter_deltas(window["start"], window["end"])
        deltas = grown["deltas"] or None
        span = round(window["t_end"] - window["t_start"], 3)
        # a time counter cannot grow faster than the clock on the wall (the two reads' own length allowed for): more
        # is another field read under a counter's name (a binding of another release than the driver)
        fast = sorted(n for n, v in (deltas or {}).items() if v > COUNTER_SLACK * span * 1e6 + COUNTER_SLACK_US)
        if grown["reset"] or fast:
            errors.append("counters: %s during the probe: not judged" % (
                "reset (%s)" % ", ".join(grown["reset"]) if grown["reset"] else
                "%s grew faster than the %.2f s window" % (", ".join(fast), span)))
            deltas = None
    if deltas is None:
        span = None
    extra = {"samples": len(clocks), "load": load, "sensor": getattr(sensor, "kind", None),
             "sensor_note": getattr(sensor, "note", None),  # why not NVML, when auto read nvidia-smi
             "sensor_errors": errors, "counter_source": window["source"] if deltas is not None else None}
    if killed:
        message = "probe did not finish within %g s" % (probe_s + STARTUP_ALLOWANCE_S)
        return _unknown(cfg, started, "no_load", message, error=message, **extra)
    if rc == RC_NO_BACKEND:
        why = (load or {}).get("error") or "no GPU array library"
        return _unknown(cfg, started, "no_load", "no GPU load could run: %s" % why, **extra)
    if rc != 0 or proc.started_at is None:
        message = "probe load failed (rc=%s): %s" % (rc, (proc.stderr.strip().splitlines() or ["no output"])[-1])
        return _unknown(cfg, started, "no_load", message, error=message, **extra)

    max_clock = _figure(max_clock_mhz if max_clock_mhz is not None else facts.get("max_sm_clock_mhz"))
    expected, source, fraction = cfg["expected_clock_mhz"], "campaign", cfg["min_fraction"]
    if expected is None:
        expected = max_clock
        source = "max_clock"
        fraction = cfg.get("min_fraction_of_max") or readiness.DEFAULT_MIN_FRACTION_OF_MAX
    load = load if isinstance(load, dict) else {}
    names = [s["name"] for s in samples if s.get("name")]
    size = load.get("size") if isinstance(load.get("size"), int) and not isinstance(load.get("size"), bool) else None
    try:
        verdict = readiness.judge(_median(clocks), _median(powers), expected_sm_clock_mhz=expected,
                                  expected_source=source, min_fraction=fraction,
                                  degraded_bands=cfg["degraded_bands"],
                                  applied_lock_mhz=gpu_control.applied_lock(applied_controls, gpu),
                                  gpu_name=names[0] if names else facts.get("name"), max_clock_mhz=max_clock,
                                  samples=[{k: v for k, v in s.items() if k != "name"} for s in samples],
                                  counter_deltas_us=deltas, window_s=span if span and span > 0 else None,
                                  power_limit_w=_figure(facts.get("power_limit_w")),
                                  applied_power_limit_w=gpu_control.applied_power_limit(applied_controls, gpu),
                                  tflops=_figure(load.get("tflops")),
                                  tflops_dtype=load.get("dtype") or PROBE_DTYPES.get(str(load.get("backend"))),
                                  tflops_size=size)
        decided = readiness.action(verdict, cfg["policy"])
    except ValueError as exc:
        return _unknown(cfg, started, "bad_settings", str(exc), error=str(exc), **extra)
    return _section(cfg, started, verdict, decided, **extra)


# --------------------------------------------------------------------------- over the run


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def performance_snapshot(nvidia_smi: str = "nvidia-smi", runner: Runner = subprocess_runner,
                         gpu: Optional[int] = None) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(``nvidia-smi -q -d PERFORMANCE [-i GPU]`` parsed by attestation.parse_nvidia_smi_q, None) or (None, why)."""
    try:
        argv = performance_argv(find_nvidia_smi(nvidia_smi), gpu)
    except GpuSensorError as exc:
        return None, str(exc)
    rc, out, err = runner(argv)
    if rc != 0:
        return None, "%s failed (rc=%d): %s" % (" ".join(argv), rc, (err or out).strip()[-300:])
    try:
        return attestation.parse_nvidia_smi_q(out), None
    except attestation.AttestationError as exc:
        return None, str(exc)


def readback(nvidia_smi: str = "nvidia-smi", runner: Runner = subprocess_runner
             ) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    """What nvidia-smi reports of the controls it can read back, per GPU: name, persistence, power limit, max
    SM clock; ([], why) when it cannot answer."""
    try:
        rows = query_gpu(READBACK_FIELDS, find_nvidia_smi(nvidia_smi), runner)
    except GpuSensorError as exc:
        return [], str(exc)
    return [{"index": parse_int(r["index"]), "name": r["name"], "persistence_mode": r["persistence_mode"],
             "power_limit_w": parse_number(r["power.limit"]), "max_sm_clock_mhz": parse_number(r["clocks.max.sm"])}
            for r in rows], None


def run_state_before(*, controls: Optional[Mapping[str, Any]] = None, results_root: Optional[str] = None,
                     nvidia_smi: str = "nvidia-smi", proc_root: str = "/proc",
                     runner: Runner = subprocess_runner) -> Dict[str, Any]:
    """The state just before the measured run, to pass to :func:`run_state_after`: the event counters, memory
    at start, the controls applied (``controls`` as gpu_control.read_applied_controls returned them, else read for
    ``results_root``), nvidia-smi's read-back of them, the GPU names (for the energy's scope)."""
    errors: List[str] = []
    snapshot, why = performance_snapshot(nvidia_smi, runner)
    if why:
        errors.append("counters: %s" % why)
    if controls is None:
        controls = (gpu_control.applied_controls(results_root) if results_root
                    else gpu_control.read_applied_controls(None))
    controls = dict(controls)
    if controls.get("error"):
        errors.append("controls: %s" % controls["error"])
    gpus, why = readback(nvidia_smi, runner)
    if why:
        errors.append("readback: %s" % why)
    controls["readback"] = gpus
    meminfo = _read_text(os.path.join(proc_root, "meminfo"))
    buddyinfo = _read_text(os.path.join(proc_root, "buddyinfo"))
    try:
        memory = attestation.memory_state(meminfo, buddyinfo, os.sysconf("SC_PAGE_SIZE"))
    except attestation.AttestationError as exc:
        errors.append("memory: %s" % exc)
        memory = attestation.memory_state(meminfo, None)
    for name, text in (("meminfo", meminfo), ("buddyinfo", buddyinfo)):
        if text is None:
            errors.append("memory: %s not readable" % os.path.join(proc_root, name))
    return {"t_wall": time.time(), "counters": _counters(snapshot), "controls": controls, "memory": memory,
            "gpu_names": [g.get("name") for g in gpus] or [g.get("product_name") for g in
                                                               (snapshot or {}).get("gpus") or []],
            "errors": errors}


def _counters(snapshot: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Dict[str, int]]]:
    if snapshot is None:
        return None
    return {g["bus_id"]: dict(g["clock_event_counters_us"]) for g in snapshot["gpus"]}


def counter_section(before: Optional[Mapping[str, Mapping[str, int]]],
                    after: Optional[Mapping[str, Mapping[str, int]]]) -> Optional[Dict[str, Any]]:
    """Per GPU (bus id) attestation.counter_deltas of the two snapshots, in microseconds; None when either is
    missing. ``reported`` is False for a driver that prints no counters (before the 580 series)."""
    if before is None or after is None:
        return None
    gpus = {bus: attestation.counter_deltas(before.get(bus) or {}, after.get(bus) or {})
            for bus in sorted(set(before) | set(after))}
    return {"unit": "us", "source": "nvidia-smi " + " ".join(PERFORMANCE_ARGS), "gpus": gpus,
            "reported": any(before.values()) or any(after.values())}


def energy_scope(gpu_names: Sequence[Optional[str]]) -> Optional[str]:
    """What the telemetry's power covers: NVML on a GB10 reports the GPU rail only (about half the system's
    draw under load); elsewhere the GPU board. None without a GPU."""
    names = [n for n in gpu_names if n]
    if not names:
        return None
    return SCOPE_GB10 if any("GB10" in n for n in names) else SCOPE_BOARD


def _float(cell: Optional[str]) -> Optional[float]:
    try:
        return float(cell) if cell not in (None, "") else None
    except ValueError:
        return None


def energy(telemetry_csv: str, output_tokens: Optional[float] = None, scope: Optional[str] = None,
           window_s: Optional[Tuple[float, float]] = None) -> Dict[str, Any]:
    """Energy over the run's own window from telemetry.csv's ``gpu_power_w`` (telemetry.CSV_COLUMNS): per GPU, the
    trapezoidal integral over consecutive samples (``t_s`` seconds), summed over GPUs, in J; a pair of samples
    with a power missing in either is not integrated (its time is in ``gap_s``). ``window_s`` (t_s from, to)
    limits the samples; all of them otherwise. ``j_per_output_token`` when ``output_tokens`` > 0.

    Returns ``{"energy_j", "j_per_output_token", "output_tokens", "scope", "window_s", "covered_s", "gap_s",
    "samples", "gpus": {gpu: {"energy_j", "covered_s", "samples"}}, "method", "error"}``."""
    out: Dict[str, Any] = {"energy_j": None, "j_per_output_token": None, "output_tokens": output_tokens,
                           "scope": scope, "window_s": None, "covered_s": None, "gap_s": None, "samples": 0,
                           "gpus": {}, "method": "trapezoidal integral of telemetry.csv gpu_power_w over t_s",
                           "error": None}
    series: Dict[str, List[Tuple[float, Optional[float]]]] = {}
    try:
        with open(telemetry_csv, encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                t = _float(row.get("t_s"))
                if t is None or not row.get("gpu"):
                    continue  # a host-memory-only row
                if window_s is not None and not window_s[0] <= t <= window_s[1]:
                    continue
                series.setdefault(row["gpu"], []).append((t, _float(row.get("gpu_power_w"))))
    except (OSError, csv.Error) as exc:
        out["error"] = "%s: %s" % (telemetry_csv, exc)
        return out
    if not series:
        out["error"] = "%s: no GPU power samples" % telemetry_csv
        return out
    total, covered_all, gap_all, first, last = 0.0, 0.0, 0.0, None, None
    for gpu in sorted(series, key=lambda g: (len(g), g)):
        points = sorted(series[gpu])
        joules = covered = gap = 0.0
        for (t0, p0), (t1, p1) in zip(points, points[1:]):
            dt = t1 - t0
            if p0 is None or p1 is None:
                gap += dt
                continue
            joules += (p0 + p1) / 2.0 * dt
            covered += dt
        out["gpus"][gpu] = {"energy_j": round(joules, 3), "covered_s": round(covered, 3),
                            "samples": sum(1 for _, p in points if p is not None)}
        total += joules
        covered_all = max(covered_all, covered)
        gap_all = max(gap_all, gap)
        first = points[0][0] if first is None else min(first, points[0][0])
        last = points[-1][0] if last is None else max(last, points[-1][0])
        out["samples"] += out["gpus"][gpu]["samples"]
    if not any(g["covered_s"] > 0 for g in out["gpus"].values()):
        out["error"] = "%s: fewer than two power samples in a row" % telemetry_csv
        return out
    out.update(energy_j=round(total, 3), window_s=[first, last], covered_s=round(covered_all, 3),
               gap_s=round(gap_all, 3))
    if output_tokens:
        out["j_per_output_token"] = round(total / float(output_tokens), 6)
    return out


# --- energy over the load's steady window (issue 32) -----------------------------------------------------------
#
# The whole run's energy is mostly start-up: loading the model, torch.compile and its kernel tuning, CUDA graph
# capture, a server's start. The committed GPU example's A/A twins gave 71.8 and 43.9 J per output token for the
# same work, because the first run of one side tuned its kernels for 70 s at idle power. The load itself is the
# stretch of telemetry where the GPU is busy: :func:`load_window` finds it, :func:`energy_split` integrates the
# power over it (steady), before it (start-up) and after it, and divides the steady mean power by the run's own
# output rate (tokens/s as the engine measured it): W / (tok/s) = J per output token, whatever the number of
# tokens generated in the window (hf-generate repeats each generation to time it; a serving client sends warm-up
# requests): only the rate of the measured work is needed.

#: The load's window: from the first to the last telemetry sample at which a GPU's utilisation is at least this
#: fraction of the highest any GPU reached in the run. On the committed GPU example (H200, hf-generate) the load
#: ran at 60-81% and torch.compile's kernel tuning at most 31%.
LOAD_UTIL_FRACTION = 0.5
STEADY_METHOD = ("mean GPU power over the load's window (telemetry samples from the first to the last with a GPU's "
                 "utilisation at least %g x the run's highest), divided by the run's output rate" % LOAD_UTIL_FRACTION)
STARTUP_LABEL = ("start-up: everything before the load's window (model load, compilation and kernel tuning, "
                 "CUDA graph capture; a serving run's server start), not part of J per output token")


def _telemetry_series(telemetry_csv: str) -> Dict[str, List[Tuple[float, Optional[float], Optional[float]]]]:
    """telemetry.csv's GPU rows as {gpu: [(t_s, power W, utilisation %), ...]} in time order (OSError, csv.Error
    propagate)."""
    series: Dict[str, List[Tuple[float, Optional[float], Optional[float]]]] = {}
    with open(telemetry_csv, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            t = _float(row.get("t_s"))
            if t is not None and row.get("gpu"):
                series.setdefault(row["gpu"], []).append(
                    (t, _float(row.get("gpu_power_w")), _float(row.get("gpu_util_pct"))))
    return {gpu: sorted(points, key=lambda p: p[0]) for gpu, points in series.items()}


def load_window(series: Mapping[str, Sequence[Tuple[float, Optional[float], Optional[float]]]],
                not_before_s: Optional[float] = None) -> Tuple[Optional[Tuple[float, float]], Optional[str]]:
    """((from, to) t_s, None) of the load's window (see LOAD_UTIL_FRACTION), or (None, why). ``not_before_s``: no
    sample before it belongs to the load (a serving run: the server's ready_s)."""
    samples = [(t, u) for points in series.values() for t, _, u in points
               if u is not None and (not_before_s is None or t >= not_before_s)]
    peak = max((u for _, u in samples), default=None)
    if peak is None:
        return None, "no GPU utilisation in telemetry.csv" + (" after %.1f s" % not_before_s if not_before_s else "")
    if peak <= 0:
        return None, "the GPU was never busy in telemetry.csv (utilisation 0%)"
    busy = sorted(t for t, u in samples if u >= LOAD_UTIL_FRACTION * peak)
    return (busy[0], busy[-1]), None


def _integral(series: Mapping[str, Sequence[Tuple[float, Optional[float], Optional[float]]]], lo: float,
              hi: float) -> Tuple[float, float, int]:
    """(joules summed over GPUs, seconds covered by the longest-covered GPU, power samples) of the trapezoidal
    integral over the samples with lo <= t_s <= hi (a pair with a power missing is not integrated)."""
    total = covered_all = 0.0
    count = 0
    for points in series.values():
        inside = [(t, p) for t, p, _ in points if lo <= t <= hi]
        joules = covered = 0.0
        for (t0, p0), (t1, p1) in zip(inside, inside[1:]):
            if p0 is not None and p1 is not None:
                joules += (p0 + p1) / 2.0 * (t1 - t0)
                covered += t1 - t0
        total += joules
        covered_all = max(covered_all, covered)
        count += sum(1 for _, p in inside if p is not None)
    return total, covered_all, count


def energy_split(telemetry_csv: str, output_tok_s: Optional[float] = None,
                 not_before_s: Optional[float] = None) -> Dict[str, Any]:
    """The energy section's ``steady``, ``startup`` and ``after_load`` parts of telemetry.csv (energy()'s other
    keys are left as they are).

    ``steady``: ``{window_s, seconds, energy_j, power_w, output_tok_s, j_per_output_token, samples, method, error}``:
    the load's window (:func:`load_window`), the energy over it, its mean power (energy / seconds covered) and, with
    the run's output rate ``output_tok_s``, ``j_per_output_token`` = power_w / output_tok_s. ``startup``:
    ``{window_s, seconds, energy_j, label}`` before the window; ``after_load``: ``{window_s, seconds, energy_j}``
    after it. Each carries ``error`` (None when computed)."""
    out: Dict[str, Any] = {
        "steady": {"window_s": None, "seconds": None, "energy_j": None, "power_w": None,
                   "output_tok_s": output_tok_s, "j_per_output_token": None, "samples": 0, "method": STEADY_METHOD,
                   "error": None},
        "startup": {"window_s": None, "seconds": None, "energy_j": None, "label": STARTUP_LABEL, "error": None},
        "after_load": {"window_s": None, "seconds": None, "energy_j": None, "error": None}}

    def fail(why: str) -> Dict[str, Any]:
        for part in out.values():
            part["error"] = why
        return out

    try:
        series = _telemetry_series(telemetry_csv)
    except (OSError, csv.Error) as exc:
        return fail("%s: %s" % (telemetry_csv, exc))
    if not series:
        return fail("%s: no GPU samples" % telemetry_csv)
    window, why = load_window(series, not_before_s)
    if window is None:
        return fail(why or "no load window")
    first = min(points[0][0] for points in series.values())
    last = max(points[-1][0] for points in series.values())
    joules, seconds, count = _integral(series, window[0], window[1])
    steady = out["steady"]
    steady.update(window_s=[window[0], window[1]], samples=count)
    if seconds <= 0:
        steady["error"] = ("the load's window %.1f-%.1f s holds fewer than two power samples in a row: too short for "
                           "the telemetry's interval" % window)
    else:
        power = joules / seconds
        steady.update(seconds=round(seconds, 3), energy_j=round(joules, 3), power_w=round(power, 3))
        rate = output_tok_s if isinstance(output_tok_s, (int, float)) and not isinstance(output_tok_s, bool) \
            and math.isfinite(output_tok_s) and output_tok_s > 0 else None
        if rate is None:
            steady["error"] = "no output rate of the run to divide the load's power by"
        else:
            steady["j_per_output_token"] = round(power / float(rate), 6)
    for name, lo, hi in (("startup", first, window[0]), ("after_load", window[1], last)):
        part_j, part_s, _ = _integral(series, lo, hi)
        out[name].update(window_s=[lo, hi], seconds=round(part_s, 3), energy_j=round(part_j, 3))
    return out


def output_rate(metrics: Optional[Mapping[str, Any]], serving_section: Optional[Mapping[str, Any]],
                output_tokens: Optional[float] = None) -> Optional[float]:
    """The run's output rate the steady J per output token divides by: the engine's own ``output_tok_s``; for a
    serving run the output tokens (:func:`matrix_run.output_tokens`: concurrency x tg x the client's runs of the ok
    points) over the ok points' client seconds (their ``duration_s``). None when unknown."""
    if isinstance(serving_section, Mapping) and isinstance(serving_section.get("points"), list):
        seconds = 0.0
        for point in serving_section["points"]:
            if isinstance(point, Mapping) and point.get("status") == "ok":
                value = point.get("duration_s")
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    seconds += float(value)
        return float(output_tokens) / seconds if output_tokens and seconds > 0 else None
    value = (metrics or {}).get("output_tok_s") if isinstance(metrics, Mapping) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def run_state_after(token: Mapping[str, Any], telemetry_csv_path: Optional[str],
                    output_tokens: Optional[float] = None, *, nvidia_smi: str = "nvidia-smi",
                    runner: Runner = subprocess_runner, output_tok_s: Optional[float] = None,
                    not_before_s: Optional[float] = None) -> Dict[str, Any]:
    """The record's ``attestation`` section: ``counters`` (the event counters' growth over the run, per GPU, in
    us: :func:`counter_section`), ``controls_applied`` (the token's), ``memory_start`` (MemFree/MemAvailable/
    Cached KiB and the free 2 MiB blocks, attestation.memory_state), ``energy`` (:func:`energy` over
    ``telemetry_csv_path``, labelled with its scope, with :func:`energy_split`'s steady window and start-up
    for the run's output rate ``output_tok_s``; ``not_before_s``: a serving server's ready_s), ``errors``."""
    errors = list(token.get("errors") or [])
    snapshot, why = performance_snapshot(nvidia_smi, runner)
    if why:
        errors.append("counters after: %s" % why)
    counters = counter_section(token.get("counters"), _counters(snapshot))
    scope = energy_scope(token.get("gpu_names") or [])
    if telemetry_csv_path:
        spent = energy(telemetry_csv_path, output_tokens, scope)
        if spent["error"] is None:
            spent.update(energy_split(telemetry_csv_path, output_tok_s, not_before_s))
        if spent["error"] and scope is not None:  # without a GPU there is no power to integrate: not an error
            errors.append("energy: %s" % spent["error"])
    else:
        spent = None
    return {"counters": counters, "controls_applied": token.get("controls"), "memory_start": token.get("memory"),
            "energy": spent, "errors": errors}
