"""Provisioning without root fails at once, naming the host and the cause, before anything is written."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root]


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux) to drop to an unprivileged user")
def test_provision_as_an_ordinary_user_says_it_needs_root(ansible_env, repo, tmp_path):
    home = Path(tempfile.mkdtemp(prefix="sparkfleet-nobody-"))  # pytest's tmp dirs are root-only
    os.chmod(home, 0o755)
    shutil.chown(home, "nobody")
    work = home / "work"
    env = dict(ansible_env, HOME=str(home), ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
               ANSIBLE_REMOTE_TEMP=str(home / "rtmp"))
    try:
        proc = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "ansible-playbook",
             "playbooks/provision.yml", "-e", f"sparkfleet_work_dir={work}", "-e", "sparkfleet_image=busybox:absent",
             # the venv's interpreter may live under /root; the host side only needs a system Python
             "-e", "ansible_python_interpreter=/usr/bin/python3"],
            cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "localhost: provisioning the native rootfs needs root" in out, out[-3000:]
    assert "running as uid 65534" in out
    assert not work.exists()
