"""The committed serving example (examples/gpu/results/gpu-serving: llama.cpp built with CUDA on a lent H200, a 1.08 B
f16 random-weight GGUF, llama-benchy; bare, its A/A twin and native; 2 depths x 2 concurrencies x 3 iterations) is what
its README says: every record valid and ok with every point measured, each environment's server where it should have
run, and every readiness reading healthy (power-limited) under issue 32's rule when judged again from the record."""

from __future__ import annotations

import json

import pytest
from _ansible_modules import REPO, host_util

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate

readiness = host_util("readiness")
host_state = host_util("host_state")
attestation = host_util("attestation")

EXAMPLE = REPO / "examples" / "gpu" / "results" / "gpu-serving"
RUNS = sorted((EXAMPLE / "localhost" / "runs").glob("*/record.json"))
POINTS = {(d, c) for d in (0, 2048) for c in (1, 4)}


def records() -> list[dict]:
    return [json.loads(p.read_text()) for p in RUNS]


def test_nine_valid_ok_runs_with_every_point_measured():
    recs = records()
    assert sorted((r["environment"], r["iteration"]) for r in recs) == [
        (e, i) for e in ("bare", "bare.aa", "native") for i in (1, 2, 3)]
    for rec in recs:
        assert validate(rec) == [] and rec["status"] == "ok", rec["run_id"]
        serving = rec["serving"]
        assert serving["engine"] == "llama.cpp" and serving["client"]["version"] == "0.4.0"
        assert {(p["depth"], p["concurrency"]) for p in serving["points"]} == POINTS
        for point in serving["points"]:
            assert point["status"] == "ok" and point["metrics"]["tg_tok_s"] > 0, (rec["run_id"], point)
            assert (RUNS[0].parents[1] / rec["run_id"] / point["raw"]).is_file()
        # the whole model on the GPU: sparkfleet's -ngl 999, and the slots the profile needs
        argv = serving["server"]["argv"]
        assert argv[argv.index("-ngl") + 1] == "999" and argv[argv.index("-np") + 1] == "4"


def test_the_native_server_ran_in_the_chroot_and_the_bare_ones_on_the_host():
    for rec in records():
        fingerprint = rec["fingerprint"]
        assert fingerprint["comm"] == "llama-server" and fingerprint["exe"] == "/usr/local/bin/llama-server"
        assert fingerprint["chroot"] is (rec["environment"] == "native"), rec["run_id"]


@pytest.mark.parametrize("path", RUNS, ids=[p.parent.name for p in RUNS])
def test_every_readiness_reading_is_healthy_and_power_limited(path):
    section = json.loads(path.read_text())["readiness"]
    limit = attestation.parse_nvidia_smi_q((EXAMPLE / "localhost" / "nvidia-smi-q.txt").read_text())["gpus"][0][
        "power_limit_w"]
    load = section["load"]
    verdict = readiness.judge(section["sm_clock_mhz"], section["power_w"], gpu_name=load["device"],
                              expected_sm_clock_mhz=section["expected_clock_mhz"], expected_source="max_clock",
                              power_limit_w=limit, counter_deltas_us=section["counter_deltas_us"],
                              window_s=section["window_s"], tflops=load["tflops"], tflops_size=load["size"],
                              tflops_dtype=host_state.PROBE_DTYPES[load["backend"]])
    assert section["state"] == verdict["state"] == "healthy", verdict
    assert verdict["power_limited"] is True and verdict["fault_counter_us"] == 0
    assert load["tflops"] > verdict["tflops_floor"]
