"""Stand-in for CuPy (tests only; GPU software that cannot run here): exactly the calls sparkfleet's readiness
probe makes (roles/matrix/files/gpu_probe.py's cupy_backend), on small NumPy tiles, with the "GPU" under load
for the fake fleet's nvidia-smi stand-in while its kernels run (cupy/_device.py says how).

    cupy.__version__, cupy.float16 / float32 / uint8
    cupy.cuda.runtime.getDeviceCount(), cupy.cuda.runtime.getDeviceProperties(0)["name"]
    cupy.random.default_rng(seed).standard_normal(shape, dtype=cupy.float32).astype(cupy.float16)
    cupy.matmul(a, b), cupy.empty(shape, dtype=cupy.uint8), cupy.copyto(dst, src), cupy.cuda.Device(0).synchronize()

Signatures as CuPy's API reference (https://docs.cupy.dev/en/stable/reference/): cupy.matmul(x1, x2),
cupy.empty(shape, dtype=float, order='C'), cupy.copyto(dst, src, casting='same_kind', where=None). Anything
else is missing on purpose: a caller that needs more fails with AttributeError rather than getting made-up
behaviour. Installed in the fake fleet's test image (tests/fleet/testimage.py); the device exists only where
SPARKFLEET_FAKE_GPU_LOAD is set.
"""

from __future__ import annotations

import numpy

from . import _device, cuda, random
from ._array import ndarray

__version__ = "13.6.0+sparkfleet.standin"

float16, float32, float64, uint8 = numpy.float16, numpy.float32, numpy.float64, numpy.uint8


def _check_device() -> None:
    cuda.runtime.getDeviceCount()  # no fake GPU wired to this process: cudaErrorNoDevice, as CuPy without a GPU


def empty(shape, dtype=float, order="C") -> ndarray:
    if order not in ("C", "F"):
        raise ValueError(f"order not understood: {order!r}")
    _check_device()
    return ndarray((shape,) if isinstance(shape, int) else shape, dtype)


def matmul(x1: ndarray, x2: ndarray) -> ndarray:
    """2-D products only (all gpu_probe.py multiplies)."""
    if len(x1.shape) != 2 or len(x2.shape) != 2:
        raise ValueError("cupy stand-in: matmul of 2-D arrays only")
    (m, k), (k2, n) = x1.shape, x2.shape
    if k != k2:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 (size {k2} is "
                         f"different from {k})")
    dtype = numpy.result_type(x1.dtype, x2.dtype)
    a, b = x1._tile, x2._tile
    inner = min(a.shape[1], b.shape[0])
    _device.launch(2.0 * m * n * k / _device.FLOPS)
    return ndarray((m, n), dtype, lambda _tile: numpy.matmul(a[:, :inner], b[:inner, :]))


def copyto(dst: ndarray, src: ndarray, casting="same_kind", where=None) -> None:
    if where is not None:
        raise NotImplementedError("cupy stand-in: copyto(where=...)")
    if dst.shape != src.shape:
        raise ValueError(f"could not broadcast input array from shape {src.shape} into shape {dst.shape}")
    if not numpy.can_cast(src.dtype, dst.dtype, casting):
        raise TypeError(f"Cannot cast array data from {src.dtype} to {dst.dtype} according to the rule {casting!r}")
    dst._tile[...] = src._tile
    _device.launch(2.0 * src.nbytes / _device.BANDWIDTH_BYTES_S)


__all__ = ["copyto", "cuda", "empty", "float16", "float32", "float64", "matmul", "ndarray", "random", "uint8",
           "__version__"]
