# -*- coding: utf-8 -*-
"""trtllm-bench per TensorRT-LLM version: what an image's command line offers, read from its files, and the
argv of a trtllm run built for exactly that version.

Three pieces, each usable without Ansible and without starting anything:

* :data:`PROFILES`: the supported versions and what their CLI offers (how a dataset is made, the spelling of
  the LLM API options flag, whether ``latency`` takes it). Every fact names the upstream file and commit it
  was read from; tests/data/trtllm-cli/<version>.json holds the full command trees (the contract test feeds
  every argv :func:`steps` can build to them).
* :func:`detect`: the version and CLI surface of a root filesystem (an extracted image, or ``/``), from its
  files alone: ``tensorrt_llm/version.py`` (else the dist-info METADATA, else ``__init__.py``), the
  ``prepare-dataset`` subcommand's module, the image's standalone ``benchmarks/cpp/prepare_dataset.py``.
* :func:`resolve` + :func:`steps`: the run's commands. The tokenizer always comes from the model's local
  directory, never the Hugging Face Hub; runs are offline (``HF_HUB_OFFLINE=1``) unless the inventory binds
  a Hugging Face cache (:data:`HF_CACHE_TARGET`, in both environments); ``latency`` never gets
  ``--max_batch_size``; an unknown version is refused, or run with the nearest profile and a warning when
  the user opted in (``unknown_version: warn``) - never guessed silently.
"""

from __future__ import annotations

import glob
import os
import re

#: The image's standalone dataset script (NVIDIA's DGX Spark benchmarking guide runs it with ``--stdout``:
#: NVIDIA/dgx-spark-playbooks nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md, lines
#: 99-106, image release:1.2.0rc6). The release image copies ``benchmarks`` to /app/tensorrt_llm
#: (NVIDIA/TensorRT-LLM docker/Dockerfile.multi @00f74add). Removed from main by PR #16612 (2026-07).
SCRIPT_PATH = "/app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py"
#: Where an opted-in Hugging Face cache is bound, in the chroot and in the container (NVIDIA's playbooks:
#: ``-v $HOME/.cache/huggingface/:/root/.cache/huggingface/``, dgx-spark-playbooks nvidia/trt-llm/README.md
#: @9809e38 lines 190-195); both environments run as root with HOME=/root.
HF_CACHE_TARGET = "/root/.cache/huggingface"
#: What to do with a version no profile lists.
UNKNOWN_VERSION_POLICIES = ("refuse", "warn")
#: The run's LLM API options file (in its run dir).
LLM_API_OPTIONS = "extra_llm_api_options.yaml"

# Facts per profile (the command trees with every option: tests/data/trtllm-cli/*.json):
#
# * subcommand: ``trtllm-bench prepare-dataset`` exists. Absent in 1.0/1.1: tensorrt_llm/commands/bench.py
#   @0c9a37db registers build/throughput/latency only. Added by PR #9250 ("Port prepare_dataset into
#   trtllm-bench", merged 2025-11) as tensorrt_llm/bench/dataset/prepare_dataset.py; present @0c8de69a
#   (version.py: 1.2.0rc8) and in 1.3.x (docs 1.3.0rc26, commands/trtllm-bench.html). 1.2.0rc6 cannot be
#   pinned (the PR landed between rc2 @b35ac1b6 and rc8): None, unknown - detection decides.
#   Its tokenizer is ``ctx.obj.model or ctx.obj.checkpoint_path`` (prepare_dataset.py @0c8de69a): --model, so
#   the prepare step passes the local directory as --model.
# * script: the image has SCRIPT_PATH (click group, ``--tokenizer`` required, ``--stdout``; subcommand
#   token-norm-dist from benchmarks/cpp/utils/prepare_synthetic_data.py @084703ee).
# * config_flag: ``--extra_llm_api_options`` in throughput.py @000a01de (1.0.0rc4), @56851033 and low_latency
#   @89fd9b74; ``--config`` is the preferred spelling since PR #10005 (2025-12), ``--extra_llm_api_options``
#   its alias (docs 1.3.0rc26). Used for 1.3.x only: before it, whether an rc has --config is not pinned.
# * latency_options_file: low_latency.py @000a01de (1.0.0rc4) has no --extra_llm_api_options, @89fd9b74 (a
#   later 1.x, version not pinned) has it. 1.1.0rc3 cannot be pinned: False (the CLI fraction alone sizes
#   the KV cache there, as in 1.0.0rc4's latency_command).
# * latency never has --max_batch_size (low_latency.py @000a01de, @89fd9b74: max_batch_size forced to 1).
PROFILES = (
    {"name": "1.1", "versions": ["1.1.0rc3"], "floor": "1.1.0rc3", "dataset": "script",
     "subcommand": False, "script": True, "config_flag": "--extra_llm_api_options",
     "latency_options_file": False,
     "note": "spark-single-gpu-dev (DGX Spark playbooks 2025-10..12); prepare-dataset does not exist"},
    {"name": "1.2.0rc6", "versions": ["1.2.0rc6"], "floor": "1.2.0rc6", "dataset": "script",
     "subcommand": None, "script": True, "config_flag": "--extra_llm_api_options",
     "latency_options_file": True,
     "note": "DGX Spark playbooks 2026-01..03; NVIDIA's Spark guide makes its dataset with the script"},
    {"name": "1.2", "versions": ["1.2.0rc8"], "floor": "1.2.0rc8", "dataset": "subcommand",
     "subcommand": True, "script": True, "config_flag": "--extra_llm_api_options",
     "latency_options_file": True, "note": "prepare-dataset pinned at @0c8de69a"},
    {"name": "1.3", "versions": [], "pattern": r"1\.3\.0rc[0-9]+", "floor": "1.3.0rc0",
     "dataset": "subcommand", "subcommand": True, "script": True, "config_flag": "--config",
     "latency_options_file": True,
     "note": "DGX Spark playbooks 2026-04.. (1.3.0rc5, 1.3.0rc13); --config preferred (PR #10005)"},
)
#: Image tags that are not version numbers, for offline planning only (a run reads the image's own files).
#: spark-single-gpu-dev: a public DGX Spark log of 2025-12-20 prints "TensorRT-LLM version: 1.1.0rc3"
#: (tests/data/trtllm-bench-published/gb10-1.1.0rc3-memory-excerpt.log); an inference, not a pinned fact.
IMAGE_TAG_VERSIONS = {"spark-single-gpu-dev": "1.1.0rc3"}


def version_from_image(image):
    """(version, how) that an image reference's tag suggests, for offline planning; (None, why) otherwise."""
    ref = str(image or "")
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else ""
    if not tag:
        return None, "image %r has no tag" % ref
    if tag in IMAGE_TAG_VERSIONS:
        return IMAGE_TAG_VERSIONS[tag], "tag %s is TensorRT-LLM %s (an inference from a public log)" % (
            tag, IMAGE_TAG_VERSIONS[tag])
    if version_key(tag) is not None and re.match(r"^\d+\.\d+", tag):
        return tag, "from the image tag %s" % tag
    return None, "image tag %r does not name a TensorRT-LLM version" % tag

#: Candidate python library directories of an image (globs, relative to its root).
PYTHON_DIRS = ("usr/local/lib/python3*/dist-packages", "usr/local/lib/python3*/site-packages",
               "usr/lib/python3/dist-packages", "usr/lib/python3*/site-packages")
#: Files of the package that say something about its CLI (relative to the package directory).
PACKAGE_FILES = ("version.py", "__init__.py", "bench/dataset/prepare_dataset.py",
                 "bench/benchmark/throughput.py", "bench/benchmark/low_latency.py")
_VERSION_RE = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M)
_METADATA_RE = re.compile(r"^Version:\s*(\S+)", re.M)


class TrtllmCliError(Exception):
    """A trtllm run that cannot be built for this image (unknown version refused, no local model, ...)."""


# ----------------------------------------------------------------------------------------- versions


def version_key(version):
    """Sortable key of a PEP 440-ish version (1.2.0rc8 < 1.2.0 < 1.2.1); None when it is not one."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?(a|b|rc|dev|post)\.?(\d+))?", str(version or ""))
    if not m:
        return None
    major, minor, micro = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    tag, num = m.group(4), int(m.group(5) or 0)
    rank = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4, "post": 5}[tag]
    return (major, minor, micro, rank, num)


def supported_versions():
    """The supported versions, as a user reads them."""
    out = []
    for p in PROFILES:
        out += p["versions"]
        if p.get("pattern"):
            out.append(p["pattern"].replace("\\.", ".").replace("[0-9]+", "N"))
    return out


def profile_for(version):
    """The profile that lists this version, else None."""
    v = str(version or "").strip()
    for p in PROFILES:
        if v in p["versions"] or (p.get("pattern") and re.fullmatch(p["pattern"], v)):
            return p
    return None


def nearest_profile(version):
    """The profile of the newest floor at or below ``version`` (else the oldest): for ``warn`` only."""
    key = version_key(version)
    ordered = sorted(PROFILES, key=lambda p: version_key(p["floor"]))
    if key is None:
        return ordered[-1]
    below = [p for p in ordered if version_key(p["floor"]) <= key]
    return below[-1] if below else ordered[0]


# ---------------------------------------------------------------------------------------- detection


def _read(path, limit=200000):
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _inside(root, path):
    """A path as the image sees it (relative to ``root``, leading '/')."""
    rel = os.path.relpath(path, root)
    return "/" + rel.replace(os.sep, "/")


def detect(root):
    """The TensorRT-LLM version and CLI surface of the root filesystem ``root``, from its files; nothing runs.

    Returns a JSON-able dict: ``version`` (None when not found), ``profile`` (the supported profile's name,
    None for an unknown version), ``supported``, ``surface`` (``prepare_dataset_subcommand``: True/False,
    ``prepare_dataset_script``: its path inside the image or None, ``config_flag`` and
    ``latency_options_file`` when the package's sources say so, else None), ``sources`` (which files, as
    paths inside the image) and ``root``.
    """
    root = os.path.abspath(root or "/")
    sources = {}
    version, package = None, None
    for pattern in PYTHON_DIRS:
        for libdir in sorted(glob.glob(os.path.join(root, pattern)), reverse=True):
            pkg = os.path.join(libdir, "tensorrt_llm")
            if not os.path.isdir(pkg):
                continue
            for name in ("version.py", "__init__.py"):
                m = _VERSION_RE.search(_read(os.path.join(pkg, name)) or "")
                if m:
                    version, package = m.group(1), pkg
                    sources["version"] = _inside(root, os.path.join(pkg, name))
                    break
            if version is None:
                for meta in sorted(glob.glob(os.path.join(libdir, "tensorrt_llm-*.dist-info", "METADATA"))):
                    m = _METADATA_RE.search(_read(meta) or "")
                    if m:
                        version, package = m.group(1), pkg
                        sources["version"] = _inside(root, meta)
                        break
            if package is None:
                package = pkg
            if version is not None:
                break
        if version is not None:
            break
    surface = {"prepare_dataset_subcommand": None, "prepare_dataset_script": None, "config_flag": None,
               "latency_options_file": None}
    if package is not None:
        sources["package"] = _inside(root, package)
        sub = os.path.join(package, "bench", "dataset", "prepare_dataset.py")
        surface["prepare_dataset_subcommand"] = os.path.isfile(sub)
        if surface["prepare_dataset_subcommand"]:
            sources["prepare_dataset_subcommand"] = _inside(root, sub)
        # Positive evidence only: the options may be defined elsewhere in newer trees (trtllm_cli).
        throughput = _read(os.path.join(package, "bench", "benchmark", "throughput.py")) or ""
        if '"--config"' in throughput or "'--config'" in throughput:
            surface["config_flag"] = "--config"
        elif "--extra_llm_api_options" in throughput:
            surface["config_flag"] = "--extra_llm_api_options"
        latency = _read(os.path.join(package, "bench", "benchmark", "low_latency.py"))
        if latency is not None and "latency" in latency:
            surface["latency_options_file"] = "--extra_llm_api_options" in latency or '"--config"' in latency
    script = os.path.join(root, SCRIPT_PATH.lstrip("/"))
    if os.path.isfile(script):
        surface["prepare_dataset_script"] = SCRIPT_PATH
        sources["prepare_dataset_script"] = SCRIPT_PATH
    profile = profile_for(version) if version else None
    return {"version": version, "profile": profile["name"] if profile else None, "supported": profile is not None,
            "surface": surface, "sources": sources, "root": root}


def candidate_files():
    """Paths (inside an image) whose copies are enough for :func:`detect`: for ``docker cp`` from an image
    that is never started (python 3.8 to 3.14 library directories; dist-info names are not guessable, so
    version.py and __init__.py carry the version there)."""
    libdirs = []
    for minor in range(8, 15):
        libdirs += ["/usr/local/lib/python3.%d/dist-packages" % minor, "/usr/local/lib/python3.%d/site-packages"
                    % minor]
    libdirs.append("/usr/lib/python3/dist-packages")
    out = ["%s/tensorrt_llm/%s" % (d, f) for d in libdirs for f in PACKAGE_FILES]
    return out + [SCRIPT_PATH]


# ---------------------------------------------------------------------------------------- resolving


def resolve(trtllm, unknown_version=None):
    """The capabilities a run uses: the profile's facts, overridden by what detection found in the image.

    ``trtllm``: a :func:`detect` result (or ``{"version": V}``), optionally with ``unknown_version``
    (refuse|warn; the argument wins). Raises TrtllmCliError for a missing or refused version. The result
    has ``version``, ``profile``, ``dataset`` (subcommand|script), ``script_path``, ``config_flag``,
    ``latency_options_file`` and ``warnings``.
    """
    trtllm = dict(trtllm or {})
    policy = unknown_version or trtllm.get("unknown_version") or "refuse"
    if policy not in UNKNOWN_VERSION_POLICIES:
        raise TrtllmCliError("unknown_version: %r is not one of %s" % (policy, ", ".join(UNKNOWN_VERSION_POLICIES)))
    version = trtllm.get("version")
    warnings = []
    if not version:
        raise TrtllmCliError(
            "the image's TensorRT-LLM version is unknown (no tensorrt_llm/version.py, dist-info or __init__.py "
            "found%s): sparkfleet builds trtllm-bench commands per version and does not guess; supported: %s"
            % (" under %s" % trtllm["root"] if trtllm.get("root") else "", ", ".join(supported_versions())))
    profile = profile_for(version)
    if profile is None:
        near = nearest_profile(version)
        if policy != "warn":
            raise TrtllmCliError(
                "TensorRT-LLM %s is not a supported version (supported: %s); set sparkfleet_trtllm_unknown_version"
                "=warn to run it with the nearest profile (%s)" % (version, ", ".join(supported_versions()),
                                                                   near["name"]))
        warnings.append("TensorRT-LLM %s is not a supported version: its commands are built as for profile %s "
                        "(sparkfleet_trtllm_unknown_version=warn)" % (version, near["name"]))
        profile = near
    surface = trtllm.get("surface") or {}
    script = surface.get("prepare_dataset_script")
    found = surface.get("prepare_dataset_subcommand")
    known = any(v is not None for v in surface.values())
    if warnings and known:  # an unknown version: what the image holds beats the nearest profile's facts
        dataset = "subcommand" if found else ("script" if script else None)
    elif profile["subcommand"] or (profile["subcommand"] is None and found):
        dataset = "subcommand"  # pinned upstream (or found in this image where the version is not pinned)
    elif script or not known:
        dataset = "script"  # found in the image, or nothing detected (an offline plan): the profile's way
    else:
        dataset = None
    if dataset is None:
        raise TrtllmCliError("TensorRT-LLM %s: the image has neither `trtllm-bench prepare-dataset` nor %s: no "
                             "way to make the run's dataset" % (version, SCRIPT_PATH))
    config_flag = surface.get("config_flag") or profile["config_flag"]
    latency_file = surface.get("latency_options_file")
    if latency_file is None:
        latency_file = profile["latency_options_file"]
    return {"version": version, "profile": profile["name"], "dataset": dataset,
            "script_path": script or SCRIPT_PATH, "config_flag": config_flag,
            "latency_options_file": bool(latency_file), "warnings": warnings}


def record(trtllm, resolved):
    """What a run record keeps of the detection (``versions.trtllm``)."""
    trtllm = trtllm or {}
    return {"version": resolved["version"], "profile": resolved["profile"], "dataset": resolved["dataset"],
            "config_flag": resolved["config_flag"], "latency_options_file": resolved["latency_options_file"],
            "surface": trtllm.get("surface") or {}, "sources": trtllm.get("sources") or {},
            "warnings": list(resolved["warnings"])}


def run_env(hf_cache):
    """Environment of a trtllm run: offline unless a Hugging Face cache is bound (then it is the cache)."""
    if hf_cache:
        return {"HF_HOME": HF_CACHE_TARGET}
    return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


# -------------------------------------------------------------------------------------------- argv


def llm_api_options(workload):
    """The LLM API options file (:data:`LLM_API_OPTIONS`) a trtllm workload needs (its kv_fraction), or None."""
    if workload.get("engine", "trtllm") != "trtllm" or workload.get("kv_fraction") is None:
        return None
    return "kv_cache_config:\n  free_gpu_memory_fraction: %r\n" % float(workload["kv_fraction"])


def steps(workload, model, run_dir, resolved, hf_cache=False):
    """The run's commands: [(name, argv, stdout_path or None), ...]; the last one is measured.

    ``resolved``: :func:`resolve`'s result. The dataset's tokenizer is the model's local directory
    (``model.path``); without one, only an opted-in Hugging Face cache (``hf_cache``) may provide it by id.
    """
    extra = [str(a) for a in (workload.get("extra_args") or [])]
    name = str(model.get("name") or "")
    model_ref = str(model.get("hf_id") or name)
    path = model.get("path")
    if not path and not hf_cache:
        raise TrtllmCliError(
            "model %r has no path: a trtllm run reads its tokenizer and weights from the model's local directory "
            "(model.path, under the models directory), never from the Hugging Face Hub; give the path, or bind a "
            "Hugging Face cache (sparkfleet_hf_cache_dir) that holds %r" % (name, model_ref))
    tokenizer = str(path) if path else model_ref
    dataset = "%s/dataset.jsonl" % run_dir
    requests = int(workload.get("requests") or max(int(workload.get("batch", 1) or 1) * 10, 10))
    lengths = ["token-norm-dist", "--num-requests", str(requests),
               "--input-mean", str(workload.get("input_len", 128)), "--input-stdev", "0",
               "--output-mean", str(workload.get("output_len", 128)), "--output-stdev", "0"]
    if resolved["dataset"] == "subcommand":
        # prepare-dataset's tokenizer is --model (prepare_dataset.py @0c8de69a): the local directory.
        prepare = (["trtllm-bench", "--model", tokenizer, "prepare-dataset", "--output", dataset] + lengths, None)
    else:
        # The image's script, as NVIDIA's Spark guide runs it: JSON lines on stdout, into the dataset file.
        prepare = (["python3", resolved["script_path"], "--tokenizer", tokenizer, "--stdout"] + lengths, dataset)
    mode = workload.get("mode", "throughput")
    if mode not in ("throughput", "latency"):
        raise TrtllmCliError("mode %r is not throughput or latency" % (mode,))
    base = ["trtllm-bench", "--model", model_ref]
    if path:
        base += ["--model_path", str(path)]
    bench = base + [mode, "--dataset", dataset, "--backend", str(workload.get("backend") or "pytorch"),
                    "--report_json", "%s/report.json" % run_dir, "--num_requests", str(requests)]
    if workload.get("batch") and mode == "throughput":  # latency forces batch 1 and has no such option
        bench += ["--max_batch_size", str(workload["batch"])]
    if workload.get("concurrency"):
        bench += ["--concurrency", str(workload["concurrency"])]
    if workload.get("kv_fraction") is not None:
        if any(str(a).split("=", 1)[0] in ("--extra_llm_api_options", "--config") for a in extra):
            raise TrtllmCliError("kv_fraction and an --extra_llm_api_options/--config file in extra_args: set "
                                 "kv_cache_config in one place")
        # The LLM API options file is what sizes the KV cache (PyTorch backend); the CLI flag says the same,
        # so the engine's report (world_info.kv_cache_percentage, from the CLI) agrees with its log.
        bench += ["--kv_cache_free_gpu_mem_fraction", repr(float(workload["kv_fraction"]))]
        if mode == "throughput" or resolved["latency_options_file"]:
            bench += [resolved["config_flag"], "%s/%s" % (run_dir, LLM_API_OPTIONS)]
    return [("prepare", prepare[0], prepare[1]), ("bench", bench + extra, None)]

