"""A tiny random-weight llama model that a real llama.cpp server loads, with a Hugging Face tokenizer.json holding
the same vocabulary, so that a client's local token counts (llama-benchy's) agree with the server's.

The tokenizer is a byte-level BPE trained with the `tokenizers` package on tests/data/public-domain-prose.txt; the
GGUF is written with the `gguf` package (PyPI gguf 0.19.0, the gguf-py of the vendored llama.cpp) as
tokenizer.ggml.model "gpt2" with pre-tokenizer "gpt-2" (llama.cpp src/llama-vocab.cpp maps "gpt-2" to
LLAMA_VOCAB_PRE_TYPE_GPT2, whose regex is the one ByteLevel(use_regex=True) splits with).

Generation stays printable ASCII: residual dimension 0 is a constant that no layer writes to, and the output rows
of the byte tokens outside printable ASCII (and of the special tokens) weigh it strongly negative, so their logits
sit far below the others whatever the sampler. The text is random otherwise.

Usage: python tests/fleet/tinymodel.py DEST_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "data" / "public-domain-prose.txt"
NAME = "tiny"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (BpeTrainer puts them first)
# ChatML, the template llama.cpp also falls back to; with the control tokens above it costs a few tokens only.
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")
SHAPE = {"vocab": 1024, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_ff": 256, "n_ctx": 8192}
SEED = 1234
BIAS_DIM_VALUE = 4.0      # residual dim 0, constant through the layers
BANNED_WEIGHT = -30.0     # output weight on dim 0 for tokens that must not be generated


def train_tokenizer(text: str, vocab_size: int):
    """Byte-level BPE (GPT-2 style: no prefix space, GPT-2 split regex) with the ChatML control tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def _byte_of_char() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the character a byte-level token uses for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _generatable(token: str, byte_of: dict[str, int]) -> bool:
    """Printable ASCII, space or newline only: what the model may emit."""
    try:
        raw = bytes(byte_of[c] for c in token)
    except KeyError:
        return False
    return all(32 <= b < 127 or b == 10 for b in raw)


def vocabulary(tok) -> tuple[list[str], list[int], list[str]]:
    """Tokens by id, their GGUF token types (1 normal, 3 control) and the merges as 'a b' strings."""
    state = json.loads(tok.to_str())
    vocab = state["model"]["vocab"]
    tokens = [""] * len(vocab)
    for text, idx in vocab.items():
        tokens[idx] = text
    types = [3 if t in SPECIALS else 1 for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
    return tokens, types, merges


def random_weights(tokens: list[str], types: list[int], shape: dict, seed: int) -> dict:
    """Llama tensors named as llama.cpp's GGUF names them, numpy shape (rows=out, cols=in), float32."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n_vocab, d, ff = len(tokens), shape["n_embd"], shape["n_ff"]

    def mat(rows: int, cols: int, scale: float = 1.0):
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    emb = rng.standard_normal((n_vocab, d)).astype(np.float32)
    emb[:, 0] = BIAS_DIM_VALUE
    out = mat(n_vocab, d, 4.0)
    out[:, 0] = 0.0
    byte_of = _byte_of_char()
    for i, (text, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind != 1 or not _generatable(text, byte_of):
            out[i, 0] = BANNED_WEIGHT
    ones = np.ones(d, dtype=np.float32)
    tensors = {"token_embd.weight": emb, "output_norm.weight": ones, "output.weight": out}
    for i in range(shape["n_layer"]):
        wo, down = mat(d, d), mat(d, ff)
        wo[0, :] = 0.0      # no layer writes residual dim 0
        down[0, :] = 0.0
        tensors |= {f"blk.{i}.attn_norm.weight": ones, f"blk.{i}.attn_q.weight": mat(d, d),
                    f"blk.{i}.attn_k.weight": mat(d, d), f"blk.{i}.attn_v.weight": mat(d, d),
                    f"blk.{i}.attn_output.weight": wo, f"blk.{i}.ffn_norm.weight": ones,
                    f"blk.{i}.ffn_gate.weight": mat(ff, d), f"blk.{i}.ffn_up.weight": mat(ff, d),
                    f"blk.{i}.ffn_down.weight": down}
    return tensors


def write_gguf(path: Path, tokens: list[str], types: list[int], merges: list[str] | None, shape: dict, seed: int,
               tokenizer_model: str = "gpt2", pre: str | None = "gpt-2", scores: list[float] | None = None,
               add_space_prefix: bool | None = None, matrix_dtype: str = "f32", name: str = NAME) -> None:
    """The tiny llama GGUF. By default its vocabulary is the byte-level BPE above ("gpt2", pre-tokenizer "gpt-2");
    the tokenizer tests write the same vocabulary under other pre-tokenizers, and a SentencePiece one
    (``tokenizer_model`` "llama", ``scores``, no merges), to compare llama-server's tokens with a derived
    tokenizer's. ``matrix_dtype`` "f16" stores the 2-D tensors (embeddings, projections, output) as float16, the
    norms stay float32 (llama.cpp's MOSTLY_F16 layout); ``name`` is the GGUF's general.name."""
    import gguf
    import numpy as np

    if matrix_dtype not in ("f32", "f16"):
        raise ValueError(f"matrix_dtype must be f32 or f16, got {matrix_dtype!r}")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(shape["n_ctx"])
    w.add_embedding_length(shape["n_embd"])
    w.add_block_count(shape["n_layer"])
    w.add_feed_forward_length(shape["n_ff"])
    w.add_head_count(shape["n_head"])
    w.add_head_count_kv(shape["n_head"])
    w.add_rope_dimension_count(shape["n_embd"] // shape["n_head"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if matrix_dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model(tokenizer_model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(merges)
    if scores is not None:
        w.add_token_scores(scores)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    if tokenizer_model == "llama":  # SentencePiece: <unk> <s> </s> first
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    else:
        w.add_bos_token_id(SPECIALS.index("<|endoftext|>"))
        w.add_eos_token_id(SPECIALS.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    tensors = random_weights(tokens, types, shape, seed)
    for tensor in list(tensors):
        array = tensors.pop(tensor)  # one float32 copy at a time beside the written ones
        w.add_tensor(tensor, array.astype(np.float16) if matrix_dtype == "f16" and array.ndim == 2 else array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def spm_vocabulary(vocab_size: int = 700) -> tuple[list[str], list[int], list[float]]:
    """A SentencePiece-style vocabulary (tokens, GGUF token types, scores) as llama.cpp's "llama" tokenizer model
    holds one: <unk> (type 2), <s> and </s> (3), the 256 byte pieces <0xXX> (6), then the pieces of a BPE trained
    with the tokenizers package on the corpus (U+2581 for a space; type 1, score -rank: the earlier merge scores
    higher, as a SentencePiece BPE model's do)."""
    from tokenizers import SentencePieceBPETokenizer

    sp = SentencePieceBPETokenizer()
    sp.train_from_iterator([CORPUS.read_text(encoding="utf-8")], vocab_size=vocab_size, show_progress=False)
    vocab = json.loads(sp._tokenizer.to_str())["model"]["vocab"]
    pieces = [p for p in sorted(vocab, key=vocab.get) if p != "<unk>"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, types, scores


def make_tiny_model(dest_dir: Path | str, seed: int = SEED, shape: dict | None = None, matrix_dtype: str = "f32",
                    name: str = NAME) -> dict:
    """Write tokenizer.json and <name>.gguf into dest_dir (created); the same seed gives the same bytes.
    ``shape``: SHAPE's keys (default SHAPE, the tests' tiny model); ``matrix_dtype``: write_gguf's.
    Returns {gguf: Path, tokenizer: Path (the tokenizer.json), name}."""
    shape = dict(SHAPE if shape is None else shape)
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(CORPUS.read_text(encoding="utf-8"), shape["vocab"])
    tokenizer = dest / "tokenizer.json"
    tok.save(str(tokenizer))
    tokens, types, merges = vocabulary(tok)
    model = dest / f"{name}.gguf"
    write_gguf(model, tokens, types, merges, shape, seed, matrix_dtype=matrix_dtype, name=name)
    return {"gguf": model, "tokenizer": tokenizer, "name": name}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tinymodel.py DEST_DIR")
    print(json.dumps({k: str(v) for k, v in make_tiny_model(sys.argv[1]).items()}))
