"""The campaign language and the inventory settings: what sparkfleet accepts, checked on the controller.

Every field is a :class:`~fields.Field` (name, type, default, doc line and - for numbers - a unit and a
physical range) of the validation kernel the host modules share (``module_utils/sparkfleet_host/contract/fields.py``).
The campaign's validation (``campaign.py``), the inventory check (:func:`setting_problems`, in campaign_check
and ``sparkfleet run``) and the README's settings table (``python -m sparkfleet.settings_doc``) read these
tables, so there is no second copy of a rule; the cooldown fields are thermal_wait's (``thermal.py``), the
preflight limits preflight_check's (``gates/``, a file per gate). Adding a field is one entry in its table.

Workload presets and campaigns (the default campaigns and the campaign presets) are the catalogue: YAML files
under ``catalogue/`` beside this file, read here once.
"""

from __future__ import annotations

import copy
import math
import os
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import pair
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.fields import (
    DAY_S,
    REQUIRED,
    WEEK_S,
    Field,
    field_problem,
    number_problem,
    type_name,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import ENVIRONMENT_KINDS
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import (
    serving,
    serving_client,
    trtllm_cli,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.gates import LIMIT_FIELDS
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import readiness
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run import sla_search
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors import gpu

#: The catalogue: workload presets (``workloads.yml``) and campaigns (``campaigns/<name>.yml``: the default
#: campaigns and the campaign presets; any of them can be a campaign's ``preset``).
CATALOGUE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "catalogue")


def _catalogue(*parts: str) -> Any:
    with open(os.path.join(CATALOGUE, *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


#: Presets' fields are workload fields: a preset is checked like a workload (tests check that too).
WORKLOAD_PRESETS: dict[str, dict[str, Any]] = _catalogue("workloads.yml")
#: Campaign name -> the campaign as its file holds it (not resolved).
CAMPAIGNS: dict[str, dict[str, Any]] = {
    name[:-4]: _catalogue("campaigns", name) for name in sorted(os.listdir(os.path.join(CATALOGUE, "campaigns")))
    if name.endswith(".yml")}
CAMPAIGN_PRESET_NAMES = tuple(CAMPAIGNS)


#: The study's ``docker run`` flags: the default of ``sparkfleet_docker_flags``.
STUDY_DOCKER_FLAGS = ["--gpus", "all", "--ipc=host", "--shm-size=60g", "--ulimit", "memlock=-1",
                      "--ulimit", "stack=67108864"]
#: Named variants of the Docker environment a campaign can compare (``sparkfleet_docker_variants``).
DEFAULT_DOCKER_VARIANTS = {
    "study": {},
    "no-memory-limit": {"extra_flags": ["--memory=0", "--memory-swap=-1"]},
    "cgroup-parent": {"extra_flags": ["--cgroup-parent=sparkfleet.slice"]},
    "no-shm-size": {"remove_flags": ["--shm-size="]},
}


_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def from_string(f: Field, value: Any) -> Any:
    """``-e name=value`` gives strings: the value the roles' ``| bool`` / ``| float`` would make of it."""
    if not isinstance(value, str):
        return value
    if f.kind == "bool":
        return _BOOL_WORDS.get(value.strip().lower(), value)
    if f.kind in ("int", "float"):
        try:
            number = float(value)
        except ValueError:
            return value
        if f.kind == "int" and number.is_integer() and math.isfinite(number):
            return int(number)
        return number
    return value


def _invisible(char: str) -> bool:
    """A character a reader cannot see or tell from a space: Unicode format (zero-width, BOM, direction
    marks), control, private-use and unassigned characters, and every space other than ' '."""
    return unicodedata.category(char) in ("Cf", "Cc", "Co", "Cs", "Cn") or (char.isspace() and char != " ")


def name_key(name: str) -> str:
    """What a reader sees of a name: NFKC-normalised, case-folded, without spaces or invisible characters.
    Two names with the same key but other spellings are the same name to a reader (``Native`` and
    ``native``, ``llama`` and ``llama\u200b``): a campaign must not hold both."""
    text = unicodedata.normalize("NFKC", name)
    return "".join(c for c in text if not (c.isspace() or _invisible(c))).casefold()


def name_problem(name: str) -> str | None:
    """Why a name is unfit to identify runs: a leading or trailing space, or an invisible character."""
    if name != name.strip():
        return "%r has a leading or trailing space" % name
    bad = [c for c in name if _invisible(c)]
    if bad:
        return "%r contains an invisible character U+%04X (%s)" % (
            name, ord(bad[0]), unicodedata.name(bad[0], unicodedata.category(bad[0])))
    return None


def confusable_names(names: Sequence[tuple[str, str]]) -> list[str]:
    """``where: 'Llama' differs from 'llama' (other-where) only by case, spaces or invisible characters`` for
    each (where, name) whose name a reader cannot tell from an earlier, differently spelled one."""
    first: dict[str, tuple[str, str]] = {}
    problems = []
    for where, name in names:
        if not isinstance(name, str):
            continue
        key = name_key(name)
        if key in first and first[key][1] != name:
            problems.append("%s: %r differs from %r (%s) only by case, spaces or invisible characters"
                            % (where, name, first[key][1], first[key][0]))
        first.setdefault(key, (where, name))
    return problems


# -------------------------------------------------------------------------------------------- campaign

#: The built-in engines (serving.ENGINES, the one table), for the docs and the fields' choices: engine servers
#: measured by a load generator through a profile of points (docs: notes/serving-contract.md), and the engines
#: that run one job per run. The checks read the table itself (campaign.py), a serving run is serving.is_serving.
SERVING_ENGINES = serving.engine_names(serves=True, managed=True)
JOB_ENGINES = serving.engine_names(serves=False)
ENGINES = serving.engine_names()
#: The serving engine of a server sparkfleet does not start: the workload's ``endpoint`` names it (issue 37).
EXTERNAL_ENGINE = serving.EXTERNAL

#: Load generators a serving workload can use (serving_client.DRIVERS): llama-benchy (eugr/llama-benchy), the
#: default, and aiperf (ai-dynamo/aiperf, pinned 0.13.0).
SERVING_CLIENTS = tuple(serving_client.DRIVERS)
ORDERS = ("interleaved", "randomized", "sequential")
#: The tag NVIDIA's DGX Spark TensorRT-LLM playbook uses (NVIDIA/dgx-spark-playbooks nvidia/trt-llm/README.md
#: @9809e38, 2026-04-29; earlier: spark-single-gpu-dev = TensorRT-LLM 1.1.0rc3 until 2025-12, then 1.2.0rc6,
#: 1.3.0rc5). README.md "On a real Spark" lists the tags sparkfleet supports.
DEFAULT_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_SEED = 2 ** 63 - 1


def _env_vars(value: Any) -> str | None:
    if not all(isinstance(k, str) and _IDENT.match(k) and isinstance(v, (str, int, float))
               and not isinstance(v, bool) and not (isinstance(v, float) and not math.isfinite(v))
               for k, v in value.items()):
        return "names must be identifiers and values strings or numbers"
    return None


# Docker's image reference grammar, as the Docker CLI and daemon parse it (distribution/reference: regexp.go
# @00a09fa3799203fc887e667b0d82142ee831939a, ParseNormalizedNamed and splitDockerDomain in normalize.go
# @4ca14034c40611bc3536fc703ffa6a22fb8e6659, NameTotalLengthMax = 255 in reference.go). RE2's \w is ASCII.
_REF_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_REF_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REF_DOMAIN = (r"(?:%s(?:\.%s)*|\[(?:[a-fA-F0-9:]+)\])(?::[0-9]+)?"
               % (_REF_DOMAIN_COMPONENT, _REF_DOMAIN_COMPONENT))
_REF_NAME = r"(?:%s/)?%s(?:/%s)*" % (_REF_DOMAIN, _REF_PATH_COMPONENT, _REF_PATH_COMPONENT)
_REF_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_REF_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(r"(%s)(?::(%s))?(?:@(%s))?" % (_REF_NAME, _REF_TAG, _REF_DIGEST))
_REF_IDENTIFIER = re.compile(r"[a-f0-9]{64}")
_REF_NAME_MAX = 255


#: ``overlay:<absolute path>``: the label of a native rootfs that is an overlay of a host directory
#: (``sparkfleet_rootfs_source: overlay``, rootfs_overlay's marker): no image at all, so no container either.
OVERLAY_IMAGE_PREFIX = "overlay:/"


def image_reference_problem(value: str) -> str | None:
    """Why Docker cannot parse ``value`` as an image reference (``docker pull``/``run``), or None. The overlay
    label ``overlay:<absolute path>`` is accepted too (the campaign then refuses container environments)."""
    if value.startswith(OVERLAY_IMAGE_PREFIX) and "\n" not in value and "\x00" not in value:
        return None
    if len(value) > 4096:
        return "is %d characters long: not an image reference" % len(value)
    if _REF_IDENTIFIER.fullmatch(value):
        return "%r is a 64-hex identifier, not an image name" % value
    first, sep, rest = value.partition("/")
    if not sep:
        domain, remainder = "docker.io", "library/" + value
    elif first == "localhost" or any(c in first for c in ".:") or first.lower() != first:
        domain, remainder = first, rest
    else:
        domain, remainder = "docker.io", value
    remote = remainder.split(":", 1)[0]
    if remote.lower() != remote:
        return "%r is not an image reference Docker can parse: the repository name %r must be lowercase" % (
            value, remote)
    match = _REFERENCE.fullmatch(domain + "/" + remainder)
    if match is None:
        return ("%r is not an image reference Docker can parse ([registry[:port]/]name[:tag][@digest]: a lowercase "
                "name of letters, digits and single . _ __ or - separators; a tag of at most 128 letters, digits, "
                "'_', '.', '-'; no spaces)" % value)
    if len(match.group(1)) > _REF_NAME_MAX:
        return "%r is not an image reference Docker can parse: the name is longer than %d characters" % (
            value, _REF_NAME_MAX)
    return None


def results_dir_problem(value: str) -> str | None:
    """A path starting with '~' is not expanded (Ansible and sparkfleet take it literally): refused."""
    if value.startswith("~"):
        return ("%r starts with '~', which is not expanded here (it would make a directory named '~'): give the "
                "full path, or a path relative to the working directory" % value)
    return None


#: Factors a campaign can cross into its workloads (campaign field ``factors``), in the order they name the
#: crossed workloads (``<workload>.<engine>.kv<F>.<drop|keep>``): factor -> the workloads it crosses. Each level
#: is a value of the workload field of the same name (its range is defined there, once); ``engine``'s levels are
#: serving engines (built-in or the campaign's own: campaign.py checks them, knowing the campaign's engines).
FACTORS = {
    "engine": "serving workloads",
    "kv_fraction": "trtllm workloads",
    "drop_caches": "every workload",
}


def _factors(value: Any) -> str | None:
    """``factors``: {engine: [...], kv_fraction: [...], drop_caches: [...]}, levels unique, each one a value of
    the workload field of that name. Whether an engine level is a serving engine depends on the campaign's own
    ``engines``: campaign.py checks it."""
    unknown = [k for k in value if k not in FACTORS]
    if unknown:
        return "unknown factor %r (known: %s)" % (unknown[0], ", ".join(FACTORS))
    for name, levels in value.items():
        if not isinstance(levels, list) or not levels:
            return "%s: must be a non-empty list of levels" % name
        if len(set(map(repr, levels))) != len(levels):
            return "%s: a level is listed twice" % name
        for level in levels:
            problem = "must not be null" if level is None else field_problem(WORKLOAD_BY_NAME[name], level)
            if problem:
                return "%s: every level %s" % (name, problem)
    return None


def _aa(value: Any) -> str | None:
    if isinstance(value, bool) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return None
    return "must be true, false or a list of environment names, got %s %r" % (type_name(value), value)


def _ready_path(value: str) -> str | None:
    return None if value.startswith("/") and "\n" not in value else "%r must be a URL path starting with '/'" % value


#: A campaign's own serving engine (campaign field ``engines``: name -> spec; Ollama, LMDeploy, a custom build).
#: Resolved with its defaults, the spec travels to the hosts in each of its workloads as ``engine_spec``
#: (sparkfleet_host/engines/serving.py builds its server argv from it, as from a built-in engine's row).
ENGINE_SPEC_FIELDS = (
    Field("command", "list", REQUIRED, "The server's argv; placeholders %s ({host} is always %s; "
          "{model}: the model's path, or its gguf when it has only that)."
          % (", ".join("{%s}" % p for p in serving.PLACEHOLDERS), serving.LOOPBACK),
          elements="str", check=serving.command_problem),
    Field("ready_path", "str", serving.CUSTOM_READY_PATH, "The path whose HTTP GET answers 200 once the model is "
          "loaded.", check=_ready_path),
    Field("port", "int", serving.CUSTOM_PORT, "The server's default port (a workload's port wins).", "",
          *serving.TCP_PORT),
    Field("served_model_name_default", "str", None, "The model name the server answers to when the workload "
          "gives none (null: the campaign's model name).", nullable=True),
    Field("kv_log", "str", None, "The built-in engine whose KV log lines it prints (a vLLM fork: vllm); null: "
          "no KV figure, recorded as such.", choices=serving.kv_logs(), nullable=True),
)

CAMPAIGN_FIELDS = (
    Field("name", "str", REQUIRED, "Campaign name: letters, digits, '.', '_' and '-' (the results directory)."),
    Field("description", "str", "", "Free text.", resolved=False),
    Field("models", "list", REQUIRED, "Models: names, or {name, hf_id, path}."),
    Field("environments", "list", REQUIRED, "Environments: native, container, bare, or {name, kind, "
          "docker_flags, variant}."),
    Field("workloads", "list", REQUIRED, "Workloads: preset names, or {name, preset, engine, ...}."),
    Field("iterations", "int", 10, "Measured runs per cell.", "runs", 1, 10000),
    Field("warmup_runs", "int", 0, "Unmeasured runs per cell before the measured ones.", "runs", 0, 100),
    Field("max_runs", "int", 10000, "Most runs a host may be planned (warm-ups included): a larger matrix is "
          "refused unless this is raised to at least its size.", "runs", 1, 10 ** 7, resolved=False),
    Field("order", "str", "interleaved", "Run order.", choices=ORDERS),
    Field("seed", "int", 0, "Seed of the randomized order.", "", -_MAX_SEED - 1, _MAX_SEED),
    Field("cooldown", "dict", {}, "Cooldown before each run (see the cooldown fields)."),
    Field("timeout_s", "float", 3600, "Wall-clock limit of one run's commands.", "s", 0.0, WEEK_S, low_open=True),
    Field("results_dir", "path", "results", "Controller results directory (relative: to the working directory; "
          "'~' is not expanded).", check=results_dir_problem),
    Field("image", "str", DEFAULT_IMAGE, "Container image; the native rootfs is extracted from it (a reference "
          "Docker can parse).", check=image_reference_problem),
    Field("image_build", "dict", None, "Build the image on the host (debootstrap + docker import) when absent.",
          nullable=True),
    Field("preset", "str", None, "Catalogue campaign whose keys the campaign's own override (memory-study).",
          choices=CAMPAIGN_PRESET_NAMES, nullable=True, resolved=False),
    Field("engines", "dict", None, "The campaign's own serving engines: name -> {command, ready_path, port, "
          "served_model_name_default, kv_log} (ENGINE_SPEC_FIELDS), usable as a workload's engine and as "
          "factors.engine levels.", nullable=True, resolved=False),
    Field("factors", "dict", None, "Factors crossed into the workloads: engine (serving workloads: "
          "<workload>.<engine>), kv_fraction (trtllm workloads), drop_caches (every workload; docs/MEMORY.md).",
          nullable=True, check=_factors, resolved=False),
    Field("aa", "any", False, "A/A pairs: true twins every environment (<name>.aa), a list only those named.",
          check=_aa, resolved=False),
)
#: A model's kv_shape: the attention shape its KV cache grows by (config.json), each a positive integer.
KV_SHAPE_KEYS = ("layers", "kv_heads", "head_dim")


def kv_shape_problem(value: Any) -> str | None:
    if set(value) != set(KV_SHAPE_KEYS) or not all(
            isinstance(value[k], int) and not isinstance(value[k], bool) and 0 < value[k] <= 100000 for k in value):
        return "must be {layers, kv_heads, head_dim}, each a positive integer, got %r" % (value,)
    return None


MODEL_FIELDS = (
    Field("name", "str", REQUIRED, "Model name (identity of its runs)."),
    Field("hf_id", "str", None, "Hugging Face id the engine loads.", nullable=True),
    Field("path", "abs_path", None, "Model directory on the hosts (absolute; for llama.cpp the .gguf file).",
          nullable=True),
    Field("tokenizer", "abs_path", None, "Tokenizer of a serving run's client on the hosts: a tokenizer.json or "
          "a directory holding one. Default: the model's path when that is a directory; for a GGUF the "
          "tokenizer.json beside it when its vocabulary is the GGUF's, else one derived on the host from the "
          "GGUF's own vocabulary (kept under <results_root>/.sparkfleet/tokenizers).", nullable=True),
    Field("gguf", "abs_path", None, "The .gguf file llama.cpp serves, so one model can cross llama.cpp and the "
          "other engines: a llama.cpp run gets it as its path (its tokenizer defaults to the model's path).",
          nullable=True, check=lambda v: None if v.endswith(".gguf") else "%r is not a .gguf file" % v),
    Field("random_weights", "bool", None, "The model's weights are random (a test or smoke model): serving runs "
          "skip the client's coherence check (llama-benchy --skip-coherence, whose question such a model cannot "
          "answer); the run records say so.", nullable=True),
    Field("context_window", "int", None, "The most tokens one sequence may hold (config.json "
          "max_position_embeddings; more only with rope scaling the engines are given): a serving point whose depth "
          "+ pp + tg exceeds it is refused (default: the catalogue's figure for its hf_id, else not checked).",
          "tokens", 1, 100_000_000, nullable=True),
    Field("kv_shape", "dict", None, "{layers, kv_heads, head_dim}: what one token's KV cache takes (config.json "
          "num_hidden_layers, less sliding-window layers; num_key_value_heads; head_dim), for validate's check that "
          "a llama.cpp server's KV cache fits the host (default: the catalogue's for its hf_id, else not checked).",
          nullable=True, check=kv_shape_problem),
)
ENVIRONMENT_FIELDS = (
    Field("name", "str", REQUIRED, "Environment name (identity of its runs)."),
    Field("kind", "str", None, "native, container or bare (default: the name when it is exactly one, container "
          "when docker_flags or variant is given; never guessed otherwise: required).",
          choices=ENVIRONMENT_KINDS),
    Field("docker_flags", "list", None, "docker run flags of this container environment.", elements="str",
          nullable=True),
    Field("variant", "str", None, "Docker variant (sparkfleet_docker_variants) whose flags it uses.", nullable=True),
)
WORKLOAD_FIELDS = (
    Field("name", "str", REQUIRED, "Workload name (identity of its runs)."),
    Field("preset", "str", None, "Preset it starts from: study, T1..T6, matmul."),
    Field("engine", "str", None, "%s, or a serving engine: %s, or one of the campaign's engines; or %s: a server "
          "already running that sparkfleet measures but does not start (the workload's endpoint)."
          % (", ".join(JOB_ENGINES), ", ".join(SERVING_ENGINES), EXTERNAL_ENGINE)),
    Field("mode", "str", "throughput", "trtllm-bench mode: %s." % " or ".join(trtllm_cli.MODES)),
    Field("batch", "int", None, "Largest batch size.", "requests", 1, 4096),
    Field("concurrency", "int", None, "Concurrent requests.", "requests", 1, 65536),
    Field("requests", "int", None, "Requests per run.", "requests", 1, 10 ** 7),
    Field("input_len", "int", None, "Input length.", "tokens", 1, 2 ** 21),
    Field("output_len", "int", None, "Output length.", "tokens", 1, 2 ** 21),
    Field("backend", "str", None, "trtllm-bench backend (default pytorch)."),
    Field("iterations", "int", None, "Timed iterations inside one run (matmul, hf-generate).", "", 1, 10 ** 6),
    Field("warmup", "int", None, "Untimed iterations inside one run (matmul, hf-generate).", "", 0, 10 ** 5),
    Field("size", "int", None, "Matrix size (matmul).", "", 1, 65536),
    Field("extra_args", "list", None, "Extra engine arguments (argv elements).", elements="str"),
    Field("env", "dict", None, "Environment variables of the workload.", check=_env_vars),
    trtllm_cli.KV_FRACTION,
    Field("drop_caches", "bool", None, "Drop the page cache (sync; echo 3 > /proc/sys/vm/drop_caches) before "
          "each run of this workload.", nullable=True),
    # serving workloads (engine server + load generator); their defaults are filled in when the workload resolves
    Field("profile", "dict", None, "Serving: the points crossed inside one run, {depth, concurrency, pp, tg}: "
          "non-empty lists of unique integers (profile_problems)."),
    Field("runs", "int", 3, "Serving: the client's measured runs per point (llama-benchy --runs).", "runs", 1,
          1000),
    Field("prefix_caching", "bool", False, "Serving: measure with the server's prefix cache (llama-benchy "
          "--enable-prefix-caching, Spark Arena's setting); false: unique prompt prefixes (--no-cache)."),
    Field("server_args", "list", [], "Serving: extra engine server arguments (argv elements); one that sets what "
          "sparkfleet sets (port, host, model, served name: the engine's own flags, serving.ENGINES) is refused.",
          elements="str"),
    Field("port", "int", None, "Serving: the server's port on 127.0.0.1 (null: the engine's default).", "",
          *serving.TCP_PORT, nullable=True),
    Field("ready_timeout_s", "float", 900.0, "Serving: longest wait for the server to answer.", "s", 0.0, DAY_S,
          low_open=True),
    Field("served_model_name", "str", None, "Serving: the model name the server answers to (null: the "
          "engine's default).", nullable=True),
    Field("client", "str", serving_client.LlamaBenchy.name, "Serving: the load generator: llama-benchy, or aiperf "
          "(NVIDIA AIPerf 0.13.0: TTFT, inter-token latency, output and request throughput, goodput with "
          "--goodput in client_args; no context depth, no prefix_caching).", choices=SERVING_CLIENTS),
    Field("client_args", "list", [], "Serving: extra load-generator arguments (argv elements), e.g. "
          "--no-warmup; one that sets what sparkfleet sets (the point's depth, concurrency, pp, tg, runs, output "
          "format, the tokenizer, the corpus, ...) is refused. A random-weight model skips the coherence check "
          "by the model's random_weights.", elements="str"),
    Field("cluster", "str", None, "Serving on several hosts: the cluster (sparkfleet_cluster) whose hosts serve the "
          "model together, by the engine's own runtime; its runs are planned on the cluster's rank 0 (its first host "
          "in the inventory) and run after the single-host runs, one lifetime of the distributed server each "
          "(bare environments; engines: %s)." % ", ".join(serving.launcher_engines()),
          nullable=True, check=lambda v: None if v.strip() and v == v.strip() else "must be a non-empty name"),
    Field("topology", "str", None, "Serving on a cluster: layers (llama.cpp RPC splits the model's layers over the "
          "hosts), tensor or pipeline (the engine's own runtime splits the model tensor- or pipeline-parallel across "
          "the hosts, one GPU each: vLLM without Ray, SGLang, and trtllm-serve, whose ranks mpirun starts from rank 0 "
          "over passwordless SSH), or replicas (each host serves the whole model; the client's requests go to them in "
          "turn through a proxy on rank 0). Null with a cluster: the engine's first (llama.cpp: layers; vLLM, "
          "SGLang, trtllm-serve: tensor).",
          nullable=True, choices=serving.TOPOLOGIES),
    Field("endpoint", "dict", None, "Serving, engine %s only: the server to measure, {url, model}: url an http(s) "
          "URL with host and port (and no path beyond an optional /v1), model the name it serves. sparkfleet starts, "
          "checks and stops no server: the host runs the client against the URL; no KV figure, version or "
          "provenance check of that server; the records say unmanaged server. Not with server_args, port, "
          "ready_timeout_s, served_model_name or a cluster." % EXTERNAL_ENGINE,
          nullable=True, check=serving.endpoint_problem),
    Field("sla", "dict", None, "Serving: latency targets, {ttft_ms: {percentile, max}, tpot_ms: {percentile, max}, "
          "max_concurrency} (either target or both; percentile 50..99.9 of the point's per-request values, max in "
          "ms). Each run then finds, per depth/pp/tg, the largest concurrency meeting them: doubling from the "
          "profile's lowest concurrency until a level fails or the cap (max_concurrency, else the profile's highest), "
          "then bisection; the levels it ran are points marked sla_probe. With client aiperf the percentile is one "
          "of its export's: %s." % ", ".join(map(str, serving_client.AIPerf.PERCENTILES)),
          nullable=True, check=sla_search.sla_problem),
)
WORKLOAD_BY_NAME = {f.name: f for f in WORKLOAD_FIELDS}
#: A serving workload's multi-node fields: only when given (other campaigns keep their config hash).
CLUSTER_FIELDS = ("cluster", "topology")
#: A serving workload's fields that a resolved workload carries only when given (no default filled in: other
#: campaigns keep their config hash): the cluster's, an unmanaged server's endpoint, the SLA targets.
GIVEN_ONLY_FIELDS = (*CLUSTER_FIELDS, "endpoint", "sla")
#: What an unmanaged server's workload (engine external) does not take: they describe a server sparkfleet starts.
MANAGED_SERVER_FIELDS = ("server_args", "port", "ready_timeout_s", "served_model_name", *CLUSTER_FIELDS)
#: Fields only a serving workload takes; their defaults (all but profile's) are the resolved workload's.
SERVING_FIELDS = ("profile", "runs", "prefix_caching", "server_args", "port", "ready_timeout_s",
                  "served_model_name", "client", "client_args", *GIVEN_ONLY_FIELDS)
#: Fields a serving workload would silently ignore (its shape is its profile, its arguments server_args).
NON_SERVING_FIELDS = ("mode", "batch", "concurrency", "requests", "input_len", "output_len", "backend",
                      "iterations", "warmup", "size", "extra_args", "kv_fraction")


def serving_defaults() -> dict[str, Any]:
    """The serving fields' defaults a resolved serving workload carries (profile has none: it is required)."""
    return {f.name: copy.deepcopy(f.default) for f in WORKLOAD_FIELDS
            if f.name in SERVING_FIELDS[1:] and f.name not in GIVEN_ONLY_FIELDS}


#: Most points (depth x concurrency x pp x tg) one serving run may hold.
MAX_PROFILE_POINTS = 10_000


def profile_problems(value: Any, where: str) -> list[str]:
    """One problem per bad part of a serving ``profile``, each naming it: ``<where>.depth[2]: ...``."""
    if not isinstance(value, dict):
        return ["%s: must be a mapping {depth, concurrency, pp, tg} of lists, got %s" % (where, type_name(value))]
    axes = {f.name: f for f in serving.PROFILE_AXES}  # the host checks them again
    problems = ["%s.%s: unknown key (known: %s)" % (where, k, ", ".join(axes)) for k in value if k not in axes]
    for name, f in axes.items():
        levels = value.get(name)
        if not isinstance(levels, list) or not levels:
            problems.append("%s.%s: %s a non-empty list of integers (%s)" % (
                where, name, "required:" if levels is None else "must be", f.range_text()))
            continue
        seen: set[int] = set()
        for i, level in enumerate(levels):
            problem = field_problem(f, level)
            if problem is None and level in seen:
                problem = "%s is listed twice" % level
            if problem:
                problems.append("%s.%s[%d]: %s" % (where, name, i, problem))
            else:
                seen.add(level)
    if not problems and profile_points(value) > MAX_PROFILE_POINTS:
        problems.append("%s: %d points per run (depth x concurrency x pp x tg), above the limit of %d: split it "
                        "into several workloads" % (where, profile_points(value), MAX_PROFILE_POINTS))
    return problems


def profile_points(profile: Mapping[str, Any]) -> int:
    """Points per run of a checked profile: depth x concurrency x pp x tg."""
    return math.prod(len(profile[f.name]) for f in serving.PROFILE_AXES)
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]*$")
IMAGE_BUILD_FIELDS = (
    Field("method", "str", "debootstrap", "How the image is built.", choices=("debootstrap",)),
    Field("suite", "str", "bookworm", "Debian suite.",
          check=lambda v: None if re.fullmatch(r"[a-z]+", v) else "%r is not a Debian suite name" % v),
    Field("packages", "list", ["python3", "python3-numpy"], "Debian packages to install.",
          check=lambda v: None if all(isinstance(p, str) and _PACKAGE.match(p) for p in v)
          else "every entry must be a Debian package name"),
    Field("mirror", "str", "http://deb.debian.org/debian", "Debian mirror."),
)

# ----------------------------------------------------------------------------- inventory settings


def _clocks(value: Any) -> str | None:
    if not (set(value) == {"min", "max"} and all(isinstance(value[k], int) and not isinstance(value[k], bool)
                                                 for k in value)):
        return "must be {min: MHz, max: MHz} (integers) or null"
    return None if 0 < value["min"] <= value["max"] <= 10000 else \
        "min %s must be positive and at most max %s (at most 10000 MHz)" % (value["min"], value["max"])


def _workload_env(value: Any) -> str | None:
    bad = [k for k, x in value.items() if not (isinstance(k, str) and _IDENT.match(k))
           or isinstance(x, (dict, list)) or x is None]
    return "bad names or values: %s" % ", ".join(map(str, bad)) if bad else None


def _bands(value: Any) -> str | None:
    for band in value:
        if not (isinstance(band, list) and len(band) == 2 and all(number_problem(x) is None for x in band)):
            return "every band must be [low, high] in MHz (two numbers), got %r" % (band,)
        if not 0 <= band[0] <= band[1] <= 10000:
            return "band %r: must hold 0 <= low <= high <= 10000 MHz" % (band,)
    return None


def _whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _variants(value: Any) -> str | None:
    for name, spec in value.items():
        if spec is None:
            continue
        if not isinstance(spec, dict) or set(spec) - {"extra_flags", "remove_flags"} or not all(
                isinstance(v, list) and all(isinstance(x, str) for x in v) for v in spec.values()):
            return "variant %r must be {extra_flags: [...], remove_flags: [...]} (lists of strings)" % name
    return None


def _nvml_wheel(value: Any) -> str | None:
    """The pinned release's wheel only: the bindings are the same on every host of a fleet."""
    if os.path.basename(value) != gpu.NVML_WHEEL:
        return "must be the pinned %s %s wheel, a file named %s (pip download %s==%s --no-deps), got %r" % (
            gpu.NVML_PACKAGE, gpu.NVML_VERSION, gpu.NVML_WHEEL, gpu.NVML_PACKAGE, gpu.NVML_VERSION,
            os.path.basename(value))
    return None


#: Where the serving_client role installs the collection's prompt corpus: the default of
#: ``sparkfleet_serving_corpus`` (the work directory filled in by planning.host_settings).
DEFAULT_SERVING_CORPUS = "{{ sparkfleet_work_dir }}/clients/corpus.txt"

#: ``sparkfleet_*`` inventory settings (inventory, group_vars or -e). Roles read none of them: each host's
#: ``sparkfleet_plan`` carries them, defaults applied once (planning.py).
SETTINGS = (
    Field("sparkfleet_work_dir", "abs_path", "/var/lib/sparkfleet",
          "Per-host work directory: rootfs trees, results, ledgers, saved state."),
    Field("sparkfleet_models_dir", "abs_path", "{{ sparkfleet_work_dir }}/models",
          "Models directory, bind-mounted read-only into the chroot and the container: every model path of a "
          "campaign with native or container environments must lie under it (validate refuses one outside)."),
    Field("sparkfleet_results_dir", "path", None, "Controller results directory (default the campaign's "
          "results_dir).", nullable=True, check=results_dir_problem),
    Field("sparkfleet_workload_env", "dict", {}, "Environment variables for every workload on the host "
          "(names and values literal).", check=_workload_env),
    Field("sparkfleet_docker_flags", "list", STUDY_DOCKER_FLAGS, "The container environment's docker run "
          "flags (argv elements).", elements="str"),
    Field("sparkfleet_docker_variant", "str", "study", "The Docker variant a container environment without "
          "its own flags or variant uses."),
    Field("sparkfleet_docker_variants", "dict", DEFAULT_DOCKER_VARIANTS, "Named Docker variants: "
          "{extra_flags, remove_flags} each; a remove_flags entry ending in '=' drops every flag with that "
          "prefix.", check=_variants),
    Field("sparkfleet_image", "str", None, "Image the native rootfs comes from (default the campaign's image).",
          nullable=True, check=image_reference_problem),
    Field("sparkfleet_image_offline", "bool", False, "Never pull the image."),
    Field("sparkfleet_image_archive", "path", None, "A docker save tarball on the host to load the image from.",
          nullable=True),
    Field("sparkfleet_rootfs_source", "str", "image", "Where the native rootfs comes from: image or overlay.",
          choices=("image", "overlay")),
    Field("sparkfleet_rootfs_prune", "bool", False, "Remove rootfs trees of other image digests."),
    Field("sparkfleet_trtllm_unknown_version", "str", "refuse", "A TensorRT-LLM version older than every captured "
          "trtllm-bench surface whose own CLI cannot be read from the image (or offline, in plan): refuse (naming "
          "the captured ones) or warn (build its commands as for the oldest; the records say so).",
          choices=trtllm_cli.UNKNOWN_VERSION_POLICIES),
    Field("sparkfleet_hf_cache_dir", "abs_path", None, "A Hugging Face cache on the hosts, bound at "
          "/root/.cache/huggingface into the chroot and the container (null: none; trtllm runs are offline "
          "and read the tokenizer from the model's path).", nullable=True),
    Field("sparkfleet_telemetry_interval_s", "float", 1.0, "Telemetry sampling period.", "s", 0.0, 60.0,
          low_open=True),
    Field("sparkfleet_retry_failed", "bool", False, "Run again runs whose last attempt failed or timed out."),
    Field("sparkfleet_campaign_on_change", "str", "refuse", "A campaign whose configuration changed under the "
          "same name: refuse (naming what changed) or run it under a new campaign id <name>-<hash8>.",
          choices=("refuse", "new")),
    Field("sparkfleet_poll_interval_s", "float", 2.0, "Seconds between the follower's polls of a host's ledger.",
          "s", 0.0, 3600.0, low_open=True),
    Field("sparkfleet_report_after_s", "float", 60.0, "The follower prints a line at least this often.", "s",
          0.0, DAY_S, low_open=True),
    *LIMIT_FIELDS,  # preflight_check's limits (gates/: each gate's file)
    Field("sparkfleet_reproducibility_tolerance_pct", "float", 5.0, "A host is named out when it differs from "
          "the other hosts significantly and by more than this.", "%", 0.0, 100.0, low_open=True, high_open=True),
    Field("sparkfleet_fresh", "bool", False, "Measure again where every planned run is already done: the previous "
          "results are moved aside (kept) to <campaign>.<UTC stamp> on each host and on the controller "
          "(sparkfleet run --fresh)."),
    Field("sparkfleet_acknowledge_host_differences", "bool", False, "The reproducibility check refuses hosts whose "
          "firmware or driver differ unless this is true (then it compares them and says they differ)."),
    Field("sparkfleet_serving_client", "abs_path", None, "A llama-benchy executable on the host for serving runs "
          "(null: <work_dir>/clients/llama-benchy/bin/llama-benchy, installed with pip when serving runs are "
          "planned). A workload with client aiperf uses <work_dir>/clients/aiperf/bin/aiperf, installed the same "
          "way.", nullable=True),
    Field("sparkfleet_serving_aiperf", "abs_path", None, "An aiperf executable on the host for serving workloads "
          "with client aiperf (null: <work_dir>/clients/aiperf/bin/aiperf, aiperf 0.13.0 installed with pip when "
          "such a workload is planned).", nullable=True),
    Field("sparkfleet_serving_corpus", "abs_path", DEFAULT_SERVING_CORPUS, "A text file on the host the serving "
          "client's prompts come from, served on 127.0.0.1 for its --book-url; nothing is downloaded. Default: the "
          "collection's public-domain prose (roles/serving_client/files/corpus.txt), which the serving_client "
          "role installs there."),
    Field("sparkfleet_serving_memory_gib", "float", None, "The memory a llama.cpp server's KV cache must fit in on "
          "the host, for validate's check of each llama.cpp workload whose model's kv_shape is known (null: a DGX "
          "Spark's 128 GB of unified memory; on a discrete GPU give its memory).", "GiB", 0.0, 1_000_000.0,
          low_open=True, nullable=True),
    Field("sparkfleet_nvml", "bool", True, "Install the pinned NVML bindings (%s %s) on each host with a GPU "
          "(nvidia-smi lists one and /dev/nvidia0 exists), into <work_dir>/clients/%s-%s, for the runs' telemetry, "
          "cooldown and readiness probe to read NVML in-process; where they cannot be installed those read "
          "nvidia-smi and the records say why (false: install nothing)." % (gpu.NVML_PACKAGE, gpu.NVML_VERSION,
                                                                           gpu.NVML_PACKAGE, gpu.NVML_VERSION)),
    Field("sparkfleet_nvml_wheel", "abs_path", None, "The %s wheel on the controller (%s), copied to each GPU host "
          "and unpacked there: no index, no pip (air-gapped hosts; null: pip on the host installs it from its "
          "index)." % (gpu.NVML_PACKAGE, gpu.NVML_WHEEL), nullable=True, check=_nvml_wheel),
    Field("sparkfleet_nvml_index_url", "str", None, "The package index pip on the host installs the NVML bindings "
          "from (--index-url; null: pip's own configuration there).", nullable=True,
          check=lambda v: None if v.strip() and not any(c.isspace() for c in v) else "must be a URL (no spaces)"),
    Field("sparkfleet_readiness_policy", "str", "mark", "A host whose readiness probe finds it suspect (a thermal "
          "or power-brake fault, a degraded clock, low delivered TFLOP/s): mark (run, mark its results suspect, "
          "warn) or refuse (no runs on it).", choices=readiness.POLICIES),
    Field("sparkfleet_readiness_min_fraction", "float", readiness.DEFAULT_MIN_FRACTION, "Readiness: the SM clock "
          "under the probe's load below this fraction of the expected clock is noted (never a fault).",
          "fraction", 0.0, 1.0, low_open=True),
    Field("sparkfleet_readiness_expected_clock_mhz", "float", None, "Readiness: the SM clock a healthy host "
          "reaches under the probe's load, for that note (null: the host's maximum SM clock, fraction %g)."
          % readiness.DEFAULT_MIN_FRACTION_OF_MAX, "MHz", 0.0, 10000.0, low_open=True, nullable=True),
    Field("sparkfleet_readiness_probe_s", "float", 3.0, "Readiness: seconds of the probe's fixed GPU load "
          "before the runs (0: no probe; a host runs at most %g)." % readiness.PROBE_S_MAX, "s", 0.0,
          readiness.PROBE_S_MAX),
    Field("sparkfleet_readiness_degraded_bands", "list", [[_whole(x) for x in band] for band in
                                                          readiness.DEFAULT_DEGRADED_BANDS],
          "Readiness: SM clock bands [low, high] (MHz) under load that mark a DGX Spark (GB10) suspect unless "
          "power-limited or locked there by sparkfleet.", check=_bands),
    Field("sparkfleet_gpu_persistence_mode", "bool", None, "GPU persistence mode (null: leave as is).",
          nullable=True),
    Field("sparkfleet_gpu_locked_clocks", "dict", None, "Lock GPU clocks to {min, max} MHz (null: leave as is).",
          nullable=True, check=_clocks),
    Field("sparkfleet_gpu_power_limit", "float", None, "GPU power limit (null: leave as is).", "W", 0.0, 10000.0,
          low_open=True, nullable=True),
    Field("sparkfleet_cpu_governor", "str", None, "CPU frequency governor (null: leave as is).", nullable=True,
          check=lambda v: None if v else "must be a non-empty string"),
    Field("sparkfleet_drop_caches", "bool", True, "Drop the page cache after applying the GPU state."),
    Field("sparkfleet_gpus", "list", None, "GPU indices to manage (null: all).", nullable=True,
          check=lambda v: None if all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1024 for i in v)
          else "must be a list of GPU indices"),
    Field("sparkfleet_max_fail_percentage", "float", 100, "Stop the campaign when more than this share of "
          "hosts fails preflight.", "%", 0.0, 100.0),
    *pair.FIELDS,  # the cluster and its pair preflight (sparkfleet_host/cluster/pair.py)
)
SETTINGS_BY_NAME = {f.name: f for f in SETTINGS}
#: Set by the playbooks themselves, or campaign documents checked as campaigns.
SET_BY_PLAYBOOKS = ("sparkfleet_campaign", "sparkfleet_reference_campaign", "sparkfleet_resolved_campaign",
                    "sparkfleet_plan", "sparkfleet_controller_results")


def setting_problems(host: str, variables: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(errors, warnings) for one host's ``sparkfleet_*`` variables, each naming host and variable."""
    errors, warnings = [], []
    for name in sorted(variables):
        if not name.startswith("sparkfleet_"):
            continue
        f = SETTINGS_BY_NAME.get(name)
        if f is None:
            if name not in SET_BY_PLAYBOOKS:
                warnings.append("%s: %s: not a sparkfleet setting (a typo?); ignored" % (host, name))
            continue
        if problem := field_problem(f, from_string(f, variables[name])):
            errors.append("%s: %s: %s" % (host, name, problem))
    return errors, warnings


def setting(variables: Mapping[str, Any], name: str) -> Any:
    """A setting's value: the variable's when given, else the registry default."""
    f = SETTINGS_BY_NAME[name]
    value = variables.get(name, f.default)
    return copy.deepcopy(from_string(f, value))


def resolve_docker_flags(environment: Mapping[str, Any], variables: Mapping[str, Any]) -> list[str]:
    """A container environment's ``docker run`` flags on a host: its own docker_flags, else those of the variant
    it names, else of ``sparkfleet_docker_variant`` (``sparkfleet_docker_flags`` without the variant's
    remove_flags - a flag, or a prefix ending in '=' - then its extra_flags). ValueError for a variant the host
    does not define."""
    own = environment.get("docker_flags")
    if own is not None:
        return list(own)
    variants = setting(variables, "sparkfleet_docker_variants")
    name = environment.get("variant") or setting(variables, "sparkfleet_docker_variant")
    if name not in variants:
        raise ValueError("unknown Docker environment variant %r (known: %s)" % (name, ", ".join(variants)))
    spec = variants[name] or {}
    removes = spec.get("remove_flags") or []
    return [flag for flag in setting(variables, "sparkfleet_docker_flags")
            if not any(flag == r or (r.endswith("=") and flag.startswith(r)) for r in removes)
            ] + list(spec.get("extra_flags") or [])
