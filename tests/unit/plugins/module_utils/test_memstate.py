"""Per-run memory state (issue 15): /proc/meminfo, cgroup v1/v2 trees, CUDA's free memory, page-cache drops,
the peak tracker and the record's memory section - on fake /proc and cgroup trees in tmp dirs."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from _ansible_modules import host_util

memstate = host_util("memstate")
gpu = host_util("gpu")

KB = 1024
GIB_KB = 1024 * 1024


def meminfo_text(total=120, free=10, available=60, cached=45, buffers=1, shmem=2) -> str:
    return "".join(f"{k}:{v * GIB_KB:>15} kB\n" for k, v in (
        ("MemTotal", total), ("MemFree", free), ("MemAvailable", available), ("Buffers", buffers),
        ("Cached", cached), ("SwapCached", 0), ("Active", 30), ("Shmem", shmem)))


def v2_cgroup(root: Path, current=3, peak=5, limit="max", file=1, anon=2) -> Path:
    d = root / "system.slice" / "docker-abc.scope"
    d.mkdir(parents=True)
    (d / "memory.current").write_text(f"{current * 2**30}\n")
    (d / "memory.peak").write_text(f"{peak * 2**30}\n")
    (d / "memory.max").write_text(f"{limit if limit == 'max' else limit * 2**30}\n")
    (d / "memory.stat").write_text(f"anon {anon * 2**30}\nfile {file * 2**30}\nkernel 4096\nshmem 0\n")
    return d


def test_meminfo_fields_and_derived_use():
    m = memstate.parse_meminfo(meminfo_text())
    assert m["mem_total_gib"] == 120 and m["mem_free_gib"] == 10 and m["mem_available_gib"] == 60
    assert m["cached_gib"] == 45 and m["buffers_gib"] == 1 and m["shmem_gib"] == 2
    assert m["used_gib"] == 60 and m["not_free_gib"] == 110  # page cache counts as used for CUDA on a Spark


def test_meminfo_missing_keys_are_none(tmp_path):
    m = memstate.parse_meminfo("MemTotal: 1048576 kB\nGarbage: x\n")
    assert m["mem_total_gib"] == 1 and m["cached_gib"] is None and m["used_gib"] is None
    assert memstate.read_meminfo(str(tmp_path / "absent")) is None


def test_memory_stat_v2_and_v1():
    v2 = memstate.parse_memory_stat("anon 2147483648\nfile 1073741824\nshmem 0\n")
    assert v2 == {"file_gib": 1, "anon_gib": 2, "shmem_gib": 0}
    v1 = memstate.parse_memory_stat("cache 10\nrss 20\ntotal_cache 1073741824\ntotal_rss 3221225472\n")
    assert v1["file_gib"] == 1 and v1["anon_gib"] == 3 and v1["shmem_gib"] is None


def test_cgroup_v2_reading_with_and_without_a_limit(tmp_path):
    d = v2_cgroup(tmp_path / "a")
    cg = memstate.Cgroup(str(d))
    assert cg.version == 2
    assert cg.read() == {"current_gib": 3, "peak_gib": 5, "limit_gib": None, "file_gib": 1, "anon_gib": 2,
                         "shmem_gib": 0}
    cg.close()
    limited = memstate.Cgroup(str(v2_cgroup(tmp_path / "b", limit=8)))
    assert limited.read()["limit_gib"] == 8
    limited.close()


def test_cgroup_v1_reading_and_unlimited(tmp_path):
    d = tmp_path / "memory" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "memory.usage_in_bytes").write_text(str(2 * 2**30))
    (d / "memory.max_usage_in_bytes").write_text(str(4 * 2**30))
    (d / "memory.limit_in_bytes").write_text("9223372036854771712")
    (d / "memory.stat").write_text("cache 1073741824\nrss 1073741824\ntotal_cache 1073741824\ntotal_rss 1073741824\n")
    cg = memstate.Cgroup(str(d))
    assert cg.version == 1
    r = cg.read()
    assert (r["current_gib"], r["peak_gib"], r["limit_gib"], r["file_gib"], r["anon_gib"]) == (2, 4, None, 1, 1)
    cg.close()


def test_cgroup_without_memory_files_is_refused(tmp_path):
    with pytest.raises(OSError):
        memstate.Cgroup(str(tmp_path))


def test_cgroup_that_disappears_keeps_its_last_reading(tmp_path):
    cg = memstate.Cgroup(str(v2_cgroup(tmp_path)))
    first = cg.read()
    cg.close()  # as if the kernel removed the cgroup: reads fail from now on
    assert cg.read() == first


def test_cgroup_dir_of_pid_v2_and_v1(tmp_path):
    proc, root = tmp_path / "proc", tmp_path / "cg"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("0::/system.slice/docker-abc.scope\n")
    d = v2_cgroup(root)
    assert memstate.cgroup_dir_of_pid(42, str(proc), str(root)) == str(d)
    (proc / "43").mkdir()
    (proc / "43" / "cgroup").write_text("7:memory:/docker/abc\n0::/\n")
    v1 = root / "memory" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "memory.usage_in_bytes").write_text("1")
    assert memstate.cgroup_dir_of_pid(43, str(proc), str(root)) == str(v1)
    assert memstate.cgroup_dir_of_pid(44, str(proc), str(root)) is None
    assert memstate.cgroup_dir_of_file(str(d / "memory.current")) == str(d)


class FakeNvml:
    def __init__(self, free=None, total=None, fail_init=False):
        self.free, self.total, self.fail_init, self.shut = free, total, fail_init, False

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        if self.free is None:
            raise RuntimeError("Not Supported")
        return types.SimpleNamespace(free=self.free, total=self.total, used=self.total - self.free)


def test_cuda_free_from_nvml():
    nvml = FakeNvml(free=60 * 2**30, total=80 * 2**30)
    out = memstate.cuda_memory(nvml=nvml)
    assert out["source"] == "nvml" and out["free_gib"] == 60 and out["gpus"][0]["total_gib"] == 80 and nvml.shut


def test_cuda_free_not_supported_on_a_gb10():
    out = memstate.cuda_memory(nvml=FakeNvml())
    assert out["free_gib"] is None and "[N/A]" in out["note"]


def test_cuda_free_from_nvidia_smi_when_nvml_does_not_work():
    calls = []

    def runner(argv):
        calls.append(argv)
        return 0, "0, 81559, 80943\n1, 81559, 1000\n", ""

    out = memstate.cuda_memory(nvml=FakeNvml(fail_init=True), runner=runner)
    assert calls[0][1] == "--query-gpu=index,memory.total,memory.free"
    assert out["source"] == "nvidia-smi" and out["free_gib"] == pytest.approx(81943 / 1024, abs=1e-3)
    gb10 = memstate.cuda_memory(nvml=FakeNvml(fail_init=True), runner=lambda a: (0, "0, [N/A], [N/A]\n", ""))
    assert gb10["source"] == "nvidia-smi" and gb10["free_gib"] is None
    none = memstate.cuda_memory(nvml=FakeNvml(fail_init=True), runner=lambda a: (127, "", "not found"))
    assert none["source"] is None and "no GPU sensor" in none["note"]


def test_cuda_free_from_sampler_readings():
    r = [gpu.GpuReading(index=0, memory_used_mib=1024, memory_total_mib=4096),
         gpu.GpuReading(index=1, memory_used_mib=0, memory_total_mib=1024)]
    assert memstate.cuda_free_from_readings(r) == 4.0
    assert memstate.cuda_free_from_readings([gpu.GpuReading(index=0)]) is None
    assert memstate.cuda_free_from_readings([]) is None


def test_drop_page_cache_writes_3_after_sync_and_records_cached(tmp_path):
    knob, info, synced = tmp_path / "drop_caches", tmp_path / "meminfo", []
    knob.write_text("0\n")
    info.write_text(meminfo_text(cached=40))

    def sync():
        synced.append(True)
        info.write_text(meminfo_text(cached=40))

    out = memstate.drop_page_cache(str(knob), str(info), sync=sync)
    assert knob.read_text() == "3\n" and synced == [True]
    assert out["requested"] and out["done"] and out["error"] is None and out["cached_before_gib"] == 40


def test_drop_page_cache_that_cannot_write_says_so(tmp_path):
    out = memstate.drop_page_cache(str(tmp_path / "no" / "drop_caches"), str(tmp_path / "meminfo"),
                                   sync=lambda: None)
    assert out["requested"] and not out["done"] and "drop_caches" in out["error"]


def test_peak_tracker_keeps_the_state_of_the_highest_device_wide_use(tmp_path):
    d = v2_cgroup(tmp_path, current=3, limit=16)
    t = memstate.PeakTracker()
    t.sample(0.0, meminfo_text(free=50, cached=20), [])
    t.set_cgroup(str(d / "memory.current"))
    t.sample(1.0, meminfo_text(free=5, cached=44, available=50), [])
    (d / "memory.current").write_text(str(7 * 2**30))
    t.sample(2.0, meminfo_text(free=30, cached=30, available=55), [])
    t.close()
    s = t.summary()
    assert s["samples"] == 3 and s["peak"]["t_s"] == 1.0
    assert s["peak"]["meminfo"]["not_free_gib"] == 115 and s["peak"]["cgroup"]["current_gib"] == 3
    assert s["cgroup"]["paths"] == [str(d)] and s["cgroup"]["limit_gib"] == 16
    assert s["cgroup"]["current_gib_max"] == 7 and s["cgroup"]["first"]["t_s"] == 1.0
    assert s["max_cached_gib"] == 44 and s["min_mem_available_gib"] == 50


def test_peak_tracker_without_meminfo_or_cgroup(tmp_path):
    t = memstate.PeakTracker()
    t.set_cgroup(str(tmp_path / "gone"))
    t.sample(0.5, None, [])
    s = t.summary()
    assert s["peak"]["meminfo"] is None and s["cgroup"] is None and s["errors"]


def test_memory_flags_keep_values_with_their_flag():
    flags = ["--gpus", "all", "--ipc=host", "--shm-size=60g", "--ulimit", "memlock=-1", "--ulimit",
             "stack=67108864", "--memory", "32g", "--network=none", "-m", "8g", "--init"]
    assert memstate.memory_flags(flags) == ["--gpus", "all", "--ipc=host", "--shm-size=60g", "--ulimit",
                                            "memlock=-1", "--ulimit", "stack=67108864", "--memory", "32g",
                                            "-m", "8g"]
    assert memstate.memory_flags(None) is None


def test_section_shape(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text(meminfo_text())
    t = memstate.PeakTracker()
    t.sample(0.0, meminfo_text(), [])
    start = memstate.start_state(cuda=False, meminfo=str(info))
    sec = memstate.section(None, start, t, ["--memory=8g", "--label", "x"])
    assert sec["version"] == 2 and "kv_fraction" not in sec  # the record keeps it once: workload_params
    assert sec["drop_caches"] == {"requested": False, "done": False}
    assert sec["container_memory_flags"] == ["--memory=8g"]
    assert sec["start"]["meminfo"]["mem_total_gib"] == 120 and sec["start"]["cuda"] is None
    assert sec["peak"]["meminfo"]["cached_gib"] == 45 and sec["samples"] == 1
