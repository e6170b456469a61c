"""The chroot's ld cache refresh and CUDA forward-compat choice (chroot_mounts; rootfs/mounts.py), made as the
NVIDIA container toolkit makes them for `docker run --gpus` (nvidia-container-toolkit @90988f7a,
cmd/nvidia-cdi-hook/cudacompat/cudacompat.go and cmd/nvidia-cdi-hook/update-ldcache/update-ldcache.go)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _ansible_modules import host_util, load_module

sc = host_util("chroot")
mounts = host_util("mounts")
task = host_util("task")


def _rootfs(tmp_path: Path, compat: list[str] | None = ("libcuda.so.590.44.01",), cache: bool = True) -> Path:
    root = tmp_path / "rootfs"
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    if cache:
        (root / "etc/ld.so.cache").write_bytes(b"image cache")
    (root / "sbin").mkdir()
    (root / "sbin/ldconfig").write_text("#!/bin/sh\n")
    (root / "sbin/ldconfig").chmod(0o755)
    (root / "sbin/ldconfig.real").write_text("")
    (root / "sbin/ldconfig.real").chmod(0o755)
    if compat is not None:
        (root / "usr/local/cuda-13.0/compat").mkdir(parents=True)
        (root / "usr/local/cuda").symlink_to("cuda-13.0")
        for name in compat:
            (root / "usr/local/cuda-13.0/compat" / name).write_bytes(b"\x7fELF")
        (root / "usr/local/cuda-13.0/compat/libcuda.so.1").symlink_to(compat[0] if compat else "x")
    return root


@pytest.mark.parametrize(("host", "compat", "cache", "enabled", "why"), [
    ("580.95.05", ["libcuda.so.590.44.01"], True, True, "newer than the host driver"),
    ("580.95.05", ["libcuda.so.575.57.08"], True, False, "not older"),
    ("580.95.05", ["libcuda.so.580.99.01"], True, False, "not older"),  # the major decides, as in the toolkit
    ("580.95.05", ["libcuda.so.590.44.01", "libcuda.so.595.1.2"], True, False, "2 compat libcuda"),
    ("580.95.05", [], True, False, "no libcuda.so"),
    ("580.95.05", None, True, False, "no /usr/local/cuda/compat"),
    ("580.95.05", ["libcuda.so.590.44.01"], False, False, "no /etc/ld.so.cache"),
    (None, ["libcuda.so.590.44.01"], True, False, "host driver version unknown"),
])
def test_compat_decision_is_the_toolkits(tmp_path, host, compat, cache, enabled, why):
    root = _rootfs(tmp_path, compat, cache)
    decision = sc.cuda_compat_decision(str(root), host)
    assert decision["enabled"] is enabled
    assert why in decision["reason"]
    if enabled:  # the real directory, as seen inside the rootfs (the toolkit strips the container root)
        assert decision["compat_dir"] == "/usr/local/cuda-13.0/compat"
        assert decision["compat_version"] == "590.44.01"


def test_host_driver_version_from_libcuda_file_name_then_kernel_module(tmp_path):
    lib = tmp_path / "libcuda.so.580.95.05"
    lib.write_bytes(b"")
    (tmp_path / "libcuda.so.1").symlink_to(lib.name)
    assert sc.host_driver_version([str(tmp_path / "libcuda.so.1")], version_files=()) == "580.95.05"
    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  "
                    "(dvs-builder@U22-I3-AF03-09-1)  Wed Sep 24 23:51:37 UTC 2025\nGCC version:  gcc version 13.3.0\n")
    assert sc.host_driver_version([], version_files=[str(tmp_path / "absent"), str(proc)]) == "580.95.05"
    assert sc.host_driver_version([], version_files=[str(tmp_path / "absent")]) is None


def test_ldconfig_argv_is_the_hooks_run_inside_the_rootfs(tmp_path):
    root = _rootfs(tmp_path)
    assert sc.ldconfig_in_root(str(root)) == "/sbin/ldconfig.real"  # Ubuntu's wrapper skipped, as the toolkit does
    assert sc.ldconfig_argv("/r", "/sbin/ldconfig.real", True) == [
        "chroot", "/r", "/sbin/ldconfig.real", "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache"]
    assert sc.ldconfig_argv("/r", "/sbin/ldconfig", False)[-1] == "-N"


class FakeModule:
    """What refresh_ld_cache uses of AnsibleModule (through task.of); ldconfig is mocked (it rewrites the cache)."""

    def __init__(self, **params):
        self.params = {"ldconfig": True, "cuda_compat": True, "host_driver_version": None, **params}
        self.check_mode = False
        self.calls: list[list[str]] = []
        self.warnings: list[str] = []

    def get_bin_path(self, name, opt_dirs=None):
        return f"/usr/sbin/{name}"

    def run_command(self, argv, environ_update=None):
        self.calls.append(argv)
        root = Path(argv[1])
        conf = root / "etc/ld.so.conf.d/00-compat-sparkfleet.conf"
        (root / "etc/ld.so.cache").write_text("refreshed" + (" compat:" + conf.read_text() if conf.exists() else ""))
        return 0, "", ""

    def warn(self, msg):
        self.warnings.append(msg)

    def fail_json(self, **kw):
        raise AssertionError(kw)


def test_refresh_then_restore_puts_the_image_back(tmp_path):
    root = _rootfs(tmp_path)
    module = FakeModule(host_driver_version="580.95.05")
    ldcache, compat = mounts.refresh_ld_cache(module.params, task.of(module), str(root), [])
    assert compat["enabled"] and compat["conf"] == sc.CUDA_COMPAT_CONF
    assert (root / "etc/ld.so.conf.d/00-compat-sparkfleet.conf").read_text() == "/usr/local/cuda-13.0/compat\n"
    assert module.calls == [["/usr/sbin/chroot", str(root), "/sbin/ldconfig.real", "-f", "/etc/ld.so.conf",
                             "-C", "/etc/ld.so.cache"]]
    assert ldcache["refreshed"] and ldcache["changed"] and ldcache["backup"] == sc.LD_CACHE_BACKUP
    assert (root / "etc/ld.so.cache.sparkfleet-orig").read_bytes() == b"image cache"
    state = json.loads((root / sc.NATIVE_STATE).read_text())
    assert state["cuda_compat"]["enabled"] and state["had_cache"] is True
    assert sc.read_native_state(str(root))["ldcache"]["refreshed"]

    again, _ = mounts.refresh_ld_cache(module.params, task.of(module), str(root), [])
    assert not again["changed"]  # idempotent: same entry, same cache
    assert (root / "etc/ld.so.cache.sparkfleet-orig").read_bytes() == b"image cache"  # the first backup is kept

    # A newer host driver since: the compat entry goes.
    newer = FakeModule(host_driver_version="595.10.01")
    _, compat = mounts.refresh_ld_cache(newer.params, task.of(newer), str(root), [])
    assert not compat["enabled"] and not (root / "etc/ld.so.conf.d/00-compat-sparkfleet.conf").exists()

    assert mounts.restore_ld_cache(str(tmp_path), module.check_mode) == [str(root)]
    assert (root / "etc/ld.so.cache").read_bytes() == b"image cache"
    assert not (root / "etc/ld.so.cache.sparkfleet-orig").exists() and not (root / sc.NATIVE_STATE).exists()
    assert mounts.restore_ld_cache(str(tmp_path), module.check_mode) == []


def test_restore_removes_a_cache_the_image_never_had_and_off_switches(tmp_path):
    root = _rootfs(tmp_path, cache=False)
    module = FakeModule(host_driver_version="580.95.05")
    ldcache, compat = mounts.refresh_ld_cache(module.params, task.of(module), str(root), [])
    assert module.calls[0][-1] == "-N" and ldcache["backup"] is None
    assert not compat["enabled"]  # no ld cache in the image: the toolkit leaves compat off too
    assert mounts.restore_ld_cache(str(root), module.check_mode) == [str(root)]
    assert not (root / "etc/ld.so.cache").exists()

    off = FakeModule(ldconfig=False, cuda_compat=False, host_driver_version="580.95.05")
    root2 = _rootfs(tmp_path / "b")
    ldcache, compat = mounts.refresh_ld_cache(off.params, task.of(off), str(root2), [])
    assert off.calls == [] and not ldcache["refreshed"] and compat["reason"] == "cuda_compat is off"


def test_rootfs_extract_upgrades_an_old_marker_in_place(monkeypatch, tmp_path):
    """A rootfs extracted before the marker recorded the image config is not extracted again: its files are the
    image's; only the marker gets the entrypoint, Cmd, WorkingDir and User (schema 2)."""
    from _ansible_modules import run_module

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    digest = "sha256:" + "b" * 64
    rootfs = tmp_path / "rootfs" / digest.replace(":", "-")
    rootfs.mkdir(parents=True)
    old = {"schema": 1, "digest": digest, "image": "img", "env": ["A=1"], "size": 1, "created": "2026-01-01T00:00:00Z"}
    (rootfs / sc.MARKER).write_text(json.dumps(old))
    args = {"root": str(tmp_path), "digest": digest, "image": "img", "size": 1, "env": ["A=1"],
            "entrypoint": ["/opt/nvidia/nvidia_entrypoint.sh"], "cmd": [], "working_dir": "/workspace", "user": "",
            "docker": "/nonexistent/docker"}
    res = run_module(load_module("rootfs_extract"), args, check_mode=True)
    assert res["marker_upgraded"] and res["changed"] and json.loads((rootfs / sc.MARKER).read_text()) == old
    res = run_module(load_module("rootfs_extract"), args)
    assert not res.get("failed"), res
    assert res["marker_upgraded"] and res["changed"] and not res["extracted"]
    marker = json.loads((rootfs / sc.MARKER).read_text())
    assert marker["schema"] == 2 and marker["entrypoint"] == ["/opt/nvidia/nvidia_entrypoint.sh"]
    assert marker["working_dir"] == "/workspace" and marker["created"] == old["created"]
    again = run_module(load_module("rootfs_extract"), args)
    assert not again["changed"] and not again["marker_upgraded"]
