"""Click sources shaped like TensorRT-LLM's, written from a command tree (tests/data/trtllm-cli/<version>.json).

The test image carries them under its ``tensorrt_llm`` package (testimage.py), so engine_probe reads an image's
CLI the way it reads NVIDIA's: ``tensorrt_llm/commands/bench.py`` (a ``click.group`` named trtllm-bench, its
global options, ``main.add_command(...)`` of functions imported from their modules), the commands' modules
(``optgroup.option`` decorators as in ``bench/benchmark/throughput.py``), ``bench/dataset/prepare_dataset.py``
(a group whose subcommands come from ``prepare_synthetic_data.py``, named by click from their function names).
A command whose options were not transcribed (``"options": null``) is registered from a module that is not
written, by an explicit name, as upstream's ``build`` and ``visual-gen`` are to a reader that has no copy of them.

Run as a script, it prints plugins/module_utils/sparkfleet_host/engines/trtllm_surfaces.py, the product's captured
surfaces, generated from the same trees.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: The command trees (the tests' data) the sources and the product's captured surfaces are made from.
TREES = Path(__file__).resolve().parent.parent / "data" / "trtllm-cli"

#: Where each trtllm-bench command's function lives (module under tensorrt_llm, function name).
MODULES = {
    "throughput": ("bench.benchmark.throughput", "throughput_command"),
    "latency": ("bench.benchmark.low_latency", "latency_command"),
    "build": ("bench.build.build", "build_command"),
    "prepare-dataset": ("bench.dataset.prepare_dataset", "prepare_dataset"),
    "visual-gen": ("bench.benchmark.visual_gen", "visual_gen_command"),
}


def _option(name: str, spec: dict, decorator: str) -> str:
    args = [repr(name)] + [repr(a) for a in spec.get("aliases", [])]
    kind = spec.get("type", "str")
    if kind == "flag":
        args.append("is_flag=True")
    elif kind in ("int", "float", "str"):
        args.append(f"type={kind}")
    elif kind == "path":
        args.append("type=click.Path(path_type=Path)")
    elif kind == "choice":
        args.append(f"type=click.Choice({spec['choices']!r})")
    if spec.get("required"):
        args.append("required=True")
    if spec.get("nargs"):
        args.append(f"nargs={spec['nargs']}")
    if spec.get("multiple"):
        args.append("multiple=True")
    return f"@{decorator}(" + ", ".join(args) + ', help="(test image)")\n'


def _function(level: dict, kind: str, name: str | None, func: str, decorator: str) -> str:
    head = f"@click.{kind}(" + (f"name={name!r}" if name else "") + ")\n"
    options = "".join(_option(n, s, decorator) for n, s in (level.get("options") or {}).items())
    return head + options + f"@click.pass_context\ndef {func}(ctx, **kwargs):\n    pass\n"


def click_sources(tree: dict, version: str) -> dict[str, str]:
    """{path under the package: text} for the trtllm-bench program of ``tree``."""
    bench = tree["programs"]["trtllm-bench"]
    files = {"__init__.py": "from .version import __version__\n", "version.py": f'__version__ = "{version}"\n'}
    imports, adds = [], []
    for command, level in (bench.get("commands") or {}).items():
        module, func = MODULES.get(command, (f"bench.extra.{command.replace('-', '_')}", "command"))
        imports.append(f"from tensorrt_llm.{module} import {func}\n")
        if level.get("options") is None:  # not transcribed: its module is not written, its name is explicit
            adds.append(f"main.add_command({func}, name={command!r})\n")
            continue
        adds.append(f"main.add_command({func})\n")
        path = module.replace(".", "/") + ".py"
        if command == "prepare-dataset":
            text = "import click\n\n" + _function(level, "group", command, func, "click.option")
            subs, sub_imports, sub_adds = "", [], []
            for sub, sub_level in (level.get("commands") or {}).items():
                sub_func = sub.replace("-", "_")
                if sub_level.get("options") is None:
                    sub_imports.append(f"from tensorrt_llm.bench.dataset.prepare_real_data import {sub_func}\n")
                    sub_adds.append(f"{func}.add_command({sub_func}, name={sub!r})\n")
                    continue
                sub_imports.append(f"from tensorrt_llm.bench.dataset.prepare_synthetic_data import {sub_func}\n")
                sub_adds.append(f"{func}.add_command({sub_func})\n")
                subs += "\n\n" + _function(sub_level, "command", None, sub_func, "click.option")
            files[path] = "".join(sub_imports) + text + "\n\n" + "".join(sub_adds)
            files["bench/dataset/prepare_synthetic_data.py"] = "import click\n" + subs
        else:
            files[path] = ("from pathlib import Path\n\nimport click\nfrom click_option_group import optgroup\n\n\n"
                           + _function(level, "command", command, func, "optgroup.option"))
    main = _function(bench, "group", "trtllm-bench", "main", "click.option")
    files["commands/bench.py"] = ("from pathlib import Path\n\nimport click\n\n" + "".join(imports) + "\n\n" + main
                                  + "\n\n" + "".join(adds))
    for package in ("commands", "bench", "bench/benchmark", "bench/dataset", "bench/build"):
        files.setdefault(f"{package}/__init__.py", "")
    return files


def script_sources(tree: dict) -> dict[str, str]:
    """{path beside the script: text} of a click-shaped standalone prepare_dataset.py (utils/ beside it)."""
    script = tree["programs"]["prepare_dataset.py"]
    text = "import click\n"
    subs, imports, adds = "import click\n", [], []
    for sub, level in (script.get("commands") or {}).items():
        func = sub.replace("-", "_")
        if level.get("options") is None:
            imports.append(f"from utils.prepare_real_data import {func}\n")
            adds.append(f"cli.add_command({func}, name={sub!r})\n")
            continue
        imports.append(f"from utils.prepare_synthetic_data import {func}\n")
        adds.append(f"cli.add_command({func})\n")
        subs += "\n\n" + _function(level, "command", None, func, "click.option")
    text = "".join(imports) + text + "\n\n" + _function(script, "group", None, "cli", "click.option") + "\n\n"
    return {"prepare_dataset.py": text + "".join(adds), "utils/prepare_synthetic_data.py": subs,
            "utils/__init__.py": ""}


# ------------------------------------------------------------------ the product's captured surfaces


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in ("source", "note")}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def shipped(trees: Path = TREES) -> tuple:
    """What plugins/module_utils/sparkfleet_host/engines/trtllm_surfaces.py holds: each tree less its notes."""
    out = []
    for path in sorted(trees.glob("*.json")):
        data = json.loads(path.read_text())
        applies = data["applies_to"]
        out.append({"name": data["version"], "pattern": applies["pattern"], "floor": applies["floor"],
                    "example": applies["example"], "data": f"tests/data/trtllm-cli/{path.name}",
                    "programs": _strip(data["programs"])})
    return tuple(out)


def _literal(x) -> str:
    if isinstance(x, str):
        return json.dumps(x)
    if isinstance(x, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in x.items()) + "}"
    if isinstance(x, tuple):
        return "(" + ", ".join(_literal(v) for v in x) + ("," if len(x) == 1 else "") + ")"
    if isinstance(x, list):
        return "[" + ", ".join(_literal(v) for v in x) + "]"
    return repr(x)  # True, False, None, numbers


def _lines(x, indent: int, prefix: str = "", suffix: str = ",") -> list[str]:
    """``x`` as Python source, on one line where it fits in 120 columns, else one item per line (a sequence of
    plain values: as many a line as fit)."""
    pad = " " * indent
    one = pad + prefix + _literal(x) + suffix
    if len(one) <= 120 or not isinstance(x, (dict, list, tuple)):
        return [one]
    if isinstance(x, dict):
        out = [pad + prefix + "{"]
        for k, v in x.items():
            out += _lines(v, indent + 4, _literal(k) + ": ")
        return out + [pad + "}" + suffix]
    opening, closing = ("(", ")") if isinstance(x, tuple) else ("[", "]")
    out = [pad + prefix + opening]
    if any(isinstance(v, (dict, list, tuple)) for v in x):
        for v in x:
            out += _lines(v, indent + 4)
        return out + [pad + closing + suffix]
    line = pad + "   "
    for v in x:
        if len(line) + len(_literal(v)) + 2 > 120:
            out, line = out + [line], pad + "   "
        line += " " + _literal(v) + ","
    return out + [line, pad + closing + suffix]


HEADER = '''# -*- coding: utf-8 -*-
"""The captured trtllm-bench surfaces: each the command tree of one TensorRT-LLM release line, as transcribed
from upstream's click sources into tests/data/trtllm-cli/<name>.json (which names every file and commit and
says how exactly each is pinned), less those notes. Generated from those files by
``python tests/fleet/trtllm_sources.py > plugins/module_utils/sparkfleet_host/engines/trtllm_surfaces.py``; the contract
test (tests/unit/plugins/plugin_utils/test_trtllm_cli_contract.py) fails when this module and the files differ.
Release lines differ little, so the first surface is written whole and each later one as its changes from an
earlier one; SURFACES, rebuilt from them at import, is each tree whole.

A run builds its commands from the image's own CLI (trtllm_cli.detect); these serve where that cannot be read:
an offline ``sparkfleet plan``, an image whose sources are laid out otherwise.
"""

import copy

#: A change's value for a key it removes (None is a value here: a command whose options were not transcribed).
DROPPED = "<dropped>"
#: A change's key for its dict's new key order, where that is not the old order with new keys last.
ORDER = "<order>"


def _changed(old, change):
    """``old`` with ``change`` applied: a dict into a dict key by key (as a JSON merge patch), else replacing."""
    if not isinstance(old, dict) or not isinstance(change, dict):
        return change
    new = dict(old)
    for key, value in change.items():
        if value == DROPPED:
            del new[key]
        elif key != ORDER:
            new[key] = _changed(old.get(key), value)
    return {key: new[key] for key in change.get(ORDER, new)}


def _rebuilt(first, changes):
    """``first``, then each of ``changes`` (the name of an earlier surface, the change to it) applied."""
    built = [first]
    for base, change in changes:
        built.append(_changed(next(s for s in built if s["name"] == base), change))
    return tuple(copy.deepcopy(built))  # no surface shares a part with another, as when each was written whole


# fmt: off
'''

#: Must match the module's markers (HEADER); no captured tree holds them.
DROPPED, ORDER = "<dropped>", "<order>"


def _change(old, new):
    """What the module's ``_changed`` applies to ``old`` to give ``new``, key order included."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return new
    change = {key: DROPPED for key in old if key not in new}
    change.update({key: _change(old.get(key), value) for key, value in new.items()
                   if key not in old or repr(old[key]) != repr(value)})
    if [key for key in old if key in new] + [key for key in new if key not in old] != list(new):
        change[ORDER] = list(new)
    return change


def _change_lines(base: str, change: dict) -> list[str]:
    """One entry of the module's CHANGES: (the name of an earlier surface, the change to it)."""
    return _lines(change, 4, f"({_literal(base)}, ", "),")


def _changes(surfaces: tuple) -> list[str]:
    """The module's CHANGES, each surface after the first from the earlier surface it differs least from."""
    out = ["CHANGES = ("]
    for i, surface in enumerate(surfaces[1:], 1):
        entries = [_change_lines(base["name"], _change(base, surface)) for base in surfaces[:i]]
        out += min(reversed(entries), key=len)  # on a tie, the nearest one before
    return out + [")"]


def render_surfaces_module(trees: Path = TREES) -> str:
    """The text of plugins/module_utils/sparkfleet_host/engines/trtllm_surfaces.py for the trees in ``trees``."""
    surfaces = shipped(trees)
    assert DROPPED not in repr(surfaces) and ORDER not in repr(surfaces)
    return "\n".join([HEADER + "\n".join(_lines(surfaces[0], 0, "FIRST = ", "")), *_changes(surfaces),
                      "SURFACES = _rebuilt(FIRST, CHANGES)\n"])


if __name__ == "__main__":
    sys.stdout.write(render_surfaces_module())
