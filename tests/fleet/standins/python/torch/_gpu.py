"""The stand-in's one CUDA device and its stream: work queues on a modelled timeline and the CPU waits only where
CUDA makes it wait (a synchronize, an event's synchronize, ``.item()``), so events recorded around queued work
measure the work's modelled time, as CUDA events measure a GPU's.

The device exists where SPARKFLEET_FAKE_TORCH_CUDA is set (non-empty). Without it every CUDA call fails as PyTorch's
do on a machine without a GPU: "No CUDA GPUs are available" (c10/cuda/CUDAFunctions.cpp,
device_count_ensure_non_zero, raised through torch.cuda's lazy initialisation as a RuntimeError).

Fills and comparisons of a tensor stream its bytes at an illustrative LPDDR5X rate (a GB10's 273 GB/s); nothing
asserts it.
"""

from __future__ import annotations

import os
import time

PRESENT_ENV = "SPARKFLEET_FAKE_TORCH_CUDA"
BANDWIDTH_BYTES_S = 273e9
#: torch.cuda.get_device_name per SPARKFLEET_FAKE_GPU_MODEL, as the nvidia-smi and cupy stand-ins name them.
NAMES = {"gb10": "NVIDIA GB10", "h100": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200"}

_busy_until = 0.0


def present() -> bool:
    return bool(os.environ.get(PRESENT_ENV))


def require() -> None:
    if not present():
        raise RuntimeError("No CUDA GPUs are available")


def name() -> str:
    return NAMES.get(os.environ.get("SPARKFLEET_FAKE_GPU_MODEL", "gb10").lower(), NAMES["gb10"])


def check_index(index) -> None:
    require()
    if index not in (None, 0):  # one GPU: ordinal 0 only
        raise RuntimeError("CUDA error: invalid device ordinal")


def launch(seconds: float) -> None:
    """Queue ``seconds`` of work behind what is queued."""
    global _busy_until
    _busy_until = max(time.monotonic(), _busy_until) + max(0.0, seconds)


def stream_bytes(nbytes: int) -> None:
    launch(nbytes / BANDWIDTH_BYTES_S)


def queue_end() -> float:
    """When the work queued so far will have run (what an event recorded now will say)."""
    return max(time.monotonic(), _busy_until)


def reached(moment: float) -> bool:
    return time.monotonic() >= moment


def wait_until(moment: float) -> None:
    """Block the CPU until ``moment`` (time.monotonic()); bounded by the work queued, which ends."""
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def synchronize() -> None:
    wait_until(_busy_until)
