"""A real Docker engine and a small TensorRT-LLM-shaped test image, built offline and cached.

The image is Debian bookworm minbase (debootstrap) with python3 and python3-numpy, plus the GPU-software
stand-ins a TensorRT-LLM image carries (``trtllm-bench`` and an importable ``tensorrt_llm`` package that
reports a version). Its config sets PATH/LD_LIBRARY_PATH/CUDA_HOME the way NVIDIA's images do, so the
chroot launcher's "environment from the image config" is exercised for real.

The debootstrap tarball is cached in ``$SPARKFLEET_CACHE`` (default ``~/.cache/sparkfleet``); the image is
tagged with a hash of its recipe and stand-ins, so an unchanged recipe is never rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from fakefleet import STANDINS, FleetError, _run

IMAGE_REPO = "sparkfleet-test/trtllm"
SUITE = "bookworm"
PACKAGES = "python3,python3-numpy"
MIRROR = os.environ.get("SPARKFLEET_DEBIAN_MIRROR", "http://deb.debian.org/debian")
IMAGE_TOOLS = ("trtllm-bench",)  # stand-ins that live inside the image (the engine's software)
TRTLLM_VERSION = "1.1.0rc3"
IMAGE_ENV = {
    "PATH": "/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/usr/lib/python3/dist-packages/tensorrt_llm/libs",
    "CUDA_HOME": "/usr/local/cuda",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "SPARKFLEET_IMAGE_MARKER": "sparkfleet-test-image",
}
DOCKERD_LOG = "/var/log/sparkfleet-test-dockerd.log"


def cache_dir() -> Path:
    path = Path(os.environ.get("SPARKFLEET_CACHE", Path.home() / ".cache" / "sparkfleet"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def docker_ok() -> bool:
    return shutil.which("docker") is not None and _run(["docker", "info"], check=False).returncode == 0


def ensure_dockerd(timeout: float = 60) -> bool:
    """Start dockerd when none answers. Returns True when this call started it (so it should stop it)."""
    with _cache_lock():
        return _ensure_dockerd(timeout)


def _ensure_dockerd(timeout: float) -> bool:
    if docker_ok():
        return False
    dockerd = shutil.which("dockerd")
    if not dockerd:
        raise FleetError("no dockerd: install Debian's docker.io")
    with open(DOCKERD_LOG, "ab") as log:
        subprocess.Popen([dockerd], stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if docker_ok():
            return True
        time.sleep(0.5)
    raise FleetError(f"dockerd did not answer within {timeout:.0f}s; see {DOCKERD_LOG}")


def stop_dockerd() -> None:
    pid_file = Path("/var/run/docker.pid")
    if pid_file.exists():
        _run(["kill", pid_file.read_text().strip()], check=False)


def _recipe_hash() -> str:
    h = hashlib.sha256(f"{SUITE}|{PACKAGES}|{TRTLLM_VERSION}|{sorted(IMAGE_ENV.items())}".encode())
    for tool in IMAGE_TOOLS:
        h.update((STANDINS / tool).read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:12]


def base_tarball() -> Path:
    """debootstrap minbase + python3 + numpy, cached as a tarball (about 40 s the first time)."""
    key = hashlib.sha256(f"{SUITE}|{PACKAGES}|{MIRROR}".encode()).hexdigest()[:12]
    out = cache_dir() / f"{SUITE}-minbase-{key}.tar"
    if out.exists():
        return out
    if not shutil.which("debootstrap"):
        raise FleetError("no debootstrap: install Debian's debootstrap to build the test image")
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        root = Path(tmp) / "root"
        proc = _run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(root), MIRROR],
                    check=False)
        if proc.returncode != 0:
            raise FleetError(f"debootstrap failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(root / junk, ignore_errors=True)
        partial = out.with_suffix(".partial")
        _run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."])
        partial.rename(out)  # atomic: a killed build never leaves a tarball that looks complete
    return out


def _overlay_tar(path: Path) -> None:
    """Files the image adds on top of the base: the engine stand-ins and a tensorrt_llm package."""
    with tarfile.open(path, "w") as tar:
        for tool in IMAGE_TOOLS:
            info = tar.gettarinfo(str(STANDINS / tool), arcname=f"./usr/local/bin/{tool}")
            info.mode, info.uid, info.gid, info.uname, info.gname = 0o755, 0, 0, "root", "root"
            with open(STANDINS / tool, "rb") as fh:
                tar.addfile(info, fh)
        init = f'"""Stand-in for the TensorRT-LLM package (tests only)."""\n__version__ = "{TRTLLM_VERSION}"\n'
        _add_text(tar, "./usr/lib/python3/dist-packages/tensorrt_llm/__init__.py", init)
        _add_text(tar, "./usr/local/cuda/lib64/.keep", "")
        _add_text(tar, "./usr/local/cuda/bin/.keep", "")


def _add_text(tar: tarfile.TarFile, name: str, text: str) -> None:
    import io

    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
    tar.addfile(info, io.BytesIO(data))


@contextlib.contextmanager
def _cache_lock():
    """Parallel test workers build the base tarball and the image once, not once each."""
    with open(cache_dir() / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def ensure_test_image() -> str:
    """Return the test image reference, building it when its recipe changed."""
    with _cache_lock():
        return _ensure_test_image()


def _ensure_test_image() -> str:
    ref = f"{IMAGE_REPO}:{_recipe_hash()}"
    if _run(["docker", "image", "inspect", ref], check=False).returncode == 0:
        _run(["docker", "tag", ref, f"{IMAGE_REPO}:latest"])
        return ref
    base = base_tarball()
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        overlay = Path(tmp) / "overlay.tar"
        _overlay_tar(overlay)
        combined = Path(tmp) / "image.tar"
        shutil.copyfile(base, combined)
        # Append the overlay's members to a copy of the base tarball: one import, no extraction.
        _run(["tar", "--concatenate", "-f", str(combined), str(overlay)])
        changes = [arg for k, v in IMAGE_ENV.items() for arg in ("--change", f"ENV {k}={v}")]
        changes += ["--change", 'CMD ["/bin/bash"]']
        _run(["docker", "import", *changes, str(combined), ref])
    _run(["docker", "tag", ref, f"{IMAGE_REPO}:latest"])
    return ref
