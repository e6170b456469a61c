#!/usr/bin/env python3
"""LLM decode throughput and latency with Hugging Face transformers on PyTorch (engine "hf-generate").

STANDALONE on purpose: it runs inside a chroot or a container that has python3, torch and transformers,
and nothing of sparkfleet. Weights come from a local directory (``config.json`` in it; never a download)
or, when ``--model`` names one of PRESETS, from a randomly initialised model of that architecture with a
fixed seed, so any CUDA host can run an LLM workload without a checkpoint.

Method (the study's): synthetic prompts of exactly ``--input-len`` seeded random tokens, ``--batch`` of
them at once; greedy generation of exactly ``--output-len`` new tokens (EOS disabled, KV cache on);
``--warmup`` unmeasured iterations, then ``--iterations`` measured ones, each timed with the device
synchronised. TTFT is a prefill-only call (``generate`` with one new token) timed separately in every
iteration; TPOT = (mean latency - mean TTFT) / (output_len - 1). Prints a stable block that
``sparkfleet_host.parsers.hf_generate`` reads, plus the ``[sparkfleet-probe]`` lines of matmul.py.

    python3 hf_generate.py --model NAME_OR_PATH [--batch 1] [--input-len 128] [--output-len 128]
                           [--warmup 2] [--iterations 10] [--dtype auto] [--device auto]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from typing import Any

ENGINE = "hf-generate"
BEGIN = "=== sparkfleet hf-generate ==="
END = "=== end sparkfleet hf-generate ==="
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cuda", "cpu")
SEED = 0
GIB = float(2**30)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling module, copied with the scripts
from sparkfleet_probe import probe_lines  # noqa: E402

NL = "\n"

#: Architecture presets: (config class name in transformers, its keyword arguments). Shapes follow the
#: published configs of the named checkpoints; weights are random (seeded), so only speed and memory mean
#: anything. ``llama-tiny`` is sized for CPU tests (a few hundred thousand parameters).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-tiny": (
        "LlamaConfig",
        dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096),
    ),
    "qwen2-tiny": (
        "Qwen2Config",
        dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096),
    ),
    # Llama-3.2-1B
    "llama-1b": (
        "LlamaConfig",
        dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
             num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
             rope_theta=500000.0, tie_word_embeddings=True, rms_norm_eps=1e-5),
    ),
    # Llama-3.1-8B
    "llama-8b": (
        "LlamaConfig",
        dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
             num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072,
             rope_theta=500000.0, tie_word_embeddings=False, rms_norm_eps=1e-5),
    ),
    # Qwen2.5-0.5B
    "qwen2-0.5b": (
        "Qwen2Config",
        dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
             num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
             rope_theta=1000000.0, tie_word_embeddings=True, rms_norm_eps=1e-6),
    ),
    # Qwen2.5-7B
    "qwen2-7b": (
        "Qwen2Config",
        dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
             num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
             rope_theta=1000000.0, tie_word_embeddings=False, rms_norm_eps=1e-6),
    ),
}


class SetupError(Exception):
    """Something the user can fix: a missing library, a bad model path, no CUDA device."""


# ------------------------------------------------------------------------------------------ helpers


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def import_libraries() -> tuple[Any, Any]:
    # Never reach a hub: weights are a local directory or random. Set before transformers is imported.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
    except Exception as exc:  # missing, or present with broken native libraries
        raise SetupError(f"PyTorch is not importable here ({type(exc).__name__}: {exc}); "
                         "install torch in this environment") from exc
    try:
        import transformers
    except Exception as exc:
        raise SetupError(f"transformers is not importable here ({type(exc).__name__}: {exc}); "
                         "install transformers in this environment") from exc
    return torch, transformers


def version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def choose_device(torch: Any, wanted: str) -> tuple[Any, str]:
    if wanted in ("auto", "cuda") and torch.cuda.is_available():
        dev = torch.device("cuda:0")
        return dev, f"cuda:0 {torch.cuda.get_device_name(0)}"
    if wanted == "cuda":
        raise SetupError("--device cuda asked for, but torch.cuda.is_available() is False "
                         f"(torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'})")
    return torch.device("cpu"), f"cpu ({os.cpu_count() or '?'} cores)"


def choose_dtype(torch: Any, wanted: str, device: Any) -> Any:
    if wanted == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, wanted)


def is_local_model(ref: str) -> bool:
    return os.path.isdir(ref) and os.path.isfile(os.path.join(ref, "config.json"))


def dtype_kwarg(transformers: Any) -> str:
    """transformers 4.56 renamed ``torch_dtype`` to ``dtype``; 5.x warns on the old name."""
    return "dtype" if version_tuple(transformers.__version__) >= (4, 56) else "torch_dtype"


def load_model(torch: Any, transformers: Any, ref: str, dtype: Any, device: Any) -> tuple[Any, str]:
    """(model in eval mode on ``device`` in ``dtype``, 'path' or 'preset')."""
    if is_local_model(ref):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            ref, local_files_only=True, **{dtype_kwarg(transformers): dtype}
        )
        source = "path"
    elif ref in PRESETS:
        class_name, kwargs = PRESETS[ref]
        config = getattr(transformers, class_name)(**kwargs)
        torch.manual_seed(SEED)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            # Built on the target device: a 7B model's random init on the CPU takes minutes.
            with device:
                model = transformers.AutoModelForCausalLM.from_config(config, **{dtype_kwarg(transformers): dtype})
        finally:
            torch.set_default_dtype(previous)
        source = "preset"
    else:
        hint = "a directory with config.json" if os.sep in ref or ref.startswith(".") else "a local directory"
        raise SetupError(f"--model {ref!r} is neither {hint} nor a preset ({', '.join(PRESETS)}); "
                         "nothing is downloaded")
    model = model.to(device=device, dtype=dtype)
    model.eval()
    return model, source


def greedy_config(transformers: Any, model: Any, new_tokens: int) -> Any:
    """Exactly ``new_tokens`` greedy tokens, EOS disabled, KV cache on; model's sampling defaults dropped."""
    pad = getattr(model.config, "pad_token_id", None)
    return transformers.GenerationConfig(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        num_beams=1,
        use_cache=True,
        eos_token_id=None,
        pad_token_id=0 if pad is None else pad,
        return_dict_in_generate=True,
    )


def kv_cache_tensors(cache: Any) -> list[Any]:
    """Every key/value tensor of a cache, across transformers' formats.

    5.x ``DynamicCache``: ``.layers[i].keys/.values``; 4.3x-4.5x ``DynamicCache``: ``.key_cache`` and
    ``.value_cache`` lists; older: a tuple (per layer) of (key, value) tuples. Encoder-decoder caches
    wrap two of these. Each tensor is counted once.
    """
    found: list[Any] = []
    seen: set[int] = set()

    def walk(obj: Any, depth: int) -> None:
        if obj is None or depth > 6:
            return
        if hasattr(obj, "numel") and hasattr(obj, "element_size"):
            if id(obj) not in seen:
                seen.add(id(obj))
                found.append(obj)
            return
        if isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item, depth + 1)
            return
        layers = getattr(obj, "layers", None)
        if isinstance(layers, (list, tuple)):
            for layer in layers:
                walk(getattr(layer, "keys", None), depth + 1)
                walk(getattr(layer, "values", None), depth + 1)
            return
        if hasattr(obj, "key_cache") and hasattr(obj, "value_cache"):
            walk(obj.key_cache, depth + 1)
            walk(obj.value_cache, depth + 1)
            return
        for attr in ("self_attention_cache", "cross_attention_cache"):
            walk(getattr(obj, attr, None), depth + 1)

    walk(cache, 0)
    return found


def kv_cache_size(cache: Any) -> tuple[int, int | None, int]:
    """(bytes, cached tokens per sequence (from the first key tensor's sequence axis), tensors)."""
    tensors = kv_cache_tensors(cache)
    total = sum(int(t.numel()) * int(t.element_size()) for t in tensors)
    tokens = int(tensors[0].shape[-2]) if tensors and len(tensors[0].shape) >= 2 else None
    return total, tokens, len(tensors)


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB, macOS bytes


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


# ------------------------------------------------------------------------------------------- timing


class Bench:
    def __init__(self, torch: Any, transformers: Any, model: Any, device: Any, args: argparse.Namespace) -> None:
        self.torch, self.model, self.device, self.args = torch, model, device, args
        vocab = int(getattr(model.config, "vocab_size", 0) or 0)
        if vocab < 2:
            raise SetupError(f"model config has no usable vocab_size ({vocab})")
        gen = torch.Generator(device="cpu").manual_seed(SEED)
        self.input_ids = torch.randint(0, vocab, (args.batch, args.input_len), generator=gen).to(device)
        self.attention_mask = torch.ones_like(self.input_ids)
        self.full = greedy_config(transformers, model, args.output_len)
        self.prefill = greedy_config(transformers, model, 1)

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def timed(self, config: Any) -> tuple[float, Any]:
        self.sync()
        start = time.perf_counter()
        with self.torch.inference_mode():
            out = self.model.generate(
                input_ids=self.input_ids, attention_mask=self.attention_mask, generation_config=config
            )
        self.sync()
        return time.perf_counter() - start, out

    def new_tokens(self, out: Any) -> int:
        sequences = out.sequences if hasattr(out, "sequences") else out
        return int(sequences.shape[0]) * (int(sequences.shape[1]) - self.args.input_len)

    def iteration(self) -> tuple[float, float, int, Any]:
        """(latency s, ttft s, new tokens over the batch, the full generation's output)."""
        ttft, _ = self.timed(self.prefill)
        latency, out = self.timed(self.full)
        return latency, ttft, self.new_tokens(out), out


def loaded_config_lines(model: Any, ref: str, source: str) -> list[str]:
    """What was loaded, from the model built (its config as read), for sparkfleet's provenance check: the
    directory, the config's architecture, layers, hidden size and dtype (the checkpoint's, not the run's)."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    archs = getattr(config, "architectures", None) or []
    declared = None
    if source == "path":  # the checkpoint's dtype as its config.json says (from_pretrained overwrites the
        # loaded config's with the dtype the run asked for)
        with open(os.path.join(ref, "config.json"), encoding="utf-8") as fh:
            raw = json.load(fh)
        declared = raw.get("torch_dtype") or raw.get("dtype") or (raw.get("text_config") or {}).get("torch_dtype")

    def value(obj: Any, name: str) -> str:
        got = getattr(obj, name, None)
        return "n/a" if got is None else str(got)

    return [
        f"model_path: {os.path.realpath(ref) if source == 'path' else 'n/a'}",
        f"config_architecture: {archs[0] if archs else 'n/a'}",
        f"num_hidden_layers: {value(text, 'num_hidden_layers')}",
        f"hidden_size: {value(text, 'hidden_size')}",
        f"config_dtype: {str(declared).replace('torch.', '') if declared is not None else 'n/a'}",
    ]


def run(args: argparse.Namespace) -> list[str]:
    torch, transformers = import_libraries()
    device, device_name = choose_device(torch, args.device)
    dtype = choose_dtype(torch, args.dtype, device)
    model, source = load_model(torch, transformers, args.model, dtype, device)
    if device.type == "cuda":
        # Peak from here on: weights + what generation needs (activations, KV cache), not the transients of
        # loading (a checkpoint read in another dtype, say). The weights stay allocated, so they count.
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    params = sum(int(p.numel()) for p in model.parameters())
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if isinstance(max_pos, int) and args.input_len + args.output_len > max_pos:
        raise SetupError(f"input {args.input_len} + output {args.output_len} tokens exceed the model's "
                         f"max_position_embeddings {max_pos}")
    bench = Bench(torch, transformers, model, device, args)
    expected_tokens = args.batch * args.output_len
    for _ in range(args.warmup):
        bench.iteration()
    latencies, ttfts, rows, last = [], [], [], None
    for i in range(1, args.iterations + 1):
        latency, ttft, tokens, last = bench.iteration()
        if tokens != expected_tokens:
            raise SetupError(f"iteration {i} generated {tokens} new tokens, expected {expected_tokens} "
                             f"(batch {args.batch} x output {args.output_len})")
        latencies.append(latency * 1000.0)
        ttfts.append(ttft * 1000.0)
        rows.append(f"iteration {i}/{args.iterations}: latency_ms {latency * 1000.0:.6f} "
                    f"ttft_ms {ttft * 1000.0:.6f} output_tokens {tokens}")
    kv_bytes, kv_tokens, kv_tensors = kv_cache_size(getattr(last, "past_key_values", None))

    if device.type == "cuda":
        allocated = torch.cuda.max_memory_allocated(device)
        reserved = torch.cuda.max_memory_reserved(device)
        peak, peak_source = reserved, "torch.cuda.max_memory_reserved"
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        allocated = reserved = None
        peak, peak_source = peak_rss_bytes(), "ru_maxrss (process peak RSS)"
        total = host_memory_bytes()

    mean_ms = sum(latencies) / len(latencies)
    ttft_ms = sum(ttfts) / len(ttfts)
    seconds = mean_ms / 1000.0
    tpot = f"{(mean_ms - ttft_ms) / (args.output_len - 1):.6f}" if args.output_len > 1 else "n/a"

    def gib(value: int | None) -> str:
        return "n/a" if value is None else f"{value / GIB:.6f}"

    lines = [
        BEGIN,
        f"engine: {ENGINE}",
        f"engine_version: {transformers.__version__}",
        f"torch_version: {torch.__version__}",
        f"transformers_version: {transformers.__version__}",
        f"cuda_version: {torch.version.cuda or 'none'}",
        f"device: {device_name}",
        f"dtype: {str(dtype).replace('torch.', '')}",
        f"model: {args.model}",
        f"model_source: {source}",
        f"architecture: {type(model).__name__}",
        f"parameters: {params}",
        *loaded_config_lines(model, args.model, source),
        f"attn_implementation: {getattr(model.config, '_attn_implementation', None) or 'default'}",
        f"batch: {args.batch}",
        f"input_len: {args.input_len}",
        f"output_len: {args.output_len}",
        f"warmup: {args.warmup}",
        f"iterations: {args.iterations}",
        f"output_tokens_per_iteration: {expected_tokens}",
        *rows,
        f"output_tok_s: {expected_tokens / seconds:.6f}",
        f"total_tok_s: {args.batch * (args.input_len + args.output_len) / seconds:.6f}",
        f"req_s: {args.batch / seconds:.6f}",
        f"latency_ms_avg: {mean_ms:.6f}",
        *(f"latency_ms_p{q}: {percentile(latencies, q):.6f}" for q in (50, 90, 95, 99)),
        f"ttft_ms: {ttft_ms:.6f}",
        f"tpot_ms: {tpot}",
        f"peak_memory_gib: {gib(peak)}",
        f"peak_memory_source: {peak_source}",
        f"peak_memory_allocated_gib: {gib(allocated)}",
        f"peak_memory_reserved_gib: {gib(reserved)}",
        f"kv_cache_gib: {kv_bytes / GIB:.9f}",
        f"kv_cache_bytes: {kv_bytes}",
        f"kv_cache_tokens: {kv_tokens if kv_tokens is not None else 'n/a'}",
        f"kv_cache_tensors: {kv_tensors}",
        f"device_total_gib: {gib(total)}",
        "status: ok",
        END,
    ]
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True,
                        help=f"local model directory (config.json) or an architecture preset: {', '.join(PRESETS)}")
    parser.add_argument("--batch", type=int, default=1, help="prompts per generate call (default 1)")
    parser.add_argument("--input-len", type=int, default=128, help="prompt tokens (default 128)")
    parser.add_argument("--output-len", type=int, default=128, help="new tokens generated (default 128)")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured iterations first (default 2)")
    parser.add_argument("--iterations", type=int, default=10, help="measured iterations (default 10)")
    parser.add_argument("--dtype", choices=DTYPES, default="auto", help="auto: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--device", choices=DEVICES, default="auto", help="auto: CUDA when available")
    args = parser.parse_args(argv)
    if min(args.batch, args.input_len, args.output_len, args.iterations) < 1 or args.warmup < 0:
        parser.error("--batch, --input-len, --output-len and --iterations must be at least 1, --warmup at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for line in probe_lines():
        print(line, flush=True)
    try:
        lines = run(args)
    except SetupError as exc:
        print(f"hf_generate: error: {exc}", file=sys.stderr, flush=True)
        return 3
    except Exception as exc:
        # Out of device memory (a T6 batch on a large model, say) is an outcome, not a crash: say it plainly.
        if type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower():
            print(f"hf_generate: error: out of memory: {str(exc).splitlines()[0] if str(exc) else exc!r}",
                  file=sys.stderr, flush=True)
            return 4
        raise
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
