# Copyright: sparkfleet contributors
# Apache-2.0
"""A rootfs for native (chroot) runs made as an overlay of a host directory (the host's own / by default): the
rootfs_overlay module's work (:func:`apply`).

Stdlib only, Python 3.8+: shipped to the hosts with the other module_utils.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
from typing import Any, Mapping

from ..contract.textfile import read_json_object
from ..task import Task, TaskFailed
from .chroot import (
    MARKER,
    MARKER_SCHEMA,
    ChrootError,
    MountInfo,
    is_under,
    mounts_under,
    read_mountinfo,
    unmount_order,
    write_marker,
)
from .mounts import MOUNT_DIRS, unmount

DEFAULT_ENV_KEYS = [
    "PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "TZ", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
]
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Characters the overlay mount options cannot carry unescaped.
_BAD_PATH_CHARS = (",", ":", "\\", "\n", "=")
# File systems that are no part of a host's userland: never listed as hidden mounts.
PSEUDO_FS = {
    "proc", "sysfs", "devtmpfs", "devpts", "tmpfs", "mqueue", "cgroup", "cgroup2", "debugfs", "tracefs",
    "securityfs", "pstore", "bpf", "configfs", "fusectl", "hugetlbfs", "autofs", "binfmt_misc", "efivarfs",
    "nsfs", "rpc_pipefs", "ramfs", "selinuxfs",
}
PSEUDO_DIRS = ("/proc", "/sys", "/dev", "/run")


def default_name(lower: str) -> str:
    lower = os.path.normpath(lower)
    if lower == "/":
        return "overlay-root"
    return "overlay-" + re.sub(r"[^A-Za-z0-9._-]+", "-", lower.strip("/"))[:100]


def filtered_env(environ: dict[str, str], keys: list[str], extra: dict[str, Any]) -> list[str]:
    """``K=V`` strings: the named keys of ``environ`` that exist (in ``keys`` order), then ``extra``."""
    out: dict[str, str] = {}
    for key in keys:
        value = environ.get(key)
        if value is None or "\n" in value or "\x00" in value:
            continue
        out[key] = value
    for key, value in (extra or {}).items():
        out[str(key)] = str(value)
    for key, value in out.items():
        if not _ENV_KEY.match(key):
            raise ValueError(f"invalid environment variable name {key!r}")
        if "\n" in value or "\x00" in value:
            raise ValueError(f"environment variable {key} holds a newline or NUL")
    return [f"{k}={v}" for k, v in out.items()]


def hidden_mounts(mounts: list[MountInfo], lower: str, scope: str) -> list[str]:
    """Mounts below ``lower`` that an overlay of it does not show, pseudo file systems and ``scope`` left out."""
    out = []
    for m in mounts_under(mounts, lower):
        if m.fstype in PSEUDO_FS or any(is_under(m.target, d, include_self=True) for d in PSEUDO_DIRS):
            continue
        if is_under(m.target, scope, include_self=True) or is_under(scope, m.target, include_self=True):
            continue
        entry = f"{m.target} {m.fstype}"
        if entry not in out:
            out.append(entry)
    return out


def overlay_at(mounts: list[MountInfo], target: str) -> MountInfo | None:
    """The mount seen at ``target`` (the last one mounted there), or None."""
    found = None
    for m in mounts:
        if m.target == target:
            found = m
    return found


def option_value(m: MountInfo, key: str, super_options: str = "") -> str | None:
    for opt in list(m.options) + super_options.split(","):
        k, sep, v = opt.partition("=")
        if sep and k == key:
            return v
    return None


def read_super_options(target: str, path: str = "/proc/self/mountinfo") -> str:
    """The super options field of the last mount at ``target`` (overlay's lowerdir/upperdir live there)."""
    found = ""
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) < 7 or "-" not in fields[6:]:
                continue
            sep = fields.index("-", 6)
            tgt = re.sub(r"\\([0-7]{3})", lambda mm: chr(int(mm.group(1), 8)), fields[4])
            if tgt == target:
                found = fields[sep + 3] if len(fields) > sep + 3 else ""
    return found


def marker_body(marker: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in marker.items() if k != "created"}


class Layout:
    """Where the overlay of ``lower`` named ``name`` lives under the work dir ``root``."""

    def __init__(self, root: str, lower: str, name: str) -> None:
        self.root, self.lower = root, lower
        self.parent = os.path.join(root, "rootfs")
        self.merged = os.path.join(self.parent, name)
        self.layers = os.path.join(self.parent, f".{name}.overlay")
        self.upper, self.work = os.path.join(self.layers, "upper"), os.path.join(self.layers, "work")


def unmount_overlay(at: Layout, umount: str, task: Task, result: dict[str, Any]) -> dict[str, Any]:
    """state=unmounted: what is mounted under the overlay, then the overlay itself."""
    for _ in range(8):
        order = unmount_order(read_mountinfo(), at.merged) + \
            ([at.merged] if overlay_at(read_mountinfo(), at.merged) else [])
        if not order:
            break
        if task.check_mode:
            result["unmounted"] = order
            break
        for target in order:
            error = unmount(target, umount, task)
            if error:
                raise TaskFailed(error, **result)
            result["unmounted"].append(target)
    result["changed"] = bool(result["unmounted"])
    return result


def check_layout(at: Layout, given_lower: str, result: dict[str, Any]) -> None:
    if not os.path.isdir(at.lower):
        raise TaskFailed(f"lower {given_lower} is not a directory on this host", **result)
    for path in (at.lower, at.upper, at.work, at.merged):
        bad = [c for c in _BAD_PATH_CHARS if c in path]
        if bad:
            raise TaskFailed(f"{path}: an overlay layer path cannot hold {bad[0]!r}", **result)
    if is_under(at.lower, at.root, include_self=True):
        raise TaskFailed(f"lower {at.lower} lies inside the work dir {at.root}", **result)


def check_mounted(at: Layout, current: MountInfo, reset: bool, result: dict[str, Any]) -> None:
    """The mount already at the overlay's path must be this overlay (and not to be reset)."""
    supers = read_super_options(at.merged)
    if current.fstype != "overlay" or option_value(current, "upperdir", supers) not in (at.upper, None):
        raise TaskFailed(f"{at.merged} already has a {current.fstype} mount that is not this overlay "
                         f"(run playbooks/restore.yml first)", **result)
    got_lower = option_value(current, "lowerdir", supers)
    if got_lower is not None and os.path.normpath(got_lower) != at.lower:
        raise TaskFailed(f"{at.merged} is an overlay of {got_lower}, not of {at.lower} "
                         "(run playbooks/restore.yml first)", **result)
    if reset:
        raise TaskFailed(f"reset: {at.merged} is mounted; unmount it first (playbooks/restore.yml)", **result)


def mount_overlay(at: Layout, mount: str, task: Task, reset: bool, result: dict[str, Any]) -> None:
    if reset and os.path.isdir(at.layers):
        shutil.rmtree(at.layers)
    for d in (at.upper, at.work, at.merged):
        os.makedirs(d, mode=0o755, exist_ok=True)
    os.chmod(at.upper, 0o755)
    rc, _o, err = task.run([mount, "-t", "overlay", "overlay", "-o",
                            f"lowerdir={at.lower},upperdir={at.upper},workdir={at.work}", at.merged])
    if rc != 0:
        raise TaskFailed(f"cannot mount an overlay of {at.lower} on {at.merged}: {err.strip()}", **result)


def apply(params: Mapping[str, Any], task: Task) -> dict[str, Any]:
    """The rootfs_overlay module's result: the overlay mounted (state=mounted) with its marker, or unmounted."""
    p = params
    lower = os.path.realpath(p["lower"])
    name = p["name"] or default_name(lower)
    if not _NAME.match(name):
        raise TaskFailed(f"name {name!r}: use letters, digits, '.', '_' and '-' only")
    at = Layout(os.path.realpath(p["root"]), lower, name)
    result: dict[str, Any] = dict(changed=False, path=at.merged, upper=at.upper, work=at.work, mounted=False,
                                  marker={}, env=[], hidden_mounts=[], unmounted=[])
    if os.geteuid() != 0:
        raise TaskFailed("an overlay rootfs needs root (become: true): mount(2) needs CAP_SYS_ADMIN", **result)
    umount = task.which("umount", required=True, opt_dirs=MOUNT_DIRS)
    mount = task.which("mount", required=True, opt_dirs=MOUNT_DIRS)
    try:
        if p["state"] == "unmounted":
            return unmount_overlay(at, umount, task, result)
        check_layout(at, p["lower"], result)
        try:
            env = filtered_env(dict(os.environ), p["env_keys"], p["env"])
        except ValueError as exc:
            raise TaskFailed(f"env: {exc}", **result) from None
        result["env"] = env
        marker = dict(schema=MARKER_SCHEMA, source="overlay", digest=f"overlay:{lower}", image=f"overlay:{lower}",
                      lower=lower, upper=at.upper, work=at.work, env=env, repo_digests=[], size=0,
                      created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        mounts = read_mountinfo()
        result["hidden_mounts"] = hidden_mounts(mounts, lower, at.root)
        current = overlay_at(mounts, at.merged)
        if current is not None:
            check_mounted(at, current, p["reset"], result)
        else:
            if mounts_under(mounts, at.merged):
                raise TaskFailed(f"mounts left under {at.merged} without the overlay (run playbooks/restore.yml)",
                                 **result)
            result["changed"] = True
            if not task.check_mode:
                mount_overlay(at, mount, task, p["reset"], result)
            result["mounted"] = True
        old = None if task.check_mode and result["mounted"] else read_json_object(os.path.join(at.merged, MARKER))
        if old is not None and marker_body(old) == marker_body(marker):
            marker = old
        else:
            result["changed"] = True
            if not task.check_mode:
                write_marker(at.merged, marker)
        result["marker"] = marker
    except (OSError, ValueError, ChrootError) as exc:
        raise TaskFailed(f"overlay rootfs {at.merged}: {exc}", **result) from None
    return result
