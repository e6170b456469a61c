#!/usr/bin/env python3
"""Stand-in for the GPU inference servers (vLLM, SGLang, trtllm-serve) on hosts without a GPU (stdlib only, 3.8+).

It takes the engine's real command line (the flags sparkfleet passes and the common ones users add; others are
accepted with a warning on stderr), prints the engine's real start-up lines with KV-cache figures worked out from
the model's config.json and the memory fraction flag, then serves the OpenAI wire format on --host/--port:

    GET  /health                 200, empty body (vLLM, SGLang and trtllm-serve all answer so)
    GET  /v1/models              {"object": "list", "data": [{"id": <served name>, "root": <model>, ...}]}
    POST /v1/chat/completions    stream=false: one chat.completion; stream=true: SSE ``data: {...}`` chunks as
                                 vLLM's ChatCompletionStreamResponse (vllm/entrypoints/openai/protocol.py): first a
                                 ``delta: {"role": "assistant", "content": ""}`` chunk, one chunk per output token
                                 (``choices[0].delta.content``; ``token_ids`` when the request asks
                                 ``return_token_ids``), ``finish_reason`` on the last token's chunk, then, when
                                 ``stream_options.include_usage`` is true, a chunk with ``choices: []`` and ``usage``,
                                 then ``data: [DONE]``.

Output length: ``ignore_eos`` -> exactly max_tokens; otherwise the "model" stops at a natural length (16..48
tokens, from the prompt's hash) raised to ``min_tokens`` and capped at ``max_tokens``. Prompt tokens are counted
with the model's tokenizer.json vocabulary where there is one (see PromptCounter), plus a few per chat message.
Each request sleeps for prefill (prompt tokens / SPARKFLEET_FAKE_PREFILL_TOK_S) and per output token
(1 / SPARKFLEET_FAKE_DECODE_TOK_S, slowed by 3 % per other request in flight, as a batch grows), so throughput
figures are real measurements of a plausible server. SIGTERM stops it cleanly (exit 0).

Test hooks, environment only:
    SPARKFLEET_FAKE_STARTUP_S        seconds "loading" before the port opens (default 0.5)
    SPARKFLEET_FAKE_PREFILL_TOK_S    prompt tokens per second per request (default 5000)
    SPARKFLEET_FAKE_DECODE_TOK_S     output tokens per second per request (default 60)
    SPARKFLEET_FAKE_DEVICE_TOTAL_GIB device memory (default 119.70, a GB10)
    SPARKFLEET_FAKE_EXIT             exit with this code after the start-up lines, never serving
    SPARKFLEET_FAKE_VERSION          engine version in the banner
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GIB = 1 << 30
DEFAULT_KV_BYTES_PER_TOKEN = 131072  # Llama-3.1-8B bf16: 32 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes
WORDS = ("the", "of", "and", "a", "to", "in", "is", "that", "it", "was", "for", "on", "as", "with", "his", "they",
         "at", "be", "this", "from", "have", "or", "by", "one", "had", "not", "but", "what", "all", "were", "when")
DEFAULT_VERSIONS = {"vllm": "0.11.0", "sglang": "0.5.4", "trtllm-serve": "1.1.0rc3"}


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


# --------------------------------------------------------------------------- command lines


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")


def vllm_parser() -> argparse.ArgumentParser:
    """``vllm serve <model>``: the flags of vllm/engine/arg_utils.py and vllm/entrypoints/openai/cli_args.py."""
    p = argparse.ArgumentParser(prog="vllm serve")
    p.add_argument("model")
    _common(p)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--enable-prefix-caching", action="store_true", default=None)
    p.add_argument("--no-enable-prefix-caching", dest="enable_prefix_caching", action="store_false")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--api-key", default=None)
    return p


def sglang_parser() -> argparse.ArgumentParser:
    """``python3 -m sglang.launch_server``: python/sglang/srt/server_args.py."""
    p = argparse.ArgumentParser(prog="python3 -m sglang.launch_server")
    p.add_argument("--model-path", "--model", dest="model", required=True)
    _common(p)
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--mem-fraction-static", type=float, default=0.88)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=8192)
    p.add_argument("--tp-size", "--tp", type=int, default=1)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--api-key", default=None)
    return p


def trtllm_parser() -> argparse.ArgumentParser:
    """``trtllm-serve [serve] <model>``: tensorrt_llm/commands/serve.py (click options, underscores)."""
    p = argparse.ArgumentParser(prog="trtllm-serve")
    p.add_argument("model")
    _common(p)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", default="pytorch")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--max_batch_size", type=int, default=2048)
    p.add_argument("--max_num_tokens", type=int, default=8192)
    p.add_argument("--max_seq_len", type=int, default=None)
    p.add_argument("--tensor_parallel_size", "--tp_size", type=int, default=1)
    p.add_argument("--pipeline_parallel_size", "--pp_size", type=int, default=1)
    p.add_argument("--kv_cache_free_gpu_memory_fraction", type=float, default=0.9)
    p.add_argument("--extra_llm_api_options", default=None)
    return p


PARSERS = {"vllm": vllm_parser, "sglang": sglang_parser, "trtllm-serve": trtllm_parser}


# --------------------------------------------------------------------------- the "model"


def model_facts(model: str) -> tuple[int, float, int]:
    """(KV bytes per token, weights GiB, max context) from a Hugging Face directory's config.json and files;
    a Llama-3.1-8B's when the model is a name or a file."""
    kv_bytes, weights, context = DEFAULT_KV_BYTES_PER_TOKEN, 14.99, 131072
    config_path = os.path.join(model, "config.json")
    if os.path.isfile(config_path):
        try:
            with open(config_path) as handle:
                config = json.load(handle)
            layers = int(config["num_hidden_layers"])
            heads = int(config["num_attention_heads"])
            kv_heads = int(config.get("num_key_value_heads") or heads)
            head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
            kv_bytes = layers * kv_heads * head_dim * 2 * 2
            context = int(config.get("max_position_embeddings") or context)
        except (OSError, ValueError, KeyError, TypeError):
            pass
        total = 0
        for name in os.listdir(model):
            if name.endswith((".safetensors", ".bin", ".gguf")):
                total += os.path.getsize(os.path.join(model, name))
        weights = total / GIB
    return kv_bytes, weights, context


def model_architecture(model: str) -> str:
    """The architecture a Hugging Face directory's config.json names (its ``architectures[0]``, what vLLM resolves
    and SGLang logs); a Llama's when there is none."""
    try:
        with open(os.path.join(model, "config.json")) as handle:
            archs = json.load(handle).get("architectures")
        if isinstance(archs, list) and archs and isinstance(archs[0], str):
            return archs[0]
    except (OSError, ValueError, AttributeError):
        pass
    return "LlamaForCausalLM"


# GPT-2's pre-tokenizer split (tokenizers' ByteLevel(use_regex=True)) with \w for \p{L}/\p{N}, as stdlib re has no
# Unicode classes; then GPT-2's byte-to-unicode map (openai/gpt-2 src/encoder.py bytes_to_unicode).
_PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")


def _byte_chars() -> dict[int, str]:
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = [b for b in range(256) if b not in keep]
    table = {b: chr(b) for b in keep}
    table.update({b: chr(256 + i) for i, b in enumerate(extra)})
    return table


class PromptCounter:
    """Prompt tokens as a byte-level BPE tokenizer.json beside the model would count them: each pre-token is cut
    greedily into the longest pieces of the vocabulary (close to BPE's merges, not equal); without a
    tokenizer.json, words and punctuation marks. A chat template adds a few tokens per message."""

    def __init__(self, tokenizer_dir: str | None) -> None:
        self.vocab: set = set()
        self.longest = 1
        path = os.path.join(tokenizer_dir or "", "tokenizer.json")
        if tokenizer_dir and os.path.isfile(path):
            try:
                with open(path) as handle:
                    self.vocab = set(json.load(handle)["model"]["vocab"])
                self.longest = max(len(piece) for piece in self.vocab)
            except (OSError, ValueError, KeyError, TypeError):
                self.vocab = set()
        self.chars = _byte_chars()

    def text(self, text: str) -> int:
        if not self.vocab:
            return len(re.findall(r"\w+|[^\w\s]", text))
        count = 0
        for piece in _PRETOKEN.findall(text):
            mapped = "".join(self.chars[b] for b in piece.encode("utf-8"))
            start = 0
            while start < len(mapped):
                end = min(len(mapped), start + self.longest)
                while end > start + 1 and mapped[start:end] not in self.vocab:
                    end -= 1
                count += 1
                start = end
        return count

    def messages(self, messages: list[dict]) -> int:
        tokens = 0
        for message in messages:
            content = message.get("content") or ""
            if isinstance(content, list):  # content parts
                content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
            tokens += self.text(str(content)) + 4  # role markers of a chat template
        return tokens + 3


def output_words(messages: list, count: int) -> list[str]:
    """The generated words: filler, except that, like any coherent model, it names Paris when asked for the capital
    of France (llama-benchy's coherence check asks that before it measures)."""
    words = [" " + WORDS[i % len(WORDS)] for i in range(count)]
    last = str((messages[-1] or {}).get("content") or "") if messages else ""
    if count and "capital of france" in last.lower():
        words[0] = " Paris"
    return words


def output_length(body: dict, prompt_key: str) -> tuple[int, str]:
    """(completion tokens, finish_reason) honouring max_tokens, min_tokens and ignore_eos exactly."""
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    natural = 16 + int(hashlib.sha256(prompt_key.encode()).hexdigest()[:4], 16) % 33
    if body.get("ignore_eos") and max_tokens is not None:
        return int(max_tokens), "length"
    length = max(natural, int(body.get("min_tokens") or 0))
    if max_tokens is not None and length >= int(max_tokens):
        return int(max_tokens), "length"
    return length, "stop"


# --------------------------------------------------------------------------- start-up lines


class Engine:
    """One engine's identity, KV-cache figures and start-up lines."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        self.args = args
        self.version = os.environ.get("SPARKFLEET_FAKE_VERSION") or DEFAULT_VERSIONS[name]
        served = getattr(args, "served_model_name", None)
        if isinstance(served, list):
            served = served[0]
        self.served = served or args.model
        self.kv_bytes, self.weights_gib, context = model_facts(args.model)
        self.architecture = model_architecture(args.model)
        self.total_gib = env_float("SPARKFLEET_FAKE_DEVICE_TOTAL_GIB", 119.70)
        limit = getattr(args, "max_model_len", None) or getattr(args, "context_length", None) \
            or getattr(args, "max_seq_len", None)
        self.max_model_len = int(limit or context)
        self.pid = os.getpid()

    def kv_plan(self, fraction: float, activation_gib: float) -> tuple[float, int]:
        available = max(0.0, self.total_gib * fraction - self.weights_gib - activation_gib)
        tokens = int(available * GIB / self.kv_bytes) // 16 * 16
        return available, tokens

    def lines(self) -> list[str]:
        return {"vllm": self._vllm, "sglang": self._sglang, "trtllm-serve": self._trtllm}[self.name]()

    def listening(self) -> list[str]:
        url = f"http://{self.args.host}:{self.args.port}"
        tail = [f"INFO:     Started server process [{self.pid}]", "INFO:     Waiting for application startup.",
                "INFO:     Application startup complete.", f"INFO:     Uvicorn running on {url} (Press CTRL+C to quit)"]
        if self.name == "sglang":
            tail.append(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] The server is fired up and ready to roll!")
        return tail

    # vllm/v1/worker/gpu_model_runner.py, gpu_worker.py, vllm/v1/core/kv_cache_utils.py (0.10/0.11 spellings)
    def _vllm(self) -> list[str]:
        stamp = time.strftime("%m-%d %H:%M:%S")
        api, core = f"(APIServer pid={self.pid}) INFO {stamp}", f"(EngineCore_DP0 pid={self.pid + 1}) INFO {stamp}"
        available, tokens = self.kv_plan(self.args.gpu_memory_utilization, 1.2)
        concurrency = tokens / self.max_model_len
        return [
            f"{api} [api_server.py:1839] vLLM API server version {self.version}",
            f"{api} [model.py:547] Resolved architecture: {self.architecture}",  # vllm/config/model.py
            f"{core} [core.py:77] Initializing a V1 LLM engine (v{self.version}) with config: model='{self.args.model}'"
            f", served_model_name={self.served}, max_seq_len={self.max_model_len}",
            f"{core} [gpu_model_runner.py:2602] Model loading took {self.weights_gib:.4f} GiB and 1.234567 seconds",
            f"{core} [gpu_worker.py:298] Available KV cache memory: {available:.2f} GiB",
            f"{core} [kv_cache_utils.py:1087] GPU KV cache size: {tokens:,} tokens",
            f"{core} [kv_cache_utils.py:1091] Maximum concurrency for {self.max_model_len:,} tokens per request: "
            f"{concurrency:.2f}x",
            f"{core} [core.py:210] init engine (profile, create kv cache, warmup model) took 2.50 seconds",
            f"{api} [api_server.py:1634] Supported_tasks: ['generate']",
            f"{api} [api_server.py:1912] Starting vLLM API server 0 on http://{self.args.host}:{self.args.port}",
        ]

    # python/sglang/srt/model_executor/model_runner.py, mem_cache/memory_pool.py, managers/scheduler.py
    def _sglang(self) -> list[str]:
        tag = f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP0]"
        free_after_weights = self.total_gib - 1.5 - self.weights_gib
        # server_args: the pool gets what is left of mem_fraction_static x total after the weights
        available, tokens = self.kv_plan(self.args.mem_fraction_static, 0.0)
        half = tokens * self.kv_bytes / 2 / GIB
        after_pool = free_after_weights - 2 * half
        running = self.args.max_running_requests or max(1, min(4096, tokens // 2 // 128))
        return [
            f"{tag} Load weight end. type={self.architecture}, dtype=torch.bfloat16, avail mem={free_after_weights:.2f}"
            f" GB, mem usage={self.weights_gib:.2f} GB.",
            f"{tag} KV Cache is allocated. #tokens: {tokens}, K size: {half:.2f} GB, V size: {half:.2f} GB",
            f"{tag} Memory pool end. avail mem={after_pool:.2f} GB",
            f"{tag} max_total_num_tokens={tokens}, chunked_prefill_size={self.args.chunked_prefill_size}, "
            f"max_prefill_tokens=16384, max_running_requests={running}, context_len={self.max_model_len}, "
            f"available_gpu_mem={after_pool - 0.8:.2f} GB",
        ]

    # tensorrt_llm/_torch/pyexecutor/_util.py (1.1 spelling) and the C++ KVCacheManager's MemUsageChange line
    def _trtllm(self) -> list[str]:
        stamp = time.strftime("[%m/%d/%Y-%H:%M:%S]")
        fraction = self.args.kv_cache_free_gpu_memory_fraction
        tmp_tokens = 8224
        tmp_gib = tmp_tokens * self.kv_bytes / GIB
        peak = self.weights_gib + 2.0 + tmp_gib
        available = fraction * (self.total_gib - peak + tmp_gib)
        tokens = int(available * GIB / self.kv_bytes) // 32 * 32
        return [
            f"[TensorRT-LLM] TensorRT-LLM version: {self.version}",
            "[TensorRT-LLM][INFO] Number of tokens per block: 32.",
            f"[TensorRT-LLM][INFO] [MemUsageChange] Allocated {tmp_gib:.2f} GiB for max tokens in paged KV cache "
            f"({tmp_tokens}).",
            f"{stamp} [TRT-LLM] [I] Peak memory during memory usage profiling (torch + non-torch): {peak:.2f} GiB, "
            f"available KV cache memory when calculating max tokens: {available:.2f} GiB, fraction is set {fraction}, "
            f"kv size is {self.kv_bytes}. device total memory {self.total_gib:.2f} GiB, , tmp kv_mem {tmp_gib:.2f} GiB",
            f"{stamp} [TRT-LLM] [I] Estimated max memory in KV cache : {available:.2f} GiB",
            "[TensorRT-LLM][INFO] Number of tokens per block: 32.",
            f"[TensorRT-LLM][INFO] [MemUsageChange] Allocated {available:.2f} GiB for max tokens in paged KV cache "
            f"({tokens}).",
        ]


# --------------------------------------------------------------------------- HTTP


class State:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.lock = threading.Lock()
        self.active = 0
        self.prefill_rate = env_float("SPARKFLEET_FAKE_PREFILL_TOK_S", 5000.0)
        self.decode_rate = env_float("SPARKFLEET_FAKE_DECODE_TOK_S", 60.0)
        args = engine.args
        tokenizer = getattr(args, "tokenizer", None) or getattr(args, "tokenizer_path", None) or args.model
        self.counter = PromptCounter(tokenizer if os.path.isdir(tokenizer) else os.path.dirname(tokenizer))

    def step_s(self) -> float:
        with self.lock:
            others = max(0, self.active - 1)
        return (1.0 / self.decode_rate) * (1.0 + 0.03 * others)


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    state: State  # set on the class by serve()

    def log_request(self, code="-", size="-") -> None:  # uvicorn's access-log shape
        sys.stdout.write(f'INFO:     {self.client_address[0]} - "{self.requestline}" {code}\n')
        sys.stdout.flush()

    def log_message(self, fmt: str, *args) -> None:
        sys.stderr.write(f"WARNING:  {fmt % args}\n")

    def _json(self, code: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        engine = self.state.engine
        if self.path == "/health":
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{
                "id": engine.served, "object": "model", "created": int(time.time()), "owned_by": engine.name,
                "root": engine.args.model, "parent": None, "max_model_len": engine.max_model_len}]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/v1/chat/completions":
            self._json(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            messages = body["messages"]
            if not isinstance(messages, list):
                raise TypeError("messages is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            self._json(400, {"object": "error", "message": f"bad request: {exc}", "type": "BadRequestError",
                             "code": 400})
            return
        prompt_tokens = self.state.counter.messages(messages)
        completion_tokens, finish = output_length(body, json.dumps(messages, sort_keys=True))
        with self.state.lock:
            self.state.active += 1
        try:
            time.sleep(prompt_tokens / self.state.prefill_rate)
            if body.get("stream"):
                self._stream(body, prompt_tokens, completion_tokens, finish)
            else:
                for _ in range(completion_tokens):
                    time.sleep(self.state.step_s())
                self._json(200, self._completion(body, prompt_tokens, completion_tokens, finish))
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self.state.lock:
                self.state.active -= 1

    def _base(self, body: dict, kind: str, rid: str, created: int) -> dict:
        return {"id": rid, "object": kind, "created": created, "model": body.get("model") or self.state.engine.served}

    def _completion(self, body: dict, prompt_tokens: int, completion_tokens: int, finish: str) -> dict:
        text = "".join(output_words(body["messages"], completion_tokens))
        out = self._base(body, "chat.completion", "chatcmpl-" + uuid.uuid4().hex, int(time.time()))
        out["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                           "finish_reason": finish}]
        out["usage"] = usage(prompt_tokens, completion_tokens)
        return out

    def _stream(self, body: dict, prompt_tokens: int, completion_tokens: int, finish: str) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        base = self._base(body, "chat.completion.chunk", "chatcmpl-" + uuid.uuid4().hex, int(time.time()))
        with_ids = bool(body.get("return_token_ids"))
        words = output_words(body["messages"], completion_tokens)

        def send(choices: list, extra: dict | None = None) -> None:
            chunk = dict(base, choices=choices, **(extra or {}))
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()

        send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
        for i in range(completion_tokens):
            if i:
                time.sleep(self.state.step_s())
            choice = {"index": 0, "delta": {"content": words[i]}, "logprobs": None,
                      "finish_reason": finish if i == completion_tokens - 1 else None}
            if with_ids:
                choice["token_ids"] = [1000 + i % len(WORDS)]
            send([choice])
        if completion_tokens == 0:
            send([{"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": finish}])
        if (body.get("stream_options") or {}).get("include_usage"):
            send([], {"usage": usage(prompt_tokens, completion_tokens)})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens}


# --------------------------------------------------------------------------- main


def serve(engine: Engine) -> int:
    Handler.state = State(engine)
    httpd = ThreadingHTTPServer((engine.args.host, engine.args.port), Handler)
    httpd.daemon_threads = True

    def stop(signum, _frame) -> None:
        sys.stdout.write("INFO:     Shutting down\n")
        sys.stdout.flush()
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for line in engine.listening():
        print(line, flush=True)
    httpd.serve_forever(poll_interval=0.1)
    httpd.server_close()
    print("INFO:     Application shutdown complete.", flush=True)
    print(f"INFO:     Finished server process [{engine.pid}]", flush=True)
    return 0


def main(engine_name: str, argv: list[str]) -> int:
    parser = PARSERS[engine_name]()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"WARNING stand-in {engine_name}: flags not modelled, ignored: {' '.join(unknown)}", file=sys.stderr)
    engine = Engine(engine_name, args)
    time.sleep(env_float("SPARKFLEET_FAKE_STARTUP_S", 0.5))
    for line in engine.lines():
        print(line, flush=True)
    code = os.environ.get("SPARKFLEET_FAKE_EXIT")
    if code:
        print(f"ERROR stand-in {engine_name}: start-up failed (SPARKFLEET_FAKE_EXIT={code})", file=sys.stderr)
        return int(code)
    return serve(engine)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in PARSERS:
        sys.exit(f"usage: openai_server.py {{{','.join(PARSERS)}}} <engine argv...>")
    sys.exit(main(sys.argv[1], sys.argv[2:]))
