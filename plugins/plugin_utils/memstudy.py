"""Memory-state factors, A/A pairs and the ``memory-study`` preset of a campaign (issue 15).

The study found 1.7-2.7x less KV cache in Docker than natively on a DGX Spark and blamed cgroup accounting of
unified memory. These campaign features let one campaign test that explanation:

* ``factors``: factors crossed into the workloads, like any other axis of the matrix, and so interleaved with
  the environments: ``engine`` (serving workloads: a serving preset such as ``spark-arena`` names no engine;
  ``<workload>.<engine>``), ``kv_fraction`` (TensorRT-LLM's ``kv_cache_config.free_gpu_memory_fraction``,
  given through ``--extra_llm_api_options``; trtllm workloads only) and ``drop_caches`` (page cache dropped
  before the run, or not). Each combination is a workload of its own, named
  ``<workload>.<engine>.kv<F>.<drop|keep>`` (the factors that apply), carrying ``base`` (the workload it came
  from) and ``factors`` (the names of the factors crossed: their levels are the workload's own ``engine`` /
  ``kv_fraction`` / ``drop_caches``) into the run records' ``workload_params``.
* A/A pairs: two environments with identical settings (same kind, docker flags and variant), the same
  environment named twice in ``environments`` with the same settings (the second becomes ``<name>.aa``; the
  same name with other settings is still a duplicate-name error), or ``aa: true`` (every
  environment gets a twin ``<name>.aa``; ``aa: [names]`` only those) run the same thing twice, interleaved,
  so the report can measure the noise floor. Each member carries ``aa_group`` (the first member's name) and
  ``aa_member`` (``a``, ``b``, ...); environments outside a pair carry neither.
* ``preset: memory-study``: the study's question with these factors (the catalogue's
  ``campaigns/memory-study.yml``); the campaign's own keys override the preset's.

Controller side only; the hosts see the resolved workloads and environments.
"""

from __future__ import annotations

import copy
import string
from typing import Any

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings

AA_SUFFIX = ".aa"


# ----------------------------------------------------------------------------------------- resolving


def apply_preset(data: dict[str, Any]) -> dict[str, Any]:
    """The campaign with its ``preset``'s keys (a catalogue campaign) under its own (unknown presets are left for
    the field check)."""
    preset = settings.CAMPAIGNS.get(data.get("preset")) if isinstance(data.get("preset"), str) else None
    return data if preset is None else {**copy.deepcopy(preset), **data}


def environment_kind(item: dict[str, Any]) -> Any:
    """An environment's kind: its own ``kind``, else its name when the name is exactly a kind, else container
    when it gives docker flags or a Docker variant, else None (refused by the campaign check: never guessed)."""
    name = item.get("name")
    if "kind" in item:
        return item["kind"]
    if name in settings.ENVIRONMENT_KINDS:
        return name
    return "container" if item.get("docker_flags") is not None or item.get("variant") is not None else None


def _with_kind(item: dict[str, Any]) -> dict[str, Any]:
    kind = environment_kind(item)
    return item if kind is None else {**item, "kind": kind}


def _settings(item: dict[str, Any]) -> tuple[Any, ...]:
    return (environment_kind(item), repr(item.get("docker_flags")), item.get("variant"))


def twin_environments(value: Any, aa: Any, problems: list[str]) -> Any:
    """Raw ``environments`` with A/A twins: a name listed again becomes ``<name>.aa`` (``.aa3`` for a third);
    ``aa: true`` (or a list of names) adds a twin ``<name>.aa`` after each (named) environment."""
    if not isinstance(value, list):
        return value
    items = [_with_kind({"name": it}) if isinstance(it, str) else it for it in value]
    seen: dict[str, int] = {}
    first: dict[str, Any] = {}
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            out.append(item)
            continue
        n = seen.get(item["name"], 0) + 1
        seen[item["name"]] = n
        first.setdefault(item["name"], _settings(item))
        # The same environment again is its A/A twin; the same name with other settings stays a duplicate.
        if n > 1 and _settings(item) == first[item["name"]]:
            item = {**_with_kind(item), "name": item["name"] + AA_SUFFIX + ("" if n == 2 else str(n))}
        out.append(item)
    if aa in (None, False):
        return out
    names = {it["name"] for it in out if isinstance(it, dict) and isinstance(it.get("name"), str)}
    wanted = names if aa is True else set(aa) if isinstance(aa, list) else set()
    for name in sorted(wanted - names):
        problems.append(f"campaign.aa: {name!r} is not one of the campaign's environments")
    twinned = []
    for item in out:
        twinned.append(item)
        if isinstance(item, dict) and item.get("name") in wanted:
            twin = item["name"] + AA_SUFFIX
            if twin not in names:
                twinned.append({**_with_kind(item), "name": twin})
    return twinned


def mark_aa(environments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Resolved environments with ``aa_group``/``aa_member`` on every member of a set of identical ones."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for env in environments:
        groups.setdefault(_settings(env), []).append(env)
    out = []
    for env in environments:
        members = groups[_settings(env)]
        if len(members) > 1:
            index = next(i for i, m in enumerate(members) if m is env)
            env = {**env, "aa_group": members[0]["name"], "aa_member": string.ascii_lowercase[index % 26]}
        out.append(env)
    return out


#: Which workloads a factor crosses (settings.FACTORS says it in words) and how a level names the crossed one.
_APPLIES = {
    "engine": lambda w: w.get("engine") is None or serving.is_serving(w),  # a campaign's own engine too
    "kv_fraction": lambda w: w.get("engine") == "trtllm",
    "drop_caches": lambda w: True,
}
_LABEL = {
    "engine": str,
    "kv_fraction": lambda level: f"kv{level:g}",
    "drop_caches": lambda level: "drop" if level else "keep",
}


def cross_factors(workloads: list[dict[str, Any]], factors: Any, problems: list[str]) -> list[dict[str, Any]]:
    """Every workload crossed with the levels of the factors that apply to it (settings.FACTORS): ``engine``
    crosses serving workloads (a serving preset names no engine), ``kv_fraction`` trtllm workloads,
    ``drop_caches`` every workload. A crossed workload is named ``<workload>.<label>...`` in the table's order."""
    for i, workload in enumerate(workloads):
        if workload.get("kv_fraction") is not None and workload.get("engine") != "trtllm":
            problems.append(f"campaign.workloads[{i}].kv_fraction: only a trtllm workload has a KV cache "
                            f"(engine {workload.get('engine')!r})")
    if not factors:  # None, or refused (the campaign passes a refused field's default)
        return workloads
    out = []
    for i, workload in enumerate(workloads):
        # in settings.FACTORS order, whatever the mapping's order (YAML writers sort keys): stable workload names
        axes = [(name, factors[name]) for name in settings.FACTORS if name in factors and _APPLIES[name](workload)]
        for name, _ in axes:
            if workload.get(name) is not None:
                problems.append(f"campaign.workloads[{i}].{name}: set here and in campaign.factors; use one")
        combos: list[list[tuple[str, Any]]] = [[]]
        for name, levels in axes:
            combos = [combo + [(name, level)] for combo in combos for level in levels]
        for combo in combos:
            if not combo:
                out.append(workload)
                continue
            label = ".".join(_LABEL[name](level) for name, level in combo)
            out.append({**workload, **dict(combo), "name": f"{workload['name']}.{label}",
                        "base": workload["name"], "factors": [name for name, _ in combo]})
    return out
