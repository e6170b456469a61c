"""A real Docker engine and a small TensorRT-LLM-shaped test image, built offline and cached.

The image is Debian bookworm minbase (debootstrap) with python3 and python3-numpy, plus the GPU-software
stand-ins a TensorRT-LLM image carries: ``trtllm-bench``, an importable ``tensorrt_llm`` package laid out as in
NVIDIA's images (``/usr/local/lib/python3.X/dist-packages/tensorrt_llm/version.py``), the package modules that
tell its CLI surface (``bench/dataset/prepare_dataset.py`` where the version has ``prepare-dataset``), and
``/app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py`` where the version has the standalone script, and a
``cupy`` stand-in (``tests/fleet/standins/python/cupy``, in the same dist-packages) for the readiness probe's GPU
load: it has a device only where SPARKFLEET_FAKE_GPU_LOAD is set, so the image's other users still find no GPU
array library but numpy. A ``torch`` stand-in (``tests/fleet/standins/python/torch``, there too) runs the pair
preflight's NCCL test inside the image (cluster/nccl_env.py's SCRIPT: torch.distributed over a real TCP
rendezvous, NCCL's INFO lines, modelled all-reduce times); its CUDA device exists only where
SPARKFLEET_FAKE_TORCH_CUDA is set, so elsewhere torch sees no GPU and the readiness probe still takes cupy. The
version is a parameter (default :data:`TRTLLM_VERSION`, the version of ``spark-single-gpu-dev``); the
stand-ins enforce that version's command tree (tests/data/trtllm-cli). Its config sets
PATH/LD_LIBRARY_PATH/CUDA_HOME the way NVIDIA's images do, so the
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
from trtllm_sources import click_sources

IMAGE_REPO = "sparkfleet-test/trtllm"
SUITE = "bookworm"
PACKAGES = "python3,python3-numpy"
MIRROR = os.environ.get("SPARKFLEET_DEBIAN_MIRROR", "http://deb.debian.org/debian")
IMAGE_TOOLS = ("trtllm-bench",)  # stand-ins that live inside the image (the engine's software)
#: Python packages that stand in for GPU software inside the image (each a directory under it), into PYTHON_LIB.
IMAGE_PYTHON = STANDINS / "python"
IMAGE_PACKAGES = ("cupy", "torch")
TRTLLM_VERSION = "1.1.0rc3"
#: Versions the test image can be built as (each has a command tree in tests/data/trtllm-cli).
TRTLLM_VERSIONS = ("1.1.0rc3", "1.2.0rc6", "1.2.0rc8", "1.2.1", "1.3.0rc13", "1.3.0rc29")
CLI_TREES = STANDINS.parent.parent / "data" / "trtllm-cli"
PYTHON_LIB = "usr/local/lib/python3.11/dist-packages"  # bookworm's python3 reads it, as NGC images' python does
SCRIPT = "app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py"
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


def _recipe_hash(version: str = TRTLLM_VERSION) -> str:
    h = hashlib.sha256(f"{SUITE}|{PACKAGES}|{version}|{sorted(IMAGE_ENV.items())}".encode())
    for tool in (*IMAGE_TOOLS, "prepare_dataset.py"):
        h.update((STANDINS / tool).read_bytes())
    h.update((Path(__file__).parent / "trtllm_sources.py").read_bytes())
    for tree in sorted(CLI_TREES.glob("*.json")):
        h.update(tree.read_bytes())
    for path, name in _package_files():
        h.update(name.encode() + b"\0" + path.read_bytes())
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


def cli_tree(version: str) -> dict:
    """The command trees (tests/data/trtllm-cli) that cover ``version``."""
    import json
    import re

    for path in sorted(CLI_TREES.glob("*.json")):
        data = json.loads(path.read_text())
        applies = data["applies_to"]
        if version in applies.get("versions", []) or re.fullmatch(applies.get("pattern") or "^$", version):
            return data
    raise FleetError(f"no command tree for TensorRT-LLM {version} in {CLI_TREES}")


def _add_file(tar: tarfile.TarFile, src: Path, name: str, mode: int) -> None:
    info = tar.gettarinfo(str(src), arcname=name)
    info.mode, info.uid, info.gid, info.uname, info.gname = mode, 0, 0, "root", "root"
    with open(src, "rb") as fh:
        tar.addfile(info, fh)


def _package_files() -> list[tuple[Path, str]]:
    """(file, its name under PYTHON_LIB) for each stand-in package the image carries (no bytecode caches)."""
    return [(f, str(f.relative_to(IMAGE_PYTHON))) for pkg in IMAGE_PACKAGES
            for f in sorted((IMAGE_PYTHON / pkg).rglob("*.py"))]


def _overlay_tar(path: Path, version: str = TRTLLM_VERSION) -> None:
    """Files the image adds on top of the base: the engine stand-ins and a tensorrt_llm package of ``version``
    whose files say what its CLI offers (as engine_probe reads them)."""
    tree = cli_tree(version)
    pkg = f"./{PYTHON_LIB}/tensorrt_llm"
    with tarfile.open(path, "w") as tar:
        for tool in IMAGE_TOOLS:
            _add_file(tar, STANDINS / tool, f"./usr/local/bin/{tool}", 0o755)
        for tree_file in sorted(CLI_TREES.glob("*.json")):  # the stand-ins enforce the version's tree
            _add_file(tar, tree_file, f"./usr/local/share/sparkfleet-standin/trtllm-cli/{tree_file.name}", 0o644)
        # What engine_probe reads: click sources shaped like NVIDIA's (commands/bench.py and the modules it
        # registers), written from the version's command tree; nothing of them runs (the stand-in does).
        for rel, text in click_sources(tree, version).items():
            _add_text(tar, f"{pkg}/{rel}", text)
        if "prepare_dataset.py" in tree["programs"]:
            _add_file(tar, STANDINS / "prepare_dataset.py", f"./{SCRIPT}", 0o755)
        for src, name in _package_files():
            _add_file(tar, src, f"./{PYTHON_LIB}/{name}", 0o644)
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


def ensure_test_image(version: str = TRTLLM_VERSION) -> str:
    """Return the test image reference for TensorRT-LLM ``version``, building it when its recipe changed."""
    with _cache_lock():
        return _ensure_test_image(version)


def build_image(version: str = TRTLLM_VERSION) -> str:
    """The test image as TensorRT-LLM ``version`` (one of TRTLLM_VERSIONS); its own tag per version."""
    return ensure_test_image(version)


def _ensure_test_image(version: str = TRTLLM_VERSION) -> str:
    suffix = "" if version == TRTLLM_VERSION else f"{version}-"
    ref = f"{IMAGE_REPO}:{suffix}{_recipe_hash(version)}"
    latest = f"{IMAGE_REPO}:latest" if version == TRTLLM_VERSION else f"{IMAGE_REPO}:{version}"
    if _run(["docker", "image", "inspect", ref], check=False).returncode == 0:
        _run(["docker", "tag", ref, latest])
        return ref
    base = base_tarball()
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        overlay = Path(tmp) / "overlay.tar"
        _overlay_tar(overlay, version)
        combined = Path(tmp) / "image.tar"
        shutil.copyfile(base, combined)
        # Append the overlay's members to a copy of the base tarball: one import, no extraction.
        _run(["tar", "--concatenate", "-f", str(combined), str(overlay)])
        changes = [arg for k, v in IMAGE_ENV.items() for arg in ("--change", f"ENV {k}={v}")]
        changes += ["--change", 'CMD ["/bin/bash"]']
        _run(["docker", "import", *changes, str(combined), ref])
    _run(["docker", "tag", ref, latest])
    return ref
