"""Lazy tensors: a shape, a dtype, a device and ONE fill value (every element is equal in what the NCCL test makes:
torch.full, torch.zeros, an all-reduce of those, a comparison with a scalar, torch.all), so a 2 GiB buffer costs a
few bytes here. Work on a CUDA tensor queues its bytes on the device's stream (_gpu.py).

Signatures as PyTorch 2.9's reference: ``torch.full(size, fill_value, *, dtype=None, device=None)``,
``torch.zeros(*size, dtype=None, device=None)``, ``torch.all(input)`` (a 0-dim bool tensor),
``torch.device(type, index=None)`` or ``torch.device("cuda:0")``; ``Tensor.item()`` of a 1-element tensor
(torch/_tensor.py; the CUDA copy to the host waits for the stream). Error texts as PyTorch's.
"""

from __future__ import annotations

import math
import struct
from numbers import Number

from . import _gpu


class _DType:
    def __init__(self, name: str, itemsize: int, cast) -> None:
        self._name, self._itemsize, self._cast = name, itemsize, cast

    def __repr__(self) -> str:
        return "torch." + self._name


def _to_float32(value) -> float:
    """float32's rounding, as the GPU stores the value."""
    try:
        return struct.unpack("f", struct.pack("f", float(value)))[0]
    except OverflowError:
        return math.copysign(math.inf, float(value))


float32 = _DType("float32", 4, _to_float32)
_bool = _DType("bool", 1, bool)


class device:  # noqa: N801 - torch's name
    def __init__(self, type: str, index: int | None = None) -> None:  # noqa: A002 - torch's argument name
        kind, _, ordinal = str(type).partition(":")
        if kind not in ("cuda", "cpu"):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {type}")
        if ordinal:
            index = int(ordinal)
        self.type, self.index = kind, (None if index is None else int(index))

    def __eq__(self, other) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{index})"


def _device_of(where) -> device:
    where = device("cpu") if where is None else (where if isinstance(where, device) else device(where))
    if where.type == "cuda":
        _gpu.check_index(where.index)
    return where


class Tensor:
    def __init__(self, shape, dtype: _DType, where: device, fill) -> None:
        self._shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in self._shape):
            raise RuntimeError(f"Trying to create tensor with negative dimension {min(self._shape)}: "
                               f"{list(self._shape)}")
        self._dtype, self._device, self._fill = dtype, where, dtype._cast(fill)
        self._numel = math.prod(self._shape)
        self._work(self._nbytes())  # the fill kernel writes every byte

    def _nbytes(self) -> int:
        return self._numel * self._dtype._itemsize

    def _work(self, nbytes: int) -> None:
        if self._device.type == "cuda":
            _gpu.stream_bytes(nbytes)

    def __eq__(self, other) -> Tensor:
        if isinstance(other, bool) or not isinstance(other, Number):
            raise TypeError("torch stand-in: tensor == <number> only")
        self._work(self._nbytes())  # read; the result's constructor counts its writes
        return Tensor(self._shape, _bool, self._device, self._fill == self._dtype._cast(other))

    __hash__ = object.__hash__  # tensors hash by identity, as torch's do

    def item(self):
        if self._numel != 1:
            raise RuntimeError(f"a Tensor with {self._numel} elements cannot be converted to Scalar")
        if self._device.type == "cuda":
            _gpu.synchronize()  # the copy to the host waits for the stream
        return self._fill

    def __bool__(self) -> bool:
        if self._numel != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __repr__(self) -> str:
        return (f"tensor(shape={list(self._shape)}, all {self._fill!r}, dtype={self._dtype!r}, "
                f"device='{self._device}') [stand-in]")


def _float_dtype(dtype, fill) -> _DType:
    if dtype is None and isinstance(fill, float):
        return float32  # torch's default dtype for a float fill
    if dtype is not float32:
        raise NotImplementedError(f"torch stand-in: float32 tensors only, got dtype {dtype!r} for {fill!r}")
    return dtype


def full(size, fill_value, *, dtype=None, device=None) -> Tensor:  # noqa: A002 - torch's argument names
    return Tensor(size, _float_dtype(dtype, fill_value), _device_of(device), fill_value)


def zeros(*size, dtype=None, device=None) -> Tensor:  # noqa: A002 - torch's argument names
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    return Tensor(shape, _float_dtype(dtype, 0.0), _device_of(device), 0.0)


def all(input) -> Tensor:  # noqa: A001, A002 - torch's names
    input._work(input._nbytes())
    return Tensor((), _bool, input._device, input._numel == 0 or bool(input._fill))
