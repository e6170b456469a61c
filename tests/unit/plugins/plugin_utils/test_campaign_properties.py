"""Property-based: campaigns generated from the field definitions (plugin_utils/settings.py), some broken.

* validate accepts => the plan builds on every host, and the hosts' own checks accept every run: the
  cooldown (thermal.validate_cooldown_options, Cooldown.from_mapping, as thermal_wait and bench_run check
  it), the run identity bench_run recomputes, the engine's argv;
* validate refuses => every problem names a field (``campaign.<path>: ...``), and a broken field is named;
* a campaign built only of in-range values is accepted.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import fields
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import run_id
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.trtllm_cli import (
    supported_versions,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import thermal
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run.runexec import engine_steps
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings as defs
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, plan, resolve

NAME = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,10}[A-Za-z0-9])?", fullmatch=True)


def in_range(f: fields.Field):
    """Values of a numeric field inside its physical range."""
    if f.kind == "int":
        return st.integers(min_value=int(f.low) + int(f.low_open), max_value=min(int(f.high), 10 ** 6))
    return st.floats(min_value=f.low, max_value=f.high, exclude_min=f.low_open, exclude_max=f.high_open,
                     allow_nan=False, allow_infinity=False)


@st.composite
def cooldowns(draw):
    c = {}
    for f in thermal.COOLDOWN_FIELDS:
        if not draw(st.booleans()):
            continue
        if f.kind in ("int", "float"):
            c[f.name] = draw(in_range(f))
        elif f.choices:
            c[f.name] = draw(st.sampled_from(f.choices))
        elif f.kind == "bool":
            c[f.name] = draw(st.booleans())
    full = {**fields.defaults(thermal.COOLDOWN_FIELDS), **c}
    if full["min_wait_s"] > full["max_wait_s"] or full["settle_window_s"] > full["max_wait_s"]:
        c["max_wait_s"] = max(full["min_wait_s"], full["settle_window_s"])  # the cross-field rule, kept
    return c


WORKLOAD_NUMBERS = [f for f in defs.WORKLOAD_FIELDS if f.kind in ("int", "float") and f.low is not None]


@st.composite
def workloads(draw, name):
    preset = draw(st.sampled_from(sorted(defs.WORKLOAD_PRESETS)))
    w = {"name": name, "preset": preset}
    serving = "profile" in defs.WORKLOAD_PRESETS[preset]
    if serving:  # a serving preset names no engine
        w["engine"] = draw(st.sampled_from(defs.SERVING_ENGINES))
    # A KV fraction only where the engine preallocates a KV cache, serving fields only on a serving workload and
    # the others only elsewhere (cross-field rules the ranges do not say).
    numbers = [f for f in WORKLOAD_NUMBERS
               if (f.name in defs.SERVING_FIELDS) == serving
               and (f.name != "kv_fraction" or defs.WORKLOAD_PRESETS[preset].get("engine") == "trtllm")]
    for f in draw(st.lists(st.sampled_from(numbers), max_size=3, unique_by=lambda f: f.name)):
        w[f.name] = draw(in_range(f))
    if draw(st.booleans()):
        w["env"] = {"OMP_NUM_THREADS": draw(st.integers(1, 64))}
    return w


@st.composite
def campaigns(draw):
    top = {f.name: f for f in defs.CAMPAIGN_FIELDS}
    models = draw(st.lists(NAME, min_size=1, max_size=2, unique_by=str.casefold))  # Llama ~ llama
    envs = draw(st.lists(st.sampled_from(["native", "container", "bare"]), min_size=1, max_size=3, unique=True))
    wnames = draw(st.lists(NAME, min_size=1, max_size=2, unique_by=str.casefold))
    loads = [draw(workloads(n)) for n in wnames]
    if any(w.get("engine") in defs.SERVING_ENGINES for w in loads):  # a client's tokenizer, llama.cpp's .gguf
        models = [{"name": m, "tokenizer": "/models/tokenizer.json", "gguf": f"/models/{m}.gguf"} for m in models]
    c = {"name": draw(NAME), "models": models, "environments": envs, "workloads": loads,
         "iterations": draw(st.integers(1, 3)), "warmup_runs": draw(st.integers(0, 1)),
         "order": draw(st.sampled_from(defs.ORDERS)), "seed": draw(st.integers(0, 2 ** 32))}
    if draw(st.booleans()):
        c["timeout_s"] = draw(in_range(top["timeout_s"]))
    if draw(st.booleans()):
        c["cooldown"] = draw(cooldowns())
    return c


BAD_NUMBERS = [math.nan, math.inf, -math.inf, "12", True, None, [1]]


@st.composite
def broken(draw):
    """(campaign, the field path a problem must name): one numeric field set out of range or to a non-number."""
    c = draw(campaigns())
    where = draw(st.sampled_from(["top", "cooldown", "workload"]))
    if where == "top":
        f = draw(st.sampled_from([f for f in defs.CAMPAIGN_FIELDS if f.kind in ("int", "float")]))
        target, path = c, f"campaign.{f.name}"
    elif where == "cooldown":
        f = draw(st.sampled_from([f for f in thermal.COOLDOWN_FIELDS if f.kind == "float"]))
        target = c.setdefault("cooldown", {})
        path = f"campaign.cooldown.{f.name}"
    else:
        f = draw(st.sampled_from(WORKLOAD_NUMBERS))
        target, path = c["workloads"][0], f"campaign.workloads[0].{f.name}"
    choices = list(BAD_NUMBERS)
    if f.low is not None:
        choices.append(f.low - draw(st.sampled_from([1, 273.15, 1e9])) if not f.low_open else f.low)
    if f.high is not None:
        choices.append(f.high + draw(st.sampled_from([1, 1e9])))
    if f.kind == "int":
        choices.append(2.5)
    value = draw(st.sampled_from(choices))
    if value is None and f.nullable:
        value = math.nan
    target[f.name] = value
    return c, path


def _host_side_checks(campaign, host):
    runs = plan(campaign, host)
    assert len(runs) == (len(campaign["models"]) * len(campaign["environments"]) * len(campaign["workloads"])
                         * (campaign["iterations"] + campaign["warmup_runs"]))
    cooldown = thermal.Cooldown.from_mapping(campaign["cooldown"])  # bench_run's check, before any run
    options = {f.option: getattr(cooldown, f.name) for f in thermal.COOLDOWN_FIELDS if f.option}
    assert thermal.validate_cooldown_options(options) == []  # thermal_wait's check
    assert math.isfinite(campaign["timeout_s"]) and campaign["timeout_s"] > 0
    for run in runs:
        d = run.to_dict()
        assert run_id(campaign["name"], host, d["model"]["name"], d["environment"]["name"], d["workload"]["name"],
                      int(d["iteration"])) == d["run_id"]
        model = {**d["model"], "path": d["model"].get("path") or f"/models/{d['model']['name']}"}
        for version in supported_versions():  # every supported engine version accepts the plan's runs
            steps = engine_steps(d["workload"]["engine"], d["workload"], model, "/r/run", "/r/w",
                                 trtllm={"version": version.replace("N", "13")})
            assert steps and all(isinstance(a, str) for _, argv, _ in steps for a in argv)
    return runs


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(campaigns())
def test_in_range_campaigns_are_accepted_and_the_hosts_accept_their_plan(c):
    campaign = resolve(c)
    for host in ("spark-01", "h2"):
        _host_side_checks(campaign, host)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken())
def test_a_broken_number_is_refused_naming_its_field(case):
    c, path = case
    with pytest.raises(CampaignError) as err:
        resolve(c)
    problems = err.value.problems
    assert all(p.startswith("campaign") and ": " in p for p in problems), problems
    assert any(p.startswith(path + ":") for p in problems), (path, problems)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(campaigns(), st.sampled_from(["top", "cooldown", "workload", "model", "environment"]),
       st.sampled_from([f.name for f in defs.CAMPAIGN_FIELDS + thermal.COOLDOWN_FIELDS + defs.WORKLOAD_FIELDS]
                       + ["colour", "kind", "path", "hf_id", "docker_flags", "tokenizer", "gguf",
                          "random_weights"]), JSONISH)
def test_any_value_anywhere_either_passes_every_check_or_names_a_field(c, where, key, value):
    """Whatever lands in whatever field: accepted => the hosts accept the plan; refused => fields named."""
    if where == "top":
        c[key] = value
    elif where == "cooldown":
        c.setdefault("cooldown", {})[key] = value
    elif where == "workload":
        c["workloads"][0][key] = value
    elif where == "model":
        model = c["models"][0]
        c["models"][0] = {**(model if isinstance(model, dict) else {"name": model}), key: value}
    else:
        c["environments"][0] = {"name": c["environments"][0], key: value}
    try:
        campaign = resolve(c)
    except CampaignError as err:
        assert err.problems and all(p.startswith("campaign") and ": " in p for p in err.problems), err.problems
        return
    _host_side_checks(campaign, "spark-01")
