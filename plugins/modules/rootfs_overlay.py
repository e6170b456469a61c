#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: a rootfs for native (chroot) runs made as an overlay of a host directory (the host's own /)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rootfs_overlay
short_description: Makes a chroot rootfs as an overlayfs of a host directory, for hosts where no image can be pulled
description:
  - With O(state=mounted), mounts C(overlay) with C(lowerdir=)O(lower) (default the host's C(/)),
    C(upperdir) and C(workdir) under C(ROOT/rootfs/.NAME.overlay/) at C(ROOT/rootfs/NAME) (see RV(path)), so
    that a chroot into it sees the host's own userland (Python, CUDA toolkit, site-packages) while everything it
    writes lands in the upper layer, never on the host.
  - An overlay takes only the file system of O(lower) itself - file systems mounted below it (C(/proc), C(/dev),
    a separately mounted driver directory such as C(/usr/local/nvidia)) show up as empty directories. The
    M(sparkfleet.bench.chroot_mounts) module brings in what a GPU program needs (device nodes, the driver libraries C(ldconfig -p)
    lists); RV(hidden_mounts) lists the other ones so they can be bound when a workload needs them.
  - Writes the rootfs marker C(.sparkfleet-rootfs.json) into the merged tree (so, into the upper layer) -
    C(source=overlay), the lower directory, and as C(env) the launch environment - the keys O(env_keys) of this
    module's own environment (C(PATH), C(LD_LIBRARY_PATH), ...) plus O(env) - which the chroot launcher
    (C(sparkfleet_chroot.load_image_env)) uses in place of an image's C(Config.Env).
  - Idempotent - an overlay already mounted there with the same layers is left alone, and the marker is rewritten
    only when its content changes. O(reset) discards the upper layer first (only when nothing is mounted).
  - With O(state=unmounted), unmounts everything under RV(path), then the overlay itself (deepest first).
    Usually the native_rootfs role's undo does this for every rootfs under C(ROOT/rootfs).
version_added: "0.1.0"
options:
  root:
    description:
      - Directory under which C(rootfs/) is kept (the work directory).
    type: path
    required: true
  lower:
    description:
      - The host directory the rootfs shows, read-only (the overlay's C(lowerdir)).
    type: path
    default: /
  name:
    description:
      - Directory name of the rootfs under C(ROOT/rootfs/). Default C(overlay-root) for C(/), else
        C(overlay-) and the lower path with C(/) turned into C(-).
    type: str
  env_keys:
    description:
      - Variables of this module's environment that the chroot keeps (names; a missing one is left out).
        Values holding a newline or NUL are dropped.
    type: list
    elements: str
    default: [PATH, LD_LIBRARY_PATH, LANG, LC_ALL, TZ, CUDA_HOME, CUDA_PATH, CUDA_VISIBLE_DEVICES,
              NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, NCCL_NVLS_ENABLE,
              TORCH_SYMM_MEM_DISABLE_MULTICAST, NVSHMEM_DISABLE_NVLS]
  env:
    description:
      - Further variables for the chroot's environment (override those taken from O(env_keys)).
    type: dict
    default: {}
  reset:
    description:
      - Empty the upper layer before mounting (a fresh rootfs). Refused while the overlay is mounted.
    type: bool
    default: false
  state:
    description:
      - V(mounted) or V(unmounted).
    type: str
    choices: [mounted, unmounted]
    default: mounted
notes:
  - Needs root (mount(2)). The overlay lives in the mount namespace the module runs in.
  - The upper and work directories may lie inside O(lower) (the work dir on the host's root file system); the
    kernel then refuses lookups of them through the overlay (ELOOP), which nothing in the chroot needs.
  - Check mode reports what would be mounted or written.
attributes:
  check_mode:
    support: full
    description: Reports what it would change and changes nothing.
  diff_mode:
    support: none
    description: Shows no diff.
seealso:
  - module: sparkfleet.bench.rootfs_extract
  - module: sparkfleet.bench.chroot_mounts
  - module: sparkfleet.bench.chroot_command
author:
  - sparkfleet contributors (@sparkfleet)
"""

EXAMPLES = r"""
- name: The host's own root as the native rootfs
  become: true
  sparkfleet.bench.rootfs_overlay:
    root: /var/lib/sparkfleet
    lower: /
  register: native_rootfs_overlay

- name: Unmount it (and whatever is bound inside)
  become: true
  sparkfleet.bench.rootfs_overlay:
    root: /var/lib/sparkfleet
    state: unmounted
"""

RETURN = r"""
path:
  description: The merged tree, the rootfs to chroot into.
  returned: always
  type: str
  sample: /var/lib/sparkfleet/rootfs/overlay-root
upper:
  description: The overlay's upper directory (what the chroot wrote).
  returned: always
  type: str
work:
  description: The overlay's work directory.
  returned: always
  type: str
mounted:
  description: Whether this run mounted the overlay (V(false) when it already was).
  returned: always
  type: bool
marker:
  description: The rootfs marker (in check mode, what it would hold).
  returned: always
  type: dict
  sample: {schema: 1, source: overlay, digest: "overlay:/", image: "overlay:/", lower: /,
           env: ["PATH=/usr/local/bin:/usr/bin:/bin"]}
env:
  description: The chroot's environment as C(K=V) strings (the marker's C(env)).
  returned: always
  type: list
  elements: str
hidden_mounts:
  description: File systems mounted below O(lower) that the overlay does not show (pseudo file systems and the
    work directory left out), as C(target fstype).
  returned: always
  type: list
  elements: str
  sample: ["/usr/local/nvidia ext4"]
unmounted:
  description: Paths unmounted (O(state=unmounted)).
  returned: always
  type: list
  elements: str
"""

import datetime  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.chroot import (  # noqa: E402
    MARKER,
    MARKER_SCHEMA,
    ChrootError,
    MountInfo,
    is_under,
    mounts_under,
    read_mountinfo,
    unmount_order,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.textfile import write_atomic  # noqa: E402

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


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_marker(path: str, marker: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(marker, indent=2, sort_keys=True) + "\n")


def run_module() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            lower=dict(type="path", default="/"),
            name=dict(type="str"),
            env_keys=dict(type="list", elements="str", default=list(DEFAULT_ENV_KEYS), no_log=False),
            env=dict(type="dict", default={}),
            reset=dict(type="bool", default=False),
            state=dict(type="str", default="mounted", choices=["mounted", "unmounted"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    root = os.path.realpath(p["root"])
    lower = os.path.realpath(p["lower"])
    name = p["name"] or default_name(lower)
    if not _NAME.match(name):
        module.fail_json(msg=f"name {name!r}: use letters, digits, '.', '_' and '-' only")
    parent = os.path.join(root, "rootfs")
    merged = os.path.join(parent, name)
    layers = os.path.join(parent, f".{name}.overlay")
    upper, work = os.path.join(layers, "upper"), os.path.join(layers, "work")
    result: dict[str, Any] = dict(changed=False, path=merged, upper=upper, work=work, mounted=False, marker={},
                                  env=[], hidden_mounts=[], unmounted=[])
    if os.geteuid() != 0:
        module.fail_json(msg="an overlay rootfs needs root (become: true): mount(2) needs CAP_SYS_ADMIN", **result)
    umount = module.get_bin_path("umount", required=True, opt_dirs=["/bin", "/usr/bin"])
    mount = module.get_bin_path("mount", required=True, opt_dirs=["/bin", "/usr/bin"])

    def run(argv: list[str]) -> tuple[int, str, str]:
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    try:
        if p["state"] == "unmounted":
            for _ in range(8):
                order = unmount_order(read_mountinfo(), merged) + \
                    ([merged] if overlay_at(read_mountinfo(), merged) else [])
                if not order:
                    break
                if module.check_mode:
                    result["unmounted"] = order
                    break
                for target in order:
                    rc, _o, err = run([umount, target])
                    if rc != 0:
                        rc, _o, err2 = run([umount, "-l", target])
                        if rc != 0:
                            module.fail_json(msg=f"cannot unmount {target}: {err.strip()}; umount -l: {err2.strip()}",
                                             **result)
                        module.warn(f"{target} was busy ({err.strip()}); detached lazily (umount -l)")
                    result["unmounted"].append(target)
            result["changed"] = bool(result["unmounted"])
            module.exit_json(**result)

        if not os.path.isdir(lower):
            module.fail_json(msg=f"lower {p['lower']} is not a directory on this host", **result)
        for path in (lower, upper, work, merged):
            bad = [c for c in _BAD_PATH_CHARS if c in path]
            if bad:
                module.fail_json(msg=f"{path}: an overlay layer path cannot hold {bad[0]!r}", **result)
        if is_under(lower, root, include_self=True):
            module.fail_json(msg=f"lower {lower} lies inside the work dir {root}", **result)
        try:
            env = filtered_env(dict(os.environ), p["env_keys"], p["env"])
        except ValueError as exc:
            module.fail_json(msg=f"env: {exc}", **result)
        result["env"] = env
        marker = dict(schema=MARKER_SCHEMA, source="overlay", digest=f"overlay:{lower}", image=f"overlay:{lower}",
                      lower=lower, upper=upper, work=work, env=env, repo_digests=[], size=0,
                      created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        mounts = read_mountinfo()
        result["hidden_mounts"] = hidden_mounts(mounts, lower, root)
        current = overlay_at(mounts, merged)
        if current is not None:
            supers = read_super_options(merged)
            if current.fstype != "overlay" or option_value(current, "upperdir", supers) not in (upper, None):
                module.fail_json(msg=f"{merged} already has a {current.fstype} mount that is not this overlay "
                                     f"(run playbooks/restore.yml first)", **result)
            got_lower = option_value(current, "lowerdir", supers)
            if got_lower is not None and os.path.normpath(got_lower) != lower:
                module.fail_json(msg=f"{merged} is an overlay of {got_lower}, not of {lower} "
                                     "(run playbooks/restore.yml first)", **result)
            if p["reset"]:
                module.fail_json(msg=f"reset: {merged} is mounted; unmount it first (playbooks/restore.yml)", **result)
        else:
            if mounts_under(mounts, merged):
                module.fail_json(msg=f"mounts left under {merged} without the overlay (run playbooks/restore.yml)",
                                 **result)
            result["changed"] = True
            if not module.check_mode:
                if p["reset"] and os.path.isdir(layers):
                    shutil.rmtree(layers)
                for d in (upper, work, merged):
                    os.makedirs(d, mode=0o755, exist_ok=True)
                os.chmod(upper, 0o755)
                rc, _o, err = run([mount, "-t", "overlay", "overlay", "-o",
                                   f"lowerdir={lower},upperdir={upper},workdir={work}", merged])
                if rc != 0:
                    module.fail_json(msg=f"cannot mount an overlay of {lower} on {merged}: {err.strip()}", **result)
            result["mounted"] = True
        marker_path = os.path.join(merged, MARKER)
        old = None if module.check_mode and result["mounted"] else read_json(marker_path)
        if old is not None and marker_body(old) == marker_body(marker):
            marker = old
        else:
            result["changed"] = True
            if not module.check_mode:
                write_marker(marker_path, marker)
        result["marker"] = marker
    except (OSError, ValueError, ChrootError) as exc:
        module.fail_json(msg=f"overlay rootfs {merged}: {exc}", **result)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
