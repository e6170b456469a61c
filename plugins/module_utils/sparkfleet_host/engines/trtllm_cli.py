# -*- coding: utf-8 -*-
"""trtllm-bench commands built from what the image's own command line offers, read from its files.

The version is provenance, not the decision: what decides is the image's CLI surface, the command tree of its
``trtllm-bench`` (and of the standalone ``benchmarks/cpp/prepare_dataset.py`` where the image has one).

* :func:`detect`: the TensorRT-LLM version and the CLI surface of a root filesystem (an extracted image, or the
  files ``docker cp`` took from one), from its files alone: ``tensorrt_llm/version.py`` (else the dist-info
  METADATA, else ``__init__.py``) and the click definitions of ``tensorrt_llm/commands/bench.py`` and the
  modules it registers (``bench/benchmark/throughput.py``, ``low_latency.py``, ``bench/dataset/prepare_dataset.py``
  and its subcommands), read with :mod:`ast`: nothing is imported or run.
* :func:`resolve`: the surface the commands are built against: the image's own; where it could not be read (an
  offline ``sparkfleet plan``, an image whose sources are laid out otherwise) the captured surface
  (:mod:`trtllm_surfaces`, transcribed from upstream's click sources, tests/data/trtllm-cli) that covers the
  version, else the nearest one below it (the newest for a version past every capture), saying so. Only a
  version older than every capture, with no readable CLI, is refused (unless ``unknown_version: warn``).
* :func:`steps`: the run's argv, in the spellings the surface offers (``--config`` else
  ``--extra_llm_api_options``; the ``prepare-dataset`` subcommand else the image's script), each argv then checked
  against the surface: a command or option it lacks is refused naming it. The tokenizer always comes from the
  model's local directory, never the Hugging Face Hub; runs are offline (``HF_HUB_OFFLINE=1``) unless the
  inventory binds a Hugging Face cache (:data:`HF_CACHE_TARGET`); ``latency`` never gets ``--max_batch_size``.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import re

from ..contract.fields import Field, field_problem
from . import trtllm_surfaces

#: The image's standalone dataset script (NVIDIA's DGX Spark benchmarking guide runs it with ``--stdout``:
#: NVIDIA/dgx-spark-playbooks nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md, lines
#: 99-106, image release:1.2.0rc6). The release image copies ``benchmarks`` to /app/tensorrt_llm
#: (NVIDIA/TensorRT-LLM docker/Dockerfile.multi @00f74add). Removed from main by PR #16612 (2026-07).
SCRIPT_PATH = "/app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py"
#: Where an opted-in Hugging Face cache is bound, in the chroot and in the container (NVIDIA's playbooks:
#: ``-v $HOME/.cache/huggingface/:/root/.cache/huggingface/``, dgx-spark-playbooks nvidia/trt-llm/README.md
#: @9809e38 lines 190-195); both environments run as root with HOME=/root.
HF_CACHE_TARGET = "/root/.cache/huggingface"
#: What to do with a version older than every captured surface whose own CLI could not be read.
UNKNOWN_VERSION_POLICIES = ("refuse", "warn")
#: The run's LLM API options file (in its run dir).
LLM_API_OPTIONS = "extra_llm_api_options.yaml"
#: Spellings of the LLM API options file flag, preferred first: ``--config`` since PR #10005 (2025-12), with
#: ``--extra_llm_api_options`` its alias; before it ``--extra_llm_api_options`` alone.
OPTIONS_FILE_FLAGS = ("--config", "--extra_llm_api_options")
#: A trtllm workload's kv_fraction, defined once: the campaign's workload field (settings.WORKLOAD_FIELDS, the
#: memory study's kv_fraction levels) and the check here before a command is built.
KV_FRACTION = Field("kv_fraction", "float", None, "TensorRT-LLM kv_cache_config.free_gpu_memory_fraction, through "
                    "--extra_llm_api_options (trtllm).", "fraction", 0.0, 1.0, low_open=True, nullable=True)
#: trtllm-bench's modes a trtllm workload can run (its ``mode``).
MODES = ("throughput", "latency")
#: Spellings of the KV cache fraction (trtllm-serve's common options also know the long one).
KV_FRACTION_FLAGS = ("--kv_cache_free_gpu_mem_fraction", "--kv_cache_free_gpu_memory_fraction")
#: The image's programs a run may use, by the name the surface gives them.
BENCH, SCRIPT = "trtllm-bench", "prepare_dataset.py"
#: Image tags that are not version numbers, for offline planning only (a run reads the image's own files).
#: spark-single-gpu-dev: a public DGX Spark log of 2025-12-20 prints "TensorRT-LLM version: 1.1.0rc3"
#: (tests/data/trtllm-bench-published/gb10-1.1.0rc3-memory-excerpt.log); an inference, not a pinned fact.
IMAGE_TAG_VERSIONS = {"spark-single-gpu-dev": "1.1.0rc3"}
#: Candidate python library directories of an image (globs, relative to its root).
PYTHON_DIRS = ("usr/local/lib/python3*/dist-packages", "usr/local/lib/python3*/site-packages",
               "usr/lib/python3/dist-packages", "usr/lib/python3*/site-packages")
#: Files that carry the package's version (relative to the package directory).
VERSION_FILES = ("version.py", "__init__.py")
#: What of the package tells its CLI (relative to the package directory): directories, copied whole.
CLI_DIRS = ("commands", "bench")
#: What of the standalone script's tree tells its CLI (the script imports ``utils.prepare_synthetic_data``).
SCRIPT_FILES = (SCRIPT_PATH, os.path.dirname(SCRIPT_PATH) + "/utils")
_VERSION_RE = re.compile(r"""^\s*__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M)
_METADATA_RE = re.compile(r"^Version:\s*(\S+)", re.M)


class TrtllmCliError(Exception):
    """A trtllm run that cannot be built for this image (a command or option its CLI lacks, no local model, ...)."""


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


def captured():
    """The captured surfaces, oldest first."""
    return sorted(trtllm_surfaces.SURFACES, key=lambda s: version_key(s["floor"]))


def supported_versions():
    """One example version per captured surface (the versions the contract tests build commands for)."""
    return [s["example"] for s in captured()]


def captured_for(version):
    """(surface, how) of the captured surface for ``version``: how is ``covers`` (its pattern covers the version),
    ``nearest`` (the newest capture below it), ``newest`` (past every capture) or ``below`` (older than every
    capture: the oldest is returned)."""
    v = str(version or "").strip()
    ordered = captured()
    for s in ordered:
        if re.fullmatch(s["pattern"], v):
            return s, "covers"
    key = version_key(v)
    if key is None or key < version_key(ordered[0]["floor"]):
        return (ordered[-1] if key is None else ordered[0]), "below"
    below = [s for s in ordered if version_key(s["floor"]) <= key]
    return below[-1], ("newest" if below[-1] is ordered[-1] else "nearest")


# ---------------------------------------------------------------------------- reading click sources


def _read(path, limit=400000):
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _inside(root, path):
    """A path as the image sees it (relative to ``root``, leading '/')."""
    return "/" + os.path.relpath(path, root).replace(os.sep, "/")


def _const(node):
    return node.value if isinstance(node, ast.Constant) else None


def _call_name(node):
    """(base, attr) of a decorator or call: ``click.option`` -> ("click", "option"), ``option`` -> (None, "option")."""
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        base = func.value.id if isinstance(func.value, ast.Name) else None
        return base, func.attr
    if isinstance(func, ast.Name):
        return None, func.id
    return None, None


def _option(call):
    """{name: spec} of one click/optgroup ``option(...)`` call; {} when it names no option."""
    names = [a for a in (_const(x) for x in call.args) if isinstance(a, str) and a.startswith("-")]
    if not names:
        return {}
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    spec = {"type": "str"}
    if _const(kw.get("is_flag")) is True or _const(kw.get("count")) is True:
        spec["type"] = "flag"
    typ = kw.get("type")
    if isinstance(typ, ast.Name) and typ.id in ("int", "float"):
        spec["type"] = typ.id
    elif isinstance(typ, ast.Call):
        _, kind = _call_name(typ)
        if kind in ("IntRange",):
            spec["type"] = "int"
        elif kind in ("FloatRange",):
            spec["type"] = "float"
        elif kind == "Path":
            spec["type"] = "path"
        elif kind == "Choice" and typ.args and isinstance(typ.args[0], (ast.List, ast.Tuple)):
            choices = [_const(e) for e in typ.args[0].elts]
            if all(isinstance(c, str) for c in choices):
                spec.update(type="choice", choices=choices)
    if _const(kw.get("required")) is True:
        spec["required"] = True
    nargs = _const(kw.get("nargs"))
    if isinstance(nargs, int) and nargs > 1:
        spec["nargs"] = nargs
    if _const(kw.get("multiple")) is True:
        spec["multiple"] = True
    if any("/" in n for n in names):  # "--enable_x/--disable_x": two flags
        out = {}
        for n in names:
            for part in (p for p in n.split("/") if p.startswith("-")):
                out[part] = {"type": "flag"}
        return out
    if len(names) > 1:
        spec["aliases"] = names[1:]
    return {names[0]: spec}


def _click_name(func_name):
    """The command name click derives from a function name (click 8.2: ``_command``/``_cmd``/``_group``/``_grp``
    suffixes dropped, underscores to dashes)."""
    name = func_name.lower()
    for suffix in ("_command", "_cmd", "_group", "_grp"):
        if name.endswith(suffix) and name != suffix:
            name = name[:-len(suffix)]
            break
    return name.replace("_", "-")


class _Module(object):
    """One python file's click definitions: commands/groups with their options, add_command edges, imports."""

    def __init__(self, path, dotted):
        self.path, self.dotted = path, dotted
        self.defs, self.adds, self.imports, self.helpers = {}, [], {}, {}
        tree = ast.parse(_read(path) or "", filename=path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package
                    pkg = dotted.split(".")[:-node.level] if node.level <= len(dotted.split(".")) else []
                    base = ".".join(pkg + ([node.module] if node.module else []))
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(node, ast.Call) and _call_name(node)[1] == "add_command" and node.args:
                group = node.func.value.id if isinstance(node.func, ast.Attribute) and isinstance(
                    node.func.value, ast.Name) else None
                target = node.args[0].id if isinstance(node.args[0], ast.Name) else None
                name = _const(node.args[1]) if len(node.args) > 1 else None
                name = name or next((_const(k.value) for k in node.keywords if k.arg == "name"), None)
                self.adds.append((group, target, name))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self._function(node)

    def _function(self, node):
        calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and _call_name(c)[1] == "option"]
        if calls and not node.decorator_list:  # a helper that adds options: f = optgroup.option(...)(f)
            self.helpers[node.name] = {k: v for c in calls for k, v in _option(c).items()}
        kind, name, options, partial = None, None, {}, []
        for dec in node.decorator_list:
            base, attr = _call_name(dec)
            if attr in ("group", "command") and base in ("click", None) and isinstance(dec, ast.Call):
                kind = attr
                name = next((a for a in (_const(x) for x in dec.args) if isinstance(a, str)), None)
                name = name or next((_const(k.value) for k in dec.keywords if k.arg == "name"), None)
            elif attr in ("group", "command") and base in self.defs and isinstance(dec, ast.Call):
                kind = attr  # @main.command(...): registered on that group
                name = next((a for a in (_const(x) for x in dec.args) if isinstance(a, str)), None)
                self.adds.append((base, node.name, name))
            elif attr == "option" and isinstance(dec, ast.Call):
                options.update(_option(dec))
            elif attr == "group" and base == "optgroup":
                continue  # a click-option-group heading, not a command group
            elif attr in ("pass_context", "pass_obj", "argument", "version_option", "help_option"):
                continue
            else:
                partial.append(ast.unparse(dec) if hasattr(ast, "unparse") else attr or "?")
        if kind:
            self.defs[node.name] = {"kind": kind, "name": name or _click_name(node.name), "options": options,
                                    "decorators": partial}


class _Reader(object):
    """Click command trees of a package on disk; modules parsed once each."""

    def __init__(self, search):
        self.search = search  # [(dotted prefix, directory)]: where a dotted module's file lies
        self.cache = {}

    def module(self, dotted):
        if dotted not in self.cache:
            self.cache[dotted] = None
            parts = dotted.split(".")
            for prefix, directory in self.search:
                head = prefix.split(".") if prefix else []
                if parts[:len(head)] != head:
                    continue
                rel = os.path.join(directory, *parts[len(head):])
                for path in (rel + ".py", os.path.join(rel, "__init__.py")):
                    if os.path.isfile(path):
                        try:
                            self.cache[dotted] = _Module(path, dotted)
                        except (SyntaxError, ValueError):
                            self.cache[dotted] = None
                        return self.cache[dotted]
        return self.cache[dotted]

    def resolve(self, module, local):
        """(module, function name) a local name refers to: defined there, or imported from a readable module."""
        if local in module.defs or local in module.helpers:
            return module, local
        if local in module.imports:
            target, name = module.imports[local]
            other = self.module(target)
            if other is not None and (name in other.defs or name in other.helpers):
                return other, name
            sub = self.module(target + "." + name) if target else None
            if sub is not None:
                return sub, None
        return None, None

    def tree(self, module, func, seen=()):
        """The command tree of ``func`` in ``module`` (surface format); group members followed."""
        d = module.defs[func]
        level = {"options": dict(d["options"])}
        unread = []
        for dec in d["decorators"]:
            helper_mod, helper = self.resolve(module, dec.split("(")[0].split(".")[-1])
            if helper_mod is not None and helper in helper_mod.helpers:
                level["options"].update(helper_mod.helpers[helper])
            else:
                unread.append(dec)
        if unread:  # a decorator that may add options this reader cannot see: absent options are unconfirmed
            level["partial"] = unread
        if d["kind"] == "group":
            commands = {}
            for group, target, name in module.adds:
                if group != func:
                    continue
                other, fname = self.resolve(module, target) if target else (None, None)
                if other is not None and fname in other.defs and (other.dotted, fname) not in seen:
                    sub = self.tree(other, fname, seen + ((module.dotted, func),))
                    commands[name or other.defs[fname]["name"]] = sub
                elif name:
                    commands[name] = {"options": None}
                else:
                    level.setdefault("partial_commands", []).append(target or "?")
            level["commands"] = commands
        return level


def _bench_tree(package):
    """The command tree of the package's trtllm-bench (its commands/bench.py), or None."""
    parent = os.path.dirname(package)
    reader = _Reader([("", parent)])
    module = reader.module("tensorrt_llm.commands.bench")
    if module is None:
        return None
    groups = [f for f, d in module.defs.items() if d["kind"] == "group"]
    main = next((f for f in groups if module.defs[f]["name"] == BENCH), groups[0] if groups else None)
    return reader.tree(module, main) if main else None


def _script_tree(script):
    """The command tree of the standalone prepare_dataset.py (a click group importing ``utils.*`` beside it);
    options unknown (None) where it is not a click program."""
    reader = _Reader([("", os.path.dirname(script))])
    module = reader.module("prepare_dataset")
    groups = [f for f, d in (module.defs if module else {}).items() if d["kind"] == "group"]
    tree = reader.tree(module, groups[0]) if groups else {"options": None}
    tree.update(path=SCRIPT_PATH, interpreter="python3")
    return tree


def detect(root):
    """The TensorRT-LLM version and CLI surface of the root filesystem ``root``, from its files; nothing runs.

    Returns a JSON-able dict: ``version`` (None when not found; provenance only), ``surface``
    (``{"read_from": "image", "programs": {"trtllm-bench": tree, "prepare_dataset.py": tree}}``, a program
    absent where the image has none, its tree's ``options``/``commands`` None where unread), ``sources``
    (which files, as paths inside the image) and ``root``.
    """
    root = os.path.abspath(root or "/")
    sources = {}
    version, package = None, None
    for pattern in PYTHON_DIRS:
        for libdir in sorted(glob.glob(os.path.join(root, pattern)), reverse=True):
            pkg = os.path.join(libdir, "tensorrt_llm")
            if not os.path.isdir(pkg):
                continue
            for name in VERSION_FILES:
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
    programs = {}
    if package is not None:
        sources["package"] = _inside(root, package)
        bench = _bench_tree(package)
        if bench is not None:
            programs[BENCH] = bench
            sources["trtllm-bench"] = _inside(root, os.path.join(package, "commands", "bench.py"))
    script = os.path.join(root, SCRIPT_PATH.lstrip("/"))
    if os.path.isfile(script):
        programs[SCRIPT] = _script_tree(script)
        sources["prepare_dataset_script"] = SCRIPT_PATH
    return {"version": version, "surface": {"read_from": "image", "programs": programs}, "sources": sources,
            "root": root}


def version_candidates():
    """Paths (inside an image) of the files that carry the package version, for ``docker cp`` from an image that
    is never started (python 3.8 to 3.14 library directories; dist-info names are not guessable)."""
    libdirs = []
    for minor in range(8, 15):
        libdirs += ["/usr/local/lib/python3.%d/dist-packages" % minor, "/usr/local/lib/python3.%d/site-packages"
                    % minor]
    libdirs.append("/usr/lib/python3/dist-packages")
    return ["%s/tensorrt_llm/%s" % (d, f) for d in libdirs for f in VERSION_FILES]


def cli_paths(package):
    """Paths (inside the image) whose copies are enough to read the CLI surface, the package found at ``package``
    (a path inside the image): its commands/ and bench/ directories and the standalone script's files."""
    return ["%s/%s" % (package.rstrip("/"), d) for d in CLI_DIRS] + list(SCRIPT_FILES)


# ---------------------------------------------------------------------------------------- the surface


def _names(level):
    """Every spelling the level's options accept -> (canonical name, spec)."""
    out = {}
    for name, spec in (level.get("options") or {}).items():
        for alias in [name] + list(spec.get("aliases") or []):
            out[alias] = (name, spec)
    return out


def offers(level, name):
    """True/False whether a tree level has the option ``name``; None when that cannot be told (unread options)."""
    if level is None:
        return False
    if level.get("options") is None:
        return None
    if name in _names(level):
        return True
    return None if level.get("partial") else False


def has_command(level, name):
    """True/False whether a tree level has the subcommand ``name``; None when that cannot be told."""
    if level is None:
        return False
    commands = level.get("commands")
    if level.get("options") is None or commands is None:
        return None
    if name in commands:
        return True
    return None if level.get("partial_commands") else False


def _command(programs, *path):
    level = programs.get(path[0])
    for name in path[1:]:
        level = (level or {}).get("commands", {}) or {}
        level = level.get(name)
    return level


def _spelling(level, candidates):
    """The first spelling the level offers for sure, else the first it may offer, else None."""
    answers = [(c, offers(level, c)) for c in candidates]
    return next((c for c, a in answers if a), None) or next((c for c, a in answers if a is None), None)


def argv_problems(programs, argv):
    """What of ``argv`` the surface lacks: (missing, unconfirmed), lists of sentences. Walks the argv as click
    would: options of each level (values skipped), then the subcommand, down the tree."""
    missing, unconfirmed = [], []
    if argv and argv[0] == BENCH:
        level, path, rest = programs.get(BENCH), [BENCH], list(argv[1:])
    elif len(argv) > 1 and SCRIPT in programs and argv[1] == programs[SCRIPT].get("path"):
        level, path, rest = programs[SCRIPT], [argv[1]], list(argv[2:])
    else:
        return ["the image has no %s" % " ".join(argv[:2])], []
    if level is None:
        return ["the image has no %s" % argv[0]], []
    i = 0
    while True:
        seen = set()
        names = _names(level)
        while i < len(rest) and rest[i].startswith("-") and rest[i] != "-":
            key, _, inline = rest[i].partition("=")
            i += 1
            known = offers(level, key)
            where = "`%s`" % " ".join(path)
            if not known:
                if known is False:
                    missing.append("%s has no option %s" % (where, key))
                else:
                    unconfirmed.append("%s %s (not seen in its sources)" % (where, key))
                if not inline and i < len(rest) and not rest[i].startswith("-") and rest[i] not in (
                        level.get("commands") or {}):
                    i += 1  # its value, presumably
                continue
            canonical, spec = names[key]
            seen.add(canonical)
            if spec.get("type") == "flag":
                continue
            values = [inline] if inline else []
            while len(values) < int(spec.get("nargs") or 1) and i < len(rest):
                values.append(rest[i])
                i += 1
            choices = spec.get("choices")
            if choices and any(v not in choices for v in values):
                missing.append("%s %s takes %s, not %s" % (where, key, "|".join(choices), " ".join(values)))
        required = [n for n, s in (level.get("options") or {}).items() if s.get("required") and n not in seen]
        for name in required:
            missing.append("`%s` requires %s, which sparkfleet does not pass" % (" ".join(path), name))
        if i >= len(rest):
            if level.get("commands"):
                missing.append("`%s` needs a command" % " ".join(path))
            return missing, unconfirmed
        sub = rest[i]
        known = has_command(level, sub)
        if known is None:
            unconfirmed.append("`%s %s` (not seen in its sources)" % (" ".join(path), sub))
            return missing, unconfirmed
        if not known:
            missing.append("`%s` has no command `%s`" % (" ".join(path), sub))
            return missing, unconfirmed
        level, i = level["commands"][sub], i + 1
        path.append(sub)
        if level.get("options") is None:  # a level whose options were not read/transcribed: anything goes
            return missing, unconfirmed


def surface_digest(programs):
    """sha256 of a surface's canonical JSON (what a record keeps of the tree the commands were checked against)."""
    return hashlib.sha256(json.dumps(programs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ---------------------------------------------------------------------------------------- resolving


def resolve(trtllm, unknown_version=None):
    """The surface a run's commands are built against and the spellings it offers.

    ``trtllm``: a :func:`detect` result (or ``{"version": V}`` for an offline plan), optionally with
    ``unknown_version`` (refuse|warn; the argument wins). The image's own surface decides when its trtllm-bench
    command tree was read; else the captured surface for the version (:func:`captured_for`), said in a note
    (offline) or a warning (an image whose CLI could not be read). Raises TrtllmCliError where there is no
    surface to build from. The result has ``version``, ``profile`` (``image`` or ``captured <name>``),
    ``programs``, ``dataset`` (subcommand|script), ``script_path``, ``config_flag``, ``latency_options_file``,
    ``kv_flags``, ``warnings`` and ``notes``.
    """
    trtllm = dict(trtllm or {})
    policy = unknown_version or trtllm.get("unknown_version") or "refuse"
    if policy not in UNKNOWN_VERSION_POLICIES:
        raise TrtllmCliError("unknown_version: %r is not one of %s" % (policy, ", ".join(UNKNOWN_VERSION_POLICIES)))
    version = trtllm.get("version")
    programs = dict(((trtllm.get("surface") or {}).get("programs")) or {})
    from_image = "sources" in trtllm  # a detect() result: an image was read
    warnings, notes = [], []
    if (programs.get(BENCH) or {}).get("commands"):
        profile = "image"
    else:
        if not version:
            raise TrtllmCliError(
                "neither the TensorRT-LLM version nor its trtllm-bench command tree could be read from the image "
                "(no tensorrt_llm/version.py, dist-info or __init__.py, no tensorrt_llm/commands/bench.py%s): "
                "sparkfleet builds trtllm-bench commands from the image's own CLI and does not guess"
                % (" under %s" % trtllm["root"] if trtllm.get("root") else ""))
        surface, how = captured_for(version)
        names = ", ".join(s["name"] for s in captured())
        if how == "below":
            if policy != "warn":
                raise TrtllmCliError(
                    "TensorRT-LLM %s: %sno captured trtllm-bench surface covers it (captured: %s; the oldest is %s); "
                    "set sparkfleet_trtllm_unknown_version=warn to build its commands as for %s"
                    % (version, "its CLI could not be read from the image and " if from_image else "", names,
                       captured()[0]["name"], surface["name"]))
            warnings.append("TensorRT-LLM %s is older than every captured trtllm-bench surface: its commands are "
                            "built as for %s (sparkfleet_trtllm_unknown_version=warn)" % (version, surface["name"]))
        else:
            said = {"covers": "the captured surface %s covers it" % surface["name"],
                    "nearest": "no captured surface covers it; the nearest below it, %s, is used" % surface["name"],
                    "newest": "no captured surface covers it; the newest, %s, is used" % surface["name"]}[how]
            if from_image:
                warnings.append("TensorRT-LLM %s: its trtllm-bench command tree could not be read from the image "
                                "(tensorrt_llm/commands/bench.py); %s" % (version, said))
            else:
                notes.append("trtllm-bench surface: %s" % said)
        read = programs
        programs = dict(surface["programs"])
        if from_image:  # the image was read: its script (or its absence) is a fact of the image
            programs.pop(SCRIPT, None)
            if SCRIPT in read:
                programs[SCRIPT] = read[SCRIPT]
        legacy = (trtllm.get("surface") or {}).get("prepare_dataset_script")
        if legacy:  # an engine_probe result of before the CLI was read: the path of the image's script
            programs[SCRIPT] = dict(programs.get(SCRIPT) or {"options": None, "interpreter": "python3"}, path=legacy)
        profile = "captured %s" % surface["name"]
    sub = has_command(programs.get(BENCH), "prepare-dataset")
    if sub:
        dataset = "subcommand"
    elif SCRIPT in programs:
        dataset = "script"
    elif sub is None:
        dataset = "subcommand"
    else:
        raise TrtllmCliError("TensorRT-LLM %s: trtllm-bench has no `prepare-dataset` command and the image has no %s: "
                             "no way to make the run's dataset" % (version, SCRIPT_PATH))
    tput, lat = _command(programs, BENCH, "throughput"), _command(programs, BENCH, "latency")
    latency_flag = next((f for f in OPTIONS_FILE_FLAGS if offers(lat, f)), None)
    return {"version": version, "profile": profile, "programs": programs, "dataset": dataset,
            "script_path": (programs.get(SCRIPT) or {}).get("path") or SCRIPT_PATH,
            "config_flag": _spelling(tput, OPTIONS_FILE_FLAGS), "latency_options_file": latency_flag is not None,
            "warnings": warnings, "notes": notes}


def who(resolved):
    """How a refusal names the CLI it checked against."""
    if resolved["profile"] == "image":
        return "TensorRT-LLM %s (its trtllm-bench as read from the image)" % (resolved["version"] or "?")
    return "TensorRT-LLM %s (the %s trtllm-bench surface)" % (resolved["version"], resolved["profile"])


def record(trtllm, resolved):
    """What a run record keeps of the detection (``versions.trtllm``)."""
    trtllm = trtllm or {}
    programs = resolved["programs"]
    return {"version": resolved["version"], "profile": resolved["profile"], "dataset": resolved["dataset"],
            "config_flag": resolved["config_flag"], "latency_options_file": resolved["latency_options_file"],
            "surface": {"from": resolved["profile"], "commands": sorted((programs.get(BENCH) or {}).get("commands")
                                                                        or {}),
                        "script": SCRIPT in programs, "sha256": surface_digest(programs)},
            "sources": trtllm.get("sources") or {}, "warnings": list(resolved["warnings"])}


def run_env(hf_cache):
    """Environment of a trtllm run: offline unless a Hugging Face cache is bound (then it is the cache)."""
    if hf_cache:
        return {"HF_HOME": HF_CACHE_TARGET}
    return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


# -------------------------------------------------------------------------------------------- argv


def kv_fraction(workload):
    """The workload's kv_fraction as a float, or None when it gives none. Raises TrtllmCliError outside
    :data:`KV_FRACTION`'s range."""
    value = workload.get("kv_fraction")
    problem = field_problem(KV_FRACTION, value)
    if problem:
        raise TrtllmCliError("kv_fraction %s" % problem)
    return None if value is None else float(value)


def llm_api_options(workload):
    """The LLM API options file (:data:`LLM_API_OPTIONS`) a trtllm workload needs (its kv_fraction), or None."""
    fraction = kv_fraction(workload) if workload.get("engine", "trtllm") == "trtllm" else None
    if fraction is None:
        return None
    return "kv_cache_config:\n  free_gpu_memory_fraction: %r\n" % fraction


def _build(workload, model_ref, path, tokenizer, run_dir, resolved):
    """(steps, missing): the argv in the spellings the surface offers, and what it lacks that no spelling covers."""
    programs, missing = resolved["programs"], []
    extra = [str(a) for a in (workload.get("extra_args") or [])]
    dataset = "%s/dataset.jsonl" % run_dir
    requests = int(workload.get("requests") or max(int(workload.get("batch", 1) or 1) * 10, 10))
    lengths = ["token-norm-dist", "--num-requests", str(requests),
               "--input-mean", str(workload.get("input_len", 128)), "--input-stdev", "0",
               "--output-mean", str(workload.get("output_len", 128)), "--output-stdev", "0"]
    if resolved["dataset"] == "subcommand":
        # prepare-dataset's tokenizer is --model (prepare_dataset.py @0c8de69a): the local directory.
        prepare = ([BENCH, "--model", tokenizer, "prepare-dataset", "--output", dataset] + lengths, None)
    else:
        # The image's script, as NVIDIA's Spark guide runs it: JSON lines on stdout, into the dataset file.
        prepare = (["python3", resolved["script_path"], "--tokenizer", tokenizer, "--stdout"] + lengths, dataset)
    mode = workload.get("mode", "throughput")
    if mode not in MODES:
        raise TrtllmCliError("mode %r is not throughput or latency" % (mode,))
    level = _command(programs, BENCH, mode)
    base = [BENCH, "--model", model_ref]
    if path:
        base += ["--model_path", str(path)]
    bench = base + [mode, "--dataset", dataset, "--backend", str(workload.get("backend") or "pytorch"),
                    "--report_json", "%s/report.json" % run_dir, "--num_requests", str(requests)]
    if workload.get("batch") and mode == "throughput":  # latency forces batch 1 and has no such option
        bench += ["--max_batch_size", str(workload["batch"])]
    if workload.get("concurrency"):
        bench += ["--concurrency", str(workload["concurrency"])]
    fraction = kv_fraction(workload)
    if fraction is not None:
        if any(str(a).split("=", 1)[0] in OPTIONS_FILE_FLAGS for a in extra):
            raise TrtllmCliError("kv_fraction and an --extra_llm_api_options/--config file in extra_args: set "
                                 "kv_cache_config in one place")
        # The LLM API options file is what sizes the KV cache (PyTorch backend); the CLI flag says the same,
        # so the engine's report (world_info.kv_cache_percentage, from the CLI) agrees with its log.
        bench += [_spelling(level, KV_FRACTION_FLAGS) or KV_FRACTION_FLAGS[0], repr(fraction)]
        flag = _spelling(level, OPTIONS_FILE_FLAGS) if level is not None else OPTIONS_FILE_FLAGS[-1]
        if mode == "throughput" and flag is None:
            missing.append("`%s %s` has neither %s (the LLM API options file that sizes the KV cache: kv_fraction)"
                           % (BENCH, mode, " nor ".join(OPTIONS_FILE_FLAGS)))
        elif flag is not None and (mode == "throughput" or offers(level, flag)):
            bench += [flag, "%s/%s" % (run_dir, LLM_API_OPTIONS)]
        # latency without the flag (1.0/1.1): the CLI fraction alone sizes the KV cache, as its latency_command did
    return [("prepare", prepare[0], prepare[1]), ("bench", bench + extra, None)], missing


def check(workload, resolved, model=None, run_dir="/run"):
    """What a trtllm workload needs that the surface lacks: (missing, unconfirmed), sentences naming the command
    or option. Nothing is refused here; :func:`steps` refuses the missing."""
    model = model or {"name": "model", "path": "/model"}
    built, missing = _build(workload, str(model.get("hf_id") or model.get("name")), model.get("path"),
                            str(model.get("path") or model.get("hf_id") or model.get("name")), run_dir, resolved)
    unconfirmed = []
    for _, argv, _ in built:
        m, u = argv_problems(resolved["programs"], argv)
        missing += [x for x in m if x not in missing]
        unconfirmed += [x for x in u if x not in unconfirmed]
    return missing, unconfirmed


def steps(workload, model, run_dir, resolved, hf_cache=False):
    """The run's commands: [(name, argv, stdout_path or None), ...]; the last one is measured.

    ``resolved``: :func:`resolve`'s result. Every argv is checked against its surface: a command or option the
    image's CLI lacks is refused naming it (TrtllmCliError). The dataset's tokenizer is the model's local
    directory (``model.path``); without one, only an opted-in Hugging Face cache (``hf_cache``) may provide it by id.
    """
    name = str(model.get("name") or "")
    model_ref = str(model.get("hf_id") or name)
    path = model.get("path")
    if not path and not hf_cache:
        raise TrtllmCliError(
            "model %r has no path: a trtllm run reads its tokenizer and weights from the model's local directory "
            "(model.path, under the models directory), never from the Hugging Face Hub; give the path, or bind a "
            "Hugging Face cache (sparkfleet_hf_cache_dir) that holds %r" % (name, model_ref))
    built, missing = _build(workload, model_ref, path, str(path) if path else model_ref, run_dir, resolved)
    for _, argv, _ in built:
        missing += [m for m in argv_problems(resolved["programs"], argv)[0] if m not in missing]
    if missing:
        raise TrtllmCliError("%s lacks what workload %r needs: %s" % (who(resolved), workload.get("name") or "?",
                                                                      "; ".join(missing)))
    return built
