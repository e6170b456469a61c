"""Output of ``roles/matrix/files/hf_generate.py``: Hugging Face transformers on PyTorch, decoded by a
static-cache CUDA-graph loop (decoder ``graph``) or by transformers' ``generate`` (decoder ``generate``).

Layout (one ``key: value`` per line between the markers; metric keys are the record's own names)::

    === sparkfleet hf-generate ===
    engine: hf-generate
    engine_version: 5.23.0            (the transformers version)
    torch_version: 2.13.0
    transformers_version: 5.23.0
    device: cuda:0 NVIDIA H100 80GB HBM3
    dtype: bfloat16
    model: NAME_OR_PATH
    model_source: preset | path
    architecture: LlamaForCausalLM    (the class built)
    parameters: N
    weight_bytes: N                   (the parameters' bytes, tied weights once; newer outputs)
    model_path: /abs/dir | n/a        (what was loaded, for the provenance check; n/a for a preset)
    config_architecture: LlamaForCausalLM
    num_hidden_layers: 32
    hidden_size: 4096
    config_dtype: bfloat16            (the checkpoint's dtype, whatever dtype the run uses)
    batch: 4
    input_len: 512
    output_len: 128
    warmup: 2
    iterations: 10
    output_tokens_per_iteration: 512  (new tokens of one generation, over the batch)
    decoder: graph | generate         (newer outputs; absent before the graph decoder: read as generate)
    decode_path: cuda-graph | eager-static | prefill-only | generate
    decode_path_reason: free text     (why that path: e.g. the capture's failure)
    launch_bound: no | yes | n/a      (yes: each token's kernels launched from a Python step)
    kv_cache_kind: static | dynamic
    compiled: no | yes                (the decode step through torch.compile before its capture)
    compile_tuning: coordinate-descent | none | n/a   (Inductor's kernel tuning; newer outputs)
    compile_tuned_now: N | n/a        (kernels Inductor tuned in this process, 0: all from its cache; newer)
    decoder_setup_s: 12.5             (compile + capture + check, before the iterations; not measured)
    decode_check: ok (...) | differs (...) | n/a   (graph replay vs the eager loop, first tokens)
    generations_per_iteration: K      (an iteration's line is the mean of K generations)
    measured_decode_tokens_per_iteration: N
    iteration 1/10: latency_ms 1234.5 ttft_ms 45.6 output_tokens 512
    ...
    output_tok_s: ...   total_tok_s: ...   req_s: ...
    latency_ms_avg / _p50 / _p90 / _p95 / _p99: ...
    ttft_ms: ...   tpot_ms: ... | n/a   decode_tok_s: ... | n/a   (batch / TPOT; newer outputs)
    peak_memory_gib: ...   peak_memory_source: torch.cuda.max_memory_reserved | ru_maxrss ...
    kv_cache_gib: ...   kv_cache_bytes: N   kv_cache_tokens: N
    device_total_gib: ...
    status: ok
    === end sparkfleet hf-generate ===
"""

from __future__ import annotations

import re

from ..contract.record import KV_BUDGET_METRICS, METRICS
from .result import ParseResult, compact, last_block, to_number

ENGINE = "hf-generate"
BEGIN = "=== sparkfleet hf-generate ==="
END = "=== end sparkfleet hf-generate ==="
SOURCE = "hf-generate output"
HF_GENERATE_EXPECTED = (
    "output_tok_s",
    "total_tok_s",
    "req_s",
    "latency_ms_avg",
    "latency_ms_p50",
    "latency_ms_p99",
    "ttft_ms",
    "peak_memory_gib",
    "kv_cache_gib",
    "device_total_gib",
    "model",
    "engine_version",
)
#: Block keys that are record metrics, read as they are: the contract's names, less what this engine
#: does not measure (the matmul figures, and kv_fraction and the KV budget figures, which only TensorRT-LLM has).
METRIC_KEYS = tuple(name for name in METRICS
                    if name not in ("kv_fraction", "gflops", "matmul_s_mean", *KV_BUDGET_METRICS))
_INT_FIELDS = (
    "batch",
    "input_len",
    "output_len",
    "warmup",
    "iterations",
    "output_tokens_per_iteration",
    "parameters",
    "kv_cache_bytes",
    "kv_cache_tokens",
    "kv_cache_tensors",
    "weight_bytes",
    "generations_per_iteration",
    "measured_decode_tokens_per_iteration",
    "compile_tuned_now",
)
_FLOAT_FIELDS = ("peak_memory_allocated_gib", "peak_memory_reserved_gib", "decode_tok_s", "decoder_setup_s")
#: yes/no lines, read as booleans (n/a or anything else: left out)
_BOOL_FIELDS = ("launch_bound", "compiled")
_YES_NO = {"yes": True, "no": False}
#: Outputs from before the graph decoder have no ``decoder`` line: they were all transformers' generate.
LEGACY_DECODER = "generate"
_TEXT_FIELDS = (
    "torch_version",
    "transformers_version",
    "cuda_version",
    "device",
    "dtype",
    "model_source",
    "architecture",
    "attn_implementation",
    "peak_memory_source",
    "status",
    "decoder",
    "decode_path",
    "decode_path_reason",
    "kv_cache_kind",
    "decode_check",
    "compile_tuning",
)

_FIELD = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*:\s*(.*?)\s*$")
_ITERATION = re.compile(
    r"^\s*iteration\s+(\d+)\s*/\s*(\d+)\s*:\s*latency_ms\s+(\S+)\s+ttft_ms\s+(\S+)\s+output_tokens\s+(\S+)\s*$"
)


def looks_like_hf_generate(text: str) -> bool:
    return BEGIN in text


def _read(lines: list[str]) -> tuple[dict[str, str], list[tuple[float, float, float]]]:
    fields: dict[str, str] = {}
    rows: list[tuple[float, float, float]] = []
    for line in lines:
        iteration = _ITERATION.match(line)
        if iteration:
            latency, ttft, tokens = (to_number(iteration.group(k)) for k in (3, 4, 5))
            if latency is not None and ttft is not None and tokens is not None:
                rows.append((latency, ttft, tokens))
            continue
        field = _FIELD.match(line)
        if field:
            fields[field.group(1)] = field.group(2)
    return fields, rows


def _check(fields: dict[str, str], rows: list[tuple[float, float, float]], result: ParseResult) -> None:
    announced = to_number(fields.get("iterations"))
    if announced is not None and len(rows) != int(announced):
        result.warnings.append(f"{len(rows)} of {int(announced)} iteration timings present")
    per_iteration = result.extra.get("output_tokens_per_iteration")
    if per_iteration is not None:
        wrong = [int(t) for _, _, t in rows if t != per_iteration]
        if wrong:
            result.warnings.append(f"iterations generated {sorted(set(wrong))} tokens, expected {per_iteration}")
    mean = result.metrics.get("latency_ms_avg")
    if rows and mean:
        own = sum(r[0] for r in rows) / len(rows)
        if abs(own - mean) > 0.01 * mean:
            result.warnings.append(f"latency_ms_avg {mean} differs from the mean of the iterations ({own:.6f})")
    ordered = [result.metrics.get(f"latency_ms_p{q}") for q in (50, 90, 95, 99)]
    present = [v for v in ordered if v is not None]
    if present != sorted(present):
        result.warnings.append(f"latency percentiles p50..p99 are not ordered: {present}")
    status = fields.get("status")
    if status and status != "ok":
        result.warnings.append(f"hf-generate status: {status}")
    _check_decoder(result)


def _check_decoder(result: ParseResult) -> None:
    extra = result.extra
    decode, tpot, batch = extra.get("decode_tok_s"), result.metrics.get("tpot_ms"), extra.get("batch")
    if decode is not None and tpot and batch:
        own = batch * 1000.0 / tpot
        if abs(own - decode) > 0.01 * own:
            result.warnings.append(f"decode_tok_s {decode} differs from batch / tpot_ms ({own:.6f})")
    if extra.get("decoder") == "graph" and extra.get("decode_path") == "eager-static" \
            and str(extra.get("device", "")).startswith("cuda"):
        result.warnings.append("graph decoder ran an eager loop on a CUDA device (launch-bound): "
                               + str(extra.get("decode_path_reason") or "no reason given"))
    check = str(extra.get("decode_check") or "")
    if check.startswith("differs"):
        result.warnings.append(f"graph replay and eager loop disagree: {check}")


def _loaded(fields: dict[str, str], result: ParseResult) -> None:
    """Provenance (modelcard.judge): what the workload says it built. Older outputs lack the config lines;
    a preset (no directory) has model_path n/a."""
    def text(key: str) -> str | None:
        value = (fields.get(key) or "").strip()
        return value if value and value.lower() not in ("n/a", "none") else None

    for key, name in (("model_path", "model_path"), ("config_architecture", "architecture"),
                      ("config_dtype", "dtype")):
        if text(key):
            result.loaded[name] = text(key)
    for key, name in (("num_hidden_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
                      ("parameters", "param_count"), ("weight_bytes", "weights_bytes")):
        number = to_number(text(key))
        if number is not None and number >= 0:
            result.loaded[name] = int(number)


def parse_hf_generate(text: str) -> ParseResult:
    """Parse the hf-generate workload's output; never raises."""
    result = ParseResult(kind="unknown", engine=ENGINE)
    if not looks_like_hf_generate(text):
        result.note_missing(HF_GENERATE_EXPECTED)
        return result
    result.kind = ENGINE
    fields, rows = _read(last_block(text, BEGIN, END, "hf-generate", result))
    result.model = fields.get("model") or None
    result.engine_version = fields.get("engine_version") or fields.get("transformers_version") or None
    result.backend = "pytorch"
    for name in METRIC_KEYS:
        result.set_metric(name, to_number(fields.get(name)), SOURCE)
    for key in _INT_FIELDS:
        number = to_number(fields.get(key))
        if number is not None:
            result.extra[key] = compact(number)
    for key in _FLOAT_FIELDS:
        number = to_number(fields.get(key))
        if number is not None:
            result.extra[key] = number
    for key in _TEXT_FIELDS:
        if fields.get(key):
            result.extra[key] = fields[key]
    for key in _BOOL_FIELDS:
        flag = _YES_NO.get((fields.get(key) or "").strip().lower())
        if flag is not None:
            result.extra[key] = flag
    if "decoder" not in fields and "output_tokens_per_iteration" in fields and "weight_bytes" not in fields:
        # past where a newer output says its decoder, and none said: an output of the generate-only workload
        result.extra.setdefault("decoder", LEGACY_DECODER)
        result.extra.setdefault("launch_bound", True)
    result.extra["iteration_latency_ms"] = [r[0] for r in rows]
    result.extra["iteration_ttft_ms"] = [r[1] for r in rows]
    result.set_samples("latency_ms", [r[0] for r in rows], SOURCE)
    result.set_samples("ttft_ms", [r[1] for r in rows], SOURCE)
    result.set_samples("output_tokens", [r[2] for r in rows], SOURCE)
    _loaded(fields, result)
    _check(fields, rows, result)
    result.note_missing(HF_GENERATE_EXPECTED)
    return result
