# -*- coding: utf-8 -*-
"""Memory state of a run, for explaining the native-vs-Docker KV-cache gap on unified memory (issue 15).

On a DGX Spark (GB10) CPU and GPU share one pool of memory. TensorRT-LLM sizes its KV cache as
``fraction x (device_total - peak + tmp_kv)`` where ``peak`` is device-wide, so whatever the driver counts as
used at that moment - page cache, other processes, a container's cgroup accounting - shrinks the KV cache.
This module captures what a run needs to test that explanation:

* ``/proc/meminfo``: MemTotal, MemFree, MemAvailable, Buffers, Cached, Shmem (GiB), plus ``used_gib``
  (MemTotal - MemAvailable) and ``not_free_gib`` (MemTotal - MemFree: page cache included, which is what CUDA
  counts as used on unified memory until the cache is dropped);
* the container's cgroup (v2 ``memory.current``/``memory.peak``/``memory.max``/``memory.stat``, v1 the
  ``memory.usage_in_bytes``/``max_usage_in_bytes``/``limit_in_bytes``/``stat`` equivalents): current, kernel
  peak, limit, and file/anon/shmem from the stat file;
* what CUDA reports free, through NVML (``nvmlDeviceGetMemoryInfo``) or ``nvidia-smi --query-gpu=memory.free``,
  where the GPU reports it (a GB10 says ``[N/A]``: recorded as null with that reason);
* dropping the page cache before a run (``sync; echo 3 > /proc/sys/vm/drop_caches``), recording what it did.

:class:`PeakTracker` rides on the telemetry sampler (one call per sample, reusing the meminfo text the sampler
already read) and keeps the whole memory state at the sample where the device-wide use (``not_free_gib``) was
highest. :func:`section` assembles the record's ``memory`` section; docs/MEMORY.md describes its fields.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from .gpu import GpuSensorError, memory_info, subprocess_runner
from .meminfo import MEMINFO, parse_meminfo_kib

GIB = float(2**30)
SECTION_VERSION = 2  # 2: the KV fraction left the section (the record keeps it once, in workload_params)
#: /proc/meminfo keys recorded, and their names in the record (GiB).
MEMINFO_KEYS = (
    ("MemTotal", "mem_total_gib"),
    ("MemFree", "mem_free_gib"),
    ("MemAvailable", "mem_available_gib"),
    ("Buffers", "buffers_gib"),
    ("Cached", "cached_gib"),
    ("Shmem", "shmem_gib"),
)
#: memory.stat keys recorded (cgroup v2 name, v1 names in order of preference) -> record name.
STAT_KEYS = (
    ("file", ("total_cache", "cache"), "file_gib"),
    ("anon", ("total_rss", "rss"), "anon_gib"),
    ("shmem", ("total_shmem", "shmem"), "shmem_gib"),
)
#: docker run flags that change a container's memory state (recorded with the run).
MEMORY_FLAG_PREFIXES = ("--memory", "--memory-swap", "--memory-reservation", "--memory-swappiness",
                        "--kernel-memory", "--shm-size", "--ipc", "--oom-kill-disable", "--ulimit",
                        "--cgroup-parent", "--cgroupns", "--pids-limit", "--gpus", "--runtime")
DROP_CACHES = "/proc/sys/vm/drop_caches"
UNLIMITED_V1 = 1 << 60  # cgroup v1 reports "no limit" as a page-rounded LONG_MAX


def _gib(n_bytes: Optional[float]) -> Optional[float]:
    return None if n_bytes is None else round(n_bytes / GIB, 4)


# --------------------------------------------------------------------------- /proc/meminfo


def parse_meminfo(text: str) -> Dict[str, Optional[float]]:
    """The recorded /proc/meminfo figures in GiB (None for a key that is missing), plus the derived ones."""
    raw = {key: kib * 1024 for key, kib in parse_meminfo_kib(text, [k for k, _ in MEMINFO_KEYS]).items()}
    out: Dict[str, Optional[float]] = {name: _gib(raw.get(key)) for key, name in MEMINFO_KEYS}
    total = raw.get("MemTotal")
    out["used_gib"] = _gib(total - raw["MemAvailable"]) if total is not None and "MemAvailable" in raw else None
    out["not_free_gib"] = _gib(total - raw["MemFree"]) if total is not None and "MemFree" in raw else None
    return out


def read_meminfo(path: str = MEMINFO) -> Optional[Dict[str, Optional[float]]]:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return parse_meminfo(fh.read())
    except OSError:
        return None


# --------------------------------------------------------------------------- cgroups


def parse_memory_stat(text: str) -> Dict[str, Optional[float]]:
    """file/anon/shmem in GiB from a cgroup v2 or v1 ``memory.stat``."""
    values: Dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                values[parts[0]] = int(parts[1])
            except ValueError:
                continue
    out: Dict[str, Optional[float]] = {}
    for v2, v1_names, name in STAT_KEYS:
        value = values.get(v2)
        for v1 in v1_names:
            if value is not None:
                break
            value = values.get(v1)
        out[name] = _gib(value)
    return out


class Cgroup:
    """One cgroup's memory files (v2 or v1), read with ``pread`` on descriptors kept open.

    A container's cgroup disappears when it exits: a read that fails keeps the last good values.
    """

    V2 = {"current": "memory.current", "peak": "memory.peak", "limit": "memory.max", "stat": "memory.stat"}
    V1 = {"current": "memory.usage_in_bytes", "peak": "memory.max_usage_in_bytes",
          "limit": "memory.limit_in_bytes", "stat": "memory.stat"}

    def __init__(self, directory: str) -> None:
        self.path = directory
        self.version = 2 if os.path.exists(os.path.join(directory, "memory.current")) else 1
        names = self.V2 if self.version == 2 else self.V1
        self._fds: Dict[str, int] = {}
        for key, name in names.items():
            with contextlib.suppress(OSError):
                self._fds[key] = os.open(os.path.join(directory, name), os.O_RDONLY)
        if "current" not in self._fds:
            self.close()
            raise OSError(f"{directory}: no readable memory.current or memory.usage_in_bytes")
        self.last: Optional[Dict[str, Any]] = None

    def _pread(self, key: str, size: int = 64) -> Optional[str]:
        fd = self._fds.get(key)
        if fd is None:
            return None
        try:
            return os.pread(fd, size, 0).decode("ascii", "replace")
        except OSError:
            return None

    def _bytes(self, key: str) -> Optional[int]:
        text = self._pread(key)
        if text is None or text.strip() == "max":
            return None
        try:
            value = int(text.split()[0])
        except (ValueError, IndexError):
            return None
        return None if key == "limit" and value >= UNLIMITED_V1 else value

    def read(self) -> Optional[Dict[str, Any]]:
        """{current_gib, peak_gib, limit_gib, file_gib, anon_gib, shmem_gib}; the last good reading if gone."""
        current = self._bytes("current")
        if current is None:
            return self.last
        stat = self._pread("stat", 16384)
        reading: Dict[str, Any] = {"current_gib": _gib(current), "peak_gib": _gib(self._bytes("peak")),
                                   "limit_gib": _gib(self._bytes("limit"))}
        reading.update(parse_memory_stat(stat) if stat else {name: None for _, _, name in STAT_KEYS})
        self.last = reading
        return reading

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)


def cgroup_dir_of_pid(pid: int, proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> Optional[str]:
    """Directory of the memory cgroup process ``pid`` is in (v1 ``memory`` controller first, else v2)."""
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            candidate = os.path.join(cgroup_root, "memory", rel.lstrip("/"))
            if os.path.exists(os.path.join(candidate, "memory.usage_in_bytes")):
                return candidate
    for line in lines:
        if line.startswith("0::"):
            candidate = os.path.join(cgroup_root, line[3:].lstrip("/"))
            if os.path.exists(os.path.join(candidate, "memory.current")):
                return candidate
    return None


def cgroup_dir_of_file(path: Optional[str]) -> Optional[str]:
    """The cgroup directory of a memory usage file (``.../memory.current``) or of a directory."""
    if not path:
        return None
    return path if os.path.isdir(path) else os.path.dirname(path)


# --------------------------------------------------------------------------- CUDA's view


def cuda_memory(nvml: Any = None, nvidia_smi: str = "nvidia-smi",
                runner: Optional[Callable[[List[str]], tuple[int, str, str]]] = None) -> Dict[str, Any]:
    """What the driver reports free per GPU: NVML when pynvml works, else one ``nvidia-smi --query-gpu``
    (both through :func:`gpu.memory_info`; nvidia-smi with a short timeout: the start snapshot must not hang a
    run)."""
    try:
        source, found = memory_info(nvml, nvidia_smi, runner or functools.partial(subprocess_runner, timeout=15))
    except GpuSensorError as exc:
        return {"source": None, "gpus": [], "free_gib": None, "note": f"no GPU sensor: {exc}"}
    gpus = [{"index": r["index"], "free_gib": _gib(r["free_bytes"]), "total_gib": _gib(r["total_bytes"])}
            for r in found]
    frees = [g["free_gib"] for g in gpus]
    reported = bool(gpus) and all(f is not None for f in frees)
    out: Dict[str, Any] = {"source": source, "gpus": gpus, "free_gib": round(sum(frees), 4) if reported else None}
    if not reported:
        out["note"] = "the GPU does not report free memory ([N/A]; unified memory: see meminfo)"
    return out


def cuda_free_from_readings(readings: Sequence[Any]) -> Optional[float]:
    """Sum of memory.total - memory.used of the sampler's GPU readings (GiB); None unless every GPU reports."""
    if not readings:
        return None
    total = 0.0
    for r in readings:
        if getattr(r, "memory_total_mib", None) is None or getattr(r, "memory_used_mib", None) is None:
            return None
        total += (r.memory_total_mib - r.memory_used_mib) / 1024.0
    return round(total, 4)


# --------------------------------------------------------------------------- page cache


def drop_page_cache(path: str = DROP_CACHES, meminfo: str = "/proc/meminfo",
                    sync: Callable[[], None] = os.sync) -> Dict[str, Any]:
    """``sync; echo 3 > drop_caches`` (root only): what it did, with Cached before and after."""
    before = read_meminfo(meminfo) or {}
    started = time.monotonic()
    error = None
    try:
        sync()
        with open(path, "w", encoding="ascii") as fh:
            fh.write("3\n")
    except OSError as exc:
        error = f"{path}: {exc.strerror or exc}"
    after = read_meminfo(meminfo) or {}
    return {"requested": True, "done": error is None, "error": error,
            "seconds": round(time.monotonic() - started, 3),
            "cached_before_gib": before.get("cached_gib"), "cached_after_gib": after.get("cached_gib"),
            "mem_free_before_gib": before.get("mem_free_gib"), "mem_free_after_gib": after.get("mem_free_gib")}


# --------------------------------------------------------------------------- peak tracking


class PeakTracker:
    """Memory state at the sample of highest device-wide use, fed by the telemetry sampler.

    ``sample(t, meminfo_text, gpu_readings)`` is called from the sampler's thread once per sample;
    ``set_cgroup(path)`` from the launcher when a container's cgroup is found (a file or directory).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cgroup: Optional[Cgroup] = None
        self._cgroup_path: Optional[str] = None
        self._pending: Optional[str] = None
        self.samples = 0
        self.peak: Optional[Dict[str, Any]] = None
        self.first_cgroup: Optional[Dict[str, Any]] = None
        self.cgroup_paths: List[str] = []
        self.max_cgroup_current_gib: Optional[float] = None
        self.max_cgroup_peak_gib: Optional[float] = None
        self.max_cached_gib: Optional[float] = None
        self.min_mem_available_gib: Optional[float] = None
        self.min_cuda_free_gib: Optional[float] = None
        self.limit_gib: Optional[float] = None
        self.errors: List[str] = []

    def set_cgroup(self, path: Optional[str]) -> None:
        with self._lock:
            self._pending = cgroup_dir_of_file(path)

    def _current_cgroup(self) -> Optional[Cgroup]:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending and pending != self._cgroup_path:
            if self._cgroup is not None:
                self._cgroup.close()
            self._cgroup, self._cgroup_path = None, pending
            try:
                self._cgroup = Cgroup(pending)
                self.cgroup_paths.append(pending)
            except OSError as exc:
                self._error(str(exc))
        return self._cgroup

    def _error(self, message: str) -> None:
        if message not in self.errors and len(self.errors) < 10:
            self.errors.append(message)

    def sample(self, t: float, meminfo_text: Optional[str], readings: Sequence[Any] = ()) -> None:
        mem = parse_meminfo(meminfo_text) if meminfo_text else None
        cgroup = self._current_cgroup()
        cg = cgroup.read() if cgroup is not None else None
        cuda_free = cuda_free_from_readings(readings)
        self.samples += 1
        if cg is not None:
            if self.first_cgroup is None:
                self.first_cgroup = dict(cg, t_s=round(t, 3))
            self.max_cgroup_current_gib = _max(self.max_cgroup_current_gib, cg.get("current_gib"))
            self.max_cgroup_peak_gib = _max(self.max_cgroup_peak_gib, cg.get("peak_gib"))
            self.limit_gib = cg.get("limit_gib") if cg.get("limit_gib") is not None else self.limit_gib
        if mem is not None:
            self.max_cached_gib = _max(self.max_cached_gib, mem.get("cached_gib"))
            self.min_mem_available_gib = _min(self.min_mem_available_gib, mem.get("mem_available_gib"))
        self.min_cuda_free_gib = _min(self.min_cuda_free_gib, cuda_free)
        key = (mem or {}).get("not_free_gib")
        best = ((self.peak or {}).get("meminfo") or {}).get("not_free_gib")
        if self.peak is None or (key is not None and (best is None or key > best)):
            self.peak = {"t_s": round(t, 3), "meminfo": mem, "cgroup": cg, "cuda_free_gib": cuda_free}

    def close(self) -> None:
        if self._cgroup is not None:
            self._cgroup.close()

    def summary(self) -> Dict[str, Any]:
        cgroup = None
        if self.cgroup_paths:
            cgroup = {"paths": list(self.cgroup_paths), "limit_gib": self.limit_gib,
                      "peak_gib": self.max_cgroup_peak_gib, "current_gib_max": self.max_cgroup_current_gib,
                      "first": self.first_cgroup}
        return {"samples": self.samples, "peak": self.peak, "cgroup": cgroup,
                "max_cached_gib": self.max_cached_gib, "min_mem_available_gib": self.min_mem_available_gib,
                "min_cuda_free_gib": self.min_cuda_free_gib, "errors": list(self.errors)}


def _max(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return b if a is None else a if b is None else max(a, b)


def _min(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return b if a is None else a if b is None else min(a, b)


# --------------------------------------------------------------------------- the record's section


def memory_flags(flags: Optional[Sequence[str]]) -> Optional[List[str]]:
    """The memory-related ``docker run`` flags (a flag and its separate value kept together)."""
    if flags is None:
        return None
    out: List[str] = []
    flags = [str(f) for f in flags]
    i = 0
    while i < len(flags):
        flag = flags[i]
        name = flag.split("=", 1)[0]
        if name in MEMORY_FLAG_PREFIXES or name == "-m":
            out.append(flag)
            if "=" not in flag and i + 1 < len(flags) and not flags[i + 1].startswith("-"):
                out.append(flags[i + 1])
                i += 1
        i += 1
    return out


def start_state(cuda: bool = True, meminfo: str = "/proc/meminfo", **cuda_kw: Any) -> Dict[str, Any]:
    """The memory state just before the run's first command."""
    return {"meminfo": read_meminfo(meminfo), "cuda": cuda_memory(**cuda_kw) if cuda else None}


def section(drop: Optional[Dict[str, Any]], start: Optional[Dict[str, Any]], tracker: Optional[PeakTracker],
            container_flags: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The run record's ``memory`` section (docs/MEMORY.md)."""
    summary = tracker.summary() if tracker is not None else {}
    return {
        "version": SECTION_VERSION,
        "drop_caches": drop if drop is not None else {"requested": False, "done": False},
        "container_memory_flags": memory_flags(container_flags),
        "start": start,
        "peak": summary.get("peak"),
        "cgroup": summary.get("cgroup"),
        "max_cached_gib": summary.get("max_cached_gib"),
        "min_mem_available_gib": summary.get("min_mem_available_gib"),
        "min_cuda_free_gib": summary.get("min_cuda_free_gib"),
        "samples": summary.get("samples", 0),
        "errors": summary.get("errors", []),
    }
