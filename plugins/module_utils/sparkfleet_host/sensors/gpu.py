# Copyright: sparkfleet contributors
# Apache-2.0
"""The one NVML / nvidia-smi adapter of the host code: every module and module_utils file that asks the GPU
driver anything goes through here (the argv of each nvidia-smi call, the parsing of its output, NVML's
initialisation and getters).

Two implementations of one small interface, :class:`GpuSensor`:

* :class:`NvmlSensor` reads through the nvidia-ml-py bindings (``import pynvml``); no process per sample.
* :class:`NvidiaSmiSensor` runs ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` once per sample.

Every field may be unavailable: a DGX Spark (GB10, unified memory) answers ``[N/A]`` for the memory fields
and has no power cap; NVML raises ``NVMLError_NotSupported`` there. Such fields read as ``None``, never as 0,
so that a missing figure is never mistaken for a measured one.

Stdlib only (pynvml optional), so that ``from .gpu import ...`` works in a
module shipped to a remote host.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import importlib.machinery
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# (argv) -> (rc, stdout, stderr); AnsibleModule.run_command fits once wrapped, subprocess by default.
# typing's generics: collections.abc's are subscriptable only from Python 3.9.
Runner = typing.Callable[[typing.Sequence[str]], typing.Tuple[int, str, str]]

SENSOR_KINDS = ("auto", "nvml", "nvidia-smi")

#: The NVML bindings host set-up installs on every GPU host (roles/nvml, issue 35): the PyPI package and its pinned
#: version. 13.615.71 (2026-09) is the newest release; it is one pure-Python module (``pynvml.py``, ctypes only, a
#: ``py3-none-any`` wheel without Requires-Python that parses under Python 3.6 grammar), so it imports in any host
#: Python sparkfleet supports (3.8+) from a directory of its own; it loads the driver's ``libnvidia-ml.so.1`` and
#: looks each function up by name, so it reads older drivers (a DGX Spark's 580 branch) as well. Every getter this
#: file calls and every field ID of :data:`CLOCK_EVENT_COUNTER_FIELDS` is byte-for-byte the same in 13.580.82 (the
#: 580 branch's bindings) and 13.610.43 (read on a lent H200 with driver 580.159.04); the GPU example
#: (examples/gpu) carries this same wheel. Its sha256: :data:`NVML_WHEEL_SHA256`.
NVML_PACKAGE = "nvidia-ml-py"
NVML_VERSION = "13.615.71"
#: The file name of that release's wheel (what ``sparkfleet_nvml_wheel`` must name) and its sha256 (PyPI's).
NVML_WHEEL = "nvidia_ml_py-%s-py3-none-any.whl" % NVML_VERSION
NVML_WHEEL_SHA256 = "959bf4adf6fe1308e4bd739e722236b0d1ec8392e2cefad33ff70c311380b9b6"

#: The bindings this process was told to use (:func:`use_bindings`): their directory, and why there are none.
_BINDINGS: dict[str, str | None] = {"path": None, "note": None}

# Fields of the sensor query, in order; names as `nvidia-smi --help-query-gpu` lists them (driver 580).
# clocks_throttle_reasons.active is the older alias of clocks_event_reasons.active; both are accepted
# and the older one also works on pre-535 drivers.
QUERY_FIELDS = (
    "index",
    "uuid",
    "name",
    "temperature.gpu",
    "power.draw",
    "clocks.sm",
    "clocks.mem",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "pstate",
    "clocks_throttle_reasons.active",
)

#: ``nvidia-smi -q -d PERFORMANCE``: the clock event reasons and (driver 580+) their cumulative counters.
PERFORMANCE_ARGS = ("-q", "-d", "PERFORMANCE")

#: ``--query-gpu`` fields of :func:`memory_info`.
MEMORY_FIELDS = ("index", "memory.total", "memory.free")
#: What nvidia-smi prints instead of a process line when there is none.
NO_PROCESSES = "No running processes"

# Values nvidia-smi prints for a field it cannot report: in CSV output any bracketed value ([N/A],
# [Not Supported], [Unknown Error], [Insufficient Permissions], [GPU requires reset], [GPU is lost]), in `-q`
# and the table these bare forms.
_UNAVAILABLE = frozenset({"", "N/A", "Not Supported"})

_UNIT_SUFFIXES = (" MiB", " MHz", " W", " %", " C")

# nvmlClocksEventReason* bits (nvml.h; "throttle" in drivers before 535).
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}

#: The cumulative clock-event counters (how long each reason held the clocks since the driver loaded), named as
#: ``nvidia-smi -q``'s "Clocks Event Reasons Counters" block reads in snake case (attestation.parse_nvidia_smi_q:
#: ``SW Power Capping`` -> ``sw_power_capping``; driver 580, tests/fixtures/attestation), each with the NVML field
#: it comes from through ``nvmlDeviceGetFieldValues`` (nanoseconds). The field IDs are taken from the bindings BY
#: NAME, never typed here, because they moved between releases: SW_POWER_CAP is NVML_FI_DEV_PERF_POLICY_POWER (74)
#: and SYNC_BOOST ..._PERF_POLICY_SYNC_BOOST (76) throughout, but SW thermal / HW thermal / HW power brake are
#: 269/270/271 in nvidia-ml-py 13.610.43 with driver 580.159.04 (read on a lent H200, 2026-11-27: field 74 gave
#: 27,373,633,600 ns where ``nvidia-smi -q`` printed 27373633 us; 251-253 are power-smoothing fields there and
#: answer NotSupported) and 251/252/253 in an earlier 12.x nvidia-ml-py. A binding of another release than the
#: driver can thus read another field: host_state asks ``nvidia-smi -q`` first and uses these as the fallback.
CLOCK_EVENT_COUNTER_FIELDS: dict[str, str] = {
    "sw_power_capping": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP",
    "sync_boost": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST",
    "sw_thermal_slowdown": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN",
    "hw_thermal_slowdown": "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",
    "hw_power_braking": "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN",
}

#: ``--query-gpu`` fields of :meth:`GpuSensor.facts` (names as ``nvidia-smi --help-query-gpu`` lists them; the
#: enforced limit is what the power management algorithm holds the board to, ``[N/A]`` on a GB10).
FACT_FIELDS = ("index", "name", "clocks.max.sm", "enforced.power.limit")


class GpuSensorError(Exception):
    """The sensor cannot be opened or read."""


@dataclass
class GpuReading:
    """One GPU at one instant. ``None`` means the GPU does not report that figure."""

    index: int
    uuid: str | None = None
    name: str | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    utilization_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    pstate: str | None = None
    throttle_mask: int | None = None

    @property
    def throttle_reasons(self) -> list[str] | None:
        return decode_throttle_reasons(self.throttle_mask)


def decode_throttle_reasons(mask: int | None) -> list[str] | None:
    """Names of the active clock event reasons; ``[]`` when none, ``None`` when unknown."""
    if mask is None:
        return None
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


# --------------------------------------------------------------------------- nvidia-smi CSV parsing


def clean_value(raw: str | None) -> str | None:
    """Strip a CSV cell; map nvidia-smi's "unavailable" markers to ``None``."""
    if raw is None:
        return None
    value = raw.strip()
    if value in _UNAVAILABLE or (value.startswith("[") and value.endswith("]")):
        return None
    return value


def parse_number(raw: str | None) -> float | None:
    """``"77.43"``, ``"77.43 W"``, ``"0x01"`` → float; unavailable or garbage → ``None``."""
    value = clean_value(raw)
    if value is None:
        return None
    for suffix in _UNIT_SUFFIXES:  # tolerate output without `nounits`
        if value.endswith(suffix):
            value = value[: -len(suffix)]
            break
    try:
        return float(int(value, 16)) if value.lower().startswith("0x") else float(value)
    except ValueError:
        return None


def parse_int(raw: str | None) -> int | None:
    number = parse_number(raw)
    return None if number is None else int(number)


def parse_bitmask(raw: str | None) -> int | None:
    value = clean_value(raw)
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        return None


def parse_query_csv(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """Parse ``--query-gpu=... --format=csv,noheader[,nounits]`` output into one dict per GPU.

    A header line (``--format=csv`` without ``noheader``) is skipped. Values are cleaned
    (:func:`clean_value`) but not converted: the caller knows each field's type.
    """
    rows: list[dict[str, str | None]] = []
    for cells in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not cells or all(not c.strip() for c in cells):
            continue
        if cells[0].strip() == fields[0] or cells[0].strip().startswith(fields[0] + " ["):
            continue  # header
        if len(cells) != len(fields):
            raise GpuSensorError(
                f"nvidia-smi returned {len(cells)} columns for {len(fields)} fields: {','.join(cells)!r}"
            )
        rows.append({f: clean_value(c) for f, c in zip(fields, cells)})  # noqa: B905 (py3.9 targets)
    return rows


def _reading_from_row(row: dict[str, str | None]) -> GpuReading:
    index = parse_int(row["index"])
    if index is None:
        raise GpuSensorError(f"nvidia-smi row without an index: {row!r}")
    return GpuReading(
        index=index,
        uuid=row["uuid"],
        name=row["name"],
        temperature_c=parse_number(row["temperature.gpu"]),
        power_w=parse_number(row["power.draw"]),
        sm_clock_mhz=parse_number(row["clocks.sm"]),
        mem_clock_mhz=parse_number(row["clocks.mem"]),
        utilization_pct=parse_number(row["utilization.gpu"]),
        memory_used_mib=parse_number(row["memory.used"]),
        memory_total_mib=parse_number(row["memory.total"]),
        pstate=row["pstate"],
        throttle_mask=parse_bitmask(row["clocks_throttle_reasons.active"]),
    )


def parse_readings(text: str) -> list[GpuReading]:
    """The readings in ``--query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`` output (one line of the
    ``-lms`` loop, or a whole answer)."""
    return [_reading_from_row(row) for row in parse_query_csv(text, QUERY_FIELDS)]


def subprocess_runner(argv: Sequence[str], timeout: float = 60) -> tuple[int, str, str]:
    """Default runner: no shell, C locale so that numbers are printed with a decimal point."""
    env = dict(os.environ, LC_ALL="C")
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", env=env,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def find_nvidia_smi(path: str | None = None) -> str:
    """Absolute path of nvidia-smi (``path`` if given), or raise :class:`GpuSensorError`."""
    found = shutil.which(path or "nvidia-smi")
    if not found:
        raise GpuSensorError(f"{path or 'nvidia-smi'} not found on PATH")
    return found


def query_argv(
    executable: str, fields: Sequence[str], loop_ms: int | None = None, gpus: Sequence[int] | None = None
) -> list[str]:
    """``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits`` (``-lms LOOP_MS``: print a line per GPU
    every LOOP_MS ms until killed; ``-i GPUS``: only those)."""
    argv = [executable, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]
    if loop_ms is not None:
        argv += ["-lms", str(loop_ms)]
    if gpus is not None:
        argv += ["-i", ",".join(str(g) for g in gpus)]
    return argv


def compute_apps_argv(executable: str) -> list[str]:
    """The compute processes, one CSV line each."""
    return [executable, "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]


def report_argv(executable: str) -> list[str]:
    """``nvidia-smi -q``: the whole report (attestation.parse_nvidia_smi_q reads it)."""
    return [executable, "-q"]


def performance_argv(executable: str, gpu: int | None = None) -> list[str]:
    """``nvidia-smi -q -d PERFORMANCE [-i GPU]``: the clock event reasons and their counters."""
    return [executable, *PERFORMANCE_ARGS] + ([] if gpu is None else ["-i", str(gpu)])


def persistence_mode_argv(executable: str, index: int, enabled: bool) -> list[str]:
    return [executable, "-i", str(index), "-pm", "1" if enabled else "0"]


def power_limit_argv(executable: str, index: int, watts: float) -> list[str]:
    return [executable, "-i", str(index), "-pl", f"{watts:g}"]


def lock_clocks_argv(executable: str, index: int, min_mhz: int, max_mhz: int) -> list[str]:
    return [executable, "-i", str(index), "-lgc", f"{min_mhz},{max_mhz}"]


def reset_clocks_argv(executable: str, index: int) -> list[str]:
    return [executable, "-i", str(index), "-rgc"]


def query_gpu(
    fields: Sequence[str], executable: str, runner: Runner = subprocess_runner
) -> list[dict[str, str | None]]:
    """Run one ``--query-gpu`` and return its rows (see :func:`parse_query_csv`)."""
    argv = query_argv(executable, fields)
    rc, out, err = runner(argv)
    if rc != 0:
        detail = (err or out).strip() or f"exit code {rc}"
        raise GpuSensorError(f"{' '.join(argv)} failed (rc={rc}): {detail}")
    return parse_query_csv(out, fields)


# --------------------------------------------------------------------------- sensors


class GpuSensor:
    """Interface: ``read()`` the selected GPUs; ``close()`` when done. ``note``: why this sensor and not NVML
    (set by :func:`open_sensor` when ``auto`` fell back), None otherwise."""

    kind: str = "abstract"
    note: str | None = None

    def read(self, indices: Sequence[int] | None = None) -> list[GpuReading]:
        raise NotImplementedError

    def close(self) -> None:
        """Release the sensor (NVML handle); safe to call twice."""

    def facts(self, index: int) -> dict[str, Any]:
        """What does not change under load: ``{"name", "max_sm_clock_mhz", "power_limit_w"}`` (the enforced
        limit), None where the GPU does not say; ``{}`` when this sensor cannot tell."""
        return {}

    def clock_event_counters_us(self, index: int) -> dict[str, int] | None:
        """The cumulative clock-event counters (:data:`CLOCK_EVENT_COUNTER_FIELDS` names, microseconds), or None
        when this sensor cannot read them (the caller then asks ``nvidia-smi -q -d PERFORMANCE``)."""
        return None

    def __enter__(self) -> GpuSensor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _select(readings: list[GpuReading], indices: Sequence[int] | None) -> list[GpuReading]:
    if indices is None:
        return readings
    by_index = {r.index: r for r in readings}
    missing = [i for i in indices if i not in by_index]
    if missing:
        raise GpuSensorError(f"no GPU with index {missing}; present: {sorted(by_index)}")
    return [by_index[i] for i in indices]


class NvidiaSmiSensor(GpuSensor):
    kind = "nvidia-smi"

    def __init__(self, executable: str | None = None, runner: Runner = subprocess_runner) -> None:
        self.executable = find_nvidia_smi(executable)
        self.runner = runner

    def read(self, indices: Sequence[int] | None = None) -> list[GpuReading]:
        readings = [_reading_from_row(r) for r in query_gpu(QUERY_FIELDS, self.executable, self.runner)]
        if not readings:
            raise GpuSensorError("nvidia-smi listed no GPU")
        return _select(readings, indices)

    def facts(self, index: int) -> dict[str, Any]:
        return smi_facts(index, self.executable, self.runner)


def smi_facts(index: int, executable: str, runner: Runner = subprocess_runner) -> dict[str, Any]:
    """:meth:`GpuSensor.facts` from one ``--query-gpu`` of :data:`FACT_FIELDS`; ``{}`` when GPU ``index`` is not
    listed. :class:`GpuSensorError` when nvidia-smi fails."""
    for row in query_gpu(FACT_FIELDS, executable, runner):
        if parse_int(row["index"]) == index:
            return {"name": row["name"], "max_sm_clock_mhz": parse_number(row["clocks.max.sm"]),
                    "power_limit_w": parse_number(row["enforced.power.limit"])}
    return {}


#: nvmlValueType_t -> the member of the value union holding it (nvml.h).
_NVML_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


class NvmlSensor(GpuSensor):
    kind = "nvml"

    def __init__(self, nvml: Any | None = None) -> None:
        self.nvml = nvml = load_nvml(nvml)
        self._open = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:
            self.close()
            raise GpuSensorError(f"NVML cannot enumerate GPUs: {exc}") from exc
        if not self._handles:
            self.close()
            raise GpuSensorError("NVML found no GPU")

    def _get(self, fn_name: str, *args: Any) -> Any:
        """Call an NVML getter; an unsupported or failing field reads as None."""
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None
        try:
            value = fn(*args)
        except Exception:  # NVMLError_NotSupported on GB10 memory, permissions, ...
            return None
        return value.decode() if isinstance(value, bytes) else value

    def _throttle(self, handle: Any) -> int | None:
        # Renamed in driver 535; the old name stays as a deprecated alias in the bindings.
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if hasattr(self.nvml, name):
                value = self._get(name, handle)
                return None if value is None else int(value)
        return None

    def read(self, indices: Sequence[int] | None = None) -> list[GpuReading]:
        nv = self.nvml
        wanted = range(len(self._handles)) if indices is None else indices
        readings: list[GpuReading] = []
        for index in wanted:
            if not 0 <= index < len(self._handles):
                raise GpuSensorError(f"no GPU with index {index}; present: {list(range(len(self._handles)))}")
            h = self._handles[index]
            power_mw = self._get("nvmlDeviceGetPowerUsage", h)
            util = self._get("nvmlDeviceGetUtilizationRates", h)
            mem = self._get("nvmlDeviceGetMemoryInfo", h)
            pstate = self._get("nvmlDeviceGetPerformanceState", h)
            temp = self._get("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU)
            sm = self._get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM)
            memclk = self._get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM)
            readings.append(
                GpuReading(
                    index=index,
                    uuid=self._get("nvmlDeviceGetUUID", h),
                    name=self._get("nvmlDeviceGetName", h),
                    temperature_c=None if temp is None else float(temp),
                    power_w=None if power_mw is None else round(power_mw / 1000.0, 2),
                    sm_clock_mhz=None if sm is None else float(sm),
                    mem_clock_mhz=None if memclk is None else float(memclk),
                    utilization_pct=None if util is None else float(util.gpu),
                    memory_used_mib=None if mem is None else round(mem.used / 2**20, 1),
                    memory_total_mib=None if mem is None else round(mem.total / 2**20, 1),
                    pstate=None if pstate is None or pstate >= 32 else f"P{int(pstate)}",  # 32 = unknown
                    throttle_mask=self._throttle(h),
                )
            )
        return readings

    def _handle(self, index: int) -> Any:
        if not 0 <= index < len(self._handles):
            raise GpuSensorError(f"no GPU with index {index}; present: {list(range(len(self._handles)))}")
        return self._handles[index]

    def facts(self, index: int) -> dict[str, Any]:
        h = self._handle(index)
        max_sm = self._get("nvmlDeviceGetMaxClockInfo", h, self.nvml.NVML_CLOCK_SM)
        limit_mw = self._get("nvmlDeviceGetEnforcedPowerLimit", h)  # NotSupported on a GB10: None
        return {"name": self._get("nvmlDeviceGetName", h),
                "max_sm_clock_mhz": None if max_sm is None else float(max_sm),
                "power_limit_w": None if limit_mw is None else round(limit_mw / 1000.0, 2)}

    def clock_event_counters_us(self, index: int) -> dict[str, int] | None:
        h = self._handle(index)
        wanted = [(name, getattr(self.nvml, const, None)) for name, const in CLOCK_EVENT_COUNTER_FIELDS.items()]
        wanted = [(name, fid) for name, fid in wanted if isinstance(fid, int)]
        values = self._get("nvmlDeviceGetFieldValues", h, [fid for _, fid in wanted]) if wanted else None
        if values is None:
            return None
        out: dict[str, int] = {}
        for (name, _), value in zip(wanted, values):  # noqa: B905 (py3.9 targets)
            if getattr(value, "nvmlReturn", None) != 0:
                continue  # NVML_ERROR_NOT_SUPPORTED for that field: not read, never 0
            member = _NVML_VALUE_MEMBERS.get(getattr(value, "valueType", None))
            raw = getattr(getattr(value, "value", None), member, None) if member else None
            if isinstance(raw, (int, float)) and raw >= 0:
                out[name] = int(raw) // 1000  # ns -> us, nvidia-smi -q's unit
        return out or None

    def close(self) -> None:
        if getattr(self, "_open", False):
            self._open = False
            shutdown_nvml(self.nvml)


def use_bindings(path: str | None = None, note: str | None = None) -> str | None:
    """Make the NVML bindings installed in ``path`` (a ``pip install --target`` directory holding ``pynvml.py``:
    roles/nvml's ``<work_dir>/clients/nvidia-ml-py-<version>``) the ones this process reads NVML through, ahead of
    any its Python has of its own: :func:`load_nvml` imports ``pynvml`` from that directory alone (importlib's
    path finder over it; the process's import path is left as it is, so nothing else there is found). ``note``:
    why host set-up installed none (said in :func:`load_nvml`'s error, so a record whose sensor is not NVML says
    why). Call before the first sensor opens; returns the directory, or None (``path`` empty, or without
    ``pynvml.py``: the note then says so)."""
    _BINDINGS["path"], _BINDINGS["note"] = None, note or None
    if not path:
        return None
    if not os.path.isfile(os.path.join(path, "pynvml.py")):
        _BINDINGS["note"] = "; ".join(filter(None, ["no pynvml.py in %s" % path, note]))
        return None
    _BINDINGS["path"] = path
    return path


def _import_pynvml() -> Any:
    """``pynvml``: from :func:`use_bindings`'s directory when one is set and the module is not loaded yet (then
    registered as ``pynvml``), else the plain import. ImportError when neither finds it."""
    path = _BINDINGS["path"]
    if path and "pynvml" not in sys.modules:
        spec = importlib.machinery.PathFinder.find_spec("pynvml", [path])
        if spec is None or spec.loader is None:
            raise ImportError("no pynvml in %s" % path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["pynvml"] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # a broken file: as if there were none
            sys.modules.pop("pynvml", None)
            raise ImportError("pynvml in %s does not load: %s: %s" % (path, type(exc).__name__, exc)) from exc
        return module
    import pynvml  # type: ignore[import-not-found]

    return pynvml


def bindings(nvml: Any) -> str | None:
    """What the NVML sensor reads through: ``nvidia-ml-py 13.615.71 (DIR)`` from the ``nvidia_ml_py-*.dist-info``
    beside the bindings' ``pynvml.py``, ``pynvml (FILE)`` when no such directory is there; None for bindings
    without a file (a test's fake)."""
    where = getattr(nvml, "__file__", None)
    if not isinstance(where, str):
        return None
    folder = os.path.dirname(os.path.abspath(where))
    found = sorted(glob.glob(os.path.join(folder, "nvidia_ml_py-*.dist-info")))
    if found:
        version = os.path.basename(found[-1])[len("nvidia_ml_py-"):-len(".dist-info")]
        return "%s %s (%s)" % (NVML_PACKAGE, version, folder)
    return "pynvml (%s)" % where


def load_nvml(nvml: Any | None = None) -> Any:
    """The NVML bindings (``pynvml`` unless given: :func:`use_bindings`'s first), initialised;
    :class:`GpuSensorError` when they are missing (with the note of :func:`use_bindings`) or ``nvmlInit`` fails
    (no driver, no library). Pair with :func:`shutdown_nvml`."""
    if nvml is None:
        try:
            nvml = _import_pynvml()
        except ImportError as exc:
            note = _BINDINGS["note"]
            raise GpuSensorError(f"pynvml (nvidia-ml-py) is not importable: {exc}"
                                 + (f" ({note})" if note else "")) from exc
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError and friends (no driver, no library)
        through = bindings(nvml)
        raise GpuSensorError(f"nvmlInit failed: {exc}" + (f" (through {through})" if through else "")) from exc
    return nvml


def shutdown_nvml(nvml: Any) -> None:
    with contextlib.suppress(Exception):  # shutting down twice or after a driver loss
        nvml.nvmlShutdown()


def memory_info(
    nvml: Any | None = None, nvidia_smi: str = "nvidia-smi", runner: Runner = subprocess_runner
) -> tuple[str, list[dict[str, Any]]]:
    """What the driver reports per GPU: ``(source, [{"index", "total_bytes", "free_bytes"}])``, from NVML
    (``nvmlDeviceGetMemoryInfo``) when it works, else from one ``nvidia-smi --query-gpu`` of
    :data:`MEMORY_FIELDS`; source is ``nvml`` or ``nvidia-smi``. A figure the GPU does not report (a GB10:
    NotSupported, ``[N/A]``) is None. :class:`GpuSensorError` naming both failures when neither answers."""
    try:
        nv = load_nvml(nvml)
        try:
            rows = []
            for i in range(int(nv.nvmlDeviceGetCount())):
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                try:
                    info = nv.nvmlDeviceGetMemoryInfo(handle)
                    rows.append({"index": i, "total_bytes": info.total, "free_bytes": info.free})
                except Exception:  # NVMLError_NotSupported on a GB10
                    rows.append({"index": i, "total_bytes": None, "free_bytes": None})
            return "nvml", rows
        finally:
            shutdown_nvml(nv)
    except Exception as exc:  # no pynvml, no driver, a failing getter
        nvml_error = str(exc)
    try:
        found = query_gpu(MEMORY_FIELDS, nvidia_smi, runner)
    except GpuSensorError as exc:
        raise GpuSensorError(f"nvml: {nvml_error}; nvidia-smi: {exc}") from exc
    rows = []
    for row in found:
        index = parse_int(row["index"])
        total, free = parse_number(row["memory.total"]), parse_number(row["memory.free"])  # MiB
        if index is not None:
            rows.append({"index": index, "total_bytes": None if total is None else total * 2**20,
                         "free_bytes": None if free is None else free * 2**20})
    return "nvidia-smi", rows


def open_sensor(
    kind: str = "auto",
    runner: Runner = subprocess_runner,
    nvidia_smi: str | None = None,
    nvml: Any | None = None,
) -> GpuSensor:
    """Open a sensor of ``kind`` (auto | nvml | nvidia-smi).

    ``auto`` prefers NVML and falls back to nvidia-smi when pynvml is missing or NVML does not work
    (no driver, or a host without it where a stand-in nvidia-smi answers); the NVML sensor must also
    return a temperature for GPU 0, which rules out half-working shims.
    """
    if kind not in SENSOR_KINDS:
        raise GpuSensorError(f"sensor must be one of {', '.join(SENSOR_KINDS)}, got {kind!r}")
    why = None
    if kind in ("auto", "nvml"):
        try:
            sensor = NvmlSensor(nvml)
            if sensor.read([0])[0].temperature_c is None:
                sensor.close()
                raise GpuSensorError("NVML reports no temperature for GPU 0")
            return sensor
        except GpuSensorError as exc:
            if kind == "nvml":
                raise
            why = "nvml: %s" % exc
    sensor = NvidiaSmiSensor(nvidia_smi, runner)
    sensor.note = why
    return sensor

