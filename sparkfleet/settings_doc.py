"""The README's settings table, generated from the one definition of the ``sparkfleet_*`` settings
(``plugins/plugin_utils/settings.py``), between the ``settings-table`` markers in README.md.

``python -m sparkfleet.settings_doc --write`` regenerates it; tests/unit/plugins/plugin_utils/test_settings_registry.py
fails when it is out of date. The roles take no ``sparkfleet_*`` setting: validate.yml (or host_plan.yml) applies the
defaults once, on the controller, into each host's ``sparkfleet_plan``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.settings import SETTINGS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TABLE_START = "<!-- settings-table:start (generated: python -m sparkfleet.settings_doc --write) -->"
TABLE_END = "<!-- settings-table:end -->"


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
    return {README: readme_with_table(README.read_text())}


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
