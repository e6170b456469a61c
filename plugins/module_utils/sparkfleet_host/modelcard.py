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

Standard library only, Python 3.8 syntax: it runs on the hosts inside ``bench_run``.
"""

import hashlib
import json
import math
import os
import struct

from .record import PROVENANCE_STATUSES as STATUSES  # noqa: F401 (re-exported: the statuses judge() gives)

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

#: Fields that identify a model's content; a run is ``confirmed`` only when one of them matched.
IDENTIFYING = ("architecture", "num_hidden_layers", "hidden_size", "param_count", "checkpoint_bytes",
               "weights_bytes")
#: The engine prints sizes in GB with two decimals: below this a matching size says little (two small
#: models both print 0.01 GB), so it is checked but does not confirm.
MIN_IDENTIFYING_BYTES = 1 << 30
#: The order checks are made and named in.
CHECK_ORDER = ("model_path", "weight_files", "architecture", "num_hidden_layers", "hidden_size", "dtype",
               "param_count", "checkpoint_bytes", "weights_bytes")

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
            mismatches.append("%s: the engine loaded %s, the model directory has %s" % (name, have, want))
    if mismatches:
        out.update(status="mismatch", reason="; ".join(mismatches))
    elif any(identifies for _, identifies in matched):
        out["status"] = "confirmed"
    elif matched:
        out["reason"] = ("only %s matched, which does not identify the model (a path is sparkfleet's own "
                         "argument echoed; a dtype or a size under 1 GiB is shared by many models)"
                         % ", ".join(name for name, _ in matched))
    else:
        out["reason"] = "the engine's output shows no field the model directory has (%s)" % ", ".join(sorted(loaded))
    return out
