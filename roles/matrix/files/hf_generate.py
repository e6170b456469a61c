#!/usr/bin/env python3
"""LLM decode throughput and latency with Hugging Face transformers on PyTorch (engine "hf-generate").

STANDALONE on purpose: it runs inside a chroot or a container that has python3, torch and transformers,
and nothing of sparkfleet. Weights come from a local directory (``config.json`` in it; never a download)
or, when ``--model`` names one of PRESETS, from a randomly initialised model of that architecture with a
fixed seed, so any CUDA host can run an LLM workload without a checkpoint.

Method (the study's): synthetic prompts of exactly ``--input-len`` seeded random tokens, ``--batch`` of
them at once; greedy generation of exactly ``--output-len`` new tokens (EOS disabled, KV cache on);
``--warmup`` unmeasured iterations, then ``--iterations`` measured ones, each timed with the device
synchronised. An iteration is ``generations_per_iteration`` back-to-back generations (enough for
``--min-decode-tokens`` decode tokens; one on a CPU), its line the mean of them; TPOT = (mean latency -
mean TTFT) / (output_len - 1), decode_tok_s = batch / TPOT.

Two decoders (``--decoder``):

* ``graph`` (default), the way gpt-fast-style decoders run: the model built on the device in its dtype,
  a static KV cache (transformers' ``StaticCache``), the prompt prefilled once (TTFT: prefill + first
  token), then the one-token decode step (forward, greedy argmax, next input and positions advanced, all
  on the device) captured ONCE in a CUDA graph after a warm-up on a side stream and replayed per token;
  the tokens stay on the device until the generation ends. The GPU, not the Python loop, sets the pace
  (``launch_bound: no``). On CUDA the step goes through ``torch.compile`` first (``--compile auto``:
  Inductor's fused kernels, fewer and larger launches inside the graph; measured on an H100 with the
  llama-1b preset, 2.7 ms a token eager-captured, 1.7 ms compiled). Inductor's coordinate-descent kernel
  tuning (gpt-fast's setting) is an option, not the default (``--compile-tuning``): on an H200 with the llama-1b
  preset it decodes faster (1.12-1.30 ms a token against 1.50 untuned). Its outcome differs from one tuning to
  the next by several percent, so it is tuned once and read back from Inductor's cache after that (sparkfleet
  points ``TORCHINDUCTOR_CACHE_DIR`` at one directory per host that every environment sees);
  ``compile_tuned_now`` counts the kernels this process tuned (0: all from the cache). torch 2.9-2.11 tune
  again in every process whatever the cache, for three reasons ``KEEP_TUNED_KERNELS`` works around
  (benchmarks/decode_repeat.sh, benchmarks/decode_cache_reuse.sh);
  where compiling fails the eager step is captured instead, and said so. Without CUDA, or where the capture
  fails (named in ``decode_path_reason``), the same step runs as a plain eager loop over the static cache
  (``decode_path: eager-static``). Compiling, capturing and checking take seconds to a minute per process
  (``decoder_setup_s``), before and outside the measured iterations.
* ``generate``: transformers' own ``generate`` (what many users run; dynamic cache); TTFT is a separate
  one-new-token ``generate`` call. One Python step and its kernel launches per token: on a fast GPU it
  measures the host, not the GPU (``launch_bound: yes``).

Prints a stable block that ``sparkfleet_host.parsers.hf_generate`` reads, plus the ``[sparkfleet-probe]``
lines of matmul.py.

    python3 hf_generate.py --model NAME_OR_PATH [--batch 1] [--input-len 128] [--output-len 128]
                           [--warmup 2] [--iterations 10] [--dtype auto] [--device auto]
                           [--decoder graph|generate] [--min-decode-tokens N] [--compile auto|on|off]
                           [--compile-tuning coordinate-descent|none]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
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
DECODERS = ("graph", "generate")
#: How Inductor tunes the kernels it generates for the compiled step: none (its default launch parameters: the
#: same kernels in every process) or coordinate-descent (gpt-fast's setting: each kernel's launch parameters
#: searched by timing them, once per Inductor cache; faster, each search with its own outcome).
COMPILE_TUNINGS = ("none", "coordinate-descent")
#: Inductor settings under which a coordinate-descent result, once in the cache, is what every later process runs
#: (torch 2.9-2.11 tuned again in every process otherwise; measured on an H200, BENCHMARKS.md):
#: - use_static_cuda_launcher: its FX-graph-cache reload (CachingAutotuner.recheck_autotune_cache) drops the
#:   cached result of a kernel compiled with one config (pytorch/pytorch issue 172819); without it a cache hit
#:   builds each kernel from its source (cached_autotune), which takes the cached result;
#: - dynamic_scale_rblock: its occupancy heuristic adds a halved-R0_BLOCK variant of a tuned reduction config,
#:   and each process times the two and overwrites the entry with the winner (the tuning searches block sizes
#:   itself);
#: - compile_threads: a compile worker sends its kernels back pickled, and triton.Config.__setstate__ restores
#:   only Triton's own fields, so the cached result's found_by_coordesc is lost and every fresh compile (an FX
#:   cache miss, e.g. a first run in another environment) tunes all kernels again; in this process the flag stays.
KEEP_TUNED_KERNELS = (("use_static_cuda_launcher", False), ("dynamic_scale_rblock", False), ("compile_threads", 1))
#: Decode tokens (batch x (output_len - 1)) each measured iteration covers at least, on CUDA, by default: a
#: T1 generation (32 new tokens) alone is a few tens of milliseconds of graph replays.
MIN_DECODE_TOKENS_CUDA = 512
WARM_STEPS = 3  # eager decode steps on a side stream before the capture
CHECK_TOKENS = 64  # tokens of the graph's first generation compared with the eager loop's
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
        kwargs = {"local_files_only": True, dtype_kwarg(transformers): dtype}
        model = None
        if device.type == "cuda":
            # Straight onto the GPU where this transformers can (device_map; older ones need accelerate for
            # it): no full copy of the weights in host memory first. Else the CPU load and a copy below.
            try:
                model = transformers.AutoModelForCausalLM.from_pretrained(ref, device_map=str(device), **kwargs)
            except (ImportError, ValueError, TypeError, RuntimeError):
                model = None
        if model is None:
            model = transformers.AutoModelForCausalLM.from_pretrained(ref, **kwargs)
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


class GenerateDecoder:
    """``--decoder generate``: transformers' ``generate``, a Python step and its launches per token."""

    name = "generate"
    path = "generate"
    launch_bound = "yes"
    kv_cache_kind = "dynamic"

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.reason = "transformers' generate: one Python step and its kernel launches per token"
        self.check = "n/a"
        self.last: Any = None

    def generation(self) -> tuple[float, float, int]:
        latency, ttft, tokens, self.last = self.bench.iteration()
        return latency, ttft, tokens

    def cache(self) -> Any:
        return getattr(self.last, "past_key_values", None)


def forward_parameters(model: Any) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def make_static_cache(transformers: Any, model: Any, batch: int, length: int, device: Any, dtype: Any) -> Any:
    """transformers' ``StaticCache`` for ``batch`` sequences of ``length`` tokens, across its constructors:
    4.38-4.5x take (config, max_batch_size | batch_size, max_cache_len, device, dtype) and allocate at once;
    4.56+/5.x take (config, max_cache_len) and allocate on the first update (the prefill)."""
    cls = getattr(transformers, "StaticCache", None)
    if cls is None:
        raise SetupError(f"transformers {transformers.__version__} has no StaticCache, which the graph decoder "
                         "needs (transformers >= 4.38); use --decoder generate")
    try:
        params = set(inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):
        params = set()
    kwargs: dict[str, Any] = {"config": model.config, "max_cache_len": length}
    for name in ("max_batch_size", "batch_size"):
        if name in params:
            kwargs[name] = batch
            break
    if "device" in params:
        kwargs["device"] = device
    if "dtype" in params:
        kwargs["dtype"] = dtype
    return cls(**kwargs)


class GraphDecoder:
    """``--decoder graph``: static KV cache, prefill once, the one-token decode step captured once in a CUDA
    graph and replayed per token; greedy argmax on the device, tokens copied to the host once per generation.

    The step's state lives in static device tensors that the step itself advances (next input token,
    position ids, cache position where the model takes one, the output slot), so a replay needs nothing
    from the host. The cache holds input_len + output_len - 1 tokens (the last token is never fed back).
    """

    name = "graph"
    kv_cache_kind = "static"

    def __init__(self, torch: Any, transformers: Any, model: Any, device: Any, dtype: Any,
                 args: argparse.Namespace, prompt: Any) -> None:
        self.torch, self.model, self.device = torch, model, device
        self.batch, self.input_len, self.output_len = args.batch, args.input_len, args.output_len
        self.static = make_static_cache(transformers, model, self.batch, self.input_len + self.output_len - 1,
                                        device, dtype)
        params = forward_parameters(model)
        self.cache_position = "cache_position" in params  # 4.38-5.x early; later caches count for themselves
        self.keep: dict[str, Any] = {}
        for name in ("logits_to_keep", "num_logits_to_keep"):
            if name in params:
                self.keep = {name: 1}
                break
        with torch.inference_mode():
            self.prompt = prompt
            positions = torch.arange(self.input_len, dtype=torch.long, device=device)
            self.prompt_cpos = positions
            self.prompt_pos = positions.unsqueeze(0).expand(self.batch, -1)
            self.ids = torch.zeros((self.batch, 1), dtype=torch.long, device=device)
            self.pos = torch.zeros((self.batch, 1), dtype=torch.long, device=device)
            self.cpos = torch.zeros((1,), dtype=torch.long, device=device)
            self.slot = torch.zeros((1,), dtype=torch.long, device=device)
            self.tokens = torch.zeros((self.batch, self.output_len), dtype=torch.long, device=device)
        self.step_fn = self._step
        self.compiled = False
        self.graph: Any = None
        started, started_wall = time.perf_counter(), time.time()
        self.check = "n/a"
        if self.output_len < 2:
            self.path, self.launch_bound = "prefill-only", "n/a"
            self.reason = "output_len 1: no decode step"
        elif device.type != "cuda":
            self.path, self.launch_bound = "eager-static", "yes"
            self.reason = "no CUDA device: a plain eager loop over the static cache"
            if args.compile == "on":
                self.step_fn, self.compiled = compile_step(torch, self._step, args.compile_tuning), True
        else:
            self.path, self.launch_bound, self.reason = "cuda-graph", "no", "decode step replayed from a CUDA graph"
            compile_failed = None
            if args.compile != "off" and hasattr(torch, "compile"):
                # Inductor's fused kernels inside the graph; compiled in the warm-up before the capture.
                self.step_fn, self.compiled = compile_step(torch, self._step, args.compile_tuning), True
                compile_failed = self.capture()
                if compile_failed is not None:
                    self.step_fn, self.compiled = self._step, False
            failed = self.capture() if self.graph is None else None
            if failed is not None:
                self.path, self.launch_bound = "eager-static", "yes"
                self.reason = f"CUDA graph capture failed ({failed}): eager static loop"
            elif compile_failed is not None:
                self.reason += f" (eager step: the compiled one failed: {compile_failed})"
        self.setup_s = time.perf_counter() - started
        self.tuned_now = tuning_entries_written(inductor_cache_dir(), started_wall) if self.compiled else None

    def forward(self, ids: Any, pos: Any, cpos: Any) -> Any:
        kwargs = dict(input_ids=ids, position_ids=pos, past_key_values=self.static, use_cache=True, **self.keep)
        if self.cache_position:
            kwargs["cache_position"] = cpos
        logits = self.model(**kwargs).logits
        return logits[:, -1, :].argmax(dim=-1)

    def _step(self) -> None:
        nxt = self.forward(self.ids, self.pos, self.cpos)
        self.tokens.index_copy_(1, self.slot, nxt.unsqueeze(1))
        self.ids.copy_(nxt.unsqueeze(1))
        self.pos.add_(1)
        self.cpos.add_(1)
        self.slot.add_(1)

    def prefill(self) -> None:
        """Empty cache, the prompt through the model, the first token; the step's state set for position
        input_len. Device work only (no host read)."""
        self.static.reset()
        nxt = self.forward(self.prompt, self.prompt_pos, self.prompt_cpos)
        self.tokens[:, 0].copy_(nxt)
        self.ids.copy_(nxt.unsqueeze(1))
        self.pos.fill_(self.input_len)
        self.cpos.fill_(self.input_len)
        self.slot.fill_(1)

    def decode(self, steps: int | None = None) -> None:
        for _ in range(self.output_len - 1 if steps is None else steps):
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step_fn()

    def capture(self) -> str | None:
        """Warm the step up on a side stream, capture it once; None, or why it could not be captured."""
        torch = self.torch
        try:
            with torch.inference_mode():
                self.prefill()  # allocates a lazily built cache before anything is captured
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    for _ in range(min(WARM_STEPS, self.output_len - 1)):  # stays inside the cache
                        self.step_fn()
                torch.cuda.current_stream(self.device).wait_stream(side)
                self.prefill()  # the captured step reads its state from the tensors, whatever they hold now
                torch.cuda.synchronize(self.device)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    self.step_fn()
                torch.cuda.synchronize(self.device)
        except Exception as exc:  # an op that reads the device from the host, no compiler, no graph support
            self.graph = None
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            with contextlib.suppress(Exception):  # the error above is the one to report
                torch.cuda.synchronize(self.device)
            return f"{type(exc).__name__}: {first[:160]}"
        self.graph = graph
        self.check = self.compare_with_eager()
        return None

    def compare_with_eager(self) -> str:
        """The graph's tokens against the eager loop's for the first tokens of one generation (same kernels,
        same inputs: they should be equal; a difference says the replay does not do what the loop does)."""
        count = min(self.output_len, CHECK_TOKENS)
        with self.torch.inference_mode():
            self.prefill()
            self.decode(count - 1)
            replayed = self.tokens[:, :count].cpu()
            graph, self.graph = self.graph, None
            try:
                self.prefill()
                self.decode(count - 1)
                eager = self.tokens[:, :count].cpu()
            finally:
                self.graph = graph
        differ = (replayed != eager).nonzero()
        if differ.numel() == 0:
            return f"ok ({count} tokens per sequence equal to the eager loop's)"
        return f"differs (first at token {int(differ[0][1])} of {count}, {int(differ.shape[0])} tokens differ)"

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def generation(self) -> tuple[float, float, int]:
        """(latency s, ttft s, new tokens over the batch) of one greedy generation."""
        with self.torch.inference_mode():
            self.sync()
            start = time.perf_counter()
            self.prefill()
            self.sync()
            first = time.perf_counter()
            self.decode()
            self.sync()
            end = time.perf_counter()
            tokens = self.tokens.cpu()  # once, after the clock stopped
        return end - start, first - start, int(tokens.numel())

    def cache(self) -> Any:
        return self.static


def compile_step(torch: Any, step: Any, tuning: str) -> Any:
    """The step through ``torch.compile`` (static shapes), Inductor's kernel tuning set first: Inductor reads
    its config when it compiles, at the step's first call (the capture's warm-up)."""
    try:
        inductor = importlib.import_module("torch._inductor.config")
    except ImportError:  # a torch without Inductor: torch.compile says so itself
        inductor = None
    if hasattr(inductor, "coordinate_descent_tuning"):  # absent before torch 2.1
        inductor.coordinate_descent_tuning = tuning == "coordinate-descent"
    if tuning == "coordinate-descent":
        for name, value in KEEP_TUNED_KERNELS:
            if hasattr(inductor, name):  # each absent from some torch versions
                setattr(inductor, name, value)
    return torch.compile(step, dynamic=False)


def inductor_cache_dir() -> str | None:
    """Inductor's cache directory (TORCHINDUCTOR_CACHE_DIR, else its default), or None where torch hides it."""
    for name in ("torch._inductor.runtime.cache_dir_utils", "torch._inductor.runtime.runtime_utils"):
        try:
            return str(importlib.import_module(name).cache_dir())
        except (ImportError, AttributeError):
            continue
    return None


def tuning_entries_written(cache_dir: str | None, since: float) -> int | None:
    """Inductor's tuning results (``*.best_config``, one per tuned kernel) written at or after ``since`` (a
    time.time()): the kernels this process tuned rather than read from the cache. None without a cache."""
    if not cache_dir or not os.path.isdir(cache_dir):
        return None
    written = 0
    for root, _dirs, files in os.walk(cache_dir):
        for name in files:
            if name.endswith(".best_config"):
                with contextlib.suppress(OSError):
                    written += os.stat(os.path.join(root, name)).st_mtime >= since
    return written


def generations_per_iteration(args: argparse.Namespace, device: Any) -> int:
    wanted = args.min_decode_tokens
    if wanted is None:
        wanted = MIN_DECODE_TOKENS_CUDA if device.type == "cuda" else 0
    per_generation = args.batch * (args.output_len - 1)
    if wanted <= 0 or per_generation <= 0:
        return 1
    return max(1, -(-wanted // per_generation))


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
    if args.decoder == "generate":
        decoder: Any = GenerateDecoder(bench)
    else:
        decoder = GraphDecoder(torch, transformers, model, device, dtype, args, bench.input_ids)
    expected_tokens = args.batch * args.output_len
    per_iteration = generations_per_iteration(args, device)
    for _ in range(args.warmup):
        for _ in range(per_iteration):
            decoder.generation()
    latencies, ttfts, rows = [], [], []
    for i in range(1, args.iterations + 1):
        latency = ttft = 0.0
        for _ in range(per_iteration):
            one_latency, one_ttft, tokens = decoder.generation()
            if tokens != expected_tokens:
                raise SetupError(f"iteration {i} generated {tokens} new tokens, expected {expected_tokens} "
                                 f"(batch {args.batch} x output {args.output_len})")
            latency += one_latency / per_iteration
            ttft += one_ttft / per_iteration
        latencies.append(latency * 1000.0)
        ttfts.append(ttft * 1000.0)
        rows.append(f"iteration {i}/{args.iterations}: latency_ms {latency * 1000.0:.6f} "
                    f"ttft_ms {ttft * 1000.0:.6f} output_tokens {tokens}")
    kv_bytes, kv_tokens, kv_tensors = kv_cache_size(decoder.cache())
    weight_bytes = sum(int(p.numel()) * int(p.element_size()) for p in model.parameters())

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
    decode_ms = mean_ms - ttft_ms
    tpot = f"{decode_ms / (args.output_len - 1):.6f}" if args.output_len > 1 else "n/a"
    decode_tok_s = (f"{args.batch * (args.output_len - 1) / (decode_ms / 1000.0):.6f}"
                    if args.output_len > 1 and decode_ms > 0 else "n/a")

    def na(value: Any) -> str:
        return "n/a" if value is None else str(value)

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
        f"weight_bytes: {weight_bytes}",
        *loaded_config_lines(model, args.model, source),
        f"attn_implementation: {getattr(model.config, '_attn_implementation', None) or 'default'}",
        f"batch: {args.batch}",
        f"input_len: {args.input_len}",
        f"output_len: {args.output_len}",
        f"warmup: {args.warmup}",
        f"iterations: {args.iterations}",
        f"output_tokens_per_iteration: {expected_tokens}",
        f"decoder: {decoder.name}",
        f"decode_path: {decoder.path}",
        f"decode_path_reason: {decoder.reason}",
        f"launch_bound: {decoder.launch_bound}",
        f"kv_cache_kind: {decoder.kv_cache_kind}",
        f"compiled: {'yes' if getattr(decoder, 'compiled', False) else 'no'}",
        f"compile_tuning: {args.compile_tuning if getattr(decoder, 'compiled', False) else 'n/a'}",
        f"compile_tuned_now: {na(getattr(decoder, 'tuned_now', None))}",
        f"decoder_setup_s: {getattr(decoder, 'setup_s', 0.0):.3f}",
        f"decode_check: {decoder.check}",
        f"generations_per_iteration: {per_iteration}",
        f"measured_decode_tokens_per_iteration: {per_iteration * args.batch * (args.output_len - 1)}",
        *rows,
        f"output_tok_s: {expected_tokens / seconds:.6f}",
        f"total_tok_s: {args.batch * (args.input_len + args.output_len) / seconds:.6f}",
        f"req_s: {args.batch / seconds:.6f}",
        f"latency_ms_avg: {mean_ms:.6f}",
        *(f"latency_ms_p{q}: {percentile(latencies, q):.6f}" for q in (50, 90, 95, 99)),
        f"ttft_ms: {ttft_ms:.6f}",
        f"tpot_ms: {tpot}",
        f"decode_tok_s: {decode_tok_s}",
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
    parser.add_argument("--decoder", choices=DECODERS, default="graph",
                        help="graph (default): static KV cache, the decode step replayed from a CUDA graph (an "
                             "eager loop without CUDA); generate: transformers' generate, launch-bound")
    parser.add_argument("--min-decode-tokens", type=int, default=None,
                        help="decode tokens (batch x (output_len - 1)) each measured iteration covers at least, "
                             f"by repeating the generation (default {MIN_DECODE_TOKENS_CUDA} on CUDA, 0 = one "
                             "generation on a CPU)")
    parser.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                        help="graph decoder: torch.compile the decode step before its capture (fused kernels; "
                             "compiled in the warm-up, not measured). auto (default): on CUDA, falling back "
                             "to the eager step if compiling fails; on: also without CUDA; off: never")
    parser.add_argument("--compile-tuning", choices=COMPILE_TUNINGS, default=COMPILE_TUNINGS[0],
                        help="how Inductor tunes the compiled step's kernels: none (default; the same kernels "
                             "in every process) or coordinate-descent (gpt-fast's setting: faster decoding; "
                             "tuned once per Inductor cache, a longer compile that time)")
    args = parser.parse_args(argv)
    if min(args.batch, args.input_len, args.output_len, args.iterations) < 1 or args.warmup < 0:
        parser.error("--batch, --input-len, --output-len and --iterations must be at least 1, --warmup at least 0")
    if args.min_decode_tokens is not None and args.min_decode_tokens < 0:
        parser.error("--min-decode-tokens must be at least 0")
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
