"""From campaign YAML to report, Jinja only passes values on: every computation is Python.

The validate stage computes everything once (campaign_check, campaign_plan: sparkfleet/planning.py); the
matrix, collect and report stages only hand those values to modules. This walks every template on that path
and fails on Jinja that computes: statements ({% for %}, {% set %}, {% if %}), arithmetic, and any filter,
test or call beyond the ones that only pass a value on (default, a type cast, a path's dirname) or read a
file. A recomputation such as ``sparkfleet_plan | length`` or ``selectattr('kind', 'eq', 'native')`` is the
drift this guards against: the plan says it once.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml
from jinja2 import nodes

REPO = Path(__file__).resolve().parents[2]
#: The campaign's path through bench.yml: the playbooks and the roles they run for it.
CAMPAIGN_PATH = [
    "bench.yml", "playbooks/validate.yml", "playbooks/matrix.yml", "playbooks/collect.yml",
    *sorted(str(p.relative_to(REPO)) for role in ("matrix", "collect")
            for p in (REPO / "roles" / role).glob("*/main.yml") if p.parent.name in ("tasks", "defaults")),
    "roles/matrix/tasks/stop.yml", "roles/matrix/tasks/job.yml",
    "roles/preflight_gates/tasks/main.yml", "roles/preflight_gates/defaults/main.yml",
]
#: Filters that pass a value on (a default, a cast, a path's parts) or build an argument from files.
PASSING_FILTERS = {"default", "bool", "int", "float", "dirname", "zip"}
#: Calls that read (files by lookup) or build a module argument from what was read.
PASSING_CALLS = {"query", "dict"}
COMPUTING = (nodes.For, nodes.If, nodes.Assign, nodes.AssignBlock, nodes.Macro, nodes.BinExpr, nodes.UnaryExpr,
             nodes.Test)


#: Task keywords whose value is a bare Jinja expression.
EXPRESSIONS = {"when", "until", "changed_when", "failed_when"}


def _templates(value, where: str):
    if isinstance(value, dict):
        for key in EXPRESSIONS & set(value):
            for index, expr in enumerate(value[key] if isinstance(value[key], list) else [value[key]]):
                yield f"{where}.{key}[{index}]", "{{ " + str(expr) + " }}"
        value = {k: v for k, v in value.items() if k not in EXPRESSIONS}
    if isinstance(value, str):
        if "{{" in value or "{%" in value:
            yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _templates(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _templates(item, f"{where}[{index}]")


def computations(template: str) -> list[str]:
    """What in ``template`` computes rather than passes a value on."""
    tree = jinja2.Environment().parse(template)
    found = []
    for node in tree.find_all(nodes.Node):
        if isinstance(node, COMPUTING):
            found.append(type(node).__name__)
        elif isinstance(node, nodes.Filter) and node.name not in PASSING_FILTERS:
            found.append(f"filter {node.name}")
        elif isinstance(node, nodes.Call) and not (isinstance(node.node, nodes.Name)
                                                   and node.node.name in PASSING_CALLS):
            found.append("call")
    return found


def test_the_rule_catches_the_recomputations_it_is_for():
    assert computations("{{ sparkfleet_plan | length }}") == ["filter length"]
    assert "filter selectattr" in computations("{{ x.environments | selectattr('kind', 'eq', 'native') | list }}")
    assert "Mul" in computations("{{ (n | int) * 2 }}")
    assert "For" in computations("{% for s in xs %}{{ s }}{% endfor %}")
    assert computations("{{ y | sparkfleet.bench.host_plan }}") == ["filter sparkfleet.bench.host_plan"]
    assert computations("{{ a.b }}/{{ c | default(omit) }}/{{ d.e[f] }} {{ g | dirname }}") == []
    task = {"name": "t", "when": "xs | length > 0", "vars": {"y": "{{ z }}"}}
    assert [computations(t) for _, t in _templates(task, "t")] == [["filter length"], []]


@pytest.mark.parametrize("path", CAMPAIGN_PATH)
def test_no_jinja_on_the_campaign_path_computes(path):
    data = yaml.safe_load((REPO / path).read_text())
    bad = [f"{where}: {template.strip()!r}: {', '.join(found)}"
           for where, template in _templates(data, path) if (found := computations(template))]
    assert not bad, "\n".join(bad)
