"""Any endpoint as the target (issue 37 item 2): a serving workload with engine external and an endpoint {url, model}
measures a server sparkfleet does not start; the campaign checks the endpoint before any host is changed."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, resolve

MODEL = {"name": "qwen", "path": "/var/lib/sparkfleet/models/Qwen3-8B"}
BASE = {"name": "s", "models": [MODEL], "environments": ["bare"], "iterations": 1}
PROFILE = {"depth": [0], "concurrency": [1, 2], "pp": [64], "tg": [16]}
ENDPOINT = {"url": "http://10.0.0.7:8000/v1", "model": "Qwen/Qwen3-8B"}


def workload(**over):
    return {"name": "ext", "engine": "external", "profile": PROFILE, "endpoint": ENDPOINT, **over}


def problems(*workloads) -> list[str]:
    with pytest.raises(CampaignError) as err:
        resolve({**BASE, "workloads": list(workloads)})
    return err.value.problems


def test_an_external_workload_resolves_without_a_started_servers_fields():
    w = resolve({**BASE, "workloads": [workload()]})["workloads"][0]
    assert w["engine"] == "external" and w["endpoint"] == ENDPOINT
    assert not set(settings.MANAGED_SERVER_FIELDS) & set(w)
    assert serving.is_serving(w) and not serving.managed(w)
    assert serving.base_url(w) == "http://10.0.0.7:8000/v1" and serving.served_name(w, MODEL) == "Qwen/Qwen3-8B"
    assert serving.base_url({**w, "endpoint": {**ENDPOINT, "url": "https://h.example:443"}}) == \
        "https://h.example:443/v1"


def test_a_managed_workload_keeps_its_config_unchanged():
    w = resolve({**BASE, "workloads": [{"name": "v", "engine": "vllm", "profile": PROFILE}]})["workloads"][0]
    assert "endpoint" not in w and serving.managed(w)


@pytest.mark.parametrize("url, part", [
    ("10.0.0.7:8000", "http:// or https://"),
    ("ftp://h:21/v1", "http:// or https://"),
    ("http://h/v1", "must name its port"),
    ("http://h:99999/v1", "Port out of range"),
    ("http://h:8000/v1/chat/completions", "path '/v1/chat/completions'"),
    ("http://u:p@h:8000/v1", "no credentials"),
    ("http://h:8000/v1?x=1", "no credentials, query"),
    ("http://:8000/v1", "with a host"),
])
def test_a_bad_endpoint_url_is_refused_naming_why(url, part):
    found = problems(workload(endpoint={"url": url, "model": "m"}))
    assert len(found) == 1 and found[0].startswith("campaign.workloads[0].endpoint: ") and part in found[0], found


@pytest.mark.parametrize("endpoint", [{"url": "http://h:1"}, {"url": "http://h:1", "model": ""},
                                      {"url": "http://h:1", "model": "m", "key": "x"}, "http://h:1"])
def test_an_endpoint_is_exactly_url_and_model(endpoint):
    assert problems(workload(endpoint=endpoint))[0].startswith("campaign.workloads[0].endpoint: ")


def test_good_urls_pass():
    for url in ("http://127.0.0.1:8080", "http://127.0.0.1:8080/", "https://spark-2.lan:443/v1/",
                "http://[::1]:8000/v1"):
        assert serving.endpoint_problem({"url": url, "model": "m"}) is None, url


def test_external_needs_an_endpoint_and_only_external_takes_one():
    assert problems(workload(endpoint=None)) == [
        "campaign.workloads[0].endpoint: required for engine external: {url, model} of the server to measure"]
    no_endpoint = {k: v for k, v in workload().items() if k != "endpoint"}
    assert problems(no_endpoint)[0].startswith("campaign.workloads[0].endpoint: required")
    assert problems({"name": "v", "engine": "vllm", "profile": PROFILE, "endpoint": ENDPOINT}) == [
        "campaign.workloads[0].endpoint: only a workload with engine external (a server sparkfleet does not start) "
        "takes it, not engine vllm"]


@pytest.mark.parametrize("key, value", [("server_args", ["--x"]), ("port", 8000), ("ready_timeout_s", 5.0),
                                        ("served_model_name", "m"), ("cluster", "pair")])
def test_a_started_servers_fields_are_refused(key, value):
    found = problems(workload(**{key: value}))
    assert any(p.startswith(f"campaign.workloads[0].{key}: engine external measures a server sparkfleet does not "
                            "start") for p in found), found


def test_external_is_no_factor_level_and_no_launchable_engine():
    assert "external" not in settings.SERVING_ENGINES and "external" in settings.ENGINES
    with pytest.raises(CampaignError) as err:
        resolve({**BASE, "factors": {"engine": ["vllm", "external"]},
                 "workloads": [{"name": "x", "profile": PROFILE}]})
    assert any("campaign.factors: engine" in p for p in err.value.problems), err.value.problems
