"""native_rootfs with sparkfleet_rootfs_source=overlay on this machine: an overlay of a host directory as the rootfs.

playbooks/provision.yml mounts an overlay of / (the host's own userland) under a work dir, binds what a chroot
needs, runs a probe inside; a command in the chroot then sees the host's Python, its writes stay in the upper
layer, and playbooks/restore.yml takes everything down again. No Docker, no image, no network.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root]

MARKER = ".sparkfleet-rootfs.json"


def _playbook(repo: Path, env: dict, name: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ansible-playbook", "-i", str(repo / "inventory" / "local.ini"),
                           str(repo / "playbooks" / name), *extra],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def _mounts_under(path: Path) -> list[tuple[str, str]]:
    prefix = str(path).rstrip("/") + "/"
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        sep = fields.index("-", 6)
        if target.startswith(prefix):
            out.append((target, fields[sep + 1]))
    return out


@pytest.fixture
def work(tmp_path_factory) -> Path:
    # Under /var/tmp, not /tmp: the upper layer needs a file system that an overlay accepts as upperdir
    # (a /tmp on overlayfs would not), and the work dir lies inside the lower (/) as it does on a real host.
    base = Path(tmp_path_factory.getbasetemp())
    work = Path("/var/tmp") / f"sf-overlay-{base.name}"
    work.mkdir(parents=True, exist_ok=True)
    yield work
    subprocess.run(["umount", "-R", "-l", str(work / "rootfs" / "overlay-root")], capture_output=True)
    if not _mounts_under(work):
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], check=False)


def test_overlay_rootfs_runs_the_hosts_python_and_keeps_its_writes(repo, ansible_env, work):
    python = Path(sys.executable)
    probe = {"native_rootfs_probes": [{"name": "host python in the chroot", "requires": "always",
                                       "argv": [str(python), "-c", "import sys; print(sys.version)"]}]}
    env = dict(ansible_env, SPARKFLEET_TEST_ONLY_VAR="not kept")
    args = ["-e", f"sparkfleet_work_dir={work}", "-e", "sparkfleet_rootfs_source=overlay", "-e", json.dumps(probe),
            "-e", json.dumps({"native_rootfs_overlay_env": {"SPARKFLEET_OVERLAY": "yes"}})]
    proc = _playbook(repo, env, "provision.yml", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    rootfs = work / "rootfs" / "overlay-root"
    mounts = dict(_mounts_under(work))
    assert mounts[str(rootfs)] == "overlay"
    assert mounts[f"{rootfs}/proc"] == "proc" and f"{rootfs}/dev" in mounts
    assert mounts[f"{rootfs}{work}/results"]  # results bound at the host's path

    marker = json.loads((rootfs / MARKER).read_text())
    assert marker["source"] == "overlay" and marker["lower"] == "/" and marker["digest"] == "overlay:/"
    env_keys = [e.split("=", 1)[0] for e in marker["env"]]
    assert "PATH" in env_keys and "SPARKFLEET_OVERLAY" in env_keys
    assert "SPARKFLEET_TEST_ONLY_VAR" not in env_keys and "HOME" not in env_keys
    # The marker lives in the upper layer, not on the host.
    assert (work / "rootfs" / ".overlay-root.overlay" / "upper" / MARKER).exists()
    assert not Path("/" + MARKER).exists()

    # A command in the chroot (the launcher the run executor uses) sees the host's own Python.
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.rootfs import chroot as sc
    host_version = subprocess.run([str(python), "-c", "import sys; print(sys.version)"],
                                  capture_output=True, text=True, check=True).stdout
    cmd = sc.chroot_argv(str(rootfs), sc.load_image_env(str(rootfs)),
                         [str(python), "-c", "import os, sys; print(sys.version, end=''); "
                          "print('|', os.environ.get('SPARKFLEET_OVERLAY'), os.environ.get('X'), end=''); "
                          "open('/etc/sparkfleet-overlay-test', 'w').write('x')"], extra_env={"X": "1"})
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    version, _, rest = out.stdout.partition("|")
    assert version.strip() == host_version.strip()
    assert rest.split() == ["yes", "1"]
    # Its write went to the upper layer, not to the host's /etc.
    assert (work / "rootfs" / ".overlay-root.overlay" / "upper" / "etc" / "sparkfleet-overlay-test").exists()
    assert not Path("/etc/sparkfleet-overlay-test").exists()

    # Provisioning again changes nothing.
    again = _playbook(repo, env, "provision.yml", *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0", again.stdout), again.stdout

    # restore.yml takes the binds and the overlay down.
    undo = _playbook(repo, env, "restore.yml", "-e", f"sparkfleet_work_dir={work}")
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert _mounts_under(work) == []
    assert not (rootfs / MARKER).exists()
