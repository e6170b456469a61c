"""rootfs_overlay: its helpers (environment filter, names, hidden mounts) and its refusals, without mounting."""

from __future__ import annotations

import os

import pytest
from _ansible_modules import host_util, load_module, run_module

ro = host_util("rootfs_overlay")
overlay = load_module("rootfs_overlay")
sc = host_util("chroot")


def test_default_name():
    assert ro.default_name("/") == "overlay-root"
    assert ro.default_name("/srv/images/ubuntu 24/") == "overlay-srv-images-ubuntu-24"


def test_env_keeps_only_the_named_keys_in_order_then_extras():
    environ = {"PATH": "/v/bin:/usr/bin", "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "SECRET_TOKEN": "x",
               "LANG": "C.UTF-8", "HOME": "/root", "SSH_AUTH_SOCK": "/tmp/agent"}
    env = ro.filtered_env(environ, ["LANG", "PATH", "LD_LIBRARY_PATH", "CUDA_HOME"], {"HF_HUB_OFFLINE": 1})
    assert env == ["LANG=C.UTF-8", "PATH=/v/bin:/usr/bin", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64",
                   "HF_HUB_OFFLINE=1"]
    # The launcher reads it as it reads an image's Config.Env.
    assert sc.env_list_to_dict(env)["PATH"] == "/v/bin:/usr/bin"


def test_env_drops_values_with_newlines_and_refuses_bad_extras():
    assert ro.filtered_env({"PATH": "/bin\n/evil"}, ["PATH"], {}) == []
    with pytest.raises(ValueError, match="invalid environment variable name"):
        ro.filtered_env({}, [], {"BAD-NAME": "1"})
    with pytest.raises(ValueError, match="newline"):
        ro.filtered_env({}, [], {"OK": "a\nb"})


def _mi(target: str, fstype: str, mid: int = 100) -> object:
    return sc.MountInfo(mid, 1, "/", target, ("rw",), fstype, "src")


def test_hidden_mounts_lists_real_file_systems_below_the_lower_only():
    mounts = [_mi("/", "ext4"), _mi("/proc", "proc"), _mi("/dev/shm", "tmpfs"), _mi("/run/user/0", "tmpfs"),
              _mi("/usr/local/nvidia", "ext4"), _mi("/opt/torch", "virtiofs"), _mi("/tmp", "tmpfs"),
              _mi("/var/lib/sf", "ext4"), _mi("/var/lib/sf/rootfs/overlay-root", "overlay"),
              _mi("/sys/fs/cgroup", "cgroup2"), _mi("/opt/torch", "virtiofs")]
    assert ro.hidden_mounts(mounts, "/", "/var/lib/sf") == ["/usr/local/nvidia ext4", "/opt/torch virtiofs"]
    assert ro.hidden_mounts(mounts, "/usr", "/var/lib/sf") == ["/usr/local/nvidia ext4"]


def test_overlay_at_takes_the_last_mount_on_a_path():
    mounts = [_mi("/a", "ext4", 1), _mi("/a", "overlay", 2), _mi("/b", "ext4", 3)]
    assert ro.overlay_at(mounts, "/a").fstype == "overlay"
    assert ro.overlay_at(mounts, "/c") is None


def test_super_options_are_read_from_mountinfo(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "121 27 0:42 / /w/rootfs/overlay-root rw,relatime - overlay overlay "
        "rw,lowerdir=/,upperdir=/w/rootfs/.overlay-root.overlay/upper,workdir=/w/rootfs/.overlay-root.overlay/work\n")
    supers = ro.read_super_options("/w/rootfs/overlay-root", str(info))
    m = _mi("/w/rootfs/overlay-root", "overlay")
    assert ro.option_value(m, "lowerdir", supers) == "/"
    assert ro.option_value(m, "upperdir", supers) == "/w/rootfs/.overlay-root.overlay/upper"
    assert ro.option_value(m, "index", supers) is None


def test_marker_comparison_ignores_the_time():
    a = {"digest": "overlay:/", "env": ["PATH=/bin"], "created": "2026-01-01T00:00:00Z"}
    b = dict(a, created="2026-02-02T00:00:00Z")
    assert ro.marker_body(a) == ro.marker_body(b)
    assert ro.marker_body(a) != ro.marker_body(dict(b, env=["PATH=/usr/bin"]))


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the refusal without root")
def test_refused_without_root(tmp_path):
    res = run_module(overlay, {"root": str(tmp_path)})
    assert res["failed"] and "needs root" in res["msg"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the checks after the root check need root")
def test_bad_arguments_are_refused_before_mounting(tmp_path):
    res = run_module(overlay, {"root": str(tmp_path), "name": "../escape"})
    assert res["failed"] and "name" in res["msg"]
    res = run_module(overlay, {"root": str(tmp_path), "lower": str(tmp_path / "nowhere")})
    assert res["failed"] and "not a directory" in res["msg"]
    res = run_module(overlay, {"root": str(tmp_path / "w,x"), "lower": str(tmp_path)})
    assert res["failed"] and "cannot hold ','" in res["msg"]
    inside = tmp_path / "inside"
    inside.mkdir()
    res = run_module(overlay, {"root": str(tmp_path), "lower": str(inside)})
    assert res["failed"] and "inside the work dir" in res["msg"]
    res = run_module(overlay, {"root": str(tmp_path), "env": {"A B": "1"}})
    assert res["failed"] and "invalid environment variable name" in res["msg"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the checks after the root check need root")
def test_check_mode_mounts_and_writes_nothing(tmp_path):
    lower = tmp_path / "lower"
    lower.mkdir()
    work = tmp_path / "work"
    res = run_module(overlay, {"root": str(work), "lower": str(lower)}, check_mode=True)
    assert not res.get("failed"), res
    assert res["changed"] and res["mounted"]
    assert res["path"] == str(work / "rootfs" / ro.default_name(str(lower)))
    assert res["marker"]["source"] == "overlay" and res["marker"]["lower"] == str(lower)
    assert not work.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the checks after the root check need root")
def test_unmounted_with_nothing_mounted_changes_nothing(tmp_path):
    res = run_module(overlay, {"root": str(tmp_path), "state": "unmounted"})
    assert not res.get("failed"), res
    assert res["changed"] is False and res["unmounted"] == []
