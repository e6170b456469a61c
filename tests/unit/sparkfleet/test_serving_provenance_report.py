"""The report on what serving runs served (issue 35): the decode roofline per depth from the weight bytes a serving
record's GGUF card gives, the "What was served" lines (engine version, weights, provenance) for new and old
records, and each host's readiness line whatever its verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.load import load_runs
from sparkfleet.report.host_normal import check_hosts, readiness_line
from sparkfleet.report.served import card_words, served_lines

GB = 1e9
BANDWIDTH = 3000 * GB
#: A served GGUF's card (modelcard.gguf_card): 2.0 GB of f16 tensors. At 3,000 GB/s the batch-1 roofline is
#: 3000 / 2.0 = 1,500 tok/s: 750 tok/s at depth 0 is 50%, 600 at depth 2,048 is 40%.
CARD = {"path": "/models/llama-1b-f16.gguf", "format": "gguf", "architecture": "llama", "file_type": "F16",
        "dtype": "float16", "quantization": None, "param_count": 1_000_000_000, "tensor_bytes": 2 * GB,
        "file_bytes": 2 * GB + 6_000_000, "checkpoint_bytes": 2 * GB + 6_000_000, "expert_tensor_bytes": 0,
        "head_sha256": "b416417d5e7009ab282e1edb6e320f1c502050fad95b5c3098c1e6c90aebe483",
        "weights_source": "GGUF tensor infos"}
READY = {"state": "healthy", "reasons": [], "power_limited": True, "power_limit_w": 700.0, "sm_clock_mhz": 1545.0,
         "power_w": 688.0, "tflops": 650.0}


def _points() -> list[dict]:
    out = []
    for depth, c, value in ((0, 1, 750.0), (2048, 1, 600.0), (0, 4, 250.0)):
        out.append({"point": f"d{depth}.c{c}.pp512.tg128", "depth": depth, "concurrency": c, "pp": 512, "tg": 128,
                    "order": len(out), "status": "ok", "reason": None, "duration_s": 5.0,
                    "metrics": {"tg_req_tok_s": value, "tg_tok_s": value * c}, "samples": {}})
    return out


def build(root: Path, *, card: dict | None, version: str | None = "0.5.0-dev (build 1, commit 0c1e570)",
          readiness: list[dict] | None = None, host: str = "h100") -> Path:
    states = readiness or [READY] * 3
    for i, ready in enumerate(states, start=1):
        provenance = None if card is None else {"status": "confirmed", "reason": None, "checks": {}, "loaded": {},
                                                "expected": card}
        rec = contract.new_record("gpu-serving", host, "llama-1b-f16", "bare", "chat", i, status="ok",
                                  engine="llama.cpp", environment_kind="bare", warmup=False, order_index=i,
                                  engine_version=version, workload_params={"engine": "llama.cpp", "runs": 3},
                                  versions={"engine": "llama.cpp", "engine_version": version},
                                  provenance=provenance, readiness=ready,
                                  serving={"engine": "llama.cpp", "points": _points()})
        data, problems = contract.sealed(rec)
        assert not problems, problems
        contract.write_json_atomic(root / host / "runs" / data["run_id"] / "record.json", data)
    (root / host / "bandwidth.json").write_text(json.dumps({"bandwidth_bytes_s": BANDWIDTH, "method": "torch-copy"}))
    return root


def test_the_serving_decode_roofline_per_depth_reads_the_ggufs_weight_bytes(tmp_path):
    root = build(tmp_path / "gpu-serving", card=CARD)
    roof = check_hosts(root, load_runs(root).runs).roofline
    serving = roof[roof["metric"] == "tg_req_tok_s_c1"]
    assert serving["depth"].tolist() == [0, 2048]
    assert serving["roofline_tok_s"].tolist() == pytest.approx([1500.0, 1500.0])
    assert serving["percent"].tolist() == pytest.approx([50.0, 40.0])
    assert set(serving["weight_source"]) == {"tensor bytes of the GGUF served (its tensor infos, the serving record)"}


def test_an_older_serving_record_says_its_weight_bytes_are_unknown(tmp_path):
    root = build(tmp_path / "gpu-serving", card=None, version=None)
    serving = check_hosts(root, load_runs(root).runs).roofline.query("metric == 'tg_req_tok_s_c1'")
    assert serving["percent"].isna().all()
    assert set(serving["note"]) == {"model weight bytes unknown (no model card in the records)"}


def test_what_was_served_new_and_old_records(tmp_path):
    root = build(tmp_path / "new", card=CARD)
    runs = load_runs(root).runs
    assert served_lines(root, runs, set(runs["run_id"])) == [
        "llama.cpp / bare / llama-1b-f16: engine version 0.5.0-dev (build 1, commit 0c1e570); weights GGUF llama F16, "
        "1 B parameters, 2 GB of tensors, first MiB sha256 b416417d5e70, /models/llama-1b-f16.gguf; provenance "
        "confirmed in 3 of 3 run(s)"]
    old = build(tmp_path / "old", card=None, version=None)
    runs = load_runs(old).runs
    assert served_lines(old, runs, set(runs["run_id"])) == [
        "llama.cpp / bare / llama-1b-f16: engine version not recorded; weights no card in the records (written before "
        "the weights were fingerprinted, or unreadable); provenance unconfirmed in 3 of 3 run(s) (the records have no "
        "provenance check)"]
    assert card_words({"architecture": "LlamaForCausalLM", "dtype": "bfloat16", "param_count": 8.03e9,
                       "tensor_bytes": 16.06e9, "config_sha256": "0123456789abcdef" * 4}) == (
        "directory LlamaForCausalLM bfloat16, 8.03 B parameters, 16.1 GB of tensors, config.json sha256 0123456789ab")


def _states(*rows: tuple[str, bool | None, float | None]) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": f"r{i}", "host": "h", "readiness_state": state, "power_limited": limited,
                          "power_limit_w": limit} for i, (state, limited, limit) in enumerate(rows)])


def test_the_readiness_line_counts_every_state():
    assert readiness_line(_states(*[("healthy", True, 700.0)] * 9), "h") == (
        "readiness: 9 of 9 probes healthy (power-limited at the 700 W limit)")
    mixed = _states(*[("healthy", True, 700.0)] * 6, ("healthy", False, 700.0), ("suspect", False, 700.0),
                    ("invalid", None, None), (None, None, None))
    assert readiness_line(mixed, "h") == (
        "readiness: 7 of 9 probes healthy (6 of them power-limited at the 700 W limit); 1 suspect; 1 invalid")
    assert readiness_line(_states(("healthy", False, None)), "h") == "readiness: 1 of 1 probe healthy"
    assert readiness_line(_states(("healthy", True, None)), "other") == ""
    assert readiness_line(pd.DataFrame(), "h") == ""


def test_a_lone_healthy_host_says_its_readiness(tmp_path):
    """One host, no run suspect: the verdict is NO PEERS, and the readiness probe's finding is said all the same."""
    root = build(tmp_path / "gpu-serving", card=CARD)
    hosts = check_hosts(root, load_runs(root).runs).hosts.set_index("host")
    assert hosts.loc["h100", "verdict"] == "no peers"
    assert hosts.loc["h100", "readiness"] == "readiness: 3 of 3 probes healthy (power-limited at the 700 W limit)"
    assert hosts.loc["h100", "sentence"] == ("h100: NO PEERS: no other host or reference ran its cells; readiness: 3 "
                                             "of 3 probes healthy (power-limited at the 700 W limit)")
