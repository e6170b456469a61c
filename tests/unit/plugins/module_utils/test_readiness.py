"""The readiness probe's judgement (issue 24): healthy, degraded band, lost cap, below fraction, missing
readings, and the mark / refuse policy. Clock figures are the field's (research notes section 1.3 A and
6b): a GB10 sustains ~2,400-2,520 MHz under load (max 3,003 MHz); stuck units read 690-890 MHz."""

from __future__ import annotations

import json

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import readiness


def causes(verdict):
    return [r["cause"] for r in verdict["reasons"]]


def test_healthy_against_the_campaign_reference():
    verdict = readiness.judge(2450, 80.0, expected_sm_clock_mhz=2480)
    assert verdict["state"] == "healthy" and verdict["reasons"] == []
    assert verdict["min_fraction"] == 0.9 and verdict["effective_expected_mhz"] == 2480.0
    assert verdict["fraction"] == pytest.approx(2450 / 2480)
    assert json.loads(json.dumps(verdict)) == verdict
    assert readiness.action(verdict) == {"action": "run", "warn": False, "state": "healthy", "reasons": []}


def test_degraded_band_is_named_and_also_below_fraction():
    verdict = readiness.judge(850, 31.0, expected_sm_clock_mhz=2400)
    assert verdict["state"] == "suspect"
    assert causes(verdict) == ["degraded_band", "below_fraction"]
    assert "850 MHz" in verdict["reasons"][0]["message"] and "690-890" in verdict["reasons"][0]["message"]
    assert "35%" in verdict["reasons"][1]["message"]  # 850 / 2400


def test_degraded_band_alone_without_an_expected_clock():
    verdict = readiness.judge(695, None)
    assert verdict["state"] == "suspect"
    assert causes(verdict) == ["degraded_band", "no_expected_clock"]


def test_band_edges_are_inclusive_and_custom_bands():
    assert causes(readiness.judge(690, expected_sm_clock_mhz=700))[0] == "degraded_band"
    assert readiness.judge(891, expected_sm_clock_mhz=900)["state"] == "healthy"
    assert readiness.judge(850, expected_sm_clock_mhz=900, degraded_bands=[])["state"] == "healthy"
    assert causes(readiness.judge(1500, expected_sm_clock_mhz=1550, degraded_bands=[(1400, 1600)])) == \
        ["degraded_band"]


def test_below_fraction_of_the_campaign_clock():
    verdict = readiness.judge(2000, expected_sm_clock_mhz=2400)  # 83%
    assert verdict["state"] == "suspect" and causes(verdict) == ["below_fraction"]
    assert readiness.judge(2000, expected_sm_clock_mhz=2400, min_fraction=0.8)["state"] == "healthy"


def test_max_clock_as_the_yardstick_uses_the_looser_default():
    # a healthy GB10 under load: 2,450 of 3,003 MHz is 82%: healthy against the max clock at 0.75 ...
    verdict = readiness.judge(2450, expected_sm_clock_mhz=3003, expected_source="max_clock")
    assert verdict["state"] == "healthy" and verdict["min_fraction"] == 0.75
    # ... but it would be flagged by the campaign default of 0.9
    assert readiness.judge(2450, expected_sm_clock_mhz=3003)["state"] == "suspect"


def test_lost_cap_when_the_clock_exceeds_the_applied_lock():
    # sparkfleet applied -lgc 0,2000; a hang lost it and the probe runs at 2,480 MHz
    verdict = readiness.judge(2480, 70.0, expected_sm_clock_mhz=3003, expected_source="max_clock",
                              applied_lock_mhz=(0, 2000))
    assert verdict["state"] == "suspect" and causes(verdict) == ["lost_cap"]
    assert "exceeds the applied lock 2000 MHz" in verdict["reasons"][0]["message"]


def test_lost_cap_when_the_lock_is_not_reached():
    # GB10 accepts -lgc 3003,3003 and runs at ~2,522 MHz: the lock is not in force
    verdict = readiness.judge(2522, expected_sm_clock_mhz=3003, expected_source="max_clock",
                              applied_lock_mhz=(3003, 3003))
    assert verdict["state"] == "suspect" and causes(verdict) == ["lost_cap"]
    assert "does not reach the applied lock 3003 MHz" in verdict["reasons"][0]["message"]


def test_a_cap_in_force_is_healthy_and_caps_the_expectation():
    # -lgc 0,2000 honoured: 1,989 MHz under load (within 3% of 2,000); not "below fraction" of the 3,003 max
    verdict = readiness.judge(1989, 36.7, expected_sm_clock_mhz=3003, expected_source="max_clock",
                              applied_lock_mhz=(0, 2000))
    assert verdict["state"] == "healthy" and verdict["effective_expected_mhz"] == 2000.0
    assert readiness.judge(1989, expected_sm_clock_mhz=2400, applied_lock_mhz=2000)["state"] == "healthy"
    assert causes(readiness.judge(1989, expected_sm_clock_mhz=2400, applied_lock_mhz=2000,
                                  lock_tolerance=0.001)) == ["lost_cap"]


def test_far_below_the_lock_names_both_causes_and_the_lock_as_the_yardstick():
    verdict = readiness.judge(1000, expected_sm_clock_mhz=2400, applied_lock_mhz=2000)
    assert causes(verdict) == ["below_fraction", "lost_cap"]
    assert "(applied lock)" in verdict["reasons"][0]["message"]


def test_missing_clock_is_unknown():
    verdict = readiness.judge(None, 40.0, expected_sm_clock_mhz=2400)
    assert verdict["state"] == "unknown" and causes(verdict) == ["missing_reading"]
    assert verdict["fraction"] is None


def test_missing_expected_clock_is_unknown():
    verdict = readiness.judge(2400, 60.0)
    assert verdict["state"] == "unknown" and causes(verdict) == ["no_expected_clock"]


def test_power_floor_low_and_missing():
    assert causes(readiness.judge(2400, 12.0, expected_sm_clock_mhz=2400, min_power_w=30)) == ["low_power"]
    verdict = readiness.judge(2400, None, expected_sm_clock_mhz=2400, min_power_w=30)
    assert verdict["state"] == "unknown" and causes(verdict) == ["missing_reading"]
    assert readiness.judge(2400, None, expected_sm_clock_mhz=2400)["state"] == "healthy"  # power optional


def test_suspect_wins_over_unknown():
    verdict = readiness.judge(700, None, min_power_w=30)
    assert verdict["state"] == "suspect"
    assert causes(verdict) == ["degraded_band", "no_expected_clock", "missing_reading"]


def test_policies_map_the_verdict_to_an_action():
    suspect = readiness.judge(850, expected_sm_clock_mhz=2400)
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
