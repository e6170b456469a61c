#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: extract a container image's filesystem into a directory, atomically, for chroot."""

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
attributes:
  check_mode:
    support: full
    description: Reports what it would change and changes nothing.
  diff_mode:
    support: none
    description: Shows no diff.
seealso:
  - module: sparkfleet.bench.rootfs_image
  - module: sparkfleet.bench.chroot_mounts
author:
  - sparkfleet contributors (@sparkfleet)
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

import contextlib  # noqa: E402
import datetime  # noqa: E402
import fcntl  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.chroot import (  # noqa: E402
    IMAGE_CONFIG_KEYS,
    MARKER,
    MARKER_SCHEMA,
    PARTIAL_PREFIX,
    ChrootError,
    mounts_under,
    read_marker,
    read_mountinfo,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.textfile import write_atomic  # noqa: E402

LABEL = "sparkfleet.rootfs"


def write_marker(rootfs: str, marker: dict[str, Any]) -> None:
    """Replace the marker of a complete rootfs atomically (temporary file, fsync, rename)."""
    write_atomic(os.path.join(rootfs, MARKER), json.dumps(marker, indent=2, sort_keys=True))


def rootfs_dirname(digest: str) -> str:
    return digest.replace(":", "-")


def nearest_existing(path: str) -> str:
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path: str) -> int:
    st = os.statvfs(nearest_existing(path))
    return st.f_bavail * st.f_frsize


def safe_rmtree(path: str) -> None:
    """Remove a tree, but never one with a mount under it (that could be the host's /dev)."""
    mounted = mounts_under(read_mountinfo(), os.path.realpath(path), include_self=True)
    if mounted:
        raise ChrootError(f"refusing to remove {path}: {mounted[0].target} is mounted under it "
                          "(run playbooks/restore.yml first)")
    shutil.rmtree(path)


class Extractor:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        p = module.params
        self.root = os.path.realpath(p["root"])
        self.parent = os.path.join(self.root, "rootfs")
        self.digest: str = p["digest"]
        self.dest = os.path.join(self.parent, rootfs_dirname(self.digest))
        name = p["docker"]
        self.docker = name if os.path.isabs(name) else (module.get_bin_path(name) or "")
        self.tar = module.get_bin_path("tar", required=True)

    def fail(self, msg: str, **kw: Any) -> None:
        self.module.fail_json(msg=msg, **kw)

    def complete(self, path: str) -> dict[str, Any] | None:
        try:
            marker = read_marker(path)
        except ChrootError:
            return None
        return marker if marker.get("digest") == self.digest else None

    def stale_partials(self) -> list[str]:
        if not os.path.isdir(self.parent):
            return []
        return sorted(os.path.join(self.parent, n) for n in os.listdir(self.parent) if n.startswith(PARTIAL_PREFIX))

    def remove_stale_containers(self) -> None:
        rc, out, _ = self.module.run_command(
            [self.docker, "ps", "-aq", "--filter", f"label={LABEL}={self.parent}"])
        for cid in out.split() if rc == 0 else []:
            self.module.run_command([self.docker, "rm", "-f", cid])

    def extract(self, marker: dict[str, Any]) -> None:
        os.makedirs(self.parent, mode=0o755, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{rootfs_dirname(self.digest)[7:19]}-", dir=self.parent)
        cid = ""
        ok = False
        try:
            rc, out, err = self.module.run_command(
                [self.docker, "create", "--label", f"{LABEL}={self.parent}", "--network", "none",
                 "--entrypoint", "/sparkfleet-never-started", self.digest])
            if rc != 0:
                self.fail(f"docker create {self.digest} failed: {(err or out).strip()}")
            cid = out.strip().splitlines()[-1]
            # Streamed, never buffered (a rootfs is gigabytes); pipefail reports a failure of either side.
            q = shlex.quote
            pipeline = (f"set -o pipefail; {q(self.docker)} export {q(cid)} | {q(self.tar)} -x -p --numeric-owner "
                        f"--xattrs --xattrs-include=security.capability -C {q(tmp)} -f -")
            rc, _, err = self.module.run_command(["bash", "-c", pipeline])
            if rc != 0:
                cause = (err or "").strip()[-2000:]
                hint = " (disk full?)" if "No space left" in cause else ""
                self.fail(f"extracting {self.digest} into {self.parent} failed{hint}: docker export | tar rc={rc}: {cause}")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(tmp, ".dockerenv"))
            os.chmod(tmp, 0o755)
            os.sync()  # the tree reaches the disk before the marker says it is complete
            write_atomic(os.path.join(tmp, MARKER), json.dumps(marker, indent=2, sort_keys=True) + "\n")
            os.rename(tmp, self.dest)  # the whole tree appears at once (a directory, not a file write)
            dfd = os.open(self.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            ok = True
        finally:
            if cid:
                self.module.run_command([self.docker, "rm", "-f", cid])
            if not ok and os.path.isdir(tmp):
                try:
                    safe_rmtree(tmp)
                except (OSError, ChrootError) as exc:
                    self.module.warn(f"could not remove {tmp}: {exc}")


def run_module() -> None:
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
    p = module.params
    if not p["digest"].startswith("sha256:") or len(p["digest"]) != 71:
        module.fail_json(msg=f"digest must be an image ID sha256:<64 hex>, got {p['digest']!r}")
    if os.geteuid() != 0:
        module.fail_json(msg="rootfs extraction must run as root (become: true): the image's files keep their "
                             "owners, modes and device nodes")
    ex = Extractor(module)
    needed = int(p["size"] * (1 + p["free_margin_ratio"])) + p["free_margin_bytes"]
    image_config = {k: p[k] for k in IMAGE_CONFIG_KEYS}
    result: dict[str, Any] = dict(changed=False, path=ex.dest, extracted=False, marker_upgraded=False,
                                  removed_partials=[], pruned=[],
                                  prune_skipped=[], needed_bytes=needed, free_bytes=free_bytes(ex.parent))
    marker = ex.complete(ex.dest)
    lock_fd = None
    try:
        if marker is None:
            if not ex.docker:
                module.fail_json(msg=f"Docker CLI '{p['docker']}' not found on this host", **result)
            if not module.check_mode and os.path.isdir(ex.parent):
                # Serialise with another extraction into the same root; a killed holder releases the lock.
                lock_fd = os.open(os.path.join(ex.parent, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                marker = ex.complete(ex.dest)
        if marker is None:
            # Space that leftovers of an interrupted run hold comes back before the check.
            reclaim = ex.stale_partials() + ([ex.dest] if os.path.lexists(ex.dest) else [])
            if not module.check_mode:
                for path in reclaim:
                    safe_rmtree(path)
                    result["removed_partials"].append(path)
                if ex.docker and os.path.isdir(ex.parent):
                    ex.remove_stale_containers()
            result["free_bytes"] = free = free_bytes(ex.parent)
            if free < needed:
                module.fail_json(
                    msg=f"not enough free disk for the rootfs of {p['image'] or p['digest']} under {ex.root}: "
                        f"needs {needed} bytes (image {p['size']} + margin), {free} bytes free",
                    **result)
            marker = dict(
                schema=MARKER_SCHEMA, digest=p["digest"], image=p["image"], repo_digests=p["repo_digests"],
                size=p["size"], env=p["env"], **image_config,
                created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
            result.update(changed=True, extracted=True)
            if not module.check_mode:
                if lock_fd is None:
                    os.makedirs(ex.parent, mode=0o755, exist_ok=True)
                    lock_fd = os.open(os.path.join(ex.parent, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
                    fcntl.flock(lock_fd, fcntl.LOCK_EX)
                ex.extract(marker)
        else:
            if int(marker.get("schema") or 1) < MARKER_SCHEMA or any(k not in marker for k in IMAGE_CONFIG_KEYS):
                # Extracted by an older version: the files are the image's; only the marker lacks its config.
                marker = dict(marker, schema=MARKER_SCHEMA, **image_config)
                result.update(changed=True, marker_upgraded=True)
                if not module.check_mode:
                    write_marker(ex.dest, marker)
            stale = ex.stale_partials()
            if stale and lock_fd is None and not module.check_mode:
                lock_fd = os.open(os.path.join(ex.parent, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                stale = ex.stale_partials()
            for path in stale:
                if not module.check_mode:
                    safe_rmtree(path)
                result["removed_partials"].append(path)
                result["changed"] = True

        if p["prune"] and os.path.isdir(ex.parent):
            mounts = read_mountinfo()
            for name in sorted(os.listdir(ex.parent)):
                path = os.path.join(ex.parent, name)
                if path == ex.dest or name.startswith(".") or not os.path.isdir(path) or os.path.islink(path):
                    continue
                if mounts_under(mounts, path, include_self=True):
                    result["prune_skipped"].append(path)
                    module.warn(f"not pruning {path}: something is mounted under it (run restore.yml)")
                    continue
                if not module.check_mode:
                    safe_rmtree(path)
                result["pruned"].append(path)
                result["changed"] = True
    except (OSError, ChrootError) as exc:
        module.fail_json(msg=f"rootfs under {ex.parent}: {exc}", **result)
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    result["marker"] = marker
    result["free_bytes"] = free_bytes(ex.parent)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
