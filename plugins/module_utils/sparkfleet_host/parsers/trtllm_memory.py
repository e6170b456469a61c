"""TensorRT-LLM's memory-profiling and KV-cache allocation log lines.

The PyTorch backend profiles memory, then sizes the KV cache as
``kv = fraction x (device_total - peak + tmp_kv)`` (DESIGN.md, "KV-cache budget") and logs it in one
line whose tail grew over releases::

    Peak memory during memory usage profiling (torch + non-torch): P GiB, available KV cache memory when
    calculating max tokens: A GiB                                                        (oldest)
      ..., fraction is set F, kv size is K                                               (0.19-ish)
      ..., fraction is set F, kv size is K. device total memory T GiB, , tmp kv_mem t GiB (1.0/1.1)
      ..., fraction is set F, kv size per token is K. device total memory T GiB,
           temporary kv cache memory during profiling t GiB                              (1.2+)

so every piece is matched on its own. The C++ runtime then logs what it really allocated
(``[MemUsageChange] Allocated X GiB for max tokens in paged KV cache (N).``); the TensorRT-engine path
logs ``Memory usage when calculating max tokens in paged kv cache: total: T GiB, available: A GiB``.
The allocation line comes from the C++ KVCacheManager (V1); where TensorRT-LLM 1.3+ picks the Python KV cache
manager V2 (``KvCacheConfig.use_kv_cache_manager_v2``) it may be absent, and ``kv_cache_gib`` is then the
profiling's budget: its source says which (``allocation: ...`` or ``budget: ...``, :func:`kv_source_kind`).

Besides the four memory metrics, the Peak memory line gives two record metrics of the budget itself:
``tmp_kv_gib`` (the tmp_kv term, where the line prints it) and ``kv_budget_residual_gib`` (how far the line's
available KV lies from ``fraction x (device_total - peak + tmp_kv)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .result import ParseResult, to_gib, to_number
from .trtllm_report import banner_version

MEMORY_EXPECTED = ("peak_memory_gib", "kv_cache_gib", "device_total_gib", "kv_fraction")

SRC_PEAK = "log: Peak memory during memory usage profiling"
SRC_AVAILABLE = "log: available KV cache memory when calculating max tokens"
SRC_FRACTION = "log: Peak memory line, fraction is set"
SRC_TOTAL = "log: Peak memory line, device total memory"
SRC_TMP_KV = "log: Peak memory line, tmp kv_mem / temporary kv cache memory during profiling"
SRC_RESIDUAL = "log: Peak memory line, available - fraction x (device total - peak + tmp kv)"
SRC_RESIDUAL_NO_TMP = "log: Peak memory line, available - fraction x (device total - peak); the line has no tmp kv"
#: kv_cache_gib's sources say what the figure is: ``allocation:`` the KV cache the C++ KVCacheManager allocated
#: (V1; TensorRT-LLM 1.3+ may pick the Python KV cache manager V2, which does not log that line), ``budget:``
#: the profiling's figure, which is what the engine meant to allocate, not what it did.
SRC_ALLOC = "allocation: log [MemUsageChange] Allocated ... for max tokens in paged KV cache"
SRC_ESTIMATED = "budget: log Estimated max memory in KV cache (no [MemUsageChange] allocation line)"
SRC_KV_BUDGET = ("budget: log Peak memory line, available KV cache memory when calculating max tokens "
                 "(no [MemUsageChange] allocation line)")
SRC_CPP_TOTAL = "log: Memory usage when calculating max tokens in paged kv cache"

_NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_SIZE = _NUM + r"\s*(GiB|GB|MiB|MB|KiB|KB)\b"


def _rx(pattern: str) -> re.Pattern[str]:
    """Patterns are written with single spaces; logs may have any run of blanks there."""
    return re.compile(pattern.replace(" ", r"\s+"), re.IGNORECASE)


_PEAK = _rx(r"Peak memory during memory usage profiling \(torch \+ non-torch\)\s*:\s*" + _SIZE)
_AVAILABLE = _rx(r"available KV cache memory when calculating max tokens\s*:\s*" + _SIZE)
_FRACTION = _rx(r"fraction is set (?:to )?" + _NUM)
_KV_SIZE = _rx(r"kv size (?:per token )?is (\d+)")
_TOTAL = _rx(r"device total memory\s*:?\s*" + _SIZE)
_TMP_KV = _rx(r"(?:tmp kv_mem|temporary kv cache memory during profiling)\s*:?\s*" + _SIZE)
_ALLOC = _rx(r"\[MemUsageChange\]\s*Allocated " + _SIZE + r" for max tokens(?: in paged KV cache)?\s*\((\d+)\)")
_ESTIMATED = _rx(r"Estimated max memory in KV cache\s*:\s*" + _SIZE)
_CPP_USAGE = _rx(
    r"Memory usage when calculating max tokens in paged kv cache\s*:\s*total\s*:\s*"
    + _SIZE
    + r"\s*,\s*available\s*:\s*"
    + _SIZE
)
_RUNTIME = re.compile(
    r"max_seq_len=(\d+),\s*max_num_requests=(\d+),\s*max_num_tokens=(\d+),\s*"
    r"max_batch_size=(\d+)"
)

#: Single-figure informational lines -> key in ``extra`` (last occurrence wins).
_INFO_LINES: dict[str, re.Pattern[str]] = {
    "weights_inside_torch_gib": _rx(
        r"Memory used after loading model weights \(inside torch\) in memory usage "
        r"profiling\s*:\s*" + _SIZE
    ),
    "weights_outside_torch_gib": _rx(
        r"Memory used after loading model weights \(outside torch\) in memory usage "
        r"profiling\s*:\s*" + _SIZE
    ),
    "activations_inside_torch_gib": _rx(
        r"Memory dynamically allocated during inference \(inside torch\) in "
        r"memory usage profiling\s*:\s*" + _SIZE
    ),
    "outside_torch_gib": _rx(r"Memory used outside torch \([^)]*\) in memory usage profiling\s*:\s*" + _SIZE),
    "estimated_kv_gib": _ESTIMATED,
}


@dataclass
class ProfilingLine:
    """One 'Peak memory during memory usage profiling' line, in GiB."""

    index: int
    peak: float | None = None
    available: float | None = None
    fraction: float | None = None
    kv_size_per_token: int | None = None
    total: float | None = None
    tmp_kv: float | None = None


@dataclass
class Allocation:
    index: int
    gib: float
    tokens: int


@dataclass
class _Found:
    profiles: list[ProfilingLine] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    cpp_total: float | None = None
    cpp_available: float | None = None
    cpp_index: int | None = None


def _size(match: re.Match[str] | None, group: int = 1) -> float | None:
    if match is None:
        return None
    return to_gib(to_number(match.group(group)), match.group(group + 1))


def _int(text: str | None) -> int | None:
    number = to_number(text)
    return None if number is None else int(number)


def profiling_line(index: int, line: str) -> ProfilingLine | None:
    peak = _PEAK.search(line)
    if peak is None:
        return None
    tail = line[peak.end() :]
    fraction = _FRACTION.search(tail)
    kv_size = _KV_SIZE.search(tail)
    return ProfilingLine(
        index=index,
        peak=_size(peak),
        available=_size(_AVAILABLE.search(tail)),
        fraction=to_number(fraction.group(1)) if fraction else None,
        kv_size_per_token=_int(kv_size.group(1)) if kv_size else None,
        total=_size(_TOTAL.search(tail)),
        tmp_kv=_size(_TMP_KV.search(tail)),
    )


def _scan(lines: list[str], result: ParseResult) -> _Found:
    found = _Found()
    for index, line in enumerate(lines):
        profile = profiling_line(index, line)
        if profile is not None:
            found.profiles.append(profile)
            continue
        alloc = _ALLOC.search(line)
        if alloc:
            gib, tokens = _size(alloc), _int(alloc.group(3))
            if gib is not None and tokens is not None:
                found.allocations.append(Allocation(index, gib, tokens))
            continue
        cpp = _CPP_USAGE.search(line)
        if cpp:
            found.cpp_total, found.cpp_available = _size(cpp, 1), _size(cpp, 3)
            found.cpp_index = index
            continue
        runtime = _RUNTIME.search(line)
        if runtime:
            for key, value in zip(  # noqa: B905 (host code: Python 3.8 has no strict=)
                ("max_seq_len", "max_num_requests", "max_num_tokens", "max_batch_size"),
                runtime.groups(),
            ):
                result.extra[key] = int(value)
            continue
        for key, pattern in _INFO_LINES.items():
            figure = _size(pattern.search(line))
            if figure is not None:
                result.extra[key] = figure
                break
    return found


def _final_profile(found: _Found, result: ParseResult) -> ProfilingLine | None:
    if not found.profiles:
        return None
    if len(found.profiles) > 1:
        result.warnings.append(
            f"{len(found.profiles)} memory-profiling (Peak memory) lines; using the last (final) one"
        )
    result.extra["profiling_lines"] = len(found.profiles)
    return found.profiles[-1]


def _record_profile(profile: ProfilingLine, result: ParseResult) -> None:
    result.set_metric("peak_memory_gib", profile.peak, SRC_PEAK)
    result.set_metric("device_total_gib", profile.total, SRC_TOTAL)
    result.set_metric("kv_fraction", profile.fraction, SRC_FRACTION)
    result.set_metric("tmp_kv_gib", profile.tmp_kv, SRC_TMP_KV)
    for key, value in (
        ("available_kv_gib", profile.available),
        ("kv_size_per_token", profile.kv_size_per_token),
    ):
        if value is not None:
            result.extra[key] = value
    if None not in (profile.fraction, profile.total, profile.peak, profile.available):
        # How well the line fits the KV budget (DESIGN.md); 2-decimal rounding leaves ~0.01 GiB.
        budget = profile.fraction * (profile.total - profile.peak + (profile.tmp_kv or 0.0))
        result.set_metric("kv_budget_residual_gib", round(profile.available - budget, 4),
                          SRC_RESIDUAL if profile.tmp_kv is not None else SRC_RESIDUAL_NO_TMP)


def _final_allocations(profile: ProfilingLine | None, found: _Found) -> list[Allocation]:
    """Allocations that are the real KV cache, not the temporary one made for profiling.

    PyTorch backend: those after the final profiling line. TensorRT-engine runtime: those after its
    'Memory usage when calculating max tokens' line. Without either, an allocation cannot be told apart.
    """
    if profile is not None:
        return [a for a in found.allocations if a.index > profile.index]
    if found.cpp_index is not None:
        return [a for a in found.allocations if a.index > found.cpp_index]
    return []


def kv_source_kind(source: str | None) -> str | None:
    """What a record's kv_cache_gib is, from its metric source: 'allocation' (the [MemUsageChange] line),
    'budget' (the profiling's available or estimated figure), None (another engine or unknown). Sources
    written before these labels had the prefix are recognised by their line."""
    text = source or ""
    if text.startswith("allocation:") or ("[MemUsageChange]" in text and not text.startswith("budget:")):
        return "allocation"
    if text.startswith("budget:") or SRC_AVAILABLE in text or "Estimated max memory in KV cache" in text:
        return "budget"
    return None


def _record_kv_cache(profile: ProfilingLine | None, found: _Found, result: ParseResult) -> None:
    """The KV cache really allocated; without that line (the log stops before it, or the engine's KV cache
    manager does not log it) the profiling's budget, labelled as one."""
    final = _final_allocations(profile, found)
    if final:
        result.set_metric("kv_cache_gib", final[-1].gib, SRC_ALLOC)
        result.extra["kv_max_tokens"] = final[-1].tokens
        result.extra["kv_cache_source"] = "allocation"
    elif profile is not None and profile.available is not None:
        result.set_metric("kv_cache_gib", profile.available, SRC_KV_BUDGET)
        result.extra["kv_cache_source"] = "budget"
    elif "estimated_kv_gib" in result.extra:
        result.set_metric("kv_cache_gib", result.extra["estimated_kv_gib"], SRC_ESTIMATED)
        result.extra["kv_cache_source"] = "budget"
    elif found.allocations:
        result.extra["kv_alloc_unconfirmed_gib"] = found.allocations[-1].gib
        result.warnings.append(
            "KV-cache allocation seen without a profiling line: it may be the temporary "
            "one made for profiling, so kv_cache_gib is left out"
        )


def parse_memory_lines(text: str) -> ParseResult:
    """Memory figures from a TensorRT-LLM log; ``kind`` is 'trtllm-memory' when any line was found."""
    result = ParseResult(kind="unknown", engine="trtllm-bench")
    found = _scan(text.splitlines(), result)
    profile = _final_profile(found, result)
    if profile is not None:
        _record_profile(profile, result)
    _record_kv_cache(profile, found, result)
    if found.cpp_total is not None:
        result.set_metric("device_total_gib", found.cpp_total, SRC_CPP_TOTAL)
        if found.cpp_available is not None:
            result.extra["cpp_available_gib"] = found.cpp_available
    if result.metrics or found.allocations or any(k in result.extra for k in _INFO_LINES):
        result.kind = "trtllm-memory"
    result.engine_version = banner_version(text)
    result.note_missing(MEMORY_EXPECTED)
    return result
