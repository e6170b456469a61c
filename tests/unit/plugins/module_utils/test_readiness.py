"""The readiness probe's judgement (issue 24; issue 32's rules in test_readiness_rules.py): healthy, degraded
band, lost cap, the clock ratio as a note, missing readings, and the mark / refuse policy. Clock figures are the
field's: a GB10 sustains ~2,400-2,520 MHz under load (max 3,003 MHz); stuck units read 500-890 MHz."""

from __future__ import annotations

import json

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import readiness


def causes(verdict):
    return [r["cause"] for r in verdict["reasons"]]


def test_healthy_against_the_campaign_reference():
    verdict = readiness.judge(2450, 80.0, expected_sm_clock_mhz=2480, gpu_name="NVIDIA GB10")
    assert verdict["state"] == "healthy" and verdict["reasons"] == []
    assert verdict["gpu_class"] == "gb10" and verdict["clock_floor_mhz"] == 1400.0
    assert verdict["min_fraction"] == 0.9 and verdict["effective_expected_mhz"] == 2480.0
    assert verdict["fraction"] == pytest.approx(2450 / 2480)
    assert json.loads(json.dumps(verdict)) == verdict
    assert readiness.action(verdict) == {"action": "run", "warn": False, "state": "healthy", "reasons": []}


def test_degraded_band_is_named_and_the_clock_ratio_is_only_a_note():
    verdict = readiness.judge(850, 31.0, expected_sm_clock_mhz=2400, gpu_name="NVIDIA GB10")
    assert verdict["state"] == "suspect" and causes(verdict) == ["degraded_band"]
    assert "850 MHz" in verdict["reasons"][0]["message"] and "500-890" in verdict["reasons"][0]["message"]
    assert [n["cause"] for n in verdict["notes"]] == ["no_clock_event_reasons", "below_fraction"]
    assert "35%" in verdict["notes"][1]["message"]  # 850 / 2400


def test_degraded_band_alone_without_a_floor():
    verdict = readiness.judge(695, None)  # an unnamed GPU: the bands apply, no floor without a maximum clock
    assert verdict["state"] == "suspect"
    assert causes(verdict) == ["degraded_band", "no_clock_floor"]


def test_band_edges_are_inclusive_and_custom_bands():
    assert causes(readiness.judge(500, max_clock_mhz=800))[0] == "degraded_band"
    assert causes(readiness.judge(890, max_clock_mhz=1000))[0] == "degraded_band"
    assert readiness.judge(891, max_clock_mhz=1000)["state"] == "healthy"  # floor 600
    assert readiness.judge(850, max_clock_mhz=1000, degraded_bands=[])["state"] == "healthy"
    assert causes(readiness.judge(1500, max_clock_mhz=2000, degraded_bands=[(1400, 1600)])) == ["degraded_band"]
    # the bands are a GB10's: a named datacenter GPU is judged by its floor alone
    assert readiness.judge(1500, max_clock_mhz=1980, gpu_name="NVIDIA H200",
                           degraded_bands=[(1400, 1600)])["state"] == "healthy"


def test_below_fraction_of_the_campaign_clock_is_a_note_never_a_fault():
    verdict = readiness.judge(2000, expected_sm_clock_mhz=2400, gpu_name="NVIDIA GB10")  # 83%
    assert verdict["state"] == "healthy" and causes(verdict) == []
    assert "below_fraction" in [n["cause"] for n in verdict["notes"]]
    quiet = readiness.judge(2000, expected_sm_clock_mhz=2400, min_fraction=0.8, gpu_name="NVIDIA GB10")
    assert "below_fraction" not in [n["cause"] for n in quiet["notes"]]


def test_max_clock_as_the_yardstick_uses_the_looser_default():
    # a healthy GB10 under load: 2,450 of 3,003 MHz is 82%: no note against the max clock at 0.75 ...
    verdict = readiness.judge(2450, expected_sm_clock_mhz=3003, expected_source="max_clock")
    assert verdict["state"] == "healthy" and verdict["min_fraction"] == 0.75
    assert verdict["max_clock_mhz"] == 3003.0 and verdict["clock_floor_mhz"] == pytest.approx(1801.8)
    # ... a note (never a fault) against the campaign default of 0.9
    campaign = readiness.judge(2450, expected_sm_clock_mhz=3003, max_clock_mhz=3003)
    assert campaign["state"] == "healthy" and "below_fraction" in [n["cause"] for n in campaign["notes"]]


def test_lost_cap_when_the_clock_exceeds_the_applied_lock():
    # sparkfleet applied -lgc 0,2000; a hang lost it and the probe runs at 2,480 MHz
    verdict = readiness.judge(2480, 70.0, expected_sm_clock_mhz=3003, expected_source="max_clock",
                              applied_lock_mhz=(0, 2000), gpu_name="NVIDIA GB10")
    assert verdict["state"] == "suspect" and causes(verdict) == ["lost_cap"]
    assert "exceeds the applied lock 2000 MHz" in verdict["reasons"][0]["message"]


def test_a_lock_not_reached_is_no_fault():
    # GB10 accepts -lgc 3003,3003 and runs at ~2,522 MHz: what a healthy GB10 sustains (expectation min(3003, 2400))
    verdict = readiness.judge(2522, expected_sm_clock_mhz=3003, expected_source="max_clock",
                              applied_lock_mhz=(3003, 3003), gpu_name="NVIDIA GB10")
    assert verdict["state"] == "healthy" and causes(verdict) == [] and verdict["notes"][-1]["cause"] != "below_lock"


def test_a_cap_in_force_is_healthy_and_caps_the_expectation():
    # -lgc 0,2000 honoured: 1,989 MHz under load; not "below fraction" of the 3,003 max
    verdict = readiness.judge(1989, 36.7, expected_sm_clock_mhz=3003, expected_source="max_clock",
                              applied_lock_mhz=(0, 2000))
    assert verdict["state"] == "healthy" and verdict["effective_expected_mhz"] == 2000.0
    assert verdict["notes"] == [{"cause": "no_clock_event_reasons", "message": verdict["notes"][0]["message"]}]
    assert readiness.judge(1989, expected_sm_clock_mhz=2400, applied_lock_mhz=2000, max_clock_mhz=3003,
                           lock_tolerance=0.001)["state"] == "healthy"  # below the lock: never lost_cap
    assert causes(readiness.judge(2010, applied_lock_mhz=2000, max_clock_mhz=3003, lock_tolerance=0.001)) == \
        ["lost_cap"]


def test_far_below_the_lock_is_noted_with_the_lock_as_the_yardstick():
    verdict = readiness.judge(1900, expected_sm_clock_mhz=2400, applied_lock_mhz=2600, gpu_name="NVIDIA GB10")
    assert verdict["state"] == "healthy"  # above the GB10 floor; the lock is not a fault either way
    assert [n["cause"] for n in verdict["notes"]][-2:] == ["below_lock", "below_fraction"]
    assert "2400 MHz, what the applied lock 2600 MHz" in verdict["notes"][-2]["message"]  # min(2600, 2400)


def test_missing_clock_is_unknown():
    verdict = readiness.judge(None, 40.0, expected_sm_clock_mhz=2400, gpu_name="NVIDIA GB10")
    assert verdict["state"] == "unknown" and causes(verdict) == ["missing_reading"]
    assert verdict["fraction"] is None


def test_nothing_to_judge_the_clock_by_is_unknown():
    verdict = readiness.judge(2400, 60.0)  # no name, no maximum clock, no reasons, counters or throughput
    assert verdict["state"] == "unknown" and causes(verdict) == ["no_clock_floor"]


def test_power_floor_low_and_missing():
    gb10 = {"expected_sm_clock_mhz": 2400, "gpu_name": "NVIDIA GB10"}
    assert causes(readiness.judge(2400, 12.0, min_power_w=30, **gb10)) == ["low_power"]
    verdict = readiness.judge(2400, None, min_power_w=30, **gb10)
    assert verdict["state"] == "unknown" and causes(verdict) == ["missing_reading"]
    assert readiness.judge(2400, None, **gb10)["state"] == "healthy"  # power optional


def test_suspect_wins_over_unknown():
    verdict = readiness.judge(700, None, min_power_w=30)
    assert verdict["state"] == "suspect"
    assert causes(verdict) == ["degraded_band", "missing_reading", "no_clock_floor"]


def test_policies_map_the_verdict_to_an_action():
    suspect = readiness.judge(850, expected_sm_clock_mhz=2400, gpu_name="NVIDIA GB10")
    assert readiness.action(suspect)["action"] == "mark" and readiness.action(suspect)["warn"] is True
    assert readiness.action(suspect, "refuse")["action"] == "refuse"
    assert readiness.action(suspect)["reasons"] == suspect["reasons"]
    unknown = readiness.judge(None, expected_sm_clock_mhz=2400)
    assert readiness.action(unknown, "refuse") == {"action": "mark", "warn": True, "state": "unknown",
                                                   "reasons": unknown["reasons"]}
    assert readiness.action(unknown, "refuse", refuse_unknown=True)["action"] == "refuse"
    assert readiness.action(unknown, "mark", refuse_unknown=True)["action"] == "mark"


@pytest.mark.parametrize("kwargs, field", [
    ({"sm_clock_mhz": "fast"}, "sm_clock_mhz"),
    ({"sm_clock_mhz": -5}, "sm_clock_mhz"),
    ({"power_w": -1}, "power_w"),
    ({"expected_sm_clock_mhz": 0}, "expected_sm_clock_mhz"),
    ({"min_fraction": 1.5}, "min_fraction"),
    ({"min_fraction": 0}, "min_fraction"),
    ({"degraded_bands": [(890, 690)]}, "degraded_bands"),
    ({"degraded_bands": [(690,)]}, "degraded_bands"),
    ({"applied_lock_mhz": (2000, 1000)}, "applied_lock_mhz"),
    ({"applied_lock_mhz": "max"}, "applied_lock_mhz"),
    ({"lock_tolerance": 2}, "lock_tolerance"),
    ({"expected_source": "guess"}, "expected_source"),
    ({"min_power_w": 0}, "min_power_w"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    args = {"sm_clock_mhz": 2400, "expected_sm_clock_mhz": 2400}
    args.update(kwargs)
    clock = args.pop("sm_clock_mhz")
    with pytest.raises(ValueError, match=field):
        readiness.judge(clock, **args)


def test_bad_policy_and_verdict():
    with pytest.raises(ValueError, match="policy"):
        readiness.action({"state": "healthy"}, "ignore")
    with pytest.raises(ValueError, match="verdict.state"):
        readiness.action({"state": "fine"})
