# Copyright: sparkfleet contributors
# Apache-2.0
"""Preflight gates: is a host fit for benchmarking? The rules behind the ``preflight_check`` module.

Six gates, each recorded in ``preflight.json`` with what was measured, its limit and its verdict (``pass``):

* ``gpu_temperature``: the hottest GPU (``nvidia-smi --query-gpu=index,temperature.gpu,pstate``) at or below
  ``max_gpu_temp_c``;
* ``performance_state``: every GPU's performance state in ``pstates`` (an empty list accepts any);
* ``cpu_load``: the 1-minute load average at or below ``max_load_per_cpu`` times the online CPUs;
* ``free_memory``: ``MemAvailable`` at least ``min_free_memory_gib``;
* ``free_disk``: free space (``df -P -k``'s available column) on the work dir's file system at least
  ``min_free_disk_gib``;
* ``gpu_processes``: at most ``max_gpu_processes`` lines from ``nvidia-smi --query-compute-apps``.

A GPU gate that cannot be measured (no nvidia-smi, no GPU, a query the driver refuses) has ``pass: null`` and
an ``error``; ``fail_on_unknown`` decides whether that fails the host. Sizes are GiB rounded to 2 decimals.

The limits, their defaults and their rules are :data:`LIMIT_FIELDS`: the module's options, and the
inventory settings ``sparkfleet_preflight_*`` (the controller's settings table takes these fields).
:func:`evaluate` and the message functions are pure; the readers take their paths as arguments, and commands
run through a runner (tests pass fakes).

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .fields import GPU_TEMP_C, Field, field_problem
from .gpu import NO_PROCESSES, GpuSensorError, compute_apps_argv, parse_number, query_gpu
from .meminfo import MEMINFO, parse_meminfo_kib

#: The gates, in the order they are evaluated, recorded and named in a failure.
GATES = ("gpu_temperature", "performance_state", "cpu_load", "free_memory", "free_disk", "gpu_processes")
#: The limits: each an inventory setting (its name) and a ``preflight_check`` option (its ``option``).
LIMIT_FIELDS = (
    Field("sparkfleet_preflight_max_gpu_temp_c", "float", 60.0, "Gate: hottest GPU before the runs.", "C",
          GPU_TEMP_C[0], GPU_TEMP_C[1], option="max_gpu_temp_c"),
    Field("sparkfleet_preflight_pstates", "list", [], "Gate: allowed GPU performance states (empty: any).",
          elements="str", option="pstates"),
    Field("sparkfleet_preflight_max_load_per_cpu", "float", 0.5, "Gate: 1-minute load average per CPU.", "",
          0.0, 1000.0, option="max_load_per_cpu"),
    Field("sparkfleet_preflight_min_free_memory_gib", "float", 8.0, "Gate: free memory.", "GiB", 0.0, 65536.0,
          option="min_free_memory_gib"),
    Field("sparkfleet_preflight_min_free_disk_gib", "float", 20.0, "Gate: free disk under the work directory.",
          "GiB", 0.0, 10 ** 6, option="min_free_disk_gib"),
    Field("sparkfleet_preflight_max_gpu_processes", "int", 0, "Gate: processes on the GPU.", "", 0, 100000,
          option="max_gpu_processes"),
    Field("sparkfleet_preflight_fail_on_unknown", "bool", False, "Gate: fail a gate whose value is unknown.",
          option="fail_on_unknown"),
)
LIMIT_DEFAULTS = {f.option: f.default for f in LIMIT_FIELDS}
#: ``--query-gpu`` fields the GPU gates read (run with ``--format=csv,noheader,nounits`` by gpu.query_gpu).
GPU_FIELDS = ("index", "temperature.gpu", "pstate")
KIB_PER_GIB = 1024 * 1024


class Command(object):
    """A command's outcome as ``ansible.builtin.command`` reports it: output without its final newlines, and
    ``msg`` (``non-zero return code`` when rc is not 0, ``Error executing command.`` when it could not start)."""

    __slots__ = ("rc", "stdout", "stderr", "msg")

    def __init__(self, rc: int, stdout: str = "", stderr: str = "", msg: Optional[str] = None) -> None:
        self.rc = rc
        self.stdout = stdout.rstrip("\r\n")
        self.stderr = stderr.rstrip("\r\n")
        self.msg = msg if msg is not None else ("non-zero return code" if rc != 0 else "")

    @classmethod
    def not_started(cls, rc: int) -> "Command":
        return cls(rc, msg="Error executing command.")

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def lines(self) -> List[str]:
        return self.stdout.splitlines()

    @property
    def error(self) -> str:
        """What a gate records as its ``error`` when this command left it unmeasured."""
        return (self.stdout + self.stderr + self.msg).strip()


CommandRunner = Callable[[Sequence[str]], Command]


# --------------------------------------------------------------------------- options


def limit_problems(params: Mapping[str, Any]) -> List[str]:
    """Problems with the limit options (each naming its option) by :data:`LIMIT_FIELDS`' rules; [] if fine."""
    problems = []
    for f in LIMIT_FIELDS:
        if f.option in params:
            problem = field_problem(f, params[f.option])
            if problem:
                problems.append("%s %s" % (f.option, problem))
    return problems


# --------------------------------------------------------------------------- measuring


def query_gpus(nvidia_smi: str, run: CommandRunner) -> Tuple[List[Dict[str, Optional[str]]], str]:
    """One ``--query-gpu`` of :data:`GPU_FIELDS` (through :func:`gpu.query_gpu`): the rows, and the text a GPU
    gate records as its ``error`` if no temperature can be read from them (the command's output, or why it
    failed)."""
    ran: List[Command] = []

    def runner(argv: Sequence[str]) -> Tuple[int, str, str]:
        ran.append(run(argv))
        return ran[-1].rc, ran[-1].stdout, ran[-1].stderr

    try:
        rows = query_gpu(GPU_FIELDS, nvidia_smi, runner)
    except GpuSensorError as exc:
        return [], ran[-1].error if ran and not ran[-1].ok else str(exc)
    return rows, ran[-1].error


def query_apps(nvidia_smi: str, run: CommandRunner) -> Command:
    """``nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader``."""
    return run(compute_apps_argv(nvidia_smi))


def load_1min(path: str = "/proc/loadavg") -> float:
    """The 1-minute load average."""
    with open(path, encoding="ascii") as fh:
        return float(fh.read().split()[0])


def mem_available_kib(path: str = MEMINFO) -> int:
    """``MemAvailable`` in KiB (the kernel's "kB")."""
    with open(path, encoding="ascii", errors="replace") as fh:
        values = parse_meminfo_kib(fh.read(), ("MemAvailable",))
    if "MemAvailable" not in values:
        raise ValueError("%s has no MemAvailable line" % path)
    return values["MemAvailable"]


def online_cpus() -> int:
    """Online CPUs, as ``getconf _NPROCESSORS_ONLN`` counts them."""
    try:
        return int(os.sysconf("SC_NPROCESSORS_ONLN"))
    except (ValueError, OSError, AttributeError):
        return os.cpu_count() or 1


def disk_available_kib(path: str) -> int:
    """Space available to unprivileged users on ``path``'s file system in KiB, rounded up: ``df -P -k``."""
    st = os.statvfs(path)
    return -(-st.f_bavail * st.f_frsize // 1024)


# --------------------------------------------------------------------------- evaluating


def gib(kib: int) -> float:
    return round(kib / KIB_PER_GIB, 2)


def process_count(apps: Command) -> int:
    """Compute processes listed: non-empty lines other than nvidia-smi's "No running processes found"."""
    return len([line for line in apps.lines if line and NO_PROCESSES not in line])


def evaluate(
    limits: Mapping[str, Any],
    gpu_rows: Sequence[Mapping[str, Optional[str]]],
    gpu_error: str,
    apps: Command,
    load1: float,
    cpus: int,
    mem_kib: int,
    disk_kib: int,
    work_dir: str,
) -> Dict[str, Dict[str, Any]]:
    """Every gate's record (``preflight.json``'s ``gates``) from what was measured.

    ``limits`` has the limit options (of :data:`LIMIT_FIELDS`); ``gpu_rows``/``gpu_error`` come from
    :func:`query_gpus`, ``apps`` from :func:`query_apps`; memory and disk in KiB.
    """
    temps = [t for t in (parse_number(row.get("temperature.gpu")) for row in gpu_rows) if t is not None]
    states = [row.get("pstate") for row in gpu_rows]
    max_temp = float(limits["max_gpu_temp_c"])
    allowed = list(limits["pstates"] or [])
    hottest = max(temps) if temps else None
    load_limit = float(limits["max_load_per_cpu"]) * int(cpus)
    mem_gib, disk_gib = gib(mem_kib), gib(disk_kib)
    min_mem, min_disk = float(limits["min_free_memory_gib"]), float(limits["min_free_disk_gib"])
    max_procs = int(limits["max_gpu_processes"])
    procs = process_count(apps) if apps.ok else None
    return {
        "gpu_temperature": {
            "value": hottest, "limit": max_temp, "unit": "C",
            "pass": None if hottest is None else hottest <= max_temp,
            "error": "" if temps else gpu_error,
        },
        "performance_state": {
            "value": states, "limit": allowed,
            "pass": (not allowed or all(s in allowed for s in states)) if states else None,
        },
        "cpu_load": {"value": float(load1), "limit": load_limit, "cpus": int(cpus), "pass": load1 <= load_limit},
        "free_memory": {"value": mem_gib, "limit": min_mem, "unit": "GiB", "pass": mem_gib >= min_mem},
        "free_disk": {"value": disk_gib, "limit": min_disk, "unit": "GiB", "path": work_dir,
                      "pass": disk_gib >= min_disk},
        "gpu_processes": {
            "value": procs, "limit": max_procs, "processes": apps.lines if apps.ok else [],
            "pass": None if procs is None else procs <= max_procs,
            "error": "" if apps.ok else apps.error,
        },
    }


def record_text(host: str, gates: Mapping[str, Mapping[str, Any]]) -> str:
    """``preflight.json``: ``{"host", "gates"}`` as the role wrote it (``to_nice_json``: 4 spaces, sorted keys,
    ASCII), with a final newline."""
    return json.dumps({"host": host, "gates": gates}, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def unknown_gates(gates: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """Gates that could not be measured (``pass`` is None)."""
    return [name for name, gate in gates.items() if gate["pass"] is None]


def failed_gates(gates: Mapping[str, Mapping[str, Any]], fail_on_unknown: bool) -> List[str]:
    """Gates that fail the host: ``pass`` false, or unknown with ``fail_on_unknown``."""
    return [name for name, gate in gates.items()
            if gate["pass"] is False or (gate["pass"] is None and fail_on_unknown)]


def _shown(value: Any) -> str:
    """A value as the role's Jinja printed it (None as nothing)."""
    return "" if value is None else str(value)


def failure_message(host: str, gates: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> str:
    """``preflight gate(s) failed on HOST: NAME measured VALUE UNIT (limit LIMIT UNIT); ...``"""
    parts = []
    for name in names:
        gate = gates[name]
        unit = " " + gate["unit"] if "unit" in gate else ""
        parts.append("%s measured %s%s (limit %s%s)" % (name, _shown(gate["value"]), unit, _shown(gate["limit"]),
                                                        unit))
    return "preflight gate(s) failed on %s: %s" % (host, "; ".join(parts))


def unknown_warning(name: str, gates: Mapping[str, Mapping[str, Any]]) -> str:
    """The warning for a gate that could not be measured. performance_state comes from the same nvidia-smi
    query as gpu_temperature and has no ``error`` of its own: it gives that one's."""
    error = gates[name].get("error", gates["gpu_temperature"]["error"] if name == "performance_state" else "")
    return "preflight gate %s could not be measured: %s" % (name, error)
