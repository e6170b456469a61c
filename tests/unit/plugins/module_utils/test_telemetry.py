"""TelemetrySampler: rate, CSV layout, one persistent nvidia-smi child, cgroup and host memory, robustness."""

from __future__ import annotations

import csv
import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, host_util, sparkfleet_gpu

telemetry = host_util("telemetry")
TelemetrySampler = telemetry.TelemetrySampler
GpuReading = sparkfleet_gpu.GpuReading

HEADER = "t_s,gpu,gpu_temp_c,gpu_power_w,sm_clock_mhz,gpu_util_pct,throttle_reasons,mem_used_gib,cgroup_mem_gib"
GIB = 2**30


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The nvidia-smi stand-in first on PATH, with its own state file (a GB10 at idle)."""
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_STATE", str(tmp_path / "gpu.json"))
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_MODEL", "gb10")
    for name in ("SPARKFLEET_FAKE_GPU_LOAD", "SPARKFLEET_FAKE_GPU_COUNT", "SPARKFLEET_FAKE_NOW"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """`auto` must not find NVML, even on a GPU machine with pynvml installed."""

    def refuse(kind: str = "auto", **kw):
        raise sparkfleet_gpu.GpuSensorError("no NVML in this test")

    monkeypatch.setattr(telemetry, "open_sensor", refuse)


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry))
    return found


def wait_for(predicate, what: str, timeout: float = 60.0) -> None:
    """Until ``predicate()`` holds: a loaded machine delays the sampler, it does not change what it does.
    The generous limit only catches a sampler that never gets there."""
    def holds() -> bool:
        try:
            return bool(predicate())
        except IndexError:  # no row yet
            return False

    deadline = time.monotonic() + timeout
    while not holds():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def data_rows(path: Path) -> list[dict[str, str]]:
    """The complete rows written so far (a row being written is left out)."""
    if not path.exists():
        return []
    text = path.read_text()
    return rows(path) if text.endswith("\n") else list(csv.DictReader(text[:text.rfind("\n") + 1].splitlines()))


class VirtualClock:
    """The sampler's clock in virtual time (installed as the telemetry module's ``time``): waiting for a slot
    and a sensor's read time advance it, so a schedule is checked exactly, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def thread_time(self) -> float:
        return 0.0


class VirtualStop:
    """The sampler's stop event on a VirtualClock: waiting ``delay`` advances the clock by it."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock, self.event = clock, threading.Event()

    def wait(self, delay: float | None = None) -> bool:
        if not self.event.is_set() and delay:
            self.clock.now += delay
        return self.event.is_set()

    def set(self) -> None:
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()


def virtual_run(monkeypatch, tmp_path: Path, interval_s: float, sensor, reads: int, name: str = "t.csv"):
    """Sample with ``sensor`` on a virtual clock until it has been read ``reads`` times; (summary, rows)."""
    clock = VirtualClock()
    monkeypatch.setattr(telemetry, "time", clock)
    sampler = TelemetrySampler(str(tmp_path / name), interval_s=interval_s, sensor=sensor)
    sampler._stop = VirtualStop(clock)
    sensor.clock, sensor.stop_after, sensor.stop = clock, reads, sampler._stop.set
    sampler.start()
    sampler._thread.join(timeout=60)
    assert not sampler._thread.is_alive()
    return sampler.stop(), rows(tmp_path / name)


# --------------------------------------------------------------------------- with the nvidia-smi stand-in


def test_rows_at_the_rate_from_one_persistent_nvidia_smi(standin, no_nvml, monkeypatch):
    spawned: list[list[str]] = []
    real_popen = subprocess.Popen

    def counting_popen(argv, *a, **kw):
        spawned.append(list(argv))
        return real_popen(argv, *a, **kw)

    monkeypatch.setattr(telemetry.subprocess, "Popen", counting_popen)
    out = standin / "run" / "telemetry.csv"
    sampler = TelemetrySampler(str(out), interval_s=0.1)
    sampler.start()
    assert sampler.sensor_kind == "nvidia-smi"
    seen_children = []

    def enough_rows() -> bool:
        seen_children.append(children(os.getpid()))
        return len(data_rows(out)) >= 6

    wait_for(enough_rows, "six telemetry rows")
    summary = sampler.stop()

    assert out.read_text().splitlines()[0] == HEADER
    data = rows(out)
    assert len(data) >= 6
    assert summary["samples"] == summary["rows"] == len(data)
    times = [float(r["t_s"]) for r in data]
    # deadline-scheduled: sample k is never taken before its slot k * interval (a loaded machine only delays
    # it; the schedule itself is checked exactly on a virtual clock, test_slow_reads_do_not_stretch_the_schedule)
    assert times == sorted(times)
    for k, t in enumerate(times):
        assert t >= 0.1 * k - 0.002, (k, t)
    assert all(r["gpu"] == "0" and r["gpu_temp_c"] == "38" and r["gpu_power_w"] == "4" for r in data)
    assert all(r["sm_clock_mhz"] == "208" and r["gpu_util_pct"] == "0" for r in data)
    assert all(r["throttle_reasons"] == "gpu_idle" and float(r["mem_used_gib"]) > 0 for r in data)
    assert all(r["cgroup_mem_gib"] == "" for r in data)

    # One child for the whole run, in loop mode; nothing spawned per sample.
    assert len(spawned) == 1 and summary["processes_spawned"] == 1
    assert "-lms" in spawned[0] and spawned[0][spawned[0].index("-lms") + 1] == "100"
    assert all(c == {sampler.child_pid} for c in seen_children)
    assert children(os.getpid()) == set()  # killed and reaped by stop()

    assert summary["sensor"] == "nvidia-smi" and summary["errors"] == []
    assert summary["gpu_temp_c_max"] == summary["gpu_temp_c_mean"] == 38.0
    assert summary["gpu_power_w_mean"] == 4.0 and summary["sm_clock_mhz_mean"] == 208.0
    assert summary["throttle_reasons_seen"] == ["gpu_idle"]
    assert summary["mem_used_gib_max"] > 0 and summary["cgroup_mem_gib_max"] is None
    assert set(summary["jitter_ms"]) == {"p50", "p95", "max"} and summary["jitter_ms"]["p50"] >= 0
    assert summary["duration_s"] >= times[-1] and summary["interval_s"] == 0.1


def _wait_for_rows(path, n: int, timeout: float = 20.0) -> None:
    """The stand-in is a Python process: on a loaded machine its first line can take a while."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) > n:
            return
        time.sleep(0.05)


def test_gpu_selection_and_load(standin, no_nvml, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_COUNT", "2")
    marker = standin / "load"
    marker.touch()
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_LOAD", str(marker))
    both = TelemetrySampler(str(standin / "both.csv"), interval_s=0.1, sensor="nvidia-smi")
    both.start()
    _wait_for_rows(standin / "both.csv", 4)
    s_both = both.stop()
    # one row per GPU per sample; stop() may land between the two lines of the last nvidia-smi block
    assert s_both["gpus"] == [0, 1] and 2 * s_both["samples"] - 1 <= s_both["rows"] <= 2 * s_both["samples"]
    one = TelemetrySampler(str(standin / "one.csv"), interval_s=0.1, gpus=[1], sensor="nvidia-smi")
    one.start()
    _wait_for_rows(standin / "one.csv", 2)
    s_one = one.stop()
    data = rows(standin / "one.csv")
    assert {r["gpu"] for r in data} == {"1"} and s_one["gpus"] == [1]
    assert all(r["gpu_util_pct"] == "97" and r["sm_clock_mhz"] == "2405" for r in data)  # GB10 under load
    assert s_one["throttle_reasons_seen"] == [] and {r["throttle_reasons"] for r in data} == {"none"}


def test_cgroup_file_is_known_only_after_start(standin, no_nvml):
    cg = standin / "docker-abc.scope"
    cg.mkdir()
    (cg / "memory.current").write_text(f"{GIB}\n")
    out = standin / "t.csv"
    sampler = TelemetrySampler(str(out), interval_s=0.05, sensor="none")
    sampler.start()
    wait_for(lambda: len(data_rows(out)) >= 1, "a first row")
    sampler.set_cgroup_memory_file(str(cg))  # a cgroup directory: memory.current inside
    wait_for(lambda: any(r["cgroup_mem_gib"] == "1" for r in data_rows(out)), "a row with the cgroup's 1 GiB")
    (cg / "memory.current").write_text(f"{3 * GIB // 2}\n")
    wait_for(lambda: data_rows(out)[-1]["cgroup_mem_gib"] == "1.5", "a row with the cgroup's 1.5 GiB")
    summary = sampler.stop()
    cells = [r["cgroup_mem_gib"] for r in rows(standin / "t.csv")]
    assert cells[0] == "" and "1" in cells and cells[-1] == "1.5"
    assert summary["cgroup_mem_gib_max"] == 1.5 and summary["errors"] == []


def test_cgroup_v1_file_and_unreadable_file(tmp_path):
    v1 = tmp_path / "memory.usage_in_bytes"
    v1.write_text(str(2 * GIB))
    out = tmp_path / "t.csv"
    sampler = TelemetrySampler(str(out), interval_s=0.05, sensor="none", cgroup_memory_file=str(v1))
    sampler.start()
    wait_for(lambda: any(r["cgroup_mem_gib"] == "2" for r in data_rows(out)), "a row with the cgroup's 2 GiB")
    sampler.set_cgroup_memory_file(str(tmp_path / "gone"))
    wait_for(lambda: data_rows(out)[-1]["cgroup_mem_gib"] == "", "a row after the file went")
    summary = sampler.stop()
    assert summary["cgroup_mem_gib_max"] == 2.0
    assert any("gone" in e for e in summary["errors"])  # recorded, sampling went on
    assert rows(tmp_path / "t.csv")[-1]["cgroup_mem_gib"] == ""


def test_host_without_a_gpu_writes_host_memory_rows(tmp_path, monkeypatch, no_nvml):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no nvidia-smi anywhere
    sampler = TelemetrySampler(str(tmp_path / "t.csv"), interval_s=0.05)
    sampler.start()
    wait_for(lambda: len(data_rows(tmp_path / "t.csv")) >= 4, "four rows")
    summary = sampler.stop()
    data = rows(tmp_path / "t.csv")
    assert len(data) >= 4
    assert all(r["gpu"] == "" and r["gpu_temp_c"] == "" and float(r["mem_used_gib"]) > 0 for r in data)
    assert summary["sensor"] == "none" and summary["errors"] == [] and summary["gpus"] == []
    assert summary["gpu_temp_c_max"] is None and summary["mem_used_gib_max"] > 0
    # Asked for nvidia-smi explicitly: said so in errors, still host rows.
    explicit = TelemetrySampler(str(tmp_path / "u.csv"), interval_s=0.05, sensor="nvidia-smi")
    explicit.start()
    s = explicit.stop()
    assert s["sensor"] == "none" and "not found on PATH" in s["errors"][0] and s["samples"] >= 1


def test_stop_is_idempotent_and_kills_the_child(standin, no_nvml):
    sampler = TelemetrySampler(str(standin / "t.csv"), interval_s=0.05, sensor="nvidia-smi")
    assert TelemetrySampler(str(standin / "never.csv")).stop()["samples"] == 0  # stop before start
    with sampler:
        pid = sampler.child_pid
        assert pid is not None and Path(f"/proc/{pid}").exists()
    first = sampler.stop()
    assert sampler.stop() is first
    assert not Path(f"/proc/{pid}").exists()
    assert all(not t.name.startswith("sparkfleet-telemetry") for t in threading.enumerate())


def test_a_dead_nvidia_smi_is_recorded_and_restarted(standin, no_nvml):
    sampler = TelemetrySampler(str(standin / "t.csv"), interval_s=0.05, sensor="nvidia-smi")
    sampler.start()
    first = sampler.child_pid
    time.sleep(0.1)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while (sampler.child_pid == first or not sampler._smi.got_reading.is_set()) and time.monotonic() < deadline:
        time.sleep(0.05)
    wait_for(lambda: data_rows(standin / "t.csv")[-1]["gpu_temp_c"] == "38", "a reading after the restart")
    summary = sampler.stop()
    assert summary["processes_spawned"] == 2
    assert any("exited with rc=-9" in e for e in summary["errors"])
    assert rows(standin / "t.csv")[-1]["gpu_temp_c"] == "38"  # readings again after the restart


def test_bad_arguments():
    with pytest.raises(ValueError, match="interval_s"):
        TelemetrySampler("x.csv", interval_s=0)
    with pytest.raises(ValueError, match="sensor"):
        TelemetrySampler("x.csv", sensor="ipmi")


# --------------------------------------------------------------------------- in-process sensors (the NVML path)


class ScriptedSensor(sparkfleet_gpu.GpuSensor):
    kind = "nvml"

    def __init__(self, temps: Sequence[float], fail_after: int | None = None, delay_s: float = 0.0) -> None:
        self.temps, self.fail_after, self.delay_s = list(temps), fail_after, delay_s
        self.reads = 0
        self.clock: VirtualClock | None = None  # set by virtual_run: reads take virtual time ...
        self.stop_after: int | None = None  # ... and the run stops after this many
        self.stop = None

    def read(self, indices=None):
        self.reads += 1
        if self.clock is not None:
            self.clock.now += self.delay_s
        elif self.delay_s:
            time.sleep(self.delay_s)
        if self.stop_after is not None and self.reads >= self.stop_after:
            self.stop()
        if self.fail_after is not None and self.reads > self.fail_after:
            raise sparkfleet_gpu.GpuSensorError("Unknown Error (GPU is lost)")
        temp = self.temps[min(self.reads - 1, len(self.temps) - 1)]
        return [
            GpuReading(index=0, temperature_c=temp, power_w=100.0 + temp, sm_clock_mhz=1980.0, utilization_pct=97.0,
                       throttle_mask=0x4 if temp > 60 else 0x0)
        ]


def test_summary_values_from_an_in_process_sensor(tmp_path, monkeypatch):
    sensor = ScriptedSensor([50, 62, 58, 56])
    s, data = virtual_run(monkeypatch, tmp_path, 0.05, sensor, reads=4)
    assert s["samples"] == 4 and sensor.reads == 4 and len(data) == 4
    assert s["gpu_temp_c_max"] == 62.0 and s["gpu_temp_c_mean"] == 56.5
    assert s["gpu_power_w_max"] == 162.0 and s["gpu_power_w_mean"] == 156.5
    assert s["throttle_reasons_seen"] == ["sw_power_cap"] and s["gpu_util_pct_mean"] == 97.0
    assert [r["throttle_reasons"] for r in rows(tmp_path / "t.csv")] == ["none", "sw_power_cap", "none", "none"]
    assert s["processes_spawned"] == 0 and s["sensor"] == "nvml"


def test_sensor_failure_mid_run_is_recorded_and_sampling_goes_on(tmp_path, monkeypatch):
    s, data = virtual_run(monkeypatch, tmp_path, 0.03, ScriptedSensor([45], fail_after=2), reads=6)
    assert s["samples"] == len(data) == 6
    assert [r["gpu_temp_c"] for r in data[:2]] == ["45", "45"]
    assert all(r["gpu"] == "0" and r["gpu_temp_c"] == "" and r["mem_used_gib"] for r in data[2:])
    assert len(s["errors"]) == 1 and s["errors"][0].startswith("nvml: Unknown Error (GPU is lost) (x")


def test_slow_reads_do_not_stretch_the_schedule(tmp_path, monkeypatch):
    # 30 ms reads (virtual time), still every 50 ms: on the grid, no drift, nothing missed, no jitter
    s, data = virtual_run(monkeypatch, tmp_path, 0.05, ScriptedSensor([40], delay_s=0.03), reads=10, name="a.csv")
    assert s["samples"] == 10 and s["missed"] == 0
    assert [float(r["t_s"]) for r in data] == pytest.approx([0.05 * k for k in range(10)], abs=1e-3)
    assert s["jitter_ms"]["max"] == pytest.approx(0.0, abs=1e-6)
    # 120 ms reads at 50 ms: the slots a read overran are skipped and counted, not bunched up afterwards
    s, data = virtual_run(monkeypatch, tmp_path, 0.05, ScriptedSensor([40], delay_s=0.12), reads=5, name="b.csv")
    times = [float(r["t_s"]) for r in data]
    # each read ends 120 ms on: the next sample is taken at once, on the latest slot due; five reads span
    # 600 ms = 12 slots, each sampled or counted missed
    assert times == pytest.approx([0.0, 0.12, 0.24, 0.36, 0.48], abs=1e-3)
    assert s["samples"] == 5 and s["samples"] + s["missed"] == 12
    assert all(b - a >= 0.1 for a, b in itertools.pairwise(times))


# --------------------------------------------------------------------------- helpers


def test_meminfo_and_cgroup_lookup(tmp_path):
    meminfo = "MemTotal:       125437712 kB\nMemFree:         1000 kB\nMemAvailable:   117000000 kB\n"
    assert telemetry.parse_meminfo_used_gib(meminfo) == pytest.approx((125437712 - 117000000) / 2**20)
    assert telemetry.parse_meminfo_used_gib("MemTotal: 1 kB\n") is None
    with pytest.raises(OSError):
        telemetry.cgroup_memory_file(str(tmp_path))


def test_memory_tracker_gets_every_sample_and_its_failure_costs_no_row(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal: 4194304 kB\nMemFree: 1048576 kB\nMemAvailable: 2097152 kB\nCached: 1048576 kB\n")
    memstate = host_util("memstate")
    tracker = memstate.PeakTracker()
    sampler = TelemetrySampler(str(tmp_path / "t.csv"), interval_s=0.03, sensor="none", meminfo=str(info),
                               memory_tracker=tracker)
    sampler.start()
    wait_for(lambda: len(data_rows(tmp_path / "t.csv")) >= 2, "two rows")
    summary = sampler.stop()
    assert tracker.samples == summary["samples"] >= 2
    assert tracker.summary()["peak"]["meminfo"]["not_free_gib"] == 3.0

    class Broken:
        def sample(self, *a):
            raise RuntimeError("boom")

    broken = TelemetrySampler(str(tmp_path / "u.csv"), interval_s=0.03, sensor="none", meminfo=str(info),
                              memory_tracker=Broken())
    broken.start()
    wait_for(lambda: len(data_rows(tmp_path / "u.csv")) >= 2, "two rows")
    summary = broken.stop()
    assert any("memory state: RuntimeError: boom" in e for e in summary["errors"])
    assert len(rows(tmp_path / "u.csv")) == summary["samples"] >= 2
