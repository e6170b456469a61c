"""cupy.random.default_rng(seed) and Generator.standard_normal(size=None, dtype=float64), as documented at
https://docs.cupy.dev/en/stable/reference/generated/cupy.random.default_rng.html (float32/float64 only, like
NumPy's Generator.standard_normal)."""

from __future__ import annotations

import numpy

from .._array import ndarray


class Generator:
    def __init__(self, seed=None) -> None:
        self._rng = numpy.random.default_rng(seed)

    def standard_normal(self, size=None, dtype=numpy.float64) -> ndarray:
        dtype = numpy.dtype(dtype)
        if dtype not in (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64)):
            raise TypeError(f"Unsupported dtype {dtype.name} for standard_normal")
        shape = () if size is None else ((size,) if isinstance(size, int) else tuple(size))
        return ndarray(shape, dtype, lambda tile: self._rng.standard_normal(tile, dtype=dtype))


def default_rng(seed=None) -> Generator:
    return Generator(seed)
