#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: the bind mounts that make an extracted container rootfs usable through chroot, with the GPU."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: chroot_mounts
short_description: Bind-mounts what a chroot into a container rootfs needs, GPU driver included
description:
  - With O(state=mounted), bind-mounts into O(rootfs), in this order - C(/proc), C(/sys) (read-only),
    C(/dev), C(/dev/pts), C(/dev/shm); the NVIDIA device nodes (reached through the C(/dev) bind, or bound one
    by one when O(system=false)); the host driver's user-space libraries that C(ldconfig -p) lists under
    O(driver_library_patterns) for the host's ABI, each at the path the host has it (read-only); the driver
    tools in O(driver_binaries) (symlinks resolved) at C(/usr/bin/NAME) (read-only); C(/etc/resolv.conf)
    (read-only); then O(binds) (models, results, ...).
  - Mounts only what is not mounted yet, and remounts read-only a bind that should be. Mount points are
    resolved inside the rootfs as the chroot will see them (an image's C(/lib -> usr/lib) is followed, an
    absolute symlink never leads out of the rootfs); missing ones are created, never inside another mount.
  - With O(state=unmounted), unmounts everything mounted under O(scope) (default O(rootfs)) as
    C(/proc/self/mountinfo) lists it - deepest and latest first - so mounts left by a crash are found too.
    A busy mount is detached lazily (C(umount -l)) with a warning. Before that, every rootfs under O(scope)
    (O(scope) itself and its direct subdirectories) with a C(.sparkfleet-native-state.json) gets the image's own
    ld cache back and loses the compat entry (RV(restored)). Symlinks ldconfig created in library directories
    (as in a container's writable layer) stay.
  - Then, as the NVIDIA container toolkit does for C(docker run --gpus) (its C(enable-cuda-compat) and
    C(update-ldcache) hooks), makes the CUDA forward-compat choice - when the image has exactly one
    C(/usr/local/cuda/compat/libcuda.so.*.*) whose major version is above the host driver's, its directory
    goes into C(/etc/ld.so.conf.d/00-compat-sparkfleet.conf) - and refreshes the rootfs's ld cache by running
    the image's own C(ldconfig) in the chroot (O(ldconfig), O(cuda_compat)). The image's original
    C(/etc/ld.so.cache) is kept as C(/etc/ld.so.cache.sparkfleet-orig); what was done is returned
    (RV(ldcache), RV(cuda_compat)) and written to C(.sparkfleet-native-state.json) in the rootfs.
  - Mounts are not recorded - their state is what the kernel reports.
  - Finding no NVIDIA device node, driver library or tool is not an error - it is returned in RV(missing)
    (a host without a GPU); the verify probe decides whether that matters.
version_added: "0.1.0"
options:
  rootfs:
    description:
      - The extracted rootfs (the path M(sparkfleet.bench.rootfs_extract) returns). Required with O(state=mounted).
    type: path
  state:
    description:
      - V(mounted) or V(unmounted).
    type: str
    choices: [mounted, unmounted]
    default: mounted
  scope:
    description:
      - With O(state=unmounted), everything mounted under this directory is unmounted (for example the
        C(rootfs/) directory holding every extracted image). Defaults to O(rootfs). Never C(/).
    type: path
  system:
    description:
      - Bind C(/proc), C(/sys), C(/dev), C(/dev/pts), C(/dev/shm).
    type: bool
    default: true
  device_globs:
    description:
      - Shell globs of the NVIDIA device nodes on the host.
    type: list
    elements: str
    default: [/dev/nvidia*, /dev/nvidia-caps/*]
  driver_library_patterns:
    description:
      - Shell globs matched against the sonames C(ldconfig -p) prints; matching libraries for the host's ABI
        are bound. Defaults cover libcuda, libcudadebugger, libnvidia-*, libnvcuvid, libnvoptix.
    type: list
    elements: str
  driver_library_excludes:
    description:
      - Sonames left out even though they match (container toolkit and desktop libraries by default).
    type: list
    elements: str
  driver_binaries:
    description:
      - Driver tools found on the host's C(PATH) and bound at C(/usr/bin/NAME) in the rootfs.
    type: list
    elements: str
    default: [nvidia-smi]
  resolv_conf:
    description:
      - Bind the host's C(/etc/resolv.conf) (its target, when a symlink) read-only.
    type: bool
    default: true
  ldconfig:
    description:
      - After binding, run the image's C(ldconfig) in the chroot to refresh its ld cache (the toolkit's
        C(update-ldcache) hook).
    type: bool
    default: true
  cuda_compat:
    description:
      - Make the CUDA forward-compat choice the toolkit's C(enable-cuda-compat) hook makes (V(false) never puts
        the image's compat libcuda first).
    type: bool
    default: true
  host_driver_version:
    description:
      - The host driver version to compare the compat libcuda with; by default read from the file name of the
        host's libcuda, else from the kernel module.
    type: str
  binds:
    description:
      - Further host directories or files to bind (models, results, ...).
    type: list
    elements: dict
    default: []
    suboptions:
      src:
        description: Host path; it must exist.
        type: path
        required: true
      dest:
        description: Path inside the rootfs; defaults to O(binds[].src).
        type: str
      read_only:
        description: Bind read-only.
        type: bool
        default: true
notes:
  - Needs root. Mounts live in the mount namespace the module runs in.
  - Check mode reports RV(mounted) and RV(unmounted) as they would be, changing nothing.
attributes:
  check_mode:
    support: full
    description: Reports what it would change and changes nothing.
  diff_mode:
    support: none
    description: Shows no diff.
seealso:
  - module: sparkfleet.bench.rootfs_extract
  - module: sparkfleet.bench.chroot_command
author:
  - sparkfleet contributors (@sparkfleet)
"""

EXAMPLES = r"""
- name: Bind what the chroot needs
  become: true
  sparkfleet.bench.chroot_mounts:
    rootfs: "{{ native_rootfs_path }}"
    binds:
      - {src: /srv/models, read_only: true}
      - {src: /var/lib/sparkfleet/results, read_only: false}

- name: Unmount everything under the rootfs directory (restore)
  become: true
  sparkfleet.bench.chroot_mounts:
    state: unmounted
    scope: /var/lib/sparkfleet/rootfs
"""

RETURN = r"""
mounts:
  description: The mounts wanted (O(state=mounted)), each with C(src), C(dest) (inside the rootfs), C(target)
    (host path), C(read_only), C(kind) (system, device, driver, binary, resolv, bind).
  returned: always
  type: list
  elements: dict
mounted:
  description: Host paths mounted (or remounted read-only) by this run.
  returned: always
  type: list
  elements: str
unmounted:
  description: Host paths unmounted by this run.
  returned: always
  type: list
  elements: str
driver_libraries:
  description: Driver libraries found through C(ldconfig -p), host paths.
  returned: always
  type: list
  elements: str
  sample: [/lib/aarch64-linux-gnu/libcuda.so.1, /lib/aarch64-linux-gnu/libnvidia-ml.so.1]
devices:
  description: NVIDIA device nodes found on the host.
  returned: always
  type: list
  elements: str
  sample: [/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm]
ldcache:
  description: The ld cache refresh - C(refreshed), C(ldconfig) (path in the rootfs), C(argv), C(changed)
    (whether the cache differs from before), C(backup) (the image's original cache, or null when it had none).
  returned: when O(state=mounted)
  type: dict
cuda_compat:
  description: The CUDA forward-compat decision - C(enabled), C(reason), C(host_driver_version),
    C(compat_version), C(compat_library), C(compat_dir), C(conf) (the ld.so.conf.d entry written, or null).
  returned: when O(state=mounted)
  type: dict
  sample: {enabled: false, reason: "host driver 580.95.05 is not older than the compat libcuda 575.57.08 (major 580 >= 575)",
           host_driver_version: 580.95.05, compat_version: 575.57.08, compat_library: /usr/local/cuda/compat/libcuda.so.575.57.08,
           compat_dir: null, conf: null}
restored:
  description: With O(state=unmounted), the rootfs directories whose ld cache and compat entry were put back.
  returned: always
  type: list
  elements: str
missing:
  description: What was looked for and not found (no device nodes, no driver libraries, a tool not on PATH).
  returned: always
  type: list
  elements: str
  sample: ["no NVIDIA device nodes (/dev/nvidia*, /dev/nvidia-caps/*)"]
"""

import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.chroot import (  # noqa: E402
    CUDA_COMPAT_CONF,
    DEFAULT_DRIVER_LIB_EXCLUDES,
    DEFAULT_DRIVER_LIB_PATTERNS,
    LD_CACHE,
    LD_CACHE_BACKUP,
    NATIVE_STATE,
    ChrootError,
    MountInfo,
    cuda_compat_decision,
    driver_libraries,
    host_driver_version,
    is_under,
    ldconfig_argv,
    ldconfig_in_root,
    mounts_under,
    read_mountinfo,
    read_native_state,
    resolve_in_root,
    unmount_order,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.textfile import write_atomic  # noqa: E402


def need_root(module: AnsibleModule, what: str) -> None:
    if os.geteuid() != 0:
        module.fail_json(msg=f"{what} needs root (become: true): mount(2) needs CAP_SYS_ADMIN")


class Mounter:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.umount = module.get_bin_path("umount", required=True, opt_dirs=["/bin", "/usr/bin"])
        self.mount = module.get_bin_path("mount", required=True, opt_dirs=["/bin", "/usr/bin"])

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        return self.module.run_command(argv, environ_update={"LC_ALL": "C"})

    def unmount_all(self, scope: str) -> list[str]:
        done: list[str] = []
        for _ in range(8):  # stacked mounts on one mount point come off one per pass
            order = unmount_order(read_mountinfo(), scope)
            if not order:
                return done
            need_root(self.module, f"unmounting {len(order)} mount(s) under {scope}")
            if self.module.check_mode:
                return order
            for target in order:
                rc, _out, err = self.run([self.umount, target])
                if rc != 0:
                    rc, _out, err2 = self.run([self.umount, "-l", target])
                    if rc != 0:
                        self.module.fail_json(msg=f"cannot unmount {target}: {err.strip()}; umount -l: {err2.strip()}",
                                              unmounted=done)
                    self.module.warn(f"{target} was busy ({err.strip()}); detached lazily (umount -l)")
                done.append(target)
        left = unmount_order(read_mountinfo(), scope)
        if left:
            self.module.fail_json(msg=f"mounts still under {scope} after unmounting: {left}", unmounted=done)
        return done


def plan(module: AnsibleModule, rootfs: str) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    p = module.params
    wanted: list[dict[str, Any]] = []
    found: dict[str, list[str]] = {"driver_libraries": [], "devices": [], "missing": []}

    def add(src: str, dest: str, read_only: bool, kind: str) -> None:
        wanted.append(dict(src=src, dest=dest, read_only=read_only, kind=kind))

    if p["system"]:
        add("/proc", "/proc", False, "system")
        add("/sys", "/sys", True, "system")
        add("/dev", "/dev", False, "system")
        for sub in ("/dev/pts", "/dev/shm"):
            if os.path.isdir(sub):
                add(sub, sub, False, "system")

    devices = sorted({d for g in p["device_globs"] for d in glob.glob(g)
                      if stat.S_ISCHR(os.stat(d).st_mode)})
    found["devices"] = devices
    if not devices:
        found["missing"].append(f"no NVIDIA device nodes ({', '.join(p['device_globs'])})")
    if not p["system"]:
        for dev in devices:
            add(dev, dev, False, "device")

    patterns = p["driver_library_patterns"] or list(DEFAULT_DRIVER_LIB_PATTERNS)
    excludes = p["driver_library_excludes"] if p["driver_library_excludes"] is not None \
        else list(DEFAULT_DRIVER_LIB_EXCLUDES)
    ldconfig = module.get_bin_path("ldconfig", opt_dirs=["/sbin", "/usr/sbin"])
    text = ""
    if ldconfig:
        rc, text, err = module.run_command([ldconfig, "-p"], environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.warn(f"ldconfig -p failed: {err.strip()}")
            text = ""
    else:
        found["missing"].append("ldconfig not found: driver libraries not looked up")
    libs = [e for e in driver_libraries(text, platform.machine(), patterns, excludes) if os.path.exists(e.path)]
    found["driver_libraries"] = [e.path for e in libs]
    if ldconfig and not libs:
        found["missing"].append(f"no NVIDIA driver libraries in ldconfig -p (patterns {', '.join(patterns)})")
    for entry in libs:
        add(os.path.realpath(entry.path), entry.path, True, "driver")

    for name in p["driver_binaries"]:
        path = module.get_bin_path(name)
        if not path:
            found["missing"].append(f"{name} not found on PATH")
            continue
        add(os.path.realpath(path), f"/usr/bin/{os.path.basename(name)}", True, "binary")

    if p["resolv_conf"]:
        if os.path.exists("/etc/resolv.conf"):
            add(os.path.realpath("/etc/resolv.conf"), "/etc/resolv.conf", True, "resolv")
        else:
            found["missing"].append("/etc/resolv.conf")

    for bind in p["binds"]:
        src = bind["src"]
        if not os.path.exists(src):
            module.fail_json(msg=f"bind source {src} does not exist on this host")
        dest = bind.get("dest") or src
        if not dest.startswith("/"):
            module.fail_json(msg=f"bind dest {dest} must be an absolute path inside the rootfs")
        add(os.path.realpath(src), dest, bool(bind.get("read_only", True)), "bind")
    return wanted, found


def by_target(mounts: list[MountInfo]) -> dict[str, MountInfo]:
    out: dict[str, MountInfo] = {}
    for m in mounts:
        out[m.target] = m  # the last one mounted on a path is the one seen there
    return out


def ensure_mountpoint(module: AnsibleModule, src: str, target: str, under: list[MountInfo]) -> bool:
    """Create ``target`` like ``src`` (dir or empty file) unless it exists; False when it cannot be made
    without writing into another mount (that would write to the host)."""
    if os.path.lexists(target):
        return True
    inside = [m for m in under if is_under(target, m.target)]
    if inside:
        module.warn(f"not creating {target}: it would be inside the mount {inside[-1].target}")
        return False
    if os.path.isdir(src):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        with open(target, "a"):
            pass
        os.chmod(target, 0o644)
    return True


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def refresh_ld_cache(module: AnsibleModule, rootfs: str, driver_libs: list[str]) -> tuple[dict, dict]:
    """The toolkit's enable-cuda-compat and update-ldcache hooks, for the chroot (see the module doc).
    Returns (ldcache, cuda_compat) and writes both to the rootfs's NATIVE_STATE file."""
    p = module.params
    version = p["host_driver_version"] or host_driver_version(driver_libs)
    compat = cuda_compat_decision(rootfs, version) if p["cuda_compat"] else dict(
        enabled=False, reason="cuda_compat is off", host_driver_version=version, compat_version=None,
        compat_library=None, compat_dir=None)
    conf = resolve_in_root(rootfs, CUDA_COMPAT_CONF)
    compat["conf"] = CUDA_COMPAT_CONF if compat["enabled"] else None
    ldcache: dict[str, Any] = dict(refreshed=False, ldconfig=None, argv=None, changed=False, backup=None)
    state = read_native_state(rootfs) or {}
    cache = resolve_in_root(rootfs, LD_CACHE)
    backup = resolve_in_root(rootfs, LD_CACHE_BACKUP)
    if module.check_mode:
        return ldcache, compat
    changed = False
    if "had_cache" not in state:  # the first refresh: keep the image's own cache for undo
        state["had_cache"] = os.path.lexists(cache)
        if state["had_cache"] and not os.path.lexists(backup):
            shutil.copy2(cache, backup)
    ldcache["backup"] = LD_CACHE_BACKUP if state["had_cache"] else None
    if compat["enabled"]:
        text = compat["compat_dir"] + "\n"
        if _read(conf) != text.encode():
            os.makedirs(os.path.dirname(conf), mode=0o755, exist_ok=True)
            with open(conf, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(conf, 0o644)
            changed = True
    elif os.path.lexists(conf):  # decided otherwise since (another driver): the entry goes
        os.unlink(conf)
        changed = True
    if p["ldconfig"]:
        ldconfig = ldconfig_in_root(rootfs)
        if ldconfig is None:
            module.warn(f"no ldconfig in {rootfs}: its ld cache is not refreshed (Docker's update-ldcache hook "
                        f"would run the host's)")
        else:
            chroot = module.get_bin_path("chroot", opt_dirs=["/usr/sbin", "/sbin"]) or "chroot"
            argv = ldconfig_argv(rootfs, ldconfig, os.path.lexists(cache), chroot=chroot)
            before = _read(cache)
            rc, _out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
            if rc != 0:
                module.fail_json(msg=f"ldconfig in {rootfs} failed (rc={rc}): {err.strip()[-500:]}",
                                 ldcache=ldcache, cuda_compat=compat)
            ldcache.update(refreshed=True, ldconfig=ldconfig, argv=argv, changed=_read(cache) != before)
            changed = changed or ldcache["changed"]
    state.update(ldcache=ldcache, cuda_compat=compat, compat_conf=compat["conf"])
    old = read_native_state(rootfs)
    if old != state:
        write_atomic(os.path.join(rootfs, NATIVE_STATE), json.dumps(state, indent=2, sort_keys=True))
    ldcache["changed"] = changed
    return ldcache, compat


def restore_ld_cache(module: AnsibleModule, scope: str) -> list[str]:
    """Undo refresh_ld_cache in every rootfs under ``scope`` (itself and its direct subdirectories)."""
    done: list[str] = []
    candidates = [scope] + ([os.path.join(scope, n) for n in sorted(os.listdir(scope))]
                            if os.path.isdir(scope) else [])
    for rootfs in candidates:
        if not os.path.isfile(os.path.join(rootfs, NATIVE_STATE)) or os.path.islink(rootfs):
            continue
        state = read_native_state(rootfs) or {}
        done.append(rootfs)
        if module.check_mode:
            continue
        conf = resolve_in_root(rootfs, CUDA_COMPAT_CONF)
        if os.path.lexists(conf):
            os.unlink(conf)
        cache, backup = resolve_in_root(rootfs, LD_CACHE), resolve_in_root(rootfs, LD_CACHE_BACKUP)
        if os.path.lexists(backup):
            os.replace(backup, cache)
        elif state.get("had_cache") is False and os.path.lexists(cache):
            os.unlink(cache)  # the image had none: the one ldconfig made goes
        os.unlink(os.path.join(rootfs, NATIVE_STATE))
    return done


def run_module() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            rootfs=dict(type="path"),
            state=dict(type="str", default="mounted", choices=["mounted", "unmounted"]),
            scope=dict(type="path"),
            system=dict(type="bool", default=True),
            device_globs=dict(type="list", elements="str", default=["/dev/nvidia*", "/dev/nvidia-caps/*"]),
            driver_library_patterns=dict(type="list", elements="str"),
            driver_library_excludes=dict(type="list", elements="str"),
            driver_binaries=dict(type="list", elements="str", default=["nvidia-smi"]),
            resolv_conf=dict(type="bool", default=True),
            ldconfig=dict(type="bool", default=True),
            cuda_compat=dict(type="bool", default=True),
            host_driver_version=dict(type="str"),
            binds=dict(type="list", elements="dict", default=[], options=dict(
                src=dict(type="path", required=True),
                dest=dict(type="str"),
                read_only=dict(type="bool", default=True),
            )),
        ),
        required_if=[("state", "mounted", ("rootfs",))],
        required_one_of=[("rootfs", "scope")],
        supports_check_mode=True,
    )
    p = module.params
    mounter = Mounter(module)
    result: dict[str, Any] = dict(changed=False, mounts=[], mounted=[], unmounted=[], driver_libraries=[],
                                  devices=[], missing=[], restored=[])

    if p["state"] == "unmounted":
        scope = os.path.realpath(p["scope"] or p["rootfs"])
        if scope == "/":
            module.fail_json(msg="refusing to unmount everything under /: give the rootfs directory as scope")
        try:
            # First, while an overlay rootfs is still mounted (its files live in the upper layer).
            result["restored"] = restore_ld_cache(module, scope)
            result["unmounted"] = mounter.unmount_all(scope)
        except (OSError, ValueError, ChrootError) as exc:
            module.fail_json(msg=f"unmounting under {scope}: {exc}", **result)
        result["changed"] = bool(result["unmounted"] or result["restored"])
        module.exit_json(**result)

    rootfs = os.path.realpath(p["rootfs"])
    if not os.path.isdir(rootfs) or rootfs == "/":
        module.fail_json(msg=f"rootfs {p['rootfs']} is not an extracted rootfs directory")
    need_root(module, f"bind-mounting into {rootfs}")
    wanted, found = plan(module, rootfs)
    result.update(found)
    try:
        for item in wanted:
            target = resolve_in_root(rootfs, item["dest"])
            item["target"] = target
            result["mounts"].append(item)
            current = by_target(read_mountinfo())
            if target in current:
                if item["read_only"] and not current[target].read_only:
                    if not module.check_mode:
                        rc, _o, err = mounter.run([mounter.mount, "-o", "remount,bind,ro", target])
                        if rc != 0:
                            module.fail_json(msg=f"cannot remount {target} read-only: {err.strip()}", **result)
                    result["mounted"].append(target)
                continue
            if module.check_mode:
                result["mounted"].append(target)
                continue
            if not ensure_mountpoint(module, item["src"], target, mounts_under(read_mountinfo(), rootfs)):
                result["missing"].append(f"mount point {item['dest']} (inside another mount)")
                continue
            rc, _o, err = mounter.run([mounter.mount, "--bind", item["src"], target])
            if rc != 0:
                module.fail_json(msg=f"cannot bind {item['src']} on {target}: {err.strip()}", **result)
            result["mounted"].append(target)
            if item["read_only"]:
                rc, _o, err = mounter.run([mounter.mount, "-o", "remount,bind,ro", target])
                if rc != 0:
                    module.fail_json(msg=f"cannot make {target} read-only: {err.strip()}", **result)
        result["ldcache"], result["cuda_compat"] = refresh_ld_cache(module, rootfs, result["driver_libraries"])
    except (OSError, ChrootError) as exc:
        module.fail_json(msg=f"mounting into {rootfs}: {exc}", **result)
    result["changed"] = bool(result["mounted"]) or result["ldcache"]["changed"]
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
