"""The environment fingerprint (sparkfleet_host.sensors.fingerprint): what a running benchmark really loaded, read from
/proc - parsed from real-looking text and taken from live processes of this machine."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _ansible_modules import host_util

fp = host_util("fingerprint")

ROOTFS = "/var/lib/sparkfleet/rootfs/sha256-2b6f1e0c"
LIBDIR = "/usr/lib/aarch64-linux-gnu"
SITE = "/usr/local/lib/python3.12/dist-packages"
CUDART = "/usr/local/cuda/targets/sbsa-linux/lib/libcudart.so.13.0.88"
# /proc/PID/maps of a native trtllm-bench (read from the host: the chroot prefix is in the paths), shaped as on
# a DGX Spark with an NGC TensorRT-LLM image: the driver bound over its sonames, the rest from the image.
NATIVE_MAPS = f"""\
aaaab8a10000-aaaab8d6c000 r-xp 00000000 103:02 1843360 {ROOTFS}/usr/bin/python3.12
ffff5a000000-ffff5a2f0000 r-xp 00000000 103:02 1702140 {ROOTFS}{LIBDIR}/libcuda.so.1
ffff59000000-ffff59180000 r-xp 00000000 103:02 1702141 {ROOTFS}{LIBDIR}/libnvidia-ml.so.1
ffff58000000-ffff58090000 r-xp 00000000 103:02 2200911 {ROOTFS}{CUDART}
ffff57000000-ffff57090000 r--p 00010000 103:02 2200911 {ROOTFS}{CUDART}
ffff56000000-ffff56800000 r-xp 00000000 103:02 2300100 {ROOTFS}{SITE}/nvidia/nccl/lib/libnccl.so.2
ffff50000000-ffff54000000 r-xp 00000000 103:02 2400100 {ROOTFS}/usr/local/tensorrt/lib/libnvinfer.so.10.13.3
ffff40000000-ffff48000000 r-xp 00000000 103:02 2500100 {ROOTFS}{SITE}/torch/lib/libtorch_cuda.so
ffff3f000000-ffff3f100000 r-xp 00000000 103:02 2500101 {ROOTFS}{SITE}/tensorrt_llm/libs/libtensorrt_llm.so
ffff3e000000-ffff3e100000 r-xp 00000000 103:02 2500102 {ROOTFS}{LIBDIR}/libc.so.6
ffff3d000000-ffff3d001000 rw-p 00000000 00:00 0                          [heap]
ffff3c000000-ffff3c001000 rw-s 00000000 00:05 1234                       /dev/nvidiactl
ffff3b000000-ffff3b001000 r-xp 00000000 103:02 2500103 {ROOTFS}/tmp/libgone.so (deleted)
"""
# Its /proc/PID/mountinfo: mount points relative to the process's root; the bind's root names the host file.
NATIVE_MOUNTINFO = (
    "300 1 103:02 / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
    f"310 300 103:02 {LIBDIR}/libcuda.so.580.95.05 {LIBDIR}/libcuda.so.1 ro,relatime - ext4 /dev/nvme0n1p2 rw\n"
    f"311 300 103:02 {LIBDIR}/libnvidia-ml.so.580.95.05 {LIBDIR}/libnvidia-ml.so.1 ro - ext4 /dev/nvme0n1p2 rw\n"
    "312 300 0:5 / /dev rw - devtmpfs udev rw\n")


def test_parse_maps_keeps_each_file_once_and_drops_anonymous_and_deleted_suffix():
    mapped = fp.parse_maps(NATIVE_MAPS)
    paths = [p for p, _ in mapped]
    assert paths.count(f"{ROOTFS}{CUDART}") == 1
    assert "[heap]" not in paths and f"{ROOTFS}/tmp/libgone.so" in paths


def test_split_library_names():
    assert fp.split_library("libcuda.so.580.95.05") == ("libcuda", "580.95.05")
    assert fp.split_library("libtorch_cuda.so") == ("libtorch_cuda", None)
    assert fp.split_library("libnvidia-ml.so.1") == ("libnvidia-ml", "1")
    assert fp.split_library("python3.12") is None


def test_library_entries_native_driver_version_from_the_bind_source():
    mapped = fp.parse_maps(NATIVE_MAPS)
    libs = {lib["name"]: lib for lib in fp.library_entries(mapped, ROOTFS, fp.parse_mount_roots(NATIVE_MOUNTINFO))}
    assert libs["libcuda"] == {"name": "libcuda", "version": "580.95.05", "source": "host",
                               "path": "/usr/lib/aarch64-linux-gnu/libcuda.so.1"}
    assert libs["libnvidia-ml"]["version"] == "580.95.05"
    assert libs["libcudart"] == {"name": "libcudart", "version": "13.0.88", "source": "image",
                                 "path": "/usr/local/cuda/targets/sbsa-linux/lib/libcudart.so.13.0.88"}
    assert libs["libnccl"]["version"] == "2" and libs["libnvinfer"]["version"] == "10.13.3"
    assert libs["libtorch_cuda"]["version"] is None and "libtensorrt_llm" in libs and "libc" not in libs


def test_compat_libcuda_in_a_container_is_marked_compat():
    maps = ("ffff7c000000-ffff7e3a1000 r-xp 00000000 00:30 77 "
            "/usr/local/cuda-13.0/compat/libcuda.so.590.44.01\n")
    (lib,) = fp.library_entries(fp.parse_maps(maps), "/", {})
    assert lib["source"] == "compat" and lib["version"] == "590.44.01"


def test_environ_and_versions(tmp_path):
    env = fp.parse_environ(b"PATH=/usr/bin\0LD_LIBRARY_PATH=/usr/local/tensorrt/lib:/usr/local/cuda/lib64\0X=a=b\0")
    assert env == {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/usr/local/tensorrt/lib:/usr/local/cuda/lib64", "X": "a=b"}
    site = tmp_path / "usr/local/lib/python3.12/dist-packages"
    (site / "torch-2.9.0a0+50eac811a6.nv25.9.dist-info").mkdir(parents=True)
    (site / "tensorrt_llm").mkdir()
    (site / "tensorrt_llm/version.py").write_text('# SPDX\n__version__ = "1.2.0rc6"\n')
    (site / "tensorrt-10.13.3.9.dist-info").mkdir()
    (site / "tensorrt_cu13-10.13.3.9.dist-info").mkdir()
    mapped = fp.parse_maps(NATIVE_MAPS)
    sites = fp.site_dirs(mapped, ROOTFS, "3.12")
    assert sites[0] == "/usr/local/lib/python3.12/dist-packages"
    assert fp.package_version(str(tmp_path), sites, "torch", "torch") == "2.9.0a0+50eac811a6.nv25.9"
    assert fp.package_version(str(tmp_path), sites, "tensorrt_llm", "tensorrt_llm") == "1.2.0rc6"
    assert fp.package_version(str(tmp_path), sites, "tensorrt", "tensorrt") == "10.13.3.9"
    assert fp.python_version("/usr/bin/python3.12", []) == "3.12"


def test_descendants():
    table = {1: ("init", 0, 1), 10: ("bash", 1, 1), 11: ("python3", 10, 9), 12: ("sleep", 11, 1), 20: ("x", 1, 1)}
    assert fp.descendants(10, table) == [(10, 0), (11, 1), (12, 2)]
    assert fp.descendants(99, table) == []


def _copy_as(tmp_path: Path, name: str) -> Path:
    found = ctypes.util.find_library("z")
    src = next((p for p in (f"/lib/x86_64-linux-gnu/{found}", f"/lib/aarch64-linux-gnu/{found}",
                            f"/usr/lib/x86_64-linux-gnu/{found}", f"/usr/lib/aarch64-linux-gnu/{found}")
                if found and os.path.exists(p)), None)
    if src is None:
        pytest.skip("no libz on this machine to stand in for a CUDA library")
    dest = tmp_path / name
    shutil.copy(src, dest)
    return dest


def test_sampler_on_a_live_process_tree_of_this_machine(tmp_path):
    """bash -> python that maps a library named like libcudart: the sampler finds the python below the root,
    its mapped library with the version from its name, its LD_LIBRARY_PATH and its Python version."""
    lib = _copy_as(tmp_path, "libcudart.so.12.9.79")
    code = f"import ctypes, time; ctypes.CDLL({str(lib)!r}); print('ready', flush=True); time.sleep(4)"
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": f"{tmp_path}:/usr/local/cuda/lib64", "TOKEN_X": "s"}
    proc = subprocess.Popen(["bash", "-c", f'{sys.executable} -c "$0"; true', code], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        sampler = fp.Sampler()
        sampler.start(proc.pid)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.6)
        result = sampler.stop()
    finally:
        proc.kill()
        proc.wait()
    assert result is not None and result["samples"] >= 1 and result["depth"] == 1
    assert result["comm"].startswith("python") and not result["chroot"]
    assert {"name": "libcudart", "version": "12.9.79", "path": str(lib), "source": "image"} in result["libraries"]
    assert result["env"]["LD_LIBRARY_PATH"] == f"{tmp_path}:/usr/local/cuda/lib64"
    assert "TOKEN_X" in result["env_names"] and "TOKEN_X" not in result["env"]  # names only, never other values
    assert result["python"] == "{}.{}".format(*sys.version_info[:2])


def test_sampler_of_a_process_that_is_gone_gives_none():
    proc = subprocess.Popen(["true"])
    proc.wait()
    sampler = fp.Sampler()
    sampler.start(proc.pid)
    time.sleep(0.3)
    assert sampler.stop() is None
    section = fp.section(None, "native", warnings=["w"])
    assert section["missing"] and section["warnings"] == ["w"] and section["environment_kind"] == "native"


def _print(libcuda=("580.95.05", "host"), ld="/usr/local/tensorrt/lib:/usr/local/cuda/lib64", torch="2.9.0"):
    return {"libraries": [{"name": "libcuda", "version": libcuda[0], "source": libcuda[1], "path": "/x"},
                          {"name": "libcudart", "version": "13.0.88", "source": "image", "path": "/y"}],
            "env": {"LD_LIBRARY_PATH": ld, "HOSTNAME": "abc"}, "python": "3.12",
            "packages": {"torch": torch, "tensorrt_llm": "1.2.0rc6", "tensorrt": None}}


def test_differences_name_what_is_not_isolation():
    assert fp.differences(_print(), dict(_print(), env={"LD_LIBRARY_PATH": _print()["env"]["LD_LIBRARY_PATH"],
                                                        "HOSTNAME": "other"})) == []
    diff = fp.differences(_print(), _print(libcuda=("590.44.01", "compat")))
    assert diff == ["native loaded libcuda 580.95.05 from the host, container libcuda 590.44.01 compat"]
    diff = fp.differences(_print(), _print(ld="/usr/local/cuda/lib64", torch="2.8.0"), "native", "docker")
    assert any(d.startswith("LD_LIBRARY_PATH differs") and "docker '/usr/local/cuda/lib64'" in d for d in diff)
    assert "torch 2.9.0 in native, 2.8.0 in docker" in diff
    assert fp.differences(_print(), {"missing": "no sample"}) == [] and fp.differences(None, _print()) == []
    assert fp.richest([None, {"libraries": []}, _print()]) == _print()


def test_a_bare_run_maps_only_the_hosts_files():
    libs = [{"name": "libcuda", "version": "580.159.04", "path": "/usr/lib/libcuda.so.580.159.04", "source": "image"},
            {"name": "libcuda", "version": "580.95.05", "path": "/usr/local/cuda/compat/libcuda.so.1",
             "source": "compat"}]
    bare = fp.section({"libraries": libs}, "bare")
    assert [lib["source"] for lib in bare["libraries"]] == ["host", "compat"]
    assert [lib["source"] for lib in fp.section({"libraries": libs}, "container")["libraries"]] == [
        "image", "compat"]
