"""A built-in engine is one entry of serving.ENGINES (issue 34: one home per concept): the campaign's checks, the
estimate, the planning and the host's launch, version command and KV parser all read that table, so an engine
registered there (here with monkeypatch) is known to every layer at once."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.serving_kv import (
    KV_LOGS,
    parse_kv,
)
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate, planning, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, resolve

MODEL = {"name": "qwen", "path": "/var/lib/sparkfleet/models/Qwen3-8B"}
PROFILE = {"depth": [0], "concurrency": [1, 4], "pp": [512], "tg": [64]}


def _fake_argv(workload: dict, model: dict, port: int, served: str, extra: list) -> list:
    return ["fake-server", "--model", str(model["path"]), "--port", str(port), "--name", served] + extra


@pytest.fixture
def fake_engines(monkeypatch):
    monkeypatch.setitem(serving.ENGINES, "fake-serve", serving.serving_engine(
        _fake_argv, port=9000, kv_log="vllm", owns=((("--port",), serving.SETS_PORT),), abbrev=False,
        version=(["fake-server", "--version"], "fake-server --version"), start_s=42.0))
    monkeypatch.setitem(serving.ENGINES, "fake-job", serving.job_engine(cpu=True, run_s=7.0))


def campaign(*workloads, **over) -> dict:
    return resolve({"name": "c", "models": [MODEL], "environments": ["native"], "iterations": 1,
                    "workloads": list(workloads), **over})


def test_a_new_serving_engine_is_one_entry(fake_engines):
    c = campaign({"name": "w", "engine": "fake-serve", "profile": PROFILE})
    workload = c["workloads"][0]
    assert serving.is_serving(workload) and workload["runs"] == 3  # a serving workload, with the serving defaults
    assert planning.gpu_engines(c) == ["fake-serve"]
    vllm = {**workload, "engine": "vllm"}
    assert estimate.serving_run_s(workload) - estimate.serving_run_s(vllm) == pytest.approx(42.0 - 300.0)
    assert serving.server_argv(workload, MODEL) == ["fake-server", "--model", MODEL["path"], "--port", "9000",
                                                    "--name", "qwen"]
    assert serving.ready_url(workload) == "http://127.0.0.1:9000/health"
    assert serving.version_command(workload) == (["fake-server", "--version"], "fake-server --version")
    assert serving.kv_log(workload) == "vllm" and parse_kv(serving.kv_log(workload), "")["engine"] == "vllm"
    assert [field for field, _ in serving.overriding_args({**workload, "server_args": ["--port", "1"]})] == [
        "server_args"]
    crossed = campaign({"name": "x", "profile": PROFILE}, factors={"engine": ["fake-serve", "vllm"]})
    assert [w["engine"] for w in crossed["workloads"]] == ["fake-serve", "vllm"]
    with pytest.raises(CampaignError) as err:
        campaign({"name": "w", "engine": "llama.cpp", "profile": PROFILE},
                 engines={"Fake-Serve": {"command": ["x", "--port", "{port}"]}})
    assert any("would shadow the built-in engine 'fake-serve'" in p for p in err.value.problems)


def test_a_new_job_engine_is_one_entry(fake_engines):
    c = campaign({"name": "j", "engine": "fake-job"})
    assert not serving.is_serving(c["workloads"][0]) and planning.gpu_engines(c) == []
    assert estimate.nominal_run_s("fake-job") == 7.0 and "fake-job 7 s" in estimate.estimate_text(c)
    with pytest.raises(CampaignError) as err:
        campaign({"name": "j", "engine": "fake-job", "runs": 2})
    assert err.value.problems == ["campaign.workloads[0].runs: only a serving workload (llama.cpp, vllm, sglang, "
                                  "trtllm-serve, external, fake-serve) takes it, not engine fake-job"]


def test_every_built_in_server_has_what_the_layers_read():
    assert settings.ENGINES == serving.engine_names() == (*settings.JOB_ENGINES, *settings.SERVING_ENGINES,
                                                          settings.EXTERNAL_ENGINE)
    assert serving.engine_names(serves=True, managed=False) == (settings.EXTERNAL_ENGINE,)  # issue 37: no argv
    for name in settings.SERVING_ENGINES:
        row = serving.ENGINES[name]
        assert row["kv_log"] in KV_LOGS and row["version"] and row["start_s"] > 0
        launcher = row["launcher"]
        if launcher is not None:  # spans nodes by its own runtime: a worker argv and port, rank 0's flags
            assert launcher["worker"] and "{port}" in launcher["worker"] and "{address}" in launcher["worker"]
            assert 0 < launcher["worker_port"] < 65536 and any("{endpoints}" in a for a in launcher["head"])
    assert [n for n in settings.SERVING_ENGINES if serving.ENGINES[n]["launcher"]] == ["llama.cpp"]
    assert all(serving.ENGINES[name]["run_s"] > 0 for name in settings.JOB_ENGINES)


def test_a_multi_node_run_by_topology():
    """layers: llama.cpp's RPC (tools/rpc/README.md), ggml-rpc-server on each worker, llama-server --rpc on rank 0;
    replicas: the engine's own server on each worker's address, rank 0's on loopback."""
    workload = {"name": "w", "engine": "llama.cpp", "profile": {"depth": [0], "concurrency": [1], "pp": [16],
                                                                "tg": [8]}, "cluster": "pair"}
    model = {"name": "m", "path": "/models/m.gguf"}
    assert serving.worker_spec(workload, model, "10.0.0.2") == {
        "argv": ["ggml-rpc-server", "--host", "10.0.0.2", "--port", "50052"], "port": 50052, "ready_url": None}
    head = serving.head_argv(workload, model, ["10.0.0.2", "10.0.0.3"])
    assert head[:1] == ["llama-server"] and head[-2:] == ["--rpc", "10.0.0.2:50052,10.0.0.3:50052"]
    assert [f for f, _ in serving.overriding_args({**workload, "server_args": ["--rpc", "x:1"]})] == ["server_args"]
    assert serving.overriding_args({**workload, "cluster": None, "server_args": ["--rpc", "x:1"]}) == []

    replicas = {**workload, "topology": "replicas"}
    spec = serving.worker_spec(replicas, model, "10.0.0.2")
    assert spec["argv"][spec["argv"].index("--host") + 1] == "10.0.0.2" and spec["port"] == 8080
    assert spec["ready_url"] == "http://10.0.0.2:8080/health"
    assert serving.head_argv(replicas, model, ["10.0.0.2"]) == serving.server_argv(replicas, model)
    assert serving.replica_urls(replicas, ["10.0.0.2"]) == ["http://127.0.0.1:8080", "http://10.0.0.2:8080"]
    # vLLM has no multi-node launcher in sparkfleet yet: layers is refused naming it, replicas is not
    assert "engine vllm cannot spread one model over several nodes" in serving.cluster_problem(
        {**workload, "engine": "vllm"})
    assert serving.cluster_problem({**replicas, "engine": "vllm"}) is None
