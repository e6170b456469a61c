"""The chroot launcher and the mount helpers (module_utils level), and the modules' refusals without root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _ansible_modules import host_util, load_module, run_module

sc = host_util("chroot")

IMAGE_ENV = ["PATH=/usr/local/cuda/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=/usr/local/cuda/lib64",
             "CUDA_HOME=/usr/local/cuda", "OPTS=a=b c"]


def test_argv_layout():
    cmd = sc.chroot_argv("/r/rootfs", IMAGE_ENV, ["trtllm-bench", "--model", "a b"])
    assert cmd == ["chroot", "/r/rootfs", "/usr/bin/env", "-i", "--", "HOME=/root",
                   "PATH=/usr/local/cuda/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=/usr/local/cuda/lib64",
                   "CUDA_HOME=/usr/local/cuda", "OPTS=a=b c", "trtllm-bench", "--model", "a b"]


def test_extra_env_overrides_and_cwd():
    cmd = sc.chroot_argv("/r", {"PATH": "/bin", "HOME": "/home/img"}, ["ls"], extra_env={"PATH": "/x", "N": 1},
                         cwd="/work", chroot="/usr/sbin/chroot")
    assert cmd[:7] == ["/usr/sbin/chroot", "/r", "/usr/bin/env", "-i", "-C", "/work", "--"]
    assert cmd[7:] == ["HOME=/home/img", "PATH=/x", "N=1", "ls"]


@pytest.mark.parametrize(("argv", "error"), [
    ("ls -l", TypeError), ([], ValueError), (["A=1"], ValueError), ([""], ValueError)])
def test_bad_argv_is_refused(argv, error):
    with pytest.raises(error):
        sc.chroot_argv("/r", [], argv)


def test_bad_env_name_and_relative_rootfs_are_refused():
    with pytest.raises(ValueError):
        sc.chroot_argv("/r", [], ["ls"], extra_env={"A=B": "1"})
    with pytest.raises(ValueError):
        sc.chroot_argv("relative", [], ["ls"])


def test_env_list_to_dict_keeps_order_and_equals_in_values():
    assert sc.env_list_to_dict(["B=1", "A=x=y", "BARE", "C="]) == {"B": "1", "A": "x=y", "C": ""}
    assert list(sc.env_list_to_dict(["B=1", "A=2"])) == ["B", "A"]
    assert sc.env_list_to_dict(None) == {}


def test_load_image_env_reads_the_marker(tmp_path):
    with pytest.raises(sc.ChrootError, match=sc.MARKER):
        sc.load_image_env(str(tmp_path))
    (tmp_path / sc.MARKER).write_text(json.dumps({"digest": "sha256:" + "0" * 64, "env": IMAGE_ENV}))
    assert sc.load_image_env(str(tmp_path))["OPTS"] == "a=b c"
    (tmp_path / sc.MARKER).write_text("{not json")
    with pytest.raises(sc.ChrootError, match="cannot read"):
        sc.load_image_env(str(tmp_path))


def test_the_env_part_really_runs_argv_verbatim_with_only_the_given_environment(tmp_path):
    """Run the launcher's argv minus `chroot ROOTFS` on this host: env -i semantics, no shell anywhere."""
    pydir = str(Path(sys.executable).parent)
    script = "import json, os, sys; print(json.dumps([dict(os.environ), sys.argv[1:], os.getcwd()]))"
    tricky = ["a b", ";", "$(touch /tmp/pwned)", "*", "'q'", "K=V"]
    cmd = sc.chroot_argv("/unused", [f"PATH={pydir}:/usr/bin:/bin", "X=1"],
                         [Path(sys.executable).name, "-c", script, *tricky], cwd=str(tmp_path))
    out = subprocess.run(cmd[2:], capture_output=True, text=True, check=True,
                         env={"SECRET": "leak", "PATH": os.environ["PATH"]})
    env, args, cwd = json.loads(out.stdout)
    env.pop("LC_CTYPE", None)  # Python may coerce the C locale
    assert env == {"HOME": "/root", "PATH": f"{pydir}:/usr/bin:/bin", "X": "1"}
    assert args == tricky
    assert cwd == str(tmp_path)


def test_resolve_in_root_never_leaves_the_root(tmp_path):
    root = tmp_path / "root"
    (root / "usr/lib").mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")
    (root / "etc").mkdir()
    (root / "etc/resolv.conf").symlink_to("/run/systemd/resolve/stub-resolv.conf")
    (root / "escape").symlink_to("../../..")
    r = str(root.resolve())
    assert sc.resolve_in_root(r, "/lib/x86_64-linux-gnu/libcuda.so.1") == f"{r}/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert sc.resolve_in_root(r, "/etc/resolv.conf") == f"{r}/run/systemd/resolve/stub-resolv.conf"
    assert sc.resolve_in_root(r, "/escape/etc/passwd") == f"{r}/etc/passwd"
    assert sc.resolve_in_root(r, "/../../proc") == f"{r}/proc"
    (root / "loop").symlink_to("loop")
    with pytest.raises(sc.ChrootError, match="symbolic links"):
        sc.resolve_in_root(r, "/loop/x")


MOUNTINFO = """\
22 1 0:21 / /proc rw,relatime - proc proc rw
30 1 254:0 / /srv/rootfs/a rw - ext4 /dev/vda rw
31 30 0:21 / /srv/rootfs/a/proc rw,relatime - proc proc rw
32 30 0:6 / /srv/rootfs/a/dev rw,relatime - devtmpfs devtmpfs rw
33 32 0:26 / /srv/rootfs/a/dev/pts rw,relatime - devpts devpts rw
34 30 254:0 /models /srv/rootfs/a/data/my\\040models ro,relatime - ext4 /dev/vda rw
35 31 254:0 /x /srv/rootfs/a/proc ro - ext4 /dev/vda rw
36 1 254:0 / /srv/rootfs-other/b rw - ext4 /dev/vda rw
"""


def test_mountinfo_parse_and_unmount_order():
    mounts = sc.parse_mountinfo(MOUNTINFO)
    assert mounts[5].target == "/srv/rootfs/a/data/my models" and mounts[5].read_only
    assert sc.unmount_order(mounts, "/srv/rootfs") == [
        "/srv/rootfs/a/data/my models", "/srv/rootfs/a/dev/pts", "/srv/rootfs/a/proc", "/srv/rootfs/a/dev",
        "/srv/rootfs/a/proc", "/srv/rootfs/a"]
    assert sc.unmount_order(mounts, "/srv/rootfs/a") == [
        "/srv/rootfs/a/data/my models", "/srv/rootfs/a/dev/pts", "/srv/rootfs/a/proc", "/srv/rootfs/a/dev",
        "/srv/rootfs/a/proc"]
    assert sc.unmount_order(mounts, "/nothing") == []
    with pytest.raises(ValueError):
        sc.unmount_order(mounts, "/")


@pytest.mark.parametrize(("stderr", "cause"), [
    ("Error response from daemon: manifest for nvcr.io/x:y not found: manifest unknown", "unknown image"),
    ('Error response from daemon: Get "https://nvcr.io/v2/": dial tcp: lookup nvcr.io: no such host',
     "registry unreachable"),
    ('Error response from daemon: Get "http://127.0.0.1:9/v2/": dial tcp 127.0.0.1:9: connect: connection refused',
     "registry unreachable"),
    ("Error response from daemon: unauthorized: authentication required", "access denied"),
])
def test_pull_errors_are_classified(stderr, cause):
    assert sc.classify_pull_error(stderr).startswith(cause)


def test_architecture_names():
    assert sc.docker_arch("aarch64") == "arm64" and sc.docker_arch("x86_64") == "amd64"


# ---- the modules refuse clearly -------------------------------------------------------------------

def test_modules_without_root_say_so(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    res = run_module(load_module("rootfs_extract"), {"root": str(tmp_path), "digest": "sha256:" + "a" * 64,
                                                     "size": 1})
    assert res["failed"] and "must run as root" in res["msg"]
    res = run_module(load_module("chroot_mounts"), {"rootfs": str(tmp_path)})
    assert res["failed"] and "needs root" in res["msg"]
    (tmp_path / sc.MARKER).write_text(json.dumps({"digest": "sha256:" + "0" * 64, "env": IMAGE_ENV}))
    res = run_module(load_module("chroot_command"), {"rootfs": str(tmp_path), "argv": ["true"]})
    assert res["failed"] and "needs root" in res["msg"]


def test_unmount_with_nothing_mounted_is_a_no_op_even_without_root(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    res = run_module(load_module("chroot_mounts"), {"state": "unmounted", "scope": str(tmp_path / "never")})
    assert not res.get("failed") and res["changed"] is False and res["unmounted"] == []
    res = run_module(load_module("chroot_mounts"), {"state": "unmounted", "scope": "/"})
    assert res["failed"] and "refusing" in res["msg"]


def test_no_docker_cli_is_named(tmp_path):
    res = run_module(load_module("rootfs_image"), {"image": "x/y:z", "docker": str(tmp_path / "docker")})
    assert res["failed"] and "Docker CLI" in res["msg"] and "not found" in res["msg"]


def test_bad_digest_is_refused(tmp_path):
    res = run_module(load_module("rootfs_extract"), {"root": str(tmp_path), "digest": "latest", "size": 1})
    assert res["failed"] and "sha256" in res["msg"]


def test_check_mode_command_is_not_run(tmp_path):
    (tmp_path / sc.MARKER).write_text(json.dumps({"digest": "sha256:" + "0" * 64, "env": IMAGE_ENV}))
    res = run_module(load_module("chroot_command"), {"rootfs": str(tmp_path), "argv": ["false"]}, check_mode=True)
    assert res["skipped"] and res["cmd"][-1] == "false" and "rc" not in res
