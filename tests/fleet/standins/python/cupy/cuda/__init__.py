"""cupy.cuda: ``runtime`` and ``Device(id).synchronize()`` (CuPy's cupy/cuda/device.pyx ``Device.synchronize``:
waits for every kernel queued on the device)."""

from __future__ import annotations

from .. import _device
from . import runtime


class Device:
    def __init__(self, device: int = 0) -> None:
        runtime.getDeviceProperties(device)  # an invalid ordinal fails here, as CuPy's does on use
        self.id = device

    def synchronize(self) -> None:
        _device.synchronize()


__all__ = ["Device", "runtime"]
