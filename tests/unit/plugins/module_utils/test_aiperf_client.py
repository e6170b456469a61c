"""The AIPerf driver (issue 37): its argv per point, its real exports parsed onto the record's serving metrics
(tests/fixtures/aiperf: AIPerf 0.13.0 against the tests' CPU llama.cpp server), the 1.5 and earlier names, and
what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import SERVING_METRICS
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving, serving_client
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.serving_client import (
    AIPERF_METRICS,
    AIPerf,
    ClientOutputError,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "aiperf"
C1 = {"depth": 0, "concurrency": 1, "pp": 64, "tg": 16, "point": "d0_c1_pp64_tg16"}
C2 = {"depth": 0, "concurrency": 2, "pp": 32, "tg": 24, "point": "d0_c2_pp32_tg24"}


def _export(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def _bytes(doc: dict) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("name", "point", "goodput"), [
    ("d0_c1_pp64_tg16.profile_export_aiperf.json", C1, False),
    ("d0_c2_pp32_tg24.goodput.profile_export_aiperf.json", C2, True)])
def test_a_real_export_maps_onto_the_records_serving_metrics(name, point, goodput):
    doc = _export(name)
    got = AIPerf.parse_point((FIXTURES / name).read_bytes(), point, name)
    assert got["version"] == "0.13.0" and got["schema_version"] == "1.4"
    assert got["context_load"] is None and got["samples"] == {}
    metrics = got["metrics"]
    assert metrics["e2e_ttft_ms"] == doc["time_to_first_token"]["avg"]
    assert metrics["itl_ms"] == doc["inter_token_latency"]["avg"]
    assert metrics["out_tok_s"] == doc["output_token_throughput"]["avg"]
    assert metrics["out_req_tok_s"] == doc["output_token_throughput_per_user"]["avg"]
    assert metrics["req_per_s"] == doc["request_throughput"]["avg"]
    assert ("goodput_per_s" in metrics) is goodput
    if goodput:
        assert metrics["goodput_per_s"] == doc["goodput"]["avg"]
    # exact output length, unique prompts (the server's own counts; one conversation per request)
    assert doc["output_sequence_length"]["min"] == doc["output_sequence_length"]["max"] == point["tg"]
    assert doc["request_count"]["avg"] == point["concurrency"] * 2  # runs 2


def test_every_request_of_a_point_had_its_own_prompt_and_exactly_tg_tokens():
    records = [json.loads(line) for line in (FIXTURES / "d0_c2_pp32_tg24.goodput.profile_export.jsonl").open()]
    sessions = [r["metadata"]["conversation_id"] for r in records]
    assert len(records) == 6 and len(set(sessions)) == 6  # 2 warm-up + 4 measured, no prompt sent twice
    assert {r["metrics"]["usage_completion_tokens"]["value"] for r in records} == {24}
    assert {r["metrics"]["usage_prompt_cache_read_tokens"]["value"] for r in records} == {0}


@pytest.mark.parametrize(("version", "energy"), [("1.5", "nvidia_output_tokens_per_joule"),
                                                 ("1.4", "output_tokens_per_joule")])
def test_schema_1_5_names_and_the_earlier_unprefixed_ones(version, energy):
    """1.5 renamed the GPU telemetry metrics to nvidia_*; the serving metrics kept their names."""
    doc = _export("d0_c1_pp64_tg16.profile_export_aiperf.json")
    doc.pop("nvidia_output_tokens_per_joule", None)
    doc.update({"schema_version": version, energy: {"unit": "tokens/J", "avg": 12.5}})
    got = AIPerf.parse_point(_bytes(doc), C1)
    assert got["schema_version"] == version and got["metrics"]["out_tok_per_j"] == 12.5
    assert {"e2e_ttft_ms", "itl_ms", "out_tok_s", "out_req_tok_s", "req_per_s"} <= set(got["metrics"])


def test_every_mapped_name_is_a_record_metric_in_its_unit():
    names = [name for _, _, name in AIPERF_METRICS]
    assert len(set(names)) == len(names) and set(names) <= set(SERVING_METRICS)
    both = {name for _, name in serving_client.LLAMA_BENCHY_METRICS} | set(names)
    assert both == set(SERVING_METRICS)  # each registry entry is some client's figure
    assert SERVING_METRICS["out_req_tok_s"].aggregate == "out_tok_s"


@pytest.mark.parametrize(("change", "says"), [
    (lambda d: d.pop("schema_version"), "no schema_version"),
    (lambda d: d.update(was_cancelled=True), "did not complete"),
    (lambda d: d.update(is_complete=False, incomplete_reason="stall"), "stall"),
    (lambda d: d["time_to_first_token"].update(unit="ns"), "not an average in ms"),
    (lambda d: d["output_sequence_length"].update(min=15), "not exactly tg 16")])
def test_an_export_it_cannot_trust_is_refused(change, says):
    doc = _export("d0_c1_pp64_tg16.profile_export_aiperf.json")
    change(doc)
    with pytest.raises(ClientOutputError, match=says):
        AIPerf.parse_point(_bytes(doc), C1, "points/x.json")
    with pytest.raises(ClientOutputError, match="not JSON"):
        AIPerf.parse_point(b"{", C1)


def test_the_argv_of_one_point(tmp_path):
    out = str(tmp_path / "points" / AIPerf.raw_name(C2["point"]))
    argv = AIPerf.point_argv("/w/clients/aiperf/bin/aiperf", C2, "http://127.0.0.1:8080", "tiny",
                             "/m/tokenizer.json", 3, False, "http://127.0.0.1:1/corpus.txt", out, ["--goodput", "x:1"],
                             skip_coherence=True, seed=7)
    assert argv[:2] == ["/w/clients/aiperf/bin/aiperf", "profile"]
    flags = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}
    assert flags["--url"] == "http://127.0.0.1:8080" and flags["--model"] == "tiny" and flags["--tokenizer"] == "/m"
    assert flags["--synthetic-input-tokens-mean"] == "32" and flags["--synthetic-input-tokens-stddev"] == "0"
    assert flags["--output-tokens-mean"] == "24" and flags["--output-tokens-stddev"] == "0"
    assert flags["--concurrency"] == "2" and flags["--request-count"] == "6" and flags["--warmup-request-count"] == "2"
    assert flags["--conversation-num"] == "8" and flags["--dataset-sampling-strategy"] == "sequential"
    assert flags["--artifact-dir"] == str(tmp_path / "points" / "d0_c2_pp32_tg24.aiperf")
    extra = [argv[i + 1] for i, a in enumerate(argv) if a == "--extra-inputs"]
    assert extra == ["ignore_eos:true", "min_tokens:24", "cache_prompt:false"]
    assert "--use-server-token-count" in argv and argv[-2:] == ["--goodput", "x:1"]
    assert "--book-url" not in argv and "--skip-coherence" not in argv
    # the seed: of the run and the point, the same each time, another for another point or run
    seed = flags["--random-seed"]
    again = AIPerf.point_argv("a", C2, "u", "m", "/m", 3, False, None, out, seed=7)
    assert again[again.index("--random-seed") + 1] == seed
    other = AIPerf.point_argv("a", C2, "u", "m", "/m", 3, False, None, out, seed=8)
    assert other[other.index("--random-seed") + 1] != seed


def test_its_environment_leaves_hf_offline_mode_off():
    env = serving_client.client_env("/r", AIPerf)
    assert env["HF_HUB_OFFLINE"] == "" and env["HOME"] == "/r/.client-home"
    assert serving_client.client_env("/r")["HF_HUB_OFFLINE"] == "1"


def _workload(**kw) -> dict:
    base = {"name": "w", "engine": "llama.cpp", "client": "aiperf", "port": 8080,
            "profile": {"depth": [0], "concurrency": [1], "pp": [64], "tg": [16]}, "prefix_caching": False}
    return dict(base, **kw)


def test_what_aiperf_cannot_measure_is_refused_with_the_field_named():
    assert serving.overriding_args(_workload()) == []
    depth = serving.overriding_args(_workload(profile={"depth": [0, 2048], "concurrency": [1], "pp": [8],
                                                       "tg": [8]}))
    assert [f for f, _ in depth] == ["profile"] and "no context depth" in depth[0][1] and "2048" in depth[0][1]
    cached = serving.overriding_args(_workload(prefix_caching=True))
    assert [f for f, _ in cached] == ["prefix_caching"]
    owned = serving.overriding_args(_workload(client_args=["--concurrency", "4", "--goodput", "x:1", "-u", "h"]))
    assert [f for f, _ in owned] == ["client_args", "client_args"]
    assert serving.overriding_args(_workload(client="llama-benchy",
                                             profile={"depth": [2048], "concurrency": [1], "pp": [8], "tg": [8]})) == []


def test_a_real_c1_export_whose_per_user_rate_beats_the_aggregate_is_kept():
    """AIPerf's per-user rate is 1 / inter-token latency (decode alone), its aggregate over the whole benchmark:
    the real c1 export reads 3,873 per user against 919 aggregate. The report's screen for per-user figures above
    concurrency x aggregate (llama-benchy's definitions bound them) must not drop it."""
    import pandas as pd

    from sparkfleet import serving as points

    name = "d0_c1_pp64_tg16.profile_export_aiperf.json"
    point = {"point": "d0.c1.pp64.tg16", "depth": 0, "concurrency": 1, "pp": 64, "tg": 16}
    parsed = AIPerf.parse_point((FIXTURES / name).read_bytes(), point, name)
    assert parsed["metrics"]["out_req_tok_s"] > 2 * parsed["metrics"]["out_tok_s"]
    row = {c: None for c in points.POINT_COLUMNS} | point | parsed["metrics"] | {
        "run_id": "r1", "status": "ok", "warmup": False, "point_status": "ok", "engine": "llama.cpp",
        "environment": "bare", "model": "tiny"}
    frame = points.points_frame([row])
    assert points.impossible_samples(frame).empty
    kept = points.screened_points(frame)
    assert kept["out_req_tok_s"].iloc[0] == pytest.approx(parsed["metrics"]["out_req_tok_s"])
    assert isinstance(kept, pd.DataFrame)


def test_a_zero_inter_token_latency_is_no_latency(tmp_path):
    """A starved client reads every token in one piece: AIPerf exports ITL 0 and no per-user rate. The SLA search
    gets no TPOT from it (it would pass any target), and the report leaves the 0 out, naming why."""
    from sparkfleet import serving as points

    export = {"time_to_first_token": {"unit": "ms", "p99": 180.0},
              "inter_token_latency": {"unit": "ms", "avg": 0.0, "p99": 0.0}}
    (tmp_path / "x.json").write_text(json.dumps(export))
    goals = {"ttft_ms": {"percentile": 99, "max": 2000}, "tpot_ms": {"percentile": 99, "max": 50}}
    assert AIPerf.sla_latencies({"raw": "x.json"}, str(tmp_path), goals) == {"ttft_ms": 180.0, "tpot_ms": None}
    point = {"point": "d0.c1.pp64.tg32", "depth": 0, "concurrency": 1, "pp": 64, "tg": 32}
    row = {c: None for c in points.POINT_COLUMNS} | point | {
        "itl_ms": 0.0, "out_tok_s": 700.0, "e2e_ttft_ms": 40.0, "run_id": "r1", "status": "ok", "warmup": False,
        "point_status": "ok", "engine": "llama.cpp", "environment": "bare", "model": "tiny", "client": "aiperf"}
    frame = points.points_frame([row])
    (flag,) = points.impossible_samples(frame).itertuples()
    assert (flag.left_out, flag.check) == ("itl_ms", "no_gap_between_tokens")
    assert points.screened_points(frame)["itl_ms"].isna().all()
    one_token = points.points_frame([row | {"tg": 1, "point": "d0.c1.pp64.tg1"}])
    assert points.impossible_samples(one_token).empty  # one token has no gap to time
