"""The stand-in's device array: its full shape and dtype, and a small NumPy tile (at most TILE elements a side)
that the "kernels" really compute on. A product's tile is the product of the operands' tiles, not a corner of the
real product: the numbers are a token of work done, nothing is checked against them."""

from __future__ import annotations

import numpy

from . import _device

TILE = 64


class ndarray:  # noqa: N801 - CuPy's name
    def __init__(self, shape, dtype, fill=None) -> None:
        self.shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in self.shape):
            raise ValueError(f"negative dimensions are not allowed: {self.shape}")
        self.dtype = numpy.dtype(dtype)
        tile = tuple(min(n, TILE) for n in self.shape)
        self._tile = numpy.zeros(tile, dtype=self.dtype) if fill is None else numpy.asarray(fill(tile), self.dtype)

    @property
    def size(self) -> int:
        return int(numpy.prod(self.shape, dtype=numpy.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def astype(self, dtype) -> ndarray:
        out = ndarray(self.shape, dtype, lambda _tile: self._tile.astype(dtype))
        _device.launch(2 * max(self.nbytes, out.nbytes) / _device.BANDWIDTH_BYTES_S)
        return out

    def __repr__(self) -> str:
        return f"cupy.ndarray(shape={self.shape}, dtype={self.dtype.name}) [stand-in]"
