"""A directory of NVML bindings as the nvml role leaves it (``pynvml.py`` and the release's ``dist-info``), with a
stand-in ``pynvml`` of one idle H100: for tests of what bench_run reads through ``gpu.use_bindings`` on a machine
without a GPU (the stand-in answers the getters gpu.py calls, as nvidia-ml-py's module-level functions do)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from _ansible_modules import sparkfleet_gpu

#: The stand-in module's text: nvidia-ml-py's names, fixed readings (an H100 at idle).
PYNVML = '''"""Stand-in for nvidia-ml-py's pynvml (tests only): one idle H100."""
from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
STANDIN = True


class NVMLError(Exception):
    pass


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetName(handle):
    return "NVIDIA H100 80GB HBM3"


def nvmlDeviceGetUUID(handle):
    return "GPU-00000000-0000-0000-0000-000000000000"


def nvmlDeviceGetTemperature(handle, sensor):
    return 33


def nvmlDeviceGetPowerUsage(handle):
    return 71250  # mW


def nvmlDeviceGetClockInfo(handle, clock):
    return {NVML_CLOCK_SM: 345, NVML_CLOCK_MEM: 2619}[clock]


def nvmlDeviceGetMaxClockInfo(handle, clock):
    return 1980


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return 700000


def nvmlDeviceGetUtilizationRates(handle):
    return SimpleNamespace(gpu=0, memory=0)


def nvmlDeviceGetMemoryInfo(handle):
    return SimpleNamespace(total=80 * 2**30, free=79 * 2**30, used=2**30)


def nvmlDeviceGetPerformanceState(handle):
    return 0


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return 0x1  # GPU idle
'''


def make_bindings(directory: Path, version: str = sparkfleet_gpu.NVML_VERSION) -> Path:
    """``directory`` as ``pip install --target`` of nvidia-ml-py ``version`` leaves it, with the stand-in module."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pynvml.py").write_text(PYNVML)
    info = directory / f"nvidia_ml_py-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: nvidia-ml-py\nVersion: {version}\n")
    return directory


@contextlib.contextmanager
def isolated_bindings() -> Iterator[None]:
    """Undo what gpu.use_bindings, an ``import pynvml`` and a test do to this process (the bindings and their note,
    sys.modules, sys.path)."""
    path, saved = list(sys.path), dict(sparkfleet_gpu._BINDINGS)
    had = sys.modules.get("pynvml", False)
    try:
        yield
    finally:
        sys.path[:] = path
        sparkfleet_gpu._BINDINGS.update(saved)
        if had is False:
            sys.modules.pop("pynvml", None)
        else:
            sys.modules["pynvml"] = had
