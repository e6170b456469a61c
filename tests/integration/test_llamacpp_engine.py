"""A real llama.cpp server (built from source once, cached) serving the tiny random-weight model on 127.0.0.1:
the model loads, the server tokenizes exactly as the tokenizer.json a client counts with, and a chat completion
returns the asked-for number of tokens with usage counts, streamed and not."""

from __future__ import annotations

import json
import urllib.request

import pytest
from llamacpp import BuildError, ensure_llama_server, free_port, missing_tools, start_server, stop, wait_ready
from tinymodel import make_tiny_model

pytestmark = pytest.mark.slow

TEXT = 'It was the best of times, it was the worst of times. "Oh dear!" 1859, Paris; naïve café.'


def _post(port: int, path: str, body: dict) -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return resp.read()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if missing_tools():
        pytest.skip(f"building llama-server needs {', '.join(missing_tools())} (apt-get install cmake g++)")
    try:
        binary = ensure_llama_server()
    except BuildError as err:
        pytest.fail(str(err))
    root = tmp_path_factory.mktemp("llamacpp")
    model = make_tiny_model(root / "model")
    port, log = free_port(), root / "server.log"
    proc = start_server(binary, model["gguf"], port, log, ["-c", "4096", "-np", "1", "-t", "1"])
    try:
        wait_ready(proc, port, log)
        yield {"port": port, "model": model, "log": log}
    finally:
        stop(proc)


def test_the_server_tokenizes_like_the_clients_tokenizer(server):
    from tokenizers import Tokenizer

    local = Tokenizer.from_file(str(server["model"]["tokenizer"])).encode(TEXT, add_special_tokens=False).ids
    remote = json.loads(_post(server["port"], "/tokenize", {"content": TEXT, "add_special": False}))["tokens"]
    assert remote == local
    assert len(local) < len(TEXT.encode()), "the BPE merges were not used: one token per byte"


def test_a_chat_completion_gives_exactly_max_tokens_with_usage(server):
    body = {"model": "tiny", "messages": [{"role": "user", "content": TEXT}], "max_tokens": 24,
            "ignore_eos": True}
    reply = json.loads(_post(server["port"], "/v1/chat/completions", body))
    usage = reply["usage"]
    assert usage["completion_tokens"] == 24
    # ChatML around the user text: <|im_start|>user\n TEXT <|im_end|>\n<|im_start|>assistant\n
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(server["model"]["tokenizer"]))
    templated = f"<|im_start|>user\n{TEXT}<|im_end|>\n<|im_start|>assistant\n"
    assert usage["prompt_tokens"] == len(tok.encode(templated, add_special_tokens=False).ids)
    content = reply["choices"][0]["message"]["content"]
    assert content and content.isascii(), content


def test_a_streamed_completion_ends_with_usage(server):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Call me Ishmael."}], "max_tokens": 16,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}, "cache_prompt": False}
    events = [line[5:].strip() for line in _post(server["port"], "/v1/chat/completions", body).decode().splitlines()
              if line.startswith("data:")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 16 and usage[-1]["prompt_tokens"] > 0
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c.get("choices")]
    assert sum(1 for p in pieces if p) == 16, "one content chunk per generated token"
