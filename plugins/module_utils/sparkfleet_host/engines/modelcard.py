"""What a model directory holds, and whether the model an engine loaded is that one (run provenance).

The study sparkfleet came from ran every "model" on one 7B checkpoint because the model argument was
ignored; its logs named each model correctly, because the name they printed was the harness's own
argument. So an echo of ``--model`` (or of ``--model_path``) proves nothing. This module

* fingerprints a model directory on the host (:func:`fingerprint`): ``config.json`` (architecture, layers,
  hidden size, dtype, vocabulary, quantization, a mixture of experts' routed experts, experts per token and shared
  experts; a SHA-256 of the file) and the weights (parameter count and tensor bytes from the safetensors headers,
  the routed experts' share of those bytes, the files' total size as an engine globs them, or
  ``model.safetensors.index.json``'s ``metadata.total_size`` where headers cannot be read);
* compares it with what the engine's output shows it loaded (:func:`judge`): the fields each parser puts in
  ``ParseResult.loaded`` (see parsers/), and says ``confirmed``, ``unconfirmed`` or ``mismatch``.

* fingerprints a GGUF file (:func:`gguf_card`, the weights llama.cpp serves): its header (architecture, layers,
  hidden size, vocabulary, file type, the Hugging Face repositories it names as its source), its size, the SHA-256
  of its first and last MiB, and the tensors' parameter count and bytes (each tensor's ggml type and shape; the
  routed experts' share);
* :func:`weights_card` picks either for a served model's path, and :func:`identity_changes` says what differs
  between two cards of the same path (the file changed between runs).

Standard library only, Python 3.8 syntax: it runs on the hosts inside ``bench_run``.
"""

import hashlib
import json
import math
import os
import struct

from . import gguf_tokenizer

#: Bytes per element of the safetensors dtypes (F8/F4 variants included; unknown ones count as 0 bytes
#: and make the byte figure come from the data offsets, which are exact anyway).
_DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
                "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1}
#: A safetensors header longer than this is not one (the format caps it at 100 MB).
_MAX_HEADER = 100 * 1000 * 1000

#: Relative tolerances of the numeric checks (see judge()).
PARAM_TOLERANCE = 0.02  # parameters counted from the tensors the engine built vs the checkpoint's
CHECKPOINT_TOLERANCE = 0.01  # total size of the weight files (the engine prints GB with 2 decimals)
WEIGHTS_TOLERANCE = 0.25  # bytes of the weights on the GPU vs the checkpoint's tensor bytes (buffers,
# repacked quantisation scales, tied embeddings allocated twice): only a different model is that far off
_GIB = float(1 << 30)

TENSOR_BYTES_TOLERANCE = 0.005  # the bytes of the tensors the engine counted itself (llama-server's exact size)
#: Fields that identify a model's content; a run is ``confirmed`` only when one of them matched.
IDENTIFYING = ("architecture", "num_hidden_layers", "hidden_size", "param_count", "checkpoint_bytes",
               "weights_bytes", "tensor_bytes")
#: The engine prints sizes in GB with two decimals: below this a matching size says little (two small
#: models both print 0.01 GB), so it is checked but does not confirm.
MIN_IDENTIFYING_BYTES = 1 << 30
#: The order checks are made and named in.
CHECK_ORDER = ("model_path", "weight_files", "architecture", "num_hidden_layers", "hidden_size", "vocab_size",
               "dtype", "param_count", "checkpoint_bytes", "weights_bytes", "tensor_bytes")

_DTYPE_ALIASES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
                  "half": "float16", "f16": "float16", "fp32": "float32", "float32": "float32", "float": "float32",
                  "f32": "float32"}


_HALF = ("bfloat16", "float16")

#: A mixture of experts in transformers' config.json (issue 32: the roofline reads only the experts a token uses).
#: Routed experts: ``num_local_experts`` (gpt-oss, Mixtral), ``num_experts`` (Qwen2/3-MoE), ``n_routed_experts``
#: (DeepSeek V2/V3); experts per token: ``num_experts_per_tok`` (all of them), ``experts_per_token`` (gpt-oss's
#: original config), ``moe_topk`` (Hunyuan); shared experts, always used: ``n_shared_experts`` (DeepSeek),
#: ``num_shared_experts``.
MOE_EXPERTS_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
MOE_PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
MOE_SHARED_KEYS = ("n_shared_experts", "num_shared_experts")
#: A tensor of a routed expert has this component in its name: ``model.layers.0.mlp.experts.7.gate_proj.weight``
#: (Qwen3-MoE, DeepSeek), ``model.layers.0.mlp.experts.gate_up_proj_blocks`` (gpt-oss, all experts in one tensor),
#: ``model.layers.0.block_sparse_moe.experts.0.w1.weight`` (Mixtral). Shared experts (``shared_experts``,
#: Qwen2-MoE's ``shared_expert``) and the router are not routed: they are read for every token.
EXPERT_COMPONENT = "experts"


class ModelCardError(ValueError):
    """A model directory that cannot be fingerprinted (the message names the file and the problem)."""


def norm_dtype(value):
    """'torch.bfloat16', 'BF16', 'bfloat16' -> 'bfloat16'; None and '' -> None; others lower-cased."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text.startswith("torch."):
        text = text[len("torch."):]
    if not text or text in ("none", "null", "auto"):
        return None
    return _DTYPE_ALIASES.get(text, text)


def _read_json(path):
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ModelCardError("%s: %s" % (path, exc.strerror or exc)) from None
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelCardError("%s: not valid JSON (%s)" % (path, str(exc)[:80])) from None
    return value, data


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _config_fields(config):
    """The identifying fields of a transformers config.json (multimodal ones: their text_config's)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}

    def pick(*names):
        for source in (config, text):
            for name in names:
                if name in source and source[name] is not None:
                    return source[name]
        return None

    archs = config.get("architectures")
    architecture = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    def pick_int(names):
        value = pick(*names)
        if isinstance(value, list) and value and all(v == value[0] for v in value):
            value = value[0]  # Hunyuan's moe_topk: one entry per layer
        return _int(value)

    quant = config.get("quantization_config")
    quantization = None
    if isinstance(quant, dict):
        quantization = quant.get("quant_algo") or quant.get("quant_method")
    return {
        "architecture": architecture,
        "model_type": config.get("model_type") if isinstance(config.get("model_type"), str) else None,
        "num_hidden_layers": _int(pick("num_hidden_layers", "n_layer", "num_layers")),
        "hidden_size": _int(pick("hidden_size", "n_embd", "d_model")),
        "vocab_size": _int(pick("vocab_size")),
        # transformers >= 4.56 writes "dtype"; older ones "torch_dtype"
        "dtype": norm_dtype(pick("torch_dtype", "dtype")),
        "quantization": str(quantization) if quantization else None,
        "moe_experts": pick_int(MOE_EXPERTS_KEYS),
        "moe_experts_per_token": pick_int(MOE_PER_TOKEN_KEYS),
        "moe_shared_experts": pick_int(MOE_SHARED_KEYS),
    }


def expert_tensor_bytes(header):
    """Bytes of the routed experts' tensors in one safetensors header (EXPERT_COMPONENT in the tensor's name)."""
    nbytes = 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict) or EXPERT_COMPONENT not in str(name).split("."):
            continue
        offsets = info.get("data_offsets")
        if (isinstance(offsets, list) and len(offsets) == 2 and all(_int(o) is not None for o in offsets)
                and offsets[1] >= offsets[0]):
            nbytes += offsets[1] - offsets[0]
        else:
            count = 1
            for dim in info.get("shape") or []:
                count *= _int(dim) or 0
            nbytes += count * _DTYPE_BYTES.get(str(info.get("dtype")), 0)
    return nbytes


def safetensors_header(path):
    """The JSON header of one .safetensors file (8-byte little-endian length, then JSON)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ModelCardError("%s: shorter than a safetensors header" % path)
            (length,) = struct.unpack("<Q", head)
            if length > _MAX_HEADER:
                raise ModelCardError("%s: header length %d is not a safetensors header" % (path, length))
            raw = fh.read(length)
    except OSError as exc:
        raise ModelCardError("%s: %s" % (path, exc.strerror or exc)) from None
    if len(raw) < length:
        raise ModelCardError("%s: header cut short (%d of %d bytes)" % (path, len(raw), length))
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelCardError("%s: header is not JSON (%s)" % (path, str(exc)[:80])) from None
    if not isinstance(header, dict):
        raise ModelCardError("%s: header is not a JSON object" % path)
    return header


def _tensor_counts(header, path):
    """(parameters, bytes) of the tensors one header lists."""
    params = nbytes = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or not isinstance(info.get("shape"), list):
            raise ModelCardError("%s: tensor %r has no shape" % (path, name))
        count = 1
        for dim in info["shape"]:
            if _int(dim) is None:
                raise ModelCardError("%s: tensor %r has shape %r" % (path, name, info["shape"]))
            count *= dim
        params += count
        offsets = info.get("data_offsets")
        if (isinstance(offsets, list) and len(offsets) == 2 and all(_int(o) is not None for o in offsets)
                and offsets[1] >= offsets[0]):
            nbytes += offsets[1] - offsets[0]
        else:
            nbytes += count * _DTYPE_BYTES.get(str(info.get("dtype")), 0)
    return params, nbytes


def weight_files(path):
    """The weight files an engine loads from a directory, as TensorRT-LLM's HfWeightLoader globs them:
    ``*.safetensors`` (without a ``consolidated`` one when shards are present), sorted by name."""
    try:
        names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    except OSError:
        return []
    sharded = [n for n in names if "consolidated" not in n]
    return sharded or names


def fingerprint(path):
    """A model directory's card: a dict of ``path``, ``config_sha256`` and the identifying fields of
    config.json and the weights (see the module's doc). Raises :class:`ModelCardError` naming the file
    when config.json is missing or unreadable; weights that cannot be read leave their fields None and
    say why in ``weights_problem``."""
    if not path or not os.path.isdir(path):
        raise ModelCardError("%s: not a directory" % path)
    real = os.path.realpath(path)
    config, raw = _read_json(os.path.join(real, "config.json"))
    if not isinstance(config, dict):
        raise ModelCardError("%s: not a JSON object" % os.path.join(real, "config.json"))
    card = {"path": real, "config_sha256": hashlib.sha256(raw).hexdigest()}
    card.update(_config_fields(config))
    hf_quant = os.path.join(real, "hf_quant_config.json")
    if not card["quantization"] and os.path.isfile(hf_quant):
        try:
            quant, _ = _read_json(hf_quant)
            algo = (quant.get("quantization") or {}).get("quant_algo") if isinstance(quant, dict) else None
            card["quantization"] = str(algo) if algo else None
        except ModelCardError:
            pass
    files = weight_files(real)
    card.update({"weight_files": files, "param_count": None, "tensor_bytes": None, "checkpoint_bytes": None,
                 "expert_tensor_bytes": None, "weights_source": None, "weights_problem": None})
    if files:
        try:
            card["checkpoint_bytes"] = sum(os.path.getsize(os.path.join(real, n)) for n in files)
            params = nbytes = experts = 0
            for name in files:
                file_path = os.path.join(real, name)
                header = safetensors_header(file_path)
                p, b = _tensor_counts(header, file_path)
                params, nbytes, experts = params + p, nbytes + b, experts + expert_tensor_bytes(header)
            card.update(param_count=params, tensor_bytes=nbytes, expert_tensor_bytes=experts,
                        weights_source="safetensors headers")
        except (OSError, ModelCardError) as exc:
            card["weights_problem"] = str(exc)
    if card["tensor_bytes"] is None:
        index = os.path.join(real, "model.safetensors.index.json")
        if os.path.isfile(index):
            try:
                data, _ = _read_json(index)
                total = _int(((data.get("metadata") or {}) if isinstance(data, dict) else {}).get("total_size"))
                if total is not None:
                    card.update(tensor_bytes=total, weights_source="model.safetensors.index.json total_size")
            except ModelCardError as exc:
                card["weights_problem"] = card["weights_problem"] or str(exc)
        elif not files:
            card["weights_problem"] = "no *.safetensors weights in %s" % real
    return card


# ------------------------------------------------------------------------------------------ GGUF

#: ggml tensor types: id -> (name, elements per block, bytes per block), as gguf-py/gguf/constants.py's
#: GGMLQuantizationType and GGML_QUANT_SIZES give them (gguf 0.19.0, the gguf-py of llama.cpp; a unit test compares
#: this table with the installed package's). A tensor of a type not listed here counts its bytes up to the next
#: tensor's offset.
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}
#: llama.cpp's file types (``general.file_type``: gguf-py's LlamaFileType, 0.19.0) -> the name llama.cpp prints.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
}
#: The unquantised file types and the dtype their matrices have.
_FILE_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
#: How much of the file's start (and end) is hashed: the header and the first (last) tensor data.
HASH_BYTES = 1 << 20
#: A routed expert's tensor in llama.cpp's names: ``blk.N.ffn_{gate,up,down,gate_up}_exps.weight`` (one tensor holds
#: every expert of a layer); the shared experts' are ``*_shexp`` (src/llama-arch.cpp LLM_TENSOR_FFN_*_EXPS).
GGUF_EXPERT_MARK = "_exps."
#: Metadata naming the Hugging Face repositories a GGUF was made from (gguf-py's Keys.General: source.*,
#: base_model.N.*; convert_hf_to_gguf.py writes them from the model card).
_SOURCE_KEYS = ("general.source.huggingface.repository", "general.source.url", "general.source.repo_url")
_HF_URL = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/")


def _repo(value):
    """``org/name`` from a Hugging Face repository id or URL; None for anything else."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    for prefix in _HF_URL:
        if text.lower().startswith(prefix):
            text = text[len(prefix):]
            break
    else:
        if "://" in text:
            return None
    parts = [p for p in text.split("/") if p]
    return "%s/%s" % (parts[0], parts[1]) if len(parts) >= 2 else None


def gguf_source_repos(meta: dict) -> list:
    """The Hugging Face repositories a GGUF's metadata names as its source or base models, in order, each once."""
    found = [meta.get(key) for key in _SOURCE_KEYS]
    count = meta.get("general.base_model.count")
    for i in range(count if isinstance(count, int) and not isinstance(count, bool) and 0 < count < 64 else 0):
        base = "general.base_model.%d." % i
        found.append(meta.get(base + "repo_url"))
        if isinstance(meta.get(base + "organization"), str) and isinstance(meta.get(base + "name"), str):
            found.append("%s/%s" % (meta[base + "organization"], meta[base + "name"]))
    out = []
    for value in found:
        repo = _repo(value)
        if repo and repo.lower() not in [r.lower() for r in out]:
            out.append(repo)
    return out


def _file_hashes(path: str, size: int):
    head, tail = hashlib.sha256(), hashlib.sha256()
    with open(path, "rb") as fh:
        head.update(fh.read(HASH_BYTES))
        fh.seek(max(size - HASH_BYTES, 0))
        tail.update(fh.read(HASH_BYTES))
    return head.hexdigest(), tail.hexdigest()


def _tensor_sizes(tensors: list, data_bytes: int):
    """(parameters, bytes, routed experts' bytes, ggml types not known) of a GGUF's tensors."""
    params = nbytes = experts = 0
    unknown = []
    by_offset = sorted(t[3] for t in tensors)
    for name, shape, kind, offset in tensors:
        count = 1
        for dim in shape:
            count *= dim
        params += count
        if kind in GGML_TYPES:
            _, block, per_block = GGML_TYPES[kind]
            size = (count // block) * per_block if block > 1 else count * per_block
        else:  # up to the next tensor's data (padding included): exact enough for a weight total
            unknown.append(kind)
            later = [o for o in by_offset if o > offset]
            size = (later[0] if later else data_bytes) - offset
        nbytes += max(size, 0)
        if GGUF_EXPERT_MARK in name + ".":
            experts += max(size, 0)
    return params, nbytes, experts, sorted(set(unknown))


def gguf_card(path: str) -> dict:
    """A GGUF file's card (the weights llama.cpp serves): ``path``, ``format`` gguf, ``file_bytes`` (also as
    ``checkpoint_bytes``), ``head_sha256`` and ``tail_sha256`` (its first and last MiB), the header's identifying
    fields (``architecture`` general.architecture, ``name``, ``num_hidden_layers`` / ``hidden_size`` /
    ``context_length`` from ``<arch>.block_count`` / ``embedding_length`` / ``context_length``, ``vocab_size``
    the tokenizer's token count, ``file_type`` and its ``dtype`` or ``quantization``, a mixture of experts' counts,
    ``source_repos``) and the tensors' ``tensor_count``, ``param_count``, ``tensor_bytes`` and
    ``expert_tensor_bytes``. Raises :class:`ModelCardError` naming the file when it cannot be read as a GGUF."""
    if not path or not os.path.isfile(path):
        raise ModelCardError("%s: not a file" % path)
    real = os.path.realpath(path)
    try:
        header = gguf_tokenizer.read_header(real)
        head, tail = _file_hashes(real, header["size"])
    except OSError as exc:
        raise ModelCardError("%s: %s" % (real, exc.strerror or exc)) from None
    except gguf_tokenizer.TokenizerError as exc:
        raise ModelCardError("%s: %s" % (real, exc)) from None
    meta = header["metadata"]
    arch = meta.get("general.architecture") if isinstance(meta.get("general.architecture"), str) else None

    def arch_int(key):
        value = meta.get("%s.%s" % (arch, key)) if arch else None
        return _int(value)

    ftype = _int(meta.get("general.file_type"))
    type_name = FILE_TYPES.get(ftype, "type %d" % ftype) if ftype is not None else None
    params, nbytes, experts, unknown = _tensor_sizes(header["tensors"], header["size"] - header["data_offset"])
    vocab = _int(meta.get("tokenizer.ggml.tokens#count")) or arch_int("vocab_size")
    name = meta.get("general.name")
    return {
        "path": real, "format": "gguf", "gguf_version": header["version"], "file_bytes": header["size"],
        "checkpoint_bytes": header["size"], "head_sha256": head, "tail_sha256": tail, "hashed_bytes": HASH_BYTES,
        "config_sha256": None, "architecture": arch, "model_type": arch,
        "name": name if isinstance(name, str) else None, "num_hidden_layers": arch_int("block_count"),
        "hidden_size": arch_int("embedding_length"), "context_length": arch_int("context_length"),
        "vocab_size": vocab, "file_type": type_name, "dtype": _FILE_DTYPES.get(type_name),
        "quantization": None if type_name in _FILE_DTYPES or type_name is None else type_name,
        "moe_experts": arch_int("expert_count"), "moe_experts_per_token": arch_int("expert_used_count"),
        "moe_shared_experts": arch_int("expert_shared_count"), "source_repos": gguf_source_repos(meta),
        "tensor_count": len(header["tensors"]), "param_count": params, "tensor_bytes": nbytes,
        "expert_tensor_bytes": experts, "weight_files": [os.path.basename(real)],
        "weights_source": "GGUF tensor infos",
        "weights_problem": ("ggml types %s not known here: their bytes counted up to the next tensor"
                            % ", ".join(map(str, unknown))) if unknown else None,
    }


def weights_card(path):
    """(card, problem) of the weights a served model's ``path`` names: a .gguf file's :func:`gguf_card`, a
    directory's :func:`fingerprint`; (None, why) when there is none (no path, nothing there, unreadable)."""
    if not path:
        return None, "the model has no path; a Hugging Face id is loaded from the engine's own cache"
    try:
        if os.path.isdir(path):
            return fingerprint(path), None
        if str(path).endswith(".gguf") or os.path.isfile(path):
            return gguf_card(path), None
        raise ModelCardError("%s: not a file or directory on this host" % path)
    except ModelCardError as exc:
        return None, str(exc)


#: The fields that say whether a path still holds the same weights (:func:`identity_changes`).
IDENTITY_FIELDS = ("file_bytes", "head_sha256", "tail_sha256", "tensor_count", "param_count", "tensor_bytes",
                   "config_sha256", "checkpoint_bytes", "architecture", "file_type", "dtype", "num_hidden_layers",
                   "hidden_size")


def identity(card) -> dict:
    """The identifying part of a card (:data:`IDENTITY_FIELDS` it gives), kept to compare later runs with."""
    return {k: card.get(k) for k in ("path",) + IDENTITY_FIELDS if isinstance(card, dict) and card.get(k) is not None}


def identity_changes(before, after) -> list:
    """What differs between two identities of the same path: ["head_sha256 1a2b3c4d5e6f... -> ..."]; [] when
    every field both give agrees."""
    out = []
    for key in IDENTITY_FIELDS:
        a, b = (before or {}).get(key), (after or {}).get(key)
        if a is None or b is None or a == b:
            continue
        shown = [v[:12] + "..." if isinstance(v, str) and len(v) == 64 else v for v in (a, b)]
        out.append("%s %s -> %s" % (key, shown[0], shown[1]))
    return out


class Fingerprints(object):
    """Cards of model directories, each read once (one per model and bench_run call)."""

    def __init__(self):
        self._cards = {}

    def get(self, path):
        """(card, problem): the directory's card, or None and why it has none."""
        key = os.path.realpath(path) if path else path
        if key not in self._cards:
            try:
                self._cards[key] = (fingerprint(path), None)
            except ModelCardError as exc:
                self._cards[key] = (None, str(exc))
        return self._cards[key]


# ------------------------------------------------------------------------------------------ judging


def _same_path(a, b):
    def norm(p):
        p = os.path.normpath(str(p).strip())
        return os.path.realpath(p) if os.path.exists(p) else p
    return norm(a) == norm(b)


def _close(loaded, expected, rel, abs_tol=0.0):
    return abs(float(loaded) - float(expected)) <= max(rel * abs(float(expected)), abs_tol)


def _gib(nbytes):
    return "%.2f GiB" % (float(nbytes) / _GIB)


def _check(name, expected, loaded, world):
    """(ok, expected shown, loaded shown) for one field both sides have, or None when one lacks it."""
    have = loaded.get(name)
    if name == "model_path":
        want = expected.get("path")
        if not have or not want:
            return None
        return _same_path(have, want), want, have
    if name == "weight_files":
        want = expected.get("path")
        if not have or not want:
            return None
        dirs = sorted({os.path.dirname(str(f)) for f in have})
        return all(_same_path(d, want) for d in dirs), want, ", ".join(dirs)
    if name == "dtype":
        want, have = expected.get("dtype"), norm_dtype(have)
        if not want or not have:
            return None
        # a float32 checkpoint is run in 16 bits by engines left at dtype auto: the same model
        return want == have or (want == "float32" and have in _HALF), want, have
    if name == "checkpoint_bytes":
        want = expected.get("checkpoint_bytes")
        if want is None or have is None:
            return None
        # printed as GB with two decimals: 0.005 GiB of rounding on top of the tolerance
        return _close(have, want, CHECKPOINT_TOLERANCE, 0.006 * _GIB), _gib(want), _gib(have)
    if name == "weights_bytes":
        want = expected.get("tensor_bytes")
        if want is None or have is None:
            return None
        if expected.get("dtype") == "float32" and not expected.get("quantization"):
            run_dtype = norm_dtype(loaded.get("dtype"))
            if run_dtype in _HALF:
                want = want / 2.0  # built in 16 bits from a float32 checkpoint
            elif run_dtype != "float32":
                return None  # its size on the GPU depends on a dtype the output does not show
        total = float(have) * max(int(world or 1), 1)  # the engine prints one rank's share
        return _close(total, want, WEIGHTS_TOLERANCE, 0.011 * _GIB), _gib(want), _gib(total)
    if name == "tensor_bytes":  # an exact count from the engine (llama-server's model size), not a rounded print
        want = expected.get("tensor_bytes")
        if want is None or have is None:
            return None
        return _close(have, want, TENSOR_BYTES_TOLERANCE), "%d" % want, "%d" % int(have)
    if name == "param_count":
        want = expected.get("param_count")
        if want is None or have is None:
            return None
        return _close(have, want, PARAM_TOLERANCE), "%d" % want, "%d" % int(have)
    want = expected.get(name)
    if want is None or have is None:
        return None
    if isinstance(want, str):
        return str(want).strip().lower() == str(have).strip().lower(), want, have
    try:
        return int(want) == int(have), want, have
    except (TypeError, ValueError):
        return False, want, have


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def judge(expected, loaded, expected_problem=None, world=1, applicable=True):
    """The provenance of one run: ``{status, reason, expected, loaded, checks}``.

    ``expected``: the model directory's card (None when there is none: ``expected_problem`` says why);
    ``loaded``: what the engine's output shows it loaded (``ParseResult.loaded``); ``world``: ranks the
    engine split the weights over (its "for model weights" figure is one rank's). ``mismatch`` on any
    field that differs, naming it and both values; ``confirmed`` when nothing differs and one identifying
    field (IDENTIFYING) matched; otherwise ``unconfirmed`` with the reason. The model path alone, and a
    model name alone, are the harness's own arguments echoed back: never enough to confirm.
    """
    loaded = {k: v for k, v in (loaded or {}).items() if v is not None and (not isinstance(v, float) or _finite(v))}
    out = {"status": "unconfirmed", "reason": None, "expected": expected, "loaded": loaded or None, "checks": {}}
    if not applicable:
        out.update(status="not_applicable", reason="the workload loads no model")
        return out
    if expected is None:
        out["reason"] = "no model directory to compare with (%s)" % (expected_problem or "the model has no path")
        return out
    what = "the GGUF" if expected.get("format") == "gguf" else "the model directory"
    if not loaded:
        out["reason"] = "the engine's output shows nothing of the model it loaded"
        return out
    mismatches, matched = [], []
    for name in CHECK_ORDER:
        result = _check(name, expected, loaded, world)
        if result is None:
            continue
        ok, want, have = result
        identifies = name in IDENTIFYING and (name not in ("checkpoint_bytes", "weights_bytes") or float(
            expected.get("checkpoint_bytes" if name == "checkpoint_bytes" else "tensor_bytes") or 0)
            >= MIN_IDENTIFYING_BYTES)
        out["checks"][name] = {"ok": bool(ok), "expected": want, "loaded": have, "identifies": identifies}
        if ok:
            matched.append((name, identifies))
        else:
            mismatches.append("%s: the engine loaded %s, %s has %s" % (name, have, what, want))
    if mismatches:
        out.update(status="mismatch", reason="; ".join(mismatches))
    elif any(identifies for _, identifies in matched):
        out["status"] = "confirmed"
    elif matched:
        out["reason"] = ("only %s matched, which does not identify the model (a path is sparkfleet's own "
                         "argument echoed; a dtype or a size under 1 GiB is shared by many models)"
                         % ", ".join(name for name, _ in matched))
    else:
        out["reason"] = "the engine's output shows no field %s has (%s)" % (what, ", ".join(sorted(loaded)))
    return out
