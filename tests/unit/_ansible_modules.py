"""Load and run the modules under plugins/ in-process, as Ansible would on a target.

``ansible.module_utils.sparkfleet_gpu`` resolves because plugins/module_utils is appended to the
``ansible.module_utils`` package path, which is what AnsiballZ's bundling amounts to on a remote host.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import ansible.module_utils
from ansible.module_utils.testing import patch_module_args

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
STANDINS = REPO / "tests" / "fleet" / "standins"

_utils = str(PLUGINS / "module_utils")
if _utils not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_utils)

# Imported here, after the path is wired, so that test files need not care about import order.
sparkfleet_gpu = importlib.import_module("ansible.module_utils.sparkfleet_gpu")


def load_module(name: str) -> ModuleType:
    """Import plugins/modules/<name>.py afresh (a new module object, so monkeypatches do not leak)."""
    path = PLUGINS / "modules" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"sparkfleet_plugin_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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
