"""KV-cache sizing from an inference server's own start-up log (serving runs, issue 25).

:func:`parse_kv` reads what the engine printed when it sized its KV cache; it never raises. Every engine gives::

    {"engine": str, "kv_cache_gib": float|None, "source": the log line kv_cache_gib came from|None,
     "available_memory_gib": float|None, "max_tokens": int|None, "engine_version": str|None, "warnings": [..]}

plus engine-specific keys (below). ``kv_cache_gib`` is the KV cache the engine allocated where it prints that
(SGLang, llama.cpp, TensorRT-LLM's [MemUsageChange] line) and its KV budget where it prints nothing else (vLLM).
``available_memory_gib`` is the memory the engine said it had for the KV cache before sizing it (vLLM's budget,
TensorRT-LLM's profiling figure, SGLang's free memory after the weights); None where the engine prints none
(llama.cpp). ``max_tokens`` is the KV capacity in tokens where the engine prints it.

Lines per engine, with where they come from:

vllm          see parsers/vllm.py :func:`vllm_kv` ("Available KV cache memory: X GiB", "GPU KV cache size: N tokens")
sglang        python/sglang/srt/mem_cache/memory_pool.py (sgl-project/sglang @000ccdba94d4ed75d4fab7b1dac5f8ebcaaee7e8):
                f"KV Cache is allocated. #tokens: {size}, K size: {k/GB:.2f} GB, V size: {v/GB:.2f} GB" (GB = 1024**3)
              MLA pools: "KV Cache is allocated. #tokens: N, KV size: X GB"; 2026 releases add "dtype: torch.X, " after
              "allocated." (published: noonghunna/club-3090 issue #1261); model_runner.py logs
              "Load weight end. type=..., dtype=..., avail mem=X GB, mem usage=Y GB." and "Memory pool end. avail
              mem=X GB"; scheduler.py logs "max_total_num_tokens=N, chunked_prefill_size=..., ...". Lines carry a
              "[time TP0]" prefix per tensor-parallel rank.
llama.cpp     src/llama-kv-cache.cpp (ggml-org/llama.cpp, 2025-08+; __func__ "llama_kv_cache"), before that
              src/llama-kv-cache-unified.cpp ("llama_kv_cache_unified"):
                "%s: %10s KV buffer size = %8.2f MiB"
                "%s: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs), K (%s): %7.2f MiB, V (%s): %7.2f MiB"
              (mid-2025 printed "%2u seqs"); 2024 builds: llama_kv_cache_init's "KV buffer size" and
              llama_new_context_with_model's "KV self size  = X MiB, K (f16): ..., V (f16): ...".
trtllm-serve  the LLM API's PyTorch backend, the same lines trtllm-bench prints: parsers/trtllm_memory.py
              ("[MemUsageChange] Allocated X GiB for max tokens in paged KV cache (N).", the Peak memory line).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from .trtllm_memory import parse_memory_lines
from .vllm import vllm_kv

_MIB = 1.0 / 1024


def _empty(engine: str) -> dict:
    return {"engine": engine, "kv_cache_gib": None, "source": None, "available_memory_gib": None,
            "max_tokens": None, "engine_version": None, "warnings": []}


# --------------------------------------------------------------------------- SGLang

_SG_RANK = re.compile(r"\b((?:DP\d+\s+)?TP\d+(?:\s+EP\d+)?)\]")
_SG_ALLOC = re.compile(
    r"KV Cache is allocated\.\s*(?:dtype:\s*(?P<dtype>[\w.]+),\s*)?#tokens:\s*(?P<tokens>\d+),\s*"
    r"(?:K size:\s*(?P<k>\d+(?:\.\d+)?)\s*GB,\s*V size:\s*(?P<v>\d+(?:\.\d+)?)\s*GB"
    r"|KV size:\s*(?P<kv>\d+(?:\.\d+)?)\s*GB)"
)
_SG_LOAD_END = re.compile(r"Load weight end\..*?avail mem=(\d+(?:\.\d+)?)\s*GB(?:,\s*mem usage=(\d+(?:\.\d+)?)\s*GB)?")
_SG_POOL_END = re.compile(r"Memory pool end\.\s*avail mem=(\d+(?:\.\d+)?)\s*GB")
_SG_MAX_TOTAL = re.compile(r"max_total_num_tokens=(\d+)")
_SG_VERSION = re.compile(r"\bsglang(?:==|\s+version[:=]?\s*v?)(\d+\.\d+[\w.+-]*)", re.IGNORECASE)


def _sglang(text: str) -> dict:
    """KV pools of the first tensor-parallel rank that logged one (ranks size alike); a draft model's pool or a
    hybrid model's second pool on that rank is added to kv_cache_gib (``pools`` counts them)."""
    out = _empty("sglang")
    rank: Optional[str] = None
    pools: List[Tuple[re.Match, str]] = []
    load_end = pool_end = None
    for raw in text.splitlines():
        line = raw.strip()
        tag = _SG_RANK.search(line)
        line_rank = tag.group(1) if tag else ""
        alloc = _SG_ALLOC.search(line)
        if alloc:
            if rank is None:
                rank = line_rank
            if line_rank == rank:
                pools.append((alloc, line))
            continue
        if rank is not None and line_rank != rank:
            continue
        found = _SG_LOAD_END.search(line)
        if found and load_end is None:
            load_end = found
        found = _SG_POOL_END.search(line)
        if found and pool_end is None:
            pool_end = found
        found = _SG_MAX_TOTAL.search(line)
        if found:
            out["max_total_num_tokens"] = int(found.group(1))
    if pools:
        first = pools[0][0]
        sizes = [float(m.group("kv")) if m.group("kv") is not None else float(m.group("k")) + float(m.group("v"))
                 for m, _ in pools]
        out["kv_cache_gib"] = round(sum(sizes), 4)
        out["source"] = pools[0][1]
        out["max_tokens"] = int(first.group("tokens"))
        out["pools"] = len(pools)
        out["kv_dtype"] = first.group("dtype")
        if first.group("kv") is None:
            out["k_gib"], out["v_gib"] = float(first.group("k")), float(first.group("v"))
        if len(pools) > 1:
            out["warnings"].append(f"{len(pools)} KV pools on rank {rank or '(untagged)'}: kv_cache_gib is their sum")
    if "max_total_num_tokens" in out:
        out["max_tokens"] = out["max_total_num_tokens"]  # the scheduler's figure: what requests may really use
    if load_end is not None:
        out["available_memory_gib"] = float(load_end.group(1))
        if load_end.group(2) is not None:
            out["weights_gib"] = float(load_end.group(2))
    if pool_end is not None:
        out["avail_mem_after_pool_gib"] = float(pool_end.group(1))
    if rank:
        out["rank"] = rank
    versions = _SG_VERSION.findall(text)
    out["engine_version"] = versions[-1] if versions else None
    return out


# --------------------------------------------------------------------------- llama.cpp

_LC_SIZE = re.compile(
    r"(?P<func>llama_kv_cache\w*|llama_memory\w*):\s*size\s*=\s*(?P<mib>\d+(?:\.\d+)?)\s*MiB\s*\(\s*(?P<cells>\d+)\s*cells,"
    r"\s*(?P<layers>\d+)\s*layers,\s*(?P<seqs>\d+)(?:\s*/\s*(?P<streams>\d+))?\s*seqs\),\s*"
    r"K \((?P<ktype>\w+)\):\s*(?P<kmib>\d+(?:\.\d+)?)\s*MiB,\s*V \((?P<vtype>\w+)\):\s*(?P<vmib>\d+(?:\.\d+)?)\s*MiB"
)
_LC_SELF = re.compile(
    r"KV self size\s*=\s*(?P<mib>\d+(?:\.\d+)?)\s*MiB,\s*K \((?P<ktype>\w+)\):\s*(?P<kmib>\d+(?:\.\d+)?)\s*MiB,"
    r"\s*V \((?P<vtype>\w+)\):\s*(?P<vmib>\d+(?:\.\d+)?)\s*MiB"
)
_LC_BUFFER = re.compile(r"(llama_kv_cache\w*):\s*(\S+)\s+KV buffer size\s*=\s*(\d+(?:\.\d+)?)\s*MiB")
_LC_N_CTX = re.compile(r"^\s*(?:llama_context|llama_new_context_with_model|llama_init_from_model):\s*n_ctx\s*=\s*(\d+)")
#: A new context starts (llama-server's main model, then a draft model's): keep the first context's caches.
_LC_CONTEXT = re.compile(r"llama_context: constructing llama_context|llama_new_context_with_model: n_ctx\s*=|"
                         r"llama_init_from_model: n_ctx\s*=")
_LC_BUILD = re.compile(r"\bbuild(?:\s*[:=]\s*|\s+)(\d+)\s*\(([0-9a-f]{6,})\)")
#: What llama-server prints at its default verbosity (3): the slots and each one's context
#: (tools/server/server-context.cpp load_model(): "initializing, n_slots = %d, n_ctx_slot = %d, kv_unified = '%s'";
#: llama.cpp as vendored by llama-cpp-python 0.3.36, tests/fixtures/serving/llama-server-startup.log line 142).
_LC_SLOTS = re.compile(r"load_model: initializing, n_slots = (\d+), n_ctx_slot = (\d+)(?:, kv_unified = '(\w+)')?")
#: Why kv_cache_gib is null at llama-server's default verbosity.
LC_QUIET = ("llama-server prints its KV cache size (llama_kv_cache: size = ...) only at -lv 4 (debug); at its "
            "default verbosity the capacity in tokens (n_slots x n_ctx_slot) is all it says. llama.cpp sizes its KV "
            "cache from -c, not from free memory: give server_args [-lv, '4'] to record the size")


def _llamacpp(text: str) -> dict:
    """The KV caches of the first llama_context (an iSWA model has two: non-SWA and SWA; they are summed)."""
    out = _empty("llama.cpp")
    contexts = 0
    sizes: List[Tuple[re.Match, str]] = []
    selfs: List[Tuple[re.Match, str]] = []
    buffers: Dict[str, float] = {}
    n_ctx: Optional[int] = None
    for raw in text.splitlines():
        line = raw.strip()
        if _LC_CONTEXT.search(line):
            contexts += 1
        if contexts > 1:
            continue
        found = _LC_SIZE.search(line)
        if found:
            sizes.append((found, line))
            continue
        found = _LC_SELF.search(line)
        if found:
            selfs.append((found, line))
            continue
        found = _LC_BUFFER.search(line)
        if found:
            buffers[found.group(2)] = round(buffers.get(found.group(2), 0.0) + float(found.group(3)) * _MIB, 6)
            continue
        found = _LC_N_CTX.search(line)
        if found and n_ctx is None:
            n_ctx = int(found.group(1))
    if sizes:
        out["kv_cache_gib"] = round(sum(float(m.group("mib")) for m, _ in sizes) * _MIB, 6)
        out["source"] = sizes[0][1]
        # cells are per stream (llama-kv-cache.cpp resizes v_cells[s] to kv_size for each of n_stream streams)
        out["max_tokens"] = max(int(m.group("cells")) * int(m.group("streams") or 1) for m, _ in sizes)
        first = sizes[0][0]
        out.update(cells=int(first.group("cells")), layers=int(first.group("layers")),
                   seqs=int(first.group("seqs")), streams=int(first.group("streams") or 1),
                   k_type=first.group("ktype"), v_type=first.group("vtype"), caches=len(sizes))
    elif selfs:
        first, line = selfs[0]
        out["kv_cache_gib"] = round(float(first.group("mib")) * _MIB, 6)
        out["source"] = line
        out["max_tokens"] = n_ctx
        out.update(k_type=first.group("ktype"), v_type=first.group("vtype"))
    elif buffers:
        out["kv_cache_gib"] = round(sum(buffers.values()), 6)
        out["source"] = "sum of the 'KV buffer size' lines"
        out["max_tokens"] = n_ctx
    else:
        slots = _LC_SLOTS.search(text)
        if slots:
            unified = slots.group(3) == "true"  # a unified cache: n_ctx_slot is the whole context, shared
            out["max_tokens"] = int(slots.group(2)) * (1 if unified else int(slots.group(1)))
            out["source"] = slots.group(0)
            out["warnings"].append(LC_QUIET)
    if buffers:
        out["buffers_gib"] = buffers
    if n_ctx is not None:
        out["n_ctx"] = n_ctx
    if contexts > 1:
        out["warnings"].append(f"{contexts} llama_contexts (a draft model?): only the first one's KV cache is counted")
    build = _LC_BUILD.search(text)
    out["engine_version"] = f"b{build.group(1)}-{build.group(2)}" if build else None
    return out


# --------------------------------------------------------------------------- TensorRT-LLM (trtllm-serve)

_TRT_ALLOC_LINE = re.compile(r"\[MemUsageChange\]\s*Allocated .* for max tokens", re.IGNORECASE)
_TRT_PEAK_LINE = re.compile(r"Peak memory during memory usage profiling", re.IGNORECASE)
_TRT_ESTIMATED_LINE = re.compile(r"Estimated max memory in KV cache", re.IGNORECASE)


def _trtllm(text: str) -> dict:
    out = _empty("trtllm-serve")
    parsed = parse_memory_lines(text)
    out["warnings"].extend(parsed.warnings)
    out["kv_cache_gib"] = parsed.metrics.get("kv_cache_gib")
    out["available_memory_gib"] = parsed.extra.get("available_kv_gib")
    out["max_tokens"] = parsed.extra.get("kv_max_tokens")
    kind = parsed.extra.get("kv_cache_source")
    if kind is not None:
        out["kv_cache_source"] = kind
    pattern = {"allocation": _TRT_ALLOC_LINE}.get(kind) if kind else None
    if kind == "budget":
        pattern = _TRT_PEAK_LINE if out["kv_cache_gib"] == out["available_memory_gib"] else _TRT_ESTIMATED_LINE
    if pattern is not None:
        lines = [line.strip() for line in text.splitlines() if pattern.search(line)]
        out["source"] = lines[-1] if lines else None
    for key in ("peak_memory_gib", "device_total_gib", "kv_fraction"):
        if key in parsed.metrics:
            out[key] = parsed.metrics[key]
    out["engine_version"] = parsed.engine_version
    return out


def _vllm(text: str) -> dict:
    out = _empty("vllm")
    out.update(vllm_kv(text))
    return out


_PARSERS = {"vllm": _vllm, "sglang": _sglang, "llama.cpp": _llamacpp, "trtllm-serve": _trtllm}
#: The KV log formats read here, each named after the engine that prints it (an engine's ``kv_log``, serving.ENGINES).
KV_LOGS = tuple(_PARSERS)


def parse_kv(engine: str, text: str) -> dict:
    """KV-cache sizing an engine logged at start-up (module docstring); unknown engine: ValueError naming it."""
    parser = _PARSERS.get(engine)
    if parser is None:
        raise ValueError(f"parse_kv: unknown engine {engine!r}; expected one of {', '.join(KV_LOGS)}")
    try:
        return parser(text or "")
    except Exception as exc:  # a log shape nobody foresaw costs the KV figure, never the run
        out = _empty(engine)
        out["warnings"].append(f"internal: {type(exc).__name__}: {exc}")
        return out
