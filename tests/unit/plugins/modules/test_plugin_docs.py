"""Every plugin of the collection is documented, and each module's documentation says what its code accepts.

ansible-test's validate-modules runs in CI on the checkout (tests/sanity/run.sh); these checks run
with the unit tests and need nothing but ansible-core: ansible-doc renders every plugin, the documented options
(as ansible-doc renders them, the doc fragments merged in) are the argument_spec (names, types, required,
defaults, choices, elements), and the examples call the modules by their FQCN.
"""

from __future__ import annotations

import functools
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from _ansible_modules import load_module

REPO = Path(__file__).resolve().parents[4]
PREFIX = "{namespace}.{name}".format(**yaml.safe_load((REPO / "galaxy.yml").read_text()))
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))
# documented in plugins/modules, run by plugins/action
ACTION_ONLY_DOCS = {"bench_follow", "campaign_check", "campaign_plan", "results_unpack"}
BIN = Path(sys.executable).parent


class _Captured(Exception):
    def __init__(self, spec: dict[str, Any]):
        super().__init__("argument_spec captured")
        self.spec = spec


def _argument_spec(name: str) -> dict[str, Any]:
    if name in ACTION_ONLY_DOCS:
        return importlib.import_module(f"ansible_collections.sparkfleet.bench.plugins.action.{name}").ARGUMENT_SPEC
    module = load_module(name)

    def capture(*_args, argument_spec=None, **_kw):
        raise _Captured(argument_spec or {})

    with mock.patch.object(module, "AnsibleModule", capture), pytest.raises(_Captured) as captured:
        module.main()
    return captured.value.spec


def _docs(name: str) -> tuple[dict, list, dict]:
    source = load_module(name)  # an action's documentation is a module file of its own, with no code
    return (_rendered()[f"{PREFIX}.{name}"]["doc"], yaml.safe_load(source.EXAMPLES), yaml.safe_load(source.RETURN))


def _compare(doc_options: dict, spec: dict, where: str) -> list[str]:
    problems = []
    if set(doc_options) != set(spec):
        problems.append(f"{where}: documented {sorted(set(doc_options) - set(spec))} not in argument_spec, "
                        f"{sorted(set(spec) - set(doc_options))} in argument_spec but not documented")
    for key in sorted(set(doc_options) & set(spec)):
        doc, arg = doc_options[key] or {}, spec[key] or {}
        checks = {
            "type": (doc.get("type", "str"), arg.get("type", "str")),
            "required": (bool(doc.get("required", False)), bool(arg.get("required", False))),
            "default": (doc.get("default"), arg.get("default")),
            "choices": (sorted(map(str, doc.get("choices") or [])), sorted(map(str, arg.get("choices") or []))),
            "elements": (doc.get("elements"), arg.get("elements")),
        }
        for what, (documented, actual) in checks.items():
            if what == "default" and isinstance(actual, (int, float)) and isinstance(documented, (int, float)):
                same = float(actual) == float(documented)
            elif what == "default" and doc.get("type") == "raw":
                same = str(actual) == str(documented)
            else:
                same = documented == actual
            if not same:
                problems.append(f"{where}.{key}: {what} documented {documented!r}, argument_spec {actual!r}")
        if arg.get("options") or doc.get("suboptions"):
            problems += _compare(doc.get("suboptions") or {}, arg.get("options") or {}, f"{where}.{key}")
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_module_documentation_is_yaml_and_matches_the_argument_spec(name):
    documentation, examples, returns = _docs(name)
    assert documentation["module"] == name
    assert documentation["short_description"] and documentation["description"] and documentation["author"]
    assert isinstance(returns, dict) and returns, f"{name}: RETURN is empty"
    for key, entry in returns.items():
        assert {"description", "returned", "type"} <= set(entry), f"{name}: RETURN.{key} incomplete"
    assert _compare(documentation.get("options") or {}, _argument_spec(name), name) == []
    assert isinstance(examples, list) and examples, f"{name}: EXAMPLES is empty"
    own = [task for task in examples if any(str(k).startswith(PREFIX + ".") for k in task)]
    assert own, f"{name}: no example calls a module by its FQCN ({PREFIX}.*)"
    short = {m for m in MODULES}
    for task in examples:
        assert not short & set(task), f"{name}: an example calls a module without its FQCN: {task.get('name')}"


def test_a_drifted_default_is_caught():
    """The comparison itself: a default documented differently from the code is reported by name."""
    assert _compare({"a": {"type": "float", "default": 60}}, {"a": {"type": "float", "default": 30.0}}, "m") == [
        "m.a: default documented 60, argument_spec 30.0"]
    assert _compare({"a": {}}, {"b": {}}, "m")[0].startswith("m: documented ['a'] not in argument_spec")


def _ansible_doc(kind: str, names: list[str]) -> dict[str, Any]:
    proc = subprocess.run([str(BIN / "ansible-doc"), "-t", kind, "--json", *names], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@functools.cache
def _rendered() -> dict[str, Any]:
    """Every module's documentation as ansible-doc renders it: with the doc fragments it extends."""
    return _ansible_doc("module", [f"{PREFIX}.{m}" for m in MODULES])


def test_ansible_doc_renders_every_module():
    docs = _rendered()
    assert sorted(docs) == sorted(f"{PREFIX}.{m}" for m in MODULES)
    assert all(d["doc"]["short_description"] for d in docs.values())


def test_ansible_doc_renders_every_filter():
    import _ansible_modules  # noqa: F401, PLC0415  (the collection loader, for the filters' module_utils imports)

    filters = []
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        namespace: dict[str, Any] = {}
        exec(compile(path.read_text(), path.name, "exec"), namespace)  # noqa: S102
        filters += namespace["FilterModule"]().filters()
    filters = sorted(filters)
    assert {"default_campaign", "host_plan", "setting_default"} <= set(filters)
    docs = _ansible_doc("filter", [f"{PREFIX}.{f}" for f in filters])
    assert sorted(docs) == [f"{PREFIX}.{f}" for f in filters]
    for name in filters:
        assert docs[f"{PREFIX}.{name}"]["doc"]["name"] == name
        assert docs[f"{PREFIX}.{name}"]["examples"], name
