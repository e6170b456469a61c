# Copyright: sparkfleet contributors
# Apache-2.0
"""In-process telemetry while a benchmark workload runs: ``telemetry.csv`` plus a summary.

:class:`TelemetrySampler` samples on a background thread at a fixed rate, scheduled on deadlines
(``t0 + k * interval``) so that it does not drift, and writes one CSV row per GPU per sample::

    t_s,gpu,gpu_temp_c,gpu_power_w,sm_clock_mhz,gpu_util_pct,throttle_reasons,mem_used_gib,cgroup_mem_gib

Cost is the point. The study spawned ``nvidia-smi`` and ``docker stats`` every second; here

* GPU figures come from NVML in-process when ``pynvml`` imports and initialises (on a GPU host, the pinned
  nvidia-ml-py that host set-up installs, roles/nvml: gpu.use_bindings); otherwise from ONE persistent
  ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms <interval>`` child whose lines a reader thread
  consumes (the sampler takes the latest line of each GPU), never a process per sample. The summary says which
  (``sensor``), what NVML was read through (``nvml_bindings``) and, when ``auto`` did not read NVML, why
  (``sensor_note``);
* ``mem_used_gib`` is the host's MemTotal - MemAvailable from ``/proc/meminfo`` (on unified memory, GB10, the only
  memory figure there is), ``cgroup_mem_gib`` the container's cgroup file (v2 ``memory.current`` or v1
  ``memory.usage_in_bytes``), both read with ``pread`` on a file descriptor kept open.

An empty cell means "not available" (never 0). ``throttle_reasons`` is the ``|``-joined list of active clock
event reasons (:data:`sparkfleet_gpu.THROTTLE_REASONS`), ``none`` when no reason is active. A host without a GPU
still gets host-memory rows with ``gpu`` empty.

Robust by construction: a sensor failure during the run is recorded in the summary's ``errors`` and never
raised into the workload; :meth:`TelemetrySampler.stop` always joins the threads and kills the child, and may
be called twice.

Stdlib only (pynvml optional), like :mod:`sparkfleet_gpu`.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import IO, Any, Callable, Dict, List, Optional, Tuple, Union

from . import procstat
from .gpu import (
    QUERY_FIELDS,
    GpuReading,
    GpuSensor,
    GpuSensorError,
    bindings,
    decode_throttle_reasons,
    find_nvidia_smi,
    open_sensor,
    parse_readings,
    query_argv,
)
from .meminfo import used_kib

CSV_COLUMNS = (
    "t_s",
    "gpu",
    "gpu_temp_c",
    "gpu_power_w",
    "sm_clock_mhz",
    "gpu_util_pct",
    "throttle_reasons",
    "mem_used_gib",
    "cgroup_mem_gib",
)
SAMPLER_SENSORS = ("auto", "nvml", "nvidia-smi", "none")
GIB = float(2**30)
MAX_ERRORS = 20  # distinct error messages kept (each with its count)
MAX_RESTARTS = 3  # of the nvidia-smi child, when it dies during a run


# --------------------------------------------------------------------------- /proc and cgroup files


class _PreadFile:
    """A small procfs/cgroupfs file read with ``pread(fd, n, 0)``: no open/close per sample."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: Optional[int] = os.open(path, os.O_RDONLY)

    def read(self, size: int = 8192) -> str:
        if self.fd is None:
            raise OSError(f"{self.path} is closed")
        return os.pread(self.fd, size, 0).decode("ascii", "replace")

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            with contextlib.suppress(OSError):
                os.close(fd)


def parse_meminfo_used_gib(text: str) -> Optional[float]:
    """MemTotal - MemAvailable of a /proc/meminfo text, in GiB; None when either is missing."""
    used = used_kib(text)
    return None if used is None else used * 1024 / GIB


def cgroup_memory_file(path: str) -> str:
    """The memory usage file for ``path``: the file itself, or the one inside a cgroup directory."""
    if os.path.isdir(path):
        for name in ("memory.current", "memory.usage_in_bytes"):  # cgroup v2, v1
            candidate = os.path.join(path, name)
            if os.path.exists(candidate):
                return candidate
        raise OSError(f"{path}: no memory.current or memory.usage_in_bytes in this cgroup directory")
    return path


def proc_cpu_seconds(pid: int) -> Optional[float]:
    """utime + stime of process ``pid`` from /proc/<pid>/stat (None once it is gone)."""
    return procstat.cpu_seconds(procstat.read(pid))


# --------------------------------------------------------------------------- the persistent nvidia-smi child


class SmiLoop:
    """One ``nvidia-smi ... -lms N`` child and a reader thread keeping the latest reading of each GPU."""

    kind = "nvidia-smi"

    def __init__(
        self,
        executable: str,
        interval_s: float,
        gpus: Optional[Sequence[int]],
        record_error: Callable[[str], None],
    ) -> None:
        self.argv = query_argv(executable, QUERY_FIELDS, loop_ms=max(1, int(round(interval_s * 1000))), gpus=gpus)
        self.interval_s = interval_s
        self.record_error = record_error
        self.latest: Dict[int, Tuple[float, GpuReading]] = {}
        self.lock = threading.Lock()
        self.got_reading = threading.Event()
        self.stopping = threading.Event()
        self.proc: Optional[subprocess.Popen] = None
        self.spawned = 0  # processes started: 1 unless the child died and was restarted
        self.child_cpu_s = 0.0
        self.reader_cpu_s = 0.0
        self.thread = threading.Thread(target=self._run, name="sparkfleet-telemetry-smi", daemon=True)

    def start(self) -> None:
        self._spawn()
        self.thread.start()

    def _spawn(self) -> None:
        env = dict(os.environ, LC_ALL="C")
        self.proc = subprocess.Popen(  # noqa: S603 (argv, no shell)
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one pipe: nothing can fill up unread
            env=env,
            text=True,
            errors="replace",  # a byte in another encoding is read, never fatal to the reader
            bufsize=1,
        )
        self.spawned += 1

    def _run(self) -> None:
        try:
            while True:
                proc = self.proc
                assert proc is not None and proc.stdout is not None
                self._consume(proc.stdout)
                rc = proc.wait()
                if self.stopping.is_set():
                    return
                self.record_error(f"nvidia-smi loop exited with rc={rc}")
                if self.spawned > MAX_RESTARTS or self.stopping.wait(min(self.interval_s, 1.0)):
                    return
                try:
                    self._spawn()
                except OSError as exc:
                    self.record_error(f"cannot restart nvidia-smi: {exc}")
                    return
        finally:
            self.reader_cpu_s = time.thread_time()

    def _consume(self, stream: IO[str]) -> None:
        for line in stream:
            if not line.strip():
                continue
            try:
                readings = parse_readings(line)
            except GpuSensorError as exc:
                self.record_error(f"nvidia-smi: {exc}")
                continue
            now = time.monotonic()
            with self.lock:
                for r in readings:
                    self.latest[r.index] = (now, r)
            if readings:
                self.got_reading.set()

    def snapshot(self, max_age_s: float) -> Tuple[List[int], List[GpuReading]]:
        """(every GPU seen so far, the readings younger than ``max_age_s``)."""
        now = time.monotonic()
        with self.lock:
            items = sorted(self.latest.items())
        return [i for i, _ in items], [r for _, (t, r) in items if now - t <= max_age_s]

    def stop(self) -> None:
        """Kill the child (SIGTERM, then SIGKILL after 2 s) and join the reader; safe to call twice."""
        self.stopping.set()
        self._kill(self.proc)
        self.thread.join(timeout=5)
        self._kill(self.proc)  # a restart may have raced with stopping
        if self.proc is not None and self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()

    def _kill(self, proc: Optional[subprocess.Popen]) -> None:
        if proc is None or proc.poll() is not None:
            return
        self.child_cpu_s += proc_cpu_seconds(proc.pid) or 0.0  # read before it is reaped
        proc.terminate()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- the sampler


class _Series:
    """Running mean and max of one column."""

    __slots__ = ("n", "total", "max")

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0
        self.max: Optional[float] = None

    def add(self, value: Optional[float]) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        self.n += 1
        self.total += value
        self.max = value if self.max is None or value > self.max else self.max

    def mean(self, digits: int = 2) -> Optional[float]:
        return None if not self.n else round(self.total / self.n, digits)

    def maximum(self, digits: int = 2) -> Optional[float]:
        return None if self.max is None else round(self.max, digits)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        text = f"{value:.3f}".rstrip("0").rstrip(".")
        return text if text not in ("", "-0") else "0"
    return str(value)


def _percentile(sorted_values: Sequence[float], q: float) -> Optional[float]:
    if not sorted_values:
        return None
    rank = max(0, min(len(sorted_values) - 1, int(math.ceil(q / 100.0 * len(sorted_values))) - 1))
    return sorted_values[rank]


class TelemetrySampler:
    """Sample GPU and memory telemetry at ``interval_s`` into ``csv_path`` until :meth:`stop`.

    ``sensor``: ``auto`` (NVML if it works, else the nvidia-smi loop, else host memory only), ``nvml``,
    ``nvidia-smi``, ``none`` (host memory only), or an open :class:`GpuSensor` (read in-process each sample; not
    closed here). A sensor that cannot be opened is recorded in ``errors`` and the sampler goes on with host
    memory only: telemetry never stops a run. ``gpus`` selects GPU indices (all when None).
    """

    def __init__(
        self,
        csv_path: str,
        interval_s: float = 1.0,
        gpus: Optional[Sequence[int]] = None,
        sensor: Union[str, GpuSensor] = "auto",
        nvidia_smi: str = "nvidia-smi",
        cgroup_memory_file: Optional[str] = None,
        meminfo: str = "/proc/meminfo",
        startup_timeout_s: float = 5.0,
        memory_tracker: Optional[Any] = None,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be greater than 0, got {interval_s}")
        if isinstance(sensor, str) and sensor not in SAMPLER_SENSORS:
            raise ValueError(f"sensor must be one of {', '.join(SAMPLER_SENSORS)}, got {sensor!r}")
        self.csv_path = str(csv_path)
        self.interval_s = float(interval_s)
        self.gpus = None if gpus is None else list(dict.fromkeys(gpus))
        self.requested_sensor = sensor
        self.nvidia_smi = nvidia_smi
        self.meminfo_path = meminfo
        self.startup_timeout_s = startup_timeout_s
        self.sensor_kind = "none"
        self.sensor_note: Optional[str] = None  # why not NVML, when auto read another way (or nothing)
        self.nvml_bindings: Optional[str] = None  # what NVML was read through (gpu.bindings)
        self._gpu_sensor: Optional[GpuSensor] = None
        self._own_sensor = False
        self._smi: Optional[SmiLoop] = None
        self._cgroup_path: Optional[str] = None
        self._cgroup_file: Optional[_PreadFile] = None
        self._cgroup_opened_for: Optional[str] = None
        self._meminfo: Optional[_PreadFile] = None
        # memstate.PeakTracker (or alike): fed each sample's meminfo text and GPU readings
        self._memory = memory_tracker
        self._meminfo_text: Optional[str] = None
        self._csv: Optional[IO[str]] = None
        self._errors: Dict[str, int] = {}
        self._errors_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = False
        self._summary: Optional[Dict[str, Any]] = None
        self._t0 = 0.0
        self._t_stop = 0.0
        self._samples = 0
        self._rows = 0
        self._missed = 0
        self._jitter: List[float] = []
        self._sampler_cpu_s = 0.0
        self._series = {name: _Series() for name in CSV_COLUMNS[2:] if name != "throttle_reasons"}
        self._reasons_seen: set = set()
        self._known_gpus: List[int] = []
        if cgroup_memory_file:
            self.set_cgroup_memory_file(cgroup_memory_file)

    # ----------------------------------------------------------------------- public API

    def __enter__(self) -> TelemetrySampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def child_pid(self) -> Optional[int]:
        """PID of the nvidia-smi child (None with NVML or without a GPU)."""
        proc = self._smi.proc if self._smi else None
        return None if proc is None else proc.pid

    def set_cgroup_memory_file(self, path: Optional[str]) -> None:
        """Read ``cgroup_mem_gib`` from ``path`` from the next sample on (a file, or a cgroup directory)."""
        self._cgroup_path = path or None

    def start(self) -> None:
        """Open the sensor, write the header, and start sampling (the first sample is taken at once)."""
        if self._started:
            return
        self._started = True
        parent = os.path.dirname(os.path.abspath(self.csv_path))
        os.makedirs(parent, exist_ok=True)
        self._csv = open(self.csv_path, "w", encoding="utf-8", newline="")  # noqa: SIM115 (closed in stop)
        self._csv.write(",".join(CSV_COLUMNS) + "\n")
        self._csv.flush()
        try:
            self._meminfo = _PreadFile(self.meminfo_path)
        except OSError as exc:
            self._error(f"host memory: {exc}")
        self._open_gpu_sensor()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="sparkfleet-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> Dict[str, Any]:
        """Stop sampling, join the threads, kill the nvidia-smi child, close files; return the summary.

        Idempotent: a second call returns the same summary.
        """
        if self._summary is not None:
            return self._summary
        self._t_stop = time.monotonic()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(10.0, 3 * self.interval_s))
            if self._thread.is_alive():
                self._error("sampler thread did not stop in time")
        if self._smi is not None:
            self._smi.stop()
        if self._gpu_sensor is not None and self._own_sensor:
            self._gpu_sensor.close()
        for f in (self._meminfo, self._cgroup_file):
            if f is not None:
                f.close()
        if self._csv is not None:
            try:
                self._csv.close()
            except OSError as exc:
                self._error(f"telemetry.csv: {exc}")
        self._summary = self._make_summary()
        return self._summary

    # ----------------------------------------------------------------------- internals

    def _error(self, message: str) -> None:
        with self._errors_lock:
            if message in self._errors or len(self._errors) < MAX_ERRORS:
                self._errors[message] = self._errors.get(message, 0) + 1

    def _open_gpu_sensor(self) -> None:
        requested = self.requested_sensor
        if isinstance(requested, GpuSensor):
            self._gpu_sensor, self.sensor_kind = requested, requested.kind
            self.sensor_note = requested.note
            if requested.kind == "nvml":
                self.nvml_bindings = bindings(getattr(requested, "nvml", None))
            return
        if requested == "none":
            return
        if requested in ("auto", "nvml"):
            try:
                self._gpu_sensor = open_sensor("nvml")
                self._own_sensor = True
                self.sensor_kind = "nvml"
                self.nvml_bindings = bindings(getattr(self._gpu_sensor, "nvml", None))
                return
            except GpuSensorError as exc:
                if requested == "nvml":
                    self._error(f"nvml: {exc}; sampling host memory only")
                    return
                self.sensor_note = f"nvml: {exc}"  # the record says why NVML did not read
        try:
            executable = find_nvidia_smi(self.nvidia_smi)
        except GpuSensorError:
            if requested == "nvidia-smi":
                self._error(f"{self.nvidia_smi} not found on PATH; sampling host memory only")
            elif self.sensor_note:
                self.sensor_note += f"; {self.nvidia_smi} not found on PATH: no GPU sensor"
            return  # auto on a host without a GPU: host memory only, not an error
        smi = SmiLoop(executable, self.interval_s, self.gpus, self._error)
        try:
            smi.start()
        except OSError as exc:
            self._error(f"cannot start {executable}: {exc}; sampling host memory only")
            return
        self._smi, self.sensor_kind = smi, "nvidia-smi"
        if not smi.got_reading.wait(self.startup_timeout_s):
            self._error(f"nvidia-smi gave no reading within {self.startup_timeout_s:g} s")

    def _loop(self) -> None:
        interval, t0 = self.interval_s, self._t0
        k = 0
        try:
            while True:
                scheduled = t0 + k * interval
                delay = scheduled - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
                if self._stop.is_set():
                    return
                actual = time.monotonic()
                self._jitter.append(actual - scheduled)
                try:
                    self._sample(actual - t0)
                except Exception as exc:  # never let telemetry die: record and go on
                    self._error(f"sample failed: {type(exc).__name__}: {exc}")
                # Next slot on the grid; slots already a full interval past are skipped, not bunched up.
                due = int((time.monotonic() - t0) / interval)
                nxt = max(k + 1, due)
                self._missed += nxt - k - 1
                k = nxt
        finally:
            self._sampler_cpu_s = time.thread_time()

    def _read_gpus(self) -> Tuple[List[int], List[GpuReading]]:
        if self._smi is not None:
            known, fresh = self._smi.snapshot(max_age_s=max(3 * self.interval_s, self.interval_s + 2.0))
            if known and len(fresh) < len(known):
                self._error("nvidia-smi: no fresh reading for some samples (child slow, stalled or dead)")
            return known, fresh
        if self._gpu_sensor is not None:
            try:
                readings = self._gpu_sensor.read(self.gpus)
            except Exception as exc:  # GpuSensorError, NVMLError, a dying driver
                self._error(f"{self.sensor_kind}: {exc}")
                return list(self._known_gpus), []
            return [r.index for r in readings], readings
        return [], []

    def _cgroup_gib(self) -> Optional[float]:
        path = self._cgroup_path
        if path is None:
            return None
        try:
            if self._cgroup_opened_for != path:
                if self._cgroup_file is not None:
                    self._cgroup_file.close()
                self._cgroup_file = None
                self._cgroup_opened_for = path
                self._cgroup_file = _PreadFile(cgroup_memory_file(path))
            if self._cgroup_file is None:
                return None
            return int(self._cgroup_file.read(64).split()[0]) / GIB
        except (OSError, ValueError, IndexError) as exc:
            self._error(f"cgroup memory {path}: {exc}")
            return None

    def _host_gib(self) -> Optional[float]:
        if self._meminfo is None:
            return None
        try:
            self._meminfo_text = self._meminfo.read()
            return parse_meminfo_used_gib(self._meminfo_text)
        except OSError as exc:
            self._meminfo_text = None
            self._error(f"host memory: {exc}")
            return None

    def _sample(self, t: float) -> None:
        known, readings = self._read_gpus()
        mem = self._host_gib()
        cg = self._cgroup_gib()
        if self._memory is not None:
            try:
                self._memory.sample(t, self._meminfo_text, readings)
            except Exception as exc:  # the memory state is extra: it never costs a telemetry row
                self._error(f"memory state: {type(exc).__name__}: {exc}")
        if known:
            self._known_gpus = known
        by_index = {r.index: r for r in readings}
        t_cell = _cell(round(t, 3))
        tail = f"{_cell(None if mem is None else round(mem, 3))},{_cell(None if cg is None else round(cg, 3))}\n"
        lines = []
        for index in known or [None]:
            r = by_index.get(index) if index is not None else None
            if r is None:
                lines.append(f"{t_cell},{_cell(index)},,,,,,{tail}")
                continue
            reasons = decode_throttle_reasons(r.throttle_mask)
            if reasons is not None:
                self._reasons_seen.update(reasons)
            reason_cell = "" if reasons is None else ("|".join(reasons) or "none")
            cells = (r.temperature_c, r.power_w, r.sm_clock_mhz, r.utilization_pct)
            for name, value in zip(("gpu_temp_c", "gpu_power_w", "sm_clock_mhz", "gpu_util_pct"), cells):  # noqa: B905
                self._series[name].add(value)
            lines.append(f"{t_cell},{index},{','.join(_cell(v) for v in cells)},{reason_cell},{tail}")
        self._series["mem_used_gib"].add(mem)
        self._series["cgroup_mem_gib"].add(cg)
        assert self._csv is not None
        self._csv.write("".join(lines))
        self._csv.flush()
        self._samples += 1
        self._rows += len(lines)

    def _make_summary(self) -> Dict[str, Any]:
        jitter = sorted(self._jitter)
        s = self._series

        def ms(value: Optional[float]) -> Optional[float]:
            return None if value is None else round(value * 1000.0, 3)

        child_cpu = self._smi.child_cpu_s if self._smi else 0.0
        reader_cpu = self._smi.reader_cpu_s if self._smi else 0.0
        cpu = self._sampler_cpu_s + reader_cpu + child_cpu
        with self._errors_lock:
            errors = [m if n == 1 else f"{m} (x{n})" for m, n in self._errors.items()]
        return {
            "sensor": self.sensor_kind,
            "sensor_note": self.sensor_note,
            "nvml_bindings": self.nvml_bindings,
            "csv_path": self.csv_path,
            "samples": self._samples,
            "rows": self._rows,
            "duration_s": round(max(0.0, (self._t_stop or self._t0) - self._t0), 3) if self._started else 0.0,
            "interval_s": self.interval_s,
            "missed": self._missed,
            "jitter_ms": {"p50": ms(_percentile(jitter, 50)), "p95": ms(_percentile(jitter, 95)),
                          "max": ms(jitter[-1] if jitter else None)},
            "gpus": list(self._known_gpus),
            "gpu_temp_c_max": s["gpu_temp_c"].maximum(),
            "gpu_temp_c_mean": s["gpu_temp_c"].mean(),
            "gpu_power_w_mean": s["gpu_power_w"].mean(),
            "gpu_power_w_max": s["gpu_power_w"].maximum(),
            "sm_clock_mhz_mean": s["sm_clock_mhz"].mean(1),
            "gpu_util_pct_mean": s["gpu_util_pct"].mean(1),
            "throttle_reasons_seen": sorted(self._reasons_seen),
            "mem_used_gib_max": s["mem_used_gib"].maximum(3),
            "cgroup_mem_gib_max": s["cgroup_mem_gib"].maximum(3),
            "processes_spawned": self._smi.spawned if self._smi else 0,
            "cpu_ms_per_sample": round(cpu * 1000.0 / self._samples, 3) if self._samples else None,
            "errors": errors,
        }
