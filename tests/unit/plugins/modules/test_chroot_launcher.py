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


# ---- native = docker run minus isolation (issue 21): Entrypoint + argv, Cmd replaced, WorkingDir, User ----------

NGC_CONFIG = {"entrypoint": ["/opt/nvidia/nvidia_entrypoint.sh"], "cmd": ["/bin/bash"], "working_dir": "/workspace",
              "user": "", "recorded": True}


def test_entrypoint_runs_with_argv_in_place_of_cmd():
    cmd = sc.chroot_argv("/r", ["PATH=/bin"], ["trtllm-bench", "--model", "x"], config=NGC_CONFIG)
    assert cmd == ["chroot", "/r", "/usr/bin/env", "-i", "-C", "/workspace", "--", "HOME=/root", "PATH=/bin",
                   "/opt/nvidia/nvidia_entrypoint.sh", "trtllm-bench", "--model", "x"]


def test_no_argv_runs_entrypoint_with_cmd_and_run_dir_overrides_working_dir():
    cmd = sc.chroot_argv("/r", [], [], config=NGC_CONFIG, cwd="/results/run1")
    assert cmd[4:6] == ["-C", "/results/run1"]
    assert cmd[-2:] == ["/opt/nvidia/nvidia_entrypoint.sh", "/bin/bash"]


def test_empty_entrypoint_runs_argv_itself_and_cmd_when_no_argv():
    config = dict(NGC_CONFIG, entrypoint=[], working_dir="")
    assert sc.chroot_argv("/r", [], ["python3", "-V"], config=config)[-2:] == ["python3", "-V"]
    assert sc.chroot_argv("/r", [], [], config=config)[-1] == "/bin/bash"
    with pytest.raises(ValueError, match="entrypoint or Cmd"):
        sc.chroot_argv("/r", [], [], config=dict(config, cmd=[]))
    assert "-C" not in sc.chroot_argv("/r", [], ["ls"], config=config)


def test_docker_run_semantics_table():
    assert sc.docker_run_argv(["e", "-x"], ["c"], ["a"]) == ["e", "-x", "a"]
    assert sc.docker_run_argv(["e"], ["c", "d"], []) == ["e", "c", "d"]
    assert sc.docker_run_argv([], ["c"], None) == ["c"]
    assert sc.docker_run_argv(None, None, ["a"]) == ["a"]


def test_image_user_becomes_userspec_root_does_not():
    assert sc.chroot_argv("/r", [], ["ls"], config=dict(NGC_CONFIG, user="1000:1000"))[:3] == [
        "chroot", "--userspec=1000:1000", "/r"]
    for root in ("", "root", "0", "0:0"):
        assert sc.chroot_argv("/r", [], ["ls"], config=dict(NGC_CONFIG, user=root))[1] == "/r"


def test_path_default_like_docker_when_the_image_sets_none():
    cmd = sc.chroot_argv("/r", ["A=1"], ["ls"])
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in cmd


def test_image_config_from_inspect_and_markers(tmp_path):
    inspect = {"Entrypoint": None, "Cmd": ["python3"], "WorkingDir": "", "User": "", "Env": ["A=1"]}
    assert sc.image_config_from_inspect(inspect) == {"entrypoint": [], "cmd": ["python3"], "working_dir": "",
                                                     "user": ""}
    assert sc.image_config_from_inspect({"Entrypoint": ["/e.sh"]})["entrypoint"] == ["/e.sh"]
    digest = "sha256:" + "0" * 64
    (tmp_path / sc.MARKER).write_text(json.dumps({"schema": 2, "digest": digest, "env": [], **{
        k: NGC_CONFIG[k] for k in sc.IMAGE_CONFIG_KEYS}}))
    config = sc.load_image_config(str(tmp_path))
    assert config["recorded"] and config["entrypoint"] == ["/opt/nvidia/nvidia_entrypoint.sh"]
    assert sc.stale_marker_warning(str(tmp_path), config) is None
    # A schema-1 marker: no entrypoint known; argv runs directly, with a warning naming the fix.
    (tmp_path / sc.MARKER).write_text(json.dumps({"schema": 1, "digest": digest, "env": []}))
    old = sc.load_image_config(str(tmp_path))
    assert not old["recorded"] and old["entrypoint"] == []
    assert "provision" in sc.stale_marker_warning(str(tmp_path), old)
    assert sc.chroot_argv("/r", [], ["ls"], config=old)[-1] == "ls"
    # An overlay rootfs has no entrypoint by nature: no warning.
    (tmp_path / sc.MARKER).write_text(json.dumps({"schema": 2, "source": "overlay", "digest": "overlay:/"}))
    assert sc.stale_marker_warning(str(tmp_path), sc.load_image_config(str(tmp_path))) is None


def test_native_command_reads_the_marker_and_warns_on_an_old_one(tmp_path):
    runexec = host_util("runexec")
    digest = "sha256:" + "0" * 64
    (tmp_path / sc.MARKER).write_text(json.dumps({"schema": 2, "digest": digest, "env": [], **{
        k: NGC_CONFIG[k] for k in sc.IMAGE_CONFIG_KEYS}}))
    warnings: list[str] = []
    cmd = runexec.native_command(str(tmp_path), {"PATH": "/bin"}, ["trtllm-bench"], {"X": "1"}, "/run", warnings)
    assert cmd[-2:] == ["/opt/nvidia/nvidia_entrypoint.sh", "trtllm-bench"] and "X=1" in cmd and warnings == []
    (tmp_path / sc.MARKER).write_text(json.dumps({"schema": 1, "digest": digest, "env": []}))
    cmd = runexec.native_command(str(tmp_path), {}, ["trtllm-bench"], {}, "/run", warnings)
    assert cmd[-1] == "trtllm-bench" and cmd[-2] != "/opt/nvidia/nvidia_entrypoint.sh"
    assert len(warnings) == 1 and "schema-1" in warnings[0]


def test_entrypoint_script_really_runs_and_bash_sources_bash_env(tmp_path):
    """The launcher's argv minus `chroot ROOTFS`, on this host: an NGC-like entrypoint (bash, `exec "$@"`) with
    BASH_ENV pointing at a shinit-like file; the program sees what that file exported."""
    shinit = tmp_path / "shinit_v2"
    shinit.write_text('export LD_LIBRARY_PATH="/opt/trt/lib:${LD_LIBRARY_PATH}"\nexport SHINIT_MARKER=sourced\n')
    entry = tmp_path / "entrypoint.sh"
    entry.write_text('#!/bin/bash\nset -e\nif [[ $# -eq 0 ]]; then exec /bin/bash; else exec "$@"; fi\n')
    entry.chmod(0o755)
    pydir = str(Path(sys.executable).parent)
    script = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('LD_LIBRARY_PATH', 'SHINIT_MARKER')}))"
    config = {"entrypoint": [str(entry)], "cmd": [], "working_dir": str(tmp_path), "user": ""}
    cmd = sc.chroot_argv("/unused", [f"PATH={pydir}:/usr/bin:/bin", "LD_LIBRARY_PATH=/usr/local/cuda/lib64",
                                     f"BASH_ENV={shinit}"],
                         [Path(sys.executable).name, "-c", script], config=config)
    out = subprocess.run(cmd[2:], capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    assert json.loads(out.stdout) == {"LD_LIBRARY_PATH": "/opt/trt/lib:/usr/local/cuda/lib64",
                                      "SHINIT_MARKER": "sourced"}
