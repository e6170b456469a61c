"""Campaign definition: strict validation with errors that name the field, presets, and the run plan.

A campaign is a mapping (YAML) — either bare or under a ``sparkfleet_campaign`` key, so the same file
works with ``sparkfleet validate campaign.yml`` and ``ansible-playbook bench.yml -e @campaign.yml``.
Validation runs on the controller before any host is touched; the plan it returns is what every host
executes, in order.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import fields
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import run_id, slug
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving, trtllm_cli
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import thermal
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate, memstudy, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.files import FileProblem, read_yaml

WRAPPER_KEY = "sparkfleet_campaign"

# The campaign's fields and presets are defined once, in settings.py and the catalogue; the cooldown's in
# sparkfleet_host/health/thermal.py (thermal_wait and bench_run check the same rules).
COOLDOWN_DEFAULTS = fields.defaults(thermal.COOLDOWN_FIELDS)


class CampaignError(UsageError):
    """Every problem found, each naming its field: `campaign.models[1].name: ...`."""

    def __init__(self, problems: list[str], source: str = "campaign"):
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems) if len(problems) == 1 else
                         f"{source}: {len(problems)} problems:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class PlannedRun:
    """One run as the host executes it: identity, place in the order, and its full launch spec (model,
    environment with its resolved docker flags, workload, timeout, cooldown)."""

    run_id: str
    order_index: int
    model: dict[str, Any]
    environment: dict[str, Any]
    workload: dict[str, Any]
    iteration: int
    warmup: bool
    timeout_s: float = 3600
    cooldown: dict[str, Any] = field(default_factory=lambda: dict(COOLDOWN_DEFAULTS))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load(path: str | Path) -> dict[str, Any]:
    """Read and validate a campaign file; returns the resolved campaign. Any unreadable file is a one-line
    UsageError naming it (files.py)."""
    try:
        data = read_yaml(path, "campaign")
    except FileProblem as exc:
        raise CampaignError([exc.problem], exc.path) from None
    return resolve(data, source=str(path))


def resolve(data: Any, source: str = "campaign") -> dict[str, Any]:
    """Validate a campaign mapping and fill in defaults and presets. Raises CampaignError."""
    if isinstance(data, dict) and set(data) == {WRAPPER_KEY}:
        data = data[WRAPPER_KEY]
    problems: list[str] = []
    if not isinstance(data, dict):
        raise CampaignError([f"campaign must be a mapping, got {fields.type_name(data)}"], source)
    data = memstudy.apply_preset(data)  # `preset: memory-study`: the preset's keys under the campaign's own
    # The matrix size from the lists' lengths, before any entry is checked or expanded: a campaign of millions
    # of runs is refused at once (sparkfleet.estimate), with the top-level fields' own problems.
    cap = _checked(data, "max_runs")
    raw = estimate.raw_count(data, _checked(data, "iterations"), _checked(data, "warmup_runs"))
    if raw > cap:
        fields.check_mapping({k: v for k, v in data.items() if not isinstance(v, (list, dict))},
                             settings.CAMPAIGN_FIELDS, "campaign", problems, required=False)
        raise CampaignError(problems + [f"campaign.max_runs: {estimate.too_many(raw, cap)}"], source)
    nested = {"models", "environments", "workloads", "cooldown", "image_build"}
    # Types, ranges and unknown keys from the field table; the nested fields are checked entry by entry below.
    fields.check_mapping({k: v for k, v in data.items() if k not in nested or not isinstance(v, (list, dict))},
                         settings.CAMPAIGN_FIELDS, "campaign", problems, required=False)
    problems += [f"campaign.{f.name}: required" for f in settings.CAMPAIGN_FIELDS if f.required and f.name not in data]
    out: dict[str, Any] = {f.name: data.get(f.name, f.default) for f in settings.CAMPAIGN_FIELDS
                           if f.resolved and f.name not in nested}
    out["name"] = data.get("name", "")
    if isinstance(out["name"], str) and out["name"] and slug(out["name"], 80) != out["name"]:
        problems.append(f"campaign.name: {out['name']!r} must use only letters, digits, '.', '_' and '-'")
    out["models"] = _models(data.get("models"), problems)
    # A/A twins and the memory-state factors (sparkfleet.memstudy): more environments and workloads, nothing else
    twins = memstudy.twin_environments(data.get("environments"), _checked(data, "aa"), problems)
    out["environments"] = memstudy.mark_aa(_environments(twins, problems))
    engines = _engines(data.get("engines"), problems)
    factors = _engine_levels(_checked(data, "factors"), engines, problems)
    loads = memstudy.cross_factors(_workloads(data.get("workloads"), problems, factors, engines), factors, problems)
    out["workloads"] = [_with_spec(w, engines) for w in loads]  # a crossed level's spec too
    problems += _serving_models(out["models"], out["workloads"])
    problems += _owned_args(data.get("workloads"), out["workloads"])
    problems += _cluster_problems(out["workloads"], out["environments"])
    problems += _window_problems(data.get("workloads"), out["models"], out["workloads"])
    if "timeout_s" not in data and any(serving.is_serving(w) for w in out["workloads"]):
        # a serving run lasts as long as its profile: its own timeout, unless the campaign gives one for all
        out["serving_timeout_s"] = {w["name"]: estimate.serving_timeout_s(w, out["timeout_s"])
                                    for w in out["workloads"] if serving.is_serving(w)}
    for key in ("preset", "factors", "aa"):  # kept only when given: other campaigns keep their config hash
        if data.get(key) not in (None, False):
            out[key] = data[key]
    if engines:
        out["engines"] = engines
    out["cooldown"] = _cooldown(data.get("cooldown", {}), problems)
    out["image_build"] = _image_build(data.get("image_build"), problems)
    if isinstance(out.get("image"), str) and out["image"].startswith(settings.OVERLAY_IMAGE_PREFIX) and any(
            e["kind"] == "container" for e in out["environments"]):
        problems.append(f"campaign.image: {out['image']!r} is an overlay of a host directory, not an image: a "
                        "container environment needs an image Docker can run")
    if not problems and estimate.count_runs(out) > cap:  # the twins and factors counted in
        problems.append(f"campaign.max_runs: {estimate.too_many(estimate.count_runs(out), cap)}")
    # a last net: no NaN or infinity anywhere, also where no field table looks
    if not problems and (problem := fields.find_non_finite(data, "campaign")):
        problems.append(problem)
    if problems:
        raise CampaignError(problems, source)
    out["config_hash"] = config_hash(out)
    return out


def _checked(data: dict[str, Any], name: str) -> Any:
    """The field's value when it passed its check (already reported otherwise), else its default: what builds
    on a field never sees a value its definition refuses."""
    f = next(f for f in settings.CAMPAIGN_FIELDS if f.name == name)
    value = data.get(name, f.default)
    return value if fields.field_problem(f, value) is None else f.default


def config_hash(campaign: dict[str, Any]) -> str:
    body = {k: v for k, v in campaign.items() if k != "config_hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _list_of(value: Any, where: str, problems: list[str]) -> list:
    if not isinstance(value, list):  # None (missing: reported as required) or a wrong type (reported)
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


def _confusable(value: Any, where: str, problems: list[str]) -> None:
    """Names a reader cannot tell apart (case, spaces, invisible characters) are one name spelled twice:
    refused naming both spellings. A bare string entry is its name."""
    if isinstance(value, list):
        names = [(f"{where}[{i}].name", item if isinstance(item, str) else item.get("name"))
                 for i, item in enumerate(value) if isinstance(item, (str, dict))]
        problems += settings.confusable_names(names)


def _name_ok(name: Any, where: str, problems: list[str]) -> bool:
    if not isinstance(name, str) or not name.strip():
        problems.append(f"{where}.name: required, a non-empty string")
        return False
    if "\n" in name or "\x00" in name or len(name) > 200:
        problems.append(f"{where}.name: {name!r} contains a newline/NUL or is longer than 200 characters")
        return False
    if problem := settings.name_problem(name):  # refused; kept in the list so a near twin is named too
        problems.append(f"{where}.name: {problem}")
    return True


def _check(item: dict, table, where: str, problems: list[str]) -> None:
    """Types, ranges and unknown keys from the field table; `name` is checked by _name_ok."""
    fields.check_mapping({k: v for k, v in item.items() if k != "name"}, table, where, problems, required=False)


def _models(value: Any, problems: list[str]) -> list[dict]:
    out = []
    for i, item in enumerate(_list_of(value, "campaign.models", problems)):
        where = f"campaign.models[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            problems.append(f"{where}: must be a mapping or a name, got {fields.type_name(item)}")
            continue
        before = len(problems)
        _check(item, settings.MODEL_FIELDS, where, problems)
        path = item.get("path")
        if isinstance(path, str) and path and not path.startswith("/") and len(problems) > before:
            problems[before:] = [p for p in problems[before:] if not p.startswith(f"{where}.path:")]
            problems.append(f"{where}.path: must be absolute (a path on the hosts), got {path!r}")
        if _name_ok(item.get("name"), where, problems):
            model = {"name": item["name"], "hf_id": item.get("hf_id"), "path": item.get("path")}
            for key in ("tokenizer", "gguf", "random_weights", "context_window", "kv_shape"):  # only when given:
                # other campaigns keep their config hash
                if item.get(key) is not None:
                    model[key] = item[key]
            out.append(model)
    _unique_names(out, "campaign.models", problems)
    _confusable(value, "campaign.models", problems)
    return out


def _environments(value: Any, problems: list[str]) -> list[dict]:
    out = []
    for i, item in enumerate(_list_of(value, "campaign.environments", problems)):
        where = f"campaign.environments[{i}]"
        if not isinstance(item, dict):  # a name is already {name, kind} (memstudy.twin_environments)
            problems.append(f"{where}: must be a mapping or a name, got {fields.type_name(item)}")
            continue
        if not _name_ok(item.get("name"), where, problems):
            continue
        kind = memstudy.environment_kind(item)
        if kind is None:  # never guessed: `Native` is not `native`, and not a container either
            name, kinds = item["name"], settings.ENVIRONMENT_KINDS
            hint = f"; did you mean {settings.name_key(name)!r}?" if settings.name_key(name) in kinds else ""
            problems.append(f"{where}: {name!r} is not an environment kind ({', '.join(kinds)}) and declares no "
                            f"kind: write {{name: {name!r}, kind: <one of them>}}{hint}")
            continue
        before = len(problems)
        _check({**item, "kind": kind}, settings.ENVIRONMENT_FIELDS, where, problems)
        if any(p.startswith(f"{where}.kind:") for p in problems[before:]):
            continue
        if kind != "container" and "docker_flags" in item:
            problems.append(f"{where}.docker_flags: only a container environment takes docker flags")
        out.append({"name": item["name"], "kind": kind, "docker_flags": item.get("docker_flags"),
                    "variant": item.get("variant")})
    _unique_names(out, "campaign.environments", problems)
    _confusable(value, "campaign.environments", problems)
    return out


def _engines(value: Any, problems: list[str]) -> dict[str, dict]:
    """The campaign's own serving engines (``engines``: name -> spec, settings.ENGINE_SPEC_FIELDS), each spec
    with its defaults. A name follows the campaign's name rules and never shadows a built-in engine."""
    if not isinstance(value, dict):  # None, or a wrong type reported with the campaign's fields
        return {}
    builtin = {settings.name_key(e): e for e in serving.engine_names()}
    out = {}
    for name, spec in value.items():
        where = f"campaign.engines.{name}"
        if not isinstance(name, str) or not name.strip() or "\n" in name or "\x00" in name or len(name) > 200:
            problems.append(f"campaign.engines: {name!r} is not an engine name (a non-empty string of at most 200 "
                            "characters, no newline)")
            continue
        if problem := settings.name_problem(name):
            problems.append(f"{where}: {problem}")
            continue
        if settings.name_key(name) in builtin:
            problems.append(f"{where}: {name!r} would shadow the built-in engine {builtin[settings.name_key(name)]!r}:"
                            " give it another name")
            continue
        if not isinstance(spec, dict):
            problems.append(f"{where}: must be a mapping {{command, ready_path, port, served_model_name_default, "
                            f"kv_log}}, got {fields.type_name(spec)}")
            continue
        before = len(problems)
        fields.check_mapping(spec, settings.ENGINE_SPEC_FIELDS, where, problems)
        if len(problems) == before:
            out[name] = {**fields.defaults(settings.ENGINE_SPEC_FIELDS), **spec}
    problems += settings.confusable_names([(f"campaign.engines.{n}", n) for n in value if isinstance(n, str)])
    return out


def _engine_levels(factors: Any, engines: dict[str, dict], problems: list[str]) -> Any:
    """``factors`` when its engine levels are serving engines (built-in or the campaign's), else None (refused)."""
    levels = factors.get("engine") if isinstance(factors, dict) else None
    known = (*serving.engine_names(serves=True, managed=True), *engines)  # an endpoint is one workload's
    bad = [level for level in levels or [] if level not in known]
    if bad:
        problems.append(f"campaign.factors: engine: every level must be a serving engine ({', '.join(known)}), "
                        f"got {bad[0]!r}")
        return None
    return factors


def _with_spec(workload: dict[str, Any], engines: dict[str, dict]) -> dict[str, Any]:
    """The workload carrying its engine's spec when that is one of the campaign's engines (the host needs no
    campaign: serving.engine_spec reads it), and no spec otherwise."""
    spec = engines.get(workload.get("engine"))
    if spec is None:
        return {k: v for k, v in workload.items() if k != "engine_spec"}
    return {**workload, "engine_spec": copy.deepcopy(spec)}


def _workloads(value: Any, problems: list[str], factors: Any = None,
               engines: dict[str, dict] | None = None) -> list[dict]:
    """The workloads with their presets' fields. A serving workload (a serving engine, one of the campaign's
    ``engines``, or no engine, a profile and ``factors.engine`` to cross it with) gets the serving fields'
    defaults; fields the other kind would silently ignore are refused."""
    engines = engines or {}
    engine_factor = isinstance(factors, dict) and "engine" in factors
    out = []
    for i, item in enumerate(_list_of(value, "campaign.workloads", problems)):
        where = f"campaign.workloads[{i}]"
        if isinstance(item, str):
            item = {"name": item, "preset": item}
        if not isinstance(item, dict):
            problems.append(f"{where}: must be a mapping or a preset name, got {fields.type_name(item)}")
            continue
        before = len(problems)
        _check(item, settings.WORKLOAD_FIELDS, where, problems)
        if isinstance(item.get("profile"), dict):
            problems += settings.profile_problems(item["profile"], f"{where}.profile")
        if not _name_ok(item.get("name", item.get("preset")), where, problems):
            continue
        preset_name = item.get("preset", item["name"] if item.get("name") in settings.WORKLOAD_PRESETS else None)
        if preset_name is not None and not isinstance(preset_name, str):
            continue  # its type is already reported
        if preset_name is not None and preset_name not in settings.WORKLOAD_PRESETS:
            problems.append(f"{where}.preset: unknown preset {preset_name!r} (known: "
                            f"{', '.join(settings.WORKLOAD_PRESETS)})")
            continue
        preset = copy.deepcopy(settings.WORKLOAD_PRESETS.get(preset_name or "", {}))  # a profile's lists are shared
        preset_engine = preset.get("engine")
        if "preset" not in item and preset_engine is not None and item.get("engine", preset_engine) != preset_engine:
            # Named like a preset, another engine: the preset's parameters would be inherited unasked. (An explicit
            # `preset:` with another engine is asked for: e.g. hf-generate in T1's shape.)
            problems.append(f"{where}.engine: {item['engine']!r}, but the workload is named like the preset "
                            f"{preset_name!r}, whose engine is {preset_engine!r} (its parameters would be inherited): "
                            f"give the workload another name, or write preset: {preset_name} to inherit them")
            continue
        resolved = {**preset, **{k: v for k, v in item.items() if k != "preset"}}
        resolved.setdefault("name", preset_name)
        engine = resolved.get("engine")
        crossed = engine is None and engine_factor and "profile" in resolved  # its engine comes from the factor
        if engine is None and not crossed:
            hint = (f" (the preset {preset_name!r} names none)" if preset_name else "") + (
                "; a serving workload can take its engines from campaign.factors.engine" if "profile" in resolved
                else "")
            problems.append(f"{where}.engine: required, one of "
                            f"{', '.join((*serving.engine_names(), *engines))}{hint}")
            continue
        if not crossed and not isinstance(engine, str):
            continue  # its type is already reported (a list or a mapping cannot name an engine)
        if not crossed and engine not in serving.ENGINES and engine not in engines:
            problems.append(f"{where}.engine: {engine!r} is not one of "
                            f"{', '.join((*serving.engine_names(), *engines))}")
            continue
        resolved = _with_spec(resolved, engines)
        if engine == "trtllm" and resolved.get("mode", "throughput") not in trtllm_cli.MODES:
            problems.append(f"{where}.mode: {resolved.get('mode')!r} is not {' or '.join(trtllm_cli.MODES)}")
        problems += _kind_problems(resolved, preset, preset_name, where, crossed or serving.is_serving(resolved))
        problems += _endpoint_problems(resolved, where)
        if len(problems) == before:
            if crossed or serving.is_serving(resolved):  # in the contract's order: name, engine, profile, the rest
                resolved = {k: resolved[k] for k in ("name", "engine", "profile") if k in resolved} | {
                    **settings.serving_defaults(), **resolved}
            if not serving.managed(resolved):  # no server of its own: none of a started server's fields
                resolved = {k: v for k, v in resolved.items() if k not in settings.MANAGED_SERVER_FIELDS}
            out.append(resolved)
    _unique_names(out, "campaign.workloads", problems)
    _confusable(value, "campaign.workloads", problems)
    return out


def _kind_problems(resolved: dict[str, Any], preset: dict[str, Any], preset_name: str | None, where: str,
                   serves: bool) -> list[str]:
    """A serving workload needs a profile and takes none of the fields it would ignore; another workload takes
    no serving field. Each problem names the field, and the preset when the field came from it."""
    engine = resolved.get("engine") or "from campaign.factors.engine"

    def origin(key: str) -> str:
        return f" (from the preset {preset_name!r})" if key in preset and preset_name else ""

    if serves:
        problems = [f"{where}.{key}: a serving workload (engine {engine}) does not take it{origin(key)}"
                    + ("; give server arguments as server_args" if key == "extra_args" else "")
                    for key in settings.NON_SERVING_FIELDS if key in resolved]
        if "profile" not in resolved:
            problems.append(f"{where}.profile: required for a serving workload (engine {engine}): "
                            f"{{depth, concurrency, pp, tg}} lists, or a preset with one ("
                            + ", ".join(n for n, p in settings.WORKLOAD_PRESETS.items() if "profile" in p) + ")")
        return problems
    return [f"{where}.{key}: only a serving workload ({', '.join(serving.engine_names(serves=True))}) takes it, "
            f"not engine "
            f"{engine}{origin(key)}" for key in settings.SERVING_FIELDS if key in resolved]


def _endpoint_problems(resolved: dict[str, Any], where: str) -> list[str]:
    """An unmanaged server's workload (engine external) names its endpoint and none of a started server's fields;
    an endpoint belongs to engine external only."""
    external = resolved.get("engine") == settings.EXTERNAL_ENGINE
    if not external:
        return [f"{where}.endpoint: only a workload with engine {settings.EXTERNAL_ENGINE} (a server sparkfleet does "
                f"not start) takes it, not engine {resolved.get('engine') or 'from campaign.factors.engine'}"
                ] if "endpoint" in resolved else []
    problems = [] if resolved.get("endpoint") is not None else [
        f"{where}.endpoint: required for engine {settings.EXTERNAL_ENGINE}: {{url, model}} of the server to measure"]
    return problems + [f"{where}.{key}: engine {settings.EXTERNAL_ENGINE} measures a server sparkfleet does not start"
                       f" (its endpoint): {key} describes one it starts" for key in settings.MANAGED_SERVER_FIELDS
                       if key in resolved]


def _serving_models(models: list[dict], workloads: list[dict]) -> list[str]:
    """Every model runs every workload: a serving run's client counts tokens with the model's tokenizer (its
    ``tokenizer``; else, on the host, its ``path`` when that is a directory, or for a GGUF - a .gguf ``path`` or
    ``gguf`` - the tokenizer.json beside it or one derived from its own vocabulary: serving.tokenizer_choice), so
    a model with none of them is refused; and llama.cpp serves a .gguf file (``gguf``, else a .gguf ``path``).
    Refused here, before any host is changed."""
    served = [w["name"] for w in workloads if serving.is_serving(w)]
    llamacpp = [w["name"] for w in workloads if w.get("engine") == "llama.cpp"]
    problems = []
    for i, model in enumerate(models if served else []):
        path = model.get("path")
        if not (model.get("tokenizer") or path or model.get("gguf")):
            problems.append(f"campaign.models[{i}].tokenizer: required: serving workload {served[0]!r} runs the "
                            f"model {model['name']!r}, which has no path or gguf on the hosts to take its tokenizer "
                            f"from; its client (llama-benchy) counts tokens with it, offline: give tokenizer (a "
                            f"tokenizer.json, or a directory holding one, on the hosts), or the model's path (its "
                            f"directory, or its .gguf file)")
        if llamacpp and not (model.get("gguf") or (path or "").endswith(".gguf")):
            problems.append(f"campaign.models[{i}].gguf: required: llama.cpp workload {llamacpp[0]!r} runs the model "
                            f"{model['name']!r}, whose path {path!r} is not a .gguf file: give gguf (the .gguf file "
                            f"on the hosts) or a .gguf path")
    return problems


def _cluster_problems(workloads: list[dict], environments: list[dict]) -> list[str]:
    """A workload on a cluster: its engine spans nodes as its topology asks (serving.cluster_problem), a topology
    needs a cluster. A launcher that starts every rank from rank 0 (trtllm-serve's mpirun, over SSH) runs bare only:
    its remote ranks start on the worker's host, outside the chroot or container the run would place them in; every
    other multi-node run runs in any environment (each worker in the run's environment on its node).
    Whether the cluster exists with two hosts or more is the inventory's: planning.place_cluster_runs."""
    problems = []
    not_bare = [e["name"] for e in environments if e.get("kind") != "bare"]
    for workload in workloads:
        name = workload.get("name")
        if workload.get("topology") and not workload.get("cluster"):
            problems.append(f"campaign.workloads: workload {name}: topology {workload['topology']!r} needs a cluster "
                            f"(the workload's cluster field)")
        if not workload.get("cluster"):
            continue
        problem = serving.cluster_problem(workload)
        if problem:
            problems.append(f"campaign.workloads: workload {name}: cluster {workload['cluster']!r}: {problem}")
        elif not_bare and serving.starts_workers_from_rank_0(workload):
            problems.append(f"campaign.workloads: workload {name}: cluster {workload['cluster']!r}: engine "
                            f"{workload.get('engine')} starts every rank from rank 0 over SSH (mpirun), so its "
                            f"workers' ranks would run on their hosts, outside the environment; it runs in bare "
                            f"environments only, and the campaign has {', '.join(not_bare)}")
    return problems


def _owned_args(raw: Any, workloads: list[dict]) -> list[str]:
    """A serving workload's server_args or client_args that set what sparkfleet sets on that command line (the
    port, host, model, served name; the client's profile levels, runs, output format: serving.overriding_args,
    from the engine's and the client's own declarations) would be overridden silently or fight it (a server on
    another port never answers). Each refused, naming the workload, the flag and what sets it instead."""
    index = _raw_index(raw)
    problems: list[str] = []
    for workload in workloads:
        if not serving.is_serving(workload):
            continue
        base = workload.get("base", workload.get("name"))
        where = f"campaign.workloads[{index[base]}]" if base in index else "campaign.workloads"
        try:
            found = serving.overriding_args(workload)
        except serving.ServingError:  # not a serving engine: refused with its own message
            continue
        for field_name, text in found:
            # client_args is the same for every engine a workload is crossed with: named once, by the workload
            name = base if field_name == "client_args" else workload.get("name")
            problem = f"{where}.{field_name}: workload {name}: {text}"
            if problem not in problems:
                problems.append(problem)
    return problems


def _raw_index(raw: Any) -> dict[Any, int]:
    """Workload name (or preset) -> its index in the campaign's own workloads list, for messages."""
    index: dict[Any, int] = {}
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        key = item.get("name", item.get("preset")) if isinstance(item, dict) else item
        if isinstance(key, str):
            index.setdefault(key, i)
    return index


def _window_problems(raw: Any, models: list[dict], workloads: list[dict]) -> list[str]:
    """A serving point deeper (depth + pp + tg) than a model's context window (its context_window, else the
    catalogue's for its hf_id: estimate.window_problems), refused naming the workload, the points, the model and
    its window. A workload crossed with several engines is named once: the window is the model's."""
    index = _raw_index(raw)
    problems: list[str] = []
    for workload, _, text in estimate.window_problems(models, workloads):
        base = workload.get("base", workload.get("name"))
        where = f"campaign.workloads[{index[base]}].profile" if base in index else "campaign.workloads"
        problem = f"{where}: workload {base}: {text}"
        if problem not in problems:
            problems.append(problem)
    return problems


def engine_model(model: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    """The model as a run of ``workload`` launches it: a llama.cpp run serves the model's ``gguf`` as its path
    (the tokenizer defaulting to the model's own path), and so does a run of a campaign's own engine when the
    model has no path (its ``{model}``); every other run the model as it is."""
    if "engine_spec" in workload and model.get("gguf") and not model.get("path"):
        return {**model, "path": model["gguf"]}
    if workload.get("engine") != "llama.cpp" or not model.get("gguf"):
        return model
    tokenizer = model.get("tokenizer") or model.get("path")
    return {**model, "path": model["gguf"], **({"tokenizer": tokenizer} if tokenizer else {})}


def _cooldown(value: Any, problems: list[str]) -> dict[str, Any]:
    if not isinstance(value, dict):  # reported with the campaign's fields
        return dict(COOLDOWN_DEFAULTS)
    where = "campaign.cooldown"
    problems += [f"{where}.{k}: unknown key (known: {', '.join(sorted(thermal.COOLDOWN_BY_NAME))})"
                 for k in value if k not in thermal.COOLDOWN_BY_NAME]
    problems += thermal.cooldown_problems(value, where)
    return {**COOLDOWN_DEFAULTS, **{k: v for k, v in value.items() if k in thermal.COOLDOWN_BY_NAME}}


def _image_build(value: Any, problems: list[str]) -> dict[str, Any] | None:
    """Optional: build `image` on the host itself (debootstrap + docker import) when it is absent."""
    if not isinstance(value, dict):  # None, or a wrong type reported with the campaign's fields
        return None
    fields.check_mapping(value, settings.IMAGE_BUILD_FIELDS, "campaign.image_build", problems)
    return {**fields.defaults(settings.IMAGE_BUILD_FIELDS), **value}


def plan(campaign: dict[str, Any], host: str, host_settings: dict[str, Any] | None = None) -> list[PlannedRun]:
    """The host's runs in execution order, each with its full launch spec: model, environment (a container's
    docker flags resolved from ``host_settings``, the host's ``sparkfleet_*`` variables), workload, timeout and
    cooldown. Resolved once, here, on the controller; the roles pass the plan to bench_run as it is.

    Warm-up runs (iteration 0, 1-based negatives) come first per cell.

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
    launch, problems = {}, []
    for index, env in enumerate(envs):
        try:  # a container's docker_flags resolved from the host's sparkfleet_docker_* settings
            launch[env["name"]] = env if env.get("kind") != "container" else {
                **env, "docker_flags": settings.resolve_docker_flags(env, host_settings or {})}
        except ValueError as exc:
            problems.append(f"campaign.environments[{index}].variant: on {host}: {exc}")
    # a llama.cpp server allocates its whole KV cache at start: it must fit the host (estimate.kv_problems)
    problems += estimate.kv_problems(campaign, host_settings, host)
    if problems:
        raise CampaignError(problems, "sparkfleet_campaign")
    cooldown = campaign["cooldown"]
    runs = []
    for index, (m, e, w, i, is_warm) in enumerate(warm + measured):
        rid = run_id(campaign["name"], host, m["name"], e["name"], w["name"], i)
        runs.append(PlannedRun(rid, index, engine_model(m, w), launch[e["name"]], w, i, is_warm,
                               estimate.run_timeout_s(campaign, w), cooldown))
    return runs
