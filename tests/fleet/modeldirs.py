"""Model directories as Hugging Face writes them, for provenance tests (unit and e2e): a config.json and
real safetensors files whose data regions are sparse, so a model of several GiB costs no disk."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """A real safetensors file: 8-byte header length, JSON header, then the data region (sparse: a
    multi-GiB model costs no disk). Returns the tensor bytes."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return offset


def make_model(root: Path, name: str, layers: int = 4, hidden: int = 4096, vocab: int = 32000,
               dtype: str = "bfloat16", arch: str = "LlamaForCausalLM", shards: int = 2) -> dict:
    """A model directory as Hugging Face writes one; returns what a card should say."""
    path = root / name
    path.mkdir(parents=True)
    config = {"architectures": [arch], "model_type": "llama", "num_hidden_layers": layers, "hidden_size": hidden,
              "vocab_size": vocab, "torch_dtype": dtype}
    (path / "config.json").write_text(json.dumps(config))
    st = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[dtype]
    tensors = {"model.embed_tokens.weight": (st, [vocab, hidden]), "lm_head.weight": (st, [vocab, hidden])}
    for i in range(layers):
        tensors[f"model.layers.{i}.self_attn.qkv.weight"] = (st, [3 * hidden, hidden])
        tensors[f"model.layers.{i}.mlp.weight"] = (st, [8 * hidden, hidden])
    names = list(tensors)
    per = math.ceil(len(names) / shards)
    nbytes = 0
    index = {}
    for k in range(shards):
        part = names[k * per:(k + 1) * per]
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        nbytes += write_safetensors(path / file, {n: tensors[n] for n in part})
        index |= dict.fromkeys(part, file)
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": nbytes},
                                                                   "weight_map": index}))
    params = sum(math.prod(shape) for _, shape in tensors.values())
    return {"path": str(path), "params": params, "bytes": nbytes, "dtype": dtype, "layers": layers,
            "hidden": hidden, "arch": arch}
