"""This checkout as an Ansible collection: its name (from galaxy.yml) and the development link.

Playbooks and roles call the modules and roles by FQCN (``sparkfleet.bench.thermal_wait``). Run from the
checkout, Ansible finds the collection through ``.collections/ansible_collections/<namespace>/<name>``, a
link back to the checkout that ansible.cfg's ``collections_path`` names; ``bootstrap.sh`` and the tests make
it. An installed collection (``ansible-galaxy collection install``) needs no link.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
#: ansible.cfg's collections_path entry for the checkout, relative to the repo root.
DEV_PATH = ".collections"


def galaxy(repo: Path = REPO) -> dict:
    return yaml.safe_load((repo / "galaxy.yml").read_text())


def fqcn_prefix(repo: Path = REPO) -> str:
    meta = galaxy(repo)
    return f"{meta['namespace']}.{meta['name']}"


def dev_link(repo: Path = REPO) -> Path:
    """Make (or keep) ``.collections/ansible_collections/<ns>/<name>`` -> the checkout; return its path."""
    meta = galaxy(repo)
    parent = repo / DEV_PATH / "ansible_collections" / meta["namespace"]
    link = parent / meta["name"]
    target = os.path.relpath(repo, parent)
    if link.is_symlink() and os.readlink(link) == target:
        return link
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{meta['name']}.tmp{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target, target_is_directory=True)
    os.replace(tmp, link)  # atomic, so parallel test workers never see a missing link
    return link


def install_collection_loader(repo: Path = REPO) -> None:
    """Let this process import ``ansible_collections.<ns>.<name>...`` (modules and their module_utils, loaded
    in-process by tests and benchmarks) from the checkout, as ansible-core's own CLIs do."""
    from ansible.utils.collection_loader import AnsibleCollectionConfig  # noqa: PLC0415
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder  # noqa: PLC0415

    if AnsibleCollectionConfig.collection_finder is None:
        _AnsibleCollectionFinder(paths=[str(dev_link(repo).parents[2])], scan_sys_paths=False)._install()


if __name__ == "__main__":  # bootstrap.sh: python -m sparkfleet.collection
    print(dev_link(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else REPO))
