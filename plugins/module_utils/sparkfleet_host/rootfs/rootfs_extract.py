# Copyright: sparkfleet contributors
# Apache-2.0
"""A container image's filesystem extracted into a directory, atomically, for chroot: the rootfs_extract module's
work (:func:`apply`).

Stdlib only, Python 3.8+: shipped to the hosts with the other module_utils.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import shlex
import shutil
import tempfile
from typing import Any, Mapping

from ..task import Task, TaskFailed
from .chroot import (
    IMAGE_CONFIG_KEYS,
    MARKER_SCHEMA,
    PARTIAL_PREFIX,
    ChrootError,
    mounts_under,
    read_marker,
    read_mountinfo,
    write_marker,
)

LABEL = "sparkfleet.rootfs"


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


def lock(parent: str) -> int:
    """An exclusive lock on ``parent``'s ``.lock``, serialising extractions into one root; a killed holder releases
    it. The descriptor to close."""
    fd = os.open(os.path.join(parent, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


class Extractor:
    def __init__(self, params: Mapping[str, Any], task: Task) -> None:
        self.task = task
        self.root = os.path.realpath(params["root"])
        self.parent = os.path.join(self.root, "rootfs")
        self.digest: str = params["digest"]
        self.dest = os.path.join(self.parent, rootfs_dirname(self.digest))
        name = params["docker"]
        self.docker = name if os.path.isabs(name) else (task.which(name) or "")
        self.tar = task.which("tar", required=True)

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
        rc, out, _ = self.task.run([self.docker, "ps", "-aq", "--filter", f"label={LABEL}={self.parent}"])
        for cid in out.split() if rc == 0 else []:
            self.task.run([self.docker, "rm", "-f", cid])

    def extract(self, marker: dict[str, Any]) -> None:
        os.makedirs(self.parent, mode=0o755, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{rootfs_dirname(self.digest)[7:19]}-", dir=self.parent)
        cid = ""
        ok = False
        try:
            rc, out, err = self.task.run(
                [self.docker, "create", "--label", f"{LABEL}={self.parent}", "--network", "none",
                 "--entrypoint", "/sparkfleet-never-started", self.digest])
            if rc != 0:
                raise TaskFailed(f"docker create {self.digest} failed: {(err or out).strip()}")
            cid = out.strip().splitlines()[-1]
            # Streamed, never buffered (a rootfs is gigabytes); pipefail reports a failure of either side.
            q = shlex.quote
            pipeline = (f"set -o pipefail; {q(self.docker)} export {q(cid)} | {q(self.tar)} -x -p --numeric-owner "
                        f"--xattrs --xattrs-include=security.capability -C {q(tmp)} -f -")
            rc, _, err = self.task.run(["bash", "-c", pipeline])
            if rc != 0:
                cause = (err or "").strip()[-2000:]
                hint = " (disk full?)" if "No space left" in cause else ""
                raise TaskFailed(f"extracting {self.digest} into {self.parent} failed{hint}: "
                                 f"docker export | tar rc={rc}: {cause}")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(tmp, ".dockerenv"))
            os.chmod(tmp, 0o755)
            os.sync()  # the tree reaches the disk before the marker says it is complete
            write_marker(tmp, marker)
            os.rename(tmp, self.dest)  # the whole tree appears at once (a directory, not a file write)
            dfd = os.open(self.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            ok = True
        finally:
            if cid:
                self.task.run([self.docker, "rm", "-f", cid])
            if not ok and os.path.isdir(tmp):
                try:
                    safe_rmtree(tmp)
                except (OSError, ChrootError) as exc:
                    self.task.warn(f"could not remove {tmp}: {exc}")


def check_params(params: Mapping[str, Any]) -> None:
    if not params["digest"].startswith("sha256:") or len(params["digest"]) != 71:
        raise TaskFailed(f"digest must be an image ID sha256:<64 hex>, got {params['digest']!r}")
    if os.geteuid() != 0:
        raise TaskFailed("rootfs extraction must run as root (become: true): the image's files keep their "
                         "owners, modes and device nodes")


def prune(ex: Extractor, task: Task, result: dict[str, Any]) -> None:
    """Remove the other rootfs directories under the root, never one with a mount under it."""
    mounts = read_mountinfo()
    for name in sorted(os.listdir(ex.parent)):
        path = os.path.join(ex.parent, name)
        if path == ex.dest or name.startswith(".") or not os.path.isdir(path) or os.path.islink(path):
            continue
        if mounts_under(mounts, path, include_self=True):
            result["prune_skipped"].append(path)
            task.warn(f"not pruning {path}: something is mounted under it (run restore.yml)")
            continue
        if not task.check_mode:
            safe_rmtree(path)
        result["pruned"].append(path)
        result["changed"] = True


def apply(params: Mapping[str, Any], task: Task) -> dict[str, Any]:
    """The rootfs_extract module's result: the image's rootfs extracted (or found complete, its marker upgraded),
    leftovers of interrupted runs removed, other rootfs pruned when asked."""
    p = params
    check_params(p)
    ex = Extractor(p, task)
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
                raise TaskFailed(f"Docker CLI '{p['docker']}' not found on this host", **result)
            if not task.check_mode and os.path.isdir(ex.parent):
                lock_fd = lock(ex.parent)
                marker = ex.complete(ex.dest)
        if marker is None:
            # Space that leftovers of an interrupted run hold comes back before the check.
            reclaim = ex.stale_partials() + ([ex.dest] if os.path.lexists(ex.dest) else [])
            if not task.check_mode:
                for path in reclaim:
                    safe_rmtree(path)
                    result["removed_partials"].append(path)
                if ex.docker and os.path.isdir(ex.parent):
                    ex.remove_stale_containers()
            result["free_bytes"] = free = free_bytes(ex.parent)
            if free < needed:
                raise TaskFailed(
                    f"not enough free disk for the rootfs of {p['image'] or p['digest']} under {ex.root}: "
                    f"needs {needed} bytes (image {p['size']} + margin), {free} bytes free",
                    **result)
            marker = dict(
                schema=MARKER_SCHEMA, digest=p["digest"], image=p["image"], repo_digests=p["repo_digests"],
                size=p["size"], env=p["env"], **image_config,
                created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
            result.update(changed=True, extracted=True)
            if not task.check_mode:
                if lock_fd is None:
                    os.makedirs(ex.parent, mode=0o755, exist_ok=True)
                    lock_fd = lock(ex.parent)
                ex.extract(marker)
        else:
            if int(marker.get("schema") or 1) < MARKER_SCHEMA or any(k not in marker for k in IMAGE_CONFIG_KEYS):
                # Extracted by an older version: the files are the image's; only the marker lacks its config.
                marker = dict(marker, schema=MARKER_SCHEMA, **image_config)
                result.update(changed=True, marker_upgraded=True)
                if not task.check_mode:
                    write_marker(ex.dest, marker)
            stale = ex.stale_partials()
            if stale and lock_fd is None and not task.check_mode:
                lock_fd = lock(ex.parent)
                stale = ex.stale_partials()
            for path in stale:
                if not task.check_mode:
                    safe_rmtree(path)
                result["removed_partials"].append(path)
                result["changed"] = True

        if p["prune"] and os.path.isdir(ex.parent):
            prune(ex, task, result)
    except (OSError, ChrootError) as exc:
        raise TaskFailed(f"rootfs under {ex.parent}: {exc}", **result) from None
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    result["marker"] = marker
    result["free_bytes"] = free_bytes(ex.parent)
    return result
