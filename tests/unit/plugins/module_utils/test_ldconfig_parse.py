"""Driver-library discovery from `ldconfig -p` (module_utils level), on written samples of real hosts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from _ansible_modules import host_util

sc = host_util("chroot")

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "ldconfig"
SPARK = (FIXTURES / "dgx-spark-aarch64-580.txt").read_text()
H100 = (FIXTURES / "h100-x86_64-580.txt").read_text()


def test_parse_skips_the_header_and_reads_flags():
    entries = sc.parse_ldconfig(H100)
    assert len(entries) == len(H100.splitlines()) - 1
    ml = [e for e in entries if e.soname == "libnvidia-ml.so.1"]
    assert {e.flags for e in ml} == {("libc6", "x86-64"), ("libc6",), ("libc6", "x86-64", "OS ABI: Linux 3.2.0")}
    assert all(e.path.endswith("/libnvidia-ml.so.1") for e in ml)


def test_dgx_spark_driver_libraries():
    libs = sc.driver_libraries(SPARK, "aarch64")
    names = {e.soname for e in libs}
    # What CUDA and NVML need from the driver, and what else driver 580 ships.
    assert {"libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1",
            "libnvidia-nvvm.so.4", "libcudadebugger.so.1", "libnvidia-gpucomp.so.580.95.05",
            "libnvcuvid.so.1", "libnvoptix.so.1", "libnvidia-encode.so.1"} <= names
    # Not the driver's: CUDA toolkit, container toolkit, desktop glue, system libraries.
    for other in ("libcudart.so.13", "libcublas.so.13", "libnvrtc.so.13", "libnvJitLink.so.13",
                  "libnvidia-container.so.1", "libnvidia-container-go.so.1", "libnvidia-egl-wayland.so.1",
                  "libnvidia-egl-gbm.so.1", "libz.so.1", "libGLX_nvidia.so.0"):
        assert other not in names
    assert all(e.path.startswith("/lib/aarch64-linux-gnu/") for e in libs)
    assert len({e.path for e in libs}) == len(libs)


def test_h100_host_leaves_32_bit_libraries_out():
    libs = sc.driver_libraries(H100, "x86_64")
    paths = [e.path for e in libs]
    assert "/lib/x86_64-linux-gnu/libcuda.so.1" in paths
    assert "/lib/x86_64-linux-gnu/libnvidia-fbc.so.1" in paths
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in paths  # the entry with the OS ABI suffix
    assert not [p for p in paths if "i386" in p]
    assert not [p for p in paths if "/usr/local/cuda" in p]


def test_another_abi_finds_nothing():
    assert sc.driver_libraries(H100, "aarch64") == []
    assert sc.driver_libraries(SPARK, "x86_64") == []


def test_patterns_and_excludes_are_configurable():
    libs = sc.driver_libraries(SPARK, "aarch64", patterns=["libcuda.so.*", "libnvidia-ml.so.*"], excludes=[])
    assert sorted(e.soname for e in libs) == ["libcuda.so.1", "libnvidia-ml.so.1"]
    with_container = sc.driver_libraries(SPARK, "aarch64", excludes=[])
    assert "libnvidia-container.so.1" in {e.soname for e in with_container}


@pytest.mark.parametrize("text", ["", "0 libs found in cache `/etc/ld.so.cache'\n", "garbage\n\tno arrow here\n"])
def test_empty_or_odd_output_finds_nothing(text):
    assert sc.driver_libraries(text, "x86_64") == []


def test_this_hosts_ldconfig_output_parses():
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if not Path(ldconfig).exists():
        pytest.skip("no ldconfig here")
    out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    entries = sc.parse_ldconfig(out)
    assert entries and any(e.soname.startswith("libc.so") for e in entries)
