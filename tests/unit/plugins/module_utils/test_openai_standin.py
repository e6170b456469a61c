"""The GPU inference-server stand-ins (tests/fleet/standins/{vllm,trtllm-serve,sglang/launch_server.py}): real CLI,
start-up KV lines that parse_kv reads, and the OpenAI streaming wire format on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from _ansible_modules import STANDINS

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.serving_kv import parse_kv

# 2 layers x 4 KV heads x 16 dims x (K, V) x 2 bytes
CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 4, "hidden_size": 64, "max_position_embeddings": 8192}
KV_BYTES_PER_TOKEN = 2 * 4 * 16 * 2 * 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def command(engine: str, model: Path, port: int) -> list[str]:
    common = ["--host", "127.0.0.1", "--port", str(port)]
    if engine == "vllm":
        return [sys.executable, str(STANDINS / "vllm"), "serve", str(model), *common, "--served-model-name", "tiny",
                "--gpu-memory-utilization", "0.8", "--enable-prefix-caching"]
    if engine == "sglang":
        return [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), *common,
                "--served-model-name", "tiny", "--mem-fraction-static", "0.8", "--some-future-flag", "1"]
    return [sys.executable, str(STANDINS / "trtllm-serve"), "serve", str(model), *common, "--backend", "pytorch",
            "--kv_cache_free_gpu_memory_fraction", "0.8"]


class Server:
    def __init__(self, engine: str, tmp: Path) -> None:
        model = tmp / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(CONFIG))
        (model / "model.safetensors").write_bytes(b"\0" * 4096)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_FAKE")}
        env.update(PYTHONPATH=str(STANDINS), SPARKFLEET_FAKE_STARTUP_S="0.05", SPARKFLEET_FAKE_DECODE_TOK_S="500")
        self.log = tmp / "server.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(command(engine, model, self.port), stdout=out, stderr=subprocess.STDOUT,
                                         env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError(f"stand-in never became ready:\n{self.log.read_text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=15)

    def chat(self, **body) -> list:
        """The SSE 'data:' payloads of one streaming chat completion, [DONE] as the string."""
        payload = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me about the sea."}],
                   "stream": True, **body}
        request = urllib.request.Request(self.base + "/v1/chat/completions", data=json.dumps(payload).encode(),
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            raw = response.read().decode()
        events = [block for block in raw.split("\n\n") if block.strip()]
        assert all(block.startswith("data: ") for block in events), raw
        return [block[6:] if block[6:] == "[DONE]" else json.loads(block[6:]) for block in events]


@pytest.fixture(params=["vllm", "sglang", "trtllm-serve"])
def server(request, tmp_path):
    srv = Server(request.param, tmp_path)
    srv.engine = request.param
    yield srv
    srv.stop()


def test_streaming_chat_completion_shape_usage_and_exact_length(server):
    events = server.chat(max_tokens=20, min_tokens=20, ignore_eos=True, return_token_ids=True,
                         stream_options={"include_usage": True})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tokens = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(tokens) == 20
    assert all(len(c["choices"][0]["token_ids"]) == 1 for c in tokens)
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in tokens[:-1])
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 20
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 20
    assert usage["usage"]["prompt_tokens"] >= 6  # "Tell me about the sea." and a chat template's markers


def test_max_and_min_tokens_without_ignore_eos(server):
    capped = server.chat(max_tokens=3)
    assert sum(1 for c in capped[:-1] if c["choices"] and c["choices"][0]["delta"].get("content")) == 3
    assert all("usage" not in c for c in capped[:-1])  # no include_usage: no usage chunk
    longer = server.chat(max_tokens=200, min_tokens=120, stream_options={"include_usage": True})
    assert longer[-2]["usage"]["completion_tokens"] >= 120


def test_models_and_kv_lines_parse(server):
    with urllib.request.urlopen(server.base + "/v1/models", timeout=5) as response:
        models = json.load(response)
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == (
        ["tiny"] if server.engine != "trtllm-serve" else [models["data"][0]["root"]])
    assert server.stop() == 0
    log = server.log.read_text()
    kv = parse_kv(server.engine, log)
    assert kv["kv_cache_gib"] and kv["kv_cache_gib"] > 10  # 0.8 of a GB10's 119.7 GiB, tiny weights
    assert kv["source"] and kv["source"] in log
    assert kv["max_tokens"] and kv["max_tokens"] > 0
    # the KV bytes per token implied by the two figures are the model's (config.json), within rounding
    assert kv["kv_cache_gib"] * (1 << 30) / kv["max_tokens"] == pytest.approx(KV_BYTES_PER_TOKEN, rel=0.01)
    assert "Uvicorn running on http://127.0.0.1:" in log


def test_sigterm_while_streaming_exits_cleanly(tmp_path):
    srv = Server("vllm", tmp_path)
    request = urllib.request.Request(srv.base + "/v1/chat/completions", data=json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000, "ignore_eos": True,
         "stream": True}).encode())
    response = urllib.request.urlopen(request, timeout=30)
    response.readline()
    assert srv.stop() == 0
    response.close()
    assert "Application shutdown complete." in srv.log.read_text()


def test_bad_request_is_a_400(tmp_path):
    srv = Server("vllm", tmp_path)
    try:
        request = urllib.request.Request(srv.base + "/v1/chat/completions", data=b'{"model": "tiny"}')
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=5)
        assert error.value.code == 400
    finally:
        srv.stop()


@pytest.mark.parametrize("name", ["vllm", "trtllm-serve", "openai_server.py"])
def test_executables_are_python_scripts(name):
    path = STANDINS / name
    assert os.access(path, os.X_OK) and path.read_text().startswith("#!/usr/bin/env python3\n")
