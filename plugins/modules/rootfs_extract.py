#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: extract a container image's filesystem into a directory, atomically, for chroot; the work is
sparkfleet_host.rootfs.rootfs_extract."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rootfs_extract
short_description: Extracts a container image's root filesystem for native (chroot) execution
description:
  - Makes C(ROOT/rootfs/DIGEST) (see RV(path)) hold the complete filesystem of the image O(digest), as
    C(docker create) + C(docker export) give it, streamed into C(tar -x) - the image is never written to disk
    as an archive.
  - Extraction goes to C(ROOT/rootfs/.partial-HEX-RANDOM) first. Only when C(tar) and C(docker export)
    both succeeded is C(/.dockerenv) removed, the marker C(.sparkfleet-rootfs.json) written (schema 2 - digest,
    reference, size, time, the image's config environment, entrypoint, Cmd, working directory and user, which
    the chroot launcher needs to run what C(docker run) runs) and the directory renamed into place in one
    C(rename) - an interrupted extraction never leaves a partial tree where a complete one is expected.
    Leftover C(.partial-*) directories and temporary containers of an interrupted run are removed by the next.
  - Before writing anything, checks that the file system of O(root) has O(size) plus a margin free and
    fails naming the bytes needed and free.
  - Idempotent - an existing rootfs whose marker names O(digest) is left alone (C(changed) V(false)).
    Another digest gets its own directory; older ones are kept until O(prune) is set.
  - A rootfs extracted by an older version (marker schema 1, without the entrypoint) is not extracted again -
    its files are the image's - but its marker is rewritten in place with O(entrypoint), O(cmd),
    O(working_dir) and O(user) (RV(marker_upgraded)).
  - Never removes a directory that has something mounted under it.
version_added: "0.1.0"
options:
  root:
    description:
      - Directory under which C(rootfs/) is kept.
    type: path
    required: true
  digest:
    description:
      - Image ID (C(sha256:HEX)) as M(sparkfleet.bench.rootfs_image) returns it; the container is created from this ID.
    type: str
    required: true
  image:
    description:
      - The reference the image was asked for by; recorded in the marker.
    type: str
    default: ""
  size:
    description:
      - Image size in bytes (the RV(sparkfleet.bench.rootfs_image#module:size) M(sparkfleet.bench.rootfs_image) returns), for the disk check.
    type: int
    required: true
  env:
    description:
      - The image's config environment (C(K=V) strings), recorded in the marker for the chroot launcher.
    type: list
    elements: str
    default: []
  entrypoint:
    description:
      - The image's C(Config.Entrypoint) (RV(sparkfleet.bench.rootfs_image#module:entrypoint)), recorded in the marker.
    type: list
    elements: str
    default: []
  cmd:
    description:
      - The image's C(Config.Cmd), recorded in the marker.
    type: list
    elements: str
    default: []
  working_dir:
    description:
      - The image's C(Config.WorkingDir), recorded in the marker.
    type: str
    default: ""
  user:
    description:
      - The image's C(Config.User), recorded in the marker.
    type: str
    default: ""
  repo_digests:
    description:
      - Registry digests of the image, recorded in the marker.
    type: list
    elements: str
    default: []
  free_margin_ratio:
    description:
      - Extra space required on top of O(size), as a fraction of it (file system overhead of many small files).
    type: float
    default: 0.1
  free_margin_bytes:
    description:
      - Extra space required on top of O(size), in bytes.
    type: int
    default: 268435456
  prune:
    description:
      - Remove the other complete rootfs directories under C(ROOT/rootfs/) (not mounted ones - those are
        reported in RV(prune_skipped)).
    type: bool
    default: false
  docker:
    description:
      - Name or path of the C(docker) CLI.
    type: str
    default: docker
notes:
  - Needs root (file ownership and device files in the image).
  - Check mode reports what would be extracted or pruned; the disk check still runs.
seealso:
  - module: sparkfleet.bench.rootfs_image
  - module: sparkfleet.bench.chroot_mounts
extends_documentation_fragment:
  - sparkfleet.bench.attributes
  - sparkfleet.bench.attributes.reports_changes
"""

EXAMPLES = r"""
- name: Extract the image's rootfs
  become: true
  sparkfleet.bench.rootfs_extract:
    root: /var/lib/sparkfleet
    digest: "{{ native_rootfs_image_info.digest }}"
    image: "{{ native_rootfs_image_info.image }}"
    size: "{{ native_rootfs_image_info.size }}"
    env: "{{ native_rootfs_image_info.env }}"
    entrypoint: "{{ native_rootfs_image_info.entrypoint }}"
    cmd: "{{ native_rootfs_image_info.cmd }}"
    working_dir: "{{ native_rootfs_image_info.working_dir }}"
    user: "{{ native_rootfs_image_info.user }}"
  register: native_rootfs_extracted
"""

RETURN = r"""
path:
  description: The complete rootfs directory.
  returned: always
  type: str
  sample: /var/lib/sparkfleet/rootfs/sha256-2b6f1e0c4a...
marker:
  description: Contents of the rootfs marker (in check mode, what it would hold).
  returned: always
  type: dict
  sample: {digest: "sha256:2b6f...", image: "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13",
           size: 18953654272, created: "2025-06-01T10:00:00Z", env: ["PATH=/usr/bin:/bin"]}
extracted:
  description: Whether the image was (or in check mode would be) extracted by this run.
  returned: always
  type: bool
marker_upgraded:
  description: Whether the marker of a rootfs extracted by an older version (schema 1) was rewritten with the image config.
  returned: always
  type: bool
needed_bytes:
  description: Free space the extraction requires.
  returned: always
  type: int
free_bytes:
  description: Free space found on the file system of O(root).
  returned: always
  type: int
removed_partials:
  description: Leftover C(.partial-*) directories of interrupted runs that were removed.
  returned: always
  type: list
  elements: str
pruned:
  description: Older rootfs directories removed by O(prune).
  returned: always
  type: list
  elements: str
prune_skipped:
  description: Older rootfs directories O(prune) left because something is mounted under them.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import task
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.rootfs import rootfs_extract


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            digest=dict(type="str", required=True),
            image=dict(type="str", default=""),
            size=dict(type="int", required=True),
            env=dict(type="list", elements="str", default=[]),
            entrypoint=dict(type="list", elements="str", default=[]),
            cmd=dict(type="list", elements="str", default=[]),
            working_dir=dict(type="str", default=""),
            user=dict(type="str", default=""),
            repo_digests=dict(type="list", elements="str", default=[]),
            free_margin_ratio=dict(type="float", default=0.1),
            free_margin_bytes=dict(type="int", default=256 * 1024 * 1024),
            prune=dict(type="bool", default=False),
            docker=dict(type="str", default="docker"),
        ),
        supports_check_mode=True,
    )
    task.exit_with(module, rootfs_extract.apply, c_locale=False)  # docker and tar in the module's own locale


if __name__ == "__main__":
    main()
