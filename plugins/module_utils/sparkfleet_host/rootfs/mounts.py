# Copyright: sparkfleet contributors
# Apache-2.0
"""The bind mounts that make an extracted container rootfs usable through chroot, with the GPU, and the ld cache
the NVIDIA container toolkit's hooks would refresh: the chroot_mounts module's work (:func:`apply`).

:func:`unmount` (a busy mount detached lazily) is shared with rootfs_overlay. Stdlib only, Python 3.8+: shipped
to the hosts with the other module_utils.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
import stat
from typing import Any, Callable, Mapping, Optional

from ..contract.textfile import write_atomic
from ..task import Task, TaskFailed
from .chroot import (
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

#: Where mount and umount are looked for beyond PATH.
MOUNT_DIRS = ["/bin", "/usr/bin"]


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise TaskFailed(f"{what} needs root (become: true): mount(2) needs CAP_SYS_ADMIN")


def unmount(target: str, umount: str, task: Task) -> Optional[str]:
    """``umount TARGET``; a busy one is detached lazily (``umount -l``) with a warning. The error when neither
    works, else None."""
    rc, _out, err = task.run([umount, target])
    if rc == 0:
        return None
    rc, _out, err2 = task.run([umount, "-l", target])
    if rc != 0:
        return f"cannot unmount {target}: {err.strip()}; umount -l: {err2.strip()}"
    task.warn(f"{target} was busy ({err.strip()}); detached lazily (umount -l)")
    return None


class Mounter:
    def __init__(self, task: Task) -> None:
        self.task = task
        self.umount = task.which("umount", required=True, opt_dirs=MOUNT_DIRS)
        self.mount = task.which("mount", required=True, opt_dirs=MOUNT_DIRS)

    def unmount_all(self, scope: str) -> list[str]:
        done: list[str] = []
        for _ in range(8):  # stacked mounts on one mount point come off one per pass
            order = unmount_order(read_mountinfo(), scope)
            if not order:
                return done
            need_root(f"unmounting {len(order)} mount(s) under {scope}")
            if self.task.check_mode:
                return order
            for target in order:
                error = unmount(target, self.umount, self.task)
                if error:
                    raise TaskFailed(error, unmounted=done)
                done.append(target)
        left = unmount_order(read_mountinfo(), scope)
        if left:
            raise TaskFailed(f"mounts still under {scope} after unmounting: {left}", unmounted=done)
        return done


def plan(params: Mapping[str, Any], task: Task) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    p = params
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
    ldconfig = task.which("ldconfig", opt_dirs=["/sbin", "/usr/sbin"])
    text = ""
    if ldconfig:
        rc, text, err = task.run([ldconfig, "-p"])
        if rc != 0:
            task.warn(f"ldconfig -p failed: {err.strip()}")
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
        path = task.which(name)
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
            raise TaskFailed(f"bind source {src} does not exist on this host")
        dest = bind.get("dest") or src
        if not dest.startswith("/"):
            raise TaskFailed(f"bind dest {dest} must be an absolute path inside the rootfs")
        add(os.path.realpath(src), dest, bool(bind.get("read_only", True)), "bind")
    return wanted, found


def by_target(mounts: list[MountInfo]) -> dict[str, MountInfo]:
    out: dict[str, MountInfo] = {}
    for m in mounts:
        out[m.target] = m  # the last one mounted on a path is the one seen there
    return out


def ensure_mountpoint(warn: Callable[[str], None], src: str, target: str, under: list[MountInfo]) -> bool:
    """Create ``target`` like ``src`` (dir or empty file) unless it exists; False when it cannot be made
    without writing into another mount (that would write to the host)."""
    if os.path.lexists(target):
        return True
    inside = [m for m in under if is_under(target, m.target)]
    if inside:
        warn(f"not creating {target}: it would be inside the mount {inside[-1].target}")
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


def refresh_ld_cache(params: Mapping[str, Any], task: Task, rootfs: str, driver_libs: list[str]) -> tuple[dict, dict]:
    """The toolkit's enable-cuda-compat and update-ldcache hooks, for the chroot (see the module doc).
    Returns (ldcache, cuda_compat) and writes both to the rootfs's NATIVE_STATE file."""
    p = params
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
    if task.check_mode:
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
            task.warn(f"no ldconfig in {rootfs}: its ld cache is not refreshed (Docker's update-ldcache hook "
                      f"would run the host's)")
        else:
            chroot = task.which("chroot", opt_dirs=["/usr/sbin", "/sbin"]) or "chroot"
            argv = ldconfig_argv(rootfs, ldconfig, os.path.lexists(cache), chroot=chroot)
            before = _read(cache)
            rc, _out, err = task.run(argv)
            if rc != 0:
                raise TaskFailed(f"ldconfig in {rootfs} failed (rc={rc}): {err.strip()[-500:]}",
                                 ldcache=ldcache, cuda_compat=compat)
            ldcache.update(refreshed=True, ldconfig=ldconfig, argv=argv, changed=_read(cache) != before)
            changed = changed or ldcache["changed"]
    state.update(ldcache=ldcache, cuda_compat=compat, compat_conf=compat["conf"])
    old = read_native_state(rootfs)
    if old != state:
        write_atomic(os.path.join(rootfs, NATIVE_STATE), json.dumps(state, indent=2, sort_keys=True))
    ldcache["changed"] = changed
    return ldcache, compat


def restore_ld_cache(scope: str, check_mode: bool = False) -> list[str]:
    """Undo refresh_ld_cache in every rootfs under ``scope`` (itself and its direct subdirectories)."""
    done: list[str] = []
    candidates = [scope] + ([os.path.join(scope, n) for n in sorted(os.listdir(scope))]
                            if os.path.isdir(scope) else [])
    for rootfs in candidates:
        if not os.path.isfile(os.path.join(rootfs, NATIVE_STATE)) or os.path.islink(rootfs):
            continue
        state = read_native_state(rootfs) or {}
        done.append(rootfs)
        if check_mode:
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


def unmount_scope(params: Mapping[str, Any], task: Task, mounter: Mounter, result: dict[str, Any]) -> dict[str, Any]:
    """state=unmounted: the ld caches under the scope put back, then everything mounted under it unmounted."""
    scope = os.path.realpath(params["scope"] or params["rootfs"])
    if scope == "/":
        raise TaskFailed("refusing to unmount everything under /: give the rootfs directory as scope")
    try:
        # First, while an overlay rootfs is still mounted (its files live in the upper layer).
        result["restored"] = restore_ld_cache(scope, task.check_mode)
        result["unmounted"] = mounter.unmount_all(scope)
    except (OSError, ValueError, ChrootError) as exc:
        raise TaskFailed(f"unmounting under {scope}: {exc}", **result) from None
    result["changed"] = bool(result["unmounted"] or result["restored"])
    return result


def apply(params: Mapping[str, Any], task: Task) -> dict[str, Any]:
    """The chroot_mounts module's result: what it mounted into the rootfs (state=mounted) or unmounted."""
    p = params
    mounter = Mounter(task)
    result: dict[str, Any] = dict(changed=False, mounts=[], mounted=[], unmounted=[], driver_libraries=[],
                                  devices=[], missing=[], restored=[])
    if p["state"] == "unmounted":
        return unmount_scope(params, task, mounter, result)

    rootfs = os.path.realpath(p["rootfs"])
    if not os.path.isdir(rootfs) or rootfs == "/":
        raise TaskFailed(f"rootfs {p['rootfs']} is not an extracted rootfs directory")
    need_root(f"bind-mounting into {rootfs}")
    wanted, found = plan(params, task)
    result.update(found)
    try:
        for item in wanted:
            target = resolve_in_root(rootfs, item["dest"])
            item["target"] = target
            result["mounts"].append(item)
            current = by_target(read_mountinfo())
            if target in current:
                if item["read_only"] and not current[target].read_only:
                    if not task.check_mode:
                        rc, _o, err = task.run([mounter.mount, "-o", "remount,bind,ro", target])
                        if rc != 0:
                            raise TaskFailed(f"cannot remount {target} read-only: {err.strip()}", **result)
                    result["mounted"].append(target)
                continue
            if task.check_mode:
                result["mounted"].append(target)
                continue
            if not ensure_mountpoint(task.warn, item["src"], target, mounts_under(read_mountinfo(), rootfs)):
                result["missing"].append(f"mount point {item['dest']} (inside another mount)")
                continue
            rc, _o, err = task.run([mounter.mount, "--bind", item["src"], target])
            if rc != 0:
                raise TaskFailed(f"cannot bind {item['src']} on {target}: {err.strip()}", **result)
            result["mounted"].append(target)
            if item["read_only"]:
                rc, _o, err = task.run([mounter.mount, "-o", "remount,bind,ro", target])
                if rc != 0:
                    raise TaskFailed(f"cannot make {target} read-only: {err.strip()}", **result)
        result["ldcache"], result["cuda_compat"] = refresh_ld_cache(params, task, rootfs, result["driver_libraries"])
    except (OSError, ChrootError) as exc:
        raise TaskFailed(f"mounting into {rootfs}: {exc}", **result) from None
    result["changed"] = bool(result["mounted"]) or result["ldcache"]["changed"]
    return result
