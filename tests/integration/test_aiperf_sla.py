"""AIPerf, the SLA question and any endpoint, end to end (issue 37 item 5), with no stand-in: bench.yml on the
localhost inventory runs two serving workloads driven by the real AIPerf (0.13.0, installed by ``bootstrap.sh
test`` into .venv-aiperf) against llama.cpp's real llama-server (the CPU build of tests/fleet/llamacpp.py):

* ``managed``: a llama-server sparkfleet starts per run (environment bare);
* ``ext``: engine external, a llama-server this test started and sparkfleet never touches (an unmanaged server).

Each workload has SLA targets, so each run searches the largest concurrency within them (the profile measures
concurrency 1; the search probes 2, its cap). Six iterations give the capacity's 95% interval. Then the report:
the capacity section with its interval and the engine verdict, the Pareto figure, read in headless Chromium.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import chromium
import pytest
import yaml
from llamacpp import free_port, start_server, wait_ready
from tinymodel import SHAPE, make_tiny_model

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate

pytestmark = [pytest.mark.root, pytest.mark.slow]

PROFILE = {"depth": [0], "concurrency": [1], "pp": [64], "tg": [32]}
#: A random model slow enough on the CPU (about 100 tok/s a user) that a request's decode spans many stream chunks:
#: the default tiny model decodes 8 tokens in about a millisecond, where AIPerf's inter-token latency reads 0.
SHAPE = dict(SHAPE, n_embd=512)
#: A target a CPU llama-server of a tiny model meets at any level: the capacity is the cap (the search's logic is
#: the unit tests'; here it runs against a real server and client, whatever the machine's speed). TTFT only: on a
#: loaded machine AIPerf's client may read a request's tokens in one piece and time no inter-token latency (a
#: TPOT target then stops the search as unread, which the unit tests cover).
SLA = {"ttft_ms": {"percentile": 99, "max": 60000}, "max_concurrency": 2}
ITERATIONS = 6


def aiperf(repo: Path) -> Path:
    """AIPerf's executable: $SPARKFLEET_TEST_AIPERF, else the one bootstrap.sh installs beside the checkout."""
    found = Path(os.environ.get("SPARKFLEET_TEST_AIPERF") or repo / ".venv-aiperf" / "bin" / "aiperf")
    if not os.access(found, os.X_OK):
        pytest.skip(f"no aiperf at {found} (./bootstrap.sh test installs it into .venv-aiperf)")
    return found


@pytest.fixture
def unmanaged(llama_server, tmp_path):
    """A llama-server this test started, not sparkfleet: {url, model, proc}."""
    model = make_tiny_model(tmp_path / "ext-model", shape=SHAPE)
    port, log = free_port(), tmp_path / "unmanaged.log"
    proc = start_server(llama_server, model["gguf"], port, log, ["-t", "1"])
    try:
        wait_ready(proc, port, log)
        yield {"url": f"http://127.0.0.1:{port}/v1", "model": model["gguf"].stem, "proc": proc}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_aiperf_sla_campaign_with_an_external_endpoint(llama_server, unmanaged, ansible_env, repo, tmp_path):
    client = aiperf(repo)
    engines = tmp_path / "bin"  # the engine on the user's login PATH, as an owner's install puts it
    engines.mkdir()
    shutil.copy2(llama_server, engines / "llama-server")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".profile").write_text(f'PATH="{engines}:$PATH"\nexport PATH\n')
    work, results = tmp_path / "work", tmp_path / "results"
    model = make_tiny_model(work / "models" / "tiny", shape=SHAPE)
    common = {"profile": PROFILE, "runs": 1, "client": "aiperf", "prefix_caching": False, "sla": SLA}
    campaign = {"sparkfleet_campaign": {
        "name": "sla-e2e", "models": [{"name": "tiny", "path": str(model["gguf"]), "random_weights": True}],
        "environments": [{"name": "host", "kind": "bare"}],
        "workloads": [{"name": "managed", "engine": "llama.cpp", "server_args": ["-t", "1"], "port": free_port(),
                       "ready_timeout_s": 120, **common},
                      {"name": "ext", "engine": "external",
                       "endpoint": {"url": unmanaged["url"], "model": unmanaged["model"]}, **common}],
        "iterations": ITERATIONS, "warmup_runs": 0, "order": "interleaved", "timeout_s": 900,
        "cooldown": {"threshold_c": 45, "max_wait_s": 30, "on_timeout": "continue"}}}
    path = tmp_path / "campaign.yml"
    path.write_text(yaml.safe_dump(campaign))
    run = subprocess.run(["ansible-playbook", "bench.yml", "-e", f"@{path}", "-e", f"sparkfleet_work_dir={work}",
                          "-e", f"sparkfleet_results_dir={results}", "-e", f"sparkfleet_serving_aiperf={client}"],
                         cwd=repo, env=dict(ansible_env, HOME=str(home)), capture_output=True, text=True,
                         timeout=2400)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert unmanaged["proc"].poll() is None  # sparkfleet never stopped the server it did not start

    records = [json.loads(p.read_text()) for p in sorted((results / "sla-e2e" / "localhost" / "runs").glob(
        "*/record.json"))]
    assert len(records) == 2 * ITERATIONS
    for rec in records:
        assert validate(rec) == [] and rec["status"] == "ok", (rec["run_id"], rec["reason"])
        serving = rec["serving"]
        assert serving["client"]["name"] == "aiperf" and serving["client"]["version"] == "0.13.0"
        (group,) = serving["sla"]["groups"]
        assert group["cap"] == 2 and 0 <= group["capacity"] <= 2 and group["stopped"] is None, group
        levels = [m["concurrency"] for m in group["measured"]]
        assert levels[0] == 1 and set(levels) <= {1, 2}, group  # the profile's level read, the probe run once
        probes = [p for p in serving["points"] if p.get("sla_probe")]
        assert all(p["concurrency"] == 2 and p["status"] == "ok" for p in probes), probes
        for point in serving["points"]:  # AIPerf's figures of every point; per user where it timed the tokens
            metrics = point["metrics"]
            assert metrics["out_tok_s"] > 0 and metrics["e2e_ttft_ms"] > 0, point
            assert metrics.get("out_req_tok_s", 1) > 0, point
        managed = serving["server"].get("managed", True)
        assert managed == (rec["workload"] == "managed"), serving["server"]
    exports = list((results / "sla-e2e" / "localhost" / "runs").glob("*/points/*.aiperf/profile_export_aiperf.json"))
    assert len(exports) >= 2 * ITERATIONS  # AIPerf's own exports kept beside each point

    report = subprocess.run([str(Path(sys.executable).parent / "sparkfleet"), "report",
                             str(results / "sla-e2e")], env=ansible_env, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    out = results / "sla-e2e" / "report"
    with (out / "serving_capacity.csv").open() as handle:
        cells = {row["engine"]: row for row in csv.DictReader(handle)}
    assert set(cells) == {"llama.cpp", "external"}, cells
    for row in cells.values():  # six iterations: an exact 95% interval of the median capacity
        assert row["n"] == str(ITERATIONS) and row["low"] != "" and row["high"] != "", row
    with (out / "serving_capacity_comparisons.csv").open() as handle:
        (verdict,) = list(csv.DictReader(handle))
    assert (verdict["a"], verdict["b"], verdict["question"]) == ("external", "llama.cpp", "serving-engine"), verdict
    assert verdict["outcome"] in ("different", "same", "undetermined")

    with (out / "pareto.csv").open() as handle:  # both levels of each configuration on the front's panel
        levels = {(row["engine"], row["concurrency"]) for row in csv.DictReader(handle)}
    assert levels == {(e, c) for e in ("llama.cpp", "external") for c in ("1", "2")}, levels
    dom = chromium.dump_dom(out / "index.html", tmp_path / "profile-dom")
    capacity = chromium.section(dom, "section-serving-capacity-within-the-sla")
    assert "Capacity within the SLA per cell" in capacity and "Capacity comparisons" in capacity
    assert "n too small" not in capacity.split("Capacity comparisons")[0]  # the cells' intervals are shown
    assert "unmanaged server" in dom
    html = (out / "index.html").read_text()
    start = html.index('<figure id="fig-serving_pareto"')
    figure = html[start:html.index("</figure>", start) + len("</figure>")]
    assert chromium.colours_of(figure, tmp_path, "pareto") > 100  # the figure rendered
