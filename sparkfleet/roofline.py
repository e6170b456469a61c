"""The memory-bandwidth roofline of LLM decoding: the fastest decode a host's memory bandwidth allows, and how
close a measured decode figure comes to it.

Decoding one token reads every weight once (plus the KV cache of the sequence), so at batch 1::

    roofline tok/s = bandwidth (bytes/s) / (weight bytes + KV bytes per token x context tokens)

e.g. 2.47 GB of bf16 weights at 3.0 TB/s: 3.0e12 / 2.47e9 = 1,214.6 tok/s.

**Batch / concurrency.** One decode step of a batch of ``B`` sequences reads the weights once and each
sequence's KV cache, and yields ``B`` tokens, so the *aggregate* roofline is::

    B x bandwidth / (weight bytes + B x KV bytes per token x context tokens)

and the per-sequence roofline is that divided by ``B``. :func:`assess` compares a measured *aggregate*
decode throughput (all sequences together, output tokens / decode time) with the aggregate roofline at the
batch the engine actually ran (for a closed-loop benchmark at concurrency ``C``, ``batch=C`` is the best
available figure; the engine may have batched fewer). The figure is an upper bound as long as decode reads
its weights from memory once per step: at large batches decode turns compute-bound, the roofline stays an
upper bound and the percentage merely falls. A figure above 100% therefore means the measurement or its
labels are wrong (wrong model, tokens miscounted, a cache that served the output) and is flagged
``implausible`` -- except with speculative decoding, which emits several tokens per weight read; pass
``speculative=True`` to keep the percentage but not the flag. For a mixture-of-experts model pass the
*active* parameters: the roofline is then still an upper bound (a batch touches at least the active
experts).

Bytes per parameter (:data:`DTYPE_BYTES`): fp32 4, bf16/fp16 2, fp8/int8 1, int4 0.5; ``nvfp4`` 0.5625 =
4-bit E2M1 values plus one FP8 (E4M3) scale per 16 values (the per-tensor FP32 scale is negligible; NVIDIA
ModelOpt's NVFP4 checkpoint layout, ``group_size: 16``); ``mxfp4`` 0.53125 = 4-bit values plus one E8M0 scale
per 32 (OCP Microscaling).

Units: bytes, bytes/s, tokens/s. GB = 1e9 bytes, TB = 1e12 (as bandwidths are quoted).
"""

from __future__ import annotations

import math
from typing import Any

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "float32": 4.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp16": 2.0,
    "float16": 2.0,
    "half": 2.0,
    "fp8": 1.0,
    "float8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "nvfp4": 0.5 + 1.0 / 16,
    "mxfp4": 0.5 + 1.0 / 32,
}

#: A percentage above this (1.0 = 100%) is implausible without speculative decoding.
IMPLAUSIBLE_ABOVE = 1.0


class RooflineError(ValueError):
    """A bad argument; the message names it."""


def _positive(name: str, value: Any, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        raise RooflineError(f"{name}: not a finite number: {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise RooflineError(f"{name}: must be {'>=' if allow_zero else '>'} 0, got {value!r}")
    return float(value)


def dtype_bytes(dtype: str) -> float:
    """Bytes per parameter (or per KV element) of ``dtype`` (case-insensitive, see :data:`DTYPE_BYTES`)."""
    key = str(dtype).strip().lower().replace("-", "_")
    if key.startswith("torch."):
        key = key[len("torch."):]
    if key not in DTYPE_BYTES:
        raise RooflineError(f"dtype: unknown {dtype!r} (known: {', '.join(sorted(DTYPE_BYTES))})")
    return DTYPE_BYTES[key]


def weight_bytes(params: float, dtype: str) -> float:
    """Bytes of ``params`` parameters stored as ``dtype``."""
    return _positive("params", params) * dtype_bytes(dtype)


def active_weight_bytes(total_bytes: float, expert_bytes: float, experts: int, experts_per_token: int) -> float:
    """Bytes a mixture-of-experts model reads per token: everything but the routed experts (attention, embeddings,
    router, shared experts, dense layers) plus ``experts_per_token / experts`` of the routed experts' bytes (every
    expert of a model is the same size). E.g. 60 GB of which 56 GB are 128 experts, 4 per token: 4 + 56 x 4/128 =
    5.75 GB. It is the least a decode step can read at any batch (a batch of several tokens usually touches more
    experts), so the roofline from it stays an upper bound."""
    total = _positive("total_bytes", total_bytes)
    routed = _positive("expert_bytes", expert_bytes, allow_zero=True)
    for name, value in (("experts", experts), ("experts_per_token", experts_per_token)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise RooflineError(f"{name}: a positive integer, got {value!r}")
    if experts_per_token > experts:
        raise RooflineError(f"experts_per_token: {experts_per_token} is more than the {experts} experts")
    if routed > total:
        raise RooflineError(f"expert_bytes: {routed:g} is more than the total {total:g}")
    return total - routed + routed * experts_per_token / experts


def bytes_per_step(weight_bytes_total: float, kv_bytes_token: float = 0.0, context_tokens: float = 0.0,
                   batch: int = 1) -> float:
    """Bytes one decode step reads: the weights once, plus each of ``batch`` sequences' KV cache."""
    w = _positive("weight_bytes", weight_bytes_total)
    kv = _positive("kv_bytes_per_token", kv_bytes_token, allow_zero=True)
    ctx = _positive("context_tokens", context_tokens, allow_zero=True)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise RooflineError(f"batch: a positive integer, got {batch!r}")
    return w + batch * kv * ctx


def decode_roofline_tok_s(bandwidth_bytes_s: float, weight_bytes_total: float, kv_bytes_token: float = 0.0,
                          context_tokens: float = 0.0, batch: int = 1) -> float:
    """Aggregate decode tokens/s the bandwidth allows at ``batch`` (per-sequence: divide by ``batch``)."""
    bw = _positive("bandwidth_bytes_s", bandwidth_bytes_s)
    return batch * bw / bytes_per_step(weight_bytes_total, kv_bytes_token, context_tokens, batch)


def assess(measured_tok_s: float | None, bandwidth_bytes_s: float, weight_bytes_total: float,
           kv_bytes_token: float = 0.0, context_tokens: float = 0.0, batch: int = 1,
           speculative: bool = False) -> dict[str, Any]:
    """A measured aggregate decode figure against its roofline.

    Returns ``{"roofline_tok_s", "percent_of_roofline", "implausible", "batch", "bytes_per_step",
    "bandwidth_bytes_s", "speculative"}``; ``percent_of_roofline`` is ``None`` when nothing was measured.
    ``implausible`` is True when the figure exceeds the roofline (and ``speculative`` is False)."""
    roofline = decode_roofline_tok_s(bandwidth_bytes_s, weight_bytes_total, kv_bytes_token, context_tokens, batch)
    percent = None
    if measured_tok_s is not None:
        percent = 100.0 * _positive("measured_tok_s", measured_tok_s, allow_zero=True) / roofline
    return {
        "roofline_tok_s": roofline,
        "percent_of_roofline": percent,
        "implausible": bool(percent is not None and percent > 100.0 * IMPLAUSIBLE_ABOVE and not speculative),
        "batch": batch,
        "bytes_per_step": bytes_per_step(weight_bytes_total, kv_bytes_token, context_tokens, batch),
        "bandwidth_bytes_s": float(bandwidth_bytes_s),
        "speculative": bool(speculative),
    }
