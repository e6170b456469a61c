"""The harness itself: real SSH to namespace hosts, a real Docker engine, a real chroot."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.fleet]


def _ansible(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_ping_and_playbook_over_ssh_to_three_hosts(fleet_factory, ansible_env, repo, tmp_path):
    fleet = fleet_factory(3)
    ping = _ansible(["ansible", "-i", fleet.inventory, "all", "-m", "ansible.builtin.ping", "-o"],
                    ansible_env, repo)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert sorted(line.split()[0] for line in ping.stdout.splitlines() if "SUCCESS" in line) == [
        "spark1", "spark2", "spark3"]

    playbook = tmp_path / "probe.yml"
    playbook.write_text("""
- hosts: all
  gather_facts: false
  tasks:
    - name: Write a marker into the host's own work dir, from the host's own network namespace
      ansible.builtin.shell: |
        set -eu
        mkdir -p "{{ sparkfleet_work_dir }}"
        printf '{"ns": "%s", "addr": "%s", "path": "%s", "smi": "%s"}' \\
          "$(ip netns identify $$)" "$(hostname -I | tr -d ' ')" "$PATH" "$(command -v nvidia-smi || true)" \\
          > "{{ sparkfleet_work_dir }}/probe.json"
      changed_when: true
""")
    run = _ansible(["ansible-playbook", "-i", fleet.inventory, str(playbook)], ansible_env, repo)
    assert run.returncode == 0, run.stdout + run.stderr
    for host in fleet.hosts:
        probe = json.loads(Path(host.work_dir, "probe.json").read_text())
        assert probe["ns"] == host.netns          # really ran inside that host's namespace
        assert probe["addr"] == host.address
        # Stand-ins on this test host's PATH (ahead of the system dirs), and no other host's.
        entries = probe["path"].split(":")
        assert f"{host.dir}/bin" in entries
        assert entries.index(f"{host.dir}/bin") < entries.index("/usr/bin")
        assert not [e for e in entries if "/hosts/" in e and e != f"{host.dir}/bin"]
        if (repo / "tests/fleet/standins/nvidia-smi").exists():
            assert probe["smi"] == f"{host.dir}/bin/nvidia-smi"


def test_host_key_checking_is_on(fleet_factory, ansible_env, repo, tmp_path):
    fleet = fleet_factory(1)
    Path(fleet.known_hosts).write_text("")  # forget the host keys: ssh must refuse, not trust blindly
    marker = Path(fleet.hosts[0].dir, "ran")
    touch = _ansible(["ansible", "-i", fleet.inventory, "all", "-m", "ansible.builtin.command",
                      "-a", f"touch {marker}"], ansible_env, repo)
    assert touch.returncode == 4, touch.stdout + touch.stderr  # unreachable: the connection was refused ...
    assert f"{fleet.hosts[0].name} | UNREACHABLE" in touch.stdout
    assert not marker.exists()  # ... before anything ran on the host
    assert Path(fleet.known_hosts).read_text() == ""  # and the unknown key was not trusted and added


def test_stopping_sshd_makes_a_host_unreachable(fleet_factory, ansible_env, repo):
    fleet = fleet_factory(2)
    fleet.stop_sshd(fleet.hosts[1])
    ping = _ansible(["ansible", "-i", fleet.inventory, "all", "-m", "ansible.builtin.ping", "-o"],
                    ansible_env, repo)
    assert "spark1 | SUCCESS" in ping.stdout
    assert "spark2 | UNREACHABLE" in ping.stdout


@pytest.mark.docker
def test_docker_runs_the_test_image(test_image):
    out = subprocess.run(
        ["docker", "run", "--rm", "--label", "sparkfleet.test=1", test_image, "python3", "-c",
         "import os, numpy, tensorrt_llm; print(tensorrt_llm.__version__, numpy.__version__, "
         "os.environ['CUDA_HOME'], os.path.exists('/.dockerenv'))"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    version, _numpy, cuda_home, dockerenv = out.stdout.split()
    assert version == "1.1.0rc3" and cuda_home == "/usr/local/cuda" and dockerenv == "True"
    which = subprocess.run(["docker", "run", "--rm", test_image, "sh", "-c", "command -v trtllm-bench"],
                           capture_output=True, text=True, timeout=120)
    assert which.stdout.strip() == "/usr/local/bin/trtllm-bench"


@pytest.mark.docker
def test_chroot_into_an_exported_copy_of_the_image(test_image, tmp_path):
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    cid = subprocess.run(["docker", "create", "--label", "sparkfleet.test=1", test_image],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        export = subprocess.Popen(["docker", "export", cid], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(rootfs)], stdin=export.stdout, check=True)
        assert export.wait() == 0
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    proc_dir = rootfs / "proc"
    subprocess.run(["mount", "-t", "proc", "proc", str(proc_dir)], check=True)
    try:
        out = subprocess.run(
            ["chroot", str(rootfs), "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "python3", "-c",
             "import os, numpy, tensorrt_llm; print(tensorrt_llm.__version__, os.path.exists('/proc/self/status'),"
             " os.stat('/').st_ino)"],
            capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["umount", str(proc_dir)], check=True)
    assert out.returncode == 0, out.stderr
    # The image's Python and package, with /proc mounted, and "/" really is the exported rootfs.
    assert out.stdout.split() == ["1.1.0rc3", "True", str(rootfs.stat().st_ino)]
    assert str(proc_dir) not in Path("/proc/self/mounts").read_text()
