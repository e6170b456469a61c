"""Load and run the modules under plugins/ in-process, as Ansible would on a target.

The modules and their module_utils are plain Python under ``ansible_collections.sparkfleet.bench`` (the
checkout sits in an ansible_collections tree on sys.path), imported by that name as AnsiballZ's bundle does.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from ansible.module_utils.testing import patch_module_args

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
STANDINS = REPO / "tests" / "fleet" / "standins"

HOST_UTILS = "ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host"


def host_util(name: str) -> ModuleType:
    """A host module by its name alone (``gpu``: sensors/gpu.py), wherever its package by job keeps it."""
    host = PLUGINS / "module_utils" / "sparkfleet_host"
    if not (host / name).is_dir() and not (host / name.replace(".", "/")).with_suffix(".py").is_file():
        found = [p for p in host.rglob(f"{name}.py") if p.parent == host or p.parent.parent == host]
        assert len(found) == 1, f"host module {name!r}: {found or 'none'}"
        name = ".".join(found[0].relative_to(host).with_suffix("").parts)
    return importlib.import_module(f"{HOST_UTILS}.{name}")


sparkfleet_gpu = host_util("gpu")


def load_module(name: str) -> ModuleType:
    """plugins/modules/<name>.py, imported by its collection name."""
    return importlib.import_module(f"ansible_collections.sparkfleet.bench.plugins.modules.{name}")


@contextlib.contextmanager
def _as_module_process():
    """A module runs on a target, not the controller. Tests of controller plugins in the same worker process
    flip ansible-core's process-wide flag (2.20+), which would send module warnings to the display."""
    internal = importlib.import_module("ansible.module_utils._internal")
    before = getattr(internal, "is_controller", None)
    if before is None:  # ansible-core 2.19 has no such flag
        yield
        return
    internal.is_controller = False
    try:
        yield
    finally:
        internal.is_controller = before


def run_module(module: ModuleType, args: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    """Run ``module.main()`` with ``args``; return its JSON result (``failed: true`` when it failed)."""
    if check_mode:
        args = {**args, "_ansible_check_mode": True}
    # Warnings are process-global in ansible-core; one module run's must not show up in the next one's result.
    from ansible.module_utils.common import warnings as ansible_warnings

    ansible_warnings._global_warnings.clear()
    ansible_warnings._global_deprecations.clear()
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), _as_module_process():
        try:
            module.main()
        except SystemExit:
            pass
        else:  # pragma: no cover - a module must always exit through exit_json/fail_json
            raise AssertionError("module returned without exit_json/fail_json")
    return json.loads(out.getvalue().strip().splitlines()[-1])
