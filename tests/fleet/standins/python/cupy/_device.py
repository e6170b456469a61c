"""The stand-in's one GPU: kernels queue on a modelled timeline, and the fake fleet's nvidia-smi stand-in is
told the GPU is under load through its marker file (SPARKFLEET_FAKE_GPU_LOAD, read tests/fleet/standins/nvidia-smi).

The GPU is wired to this process when SPARKFLEET_FAKE_GPU_LOAD names a marker path: the same path the host's
nvidia-smi stand-in reads (in a chroot, a directory bound at the same path). Without it there is no device, as
CuPy on a machine without a GPU: cupy.cuda.runtime.getDeviceCount() raises cudaErrorNoDevice.

The marker is created at the first kernel and removed when the process exits (normally or by SIGTERM): the load
is back to back from there on (gpu_probe.py's loop), and the nvidia-smi stand-in takes the marker's mtime as the
start of the load and its removal as the end. A SIGKILLed process leaves the marker behind (the GPU then reads as
loaded until it is removed).

Kernel times are modelled, not measured: a product of (m x k) by (k x n) takes 2mkn / FLOPS seconds, a copy of B
bytes 2B / BANDWIDTH (read and written), at illustrative GB10-like rates. synchronize() sleeps until the queue
is drained, so a load loop leaves the CPU idle as a real GPU would.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import time

MARKER_ENV = "SPARKFLEET_FAKE_GPU_LOAD"
#: Illustrative rates (not the report's yardstick: nothing asserts them): dense fp16 products and LPDDR5X copies.
FLOPS = 100e12
BANDWIDTH_BYTES_S = 273e9
#: What getDeviceProperties(0)["name"] says, per the nvidia-smi stand-in's SPARKFLEET_FAKE_GPU_MODEL.
NAMES = {"gb10": b"NVIDIA GB10", "h100": b"NVIDIA H100 80GB HBM3", "h200": b"NVIDIA H200"}

_busy_until = 0.0
_marker: str | None = None


def marker_path() -> str | None:
    return os.environ.get(MARKER_ENV) or None


def present() -> bool:
    return marker_path() is not None


def name() -> bytes:
    return NAMES.get(os.environ.get("SPARKFLEET_FAKE_GPU_MODEL", "gb10").lower(), NAMES["gb10"])


def launch(seconds: float) -> None:
    """Queue a kernel of ``seconds`` behind the ones queued; the GPU is under load from the first."""
    global _busy_until
    _start_load()
    now = time.monotonic()
    _busy_until = max(now, _busy_until) + max(0.0, seconds)


def synchronize() -> None:
    """Wait until every queued kernel has run (cudaDeviceSynchronize)."""
    wait = _busy_until - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def _start_load() -> None:
    global _marker
    path = marker_path()
    if _marker is not None or path is None:
        return
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
    except OSError as exc:  # the "GPU" still computes; nvidia-smi just will not see the load
        print(f"cupy stand-in: cannot create the load marker {path}: {exc}", file=sys.stderr)
        return
    _marker = path
    atexit.register(_stop_load)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _stop_load() -> None:
    global _marker
    if _marker is not None:
        with contextlib.suppress(OSError):
            os.unlink(_marker)
        _marker = None


def _on_sigterm(signum, _frame) -> None:
    _stop_load()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
