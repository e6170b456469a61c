"""torch.cuda.nccl.version(): NCCL's version as PyTorch 2.9's torch/cuda/nccl.py returns it, a tuple
(major, minor, patch), with the suffix as a fourth item only when NCCL has one (a release has none). It needs no
GPU (ncclGetVersion). The version is SPARKFLEET_FAKE_NCCL_VERSION's (default 2.27.7+cuda13.0: (2, 27, 7))."""

from __future__ import annotations

from .. import _fabric


def version() -> tuple:
    return _fabric.version_tuple()


__all__ = ["version"]
