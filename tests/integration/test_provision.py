"""playbooks/provision.yml and restore.yml on the fake fleet: rootfs from the offline test image, mounts, chroot.

Mounts made over SSH live in the mount namespace of the host's sshd (``ip netns exec`` gives it its own), so
they are read from ``/proc/<sshd pid>/mountinfo``, not from this process's.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from playrecap import play_recap

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker]

MARKER = ".sparkfleet-rootfs.json"


def _ansible(args: list[str], env: dict[str, str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _playbook(name: str, fleet, env, repo, *extra: str) -> subprocess.CompletedProcess:
    return _ansible(["ansible-playbook", "-i", fleet.inventory, str(repo / "playbooks" / name), *extra], env, repo)


def _offline(image: str) -> list[str]:
    return ["-e", f"sparkfleet_image={image}", "-e", "sparkfleet_image_offline=true"]


def _mounts(host, under: str | None = None) -> list[list[str]]:
    """Mounts under ``under`` (default the host's dir) in the host's sshd mount namespace: [target, options]."""
    prefix = (under or host.dir).rstrip("/") + "/"
    rows = []
    for line in Path(f"/proc/{host.sshd_pid()}/mountinfo").read_text().splitlines():
        fields = line.split()
        target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if target.startswith(prefix):
            rows.append([target, fields[5]])
    return rows


def _ns(host, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nsenter", "-t", str(host.sshd_pid()), "-m", *argv], capture_output=True, text=True)


def _rootfs_dirs(host) -> list[Path]:
    parent = Path(host.work_dir, "rootfs")
    return sorted(p for p in parent.iterdir() if not p.name.startswith(".")) if parent.is_dir() else []


def _partials(host) -> list[Path]:
    parent = Path(host.work_dir, "rootfs")
    return sorted(parent.glob(".partial-*")) if parent.is_dir() else []


def _chroot_command(fleet, env, repo, tmp_path, host, argv: list[str]) -> dict:
    rootfs = _rootfs_dirs(host)[0]
    tree = tmp_path / f"tree-{host.name}-{time.monotonic_ns()}"
    args = json.dumps({"rootfs": str(rootfs), "argv": argv})
    proc = _ansible(["ansible", "-i", fleet.inventory, host.name, "-m", "sparkfleet.bench.chroot_command",
                     "-a", args, "-t", str(tree)], env, repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tree / host.name).read_text())


def _restore(fleet, env, repo) -> None:
    proc = _playbook("restore.yml", fleet, env, repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr


PROBE = r"""
import json, os, stat, sys
results, models, resolv_host = sys.argv[1:4]
out = {"env": dict(os.environ), "argv0": sys.argv[0]}
points = {line.split()[4] for line in open("/proc/self/mountinfo")}  # relative to the chroot
out["mounts"] = {p: p in points for p in ("/proc", "/sys", "/dev", "/dev/pts", "/dev/shm", results, models)}
out["proc_self"] = os.path.exists("/proc/self/status")
out["dev_null_chr"] = stat.S_ISCHR(os.stat("/dev/null").st_mode)
out["smi_file"] = os.path.isfile("/usr/bin/nvidia-smi")
out["resolv"] = open("/etc/resolv.conf").read() == resolv_host
with open(os.path.join(results, "from-chroot.txt"), "w") as fh:
    fh.write("written inside")
try:
    open(os.path.join(models, "nope"), "w")
    out["models_ro"] = False
except OSError as exc:
    out["models_ro"] = exc.errno == 30
try:
    open("/sys/sparkfleet-nope", "w")
    out["sys_ro"] = False
except OSError as exc:
    out["sys_ro"] = exc.errno == 30
out["dockerenv"] = os.path.exists("/.dockerenv")
print(json.dumps(out))
"""


def test_provision_two_hosts_chroot_idempotent_and_restore(fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(2)
    try:
        first = _playbook("provision.yml", fleet, ansible_env, repo, *_offline(test_image))
        assert first.returncode == 0, first.stdout + first.stderr
        assert all(r["changed"] > 0 and r["failed"] == 0 for r in play_recap(first.stdout).values())
        digest = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", test_image],
                                capture_output=True, text=True, check=True).stdout.strip()
        resolv = Path(os.path.realpath("/etc/resolv.conf")).read_text()

        for host in fleet.hosts:
            (rootfs,) = _rootfs_dirs(host)
            assert rootfs.name == digest.replace(":", "-")
            assert not _partials(host)
            marker = json.loads((rootfs / MARKER).read_text())
            assert marker["digest"] == digest and marker["image"] == test_image
            assert marker["size"] > 0 and marker["created"].endswith("Z")
            assert "CUDA_HOME=/usr/local/cuda" in marker["env"]
            assert not (rootfs / ".dockerenv").exists()

            targets = {t[len(str(rootfs)):]: opts for t, opts in _mounts(host, str(rootfs))}
            results, models = f"{host.work_dir}/results", f"{host.work_dir}/models"
            for path in ("/proc", "/sys", "/dev", "/dev/pts", "/dev/shm", "/usr/bin/nvidia-smi", "/etc/resolv.conf",
                         models, results):
                assert path in targets, f"{host.name}: {path} not mounted: {sorted(targets)}"
            for path in ("/sys", "/usr/bin/nvidia-smi", "/etc/resolv.conf", models):
                assert targets[path].split(",")[0] == "ro", (path, targets[path])
            assert targets[results].split(",")[0] == "rw"

            res = _chroot_command(fleet, ansible_env, repo, tmp_path, host,
                                  ["python3", "-c", PROBE, results, models, resolv])
            seen = json.loads(res["stdout"])
            # Exactly the image's environment (plus Docker's HOME), not the SSH session's.
            env = seen["env"]
            env.pop("LC_CTYPE", None)
            assert env == {"HOME": "/root", "PWD": "/", **dict(e.split("=", 1) for e in marker["env"])} or \
                env == {"HOME": "/root", **dict(e.split("=", 1) for e in marker["env"])}
            assert "SPARKFLEET_FAKE_GPU_STATE" not in env and f"{host.dir}/bin" not in env["PATH"]
            assert all(seen["mounts"].values()), seen["mounts"]
            assert seen["proc_self"] and seen["dev_null_chr"] and seen["smi_file"] and seen["resolv"]
            assert seen["models_ro"] and seen["sys_ro"] and not seen["dockerenv"]
            assert Path(results, "from-chroot.txt").read_text() == "written inside"

            smi = _chroot_command(fleet, ansible_env, repo, tmp_path, host, ["nvidia-smi", "-L"])
            assert smi["stdout"].startswith("GPU 0:")

        second = _playbook("provision.yml", fleet, ansible_env, repo, *_offline(test_image))
        assert second.returncode == 0, second.stdout + second.stderr
        recap = play_recap(second.stdout)
        assert sorted(recap) == ["spark1", "spark2"]
        assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap.values()), second.stdout

        _restore(fleet, ansible_env, repo)
        for host in fleet.hosts:
            assert _mounts(host) == []
            assert (_rootfs_dirs(host)[0] / MARKER).exists()  # restore unmounts, it does not delete
        again = _playbook("restore.yml", fleet, ansible_env, repo)
        assert again.returncode == 0 and all(r["changed"] == 0 for r in play_recap(again.stdout).values())
    finally:
        _playbook("restore.yml", fleet, ansible_env, repo)


def _procs() -> dict[int, tuple[int, list[str]]]:
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(d.name)] = (ppid, [a.decode(errors="replace") for a in argv if a])
    return out


def test_an_extraction_killed_halfway_is_completed_by_the_next_run(fleet_factory, test_image, ansible_env, repo):
    fleet = fleet_factory(1)
    host = fleet.hosts[0]
    parent = f"{host.work_dir}/rootfs/.partial-"
    run = subprocess.Popen(["ansible-playbook", "-i", fleet.inventory, str(repo / "playbooks/provision.yml"),
                            *_offline(test_image)], env=ansible_env, cwd=repo, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        tar_pid = None
        deadline = time.monotonic() + 120
        while tar_pid is None and time.monotonic() < deadline and run.poll() is None:
            for pid, (_ppid, argv) in _procs().items():
                if argv[:2] and "tar" in argv[0] and any(a.startswith(parent) for a in argv):
                    tar_pid = pid
            time.sleep(0.02)
        assert tar_pid is not None, "never saw the extraction's tar"
        time.sleep(0.7)
        os.kill(tar_pid, signal.SIGSTOP)  # frozen halfway: it cannot finish behind our back
        procs = _procs()
        pipeline_pid = procs[tar_pid][0]  # bash running `docker export | tar`
        module_pid = procs[pipeline_pid][0]  # the module: it dies as a killed controller's would, no cleanup
        pipeline = [p for p, (pp, argv) in procs.items() if pp == pipeline_pid]
        (partial,) = _partials(host)
        assert any(partial.iterdir()) and not (partial / MARKER).exists()
        for pid in [module_pid, pipeline_pid, *pipeline]:
            os.kill(pid, signal.SIGKILL)
        os.kill(tar_pid, signal.SIGCONT)
        out, _ = run.communicate(timeout=120)
        assert run.returncode != 0, out
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    # Interrupted: no complete-looking rootfs, only the partial directory.
    assert _rootfs_dirs(host) == [] and len(_partials(host)) == 1
    try:
        again = _playbook("provision.yml", fleet, ansible_env, repo, *_offline(test_image))
        assert again.returncode == 0, again.stdout + again.stderr
        (rootfs,) = _rootfs_dirs(host)
        assert _partials(host) == []
        assert json.loads((rootfs / MARKER).read_text())["image"] == test_image
        # Complete: the same file list as the image itself.
        listing = subprocess.run(["tar", "-C", str(rootfs), "-c", "usr/lib/python3/dist-packages/numpy"],
                                 capture_output=True, check=True)
        assert len(listing.stdout) > 1_000_000
        leftovers = subprocess.run(["docker", "ps", "-aq", "--filter",
                                    f"label=sparkfleet.rootfs={host.work_dir}/rootfs"],
                                   capture_output=True, text=True, check=True).stdout.split()
        assert leftovers == []
        res = subprocess.run(["nsenter", "-t", str(host.sshd_pid()), "-m", "chroot", str(rootfs), "/usr/bin/python3",
                              "-c", "import numpy, tensorrt_llm; print(tensorrt_llm.__version__)"],
                             capture_output=True, text=True)
        assert res.stdout.strip() == "1.1.0rc3", res.stderr
    finally:
        _restore(fleet, ansible_env, repo)
    assert _mounts(host) == []


# ---- an image archive, and an image for another architecture ---------------------------------------

def _save_archive(path: Path, tag: str, arch: str) -> str:
    """A minimal `docker save` archive of a one-file image for ``arch``; returns the image ID."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        data = f"hello from {arch}\n".encode()
        info = tarfile.TarInfo("hello.txt")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": arch, "os": "linux", "created": "2025-01-01T00:00:00Z",
                         "config": {"Env": ["PATH=/bin", f"SPARKFLEET_ARCH={arch}"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]},
                         "history": [{"created": "2025-01-01T00:00:00Z", "created_by": "sparkfleet test"}]},
                        sort_keys=True).encode()
    config_hex = hashlib.sha256(config).hexdigest()
    layer_dir = hashlib.sha256(diff_id.encode()).hexdigest()
    manifest = json.dumps([{"Config": f"{config_hex}.json", "RepoTags": [tag],
                            "Layers": [f"{layer_dir}/layer.tar"]}]).encode()
    with tarfile.open(path, "w") as tar:
        for name, blob in ((f"{layer_dir}/layer.tar", layer_bytes), (f"{config_hex}.json", config),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return f"sha256:{config_hex}"


def test_image_archive_and_wrong_architecture(fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(1)
    host = fleet.hosts[0]
    here = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    other = "arm64" if here != "arm64" else "amd64"
    wrong, right = tmp_path / "wrong.tar", tmp_path / "right.tar"
    wrong_tag = f"sparkfleet-test/archive-{other}:{os.getpid()}"
    right_tag = f"sparkfleet-test/archive-{here}:{os.getpid()}"
    ids = [_save_archive(wrong, wrong_tag, other), _save_archive(right, right_tag, here)]
    try:
        bad = _playbook("provision.yml", fleet, ansible_env, repo, *_offline(wrong_tag),
                        "-e", f"sparkfleet_image_archive={wrong}")
        assert bad.returncode != 0
        assert "spark1: native rootfs provisioning failed at 'Make sure the image is present" in bad.stdout
        assert f"built for linux/{other}" in bad.stdout and f"this host is linux/{here}" in bad.stdout
        assert not Path(host.work_dir, "rootfs").exists()

        args = [*_offline(right_tag), "-e", f"sparkfleet_image_archive={right}", "-e", "native_rootfs_verify=false"]
        good = _playbook("provision.yml", fleet, ansible_env, repo, *args)
        assert good.returncode == 0, good.stdout + good.stderr
        (rootfs,) = _rootfs_dirs(host)
        assert rootfs.name == ids[1].replace(":", "-")
        assert (rootfs / "hello.txt").read_text() == f"hello from {here}\n"
        assert f"SPARKFLEET_ARCH={here}" in json.loads((rootfs / MARKER).read_text())["env"]
        again = _playbook("provision.yml", fleet, ansible_env, repo, *args)
        assert again.returncode == 0 and play_recap(again.stdout)["spark1"]["changed"] == 0, again.stdout

        # An older digest stays until a prune is asked for.
        old = rootfs.parent / ("sha256-" + "0" * 64)
        (old / "etc").mkdir(parents=True)
        (old / MARKER).write_text(json.dumps({"digest": "sha256:" + "0" * 64, "env": []}))
        kept = _playbook("provision.yml", fleet, ansible_env, repo, *args)
        assert kept.returncode == 0 and old.exists()
        pruned = _playbook("provision.yml", fleet, ansible_env, repo, *args, "-e", "sparkfleet_rootfs_prune=true")
        assert pruned.returncode == 0, pruned.stdout
        assert _rootfs_dirs(host) == [rootfs]
    finally:
        _playbook("restore.yml", fleet, ansible_env, repo)
        subprocess.run(["docker", "rmi", "-f", *ids], capture_output=True)
    assert _mounts(host) == []


def test_too_small_disk_fails_before_writing(fleet_factory, test_image, ansible_env, repo):
    fleet = fleet_factory(1)
    host = fleet.hosts[0]
    mount = _ns(host, "mount", "-t", "tmpfs", "-o", "size=20m", "sparkfleet-small", host.work_dir)
    assert mount.returncode == 0, mount.stderr
    run = _playbook("provision.yml", fleet, ansible_env, repo, *_offline(test_image))
    assert run.returncode != 0
    m = re.search(r"not enough free disk for the rootfs of \S+ under \S+: needs (\d+) bytes \(image (\d+) "
                  r"\+ margin\), (\d+) bytes free", run.stdout)
    assert m, run.stdout
    needed, size, free = map(int, m.groups())
    assert needed > size > free and free <= 20 * 1024 * 1024
    assert "spark1: native rootfs provisioning failed at 'Extract the image" in run.stdout
    assert _ns(host, "ls", "-A", host.work_dir).stdout.split() == []  # nothing written, not even rootfs/
    assert [t for t, _ in _mounts(host)] == [host.work_dir]  # only the test's tmpfs


def test_bad_input_names_host_and_cause(fleet_factory, test_image, ansible_env, repo):
    fleet = fleet_factory(2, host_env={"spark2": {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}})
    absent = _playbook("provision.yml", fleet, ansible_env, repo, *_offline("sparkfleet-test/absent:nope"))
    assert absent.returncode != 0
    assert re.search(r"spark1: native rootfs provisioning failed at [^\n]*image sparkfleet-test/absent:nope is not "
                     r"present and offline mode forbids pulling it", absent.stdout), absent.stdout
    assert re.search(r"spark2: native rootfs provisioning failed at [^\n]*Docker daemon not reachable",
                     absent.stdout), absent.stdout

    registry = _playbook("provision.yml", fleet, ansible_env, repo, "--limit", "spark1",
                         "-e", "sparkfleet_image=127.0.0.1:9/sparkfleet/absent:1")
    assert registry.returncode != 0
    assert re.search(r"spark1: [^\n]*cannot pull image 127.0.0.1:9/sparkfleet/absent:1: registry unreachable",
                     registry.stdout), registry.stdout

    no_docker = _playbook("provision.yml", fleet, ansible_env, repo, "--limit", "spark1", *_offline(test_image),
                          "-e", "native_rootfs_docker=/nonexistent/docker")
    assert no_docker.returncode != 0
    assert re.search(r"spark1: [^\n]*Docker CLI '/nonexistent/docker' not found", no_docker.stdout), no_docker.stdout
    for host in fleet.hosts:
        assert not Path(host.work_dir, "rootfs").exists() and _mounts(host) == []
