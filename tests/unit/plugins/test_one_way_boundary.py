"""The collection never imports the sparkfleet package (issue 22's one-way boundary): the package reads what the
collection defines (e.g. sparkfleet.load takes plugin_utils.unpack.STAGING_PREFIXES), never the other way."""

from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"


def test_no_collection_file_imports_the_package():
    offenders = []
    for path in sorted(PLUGINS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(PLUGINS)}: {n}" for n in names if n.split(".")[0] == "sparkfleet"]
    assert not offenders
