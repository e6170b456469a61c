"""The serving_client role installs the prompt corpus that ships with the collection where
sparkfleet_serving_corpus's default points (issue 33: the client never downloads a book), on localhost."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "roles" / "serving_client" / "files" / "corpus.txt"


def test_the_shipped_corpus_is_the_public_domain_test_corpus_byte_for_byte():
    """files/README.md gives its provenance: a copy of tests/data/public-domain-prose.txt (tests/data/README.md)."""
    assert CORPUS.read_bytes() == (REPO / "tests" / "data" / "public-domain-prose.txt").read_bytes()
    readme = (CORPUS.parent / "README.md").read_text()
    assert "tests/data/public-domain-prose.txt" in readme and "public domain" in readme


def test_the_role_installs_it_where_the_settings_default_points(tmp_path, ansible_env):
    import subprocess

    work = tmp_path / "work"
    plan = planning.host_settings("localhost", {"sparkfleet_work_dir": str(work)})
    plan.update(needs_serving=True)
    plan["serving"]["client"] = sys.executable  # an executable: the role only checks it
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [{"ansible.builtin.include_role": {"name": "sparkfleet.bench.serving_client"}}]}]))
    (tmp_path / "vars.json").write_text(json.dumps({"sparkfleet_plan": plan}))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(playbook), "-e",
                           f"@{tmp_path / 'vars.json'}"], cwd=REPO, env=ansible_env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    installed = Path(plan["serving"]["corpus"])
    assert installed == work / "clients" / "corpus.txt"
    assert installed.read_bytes() == CORPUS.read_bytes()
