"""The serving load generator's driver (llama-benchy 0.4.0): its argv per point, its JSON output read into the
point's metrics and raw samples (real output files), its version, and the loopback corpus server."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from _ansible_modules import REPO, host_util

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import SERVING_METRICS

client = host_util("serving_client")

FIXTURES = REPO / "tests" / "fixtures" / "serving"
# Real outputs: llama-benchy 0.4.0 (--runs 2 --exact-tg --skip-coherence, corpus tests/data/public-domain-prose.txt
# served by CorpusServer) against llama-server (llama.cpp vendored by llama-cpp-python 0.3.36, CPU build) serving
# the tiny model of tests/fleet/tinymodel.py, each one point of a whole bench_run serving run (points/<point>.json).
#: --no-cache, depth 64, concurrency 2, pp 64, tg 16
PLAIN = FIXTURES / "llama-benchy-0.4.0-llama-server-nocache.json"
#: --enable-prefix-caching, depth 128, concurrency 2: a context-load entry beside the measured one
PREFIX = FIXTURES / "llama-benchy-0.4.0-llama-server-prefix-caching.json"
POINT = {"depth": 0, "concurrency": 2, "pp": 64, "tg": 16, "point": "d0.c2.pp64.tg16"}


def _fixture(path: Path) -> bytes:
    if not path.exists():
        pytest.fail(f"{path.name} is missing")
    return path.read_bytes()


def test_point_argv_runs_one_point_with_the_contract_flags():
    argv = client.LlamaBenchy.point_argv("/c/bin/llama-benchy", POINT, "http://127.0.0.1:8080/v1", "tiny",
                                         "/m/tokenizer.json", 3, False, None, "/r/points/d0.c2.pp64.tg16.json")
    assert argv == ["/c/bin/llama-benchy", "--base-url", "http://127.0.0.1:8080/v1", "--model", "tiny",
                    "--tokenizer", "/m/tokenizer.json", "--pp", "64", "--tg", "16", "--depth", "0",
                    "--concurrency", "2", "--runs", "3", "--exact-tg", "--no-cache", "--latency-mode", "api",
                    "--format", "json", "--save-result", "/r/points/d0.c2.pp64.tg16.json"]


def test_prefix_caching_and_a_served_corpus_change_the_flags():
    argv = client.LlamaBenchy.point_argv("lb", POINT, "u", "m", "t", 1, True, "http://127.0.0.1:4242/corpus.txt",
                                         "o.json", ["--skip-coherence"])
    assert "--enable-prefix-caching" in argv and "--no-cache" not in argv
    assert argv[argv.index("--book-url") + 1] == "http://127.0.0.1:4242/corpus.txt"
    assert argv[-1] == "--skip-coherence"


@pytest.mark.parametrize(("skip", "extra", "flags", "said"), [
    (False, [], [], "asked"),
    (True, [], ["--skip-coherence"], "skipped: the model has random_weights"),
    (True, ["--skip-coherence"], ["--skip-coherence"], "skipped: the model has random_weights"),  # said once
    (False, ["--skip-coh"], ["--skip-coh"], "skipped: the workload's client_args say --skip-coherence"),
    (True, ["--sk"], ["--sk"], "skipped: the model has random_weights"),  # argparse: --sk is --skip-coherence
    (False, ["--no-warmup"], ["--no-warmup"], "asked"),
])
def test_a_random_weight_model_skips_the_coherence_check(skip, extra, flags, said):
    """llama-benchy asks the model the capital of France after the warm-up and fails the point on a wrong answer:
    a random-weight model's random text. Its random_weights adds --skip-coherence (once), and the record says why."""
    argv = client.LlamaBenchy.point_argv("lb", POINT, "u", "m", "t", 1, False, None, "o.json", extra,
                                         skip_coherence=skip)
    tail = argv[argv.index("o.json") + 1:]
    assert tail == flags
    assert client.LlamaBenchy.coherence(skip, extra) == said


def test_the_client_names_every_contract_metric_and_no_other():
    """The mapping names the contract's serving point metrics (record.SERVING_METRICS), each once; the others are
    AIPerf's (test_aiperf_client)."""
    names = [ours for _, ours in client.LLAMA_BENCHY_METRICS]
    assert len(set(names)) == len(names) and set(names) <= set(SERVING_METRICS)
    assert set(names) | {ours for _, _, ours in client.AIPERF_METRICS} == set(SERVING_METRICS)


def test_a_real_output_maps_to_the_contract_names_with_raw_samples():
    doc = json.loads(_fixture(PLAIN))
    (entry,) = [b for b in doc["benchmarks"] if not b["is_context_prefill_phase"]]
    point = {"depth": entry["context_size"], "concurrency": entry["concurrency"], "pp": entry["prompt_size"],
             "tg": entry["response_size"]}
    got = client.LlamaBenchy.parse_point(_fixture(PLAIN), point)
    pairs = {"pp_throughput": "pp_tok_s", "pp_req_throughput": "pp_req_tok_s", "tg_throughput": "tg_tok_s",
             "tg_req_throughput": "tg_req_tok_s", "peak_throughput": "peak_tg_tok_s", "ttfr": "ttfr_ms",
             "est_ppt": "est_ppt_ms", "e2e_ttft": "e2e_ttft_ms"}
    for theirs, ours in pairs.items():
        assert got["metrics"][ours] == entry[theirs]["mean"]
        assert got["samples"][ours] == entry[theirs]["values"] and got["samples"][ours]
    assert len(got["samples"]["tg_tok_s"]) == 2  # one aggregate value per llama-benchy run (--runs 2)
    assert len(got["samples"]["tg_req_tok_s"]) == 4  # one per request: 2 runs x concurrency 2
    assert got["context_load"] is None and got["version"] == "0.4.0"
    assert got["metrics"]["tg_req_tok_s"] > 0 and 0 < got["metrics"]["ttfr_ms"] <= got["metrics"]["e2e_ttft_ms"]


def test_prefix_caching_keeps_the_context_load_apart():
    doc = json.loads(_fixture(PREFIX))
    (measured,) = [b for b in doc["benchmarks"] if not b["is_context_prefill_phase"]]
    (load,) = [b for b in doc["benchmarks"] if b["is_context_prefill_phase"]]
    assert measured["context_size"] > 0 and doc["prefix_caching_enabled"] is True
    got = client.LlamaBenchy.parse_point(_fixture(PREFIX))
    assert got["metrics"]["pp_tok_s"] == measured["pp_throughput"]["mean"]
    assert got["context_load"]["metrics"]["pp_tok_s"] == load["pp_throughput"]["mean"]
    assert got["context_load"]["samples"]["pp_tok_s"] == load["pp_throughput"]["values"]


def test_an_entry_for_another_point_is_not_taken():
    other = {"depth": 99999, "concurrency": 7, "pp": 1, "tg": 1}
    got = client.LlamaBenchy.parse_point(_fixture(PLAIN), other)
    assert got["metrics"] == {} and got["samples"] == {}


@pytest.mark.parametrize("data, message", [
    (b"", "points/x.json: not JSON"),
    (b"| model | test |", "points/x.json: not JSON"),
    (b'{"version": "0.4.0"}', "points/x.json: no benchmarks list"),
    (b'[1, 2]', "points/x.json: no benchmarks list"),
    (b'{"benchmarks": [{"is_context_prefill_phase": false, "tg_throughput": 12.5}]}',
     "points/x.json: tg_throughput is not a {mean, std, values} metric: 12.5"),
    (b'{"benchmarks": [{"tg_throughput": {"mean": NaN, "values": []}}]}', "tg_throughput is not a"),
])
def test_a_malformed_file_is_named(data, message):
    with pytest.raises(client.ClientOutputError, match=message.replace("{", r"\{").replace("}", r"\}")):
        client.LlamaBenchy.parse_point(data, source="points/x.json")


def test_a_null_metric_is_left_out():
    data = json.dumps({"benchmarks": [{"is_context_prefill_phase": False, "pp_throughput": None,
                                       "tg_throughput": {"mean": 5.0, "std": 0.0, "values": [5.0]}}]}).encode()
    assert client.LlamaBenchy.parse_point(data)["metrics"] == {"tg_tok_s": 5.0}


def test_version_reads_the_clients_own_answer(tmp_path):
    fake = tmp_path / "llama-benchy"
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint('llama-benchy 0.4.0') if sys.argv[1:] == ['--version'] "
                    "else sys.exit(2)\n")
    fake.chmod(0o755)
    assert client.LlamaBenchy.version(str(fake)) == "0.4.0"
    assert client.LlamaBenchy.version(str(tmp_path / "missing")) is None


def test_unknown_client_is_refused():
    assert client.driver(None) is client.LlamaBenchy
    assert client.driver("aiperf") is client.AIPerf
    with pytest.raises(ValueError, match="serving client 'guidellm' is not one of llama-benchy, aiperf"):
        client.driver("guidellm")


def test_client_env_keeps_the_book_cache_in_the_run():
    env = client.client_env("/r/run1")
    assert env["HOME"] == "/r/run1/.client-home" and env["HF_HUB_OFFLINE"] == "1"
    assert "127.0.0.1" in env["NO_PROXY"]


def test_the_corpus_is_served_on_loopback_only_that_file(tmp_path):
    corpus = tmp_path / "book.txt"
    corpus.write_text("It was a dark and stormy night.\n")
    (tmp_path / "secret.txt").write_text("not for the client")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with client.CorpusServer(str(corpus), str(tmp_path / "scratch")) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/corpus.txt")
        assert opener.open(server.url, timeout=10).read() == b"It was a dark and stormy night.\n"
        with pytest.raises(urllib.error.HTTPError):
            opener.open(server.url.replace("corpus.txt", "secret.txt"), timeout=10)
        port = server.httpd.server_address[1]
    with pytest.raises(OSError):  # gone with the block
        opener.open(f"http://127.0.0.1:{port}/corpus.txt", timeout=5)


def test_a_missing_corpus_is_named(tmp_path):
    with pytest.raises(ValueError, match="serving corpus '.*nope.txt' is not a file"):
        client.CorpusServer(str(tmp_path / "nope.txt"), str(tmp_path))
