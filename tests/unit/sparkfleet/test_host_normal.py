""""Is this host normal?" on synthetic results trees: a degraded host is named with its cause, a firmware
mismatch blocks unless acknowledged, a decode figure above its bandwidth roofline is flagged, a host within the
tolerance is normal, energy per token carries its scope, and a tree without the new sections reports as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main
from sparkfleet.hostcheck import decoder_words
from sparkfleet.load import load_runs
from sparkfleet.report import host_normal
from sparkfleet.report.host_normal import check_hosts

HOSTS = ("spark1", "spark2", "spark3", "spark4")
GB = 1e9
#: The model card's tensor bytes and the hosts' measured bandwidth: the roofline at batch 1 is 273e9 / 2.5e9 =
#: 109.2 tok/s, so a decode figure of 120 tok/s is above it.
TENSOR_BYTES = 2.5 * GB
BANDWIDTH = 273 * GB


def write_run(root: Path, host: str, iteration: int, tok_s: float, *, readiness: dict | None = None,
              attestation: dict | None = None, card: bool = True, engine_facts: dict | None = None) -> None:
    tpot = 1000.0 / tok_s  # batch 1: decode rate = 1000 / tpot
    fields = {"status": "ok", "engine": "hf-generate", "warmup": False, "order_index": iteration,
              "workload_params": {"engine": "hf-generate", "batch": 1, "input_len": 128, "output_len": 256},
              "metrics": {"output_tok_s": tok_s * 0.97, "tpot_ms": tpot},
              "metric_sources": {"output_tok_s": "log", "tpot_ms": "log"}, "samples": {}}
    if card:
        fields["provenance"] = {"status": "confirmed", "reason": None, "checks": {}, "loaded": {},
                                "expected": {"tensor_bytes": TENSOR_BYTES, "dtype": "bfloat16"}}
    if readiness is not None:
        fields["readiness"] = readiness
    if attestation is not None:
        fields["attestation"] = attestation
    if engine_facts is not None:
        fields["extra"] = {"engine": engine_facts}
    rec = contract.new_record("fleet", host, "llama", "native", "T1", iteration, **fields)
    data, problems = contract.sealed(rec)
    assert not problems, problems
    contract.write_json_atomic(root / host / "runs" / data["run_id"] / "record.json", data)


def healthy_readiness(clock: float = 2400.0) -> dict:
    return {"state": "healthy", "reasons": [], "sm_clock_mhz": clock, "power_w": 45.0,
            "expected_clock_mhz": 2400.0}


def degraded_readiness() -> dict:
    return {"state": "suspect", "reasons": [{"cause": "degraded_band",
                                             "message": "SM clock under load 850 MHz is in the known degraded band "
                                                        "690-890 MHz"}],
            "sm_clock_mhz": 850.0, "power_w": 20.0, "expected_clock_mhz": 2400.0}


def host_attestation(bios: str = "5.36_0ACUM018", driver: str = "580.95.05") -> dict:
    return {"format": 1, "kernel": "6.11.0-1016-nvidia", "driver_version": driver, "cuda_version": "13.0",
            "image_digest": "sha256:aa", "bios_vendor": "NVIDIA", "bios_version": bios, "bios_date": "2025-09-01",
            "product_name": "DGX Spark", "gpus": [{"product_name": "NVIDIA GB10", "vbios_version": "98.10"}],
            "firmware": []}


def build(root: Path, *, degraded: str | None = "spark3", firmware_differs: bool = True, tok_s: float = 100.0,
          energy: bool = False) -> Path:
    rng = np.random.default_rng(1)
    for host in HOSTS:
        slow = host == degraded
        for i in range(1, 7):
            value = (69.0 if slow else tok_s) * (1 + rng.normal(0, 0.005))
            att = {"counters": {"deltas": {"sw_power_capping": 1_500_000 if slow else 0}},
                   "memory_start": {"free_huge_blocks": 120}, "errors": []}
            if energy:
                att["energy"] = {"joules": 300.0, "j_per_output_token": 1.2, "scope": "gpu_rail"}
            write_run(root, host, i, value, readiness=degraded_readiness() if slow else healthy_readiness(),
                      attestation=att)
        bios = "5.36_0ACUM017" if firmware_differs and host == degraded else "5.36_0ACUM018"
        (root / host / "attestation.json").write_text(json.dumps(host_attestation(bios)))
        (root / host / "bandwidth.json").write_text(json.dumps({"bandwidth_bytes_s": BANDWIDTH,
                                                                 "method": "torch-copy"}))
    return root


def check(root: Path, **kw) -> host_normal.HostCheck:
    loaded = load_runs(root)
    result = check_hosts(root, loaded.runs, **kw)
    assert result is not None
    return result


def test_degraded_host_is_named_with_its_clock_and_firmware(tmp_path: Path) -> None:
    result = check(build(tmp_path), acknowledged=True)
    hosts = result.hosts.set_index("host")
    assert hosts.loc["spark3", "verdict"] == "not normal"
    sentence = hosts.loc["spark3", "sentence"]
    # its runs were marked suspect: compared on their own, and named so
    assert "(suspect runs)" in sentence and "vs the other hosts" in sentence
    assert "decode rate −3" in sentence  # 69 against 100: about −31%
    assert "SM clock under load 850 MHz vs 2 400 MHz on the others" in sentence
    assert "firmware differs (bios_version 5.36_0ACUM017 vs 5.36_0ACUM018)" in sentence
    assert "throttle counters grew in 6 of 6 run(s) (sw_power_capping +1.5e+06)" in sentence
    # the suspect runs never enter the other hosts' comparison
    unmarked = result.comparisons[result.comparisons["runs"] == "unmarked"]
    assert "spark3" not in set(unmarked["host"]) and "spark3" not in " ".join(map(str, unmarked["against"]))
    for host in ("spark1", "spark2", "spark4"):
        assert hosts.loc[host, "verdict"] == "normal", hosts.loc[host, "sentence"]
        assert hosts.loc[host, "causes"] == ""


def test_firmware_mismatch_blocks_unless_acknowledged(tmp_path: Path) -> None:
    root = build(tmp_path)
    refused = check(root)  # campaign.json absent: nothing acknowledged
    assert refused.refused and "bios_version" in refused.blocking
    assert host_normal.text_table(refused).startswith("REFUSED: firmware or driver differs")
    assert any(f.kind == "host-differences" and f.message.startswith("REFUSED") for f in host_normal.findings(refused))
    (root / "campaign.json").write_text(json.dumps({"campaign": "fleet",
                                                    "resolved": {"acknowledge_host_differences": True}}))
    assert not check(root).refused and check(root).blocking
    # a kernel difference alone is reported, not blocking
    for host in HOSTS:
        (root / host / "attestation.json").write_text(json.dumps({**host_attestation(), "kernel": host}))
    kernel_only = check(root, acknowledged=False)
    assert kernel_only.differences and not kernel_only.blocking and not kernel_only.refused


def test_cli_hosts_table_and_exit_status(tmp_path: Path, capsys) -> None:
    root = build(tmp_path)
    assert main(["report", "--hosts", str(root)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REFUSED")
    line = next(x for x in out.splitlines() if x.startswith("spark3 "))
    assert "not normal" in line and "850" in line
    assert main(["report", "--hosts", str(root), "--acknowledge-differences"]) == 1  # spark3 is still not normal
    assert not capsys.readouterr().out.startswith("REFUSED")
    assert not (root / "report").exists()  # --hosts prints; it writes no report


def test_hosts_within_tolerance_are_normal(tmp_path: Path, capsys) -> None:
    root = build(tmp_path, degraded=None, firmware_differs=False)
    result = check(root)
    assert set(result.hosts["verdict"]) == {"normal"} and not result.refused
    assert main(["report", "--hosts", str(root)]) == 0
    assert "within ±5% of the other hosts" in capsys.readouterr().out


def test_roofline_percentage_and_the_implausible_flag(tmp_path: Path) -> None:
    plausible = check(build(tmp_path / "a", degraded=None, firmware_differs=False)).roofline
    decode = plausible[(plausible["metric"] == "decode_tok_s") & (plausible["host"] == "spark1")].iloc[0]
    # roofline 273e9 / 2.5e9 = 109.2 tok/s; ~100 tok/s is ~91.6% of it
    assert decode["roofline_tok_s"] == pytest.approx(109.2)
    assert decode["percent"] == pytest.approx(91.6, abs=0.5) and not decode["implausible"]
    assert set(plausible["metric"]) == {"output_tok_s", "decode_tok_s"}
    fast = check(build(tmp_path / "b", degraded=None, firmware_differs=False, tok_s=120.0))
    flagged = fast.roofline[fast.roofline["implausible"].astype(bool)]
    assert set(flagged["metric"]) == {"output_tok_s", "decode_tok_s"}  # 116 and 120 tok/s > 109.2
    messages = [f.message for f in host_normal.findings(fast) if f.kind == "roofline-implausible"]
    assert len(messages) == 8 and "of the bandwidth roofline" in messages[0]


def test_roofline_says_why_a_cell_has_no_percentage(tmp_path: Path) -> None:
    root = build(tmp_path, degraded=None, firmware_differs=False)
    (root / "spark2" / "bandwidth.json").write_text(json.dumps({"bandwidth_bytes_s": None, "error": "no CUDA"}))
    roof = check(root).roofline.set_index(["host", "metric"])
    assert roof.loc[("spark2", "decode_tok_s"), "note"] == "no measured bandwidth (no CUDA)"
    assert roof.loc[("spark1", "decode_tok_s"), "percent"] > 0


def test_roofline_says_how_the_engine_decoded_where_its_records_say(tmp_path: Path, capsys) -> None:
    """hf-generate's facts in each record's extra.engine: the roofline table names the decoder, a launch-bound
    one and per-process kernel tuning in words; records without the facts (older ones) leave the cell empty."""
    root = tmp_path / "fleet"
    facts = {"spark1": {"decode_path": "cuda-graph", "launch_bound": False, "compile_tuning": "coordinate-descent"},
             "spark2": {"decode_path": "generate", "launch_bound": True, "compile_tuning": "n/a"},
             "spark3": None}
    for host, engine in facts.items():
        for i in range(1, 4):
            write_run(root, host, i, 100.0, engine_facts=engine)
        (root / host / "bandwidth.json").write_text(json.dumps({"bandwidth_bytes_s": BANDWIDTH, "method": "copy"}))
    runs = load_runs(root).runs
    launch_bound = runs.groupby("host")["engine_launch_bound"].first().to_dict()
    assert launch_bound["spark1"] is False and launch_bound["spark2"] is True and launch_bound["spark3"] is None
    assert runs.groupby("host")["engine_decode_path"].first()["spark2"] == "generate"
    decode = check(root).roofline.query("metric == 'decode_tok_s'").set_index("host")["decoder"].to_dict()
    assert decode["spark1"].startswith("cuda-graph, coordinate-descent kernels, where tuned not recorded")
    assert decode["spark2"].startswith("generate, launch-bound: measures the host's Python")
    assert decode["spark3"] == ""
    summary, _ = _report(root, tmp_path / "out", capsys)
    assert "decoder (as the engine said)" in summary and "launch-bound" in summary
    # every run with the facts: the loader may type the column as bool, the words are the same
    shutil.rmtree(root / "spark3")
    decode = check(root).roofline.query("metric == 'decode_tok_s'").set_index("host")["decoder"].to_dict()
    assert "launch-bound" in decode["spark2"] and "launch-bound" not in decode["spark1"]


def test_the_decoder_column_says_whether_a_run_tuned_its_kernels_or_read_the_hosts_cache(tmp_path: Path) -> None:
    """hf-generate's compile_tuned_now: the first run on a host tunes, the others read its cache; the cell
    names both, and a record without the count says it is not recorded."""
    root = tmp_path / "fleet"
    tuned = {"decode_path": "cuda-graph", "launch_bound": False, "compile_tuning": "coordinate-descent"}
    for i, count in ((1, 26), (2, 0), (3, 0)):
        write_run(root, "spark1", i, 100.0, engine_facts={**tuned, "compile_tuned_now": count})
    (root / "spark1" / "bandwidth.json").write_text(json.dumps({"bandwidth_bytes_s": BANDWIDTH, "method": "copy"}))
    runs = load_runs(root).runs
    assert sorted(runs["engine_compile_tuned_now"]) == [0, 0, 26]
    cell = check(root).roofline.query("metric == 'decode_tok_s'")["decoder"].item()
    assert cell == ("cuda-graph, coordinate-descent kernels from the host's tuning cache / "
                    "cuda-graph, coordinate-descent kernels tuned in this run's process")
    assert decoder_words("cuda-graph", False, "none", 3) == "cuda-graph"  # untuned: nothing to say


def test_energy_per_output_token_with_its_scope(tmp_path: Path) -> None:
    energy = check(build(tmp_path, energy=True, degraded=None, firmware_differs=False)).energy
    row = energy.set_index("host").loc["spark1"]
    assert row["j_per_output_token"] == pytest.approx(1.2) and row["scope"] == "GPU rail only"


def test_reference_file_of_published_figures(tmp_path: Path) -> None:
    root = build(tmp_path / "fleet", degraded=None, firmware_differs=False)
    published = tmp_path / "published.yml"
    published.write_text("- {metric: decode_tok_s, model: llama, workload: T1, value: 140, source: the study}\n")
    result = check(root, reference=published)
    against = result.comparisons[result.comparisons["against"].str.contains("published")]
    assert set(against["outcome"]) == {"different"}
    assert (against["deviation_pct"] < -25).all()  # ~100 against 140
    assert set(result.hosts["verdict"]) == {"not normal"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"metric": "decode_tok_s", "model": "llama", "value": 1}]))
    with pytest.raises(Exception, match="entry 0 lacks workload, source"):
        check(root, reference=bad)


def test_reference_campaign_directory(tmp_path: Path) -> None:
    before = build(tmp_path / "before", degraded=None, firmware_differs=False)
    now = build(tmp_path / "now", degraded="spark2", firmware_differs=False)
    result = check(now, reference=before).hosts.set_index("host")
    assert result.loc["spark2", "verdict"] == "not normal"
    assert result.loc["spark1", "verdict"] == "normal"


def _report(root: Path, out: Path, capsys) -> tuple[str, str]:
    assert main(["report", str(root), "--out", str(out), "--json"]) == 0
    return (out / "summary.md").read_text(), capsys.readouterr().out


def test_a_tree_without_the_new_sections_reports_as_before(tmp_path: Path, capsys, monkeypatch) -> None:
    root = tmp_path / "plain"
    for host in ("spark1", "spark2"):
        for i in range(1, 4):
            write_run(root, host, i, 100.0 + i, card=False)
    assert check_hosts(root, load_runs(root).runs) is None
    with_hook = _report(root, tmp_path / "a", capsys)
    # the hooks switched off: the report as it was before them
    monkeypatch.setattr(host_normal, "for_report", lambda *a, **k: None)
    without = _report(root, tmp_path / "b", capsys)
    assert with_hook == without
    assert "Is this host normal?" not in with_hook[0] and "hosts" not in json.loads(with_hook[1])


def test_report_shows_the_verdicts_roofline_and_findings(tmp_path: Path, capsys) -> None:
    root = build(tmp_path / "fleet", energy=True)
    assert main(["report", str(root), "--out", str(tmp_path / "out")]) == 0
    terminal = capsys.readouterr().out
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Is this host normal?" in summary and "spark3: NOT NORMAL" in summary
    assert "% of the bandwidth roofline" in summary and "GPU rail only" in summary
    assert "[host-differences] REFUSED" in summary
    assert "spark3: NOT NORMAL" in terminal
    assert main(["report", str(root), "--out", str(tmp_path / "out"), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["hosts"]["refused"] is True
    assert {h["host"]: h["verdict"] for h in payload["hosts"]["hosts"]}["spark3"] == "not normal"


def test_fleet_reproducibility_report_refuses_until_acknowledged(tmp_path: Path) -> None:
    from sparkfleet.fleet_state import analyse, render_markdown

    root = build(tmp_path)
    state = analyse(root)
    text = render_markdown(state, 0.05)
    assert state.refused and text.splitlines()[2].startswith("**REFUSED: firmware or driver differs")
    assert "- spark3: NOT NORMAL" in text
    assert state.differing_facts["bios_version"]["spark3"] == "5.36_0ACUM017"  # attestation.json's facts
    assert state.to_dict()["refused"] is True
    acknowledged = analyse(root, acknowledged=True)
    assert not acknowledged.refused and "REFUSED" not in render_markdown(acknowledged, 0.05)
    plain = tmp_path / "plain"
    for host in ("spark1", "spark2"):
        for i in range(1, 4):
            write_run(plain, host, i, 100.0 + i, card=False)
    untouched = analyse(plain)
    assert untouched.verdicts is None and "refused" not in untouched.to_dict()


def test_serving_decode_at_concurrency_one_comes_from_ok_points_only() -> None:
    from sparkfleet.hostcheck import state_of

    points = [{"concurrency": 1, "status": "ok", "metrics": {"tg_req_tok_s": 30.0}},
              {"concurrency": 1, "status": "ok", "metrics": {"tg_req_tok_s": 34.0}},
              {"concurrency": 1, "status": "failed", "metrics": {"tg_req_tok_s": 300.0}},
              {"concurrency": 4, "status": "ok", "metrics": {"tg_req_tok_s": 20.0}}]
    assert state_of({"run_id": "r", "host": "h", "serving": {"points": points}})["serving_c1_tok_s"] == 32.0
    assert state_of({"run_id": "r", "host": "h"})["serving_c1_tok_s"] is None


@pytest.mark.parametrize(("entry", "why"), [
    ({"metric": "decode_tok_s", "model": "gpt-oss-120b", "workload": "T1"}, "model gpt-oss-120b is not in"),
    ({"metric": "decod_tok_s", "model": "llama", "workload": "T1"}, "not a metric sparkfleet records"),
    ({"metric": "tg_tok_s", "model": "llama", "workload": "T1"}, "a serving metric"),
    ({"metric": "decode_tok_s", "model": "llama", "workload": "T9"}, "no measured run of that workload"),
])
def test_a_reference_entry_that_matches_nothing_is_named(tmp_path: Path, entry: dict, why: str, capsys) -> None:
    root = build(tmp_path / "fleet", degraded=None, firmware_differs=False)
    published = tmp_path / "published.json"
    matching = {"metric": "decode_tok_s", "model": "llama", "workload": "T1", "value": 100, "source": "ours"}
    published.write_text(json.dumps([matching, {**entry, "value": 100, "source": "a paper"}]))
    result = check(root, reference=published)
    (unmatched,) = result.unmatched
    assert why in unmatched and "a paper" in unmatched
    assert any(f.kind == "reference-unmatched" for f in host_normal.findings(result))
    assert not host_normal.failing(result)  # the matching entry was compared: the question was answered
    # Only the unmatched entry: nothing was compared with the reference, and the exit status says so.
    published.write_text(json.dumps([{**entry, "value": 100, "source": "a paper"}]))
    assert main(["report", "--hosts", str(root), "--reference", str(published)]) != 0
    assert why in capsys.readouterr().out


def test_a_reference_campaign_sharing_nothing_is_named(tmp_path: Path) -> None:
    now = build(tmp_path / "now", degraded=None, firmware_differs=False)
    other = tmp_path / "other"
    write_run(other, "spark1", 1, 100.0)  # workload T1 of model llama: rename the model to share nothing
    for path in other.rglob("record.json"):
        data = json.loads(path.read_text())
        data["model"] = "mistral"
        path.write_text(json.dumps(data))
    result = check(now, reference=other)
    assert len(result.unmatched) == 1 and "shares no model" in result.unmatched[0]
    assert host_normal.failing(result)


def test_a_host_whose_probe_delivers_less_than_its_peers_is_named_with_it(tmp_path: Path) -> None:
    """Rule 5 against the fleet: the probe's TFLOP/s under 0.9 x the other hosts' median is a cause, whatever
    the clocks say; a power-limited clock below the others' is not one."""
    for host, tflops in (("spark1", 600.0), ("spark2", 610.0), ("spark3", 480.0)):
        for i in range(1, 4):
            ready = {**healthy_readiness(1400.0 if host == "spark2" else 2400.0), "tflops": tflops,
                     "power_limited": host == "spark2"}
            write_run(tmp_path, host, i, 100.0 * (1 + 0.001 * i), readiness=ready)
    hosts = check(tmp_path).hosts.set_index("host")
    assert "TFLOP/s" in hosts.loc["spark3", "causes"] and "TFLOP/s" not in hosts.loc["spark1", "causes"]
    assert "SM clock" not in hosts.loc["spark2", "causes"]  # power-limited: its clock is no cause
