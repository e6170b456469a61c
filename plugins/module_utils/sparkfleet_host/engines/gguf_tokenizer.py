# -*- coding: utf-8 -*-
"""A serving client's tokenizer, derived from a GGUF file's own vocabulary (issue 33).

A GGUF carries no tokenizer.json: llama.cpp keeps the vocabulary, the merges and the pre-tokenizer's name as
metadata (``tokenizer.ggml.*``). The load generator (llama-benchy) counts tokens with a Hugging Face
``tokenizers`` tokenizer; :func:`derive` writes one, once, into a cache directory keyed by the file's
metadata, built to split text as llama.cpp's own tokenizer does (src/llama-vocab.cpp):

* ``tokenizer.ggml.model`` ``gpt2`` (byte-level BPE: Llama 3, Qwen 2/3, gpt-oss, DeepSeek V3, GLM 4, Mistral's
  tekken, ...): the file's vocabulary and merges, the pre-tokenizer's split expressions by
  ``tokenizer.ggml.pre`` (:data:`PRE_TOKENIZERS`: the expressions of the models' own tokenizer.json files,
  which llama.cpp's table reproduces), then the GPT-2 byte mapping; control and user-defined tokens matched
  whole;
* ``llama`` (SentencePiece BPE: Llama 2, Mistral 7B, Phi-3, Gemma): the vocabulary with its scores as BPE
  merges ranked by the merged piece's score (llama.cpp's SPM tokenizer merges the adjacent pair whose piece
  scores highest), spaces as U+2581 with a leading one unless ``add_space_prefix`` is false, byte fallback.

Anything else (another tokenizer model, an unknown pre-tokenizer, a malformed file) raises
:class:`TokenizerError` naming what it found: the model's ``tokenizer`` must then be given.

Pure standard library (the bench_run module's Python on the host): the metadata is read here, the tokenizer
written as JSON (the ``tokenizers`` format, version 1.0, merges as pairs: tokenizers >= 0.20).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile

#: Bump when the derivation changes: a tokenizer derived by another version is derived again.
DERIVER_VERSION = 1
#: The cache under the results root: <results_root>/.sparkfleet/tokenizers/<key>/tokenizer.json.
CACHE_SUBDIR = ".sparkfleet/tokenizers"
#: What :func:`derive` writes beside tokenizer.json: where it came from.
SOURCE_FILE = "derived-from.json"

_MAGIC = b"GGUF"
# GGUF value types (ggml/include/gguf.h): fixed-size ones as struct formats; 8 string, 9 array.
_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
#: Sanity limits of a metadata section (a corrupt length must not make this read gigabytes).
MAX_KV = 100000
MAX_ARRAY = 50000000
MAX_STRING = 64 * 1024 * 1024
#: llama.cpp token types (tokenizer.ggml.token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

#: The metadata this needs; every other key is skipped (its array contents never kept).
WANTED = ("general.architecture", "general.name", "tokenizer.ggml.model", "tokenizer.ggml.pre",
          "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.merges",
          "tokenizer.ggml.add_space_prefix", "tokenizer.ggml.unknown_token_id")


class TokenizerError(Exception):
    """No tokenizer can be derived from this file (the message says what it holds)."""


# ------------------------------------------------------------------------------------------- reading


class _Reader:
    def __init__(self, fh, digest):
        self.fh = fh
        self.digest = digest
        self.offset = 0

    def read(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise TokenizerError("the file ends inside its metadata (at byte %d): not a whole GGUF" % self.offset)
        self.offset += n
        self.digest.update(data)
        return data

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("Q")
        if n > MAX_STRING:
            raise TokenizerError("a metadata string of %d bytes at byte %d: not a GGUF this can read"
                                 % (n, self.offset))
        return self.read(n).decode("utf-8", "replace")

    def value(self, kind: int, keep: bool):
        if kind in _FIXED:
            return self.unpack(_FIXED[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise TokenizerError("metadata value type %d at byte %d is not a GGUF type" % (kind, self.offset))
        item, count = self.unpack("I"), self.unpack("Q")
        if count > MAX_ARRAY:
            raise TokenizerError("a metadata array of %d items at byte %d: not a GGUF this can read"
                                 % (count, self.offset))
        if item in _FIXED:
            fmt = _FIXED[item]
            data = self.read(struct.calcsize(fmt) * count)
            return list(struct.unpack("<%d%s" % (count, fmt), data)) if keep else count
        if item == _STRING:
            if keep:
                return [self.string() for _ in range(count)]
            for _ in range(count):
                self.read(self.unpack("Q"))
            return count
        raise TokenizerError("metadata array of type %d at byte %d: not read" % (item, self.offset))


def read_metadata(path: str, wanted=WANTED):
    """({key: value} of the ``wanted`` metadata keys, the sha256 hex digest of the whole metadata section
    (header and key/value pairs) with the file's size). Raises TokenizerError for a file that is not a
    little-endian GGUF of version 2 or 3, OSError when it cannot be read."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        r = _Reader(fh, digest)
        if r.read(4) != _MAGIC:
            raise TokenizerError("not a GGUF file (no GGUF magic)")
        version = r.unpack("I")
        if version not in (2, 3):
            raise TokenizerError("GGUF version %d (big-endian, or not 2 or 3): not read" % version)
        r.unpack("Q")  # tensor count
        n_kv = r.unpack("Q")
        if n_kv > MAX_KV:
            raise TokenizerError("%d metadata keys: not a GGUF this can read" % n_kv)
        meta = {}
        for _ in range(n_kv):
            key = r.string()
            kind = r.unpack("I")
            keep = key in wanted
            value = r.value(kind, keep)
            if keep:
                meta[key] = value
    digest.update(b"size=%d" % size)
    return meta, digest.hexdigest()


#: A tensor with more dimensions than this is not one (ggml's GGML_MAX_DIMS is 4).
MAX_DIMS = 8
#: Sanity limit of the tensor count (a corrupt count must not make this read for ever).
MAX_TENSORS = 10000000
#: general.alignment when the file gives none (ggml/include/gguf.h GGUF_DEFAULT_ALIGNMENT).
DEFAULT_ALIGNMENT = 32


def read_header(path: str) -> dict:
    """The whole header of a GGUF file, tensor data excepted (gguf.h's layout: magic, version, tensor count,
    key/value count, the key/value pairs, then per tensor its name, dimension count, dimensions, ggml type and
    offset into the data section): ``{"version", "size" (the file's bytes), "metadata" (every scalar value by
    key; an array's item count under ``"<key>#count"``), "tensors" ([(name, shape, ggml type id, offset)]),
    "data_offset" (where the aligned data section starts)}``. Raises TokenizerError for a file that is not a
    little-endian GGUF of version 2 or 3 (or is cut short), OSError when it cannot be read."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        r = _Reader(fh, hashlib.sha256())
        if r.read(4) != _MAGIC:
            raise TokenizerError("not a GGUF file (no GGUF magic)")
        version = r.unpack("I")
        if version not in (2, 3):
            raise TokenizerError("GGUF version %d (big-endian, or not 2 or 3): not read" % version)
        n_tensors, n_kv = r.unpack("Q"), r.unpack("Q")
        if n_kv > MAX_KV or n_tensors > MAX_TENSORS:
            raise TokenizerError("%d metadata keys and %d tensors: not a GGUF this can read" % (n_kv, n_tensors))
        meta = {}
        for _ in range(n_kv):
            key = r.string()
            kind = r.unpack("I")
            value = r.value(kind, False)  # arrays: their item count (their contents skipped)
            meta[key + "#count" if kind == _ARRAY else key] = value
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            dims = r.unpack("I")
            if dims > MAX_DIMS:
                raise TokenizerError("tensor %r has %d dimensions: not a GGUF this can read" % (name, dims))
            shape = [r.unpack("Q") for _ in range(dims)]
            tensors.append((name, shape, r.unpack("I"), r.unpack("Q")))
        alignment = meta.get("general.alignment")
        if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
            alignment = DEFAULT_ALIGNMENT
        data_offset = (r.offset + alignment - 1) // alignment * alignment
    return {"version": version, "size": size, "metadata": meta, "tensors": tensors, "data_offset": data_offset}


# -------------------------------------------------------------------------------- pre-tokenizers

# The split expressions of the models' own tokenizer.json files (the "original regex" llama.cpp's
# llm_tokenizer_bpe quotes beside its own adaptation), Oniguruma syntax as tokenizers' Split takes it.
_CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
GPT4O = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + "+" + _CONTRACTIONS + "?"
         r"|[^\r\n\p{L}\p{N}]?" + _UPPER + "+" + _LOWER + "*" + _CONTRACTIONS + "?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + "+"
          r"|[^\r\n\p{L}\p{N}]?" + _UPPER + "+" + _LOWER + "*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK3 = (r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
             r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
             r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
#: llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT (a missing or "default" pre-tokenizer).
DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]")


#: tokenizer.ggml.pre -> (split expressions applied in turn, each match isolated; ignore_merges: a word that is
#: a token is that token, as llama.cpp's ``ignore_merges`` and those models' tokenizer.json say). The names
#: and groups are llama.cpp's (src/llama-vocab.cpp, llama_vocab::impl::load).
_PRE_GROUPS = (
    (("gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "trillion", "granite-docling", "a.x-4.0", "gigachat",
      "mellum", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de"), (GPT2,), False),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"),
     (LLAMA3,), True),
    (("dbrx", "smaug-bpe", "glm4", "chatglm-bpe"), (LLAMA3,), False),
    (("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan"), (QWEN2,), False),
    (("qwen35",), (QWEN35,), False),
    (("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), (GPT4O,), False),
    (("tekken",), (TEKKEN,), True),
    (("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"), (r"\p{N}", GPT2), False),
    (("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"), DEEPSEEK3, False),
    (("default", ""), DEFAULT, False),
)
PRE_TOKENIZERS = {name: (tuple(splits), ignore) for names, splits, ignore in _PRE_GROUPS for name in names}


# -------------------------------------------------------------------------------- tokenizer.json


def _added(tokens: list, types: list) -> list:
    """Control tokens (special) and user-defined ones (plain), matched whole as llama.cpp does."""
    out = []
    for i, (text, kind) in enumerate(zip(tokens, types)):
        if kind in (CONTROL, USER_DEFINED) and text:
            out.append({"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                        "normalized": False, "special": kind == CONTROL})
    return out


def _bpe_model(vocab: dict, merges: list, **kw) -> dict:
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": vocab, "merges": merges}
    model.update(kw)
    return model


def _vocab(tokens: list) -> dict:
    vocab = {}
    for i, text in enumerate(tokens):
        vocab[text] = i  # a repeated string: the last id, as llama.cpp's token_to_id keeps
    return vocab


def _split_merges(merges: list) -> list:
    out = []
    for merge in merges:
        pos = merge.find(" ", 1)  # llama.cpp: the first space after the first character
        if pos > 0:
            out.append([merge[:pos], merge[pos + 1:]])
    return out


def byte_level(meta: dict) -> dict:
    """tokenizer.json of a ``gpt2`` (byte-level BPE) vocabulary. Raises TokenizerError for an unknown pre."""
    pre = meta.get("tokenizer.ggml.pre", "")
    if pre not in PRE_TOKENIZERS:
        raise TokenizerError("its pre-tokenizer %r is not one sparkfleet can reproduce (known: %s)"
                             % (pre, ", ".join(sorted(n for n in PRE_TOKENIZERS if n))))
    if "tokenizer.ggml.merges" not in meta:
        raise TokenizerError("its byte-level vocabulary has no merges (tokenizer.ggml.merges)")
    splits, ignore = PRE_TOKENIZERS[pre]
    tokens = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    if splits == (GPT2,):
        pre_tok = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    else:
        steps = [{"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False}
                 for rx in splits]
        steps.append({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False})
        pre_tok = {"type": "Sequence", "pretokenizers": steps}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": _added(tokens, types),
            "normalizer": None, "pre_tokenizer": pre_tok, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": _bpe_model(_vocab(tokens), _split_merges(meta["tokenizer.ggml.merges"]),
                                ignore_merges=ignore)}


def spm_merges(tokens: list, scores: list, types: list) -> list:
    """Every (left, right) whose concatenation is a piece and whose halves are pieces, best first: the
    merged piece's score, highest first (llama.cpp's SPM tokenizer merges the adjacent pair whose piece scores
    highest), then its id. Byte, control, unknown and unused pieces are never a merge's result."""
    ids = {}
    for i, text in enumerate(tokens):
        if types[i] in (NORMAL, USER_DEFINED):
            ids.setdefault(text, i)
    ranked = []
    for text, i in ids.items():
        for cut in range(1, len(text)):
            left, right = text[:cut], text[cut:]
            if left in ids and right in ids:
                ranked.append((-scores[i], i, cut, left, right))
    ranked.sort(key=lambda r: r[:3])
    return [[left, right] for _, _, _, left, right in ranked]


def sentencepiece(meta: dict) -> dict:
    """tokenizer.json of a ``llama`` (SentencePiece BPE) vocabulary."""
    tokens = meta["tokenizer.ggml.tokens"]
    scores = meta.get("tokenizer.ggml.scores")
    if not isinstance(scores, list) or len(scores) != len(tokens):
        raise TokenizerError("its SentencePiece vocabulary has no scores for its tokens (tokenizer.ggml.scores)")
    types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    unk = meta.get("tokenizer.ggml.unknown_token_id", 0)
    unk_token = tokens[unk] if isinstance(unk, int) and 0 <= unk < len(tokens) else None
    prefix = meta.get("tokenizer.ggml.add_space_prefix", True)
    steps = ([{"type": "Prepend", "prepend": "\u2581"}] if prefix else []) + [
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]
    decoder = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
               {"type": "Fuse"}]
    if prefix:
        decoder.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": _added(tokens, types),
            "normalizer": {"type": "Sequence", "normalizers": steps}, "pre_tokenizer": None,
            "post_processor": None, "decoder": {"type": "Sequence", "decoders": decoder},
            "model": _bpe_model(_vocab(tokens), spm_merges(tokens, scores, types), unk_token=unk_token,
                                fuse_unk=True, byte_fallback=True)}


#: tokenizer.ggml.model -> the builder of its tokenizer.json.
BUILDERS = {"gpt2": byte_level, "llama": sentencepiece}


def tokenizer_json(meta: dict) -> dict:
    """The tokenizer.json document of the metadata ``meta`` (read_metadata). Raises TokenizerError."""
    model = meta.get("tokenizer.ggml.model")
    if model not in BUILDERS:
        raise TokenizerError("its tokenizer model %r is not one sparkfleet derives (%s)"
                             % (model, ", ".join(sorted(BUILDERS))) if model else "it holds no vocabulary "
                             "(no tokenizer.ggml.model)")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise TokenizerError("it holds no token list (tokenizer.ggml.tokens)")
    types = meta.get("tokenizer.ggml.token_type")
    if types is not None and (not isinstance(types, list) or len(types) != len(tokens)):
        raise TokenizerError("its token types (%s) do not match its %d tokens"
                             % (len(types) if isinstance(types, list) else repr(types), len(tokens)))
    return BUILDERS[model](meta)


# ------------------------------------------------------------------------------------------ cache


def derive(gguf_path: str, cache_root: str, meta=None, digest=None) -> dict:
    """The tokenizer of ``gguf_path``, derived once into ``cache_root``/<key>/tokenizer.json (key: the sha256 of
    the file's metadata and size, and this deriver's version) and reused after. Returns {"path": that
    directory, "key", "cached": whether it was there already, "model", "pre", "tokens"}. ``meta`` and
    ``digest``: :func:`read_metadata`'s, when already read. Raises TokenizerError (what the file holds that
    cannot be derived) or OSError."""
    if meta is None or digest is None:
        meta, digest = read_metadata(gguf_path)
    key = hashlib.sha256(("%s:%d" % (digest, DERIVER_VERSION)).encode()).hexdigest()[:32]
    directory = os.path.join(cache_root, key)
    info = {"path": directory, "key": key, "cached": True, "model": meta.get("tokenizer.ggml.model"),
            "pre": meta.get("tokenizer.ggml.pre"), "tokens": len(meta.get("tokenizer.ggml.tokens") or [])}
    if os.path.isfile(os.path.join(directory, "tokenizer.json")):
        return info
    document = tokenizer_json(meta)
    os.makedirs(directory, exist_ok=True)
    source = {"gguf": os.path.abspath(gguf_path), "metadata_sha256": digest, "deriver_version": DERIVER_VERSION,
              "architecture": meta.get("general.architecture"), "name": meta.get("general.name"),
              "tokenizer_model": info["model"], "pre_tokenizer": info["pre"], "tokens": info["tokens"]}
    _write_atomic(os.path.join(directory, SOURCE_FILE), json.dumps(source, indent=1, sort_keys=True) + "\n")
    _write_atomic(os.path.join(directory, "tokenizer.json"), json.dumps(document, ensure_ascii=False))
    info["cached"] = False
    return info


def _write_atomic(path: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def vocabulary_size(tokenizer_json_path: str):
    """The number of token ids a tokenizer.json holds (its vocabulary and added tokens: the highest id + 1), or
    None when it cannot be read."""
    try:
        with open(tokenizer_json_path, encoding="utf-8") as fh:
            doc = json.load(fh)
        ids = list((doc.get("model") or {}).get("vocab", {}).values())
        if isinstance((doc.get("model") or {}).get("vocab"), list):  # Unigram: [[piece, score], ...]
            ids = [len(doc["model"]["vocab"]) - 1]
        ids += [t.get("id", -1) for t in doc.get("added_tokens") or []]
        return max(int(i) for i in ids) + 1 if ids else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None
