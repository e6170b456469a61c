"""cupy.cuda.runtime, the two calls gpu_probe.py makes.

Signatures as CuPy's cupy_backends/cuda/api/runtime.pyx (``cpdef int getDeviceCount()``,
``cpdef getDeviceProperties(int device)`` returning a dict whose ``name`` is bytes); errors as its
CUDARuntimeError, whose message is ``<cudaError name>: <description>``.
"""

from __future__ import annotations

from .. import _device


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


def getDeviceCount() -> int:  # noqa: N802 - CuPy's name
    if not _device.present():
        raise CUDARuntimeError("cudaErrorNoDevice", "no CUDA-capable device is detected")
    return 1


def getDeviceProperties(device: int) -> dict:  # noqa: N802 - CuPy's name
    if device != 0 or getDeviceCount() < 1:
        raise CUDARuntimeError("cudaErrorInvalidDevice", "invalid device ordinal")
    return {"name": _device.name(), "major": 12, "minor": 1, "multiProcessorCount": 48}
