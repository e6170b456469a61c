# -*- coding: utf-8 -*-
"""What a serving run served (issue 35): the engine's version, the weights, and whether they are the campaign's.

A serving record says which engine build answered and which weights it served, checked as a trtllm run's are
(modelcard.judge: the weights' card against what the engine itself shows it loaded), so that a changed file, a
mislabelled model or an unknown build cannot pass for the campaign's:

* **the engine's version**, from the engine's own command in the run's environment before the server starts
  (its serving.ENGINES row's ``version``, :func:`parse_version`): ``llama-server --version`` (ggml-org/llama.cpp
  common/arg.cpp's ``--version``, printed by common/build-info.cpp.in ``llama_print_build_info`` on stderr:
  ``version: <version> (build <n>, commit <hash>)`` and ``built with <compiler> for <target>``; builds before it
  print ``version: <n> (<hash>)``), ``vllm --version`` (vllm-project/vllm vllm/entrypoints/cli/main.py: argparse's
  version action, ``importlib.metadata.version("vllm")`` on stdout), and for SGLang and TensorRT-LLM the Python
  package the server runs from (:data:`PY_VERSION`: its dist-info metadata, else its ``version.py`` --
  sgl-project/sglang python/sglang/version.py, NVIDIA/TensorRT-LLM tensorrt_llm/version.py -- never imported);
* **the weights' card** (modelcard.weights_card): a GGUF's header, size, the SHA-256 of its first and last MiB
  and its tensors' bytes; a directory's config.json and safetensors headers (or index);
* **what the engine shows it loaded** (:func:`loaded_from_meta`, :func:`loaded_from_log`): llama-server's
  ``GET /v1/models`` ``meta`` (its own parameter count, tensor bytes, embedding size and vocabulary: tools/server
  server.cpp ``model_meta``), and the start-up lines of vLLM (``Resolved architecture: X``, vllm/config/model.py;
  ``Model loading took X GiB``, vllm/v1/worker/gpu_model_runner.py), SGLang (``Load weight end. type=X, dtype=Y,
  ... mem usage=Z GB.``, python/sglang/srt/model_executor/model_runner.py) and TensorRT-LLM
  (parsers/trtllm_loading.py) and, at llama.cpp's verbose levels, its ``print_info`` lines;
* **the campaign's model** (:func:`campaign_problems`, :class:`SeenWeights`): the weights at a path must be the same
  file in every run of the campaign on the host (the first run's card is kept beside the ledger), and a GGUF that
  names its Hugging Face source must name the model's ``hf_id`` (or the GGUF repository made from it).

Standard library only, Python 3.8 syntax: it runs on the hosts inside ``bench_run``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

from ..contract.textfile import read_json_object, write_atomic
from ..parsers.trtllm_loading import parse_loading_lines
from . import modelcard

#: The longest a version command may take (vLLM's CLI imports torch; a container starts first).
VERSION_TIMEOUT_S = 180.0
#: The version of a Python package as the environment's python3 has it, without importing the package (importing
#: tensorrt_llm initialises CUDA): ``python3 -c PY_VERSION <distribution> <module>`` prints ``<version>\t<where>``,
#: from the distribution's metadata, else ``<module>/version.py``'s ``__version__``; exits non-zero naming what it
#: looked for when neither is there.
PY_VERSION = "\n".join((
    "import importlib.util, os, re, sys",
    "dist, mod = sys.argv[1], sys.argv[2]",
    "try:",
    "    from importlib.metadata import version",
    "    print('%s\\t%s dist-info metadata (%s)' % (version(dist), dist, sys.executable))",
    "    sys.exit(0)",
    "except Exception:",
    "    pass",
    "spec = importlib.util.find_spec(mod)",
    "for d in (spec.submodule_search_locations or []) if spec else []:",
    "    p = os.path.join(d, 'version.py')",
    "    m = re.search(r'^__version__\\s*(?::\\s*str\\s*)?=\\s*[\\'\"]([^\\'\"]+)[\\'\"]', open(p).read(), re.M)"
    " if os.path.isfile(p) else None",
    "    if m:",
    "        print('%s\\t%s' % (m.group(1), p))",
    "        sys.exit(0)",
    "sys.exit('no %s package (dist-info metadata or %s/version.py) for %s' % (dist, mod, sys.executable))",
))

_VERSION_TOKEN = re.compile(r"^v?\d+(?:\.\d+)+[0-9A-Za-z.+_-]*$")
_LLAMA_VERSION = re.compile(r"^version:\s*(\S.*?)\s*$")
_LLAMA_BUILD = re.compile(r"\(build (\d+), commit ([0-9A-Za-z]+)\)")
_LLAMA_OLD = re.compile(r"^(\d+) \(([0-9A-Za-z]+)\)$")
_LLAMA_BUILT = re.compile(r"^built with (.+?) for (.+?)\s*$")


def _lines(text: str) -> list:
    """The output's lines, without run_process's ``$ command`` line."""
    return [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.startswith("$ ")]


def parse_version(engine: str, text: str) -> dict:
    """The version the engine's version command printed: ``{"version", ...}`` (llama.cpp also ``build``,
    ``commit``, ``built_with``; the Python packages ``where``), or ``{"version": None, "error": why}``."""
    lines = _lines(text)
    if engine == "llama.cpp":
        out = {"version": None}
        for line in lines:
            match = _LLAMA_VERSION.match(line)
            if match:
                out["version"] = match.group(1)
                build = _LLAMA_BUILD.search(line) or _LLAMA_OLD.match(match.group(1))
                if build:
                    out["build"], out["commit"] = int(build.group(1)), build.group(2)
            match = _LLAMA_BUILT.match(line)
            if match:
                out["built_with"] = "%s for %s" % (match.group(1), match.group(2))
        if out["version"] is None:
            out["error"] = "no 'version: ...' line in its output (%s)" % (" | ".join(lines[-3:]) or "none")
        return out
    if engine == "vllm":
        for line in reversed(lines):
            if _VERSION_TOKEN.match(line):
                return {"version": line}
        return {"version": None, "error": "no version in its output (%s)" % (" | ".join(lines[-3:]) or "none")}
    for line in reversed(lines):  # PY_VERSION's "<version>\t<where>"
        version, sep, where = line.partition("\t")
        if sep and _VERSION_TOKEN.match(version.strip()):
            return {"version": version.strip(), "where": where.strip()}
    return {"version": None, "error": " | ".join(lines[-3:]) or "no output"}


# ------------------------------------------------------------------------------ what the engine loaded

_GIB = float(1 << 30)
_VLLM_ARCH = re.compile(r"Resolved architecture:\s*(\S+)")
_VLLM_WEIGHTS = re.compile(r"Model loading took\s+([0-9.]+)\s*GiB")
_SGLANG_WEIGHTS = re.compile(r"Load weight end\.\s*type=([^,\s]+),\s*dtype=([^,\s]+),.*?mem usage=([0-9.]+)\s*GB")
#: llama.cpp's print_info lines (src/llama-model.cpp, shown at -lv 4 and by older builds): key -> card field.
_LLAMA_INFO = re.compile(r"print_info:\s*(arch|n_layer|n_embd|n_vocab|file type)\s*=\s*(\S+)")
_LLAMA_FIELDS = {"arch": "architecture", "n_layer": "num_hidden_layers", "n_embd": "hidden_size",
                 "n_vocab": "vocab_size", "file type": "file_type"}


def loaded_from_log(engine: str, text: str) -> dict:
    """What the engine's start-up log shows it loaded, as modelcard.judge's ``loaded`` fields; {} when nothing."""
    text = text or ""
    out = {}
    if engine == "vllm":
        for match in _VLLM_ARCH.finditer(text):
            out["architecture"] = match.group(1)
        for match in _VLLM_WEIGHTS.finditer(text):
            out["weights_bytes"] = float(match.group(1)) * _GIB
    elif engine == "sglang":
        for match in _SGLANG_WEIGHTS.finditer(text):
            out.update(architecture=match.group(1), dtype=modelcard.norm_dtype(match.group(2)),
                       weights_bytes=float(match.group(3)) * _GIB)
    elif engine == "trtllm-serve":
        out.update(parse_loading_lines(text))
        out.pop("num_attention_layers", None)
    elif engine == "llama.cpp":
        for key, value in _LLAMA_INFO.findall(text):
            field = _LLAMA_FIELDS[key]
            out[field] = int(value) if value.isdigit() else value
    return out


def model_meta(payload):
    """The ``meta`` of llama-server's ``GET /v1/models`` answer (its first model's), or None."""
    data = payload.get("data") if isinstance(payload, dict) else None
    meta = data[0].get("meta") if isinstance(data, list) and data and isinstance(data[0], dict) else None
    return meta if isinstance(meta, dict) else None


def loaded_from_meta(meta) -> dict:
    """What llama-server's model ``meta`` (:func:`model_meta`: the engine's own counts of the model it loaded) says,
    as modelcard.judge's ``loaded`` fields; {} for anything else."""
    if not isinstance(meta, dict):
        return {}
    out = {}
    for key, field in (("n_params", "param_count"), ("size", "tensor_bytes"), ("n_embd", "hidden_size"),
                       ("n_vocab", "vocab_size"), ("n_ctx_train", "context_length")):
        value = meta.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[field] = value
    if isinstance(meta.get("ftype"), str):
        out["file_type"] = meta["ftype"]
    return out


# ------------------------------------------------------------------------------ the campaign's model

def _repo_name(repo: str) -> str:
    """A repository's model name for comparing a GGUF repository with its source: lower case, a ``-GGUF`` (or
    ``_gguf``) suffix dropped (``unsloth/Qwen3-8B-GGUF`` -> ``qwen3-8b``)."""
    name = str(repo).strip().rstrip("/").split("/")[-1].lower()
    for suffix in ("-gguf", "_gguf", ".gguf"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def hf_id_problem(model: dict, card) -> str:
    """Why the GGUF is not the model's ``hf_id`` ("" when it may be): the GGUF names Hugging Face repositories as its
    source or base models and none is the hf_id, nor has the hf_id's model name (a GGUF repository made from it,
    ``unsloth/Qwen3-8B-GGUF`` for ``Qwen/Qwen3-8B``)."""
    hf_id = (model or {}).get("hf_id")
    repos = (card or {}).get("source_repos") or []
    if not hf_id or not repos:
        return ""
    if any(str(r).lower() == str(hf_id).lower() or _repo_name(r) == _repo_name(hf_id) for r in repos):
        return ""
    return ("hf_id: the campaign's model is %s, the GGUF names its source as %s"
            % (hf_id, ", ".join(repos)))


class SeenWeights(object):
    """The weights each path held when a run of this campaign on this host first served it: the path's card
    identity (modelcard.identity) and that run, kept in ``<host dir>/.sparkfleet-weights.json`` so that a resumed
    job compares with the same first run."""

    NAME = ".sparkfleet-weights.json"

    def __init__(self, host_dir: str):
        self.path = os.path.join(host_dir, self.NAME)

    def _read(self) -> dict:
        return read_json_object(self.path) or {}

    def check(self, card, run_id: str):
        """(the first run's entry {run_id, identity} for the card's path or None, what changed since it: []);
        the card is kept as the path's first when the path is new."""
        if not isinstance(card, dict) or not card.get("path"):
            return None, []
        seen = self._read()
        first = seen.get(card["path"])
        if not isinstance(first, dict) or not isinstance(first.get("identity"), dict):
            seen[card["path"]] = {"run_id": run_id, "identity": modelcard.identity(card)}
            with contextlib.suppress(OSError):  # a full disk: the run's own record is what matters
                write_atomic(self.path, json.dumps(seen, indent=1, sort_keys=True) + "\n", mode=0o600)
            return None, []
        if first.get("run_id") == run_id:
            return None, []  # this run again (a retry): nothing earlier to compare with
        return first, modelcard.identity_changes(first["identity"], modelcard.identity(card))


def judge(model: dict, card, problem, loaded: dict, first=None, changes=None) -> dict:
    """The provenance of a serving run (the record's ``provenance``): modelcard.judge of the weights' ``card``
    against what the engine showed it ``loaded``, then the campaign's model: the weights at the path changed since
    the ``first`` run of the campaign that served them (``changes``), or a GGUF naming another source than the
    model's hf_id, is a ``mismatch`` naming it."""
    verdict = modelcard.judge(card, loaded, problem)
    mismatches = []
    if first is not None:
        ok = not changes
        verdict["checks"]["weights_unchanged"] = {
            "ok": ok, "expected": "as in run %s" % first.get("run_id"), "identifies": False,
            "loaded": "the same" if ok else "; ".join(changes)}
        if not ok:
            mismatches.append("weights changed: %s is not what run %s of this campaign served (%s)"
                              % ((card or {}).get("path"), first.get("run_id"), "; ".join(changes)))
    hf = hf_id_problem(model, card)
    if card is not None and (model or {}).get("hf_id") and (card.get("source_repos") or []):
        verdict["checks"]["hf_id"] = {"ok": not hf, "expected": model["hf_id"], "identifies": False,
                                      "loaded": ", ".join(card["source_repos"])}
    if hf:
        mismatches.append(hf)
    if mismatches:
        reason = verdict.get("reason") if verdict["status"] == "mismatch" else None
        verdict.update(status="mismatch", reason="; ".join([m for m in mismatches] + ([reason] if reason else [])))
    return verdict
