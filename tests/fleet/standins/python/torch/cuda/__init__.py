"""torch.cuda: the calls of the NCCL test, as PyTorch 2.9's torch/cuda/__init__.py and torch/cuda/streams.py.

``is_available()`` never fails (False without the device); ``set_device``, ``get_device_name``, ``synchronize`` and
an event's ``record`` initialise CUDA and fail with "No CUDA GPUs are available" without it; ``empty_cache()`` does
nothing unless CUDA was initialised (here: nothing, there is no caching allocator). ``Event.elapsed_time`` is in
milliseconds, from the start event to the end event, and needs both recorded with ``enable_timing=True`` and the end
one completed (aten/src/ATen/cuda/CUDAEvent.h's checks; cudaEventElapsedTime's cudaErrorNotReady).
"""

from __future__ import annotations

from .. import _gpu
from .._tensor import device as _device
from . import nccl


def _index(where) -> int | None:
    """torch.cuda._utils._get_device_index: an int, "cuda:N" or a torch.device of type cuda; None: the current."""
    if where is None or isinstance(where, int):
        return where
    where = where if isinstance(where, _device) else _device(where)
    if where.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {where}")
    return where.index


def is_available() -> bool:
    return _gpu.present()


def set_device(device) -> None:  # noqa: A002 - torch's argument name
    _gpu.check_index(_index(device))


def get_device_name(device=None) -> str:  # noqa: A002 - torch's argument name
    _gpu.check_index(_index(device))
    return _gpu.name()


def synchronize(device=None) -> None:  # noqa: A002 - torch's argument name
    _gpu.check_index(_index(device))
    _gpu.synchronize()


def empty_cache() -> None:
    return None


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self._timing, self._at = bool(enable_timing), None

    def record(self, stream=None) -> None:
        if stream is not None:
            raise NotImplementedError("torch stand-in: Event.record() on the current stream only")
        _gpu.require()
        self._at = _gpu.queue_end()  # the event completes when the work queued before it has run

    def synchronize(self) -> None:
        if self._at is not None:
            _gpu.wait_until(self._at)

    def elapsed_time(self, end_event: Event) -> float:
        if not (self._timing and end_event._timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._at is None or end_event._at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if not _gpu.reached(end_event._at):
            raise RuntimeError("CUDA error: device not ready")
        return (end_event._at - self._at) * 1000.0


__all__ = ["Event", "empty_cache", "get_device_name", "is_available", "nccl", "set_device", "synchronize"]
