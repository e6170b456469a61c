"""A serving client's tokenizer derived from a GGUF's own vocabulary (issue 33): the metadata read, the
tokenizer.json built for llama.cpp's byte-level BPE and SentencePiece vocabularies, the cache, and the refusals.

The GGUFs are the tests' tiny model (tests/fleet/tinymodel.py, written with the gguf package); the derived
tokenizer is loaded with the tokenizers package, as llama-benchy loads it. That llama-server itself tokenizes
as the derived tokenizer does is tests/integration/test_llamacpp_engine.py's.
"""

from __future__ import annotations

import json
import random
import struct

import pytest
import tinymodel
from _ansible_modules import host_util

gt = host_util("gguf_tokenizer")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("gguf")

TEXT = ('It was the best of times, it WAS the worst of times. "Oh dear!" 1859, 12345678 Paris; naïve café.\n\n'
        "  hi   there\r\n\tI'm sure you'll see it's ALL'S well 中文 日本語 😀 <|im_start|>user\n")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tinymodel.make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _load(directory):
    return tokenizers.Tokenizer.from_file(str(directory) + "/tokenizer.json")


def _ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def test_the_metadata_is_read_and_its_digest_covers_the_header_and_the_size(tiny, tmp_path):
    meta, digest = gt.read_metadata(str(tiny["gguf"]))
    assert meta["general.architecture"] == "llama" and meta["tokenizer.ggml.model"] == "gpt2"
    assert meta["tokenizer.ggml.pre"] == "gpt-2" and len(meta["tokenizer.ggml.tokens"]) == tinymodel.SHAPE["vocab"]
    assert "tokenizer.chat_template" not in meta  # not wanted: skipped
    # the same metadata with other tensor data beside it (a longer file): another digest
    longer = tmp_path / "longer.gguf"
    longer.write_bytes(tiny["gguf"].read_bytes() + b"\0" * 32)
    assert gt.read_metadata(str(longer))[1] != digest
    assert gt.read_metadata(str(tiny["gguf"]))[1] == digest


def test_a_byte_level_vocabulary_tokenizes_as_the_tokenizer_it_was_made_from(tiny, tmp_path):
    """tinymodel's tokenizer.json (trained with the tokenizers package) is the reference: the GGUF holds its
    vocabulary and merges, and what is derived from the GGUF alone gives the same ids and the same text back."""
    info = gt.derive(str(tiny["gguf"]), str(tmp_path / "cache"))
    assert info["cached"] is False and info["model"] == "gpt2" and info["tokens"] == tinymodel.SHAPE["vocab"]
    derived, reference = _load(info["path"]), tokenizers.Tokenizer.from_file(str(tiny["tokenizer"]))
    corpus = tinymodel.CORPUS.read_text(encoding="utf-8")
    for text in (TEXT, corpus):
        assert _ids(derived, text) == _ids(reference, text)
    ids = _ids(derived, corpus)
    assert len(ids) < len(corpus.encode()) / 2  # the merges were used
    assert derived.decode(ids) == corpus
    assert 1 in _ids(derived, "<|im_start|>")  # a control token stays whole (id 1: tinymodel.SPECIALS)
    source = json.loads((tmp_path / "cache" / info["key"] / gt.SOURCE_FILE).read_text())
    assert source["gguf"] == str(tiny["gguf"]) and source["pre_tokenizer"] == "gpt-2"


def test_a_derived_tokenizer_is_written_once_and_reused(tiny, tmp_path):
    first = gt.derive(str(tiny["gguf"]), str(tmp_path))
    written = tmp_path / first["key"] / "tokenizer.json"
    written.write_text(written.read_text())  # touched: a rewrite would replace this inode
    inode = written.stat().st_ino
    again = gt.derive(str(tiny["gguf"]), str(tmp_path))
    assert again["cached"] is True and again["key"] == first["key"] and written.stat().st_ino == inode
    other = tmp_path / "other.gguf"
    tinymodel.write_gguf(other, *tinymodel.vocabulary(tokenizers.Tokenizer.from_file(str(tiny["tokenizer"]))),
                         dict(tinymodel.SHAPE, n_layer=1), 1, pre="qwen2")
    assert gt.derive(str(other), str(tmp_path))["key"] != first["key"]  # another vocabulary: another directory


@pytest.mark.parametrize(("pre", "text", "pieces"), [
    ("gpt-2", "abc 12345", ["abc", "Ġ12345"]),
    ("llama-bpe", "abc 12345", ["abc", "Ġ", "123", "45"]),  # digits in threes, the space on its own
    ("qwen2", "abc 12345", ["abc", "Ġ", "1", "2", "3", "4", "5"]),  # digits one by one
    ("gpt-4o", "HelloWorld don't", ["Hello", "World", "Ġdon't"]),  # case runs, the contraction kept
    ("deepseek-v3", "x 1234", ["x", "Ġ", "123", "4"]),
    ("starcoder", "a12", ["a", "1", "2"]),
])
def test_each_pre_tokenizer_splits_as_its_models_tokenizer_json_says(tiny, tmp_path, pre, text, pieces):
    tokens, types, merges = tinymodel.vocabulary(tokenizers.Tokenizer.from_file(str(tiny["tokenizer"])))
    path = tmp_path / f"{pre}.gguf"
    tinymodel.write_gguf(path, tokens, types, merges, dict(tinymodel.SHAPE, n_layer=1), 1, pre=pre)
    tok = _load(gt.derive(str(path), str(tmp_path / "cache"))["path"])
    assert [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)] == pieces
    assert tok.decode(_ids(tok, TEXT), skip_special_tokens=False) == TEXT  # whatever the split, nothing is lost


def test_llama3_and_tekken_take_a_whole_word_that_is_a_token(tiny, tmp_path):
    """ignore_merges (llama.cpp's flag for these pre-tokenizers, and their tokenizer.json's): a word that is a
    token is that token even where the merges would not build it."""
    tokens, types, merges = tinymodel.vocabulary(tokenizers.Tokenizer.from_file(str(tiny["tokenizer"])))
    tokens, types = tokens + ["zqx"], types + [1]  # a word no merge builds
    for pre, whole in (("llama-bpe", True), ("qwen2", False)):
        path = tmp_path / f"{pre}.gguf"
        tinymodel.write_gguf(path, tokens, types, merges, dict(tinymodel.SHAPE, n_layer=1), 1, pre=pre)
        tok = _load(gt.derive(str(path), str(tmp_path / "cache"))["path"])
        assert (_ids(tok, "zqx") == [len(tokens) - 1]) is whole


# ------------------------------------------------------------------------------------------ SentencePiece


def _spm_reference(text: str, tokens: list[str], scores: list[float], types: list[int], prefix: bool) -> list[int]:
    """llama.cpp's SPM tokenizer (src/llama-vocab.cpp llm_tokenizer_spm_session), written out: spaces as U+2581
    (one more in front), then the adjacent pair whose concatenation is a piece with the highest score merged
    (the leftmost of equal ones) until none is; what is not a piece goes out as its bytes (<0xXX>)."""
    ids = {t: i for i, t in enumerate(tokens)}
    symbols = list(("\u2581" if prefix else "") + text.replace(" ", "\u2581"))
    while True:
        best = None
        for i in range(len(symbols) - 1):
            merged = symbols[i] + symbols[i + 1]
            if merged in ids and (best is None or scores[ids[merged]] > scores[ids[best[1]]]):
                best = (i, merged)
        if best is None:
            break
        symbols[best[0]:best[0] + 2] = [best[1]]
    out = []
    for symbol in symbols:
        if symbol in ids and types[ids[symbol]] == 1:
            out.append(ids[symbol])
        else:
            out += [ids[f"<0x{b:02X}>"] for b in symbol.encode("utf-8")]
    return out


@pytest.mark.parametrize("prefix", [True, False])
def test_a_sentencepiece_vocabulary_merges_by_score_as_llama_cpp_does(tmp_path, prefix):
    tokens, types, scores = tinymodel.spm_vocabulary(500)
    path = tmp_path / "spm.gguf"
    tinymodel.write_gguf(path, tokens, types, None, dict(tinymodel.SHAPE, n_layer=1), 1, tokenizer_model="llama",
                         pre=None, scores=scores, add_space_prefix=None if prefix else False)
    tok = _load(gt.derive(str(path), str(tmp_path / "cache"))["path"])
    rng = random.Random(7)
    words = tinymodel.CORPUS.read_text(encoding="utf-8").split()
    texts = [TEXT.replace("<|im_start|>", ""), "Hello world", " two  spaces", "naïve 😀"] + [
        " ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(40)]
    for text in texts:
        assert _ids(tok, text) == _spm_reference(text, tokens, scores, types, prefix), text
    assert tok.decode(_ids(tok, "It was the best of times")) == "It was the best of times"


# ------------------------------------------------------------------------------------------- refusals


def _gguf(tmp_path, kv: list[tuple[str, int, bytes]], version: int = 3):
    """A GGUF header with the given (key, type, packed value) pairs and no tensors."""
    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    body = b"GGUF" + struct.pack("<IQQ", version, 0, len(kv))
    for key, kind, value in kv:
        body += s(key) + struct.pack("<I", kind) + value
    path = tmp_path / "x.gguf"
    path.write_bytes(body)
    return path


def _string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def _strings(items: list[str]) -> bytes:
    return struct.pack("<IQ", 8, len(items)) + b"".join(_string(t) for t in items)


@pytest.mark.parametrize(("kv", "message"), [
    ([("tokenizer.ggml.model", 8, _string("bert")), ("tokenizer.ggml.tokens", 9, _strings(["a"]))],
     "its tokenizer model 'bert' is not one sparkfleet derives (gpt2, llama)"),
    ([("general.architecture", 8, _string("llama"))], "it holds no vocabulary (no tokenizer.ggml.model)"),
    ([("tokenizer.ggml.model", 8, _string("gpt2")), ("tokenizer.ggml.pre", 8, _string("brand-new")),
      ("tokenizer.ggml.tokens", 9, _strings(["a", "b"])), ("tokenizer.ggml.merges", 9, _strings(["a b"]))],
     "its pre-tokenizer 'brand-new' is not one sparkfleet can reproduce (known: "),
    ([("tokenizer.ggml.model", 8, _string("llama")), ("tokenizer.ggml.tokens", 9, _strings(["a", "b"]))],
     "its SentencePiece vocabulary has no scores for its tokens"),
])
def test_a_vocabulary_that_cannot_be_derived_is_refused_saying_what_it_holds(tmp_path, kv, message):
    with pytest.raises(gt.TokenizerError) as err:
        gt.derive(str(_gguf(tmp_path, kv)), str(tmp_path / "cache"))
    assert message in str(err.value)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("tokenizer.json"))


def test_a_file_that_is_not_a_whole_gguf_is_refused(tiny, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + b"\0" * 64)
    with pytest.raises(gt.TokenizerError, match="not a GGUF file"):
        gt.read_metadata(str(bad))
    bad.write_bytes(tiny["gguf"].read_bytes()[:2000])  # cut inside the token list
    with pytest.raises(gt.TokenizerError, match="the file ends inside its metadata"):
        gt.read_metadata(str(bad))
    with pytest.raises(gt.TokenizerError, match="GGUF version 1"):
        gt.read_metadata(str(_gguf(tmp_path, [], version=1)))
    big = _gguf(tmp_path, [("k", 8, struct.pack("<Q", 2 ** 40))])
    with pytest.raises(gt.TokenizerError, match="a metadata string of 1099511627776 bytes"):
        gt.read_metadata(str(big))


def test_the_vocabulary_size_of_a_tokenizer_json_counts_its_added_tokens(tiny, tmp_path):
    assert gt.vocabulary_size(str(tiny["tokenizer"])) == tinymodel.SHAPE["vocab"]
    doc = {"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": [{"id": 7, "content": "<x>"}]}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    assert gt.vocabulary_size(str(tmp_path / "t.json")) == 8
    (tmp_path / "bad.json").write_text("{")
    assert gt.vocabulary_size(str(tmp_path / "bad.json")) is None
