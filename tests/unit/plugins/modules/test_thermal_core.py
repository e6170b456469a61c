"""sparkfleet_thermal: the cooldown rule shared by thermal_wait and the run executor, called directly."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from _ansible_modules import host_util, load_module, run_module, sparkfleet_gpu
from test_thermal_wait import CurveSensor, FakeClock, h200_cooldown, newton

thermal = host_util("thermal")
wait_for_cooldown = thermal.wait_for_cooldown
validate = thermal.validate_cooldown_options

RESULT_KEYS = {
    "reason", "timed_out", "waited", "polls", "start_temp", "end_temp", "start_temps", "end_temps", "cool",
    "settled", "drift", "trace", "msg", "gpus", "sensor", "threshold",
}


def wait(clock: FakeClock, sensor: sparkfleet_gpu.GpuSensor, **kw):
    return wait_for_cooldown(sensor, monotonic=clock.monotonic, sleep=clock.sleep, **kw)


# --------------------------------------------------------------------------- validation


def test_defaults_and_partial_params_are_valid():
    assert validate({}) == []
    assert validate(dict(thermal.COOLDOWN_DEFAULTS)) == []
    assert validate({"settle_window": 0, "max_wait": 0, "gpus": [0, 1]}) == []


@pytest.mark.parametrize(
    ("params", "option"),
    [
        ({"min_wait": 100, "max_wait": 50, "settle_window": 10}, "min_wait"),
        ({"settle_band": -1}, "settle_band"),
        ({"settle_window": -5}, "settle_window"),
        ({"min_wait": -1}, "min_wait"),
        ({"max_wait": -1, "settle_window": 0}, "max_wait"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"settle_window": 120, "max_wait": 60}, "settle_window"),
        ({"gpus": [-1]}, "gpus"),
        ({"gpus": []}, "gpus"),
        ({"gpus": "0"}, "gpus"),
        ({"threshold": "hot"}, "threshold"),
        ({"poll_interval": math.nan}, "poll_interval"),
    ],
)
def test_each_problem_names_its_option(params, option):
    problems = validate(params)
    assert problems and option in problems[0]


def test_wait_rejects_bad_options_before_reading(tmp_path):
    clock = FakeClock()
    sensor = CurveSensor(clock, lambda t: 30.0)
    with pytest.raises(ValueError, match="poll_interval"):
        wait(clock, sensor, poll_interval=0)
    assert sensor.reads == 0


# --------------------------------------------------------------------------- the rule


def test_h200_trace_replay_on_a_fake_clock():
    clock = FakeClock()
    sensor = CurveSensor(clock, h200_cooldown(), name="NVIDIA H200")
    res = wait(clock, sensor, poll_interval=1, settle_window=30, settle_band=1)
    assert set(res) == RESULT_KEYS
    assert res["reason"] == "cool_and_settled" and res["timed_out"] is False
    assert res["start_temp"] >= 48 and res["end_temp"] in (33.0, 34.0)
    assert 30 <= res["waited"] <= 45
    assert res["polls"] == len(res["trace"]) == int(res["waited"]) + 1
    assert res["sensor"] == "fake" and res["gpus"] == [0] and res["threshold"] == 45.0
    assert sum(clock.sleeps) == pytest.approx(res["waited"])
    assert sensor.closed is False  # the caller owns the sensor


def test_same_result_as_the_module(monkeypatch):
    """The module is a thin wrapper: same inputs, same result (plus `changed`)."""
    args = {"poll_interval": 5, "settle_window": 60, "threshold": 40}
    clock = FakeClock()
    direct = wait(clock, CurveSensor(clock, newton(62, 42, 40), newton(58, 41, 20)), **args)

    tw = load_module("thermal_wait")
    clock2 = FakeClock()
    monkeypatch.setattr(tw, "_monotonic", clock2.monotonic)
    monkeypatch.setattr(tw, "_sleep", clock2.sleep)
    monkeypatch.setattr(tw, "_open_sensor", lambda *a: CurveSensor(clock2, newton(62, 42, 40), newton(58, 41, 20)))
    via_module = run_module(tw, args)
    assert via_module.pop("changed") is False
    via_module.pop("invocation", None)
    assert via_module == direct
    assert direct["reason"] == "settled" and direct["cool"] is False  # settled at 42 C, above the threshold
    assert direct["gpus"] == [0, 1]


def test_max_wait_is_a_result_not_an_exception():
    clock = FakeClock()
    res = wait(clock, CurveSensor(clock, lambda t: 80 - t / 10), max_wait=100, poll_interval=15, settle_window=60)
    assert res["reason"] == "max_wait" and res["timed_out"] is True and res["waited"] == 100
    assert res["drift"][0] == pytest.approx(-6.0)
    assert "not settled after 100 s" in res["msg"]


def test_require_cool_and_min_wait():
    clock = FakeClock()
    res = wait(clock, CurveSensor(clock, lambda t: 50.0), require_cool=True, max_wait=120)
    assert res["reason"] == "max_wait" and res["settled"] is True and res["cool"] is False
    clock = FakeClock()
    res = wait(clock, CurveSensor(clock, lambda t: 30.0), min_wait=92, poll_interval=10)
    assert res["reason"] == "cool_and_settled" and res["waited"] == 92


def test_check_mode_reads_once():
    clock = FakeClock()
    sensor = CurveSensor(clock, lambda t: 57.0)
    res = wait(clock, sensor, check_mode=True)
    assert res["reason"] == "check_mode" and res["polls"] == 1 and sensor.reads == 1 and clock.sleeps == []
    assert res["drift"] == [None] and res["settled"] is False


def test_gpus_are_deduplicated_and_passed_to_the_sensor():
    clock = FakeClock()
    res = wait(clock, CurveSensor(clock, lambda t: 30.0, lambda t: 31.0), gpus=[1, 1], settle_window=0)
    assert res["gpus"] == [1] and res["end_temps"] == [31.0]


class FailingSensor(CurveSensor):
    def read(self, indices: Sequence[int] | None = None):
        if self.reads >= 3:
            self.reads += 1
            raise sparkfleet_gpu.GpuSensorError("GPU is lost")
        return super().read(indices)


def test_sensor_failure_raises_with_the_partial_result():
    clock = FakeClock()
    with pytest.raises(thermal.CooldownError) as info:
        wait(clock, FailingSensor(clock, lambda t: 60 - t))
    assert "cannot read GPU temperature: GPU is lost" in info.value.msg
    assert info.value.result["gpus"] == [0] and info.value.result["sensor"] == "fake"
    assert isinstance(info.value, sparkfleet_gpu.GpuSensorError)


def test_missing_temperature_raises():
    clock = FakeClock()
    with pytest.raises(thermal.CooldownError, match="GPU 0 reports no temperature"):
        wait(clock, CurveSensor(clock, lambda t: None))


def test_drift_helpers():
    assert thermal.fitted_drift([(0, 50.0), (10, 49.0), (20, 48.0)], 20) == pytest.approx(-2.0)
    assert thermal.fitted_drift([(5, 50.0)], 20) is None
    assert thermal.window_points([0, 5, 10], [3, 2, 1], 9, 10) is None
    assert thermal.window_points([0, 5, 10], [3, 2, 1], 12, 10) == [(0, 3), (5, 2), (10, 1)]
    assert thermal.gpu_drift([0], [40.0], 0, 0) == 0.0
