"""Inventory variables (`sparkfleet_*`): checked on the controller before any host is changed.

A typo'd threshold or a relative work dir would otherwise surface hours later, on one host, as an odd
failure. Each problem names the host and the variable.
"""

from __future__ import annotations

import re
from typing import Any

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _abs_path(v: Any) -> str | None:
    return None if isinstance(v, str) and v.startswith("/") and "\n" not in v else "must be an absolute path"


def _path(v: Any) -> str | None:
    return None if isinstance(v, str) and v and "\n" not in v else "must be a path"


# `-e name=value` always gives strings: accept the spellings the roles convert with `| bool` / `| float`.
_BOOL_WORDS = {"true", "false", "yes", "no", "1", "0"}


def _bool(v: Any) -> str | None:
    ok = isinstance(v, bool) or (isinstance(v, str) and v.lower() in _BOOL_WORDS)
    return None if ok else f"must be true or false, got {v!r}"


def _opt_bool(v: Any) -> str | None:
    return None if v is None or _bool(v) is None else f"must be true, false or null, got {v!r}"


def _as_number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    try:
        return float(v) if isinstance(v, str) else None
    except ValueError:
        return None


def _number(low: float | None = None, high: float | None = None, strict_low: bool = False):
    def check(raw: Any) -> str | None:
        v = _as_number(raw)
        if v is None:
            return f"must be a number, got {raw!r}"
        if low is not None and (v <= low if strict_low else v < low):
            return f"must be {'above' if strict_low else 'at least'} {low:g}, got {v:g}"
        if high is not None and v > high:
            return f"must be at most {high:g}, got {v:g}"
        return None
    return check


def _opt(check):
    return lambda v: None if v is None else check(v)


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) and v else "must be a non-empty string"


def _str_list(v: Any) -> str | None:
    return None if isinstance(v, list) and all(isinstance(x, str) for x in v) else "must be a list of strings"


def _env(v: Any) -> str | None:
    if not isinstance(v, dict):
        return "must be a mapping of environment variables"
    bad = [k for k, x in v.items() if not (isinstance(k, str) and _IDENT.match(k))
           or isinstance(x, (dict, list)) or x is None]
    return f"bad names or values: {', '.join(map(str, bad))}" if bad else None


def _clocks(v: Any) -> str | None:
    if v is None:
        return None
    if not (isinstance(v, dict) and set(v) == {"min", "max"} and all(isinstance(v[k], int) for k in v)):
        return "must be {min: MHz, max: MHz} (integers) or null"
    return None if 0 < v["min"] <= v["max"] else f"min {v['min']} must be positive and at most max {v['max']}"


def _dict(v: Any) -> str | None:
    return None if isinstance(v, dict) else "must be a mapping"


CHECKS = {
    "sparkfleet_work_dir": _abs_path,
    "sparkfleet_models_dir": _abs_path,
    "sparkfleet_results_dir": _path,
    "sparkfleet_workload_env": _env,
    "sparkfleet_docker_flags": _str_list,
    "sparkfleet_docker_variant": _str,
    "sparkfleet_docker_variants": _dict,
    "sparkfleet_image": _str,
    "sparkfleet_image_offline": _bool,
    "sparkfleet_image_archive": _opt(_path),
    "sparkfleet_rootfs_prune": _bool,
    "sparkfleet_telemetry_interval_s": _number(0, 60, strict_low=True),
    "sparkfleet_retry_failed": _bool,
    "sparkfleet_preflight_max_gpu_temp_c": _number(0, 120),
    "sparkfleet_preflight_pstates": _str_list,
    "sparkfleet_preflight_max_load_per_cpu": _number(0),
    "sparkfleet_preflight_min_free_memory_gib": _number(0),
    "sparkfleet_preflight_min_free_disk_gib": _number(0),
    "sparkfleet_preflight_max_gpu_processes": _number(0),
    "sparkfleet_preflight_fail_on_unknown": _bool,
    "sparkfleet_reproducibility_tolerance_pct": _number(0, 100, strict_low=True),
    "sparkfleet_gpu_persistence_mode": _opt_bool,
    "sparkfleet_gpu_locked_clocks": _clocks,
    "sparkfleet_gpu_power_limit": _opt(_number(0, strict_low=True)),
    "sparkfleet_cpu_governor": _opt(_str),
    "sparkfleet_drop_caches": _bool,
    "sparkfleet_gpus": _opt(lambda v: None if isinstance(v, list) and all(isinstance(i, int) and i >= 0 for i in v)
                            else "must be a list of GPU indices"),
    "sparkfleet_max_fail_percentage": _number(0, 100),
}
#: Set by the playbooks themselves, or campaign documents checked elsewhere.
KNOWN_OTHER = {"sparkfleet_campaign", "sparkfleet_reference_campaign", "sparkfleet_resolved_campaign",
               "sparkfleet_plan", "sparkfleet_controller_results", "sparkfleet_has_native",
               "sparkfleet_has_container"}


def problems(host: str, variables: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(errors, warnings) for one host's sparkfleet_* variables."""
    errors, warnings = [], []
    for name, value in sorted(variables.items()):
        if not name.startswith("sparkfleet_"):
            continue
        check = CHECKS.get(name)
        if check is None:
            if name not in KNOWN_OTHER and not name.startswith("sparkfleet_rootfs_"):
                warnings.append(f"{host}: {name}: not a sparkfleet setting (a typo?); ignored")
            continue
        message = check(value)
        if message:
            errors.append(f"{host}: {name}: {message}")
    return errors, warnings
