"""The host code's single sources: one atomic writer (textfile.write_atomic), one /proc/meminfo parser
(meminfo), one /proc/PID/stat reader (procstat), one NVML / nvidia-smi adapter (gpu). Each is used by every
host-side caller; these tests pin the shared behaviour, and that no second copy creeps back in."""

from __future__ import annotations

import re
import stat
import types
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import textfile
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors import gpu, meminfo

REPO = Path(__file__).resolve().parents[4]
HOST_CODE = [*(REPO / "plugins" / "module_utils" / "sparkfleet_host").rglob("*.py"),
             *(REPO / "plugins" / "modules").glob("*.py")]


def test_write_atomic_writes_text_and_bytes_with_the_mode_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "new" / "dir" / "state.json"
    textfile.write_atomic(path, "é\n")
    assert path.read_bytes() == "é\n".encode() and stat.S_IMODE(path.stat().st_mode) == 0o644
    textfile.write_atomic(str(path), b"\x00\x01", mode=0o600)
    assert path.read_bytes() == b"\x00\x01" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]


def test_write_atomic_keeps_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    path.write_text("old\n")

    def broken(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(textfile.os, "replace", broken)
    with pytest.raises(OSError, match="disk gone"):
        textfile.write_atomic(path, "new\n")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["state.json"]


MEMINFO = """MemTotal:       131072000 kB
MemFree:          1000000 kB
MemAvailable:    23570000 kB
Cached:           garbage kB
HugePages_Total:        0
"""


def test_meminfo_parser_values_in_kib_keys_and_derived_use(tmp_path):
    everything = meminfo.parse_meminfo_kib(MEMINFO)
    assert everything == {"MemTotal": 131072000, "MemFree": 1000000, "MemAvailable": 23570000,
                          "HugePages_Total": 0}  # a value that is not a number is left out
    assert meminfo.parse_meminfo_kib(MEMINFO, ["MemAvailable"]) == {"MemAvailable": 23570000}
    assert meminfo.used_kib(MEMINFO) == 131072000 - 23570000
    assert meminfo.used_kib("MemTotal: 1 kB\n") is None


def test_nvidia_smi_argv_of_every_call():
    assert gpu.query_argv("smi", ("index", "pstate")) == ["smi", "--query-gpu=index,pstate",
                                                          "--format=csv,noheader,nounits"]
    assert gpu.query_argv("smi", ("index",), loop_ms=250, gpus=[0, 2])[-4:] == ["-lms", "250", "-i", "0,2"]
    assert gpu.compute_apps_argv("smi") == ["smi", "--query-compute-apps=pid,process_name,used_memory",
                                            "--format=csv,noheader"]
    assert gpu.persistence_mode_argv("smi", 1, True) == ["smi", "-i", "1", "-pm", "1"]
    assert gpu.power_limit_argv("smi", 0, 300.5) == ["smi", "-i", "0", "-pl", "300.5"]
    assert gpu.lock_clocks_argv("smi", 0, 1500, 1980) == ["smi", "-i", "0", "-lgc", "1500,1980"]
    assert gpu.reset_clocks_argv("smi", 0) == ["smi", "-i", "0", "-rgc"]
    assert gpu.report_argv("smi") == ["smi", "-q"]
    assert gpu.performance_argv("smi") == ["smi", "-q", "-d", "PERFORMANCE"]
    assert gpu.performance_argv("smi", 1) == ["smi", "-q", "-d", "PERFORMANCE", "-i", "1"]


class FakeNvml:
    def __init__(self, fail_init=False, memory=None):
        self.fail_init, self.memory, self.shut = fail_init, memory, 0

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut += 1

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, handle):
        if self.memory is None:
            raise RuntimeError("Not Supported")
        return types.SimpleNamespace(total=self.memory[0], free=self.memory[1])


def test_memory_info_nvml_then_nvidia_smi_then_an_error_naming_both():
    nvml = FakeNvml(memory=(8 << 30, 6 << 30))
    assert gpu.memory_info(nvml) == ("nvml", [{"index": 0, "total_bytes": 8 << 30, "free_bytes": 6 << 30}])
    assert nvml.shut == 1
    assert gpu.memory_info(FakeNvml()) == ("nvml", [{"index": 0, "total_bytes": None, "free_bytes": None}])
    calls = []

    def smi(argv):
        calls.append(list(argv))
        return 0, "0, 1024, 512\n1, [N/A], [N/A]\n", ""

    assert gpu.memory_info(FakeNvml(fail_init=True), "smi", smi) == (
        "nvidia-smi", [{"index": 0, "total_bytes": 1024 * 2**20, "free_bytes": 512 * 2**20},
                       {"index": 1, "total_bytes": None, "free_bytes": None}])
    assert calls == [gpu.query_argv("smi", gpu.MEMORY_FIELDS)]
    with pytest.raises(gpu.GpuSensorError, match="nvml: nvmlInit failed.*; nvidia-smi: .*not found"):
        gpu.memory_info(FakeNvml(fail_init=True), "smi", lambda argv: (127, "", "not found"))


def test_parse_readings_reads_one_loop_line():
    line = "0, GPU-1, NVIDIA GB10, 41, 11.5, 2405, [N/A], 3, [N/A], [N/A], P8, 0x0000000000000001\n"
    (reading,) = gpu.parse_readings(line)
    assert (reading.index, reading.temperature_c, reading.memory_used_mib, reading.throttle_reasons) == (
        0, 41.0, None, ["gpu_idle"])


def test_only_procstat_reads_proc_pid_stat():
    """The fingerprint's process table, a job's start time, a server's group and a child's CPU time all read the
    line through procstat (four parsers of it had grown, each with its own idea of where comm ends)."""
    opens_stat = re.compile(r"""["']stat["']\s*\)|/stat["']""")
    readers = sorted(p.name for p in HOST_CODE if opens_stat.search(p.read_text()))
    assert readers == ["procstat.py"]
