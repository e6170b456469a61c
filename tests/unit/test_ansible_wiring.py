"""ansible.cfg wiring: the checkout is found as the collection sparkfleet.bench from the repo root and via
ANSIBLE_CONFIG elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _config_dump(cwd: Path, env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run([str(BIN / "ansible-config"), "dump", "--only-changed", "-t", "all"],
                         cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout
    values = {}
    for line in out.splitlines():
        if "(" in line and "=" in line:
            key, value = line.split("=", 1)
            values[key.split("(")[0].strip()] = value.strip()
    return values


@pytest.mark.parametrize("from_elsewhere", [False, True])
def test_paths_resolve_to_the_repo(tmp_path, from_elsewhere):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp_path / "tmp")
    cwd = REPO
    if from_elsewhere:
        env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
        cwd = tmp_path
    values = _config_dump(cwd, env)
    assert str(REPO.parents[2]) in values["COLLECTIONS_PATHS"]  # <root> of <root>/ansible_collections/ns/name
    assert str(REPO / "inventory/local.ini") in values["DEFAULT_HOST_LIST"]
    assert values["HOST_KEY_CHECKING"] == "True"


@pytest.mark.parametrize("playbook", ["bench.yml", *sorted(p.name for p in (REPO / "playbooks").glob("*.yml"))])
def test_every_playbook_passes_syntax_check_from_another_directory(tmp_path, playbook):
    path = REPO / playbook if playbook == "bench.yml" else REPO / "playbooks" / playbook
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "t"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
