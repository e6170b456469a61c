"""Inventory variables are checked before any host is changed; each problem names host and variable."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.settings import setting_problems as problems

GOOD = {"sparkfleet_work_dir": "/var/lib/sparkfleet", "sparkfleet_workload_env": {"CUDA_VISIBLE_DEVICES": "0"},
        "sparkfleet_telemetry_interval_s": "0.5", "sparkfleet_image_offline": "true",
        "sparkfleet_gpu_locked_clocks": {"min": 1500, "max": 1980}, "sparkfleet_docker_flags": ["--ipc=host"]}


def test_good_settings_pass_including_strings_from_dash_e():
    assert problems("s1", GOOD) == ([], [])


@pytest.mark.parametrize(("name", "value", "message"), [
    ("sparkfleet_work_dir", "relative/dir", "must be an absolute path"),
    ("sparkfleet_models_dir", 42, "must be an absolute path"),
    ("sparkfleet_workload_env", ["A=1"], "must be a mapping"),
    ("sparkfleet_workload_env", {"BAD-NAME": "1"}, "bad names or values: BAD-NAME"),
    ("sparkfleet_docker_flags", "--ipc=host", "must be a list, got a string"),
    ("sparkfleet_telemetry_interval_s", 0, "must be positive, got 0"),
    ("sparkfleet_telemetry_interval_s", "fast", "must be an integer or a number"),
    ("sparkfleet_preflight_max_gpu_temp_c", 500, "must be at most 120"),
    ("sparkfleet_preflight_min_free_disk_gib", -1, "must not be negative"),
    ("sparkfleet_image_offline", "maybe", "must be a boolean"),
    ("sparkfleet_gpu_locked_clocks", {"min": 2000, "max": 1000}, "must be positive and at most max"),
    ("sparkfleet_gpu_locked_clocks", "1500,1980", "must be a mapping"),
    ("sparkfleet_gpu_power_limit", 0, "must be positive"),
    ("sparkfleet_reproducibility_tolerance_pct", 0, "must be positive"),
    ("sparkfleet_gpus", [-1], "must be a list of GPU indices"),
    ("sparkfleet_gpu_locked_clocks", {"min": 1500}, "must be {min: MHz, max: MHz}"),
    # NaN and infinity are refused everywhere, also spelled as -e strings
    ("sparkfleet_telemetry_interval_s", "nan", "must be a finite number"),
    ("sparkfleet_preflight_max_gpu_temp_c", float("inf"), "must be a finite number"),
    ("sparkfleet_preflight_max_gpu_temp_c", -300, "must not be negative"),
    ("sparkfleet_gpu_power_limit", "-inf", "must be a finite number"),
    ("sparkfleet_workload_env", {"X": float("nan")}, "must hold only finite numbers"),
    ("sparkfleet_poll_interval_s", 0, "must be positive"),
    ("sparkfleet_report_after_s", "soon", "must be an integer or a number"),
    ("sparkfleet_docker_variants", {"v": {"extra": ["--x"]}}, "variant 'v' must be"),
    ("sparkfleet_rootfs_source", "nfs", "'nfs' is not one of image, overlay"),
])
def test_bad_settings_name_host_and_variable(name, value, message):
    errors, _ = problems("spark-07", {name: value})
    assert len(errors) == 1 and errors[0].startswith(f"spark-07: {name}: ") and message in errors[0], errors


def test_unknown_sparkfleet_variables_are_warned_about_not_fatal():
    errors, warnings = problems("s1", {"sparkfleet_telemetry_intervall_s": 1, "other_var": 1})
    assert errors == []
    assert warnings == ["s1: sparkfleet_telemetry_intervall_s: not a sparkfleet setting (a typo?); ignored"]


def test_follower_settings_the_matrix_role_uses_are_known_settings():
    """Drift: the matrix role reads sparkfleet_poll_interval_s and sparkfleet_report_after_s; validation
    used to warn they were 'a typo?; ignored'."""
    assert problems("s1", {"sparkfleet_poll_interval_s": 5, "sparkfleet_report_after_s": "30"}) == ([], [])
