"""A real llama.cpp `llama-server`, built from source once per machine and cached, for serving tests.

Source: the PyPI sdist of llama-cpp-python (pinned below), which vendors the whole llama.cpp tree at
vendor/llama.cpp, tools/server included; PyPI is reachable where GitHub is not. Build: CPU only, Release, static
libraries, GGML_NATIVE=OFF (not tuned to the build machine: on x86-64 ggml then enables its fixed set
SSE4.2/AVX/AVX2/FMA/F16C/BMI2, i.e. any Haswell-or-newer CPU; on aarch64 the armv8-a baseline), no OpenMP (libgomp
is not in a slim image) and libstdc++/libgcc linked statically: the binary needs only glibc's libc, libm and
ld.so (built on bookworm: glibc >= 2.36), so it also runs inside a Debian bookworm image or chroot.
The embedded web UI is neither built (npm) nor downloaded (LLAMA_USE_PREBUILT_UI would fetch it from Hugging Face
at build time): the server answers the API without it. A cold build takes about 8.5 minutes on 2 cores.

Cache: <cache_dir>/llama.cpp-<version>-<arch>-<flags digest>/{llama-server,ggml-rpc-server} with build.json
beside it (the marker, written last); a lock file <cache_dir>/llama.cpp-<version>-<arch>-<flags digest>.lock
makes parallel pytest workers build once.

Usage: python tests/fleet/llamacpp.py build [--cache-dir DIR] [--jobs N]   (prints the binary's path)
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

# llama-cpp-python 0.3.36 on PyPI (https://pypi.org/project/llama-cpp-python/0.3.36/), sdist
# llama_cpp_python-0.3.36.tar.gz: vendor/llama.cpp is llama.cpp at the commit that release pins.
SDIST = "llama-cpp-python"
VERSION = "0.3.36"
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DGGML_OPENMP=OFF", "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DGGML_RPC=ON",
    "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc",
]
TOOLS = ("cmake", "cc", "c++")
#: What a build leaves in the cache: the server, and the RPC server a multi-node llama.cpp run starts on its
#: workers (tools/rpc/CMakeLists.txt: target ggml-rpc-server; llama-server --rpc HOST:PORT offloads to it).
BINARIES = ("llama-server", "ggml-rpc-server")
DEFAULT_CACHE = Path.home() / ".cache" / "sparkfleet"


class BuildError(RuntimeError):
    """The server cannot be built here (missing tools, failed download or compile); the message says which."""


def missing_tools() -> list[str]:
    """The build tools not on PATH (empty when a build can run)."""
    return [t for t in TOOLS if shutil.which(t) is None]


def cache_path(cache_dir: Path | str | None = None) -> Path:
    """The directory that holds (or will hold) llama-server for this version and CPU architecture."""
    # The flags are in the name: builds with other flags (an older checkout's) keep their own cache.
    flags = hashlib.sha256(json.dumps(CMAKE_FLAGS).encode()).hexdigest()[:8]
    return Path(cache_dir or DEFAULT_CACHE).expanduser() / f"llama.cpp-{VERSION}-{platform.machine()}-{flags}"


def _cached(target: Path) -> Path | None:
    binary, marker = target / "llama-server", target / "build.json"
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if info.get("version") != VERSION or info.get("cmake_flags") != CMAKE_FLAGS \
            or not all((target / name).is_file() for name in BINARIES):
        return None
    return binary


def _run(argv: list[str], log, cwd: Path | None = None) -> None:
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    rc = subprocess.run(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise BuildError(f"{argv[0]} {argv[1]} failed with exit code {rc}; see {log.name}")


def _download_sdist(work: Path, log) -> Path:
    """pip download of the pinned sdist (never a wheel: we want the source tree)."""
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
          "-d", str(work), f"{SDIST}=={VERSION}"], log)
    found = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise BuildError(f"pip download left no llama_cpp_python sdist in {work}")
    with tarfile.open(found[0]) as tar:
        tar.extractall(work, filter="data")
    source = work / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if not (source / "tools" / "server").is_dir():
        raise BuildError(f"{found[0].name} has no vendor/llama.cpp/tools/server")
    return source


def _build(target: Path, jobs: int) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"{target.name}.build-", dir=target.parent) as tmp:
        work = Path(tmp)
        with open(target.parent / f"{target.name}.build.log", "w") as log:
            source = _download_sdist(work, log)
            build = work / "build"
            _run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_FLAGS], log)
            _run(["cmake", "--build", str(build), "--target", *BINARIES, "-j", str(jobs)], log)
        staging = work / "out"
        staging.mkdir()
        for name in BINARIES:
            built = build / "bin" / name
            if not built.is_file():
                raise BuildError(f"the build finished without {built}")
            shutil.copy2(built, staging / name)
        digest = hashlib.sha256((staging / "llama-server").read_bytes()).hexdigest()
        info = {"sdist": f"{SDIST}=={VERSION}", "version": VERSION, "arch": platform.machine(),
                "cmake_flags": CMAKE_FLAGS, "build_s": round(time.monotonic() - started, 1), "jobs": jobs,
                "sha256": digest, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (staging / "build.json").write_text(json.dumps(info, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target / "llama-server"


def ensure_llama_server(cache_dir: Path | str | None = None, jobs: int | None = None) -> Path:
    """Path of a llama-server binary for this machine: the cached one, else built now (minutes) and cached.
    Raises BuildError naming the missing tools when cmake or a C/C++ compiler is absent."""
    target = cache_path(cache_dir)
    binary = _cached(target)
    if binary:
        return binary
    missing = missing_tools()
    if missing:
        raise BuildError(f"building llama-server needs {', '.join(missing)} on PATH "
                         "(Debian: apt-get install cmake g++)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)      # a second worker waits here, then finds the cache filled
        return _cached(target) or _build(target, jobs or os.cpu_count() or 1)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(binary: Path, model: Path, port: int, log: Path, args: list[str] = ()) -> subprocess.Popen:
    """llama-server on 127.0.0.1:port serving model under its file stem as the model name; output to log."""
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--alias", model.stem, *args]
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def wait_ready(proc: subprocess.Popen, port: int, log: Path, timeout: float = 120.0, host: str = "127.0.0.1") -> float:
    """Seconds until GET http://host:port/health answers 200; raises RuntimeError with the log's tail if the server
    exits or the timeout passes first."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return time.monotonic() - started
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"llama-server not ready on port {port} after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen, grace: float = 10.0) -> int:
    """Terminate, then kill after grace seconds; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build"])
    parser.add_argument("--cache-dir", default=None, help=f"default {DEFAULT_CACHE}")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: all CPUs)")
    args = parser.parse_args(argv)
    try:
        print(ensure_llama_server(args.cache_dir, args.jobs))
    except BuildError as err:
        print(f"llamacpp.py: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
