"""The code that ships to hosts (plugins/module_utils/sparkfleet_host) runs on their Python, not ours.

Standard library only, Python 3.8 syntax and APIs, relative imports inside the package (AnsiballZ
bundles it under the collection's name), and no plugin that reaches another file by
path or through a symlink.
"""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
HOST = REPO / "plugins" / "module_utils" / "sparkfleet_host"
HOST_FILES = sorted(HOST.rglob("*.py"))


def _module_names() -> list[str]:
    names = []
    for path in HOST_FILES:
        parts = path.relative_to(HOST.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("path", HOST_FILES, ids=lambda p: str(p.relative_to(HOST)))
def test_host_code_is_python_38_syntax_and_stdlib_only(path):
    tree = ast.parse(path.read_text(), feature_version=(3, 8))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            tops = [(node.module or "").split(".")[0]]
        else:
            continue
        for top in tops:
            assert top in sys.stdlib_module_names or top in ("pynvml", "ansible"), \
                f"{path.name}:{node.lineno}: imports {top!r}, which a host may not have"
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("ansible"):
            assert node.module.startswith("ansible.module_utils."), f"{path.name}: controller-side import"


def _python38() -> str | None:
    """A working Python 3.8 (Debian/deadsnakes, or pyenv's; a pyenv shim alone may not run)."""
    candidates = [*sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8.*/bin/python3.8"))),
                  shutil.which("python3.8")]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                               text=True)
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 8)":
            return candidate
    return None


@pytest.mark.skipif(_python38() is None, reason="no Python 3.8 on this machine (apt/pyenv) to import the host code")
def test_host_code_imports_under_python_38():
    names = _module_names()
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\nprint(len(sys.argv) - 1)"
    proc = subprocess.run([_python38(), "-c", code, *names], capture_output=True, text=True, timeout=120,
                          cwd=HOST.parent, env={"PATH": os.environ.get("PATH", "")})
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == len(names) > 10


def test_no_plugin_loads_code_by_path_or_through_a_symlink():
    for path in (REPO / "plugins").rglob("*"):
        assert not path.is_symlink(), f"{path}: a symlink in plugins/"
        if path.suffix == ".py":
            text = path.read_text()
            assert "spec_from_file_location" not in text and "sys.path" not in text, f"{path}: loads code by path"
