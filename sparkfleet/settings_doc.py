"""Files generated from the one definition of the ``sparkfleet_*`` settings (``sparkfleet_host.settings``).

* ``roles/settings/defaults/main.yml``: every setting's default (the roles depend on this role and read
  ``sparkfleet_*`` without a default of their own - kubespray's defaults-role pattern);
* ``roles/settings/meta/argument_specs.yml``: their types and docs;
* the settings table in README.md (between the ``settings-table`` markers).

``python -m sparkfleet.settings_doc --write`` regenerates them; tests/unit/test_settings_registry.py fails
when one of them is out of date.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import yaml

from sparkfleet_host.settings import SETTINGS, Field

REPO = Path(__file__).resolve().parents[1]
DEFAULTS_FILE = REPO / "roles" / "settings" / "defaults" / "main.yml"
ARGSPEC_FILE = REPO / "roles" / "settings" / "meta" / "argument_specs.yml"
README = REPO / "README.md"
TABLE_START = "<!-- settings-table:start (generated: python -m sparkfleet.settings_doc --write) -->"
TABLE_END = "<!-- settings-table:end -->"
HEADER = "---\n# GENERATED from sparkfleet_host/settings.py (SETTINGS): python -m sparkfleet.settings_doc --write\n"


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key (yamllint's default, which ansible-lint applies)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False):
        return super().increase_indent(flow, False)


def _dump(data, **kwargs) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, **kwargs)


#: The settings role's variables are the collection's sparkfleet_* settings, not settings_* ones.
_NOQA = "  # noqa: var-naming[no-role-prefix]"


def _templated(f: Field) -> bool:
    return isinstance(f.default, str) and "{{" in f.default


def defaults_yaml() -> str:
    lines = [HEADER.rstrip("\n"),
             "# Every sparkfleet_* setting's default; the inventory, group_vars and -e override them.",
             "# The other roles depend on this one and read sparkfleet_* without defaults of their own."]
    for f in SETTINGS:
        comment = f"{f.doc}" + (f" ({f.range_text()})" if f.range_text() else "")
        lines += [f"# {line}" for line in textwrap.wrap(comment, 150)]  # within yamllint's line length
        flow = _dump({f.name: f.default}, default_flow_style=True, width=10 ** 6).strip()[1:-1]
        if len(flow) + len(_NOQA) <= 150:
            lines.append(flow + _NOQA)
        else:  # block style, within yamllint's line length
            block = _dump({f.name: f.default}, default_flow_style=False, width=100).rstrip("\n").split("\n")
            lines += [block[0] + _NOQA, *block[1:]]
    return "\n".join(lines) + "\n"


def argument_specs() -> dict:
    options = {}
    for f in SETTINGS:
        spec: dict = {"type": f.to_ansible_type()}
        if f.kind == "list" and f.elements:
            spec["elements"] = {"abs_path": "path"}.get(f.elements, f.elements)
        if f.choices:
            spec["choices"] = list(f.choices)
        if f.default is not None and not _templated(f):
            spec["default"] = f.default
        extra = f.range_text()
        spec["description"] = f.doc + (f" Range: {extra}." if extra else "") + (
            f" Default: {f.default}." if _templated(f) else "")
        options[f.name] = spec
    return {"argument_specs": {"main": {
        "short_description": "The sparkfleet_* settings and their defaults, for every other role (no tasks)",
        "description": ["Generated from sparkfleet_host/settings.py; validated on the controller by "
                        "playbooks/validate.yml before any host is touched."],
        "options": options}}}


def argument_specs_yaml() -> str:
    return HEADER + _dump(argument_specs(), width=110, default_flow_style=False)


def _cell(value) -> str:
    if value is None:
        return "—"
    text = yaml.safe_dump(value, default_flow_style=True, width=10 ** 6).strip()
    text = text.removesuffix("...").strip()
    return "`" + text.replace("|", "\\|") + "`"


def readme_table() -> str:
    rows = ["| setting | type | default | range | meaning |", "|---|---|---|---|---|"]
    for f in SETTINGS:
        kind = f.to_ansible_type() + (f" of {f.elements}" if f.elements else "")
        if f.choices:
            kind += ": " + " \\| ".join(map(str, f.choices))
        rows.append(f"| `{f.name}` | {kind} | {_cell(f.default)} | {f.range_text() or '—'} | {f.doc} |")
    return "\n".join(rows)


def readme_with_table(text: str) -> str:
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"README.md has no {TABLE_START} ... {TABLE_END} block")
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_START}\n{readme_table()}\n{TABLE_END}{tail}"


def generated() -> dict[Path, str]:
    return {DEFAULTS_FILE: defaults_yaml(), ARGSPEC_FILE: argument_specs_yaml(),
            README: readme_with_table(README.read_text())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the files (default: report stale ones)")
    args = parser.parse_args(argv)
    stale = 0
    for path, text in generated().items():
        if path.exists() and path.read_text() == text:
            continue
        stale += 1
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
        else:
            print(f"stale: {path.relative_to(REPO)}")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
