"""Campaign definition: strict validation with errors that name the field, presets, and the run plan.

A campaign is a mapping (YAML) — either bare or under a ``sparkfleet_campaign`` key, so the same file
works with ``sparkfleet validate campaign.yml`` and ``ansible-playbook bench.yml -e @campaign.yml``.
Validation runs on the controller before any host is touched; the plan it returns is what every host
executes, in order.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparkfleet.errors import UsageError
from sparkfleet_host.record import run_id, slug

WRAPPER_KEY = "sparkfleet_campaign"

#: The study's method: 50 requests x 128 output tokens, and the T1..T6 latency/throughput ladder.
WORKLOAD_PRESETS: dict[str, dict[str, Any]] = {
    "study": {"engine": "trtllm", "mode": "throughput", "requests": 50, "input_len": 128, "output_len": 128},
    "T1": {"engine": "trtllm", "mode": "throughput", "batch": 1, "input_len": 128, "output_len": 32},
    "T2": {"engine": "trtllm", "mode": "throughput", "batch": 1, "input_len": 512, "output_len": 128},
    "T3": {"engine": "trtllm", "mode": "throughput", "batch": 1, "input_len": 2048, "output_len": 512},
    "T4": {"engine": "trtllm", "mode": "throughput", "batch": 4, "input_len": 512, "output_len": 128},
    "T5": {"engine": "trtllm", "mode": "throughput", "batch": 16, "input_len": 512, "output_len": 128},
    "T6": {"engine": "trtllm", "mode": "throughput", "batch": 32, "input_len": 512, "output_len": 128},
    "matmul": {"engine": "matmul", "iterations": 10, "warmup": 1},
}
ENGINES = ("trtllm", "matmul", "hf-generate")
ORDERS = ("interleaved", "randomized", "sequential")
#: native: chroot into the image's rootfs; container: docker run; bare: straight on the host (no isolation),
#: the baseline that shows what the chroot itself costs.
ENV_KINDS = ("native", "container", "bare")

_TOP_KEYS = {
    "name": str, "models": list, "environments": list, "workloads": list, "iterations": int,
    "warmup_runs": int, "order": str, "seed": int, "cooldown": dict, "timeout_s": (int, float),
    "results_dir": str, "image": str, "description": str, "image_build": dict,
}
_REQUIRED = ("name", "models", "environments", "workloads")
_MODEL_KEYS = {"name": str, "hf_id": str, "path": str}
_ENV_KEYS = {"name": str, "kind": str, "docker_flags": list, "variant": str}
_WORKLOAD_KEYS = {
    "name": str, "preset": str, "engine": str, "mode": str, "batch": int, "concurrency": int, "requests": int,
    "input_len": int, "output_len": int, "backend": str, "iterations": int, "warmup": int, "size": int,
    "extra_args": list, "env": dict,
}
_COOLDOWN_KEYS = {
    "threshold_c": (int, float), "settle_band_c": (int, float), "settle_window_s": (int, float),
    "min_wait_s": (int, float), "max_wait_s": (int, float), "poll_interval_s": (int, float), "on_timeout": str,
    "enabled": bool,
}
COOLDOWN_DEFAULTS = {"enabled": True, "threshold_c": 45, "settle_band_c": 1.0, "settle_window_s": 30,
                     "min_wait_s": 0, "max_wait_s": 900, "poll_interval_s": 2, "on_timeout": "continue"}


class CampaignError(UsageError):
    """Every problem found, each naming its field: `campaign.models[1].name: ...`."""

    def __init__(self, problems: list[str], source: str = "campaign"):
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems) if len(problems) == 1 else
                         f"{source}: {len(problems)} problems:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class PlannedRun:
    run_id: str
    order_index: int
    model: dict[str, Any]
    environment: dict[str, Any]
    workload: dict[str, Any]
    iteration: int
    warmup: bool

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "order_index": self.order_index, "model": self.model,
                "environment": self.environment, "workload": self.workload, "iteration": self.iteration,
                "warmup": self.warmup}


def load(path: str | Path) -> dict[str, Any]:
    """Read and validate a campaign file; returns the resolved campaign."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise CampaignError([f"not valid YAML{where}: {getattr(exc, 'problem', exc)}"], str(path)) from exc
    return resolve(data, source=str(path))


def resolve(data: Any, source: str = "campaign") -> dict[str, Any]:
    """Validate a campaign mapping and fill in defaults and presets. Raises CampaignError."""
    if isinstance(data, dict) and set(data) == {WRAPPER_KEY}:
        data = data[WRAPPER_KEY]
    problems: list[str] = []
    if not isinstance(data, dict):
        raise CampaignError([f"campaign must be a mapping, got {_tname(data)}"], source)
    _check_keys(data, _TOP_KEYS, "campaign", problems)
    for key in _REQUIRED:
        if key not in data:
            problems.append(f"campaign.{key}: required")
    out: dict[str, Any] = {
        "name": data.get("name", ""),
        "iterations": data.get("iterations", 10),
        "warmup_runs": data.get("warmup_runs", 0),
        "order": data.get("order", "interleaved"),
        "seed": data.get("seed", 0),
        "timeout_s": data.get("timeout_s", 3600),
        "results_dir": data.get("results_dir", "results"),
        "image": data.get("image", "nvcr.io/nvidia/tensorrt-llm/release:spark-single-gpu-dev"),
    }
    if isinstance(out["name"], str) and out["name"] and slug(out["name"], 80) != out["name"]:
        problems.append(f"campaign.name: {out['name']!r} must use only letters, digits, '.', '_' and '-'")
    if isinstance(out["iterations"], int) and not 1 <= out["iterations"] <= 10000:
        problems.append(f"campaign.iterations: must be between 1 and 10000, got {out['iterations']}")
    if isinstance(out["warmup_runs"], int) and not 0 <= out["warmup_runs"] <= 100:
        problems.append(f"campaign.warmup_runs: must be between 0 and 100, got {out['warmup_runs']}")
    if out["order"] not in ORDERS:
        problems.append(f"campaign.order: {out['order']!r} is not one of {', '.join(ORDERS)}")
    if isinstance(out["timeout_s"], (int, float)) and out["timeout_s"] <= 0:
        problems.append(f"campaign.timeout_s: must be positive, got {out['timeout_s']}")
    out["models"] = _models(data.get("models"), problems)
    out["environments"] = _environments(data.get("environments"), problems)
    out["workloads"] = _workloads(data.get("workloads"), problems)
    out["cooldown"] = _cooldown(data.get("cooldown", {}), problems)
    out["image_build"] = _image_build(data.get("image_build"), problems)
    if problems:
        raise CampaignError(problems, source)
    out["config_hash"] = config_hash(out)
    return out


def config_hash(campaign: dict[str, Any]) -> str:
    body = {k: v for k, v in campaign.items() if k != "config_hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _tname(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number",
            bool: "a boolean", type(None): "nothing"}.get(type(value), type(value).__name__)


def _check_keys(data: dict, spec: dict[str, Any], where: str, problems: list[str]) -> None:
    for key, value in data.items():
        if key not in spec:
            known = ", ".join(sorted(spec))
            problems.append(f"{where}.{key}: unknown key (known: {known})")
            continue
        want = spec[key]
        types = want if isinstance(want, tuple) else (want,)
        # bool is an int in Python; YAML `yes` must not pass for a number, nor 1 for a boolean.
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            names = " or ".join(_tname(t()) if t is not type(None) else "nothing" for t in types)
            problems.append(f"{where}.{key}: must be {names}, got {_tname(value)} {value!r}")


def _list_of(value: Any, where: str, problems: list[str]) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{where}: must be a list, got {_tname(value)}")
        return []
    if not value:
        problems.append(f"{where}: empty: the matrix would have no runs")
    return value


def _unique_names(items: list[dict], where: str, problems: list[str]) -> None:
    seen: set[str] = set()
    for i, item in enumerate(items):
        name = item.get("name")
        if name in seen:
            problems.append(f"{where}[{i}].name: duplicate name {name!r}")
        seen.add(name)


def _name_ok(name: Any, where: str, problems: list[str]) -> bool:
    if not isinstance(name, str) or not name.strip():
        problems.append(f"{where}.name: required, a non-empty string")
        return False
    if "\n" in name or "\x00" in name or len(name) > 200:
        problems.append(f"{where}.name: {name!r} contains a newline/NUL or is longer than 200 characters")
        return False
    return True


def _models(value: Any, problems: list[str]) -> list[dict]:
    out = []
    for i, item in enumerate(_list_of(value, "campaign.models", problems)):
        where = f"campaign.models[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            problems.append(f"{where}: must be a mapping or a name, got {_tname(item)}")
            continue
        _check_keys(item, _MODEL_KEYS, where, problems)
        if _name_ok(item.get("name"), where, problems):
            path = item.get("path")
            if isinstance(path, str) and path and not path.startswith("/"):
                problems.append(f"{where}.path: must be absolute (a path on the hosts), got {path!r}")
            out.append({"name": item["name"], "hf_id": item.get("hf_id"), "path": item.get("path")})
    _unique_names(out, "campaign.models", problems)
    return out


def _environments(value: Any, problems: list[str]) -> list[dict]:
    out = []
    for i, item in enumerate(_list_of(value, "campaign.environments", problems)):
        where = f"campaign.environments[{i}]"
        if isinstance(item, str):
            item = {"name": item, "kind": item if item in ENV_KINDS else "container"}
        if not isinstance(item, dict):
            problems.append(f"{where}: must be a mapping or a name, got {_tname(item)}")
            continue
        _check_keys(item, _ENV_KEYS, where, problems)
        if not _name_ok(item.get("name"), where, problems):
            continue
        kind = item.get("kind", item["name"] if item["name"] in ENV_KINDS else "container")
        if kind not in ENV_KINDS:
            problems.append(f"{where}.kind: {kind!r} is not one of {', '.join(ENV_KINDS)}")
            continue
        if kind != "container" and "docker_flags" in item:
            problems.append(f"{where}.docker_flags: only a container environment takes docker flags")
        flags = item.get("docker_flags")
        if isinstance(flags, list) and not all(isinstance(f, str) for f in flags):
            problems.append(f"{where}.docker_flags: every flag must be a string")
        out.append({"name": item["name"], "kind": kind, "docker_flags": flags, "variant": item.get("variant")})
    _unique_names(out, "campaign.environments", problems)
    return out


def _workloads(value: Any, problems: list[str]) -> list[dict]:
    out = []
    for i, item in enumerate(_list_of(value, "campaign.workloads", problems)):
        where = f"campaign.workloads[{i}]"
        if isinstance(item, str):
            item = {"name": item, "preset": item}
        if not isinstance(item, dict):
            problems.append(f"{where}: must be a mapping or a preset name, got {_tname(item)}")
            continue
        _check_keys(item, _WORKLOAD_KEYS, where, problems)
        if not _name_ok(item.get("name", item.get("preset")), where, problems):
            continue
        preset_name = item.get("preset", item["name"] if item.get("name") in WORKLOAD_PRESETS else None)
        if preset_name is not None and not isinstance(preset_name, str):
            continue  # its type is already reported by _check_keys
        if preset_name is not None and preset_name not in WORKLOAD_PRESETS:
            problems.append(f"{where}.preset: unknown preset {preset_name!r} (known: "
                            f"{', '.join(WORKLOAD_PRESETS)})")
            continue
        resolved = {**WORKLOAD_PRESETS.get(preset_name or "", {}),
                    **{k: v for k, v in item.items() if k != "preset"}}
        resolved.setdefault("name", preset_name)
        engine = resolved.get("engine")
        if engine not in ENGINES:
            problems.append(f"{where}.engine: {engine!r} is not one of {', '.join(ENGINES)}")
            continue
        for key in ("batch", "concurrency", "requests", "input_len", "output_len", "iterations", "size"):
            if isinstance(resolved.get(key), int) and resolved[key] < 1:
                problems.append(f"{where}.{key}: must be at least 1, got {resolved[key]}")
        if engine == "trtllm" and resolved.get("mode", "throughput") not in ("throughput", "latency"):
            problems.append(f"{where}.mode: {resolved.get('mode')!r} is not throughput or latency")
        env = resolved.get("env")
        if isinstance(env, dict) and not all(isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)
                                             and isinstance(v, (str, int, float)) for k, v in env.items()):
            problems.append(f"{where}.env: names must be identifiers and values strings or numbers")
        extra = resolved.get("extra_args")
        if isinstance(extra, list) and not all(isinstance(a, str) for a in extra):
            problems.append(f"{where}.extra_args: every argument must be a string")
        out.append(resolved)
    _unique_names(out, "campaign.workloads", problems)
    return out


def _cooldown(value: Any, problems: list[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        problems.append(f"campaign.cooldown: must be a mapping, got {_tname(value)}")
        return dict(COOLDOWN_DEFAULTS)
    _check_keys(value, _COOLDOWN_KEYS, "campaign.cooldown", problems)
    out = {**COOLDOWN_DEFAULTS, **value}
    for key in ("settle_band_c", "settle_window_s", "min_wait_s", "max_wait_s"):
        if isinstance(out[key], (int, float)) and out[key] < 0:
            problems.append(f"campaign.cooldown.{key}: must not be negative, got {out[key]}")
    if isinstance(out["poll_interval_s"], (int, float)) and out["poll_interval_s"] <= 0:
        problems.append(f"campaign.cooldown.poll_interval_s: must be positive, got {out['poll_interval_s']}")
    if all(isinstance(out[k], (int, float)) for k in ("min_wait_s", "max_wait_s")) and \
            out["min_wait_s"] > out["max_wait_s"]:
        problems.append(f"campaign.cooldown.min_wait_s: {out['min_wait_s']} is above max_wait_s "
                        f"{out['max_wait_s']}")
    if out["on_timeout"] not in ("fail", "continue"):
        problems.append(f"campaign.cooldown.on_timeout: {out['on_timeout']!r} is not fail or continue")
    return out


_IMAGE_BUILD_KEYS = {"method": str, "suite": str, "packages": list, "mirror": str}


def _image_build(value: Any, problems: list[str]) -> dict[str, Any] | None:
    """Optional: build `image` on the host itself (debootstrap + docker import) when it is absent."""
    if value is None:
        return None
    if not isinstance(value, dict):
        problems.append(f"campaign.image_build: must be a mapping, got {_tname(value)}")
        return None
    _check_keys(value, _IMAGE_BUILD_KEYS, "campaign.image_build", problems)
    out = {"method": "debootstrap", "suite": "bookworm", "packages": ["python3", "python3-numpy"],
           "mirror": "http://deb.debian.org/debian", **value}
    if out["method"] != "debootstrap":
        problems.append(f"campaign.image_build.method: {out['method']!r} is not debootstrap")
    if not isinstance(out["packages"], list) or not all(
            isinstance(p, str) and re.fullmatch(r"[a-z0-9][a-z0-9+.-]*", p) for p in out["packages"]):
        problems.append("campaign.image_build.packages: every entry must be a Debian package name")
    if not re.fullmatch(r"[a-z]+", str(out["suite"])):
        problems.append(f"campaign.image_build.suite: {out['suite']!r} is not a Debian suite name")
    return out


def plan(campaign: dict[str, Any], host: str) -> list[PlannedRun]:
    """The host's runs in execution order. Warm-up runs (iteration 0, 1-based negatives) come first per cell.

    interleaved: iteration-major; within an iteration the environments alternate fastest, then models,
    and the environment order flips every iteration — slow drift hits every cell alike.
    randomized: a seeded shuffle of the whole matrix (warm-ups kept first). sequential: the study's order
    (model, then environment, then all iterations).
    """
    models, envs, loads = campaign["models"], campaign["environments"], campaign["workloads"]
    n_iter, n_warm = campaign["iterations"], campaign["warmup_runs"]
    cells = [(m, e, w) for m in models for w in loads for e in envs]
    warm = [(m, e, w, -k, True) for k in range(n_warm, 0, -1) for (m, e, w) in cells]
    if campaign["order"] == "sequential":
        measured = [(m, e, w, i, False) for m in models for e in envs for w in loads for i in range(1, n_iter + 1)]
    elif campaign["order"] == "randomized":
        measured = [(m, e, w, i, False) for (m, e, w) in cells for i in range(1, n_iter + 1)]
        random.Random(campaign["seed"]).shuffle(measured)  # same order on every host: comparable
    else:
        measured = []
        for i in range(1, n_iter + 1):
            env_order = envs if i % 2 else list(reversed(envs))
            measured += [(m, e, w, i, False) for w in loads for m in models for e in env_order]
    runs = []
    for index, (m, e, w, i, is_warm) in enumerate(warm + measured):
        rid = run_id(campaign["name"], host, m["name"], e["name"], w["name"], i)
        runs.append(PlannedRun(rid, index, m, e, w, i, is_warm))
    return runs
