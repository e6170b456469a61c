"""The repo as an installable collection: build the tarball, install it, and use it from a playbook that lives
outside the checkout, through FQCNs only (a module, a role, a filter), with no sparkfleet ansible.cfg."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STANDINS = REPO / "tests" / "fleet" / "standins"

pytestmark = pytest.mark.slow


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The built tarball installed into a collections directory of its own; returns that directory."""
    work = tmp_path_factory.mktemp("collection")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_CONFIG"] = str(work / "none.cfg")  # no sparkfleet ansible.cfg: nothing finds the checkout
    # No sys.path scan either: the venv lists the checkout's own ansible_collections tree (bootstrap.sh), which
    # ansible-galaxy would take for an installed sparkfleet.bench and skip the install.
    (work / "none.cfg").write_text("[defaults]\ncollections_scan_sys_path = False\n")
    build = _run([str(BIN / "ansible-galaxy"), "collection", "build", str(REPO), "--output-path", str(work / "dist")],
                 env, work)
    assert build.returncode == 0, build.stderr
    (tarball,) = (work / "dist").glob("sparkfleet-bench-*.tar.gz")
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert tarball.name == f"sparkfleet-bench-{galaxy['version']}.tar.gz"
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert {"MANIFEST.json", "meta/runtime.yml", "plugins/modules/thermal_wait.py",
            "plugins/module_utils/sparkfleet_host/health/thermal.py", "roles/matrix/files/matmul.py"} <= names
    assert not any(n.startswith((".venv", ".collections", ".git/", "results/")) for n in names)
    install = _run([str(BIN / "ansible-galaxy"), "collection", "install", str(tarball),
                    "-p", str(work / "collections")], env, work)
    assert install.returncode == 0, install.stderr
    return work / "collections"


def test_a_playbook_outside_the_repo_uses_module_role_and_filter_by_fqcn(installed, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # The installed copy alone (no sys.path scan, as above).
    (outside / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {installed}\n"
                                         "collections_scan_sys_path = False\ngathering = explicit\n")
    (outside / "play.yml").write_text(textwrap.dedent(f"""\
        - name: Use sparkfleet.bench from an installed collection
          hosts: localhost
          connection: local
          gather_facts: false
          vars:
            sparkfleet_work_dir: {tmp_path / "work"}
            sparkfleet_campaign: {{name: outside}}
          tasks:
            - name: Wait for the (stand-in) GPU to be cool
              sparkfleet.bench.thermal_wait:
                threshold: 90
                settle_window: 1
                max_wait: 30
                poll_interval: 0.5
              register: cool

            - name: This host's plan (settings only), as playbooks/host_plan.yml gives it
              ansible.builtin.set_fact:
                sparkfleet_plan: >-
                  {{{{ {{'sparkfleet_work_dir': sparkfleet_work_dir, 'sparkfleet_campaign': sparkfleet_campaign}}
                  | sparkfleet.bench.host_plan(inventory_hostname) }}}}

            - name: Host facts through the collection's role
              ansible.builtin.include_role:
                name: sparkfleet.bench.host_facts

            - name: A filter of the collection
              ansible.builtin.set_fact:
                default: "{{{{ group_names | sparkfleet.bench.default_campaign }}}}"

            - name: Show what came back
              ansible.builtin.copy:
                dest: {tmp_path / "out.json"}
                content: "{{{{ {{'cool': cool, 'default': default}} | to_json }}}}"
                mode: "0644"
        """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(outside / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_NOCOLOR="1", PATH=f"{STANDINS}:{BIN}:{env.get('PATH', '')}",
               SPARKFLEET_FAKE_GPU_STATE=str(tmp_path / "gpu.json"), SPARKFLEET_FAKE_GPU_MODEL="h100")
    listed = _run([str(BIN / "ansible-galaxy"), "collection", "list", "sparkfleet.bench", "--format", "json"],
                  env, outside)
    assert listed.returncode == 0, listed.stderr
    assert list(json.loads(listed.stdout)) == [str(installed / "ansible_collections")]  # the installed copy only

    proc = _run([str(BIN / "ansible-playbook"), "-i", "localhost,",
                 "-e", f"ansible_python_interpreter={sys.executable}", "play.yml"], env, outside)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["cool"]["failed"] is False and out["cool"]["gpus"], out["cool"]
    assert out["default"]["name"] == "sanity"
    host = json.loads((tmp_path / "work" / "results" / "outside" / "localhost" / "host.json").read_text())
    assert host["host"] == "localhost" and host["gpus"] and "H100" in host["gpus"][0]
