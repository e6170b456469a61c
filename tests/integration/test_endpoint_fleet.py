"""An unmanaged endpoint in a fleet (issue 37 item 2), with no stand-in: two fake-fleet hosts over real SSH, a real
llama-server this test started inside spark2's network namespace on spark2's address (sparkfleet did not start
it), and a workload of engine external naming that address. Only spark2 measures it (two clients at their own pace
would load the one server together), so spark2's own state control and attestation cover the server; spark1 runs
its own workload and nothing of the endpoint's."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from llamacpp import wait_ready
from tinymodel import make_tiny_model

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.slow]

PROFILE = {"depth": [0], "concurrency": [1], "pp": [32], "tg": [8]}
PORT = 18080


def test_an_endpoint_on_an_inventory_host_is_measured_from_that_host_alone(fleet_factory, llama_server, ansible_env,
                                                                           repo, tmp_path):
    fleet = fleet_factory(2)
    spark1, spark2 = fleet.hosts
    for host in fleet.hosts:  # the engine on each host's PATH for the workload sparkfleet starts
        link = Path(host.dir, "bin", "llama-server")
        link.unlink(missing_ok=True)
        link.symlink_to(llama_server)
    models = tmp_path / "models"
    model = make_tiny_model(models / "tiny")
    log = tmp_path / "endpoint.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(["ip", "netns", "exec", spark2.netns, str(llama_server), "-m", str(model["gguf"]),
                                   "--host", spark2.address, "--port", str(PORT), "--alias", "tiny", "-t", "1"],
                                  stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_ready(server, PORT, log, host=spark2.address)
        common = {"profile": PROFILE, "runs": 1, "prefix_caching": False}
        campaign = {"sparkfleet_campaign": {
            "name": "ext2", "models": [{"name": "tiny", "path": str(model["gguf"]), "random_weights": True}],
            "environments": ["bare"],
            "workloads": [{"name": "ext", "engine": "external",
                           "endpoint": {"url": f"http://{spark2.address}:{PORT}/v1", "model": "tiny"}, **common},
                          {"name": "own", "engine": "llama.cpp", "server_args": ["-t", "1"], "ready_timeout_s": 120,
                           **common}],
            "iterations": 1, "warmup_runs": 0, "timeout_s": 600,
            "cooldown": {"threshold_c": 45, "max_wait_s": 30, "on_timeout": "continue"}}}
        path = tmp_path / "campaign.yml"
        path.write_text(yaml.safe_dump(campaign))
        results = tmp_path / "results"
        run = subprocess.run(
            fleet.bench_argv(path, models=models, results=results, client=Path(sys.executable).parent / "llama-benchy"),
            env=ansible_env, cwd=repo, capture_output=True, text=True, timeout=1500)
        assert run.returncode == 0, (run.stdout + run.stderr)[-8000:]
        assert server.poll() is None  # sparkfleet never stopped the server it did not start
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)

    def workloads(host) -> dict[str, dict]:
        records = [json.loads(p.read_text()) for p in (results / "ext2" / host.name / "runs").glob("*/record.json")]
        return {r["workload"]: r for r in records}

    assert set(workloads(spark1)) == {"own"}
    measured = workloads(spark2)
    assert set(measured) == {"ext", "own"}
    ext = measured["ext"]
    assert ext["status"] == "ok" and ext["serving"]["server"]["managed"] is False, ext.get("reason")
    assert ext["serving"]["server"]["base_url"] == f"http://{spark2.address}:{PORT}/v1"
    # the serving host's attestation, taken by its own preflight, covers the runs it measured
    assert (results / "ext2" / spark2.name / "attestation.json").is_file()
