"""Serving workloads in the campaign language (issue 25) and the readiness/serving inventory settings (issue 24).

A serving workload: a serving engine, a profile {depth, concurrency, pp, tg} crossed inside the run, the client's
runs per point; presets (spark-arena, serve-quick) name no engine: the workload or ``factors.engine`` does.
"""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate, planning, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, plan, resolve

MODEL = {"name": "qwen", "path": "/var/lib/sparkfleet/models/Qwen3-8B"}
BASE = {"name": "s", "models": [MODEL], "environments": ["native"], "iterations": 1}


def campaign(*workloads, **over):
    return resolve({**BASE, "workloads": list(workloads), **over})


def problems(*workloads, **over) -> list[str]:
    with pytest.raises(CampaignError) as err:
        campaign(*workloads, **over)
    return err.value.problems


# ------------------------------------------------------------------------------------------ presets


def test_spark_arena_is_the_spark_arena_v1_profile():
    """spark-arena/recipe-registry benchmarking/spark-arena-v1.yaml @ff7394d: the values written out here."""
    preset = settings.WORKLOAD_PRESETS["spark-arena"]
    assert preset["profile"] == {"depth": [0, 4096, 8192, 16384, 32768, 65535, 100000], "pp": [2048], "tg": [128],
                                 "concurrency": [1, 2, 5, 10]}
    assert preset["runs"] == 3 and preset["prefix_caching"] is True and "engine" not in preset
    quick = settings.WORKLOAD_PRESETS["serve-quick"]
    assert quick == {"profile": {"depth": [0, 4096], "pp": [512], "tg": [64], "concurrency": [1, 4]}, "runs": 2}


@pytest.mark.parametrize("engine", settings.SERVING_ENGINES)
@pytest.mark.parametrize("preset", ["spark-arena", "serve-quick"])
def test_every_serving_preset_validates_with_every_serving_engine(preset, engine):
    models = [{**MODEL, "gguf": "/var/lib/sparkfleet/models/qwen3-8b.gguf"}]
    c = campaign({"name": "w", "preset": preset, "engine": engine}, models=models)
    assert c["workloads"][0]["engine"] == engine and not settings.profile_problems(
        c["workloads"][0]["profile"], "profile")


def test_the_resolved_serving_workload_is_the_contracts_dict():
    c = campaign({"name": "arena", "preset": "spark-arena", "engine": "vllm", "env": {"A": "1"}})
    assert c["workloads"] == [{
        "name": "arena", "engine": "vllm",
        "profile": {"depth": [0, 4096, 8192, 16384, 32768, 65535, 100000], "pp": [2048], "tg": [128],
                    "concurrency": [1, 2, 5, 10]},
        "runs": 3, "prefix_caching": True, "server_args": [], "port": None, "ready_timeout_s": 900.0,
        "served_model_name": None, "client": "llama-benchy", "client_args": [], "env": {"A": "1"}}]
    own = campaign({"name": "mine", "engine": "sglang", "profile": {"depth": [0], "concurrency": [1], "pp": [8],
                                                                     "tg": [8]},
                    "runs": 5, "port": 31000, "server_args": ["--tp", "1"], "served_model_name": "q",
                    "ready_timeout_s": 60})["workloads"][0]
    assert (own["runs"], own["port"], own["server_args"], own["served_model_name"], own["ready_timeout_s"],
            own["prefix_caching"]) == (5, 31000, ["--tp", "1"], "q", 60, False)


def test_campaigns_without_serving_keep_their_shape():
    """No tokenizer, gguf or serving timeouts appear where none is given: other campaigns keep their hash."""
    c = campaign("T1")
    assert set(c["models"][0]) == {"name", "hf_id", "path"} and "serving_timeout_s" not in c
    assert c["workloads"] == [{"engine": "trtllm", "mode": "throughput", "batch": 1, "input_len": 128,
                               "output_len": 32, "name": "T1"}]


# ------------------------------------------------------------------------------------------ refusals

PROFILE = {"depth": [0, 4096], "concurrency": [1, 2], "pp": [512], "tg": [64]}


def serving(**fields):
    return {"name": "w", "engine": "vllm", "profile": PROFILE, **fields}


@pytest.mark.parametrize(("workload", "message"), [
    (serving(profile={**PROFILE, "depth": [0, 4096, 4096]}),
     "campaign.workloads[0].profile.depth[2]: 4096 is listed twice"),
    (serving(profile={**PROFILE, "depth": [0, -1]}), "campaign.workloads[0].profile.depth[1]: must not be negative"),
    (serving(profile={**PROFILE, "depth": [0, 2 ** 21 + 1]}),
     "campaign.workloads[0].profile.depth[1]: must be at most"),
    (serving(profile={**PROFILE, "pp": ["512"]}), "campaign.workloads[0].profile.pp[0]: must be an integer"),
    (serving(profile={**PROFILE, "tg": [64.5]}), "campaign.workloads[0].profile.tg[0]: must be an integer"),
    (serving(profile={**PROFILE, "pp": [0]}), "campaign.workloads[0].profile.pp[0]: must be between 1 and"),
    (serving(profile={**PROFILE, "concurrency": [0]}), "campaign.workloads[0].profile.concurrency[0]: must be between"),
    (serving(profile={**PROFILE, "concurrency": [4097]}), "campaign.workloads[0].profile.concurrency[0]: must be "
                                                         "between 1 and 4096"),
    (serving(profile={**PROFILE, "tg": []}), "campaign.workloads[0].profile.tg: must be a non-empty list"),
    (serving(profile={k: v for k, v in PROFILE.items() if k != "pp"}), "campaign.workloads[0].profile.pp: required"),
    (serving(profile={**PROFILE, "depths": [1]}), "campaign.workloads[0].profile.depths: unknown key"),
    (serving(profile=[0, 1]), "campaign.workloads[0].profile: must be a mapping"),
    (serving(profile={"depth": list(range(100)), "concurrency": list(range(1, 11)), "pp": list(range(1, 12)),
                      "tg": [1]}), "campaign.workloads[0].profile: 11000 points per run"),
    (serving(runs=0), "campaign.workloads[0].runs: must be between 1 and 1000, got 0"),
    (serving(runs=1001), "campaign.workloads[0].runs: must be between 1 and 1000"),
    (serving(port=0), "campaign.workloads[0].port: must be between 1 and 65535"),
    (serving(port=65536), "campaign.workloads[0].port: must be between 1 and 65535"),
    (serving(ready_timeout_s=0), "campaign.workloads[0].ready_timeout_s: must be positive"),
    (serving(ready_timeout_s=86401), "campaign.workloads[0].ready_timeout_s: must be at most 86400"),
    (serving(client="guidellm"), "campaign.workloads[0].client: 'guidellm' is not one of llama-benchy, aiperf"),
    (serving(server_args=["--tp", 2]), "campaign.workloads[0].server_args: every entry must be a string"),
    (serving(prefix_caching="yes"), "campaign.workloads[0].prefix_caching: must be a boolean"),
    (serving(served_model_name=3), "campaign.workloads[0].served_model_name: must be a string"),
    ({"name": "w", "engine": "vllm"}, "campaign.workloads[0].profile: required for a serving workload (engine vllm)"),
    ({"name": "w", "preset": "spark-arena"}, "campaign.workloads[0].engine: required, one of"),
    ({"name": "w", "preset": "spark-arena", "engine": "trtllm"},
     "campaign.workloads[0].profile: only a serving workload (llama.cpp, vllm, sglang, trtllm-serve, external) takes "
     "it, not engine trtllm (from the preset 'spark-arena')"),
    ({"name": "w", "preset": "T1", "profile": PROFILE}, "campaign.workloads[0].profile: only a serving workload"),
    ({"name": "w", "preset": "matmul", "runs": 2}, "campaign.workloads[0].runs: only a serving workload"),
    ({"name": "w", "preset": "T1", "port": 8000}, "campaign.workloads[0].port: only a serving workload"),
    ({"name": "w", "preset": "T4", "engine": "vllm"},
     "campaign.workloads[0].batch: a serving workload (engine vllm) does not take it (from the preset 'T4')"),
    (serving(extra_args=["--x"]), "campaign.workloads[0].extra_args: a serving workload (engine vllm) does not take "
                                  "it; give server arguments as server_args"),
    (serving(kv_fraction=0.5), "campaign.workloads[0].kv_fraction: a serving workload"),
])
def test_a_bad_serving_workload_is_refused_naming_the_field(workload, message):
    found = problems(workload)
    assert any(message in p for p in found), (message, found)
    assert all(p.startswith("campaign.") for p in found), found


@pytest.mark.parametrize(("models", "workload", "message"), [
    ([{"name": "q", "hf_id": "Qwen/Qwen3-8B"}], serving(),
     "campaign.models[0].tokenizer: required: serving workload 'w' runs the model 'q', which has no path or gguf on "
     "the hosts to take its tokenizer from; its client (llama-benchy) counts tokens with it, offline: give tokenizer"),
    (["q"], serving(), "campaign.models[0].tokenizer: required"),
    ([{"name": "q", "path": "/m/q"}], serving(engine="llama.cpp"),
     "campaign.models[0].gguf: required: llama.cpp workload 'w' runs the model 'q', whose path '/m/q' is not a .gguf"),
    ([{"name": "q", "path": "/m/q", "gguf": "/m/q.bin"}], serving(), "campaign.models[0].gguf: '/m/q.bin' is not a "
                                                                      ".gguf file"),
    ([{"name": "q", "path": "/m/q", "tokenizer": "tok"}], serving(), "campaign.models[0].tokenizer: must be an "
                                                                      "absolute path"),
])
def test_a_serving_model_needs_a_tokenizer_and_llama_cpp_a_gguf(models, workload, message):
    found = problems(workload, models=models)
    assert any(message in p for p in found), (message, found)


def test_a_tokenizer_or_a_gguf_lets_the_model_through():
    c = campaign(serving(engine="llama.cpp"), models=[{"name": "q", "path": "/m/q.gguf", "tokenizer": "/m/tok"}])
    assert c["models"][0]["tokenizer"] == "/m/tok"
    # no tokenizer: the host takes the one beside the GGUF, or derives it from the GGUF's own vocabulary
    gguf_path, gguf_only = {"name": "q", "path": "/m/q.gguf"}, {"name": "q", "hf_id": "Q/q", "gguf": "/m/q.gguf"}
    for model, engine in ((gguf_path, "llama.cpp"), (gguf_path, "vllm"), (gguf_only, "llama.cpp")):
        run = plan(campaign(serving(engine=engine), models=[model]), "h")[0]
        assert "tokenizer" not in run.model and run.model["path"] == "/m/q.gguf", run.model
    c = campaign(serving(), models=[{"name": "q", "hf_id": "Q/q", "tokenizer": "/m/tokenizer.json"}])
    assert plan(c, "h")[0].model == {"name": "q", "hf_id": "Q/q", "path": None, "tokenizer": "/m/tokenizer.json"}


def test_random_weights_travels_with_the_model_and_changes_nothing_when_absent():
    plain = campaign(serving(), models=[{"name": "q", "path": "/m/q.gguf"}])
    marked = campaign(serving(), models=[{"name": "q", "path": "/m/q.gguf", "random_weights": True}])
    assert plan(marked, "h")[0].model["random_weights"] is True and "random_weights" not in plan(plain, "h")[0].model
    assert marked["config_hash"] != plain["config_hash"]  # another model: runs measured apart
    assert campaign(serving(), models=[{"name": "q", "path": "/m/q.gguf", "random_weights": None}])["config_hash"] \
        == plain["config_hash"]
    found = problems(serving(), models=[{"name": "q", "path": "/m/q.gguf", "random_weights": "yes please"}])
    assert any(p.startswith("campaign.models[0].random_weights: ") for p in found), found


def test_a_llama_cpp_run_serves_the_models_gguf_and_counts_with_its_directory():
    model = {"name": "q", "hf_id": None, "path": "/m/Qwen3-8B", "gguf": "/m/qwen3-8b.gguf"}
    c = campaign({"name": "a", "preset": "serve-quick"}, models=[model],
                 factors={"engine": ["vllm", "llama.cpp"]})
    by_engine = {r.workload["engine"]: r.model for r in plan(c, "h")}
    assert by_engine["vllm"] == model
    assert by_engine["llama.cpp"] == {**model, "path": "/m/qwen3-8b.gguf", "tokenizer": "/m/Qwen3-8B"}


# ------------------------------------------------------------------------------------- the engine factor


def test_the_engine_factor_crosses_serving_workloads_only():
    c = campaign({"name": "arena", "preset": "spark-arena"}, "T1", models=[{**MODEL, "gguf": "/m/q.gguf"}],
                 factors={"engine": ["vllm", "llama.cpp"], "drop_caches": [False, True]})
    names = [w["name"] for w in c["workloads"]]
    assert names == ["arena.vllm.keep", "arena.vllm.drop", "arena.llama.cpp.keep", "arena.llama.cpp.drop",
                     "T1.keep", "T1.drop"]
    w = c["workloads"][2]
    assert (w["engine"], w["base"], w["factors"], w["drop_caches"]) == ("llama.cpp", "arena",
                                                                       ["engine", "drop_caches"], False)
    assert w["runs"] == 3 and w["prefix_caching"] is True and w["client"] == "llama-benchy"
    assert c["workloads"][4]["engine"] == "trtllm" and "runs" not in c["workloads"][4]
    runs = plan(c, "h")
    assert len(runs) == 6 and len({r.run_id for r in runs}) == 6


def test_a_factor_mapping_in_any_key_order_names_the_workloads_alike():
    one = campaign("serve-quick", factors={"drop_caches": [True], "engine": ["sglang"]})
    assert [w["name"] for w in one["workloads"]] == ["serve-quick.sglang.drop"]


@pytest.mark.parametrize(("factors", "workloads", "message"), [
    ({"engine": ["trtllm"]}, ["serve-quick"], "campaign.factors: engine: every level must be a serving engine"),
    ({"engine": ["vllm", "vllm"]}, ["serve-quick"], "campaign.factors: engine: a level is listed twice"),
    ({"engine": [1]}, ["serve-quick"], "campaign.factors: engine: every level must be a string"),
    ({"engine": ["vllm"]}, [{"name": "w", "preset": "serve-quick", "engine": "sglang"}],
     "campaign.workloads[0].engine: set here and in campaign.factors; use one"),
    ({"engine": ["vllm"]}, [{"name": "w", "preset": "T1", "engine": None}], "campaign.workloads[0].engine: "
                                                                            "required"),
])
def test_bad_engine_factors_name_the_field(factors, workloads, message):
    found = problems(*workloads, factors=factors)
    assert any(message in p for p in found), (message, found)


# ------------------------------------------------------------------------------------ estimates, timeouts


def test_spark_arena_has_28_points_and_378_requests_per_run():
    w = campaign({"name": "a", "preset": "spark-arena", "engine": "vllm"})["workloads"][0]
    summary = estimate.serving_summary({"timeout_s": 3600}, w)
    assert (summary["points"], summary["requests"], summary["runs_per_point"]) == (28, 378, 3)
    assert summary["shape"] == "7 depth x 4 concurrency x 1 pp x 1 tg"


def test_a_serving_runs_estimate_grows_with_its_profile_and_runs():
    def seconds(**over):
        return estimate.serving_run_s({"engine": "vllm", "runs": 2, "profile": {**PROFILE, **over.pop("p", {})},
                                       **over})
    base = seconds()
    assert seconds(p={"depth": [0, 65536]}) > base and seconds(p={"concurrency": [1, 8]}) > base
    assert seconds(p={"tg": [512]}) > base and seconds(runs=4) > base and seconds(p={"pp": [512, 1024]}) > base
    assert estimate.serving_run_s({"engine": "llama.cpp", "runs": 2, "profile": PROFILE}) != base  # start per engine
    assert estimate.server_start_s("my-engine") == max(map(estimate.server_start_s, settings.SERVING_ENGINES))


def test_an_sla_search_s_probes_are_budgeted_in_the_run_s_estimate_and_timeout():
    base = {"engine": "vllm", "runs": 2, "profile": {**PROFILE, "concurrency": [1, 4]}}
    sla = {**base, "sla": {"ttft_ms": {"percentile": 99, "max": 500}, "max_concurrency": 64}}
    # the search's longest path: doubling from 1 to the cap, the cap failing, then bisection up to 63; the
    # profile's own levels are measured already
    assert estimate.sla_probe_levels(sla) == [2, 8, 16, 32, 64, 48, 56, 60, 62, 63]
    assert estimate.sla_probe_levels(base) == []
    assert estimate.serving_run_s(sla) > estimate.serving_run_s(base)
    assert estimate.serving_timeout_s(sla, 60) > estimate.serving_timeout_s(base, 60)
    # a cap the profile reaches: only the bisection below it can add levels
    within = {**base, "sla": {"tpot_ms": {"percentile": 50, "max": 40}}}
    assert estimate.sla_probe_levels(within) == [2, 3]


def test_without_timeout_s_a_serving_run_gets_its_own_timeout_and_the_async_limit_grows(tmp_path):
    raw = {**BASE, "workloads": [{"name": "a", "preset": "spark-arena", "engine": "vllm"}, "T1"]}
    c = resolve(raw)
    arena = c["serving_timeout_s"]["a"]
    assert arena > c["timeout_s"] == 3600 and arena % 60 == 0 and arena <= 7 * 86400
    assert arena >= c["workloads"][0]["ready_timeout_s"] + estimate.serving_run_s(c["workloads"][0])
    timeouts = {r.workload["name"]: r.timeout_s for r in plan(c, "h")}
    assert timeouts == {"a": arena, "T1": 3600}
    quick = resolve({**raw, "workloads": [{"name": "q", "preset": "serve-quick", "engine": "vllm"}]})
    assert quick["serving_timeout_s"] == {"q": 3600}  # never below the campaign default
    given = resolve({**raw, "timeout_s": 1800})
    assert "serving_timeout_s" not in given and {r.timeout_s for r in plan(given, "h")} == {1800}
    fleet = planning.plan_fleet([planning.check_host("h1", raw, {})], str(tmp_path), "/")
    short = planning.plan_fleet([planning.check_host("h1", {**raw, "timeout_s": 3600}, {})], str(tmp_path), "/")
    host, short_host = fleet.hosts["h1"], short.hosts["h1"]
    assert host.async_s - short_host.async_s == 2 * (arena - 3600)
    assert host.needs_serving is True and short_host.to_dict()["needs_serving"] is True
    assert "serving a: 28 points per run" in host.summary and "rough planning figure" in host.summary


# ------------------------------------------------------------------------------------ the AIPerf client (issue 37)


def test_a_workload_with_client_aiperf_validates_and_its_host_installs_aiperf(tmp_path):
    raw = {**BASE, "workloads": [serving(client="aiperf", profile={**PROFILE, "depth": [0]},
                                         client_args=["--goodput", "time_to_first_token:2000"]),
                                 {**serving(), "name": "lb"}]}
    c = resolve(raw)
    assert [w["client"] for w in c["workloads"]] == ["aiperf", "llama-benchy"]
    variables = {"sparkfleet_work_dir": "/w", "sparkfleet_models_dir": "/var/lib/sparkfleet/models"}
    host = planning.plan_fleet([planning.check_host("h1", raw, variables)], str(tmp_path), "/").hosts["h1"]
    install = host.to_dict()["serving"]["install"]
    assert install == [{"name": "llama-benchy", "package": "llama-benchy", "version": "0.4.0",
                        "path": "/w/clients/llama-benchy/bin/llama-benchy"},
                       {"name": "aiperf", "package": "aiperf", "version": "0.13.0",
                        "path": "/w/clients/aiperf/bin/aiperf"}]
    given = {**variables, "sparkfleet_serving_aiperf": "/opt/aiperf/bin/aiperf"}
    host = planning.plan_fleet([planning.check_host("h1", raw, given)], str(tmp_path), "/").hosts["h1"]
    assert [i["name"] for i in host.to_dict()["serving"]["install"]] == ["llama-benchy"]


@pytest.mark.parametrize(("workload", "message"), [
    (serving(client="aiperf", profile={**PROFILE, "depth": [0, 4096]}),
     "campaign.workloads[0].profile: workload w: profile.depth [0, 4096]: client aiperf has no context depth"),
    (serving(client="aiperf", prefix_caching=True, profile={**PROFILE, "depth": [0]}),
     "campaign.workloads[0].prefix_caching: workload w: prefix_caching: true measures a cached context"),
    (serving(client="aiperf", client_args=["--concurrency", "8"]),
     "campaign.workloads[0].client_args: workload w: client_args sets --concurrency, which sparkfleet sets on "
     "aiperf's command line"),
    (serving(client="aiperf", client_args=["--artifact-dir=/tmp/x"]),
     "sets --artifact-dir (as '--artifact-dir=/tmp/x')"),
])
def test_what_aiperf_cannot_do_is_refused_naming_the_field(workload, message):
    found = problems(workload)
    assert any(message in p for p in found), (message, found)


# ------------------------------------------------------------------------------------ inventory settings


@pytest.mark.parametrize(("name", "value", "message"), [
    ("sparkfleet_readiness_policy", "warn", "'warn' is not one of mark, refuse"),
    ("sparkfleet_readiness_min_fraction", 0, "must be positive"),
    ("sparkfleet_readiness_min_fraction", 1.5, "must be at most 1"),
    ("sparkfleet_readiness_expected_clock_mhz", -5, "must be positive"),
    ("sparkfleet_readiness_probe_s", -1, "must not be negative"),
    ("sparkfleet_readiness_degraded_bands", [[890, 690]], "must hold 0 <= low <= high"),
    ("sparkfleet_readiness_degraded_bands", [[690]], "every band must be [low, high]"),
    ("sparkfleet_readiness_degraded_bands", [[690, "890"]], "every band must be [low, high]"),
    ("sparkfleet_serving_client", "bin/llama-benchy", "must be an absolute path"),
    ("sparkfleet_serving_corpus", "book.txt", "must be an absolute path"),
    ("sparkfleet_acknowledge_host_differences", "maybe", "must be a boolean"),
])
def test_bad_serving_and_readiness_settings_are_named(name, value, message):
    errors, _ = settings.setting_problems("h1", {name: value})
    assert errors and errors[0].startswith(f"h1: {name}: ") and message in errors[0], errors


def test_the_plan_carries_the_serving_readiness_and_reproducibility_settings(tmp_path):
    variables = {"sparkfleet_serving_client": "/opt/llama-benchy", "sparkfleet_serving_corpus": "/srv/book.txt",
                 "sparkfleet_readiness_policy": "refuse", "sparkfleet_readiness_min_fraction": "0.8",
                 "sparkfleet_readiness_expected_clock_mhz": 2400, "sparkfleet_readiness_probe_s": 0,
                 "sparkfleet_readiness_degraded_bands": [[600, 900.5]],
                 "sparkfleet_acknowledge_host_differences": "yes"}
    knobs = planning.host_settings("h1", variables)
    assert knobs["serving"] == {"client": "/opt/llama-benchy", "aiperf": None, "corpus": "/srv/book.txt"}
    assert knobs["readiness"] == {"policy": "refuse", "min_fraction": 0.8, "expected_clock_mhz": 2400,
                                  "probe_s": 0, "degraded_bands": [[600, 900.5]]}
    assert knobs["reproducibility"]["acknowledge_host_differences"] is True
    alone = planning.standalone_plan("h1", variables)
    assert alone["serving"] == knobs["serving"] and alone["needs_serving"] is False


# --------------------------------------------------------------------------- a campaign's own engines

OLLAMA = {"command": ["ollama-serve", "--model", "{model}", "--listen", "{host}:{port}", "--name",
                      "{served_model_name}"], "port": 11434, "kv_log": None}
QUICK = {"name": "q", "preset": "serve-quick"}


def test_a_campaigns_own_engine_resolves_with_its_defaults_and_travels_in_its_workloads():
    c = campaign({**QUICK, "engine": "ollama"}, engines={"ollama": {"command": ["ollama-serve", "{model}"]}})
    spec = {"command": ["ollama-serve", "{model}"], "ready_path": "/v1/models", "port": 8000,
            "served_model_name_default": None, "kv_log": None}
    assert c["engines"] == {"ollama": spec}
    w = c["workloads"][0]
    assert w["engine"] == "ollama" and w["engine_spec"] == spec
    assert w["runs"] == 2 and w["client"] == "llama-benchy"  # a serving workload: the serving defaults
    assert "serving_timeout_s" in c  # its own timeout, like a built-in engine's serving run
    assert plan(c, "h")[0].workload["engine_spec"] == spec


def test_campaigns_without_engines_keep_their_config_hash():
    assert "engines" not in campaign({**QUICK, "engine": "vllm"})
    assert "engine_spec" not in campaign({**QUICK, "engine": "vllm"})["workloads"][0]
    assert campaign({**QUICK, "engine": "vllm"})["config_hash"] == campaign({**QUICK, "engine": "vllm"},
                                                                            engines=None)["config_hash"]


def test_the_engine_factor_crosses_a_campaigns_own_engine_with_the_built_ins():
    c = campaign(QUICK, "T1", engines={"ollama": OLLAMA}, factors={"engine": ["vllm", "ollama"]})
    assert [w["name"] for w in c["workloads"]] == ["q.vllm", "q.ollama", "T1"]
    vllm, ollama, t1 = c["workloads"]
    assert "engine_spec" not in vllm and "engine_spec" not in t1
    assert ollama["engine"] == "ollama" and ollama["engine_spec"]["port"] == 11434 and ollama["base"] == "q"
    assert ollama["factors"] == ["engine"] and ollama["runs"] == vllm["runs"] == 2
    runs = plan(c, "h")
    assert len(runs) == 3 and {r.workload["name"] for r in runs} == {"q.vllm", "q.ollama", "T1"}


def test_a_workload_naming_a_custom_engine_and_the_factor_is_told_to_use_one():
    found = problems({**QUICK, "engine": "ollama"}, engines={"ollama": OLLAMA}, factors={"engine": ["vllm"]})
    assert "campaign.workloads[0].engine: set here and in campaign.factors; use one" in found


def test_a_gguf_only_model_gives_a_custom_engine_its_gguf():
    model = {"name": "g", "gguf": "/m/g.gguf", "tokenizer": "/m/tokenizer.json"}
    c = campaign({**QUICK, "engine": "ollama"}, engines={"ollama": OLLAMA}, models=[model])
    assert plan(c, "h")[0].model["path"] == "/m/g.gguf"


@pytest.mark.parametrize(("engines", "message"), [
    ({"ollama": {"port": 11434}}, "campaign.engines.ollama.command: required"),
    ({"ollama": {"command": []}}, "campaign.engines.ollama.command: must be a non-empty list of strings"),
    ({"ollama": {"command": ["srv", 8000]}}, "campaign.engines.ollama.command: every entry must be a string"),
    ({"ollama": {"command": ["srv", "--model={model_path}", "{gpu}", "{port}"]}},
     "campaign.engines.ollama.command: unknown placeholders {model_path}, {gpu} (known: {model}, {port}, {host}, "
     "{served_model_name})"),
    ({"ollama": {"command": ["srv", "{port:05d}"]}}, "campaign.engines.ollama.command: '{port:05d}': {port} takes "
                                                     "no conversion or format spec"),
    ({"ollama": {"command": ["srv", "{port"]}}, "campaign.engines.ollama.command: '{port': expected '}'"),
    ({"vllm": {"command": ["my-vllm", "{model}"]}}, "campaign.engines.vllm: 'vllm' would shadow the built-in engine "
                                                    "'vllm': give it another name"),
    ({"VLLM": {"command": ["my-vllm"]}}, "campaign.engines.VLLM: 'VLLM' would shadow the built-in engine 'vllm'"),
    ({"trtllm": {"command": ["x"]}}, "campaign.engines.trtllm: 'trtllm' would shadow the built-in engine"),
    ({"ollama ": {"command": ["x"]}}, "campaign.engines.ollama : 'ollama ' has a leading or trailing space"),
    ({"ollama": {**OLLAMA, "port": 70000}}, "campaign.engines.ollama.port: "),
    ({"ollama": {**OLLAMA, "port": "8000"}}, "campaign.engines.ollama.port: "),
    ({"ollama": {**OLLAMA, "kv_log": "ollama"}}, "campaign.engines.ollama.kv_log: 'ollama' is not one of llama.cpp, "
                                                 "vllm, sglang, trtllm-serve"),
    ({"ollama": {**OLLAMA, "ready_path": "health"}}, "campaign.engines.ollama.ready_path: 'health' must be a URL "
                                                     "path starting with '/'"),
    ({"ollama": {**OLLAMA, "image": "x"}}, "campaign.engines.ollama.image: unknown key"),
    ({"ollama": ["ollama", "serve"]}, "campaign.engines.ollama: must be a mapping"),
    (["ollama"], "campaign.engines: must be a mapping"),
])
def test_a_bad_engine_spec_is_refused_naming_its_field(engines, message):
    found = problems({**QUICK, "engine": "vllm"}, engines=engines)
    assert any(p.startswith(message) for p in found), (message, found)


def test_a_port_out_of_range_names_its_range():
    found = problems({**QUICK, "engine": "ollama"}, engines={"ollama": {**OLLAMA, "port": 0}})
    assert any(p.startswith("campaign.engines.ollama.port:") and "65535" in p for p in found), found


def test_an_engine_nobody_defined_is_refused_naming_the_campaigns_engines():
    found = problems({**QUICK, "engine": "lmdeploy"}, engines={"ollama": OLLAMA})
    assert any(p.startswith("campaign.workloads[0].engine: 'lmdeploy' is not one of ") and p.endswith(", ollama")
               for p in found), found
    found = problems(QUICK, engines={"ollama": OLLAMA}, factors={"engine": ["lmdeploy"]})
    assert ("campaign.factors: engine: every level must be a serving engine (llama.cpp, vllm, sglang, trtllm-serve, "
            "ollama), got 'lmdeploy'") in found


# ---------------------------------------------------------------------------------------- clusters (issue 36)

GGUF_MODEL = {"name": "qwen", "path": "/m/qwen.gguf", "tokenizer": "/m/tok"}
TRT_TENSOR = {"name": "tp", "engine": "trtllm-serve", "cluster": "pair", "topology": "tensor",
              "profile": {"depth": [0], "concurrency": [1], "pp": [32], "tg": [16]}}


@pytest.mark.parametrize("environments", [["native"], [{"name": "ctr", "kind": "container"}], ["bare", "native"]])
def test_a_multi_node_run_runs_in_any_environment_but_mpirun_started_ranks_only_bare(environments):
    # llama.cpp's RPC worker and vLLM's headless rank are started in the run's environment on their node
    for engine, topology in (("llama.cpp", "layers"), ("vllm", "tensor"), ("llama.cpp", "replicas")):
        workload = {"name": "two", "engine": engine, "cluster": "pair", "topology": topology,
                    "profile": {"depth": [0], "concurrency": [1], "pp": [32], "tg": [16]}}
        resolved = campaign(workload, models=[GGUF_MODEL], environments=environments)
        assert [w["cluster"] for w in resolved["workloads"]] == ["pair"]
    # trtllm-serve's mpirun starts the workers' ranks over SSH, on their hosts: outside any environment
    found = problems(TRT_TENSOR, models=[GGUF_MODEL], environments=environments)
    assert any("trtllm-serve starts every rank from rank 0 over SSH (mpirun)" in p and "bare environments only" in p
               for p in found), found


def test_mpirun_started_ranks_run_bare():
    resolved = campaign(TRT_TENSOR, models=[GGUF_MODEL], environments=["bare"])
    assert resolved["workloads"][0]["topology"] == "tensor"
