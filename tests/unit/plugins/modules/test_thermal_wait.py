"""thermal_wait through patch_module_args, with a fake clock and fake sensors."""

from __future__ import annotations

import bisect
import json
import math
import os
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from _ansible_modules import STANDINS, load_module, run_module, sparkfleet_gpu
from _shared import H200_TRACE

GpuReading = sparkfleet_gpu.GpuReading
GpuSensor = sparkfleet_gpu.GpuSensor
NvidiaSmiSensor = sparkfleet_gpu.NvidiaSmiSensor


Curve = Callable[[float], "float | None"]


class FakeClock:
    def __init__(self) -> None:
        self.t = 5000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.t += seconds


class CurveSensor(GpuSensor):
    """Temperature of GPU i is curves[i](seconds since the sensor was opened)."""

    kind = "fake"

    def __init__(self, clock: FakeClock, *curves: Curve, name: str = "NVIDIA GB10") -> None:
        self.clock, self.curves, self.name = clock, curves, name
        self.t0 = clock.t
        self.reads = 0
        self.closed = False

    def read(self, indices: Sequence[int] | None = None) -> list[GpuReading]:
        self.reads += 1
        dt = self.clock.t - self.t0
        wanted = range(len(self.curves)) if indices is None else indices
        # GB10-like: temperature, power and clocks, but no memory figures.
        return [
            GpuReading(index=i, name=self.name, temperature_c=self.curves[i](dt), power_w=4.0, sm_clock_mhz=208.0)
            for i in wanted
        ]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def tw(monkeypatch: pytest.MonkeyPatch):
    return load_module("thermal_wait")


@pytest.fixture
def clock(tw, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(tw, "_monotonic", c.monotonic)
    monkeypatch.setattr(tw, "_sleep", c.sleep)
    return c


def use_sensor(tw, monkeypatch: pytest.MonkeyPatch, sensor: GpuSensor) -> list[str]:
    kinds: list[str] = []

    def factory(kind: str, runner: Any, nvidia_smi: str) -> GpuSensor:
        kinds.append(kind)
        return sensor

    monkeypatch.setattr(tw, "_open_sensor", factory)
    return kinds


def newton(start: float, ambient: float, tau: float) -> Curve:
    return lambda t: round(ambient + (start - ambient) * math.exp(-t / tau))


def h200_cooldown() -> Curve:
    """Replay the real H200 trace from the end of its load phase: the latest reading at or before t."""
    rows = json.loads(H200_TRACE.read_text())
    hot_end = max(r[0] for r in rows if r[1] == "hot")
    cool = [r for r in rows if r[0] >= hot_end - 1.0]  # last second of load, then the cooldown
    times = [r[0] - cool[0][0] for r in cool]
    temps = [float(r[2]) for r in cool]

    def curve(t: float) -> float:
        i = bisect.bisect_right(times, t) - 1
        return temps[max(i, 0)] if t <= times[-1] else temps[-1]

    return curve


# --------------------------------------------------------------------------- stop rule


def test_h200_trace_stops_once_settled_not_after_a_fixed_five_minutes(tw, clock, monkeypatch):
    sensor = CurveSensor(clock, h200_cooldown(), name="NVIDIA H200")
    use_sensor(tw, monkeypatch, sensor)
    res = run_module(tw, {"poll_interval": 1, "settle_window": 30, "settle_band": 1})
    assert res["reason"] == "cool_and_settled"
    assert res["changed"] is False and res["timed_out"] is False and "failed" not in res
    assert res["start_temp"] >= 48  # sampled in the last second of load
    assert res["end_temp"] in (33.0, 34.0)
    # The earliest possible stop is one window; the trace is flat 2 s after the load stops.
    assert 30 <= res["waited"] <= 45
    assert res["polls"] == len(res["trace"]) == int(res["waited"]) + 1
    assert res["trace"][0][0] == 0.0 and res["gpus"] == [0] and res["sensor"] == "fake"
    assert abs(res["drift"][0]) <= 1
    assert sensor.closed


def test_settled_above_threshold_ends_the_wait_with_reason_settled(tw, clock, monkeypatch):
    use_sensor(tw, monkeypatch, CurveSensor(clock, lambda t: 50.0))
    res = run_module(tw, {"threshold": 45, "settle_window": 60, "poll_interval": 5})
    assert res["reason"] == "settled"
    assert res["cool"] is False and res["settled"] is True
    assert res["waited"] == 60
    assert "settled above 45 C" in res["msg"]


def test_require_cool_keeps_waiting_while_settled_above_threshold(tw, clock, monkeypatch):
    use_sensor(tw, monkeypatch, CurveSensor(clock, lambda t: 50.0))
    res = run_module(tw, {"require_cool": True, "max_wait": 120, "on_timeout": "continue"})
    assert res["reason"] == "max_wait" and res["timed_out"] is True
    assert "failed" not in res
    assert res["waited"] == 120


def test_cool_but_still_falling_is_not_settled(tw, clock, monkeypatch):
    # Below the threshold from the start, yet falling ~0.1 C/s at first: a run started now would start
    # from a different point of the curve than the next one.
    curve = newton(44, 30, 60)
    use_sensor(tw, monkeypatch, CurveSensor(clock, curve))
    res = run_module(tw, {"threshold": 45, "settle_window": 60, "settle_band": 1, "poll_interval": 5})
    assert res["reason"] == "cool_and_settled"
    assert res["waited"] > 120
    assert res["end_temp"] <= 32


def test_min_wait_is_honoured_and_hit_exactly(tw, clock, monkeypatch):
    use_sensor(tw, monkeypatch, CurveSensor(clock, lambda t: 30.0))
    res = run_module(tw, {"min_wait": 92, "settle_window": 60, "poll_interval": 10})
    assert res["reason"] == "cool_and_settled"
    assert res["waited"] == 92  # woke at min_wait, not at the next poll (100)


def test_no_settle_window_and_cool_returns_after_one_reading(tw, clock, monkeypatch):
    use_sensor(tw, monkeypatch, CurveSensor(clock, lambda t: 30.0))
    res = run_module(tw, {"settle_window": 0})
    assert res["reason"] == "cool_and_settled" and res["polls"] == 1 and res["waited"] == 0
    assert clock.sleeps == []


def test_polls_on_a_fixed_grid(tw, clock, monkeypatch):
    use_sensor(tw, monkeypatch, CurveSensor(clock, newton(60, 35, 20)))
    res = run_module(tw, {"poll_interval": 7, "settle_window": 28})
    times = [row[0] for row in res["trace"]]
    assert times == [7.0 * i for i in range(len(times))]


@pytest.mark.parametrize("on_timeout", ["fail", "continue"])
def test_max_wait(tw, clock, monkeypatch, on_timeout):
    use_sensor(tw, monkeypatch, CurveSensor(clock, lambda t: 80 - t / 10))  # falls 6 C a minute, forever
    res = run_module(tw, {"max_wait": 100, "poll_interval": 15, "settle_window": 60, "on_timeout": on_timeout})
    assert res["reason"] == "max_wait" and res["timed_out"] is True and res["changed"] is False
    assert res["waited"] == 100  # the last reading is taken at max_wait, not a poll interval later
    assert res["settled"] is False
    assert res["drift"][0] == pytest.approx(-6.0)
    assert ("failed" in res) is (on_timeout == "fail")
    assert "not settled after 100 s" in res["msg"]
    assert res["trace"] and res["end_temp"] == 70.0


def test_all_selected_gpus_must_settle(tw, clock, monkeypatch):
    fast, slow = newton(60, 35, 5), newton(60, 35, 60)
    use_sensor(tw, monkeypatch, CurveSensor(clock, fast, slow))
    both = run_module(tw, {"poll_interval": 5})
    assert both["gpus"] == [0, 1] and len(both["trace"][0]) == 3
    assert len(both["start_temps"]) == len(both["end_temps"]) == 2

    clock2 = FakeClock()
    monkeypatch.setattr(tw, "_monotonic", clock2.monotonic)
    monkeypatch.setattr(tw, "_sleep", clock2.sleep)
    use_sensor(tw, monkeypatch, CurveSensor(clock2, fast, slow))
    only_fast = run_module(tw, {"poll_interval": 5, "gpus": [0]})
    assert only_fast["gpus"] == [0]
    assert only_fast["waited"] < both["waited"]


def test_noisy_integer_readings_settle_within_a_band_of_one(tw, clock, monkeypatch):
    rng = random.Random(7)
    base = newton(62, 38, 180)

    def noisy(t: float) -> float:
        return float(round(38 + 24 * math.exp(-t / 180) + rng.uniform(-1, 1)))

    assert base(0) == 62
    use_sensor(tw, monkeypatch, CurveSensor(clock, noisy))
    res = run_module(tw, {"poll_interval": 5, "settle_window": 120, "settle_band": 1, "max_wait": 1800})
    assert res["reason"] in ("cool_and_settled",)
    assert res["end_temp"] <= 42


# --------------------------------------------------------------------------- check mode, options, sensors


def test_check_mode_reads_once_and_does_not_wait(tw, clock, monkeypatch):
    sensor = CurveSensor(clock, lambda t: 57.0)
    use_sensor(tw, monkeypatch, sensor)
    monkeypatch.setattr(tw, "_sleep", lambda s: pytest.fail("check mode must not sleep"))
    res = run_module(tw, {"max_wait": 600}, check_mode=True)
    assert res["reason"] == "check_mode" and res["changed"] is False
    assert res["polls"] == 1 and res["waited"] == 0 and sensor.reads == 1
    assert res["start_temp"] == res["end_temp"] == 57.0 and res["cool"] is False
    assert sensor.closed


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ({"min_wait": 100, "max_wait": 50, "settle_window": 10}, "min_wait"),
        ({"settle_band": -1}, "settle_band"),
        ({"settle_window": -5}, "settle_window"),
        ({"min_wait": -1}, "min_wait"),
        ({"max_wait": -1, "settle_window": 0}, "max_wait"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"poll_interval": -2}, "poll_interval"),
        ({"settle_window": 120, "max_wait": 60}, "settle_window"),
        ({"gpus": [-1]}, "gpus"),
        ({"gpus": []}, "gpus"),
        ({"sensor": "ipmi"}, "sensor"),
        ({"on_timeout": "ignore"}, "on_timeout"),
    ],
)
def test_bad_options_fail_naming_the_option(tw, clock, monkeypatch, args, option):
    kinds = use_sensor(tw, monkeypatch, CurveSensor(clock, lambda t: 30.0))
    res = run_module(tw, args)
    assert res.get("failed") is True
    assert option in res["msg"]
    assert res.get("changed", False) is False
    assert kinds == []  # validation happens before any sensor is opened


def test_missing_temperature_fails(tw, clock, monkeypatch):
    use_sensor(tw, monkeypatch, CurveSensor(clock, lambda t: None))
    res = run_module(tw, {})
    assert res["failed"] is True and "GPU 0 reports no temperature" in res["msg"]
    assert res["changed"] is False


def test_sensor_option_is_passed_to_the_factory(tw, clock, monkeypatch):
    kinds = use_sensor(tw, monkeypatch, CurveSensor(clock, lambda t: 30.0))
    run_module(tw, {"sensor": "nvidia-smi", "settle_window": 0})
    assert kinds == ["nvidia-smi"]


GB10_ROW = "0, GPU-2dee1e25-b3b5-007e-2b55-79f2d0f2ebe5, NVIDIA GB10, 41, 4.12, 208, [N/A], 0, [N/A], [N/A], P8, 0x0000000000000001\n"  # noqa: E501


def test_gb10_readings_with_na_memory_fields(tw, clock, monkeypatch):
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> tuple[int, str, str]:
        calls.append(list(argv))
        return 0, GB10_ROW, ""

    sensor = NvidiaSmiSensor(str(STANDINS / "nvidia-smi"), runner)
    use_sensor(tw, monkeypatch, sensor)
    res = run_module(tw, {"settle_window": 20, "poll_interval": 10})
    assert res["reason"] == "cool_and_settled" and res["sensor"] == "nvidia-smi"
    assert res["end_temp"] == 41.0 and res["polls"] == 3
    assert calls[0][1].startswith("--query-gpu=index,uuid,name,temperature.gpu")
    assert calls[0][2] == "--format=csv,noheader,nounits"


def test_with_the_nvidia_smi_standin_on_path(tw, monkeypatch, tmp_path):
    """Real processes: the module's run_command runs the stand-in, which answers like a GB10."""
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_STATE", str(tmp_path / "gpu.json"))
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_MODEL", "gb10")
    monkeypatch.delenv("SPARKFLEET_FAKE_GPU_LOAD", raising=False)
    res = run_module(tw, {"sensor": "nvidia-smi", "settle_window": 0})
    assert res["sensor"] == "nvidia-smi" and res["reason"] == "cool_and_settled"
    assert res["end_temp"] == 38.0 and res["gpus"] == [0]
    check = run_module(tw, {"sensor": "auto"}, check_mode=True)
    assert check["end_temp"] == 38.0 and check["sensor"] in ("nvidia-smi", "nvml")


def test_docs_are_valid_yaml_and_list_every_option(tw):
    import yaml

    doc = yaml.safe_load(tw.DOCUMENTATION)
    ret = yaml.safe_load(tw.RETURN)
    yaml.safe_load(tw.EXAMPLES)
    assert set(doc["options"]) == {
        "threshold", "settle_band", "settle_window", "min_wait", "max_wait", "poll_interval", "gpus",
        "sensor", "require_cool", "on_timeout", "nvidia_smi",
    }
    for key in ("reason", "timed_out", "waited", "polls", "start_temp", "end_temp", "trace", "sensor", "gpus"):
        assert key in ret
