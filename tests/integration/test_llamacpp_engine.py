"""A real llama.cpp server (built from source once, cached) serving the tiny random-weight model on 127.0.0.1:
the model loads, the server tokenizes exactly as the tokenizer.json a client counts with, and a chat completion
returns the asked-for number of tokens with usage counts, streamed and not. And the tokenizer sparkfleet derives
from a GGUF's own vocabulary (gguf_tokenizer, issue 33) tokenizes as llama-server does, for each pre-tokenizer
family and for a SentencePiece vocabulary."""

from __future__ import annotations

import json
import urllib.request

import pytest
from llamacpp import free_port, start_server, stop, wait_ready
from tinymodel import CORPUS, SHAPE, make_tiny_model, spm_vocabulary, train_tokenizer, vocabulary, write_gguf

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import gguf_tokenizer

pytestmark = pytest.mark.slow

TEXT = 'It was the best of times, it was the worst of times. "Oh dear!" 1859, Paris; naïve café.'


def _post(port: int, path: str, body: dict) -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return resp.read()


@pytest.fixture(scope="module")
def binary(llama_server):
    return llama_server  # tests/conftest.py's build


@pytest.fixture(scope="module")
def server(tmp_path_factory, binary):
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


# ------------------------------------------------------------------ the tokenizer derived from a GGUF (issue 33)

#: Text that tells the pre-tokenizers apart: digit runs, contractions, case runs, CJK, emoji, runs of spaces and
#: newlines, then the corpus.
TRICKY = ["It was the best of times, it WAS the worst of times. \"Oh dear!\" 1859, 12345678 Paris; naive cafe.\n\n"
          "  hi   there\r\n\tTab", "I'm sure you'll see it's ALL'S well; DON'T they've 3.14159 x=42*y/7 HelloWorld "
          "naïve café 中文字符 日本語のテキスト 한국어 😀"]


def _compare(binary, gguf, tmp_path) -> list[tuple[int, int]]:
    """(server's token count, derived tokenizer's) per text, after asserting they are the same ids."""
    from tokenizers import Tokenizer

    derived = Tokenizer.from_file(gguf_tokenizer.derive(str(gguf), str(tmp_path / "cache"))["path"] + "/tokenizer.json")
    port, log = free_port(), tmp_path / f"{gguf.stem}.log"
    proc = start_server(binary, gguf, port, log, ["-c", "512", "-np", "1", "-t", "1"])
    counts = []
    try:
        wait_ready(proc, port, log)
        for text in [*TRICKY, CORPUS.read_text(encoding="utf-8")]:
            remote = json.loads(_post(port, "/tokenize", {"content": text, "add_special": False}))["tokens"]
            assert derived.encode(text, add_special_tokens=False).ids == remote, (gguf.stem, text[:60])
            counts.append(len(remote))
    finally:
        stop(proc)
    return counts


#: One pre-tokenizer of each family sparkfleet reproduces (gguf_tokenizer.PRE_TOKENIZERS) that this llama.cpp
#: build knows.
PRE_TOKENIZERS = ["gpt-2", "llama-bpe", "qwen2", "gpt-4o", "tekken", "starcoder", "deepseek-v3", "dbrx", "default"]


@pytest.mark.parametrize("pre", PRE_TOKENIZERS)
def test_a_derived_byte_level_tokenizer_tokenizes_as_llama_server(binary, tmp_path, pre):
    tokens, types, merges = vocabulary(train_tokenizer(CORPUS.read_text(encoding="utf-8"), SHAPE["vocab"]))
    gguf = tmp_path / f"{pre}.gguf"
    write_gguf(gguf, tokens, types, merges, dict(SHAPE, n_layer=1), 1, pre=pre)
    counts = _compare(binary, gguf, tmp_path)
    assert counts[-1] < len(CORPUS.read_bytes()) / 2  # the merges were used


@pytest.mark.parametrize("space_prefix", [True, False])
def test_a_derived_sentencepiece_tokenizer_tokenizes_as_llama_server(binary, tmp_path, space_prefix):
    tokens, types, scores = spm_vocabulary()
    gguf = tmp_path / f"spm-{space_prefix}.gguf"
    write_gguf(gguf, tokens, types, None, dict(SHAPE, n_layer=1), 1, tokenizer_model="llama", pre=None,
               scores=scores, add_space_prefix=None if space_prefix else False)
    counts = _compare(binary, gguf, tmp_path)
    assert counts[-1] < len(CORPUS.read_bytes()) / 2
