"""Any endpoint as the target (issue 37 item 2), on the host: a serving run of engine external drives the real
client (.venv's llama-benchy 0.4.0) through bench_run against a stand-in OpenAI server (tests/fleet/standins/vllm)
that the test started on 127.0.0.1: no server started, no port or listener check, no KV parse, no provenance
check; the record says unmanaged server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module
from llamacpp import free_port, wait_ready

serving = host_util("serving")
record = host_util("record")

CLIENT = shutil.which("llama-benchy", path=os.path.dirname(sys.executable))
PROFILE = {"depth": [0], "concurrency": [1, 2], "pp": [32], "tg": [8]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tinymodel import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def endpoint(tmp_path):
    """A stand-in vLLM server the test started (sparkfleet did not): {url, log, proc}."""
    port = free_port()
    log = tmp_path / "standin.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_FAKE")}
    env.update(PYTHONPATH=str(STANDINS), SPARKFLEET_FAKE_STARTUP_S="0.05", SPARKFLEET_FAKE_DECODE_TOK_S="200")
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(STANDINS / "vllm"), "serve", "tiny", "--host", "127.0.0.1",
                                 "--port", str(port), "--served-model-name", "served-tiny"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(proc, port, log, timeout=30)
        yield {"url": f"http://127.0.0.1:{port}/v1", "log": log, "proc": proc}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def run_endpoint(tmp_path, tiny, server, **workload_over) -> tuple:
    from tinymodel import CORPUS

    if CLIENT is None:
        pytest.skip("no llama-benchy beside the test's python")
    model = {"name": "tiny", "tokenizer": str(tiny["tokenizer"]), "random_weights": True}
    workload = {"name": "ext", "engine": "external", "profile": PROFILE, "runs": 1,
                "endpoint": {"url": server["url"], "model": "served-tiny"}, "prefix_caching": False,
                "client": "llama-benchy", "client_args": [], **workload_over}
    rid = record.run_id("c1", "h1", "tiny", "bare", "ext", 1)
    args = {"runs": [{"run_id": rid, "order_index": 0, "model": model, "environment": {"name": "bare", "kind": "bare"},
                      "workload": workload, "iteration": 1, "warmup": False}],
            "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
            "cooldown": {"enabled": False}, "timeout_s": 300, "telemetry_interval_s": 0.2, "env": {},
            "serving": {"client": CLIENT, "corpus": str(CORPUS)}, "readiness": {"probe_s": 0}}
    out = run_module(load_module("bench_run"), args)
    assert not out.get("failed"), out
    path = Path(out["runs"][0]["record_path"])
    rec = json.loads(path.read_text())
    assert record.validate(rec) == []
    return rec, path.parent


def test_an_external_endpoint_is_measured_and_never_started_checked_or_stopped(tmp_path, tiny, endpoint):
    rec, run_dir = run_endpoint(tmp_path, tiny, endpoint)
    assert rec["status"] == "ok", rec["reason"]
    section = rec["serving"]
    assert section["engine"] == "external" and rec["versions"]["engine"] == "external"
    assert section["server"] == {"managed": False, "url": endpoint["url"], "base_url": endpoint["url"],
                                 "model": "served-tiny", "note": serving.UNMANAGED}
    assert section["kv"] == {"error": serving.UNMANAGED}
    assert section["engine_version"]["version"] is None and section["engine_version"]["error"] == serving.UNMANAGED
    assert rec["provenance"]["status"] == "not_applicable" and rec["provenance"]["reason"] == serving.UNMANAGED
    assert not (run_dir / "server.log").exists() and not (run_dir / "version.log").exists()
    argv = section["client"]["argv"]
    assert argv[argv.index("--base-url") + 1] == endpoint["url"] and argv[argv.index("--model") + 1] == "served-tiny"
    assert [p["status"] for p in section["points"]] == ["ok", "ok"]
    assert all(p["metrics"]["tg_req_tok_s"] > 0 for p in section["points"])
    assert endpoint["proc"].poll() is None  # the server sparkfleet did not start is left running
    assert endpoint["log"].read_text().count("POST /v1/chat/completions") >= 3


def test_an_endpoint_that_does_not_answer_fails_its_points_naming_the_client(tmp_path, tiny, endpoint):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    rec, _ = run_endpoint(tmp_path, tiny, endpoint, endpoint={"url": dead, "model": "served-tiny"})
    assert rec["status"] == "failed" and rec["reason"].startswith("no point ok (")
    assert all(p["reason"].startswith("client exited") for p in rec["serving"]["points"])
    assert rec["serving"]["server"]["managed"] is False


def test_the_report_says_unmanaged_server_for_its_runs():
    import pandas as pd

    from sparkfleet.report.served import UNMANAGED_WORDS, served_intro, served_lines

    runs = pd.DataFrame([{"run_id": "r1", "engine": "external", "environment": "bare", "model": "tiny",
                          "engine_version": None, "provenance_status": "not_applicable",
                          "provenance_reason": serving.UNMANAGED}])
    assert served_lines(None, runs, {"r1"}) == ["external / bare / tiny: " + UNMANAGED_WORDS]
    assert "unmanaged server" in UNMANAGED_WORDS and "unmanaged server's line says so" in served_intro(1)


def test_the_sla_search_runs_on_the_host_and_keeps_every_level_it_measured(tmp_path, tiny, endpoint):
    """Issue 37 item 3 through bench_run: the profile's levels 1 and 2 are read, 4 (max_concurrency) is probed."""
    loose = {"ttft_ms": {"percentile": 99, "max": 60000}, "tpot_ms": {"percentile": 90, "max": 10000},
             "max_concurrency": 4}
    rec, _ = run_endpoint(tmp_path, tiny, endpoint, sla=loose)
    assert rec["status"] == "ok", rec["reason"]
    section = rec["serving"]
    points = {p["point"]: p for p in section["points"]}
    assert sorted(points) == ["d0.c1.pp32.tg8", "d0.c2.pp32.tg8", "d0.c4.pp32.tg8"]
    assert points["d0.c4.pp32.tg8"]["sla_probe"] is True and "sla_probe" not in points["d0.c1.pp32.tg8"]
    sla = section["sla"]
    assert sla["targets"] == {k: loose[k] for k in ("ttft_ms", "tpot_ms")} and sla["latencies_from"] == "llama-benchy"
    (group,) = sla["groups"]
    assert (group["depth"], group["pp"], group["tg"], group["capacity"], group["cap"]) == (0, 32, 8, 4, 4)
    assert [(m["concurrency"], m["pass"]) for m in group["measured"]] == [(1, True), (2, True), (4, True)]
    assert all(m["ttft_ms"] > 0 and m["tpot_ms"] > 0 for m in group["measured"])


def test_a_target_no_level_meets_gives_capacity_zero(tmp_path, tiny, endpoint):
    rec, _ = run_endpoint(tmp_path, tiny, endpoint, sla={"ttft_ms": {"percentile": 50, "max": 0.001}})
    (group,) = rec["serving"]["sla"]["groups"]
    assert group["capacity"] == 0 and [(m["concurrency"], m["pass"]) for m in group["measured"]] == [(1, False)]
    assert not any(p.get("sla_probe") for p in rec["serving"]["points"])


def test_a_level_whose_point_failed_stops_the_search_and_is_never_measured_twice(tmp_path, tiny, endpoint):
    """The client fails at concurrency 4 (the probe): an error is not a latency miss. The search stops there, says
    why, and keeps the capacity found so far; no point name appears twice in the record."""
    if CLIENT is None:
        pytest.skip("no llama-benchy beside the test's python")
    failing = tmp_path / "client"
    failing.write_text(f'#!/bin/sh\ncase " $* " in *" --concurrency 4 "*) echo "refused" >&2; exit 1;; esac\n'
                       f'exec {CLIENT} "$@"\n')
    failing.chmod(0o755)
    loose = {"ttft_ms": {"percentile": 99, "max": 60000}, "max_concurrency": 4}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys.modules[__name__], "CLIENT", str(failing))
        rec, _ = run_endpoint(tmp_path, tiny, endpoint, sla=loose)
    names = [p["point"] for p in rec["serving"]["points"]]
    assert len(names) == len(set(names)) == 3, names
    (group,) = rec["serving"]["sla"]["groups"]
    assert group["capacity"] == 2 and group["stopped"].startswith("level 4: point d0.c4.pp32.tg8 failed"), group
    assert [(m["concurrency"], m["pass"]) for m in group["measured"]] == [(1, True), (2, True)]
