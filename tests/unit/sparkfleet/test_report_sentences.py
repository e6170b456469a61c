"""Every report sentence true for the campaign shown (issue 32, item 7): what `report`, `fleet`, `compare` and the
accounting say about which host, cell, point or fact, on trees built to make an untrue sentence tempting.

Each case states the tree and what must (and must not) be said of it; the wording is the report's own and only its
subject (a host, a cell, a point, a fact) is asserted."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from serving_tree import build_serving_tree  # sibling helper: synthetic serving runs
from test_host_normal import build as build_host_fleet  # sibling test module: four healthy or degraded hosts
from test_host_normal import host_attestation

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import attestation
from sparkfleet.argtypes import percent
from sparkfleet.cli import main
from sparkfleet.load import load_runs
from sparkfleet.stats import MIN_N_BOOTSTRAP, MIN_N_INTERVAL

CAMPAIGN = "c"


def write(root: Path, host: str, environment: str, iteration: int, metrics: dict[str, float], *,
          workload: str = "w", status: str = "ok", telemetry: dict | None = None) -> None:
    """One flat (non-serving) run's record under ``root/<host>/runs/<run_id>``."""
    rec = {"schema_version": 1, "campaign": CAMPAIGN, "host": host, "model": "m", "environment": environment,
           "environment_kind": "native" if environment == "native" else "container", "workload": workload,
           "iteration": iteration, "order_index": iteration, "status": status, "exit_code": 0 if status == "ok" else 1,
           "started_utc": f"2026-01-01T00:{iteration:02d}:00Z", "metrics": dict(metrics),
           "metric_sources": {"peak_memory_gib": "log"} if "peak_memory_gib" in metrics else {}}
    if status != "ok":
        rec["reason"] = "engine crashed"
    if telemetry is not None:
        rec["telemetry"] = telemetry
    rec["run_id"] = contract.run_id(CAMPAIGN, host, "m", environment, workload, iteration)
    contract.write_json_atomic(root / host / "runs" / rec["run_id"] / "record.json", rec)


def summary_of(root: Path, *extra: str) -> str:
    assert main(["report", str(root), "--out", str(root / "report"), *extra]) == 0
    return (root / "report" / "summary.md").read_text()


def section(text: str, title: str) -> str:
    """The text of one ``## title`` section of summary.md."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def metrics(i: int) -> dict[str, float]:
    return {"output_tok_s": 100.0 + i, "peak_memory_gib": 70.0 + i / 10}


def serving_without_flat_metrics(root: Path) -> Path:
    """Native and container serving runs, 3 iterations each, whose records carry no per-run metric (their figures
    are the points')."""
    build_serving_tree(root, iterations=3)
    for path in root.rglob("record.json"):
        data = json.loads(path.read_text())
        data.update(metrics={}, metric_sources={})
        data["serving"]["kv"] = {}
        path.write_text(json.dumps(data))
    return root


def native_here_container_there(root: Path) -> Path:
    for i in range(1, 4):
        write(root, "h1", "native", i, metrics(i))
        write(root, "h2", "container", i, metrics(i))
    return root


def native_failed(root: Path) -> Path:
    for i in range(1, 4):
        write(root, "h1", "native", i, {}, status="failed")
        write(root, "h1", "container", i, metrics(i))
    return root


def native_and_container_on_other_workloads(root: Path) -> Path:
    for i in range(1, 4):
        write(root, "h1", "native", i, metrics(i), workload="w1")
        write(root, "h1", "container", i, metrics(i), workload="w2")
    return root


def no_shared_metric(root: Path) -> Path:
    for i in range(1, 4):
        write(root, "h1", "native", i, {"output_tok_s": 100.0 + i})
        write(root, "h1", "container", i, {"peak_memory_gib": 70.0 + i})
    return root


# --- a: "No cell has both a native and another environment" -------------------------------------------------

@pytest.mark.parametrize(("build", "said"), [
    (serving_without_flat_metrics, ["Serving"]),
    (native_here_container_there, ["h1", "h2"]),
    (native_failed, ["native", "failed"]),
    (native_and_container_on_other_workloads, ["w1", "w2"]),
    (no_shared_metric, ["metric"]),
], ids=["serving", "other-hosts", "native-failed", "other-workloads", "no-shared-metric"])
def test_a_campaign_with_native_and_container_never_says_no_cell_has_both(tmp_path: Path, build, said) -> None:
    text = section(summary_of(build(tmp_path / CAMPAIGN)), "Environments against native")
    assert "No cell has both a native and another environment" not in text
    for word in said:
        assert word in text, (word, text)


def test_a_campaign_without_native_says_so(tmp_path: Path) -> None:
    root = tmp_path / CAMPAIGN
    for i in range(1, 4):
        write(root, "h1", "container", i, metrics(i))
    text = section(summary_of(root), "Environments against native")
    assert "native" in text and "container" in text


# --- b: "every cell has fewer than 3 runs" --------------------------------------------------------------------

def three_runs_each_lacking_a_metric(root: Path) -> Path:
    """Every cell has 3 ok runs; each run's record lacks one of the metrics, so no metric has 3 values."""
    for env in ("native", "container"):
        write(root, "h1", env, 1, {"output_tok_s": 101.0})
        write(root, "h1", env, 2, {"peak_memory_gib": 70.0})
        write(root, "h1", env, 3, {"output_tok_s": 103.0, "peak_memory_gib": 70.4})
    return root


@pytest.mark.parametrize("build", [three_runs_each_lacking_a_metric, serving_without_flat_metrics],
                         ids=["metric-missing-in-a-run", "serving-only"])
def test_cells_of_three_runs_are_never_said_to_have_fewer_than_three(tmp_path: Path, build) -> None:
    text = section(summary_of(build(tmp_path / CAMPAIGN)), "Per-cell statistics")
    assert f"fewer than {MIN_N_INTERVAL} runs" not in text
    assert f"fewer than {MIN_N_BOOTSTRAP} runs" not in text or "every cell has" in text


def test_cells_with_two_runs_are_said_to_have_fewer_than_three(tmp_path: Path) -> None:
    root = tmp_path / CAMPAIGN
    for i in (1, 2):
        write(root, "h1", "native", i, metrics(i))
    text = section(summary_of(root), "Per-cell statistics")
    assert f"every cell has fewer than {MIN_N_INTERVAL} runs" in text


# --- c: `fleet` on one host -----------------------------------------------------------------------------------

TELEMETRY = {"sm_clock_mhz_mean": 2400.0, "gpu_temp_c_max": 60.0, "gpu_power_w_mean": 40.0,
             "gpu_util_pct_mean": 95.0}


def fleet_text(root: Path, *extra: str) -> tuple[int, str]:
    status = main(["fleet", str(root), *extra])
    return status, (root / "report" / "fleet.md").read_text()


def test_fleet_on_one_host_compares_nothing_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / CAMPAIGN
    for i in range(1, 4):
        write(root, "solo", "native", i, metrics(i), telemetry=TELEMETRY)
    status, text = fleet_text(root)
    assert status == 0
    for vacuous in ("agree across hosts", "same on every host", "No host is out"):
        assert vacuous not in text
    assert "solo" in text.split("## What differed")[0] and "1 hosts" not in text


def test_fleet_names_the_hosts_whose_state_was_compared(tmp_path: Path) -> None:
    """Two hosts, telemetry recorded on one: measured state is not said to agree across hosts."""
    root = tmp_path / CAMPAIGN
    for i in range(1, 4):
        write(root, "h1", "native", i, metrics(i), telemetry=TELEMETRY)
        write(root, "h2", "native", i, metrics(i))
    _, text = fleet_text(root)
    assert "agree across hosts" not in text


# --- d: one --tolerance unit: percent, for report and fleet ---------------------------------------------------

@pytest.mark.parametrize(("given", "value"), [("5", 5.0), ("5%", 5.0), ("2.5", 2.5), (" 7.5 % ", 7.5), ("0.5", 0.5)])
def test_a_tolerance_is_a_percent(given: str, value: float) -> None:
    assert percent(given) == value


@pytest.mark.parametrize("given", ["0", "-1", "100", "150", "100%", "nan", "inf", "five", "%", ""])
def test_a_tolerance_outside_0_to_100_percent_is_refused(given: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="percent"):
        percent(given)


@pytest.mark.parametrize("command", ["report", "fleet"])
@pytest.mark.parametrize("given", ["0", "100", "0%", "-5"])
def test_both_commands_refuse_the_same_tolerances(command: str, given: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "RESULTS", f"--tolerance={given}"])
    assert exc.value.code == 2 and "--tolerance" in capsys.readouterr().err


def test_report_and_fleet_read_one_tolerance_the_same_way(tmp_path: Path, capsys) -> None:
    root = build_host_fleet(tmp_path / "fleet", degraded=None, firmware_differs=False)
    assert main(["fleet", str(root), "--tolerance", "3", "--json"]) == 0
    fleet = json.loads(capsys.readouterr().out)
    assert main(["report", str(root), "--tolerance", "3%", "--json", "--out", str(tmp_path / "out")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert fleet["host_verdicts"]["tolerance"] == report["options"]["tolerance"] == report["hosts"]["tolerance"]
    assert report["options"]["tolerance"] == pytest.approx(0.03)
    main(["report", "--hosts", str(root), "--tolerance", "3"])
    assert "±3%" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["report", "fleet"])
def test_the_help_says_percent(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    tolerance = help_text[help_text.rindex("--tolerance"):]  # its help, not the usage line
    tolerance = tolerance[:tolerance.index(" --", 2)] if " --" in tolerance[2:] else tolerance
    assert "percent" in tolerance and "fraction" not in tolerance


# --- e: a fact a host could not read is never a difference ----------------------------------------------------

FIRMWARE = [{"name": "UEFI Device Firmware", "version": "1.2.3", "vendor": "NVIDIA", "plugin": "uefi_capsule",
             "guids": []}]


def identical_hosts(root: Path, unread: dict) -> Path:
    """Four healthy hosts with one attestation (fwupd answered on each), then spark2's given ``unread``."""
    build_host_fleet(root, degraded=None, firmware_differs=False)
    for host in ("spark1", "spark2", "spark3", "spark4"):
        att = host_attestation() | {"firmware": FIRMWARE, "firmware_source": "fwupd", "missing": []}
        if host == "spark2":
            att.update(unread)
        (root / host / "attestation.json").write_text(json.dumps(att))
    return root


@pytest.mark.parametrize(("unread", "word"), [
    ({"firmware": [], "firmware_source": "dmi", "missing": ["fwupd"]}, "firmware"),
    ({"driver_version": None}, "driver"),
    ({"driver_version": "N/A"}, "driver"),
    ({"bios_version": ""}, "firmware"),
    ({"gpus": [{"product_name": "NVIDIA GB10", "vbios_version": "[Unknown Error]"}]}, "VBIOS"),
    ({"gpus": [{"product_name": "NVIDIA GB10", "vbios_version": "ERROR: nvidia-smi failed"}]}, "VBIOS"),
], ids=["fwupd-missing", "driver-null", "driver-na", "bios-empty", "vbios-unknown-error", "vbios-error"])
def test_a_fact_not_read_is_not_a_difference(tmp_path: Path, capsys, unread: dict, word: str) -> None:
    root = identical_hosts(tmp_path / "fleet", unread)
    status = main(["fleet", str(root), "--json"])
    state = json.loads(capsys.readouterr().out)
    verdicts = state["host_verdicts"]
    assert status == 0 and state["refused"] is False, verdicts["blocking"]
    assert verdicts["blocking"] == {} and verdicts["differences"] == {}
    assert all("differs" not in h["causes"] for h in verdicts["hosts"]), verdicts["hosts"]
    text = (root / "report" / "fleet.md").read_text()
    assert "REFUSED" not in text
    not_read = [line for line in text.splitlines() if "not read" in line]
    assert not_read and all("spark2" in line for line in not_read) and word.lower() in " ".join(not_read).lower()


@pytest.mark.parametrize(("value", "unread"), [
    (None, True), ("", True), ("  ", True), ("N/A", True), ("[N/A]", True), ("[Unknown Error]", True),
    ("Unknown", True), ("ERROR: fwupdmgr: command not found", True), ([], True), (float("nan"), True),
    ("580.95.05", False), ("98.10", False), ("0x03000006", False), (0, False), ('["a", "b"]', False),
])
def test_what_counts_as_not_read(value, unread: bool) -> None:
    assert attestation.is_unread(value) is unread


def test_differences_and_unread_fields_are_apart() -> None:
    base = host_attestation() | {"firmware": FIRMWARE}
    fleet = {"a": base, "b": base | {"firmware": [], "driver_version": "[N/A]"},
             "c": base | {"kernel": "6.11.0-1017-nvidia"}}
    assert attestation.differences(fleet) == {"kernel": {"a": "6.11.0-1016-nvidia", "b": "6.11.0-1016-nvidia",
                                                         "c": "6.11.0-1017-nvidia"}}
    assert attestation.unread(fleet) == {"driver_version": ["b"], "firmware.UEFI Device Firmware": ["b"]}
    assert attestation.blocking_differences(attestation.differences(fleet)) == {}


def test_a_real_firmware_difference_still_blocks(tmp_path: Path, capsys) -> None:
    root = identical_hosts(tmp_path / "fleet", {"firmware": [FIRMWARE[0] | {"version": "1.2.4"}]})
    assert main(["fleet", str(root), "--json"]) == 1
    state = json.loads(capsys.readouterr().out)
    assert state["refused"] is True
    assert state["host_verdicts"]["blocking"]["firmware.UEFI Device Firmware"]["spark2"] == "1.2.4"


def test_the_report_names_the_fact_not_read(tmp_path: Path) -> None:
    root = identical_hosts(tmp_path / "fleet", {"firmware": [], "firmware_source": "dmi", "missing": ["fwupd"]})
    text = summary_of(root)
    assert "REFUSED" not in text
    lines = [line for line in text.splitlines() if "not read" in line]
    assert lines and all("spark2" in line for line in lines) and "firmware" in " ".join(lines)


# --- f: a serving point or figure missing from a record is counted and named ---------------------------------

def serving(root: Path, edit) -> Path:
    """3 iterations, native and container, of two engines; ``edit(run_data)`` applied to one run's record."""
    build_serving_tree(root, iterations=3)
    path = sorted(root.rglob("record.json"))[0]
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return root


def drop_point(name: str):
    def edit(data: dict) -> None:
        data["serving"]["points"] = [p for p in data["serving"]["points"] if p["point"] != name]
    return edit


def figure(name: str, metric: str, value):
    def edit(data: dict) -> None:
        point = next(p for p in data["serving"]["points"] if p["point"] == name)
        if value is KeyError:
            del point["metrics"][metric]
        else:
            point["metrics"][metric] = value
    return edit


POINT = "d4096.c4.pp512.tg64"


@pytest.mark.parametrize(("edit", "said"), [
    (drop_point(POINT), [POINT, "missing"]),
    (figure(POINT, "tg_req_tok_s", None), [POINT, "generation throughput (per user)"]),
    (figure(POINT, "tg_req_tok_s", float("nan")), [POINT, "generation throughput (per user)"]),
    (figure(POINT, "pp_req_tok_s", KeyError), [POINT, "prompt throughput (per user)"]),
], ids=["point-missing", "per-user-null", "per-user-nan", "per-user-absent"])
def test_a_missing_serving_point_or_figure_is_named(tmp_path: Path, edit, said) -> None:
    root = serving(tmp_path / "serve", edit)
    run_id = json.loads(sorted(root.rglob("record.json"))[0].read_text())["run_id"]
    acc = load_runs(root).accounting
    summary = acc.summary()
    assert "none missing" not in summary
    named = [str(m) for m in acc.missing_points]
    assert len(named) == 1 and run_id in named[0] and all(word in named[0] for word in said), named
    assert acc.to_dict()["missing_points"][0]["run_id"] == run_id
    text = summary_of(root)
    warned = [line for line in text.splitlines() if run_id in line and POINT in line]
    assert warned, "the report's warnings name the run and the point"


def test_a_point_the_profile_plans_but_no_run_has_is_named(tmp_path: Path) -> None:
    """The workload's profile (workload_params.profile) plans depth 8192 too: every run lacks its points."""
    root = build_serving_tree(tmp_path / "serve", iterations=3, engines=("vllm",), environments=("native",))
    for path in root.rglob("record.json"):
        data = json.loads(path.read_text())
        data["workload_params"]["profile"] = {"depth": [0, 4096, 8192], "concurrency": [1, 4], "pp": [512],
                                              "tg": [64]}
        path.write_text(json.dumps(data))
    acc = load_runs(root).accounting
    assert len(acc.missing_points) == 3 * 2  # 3 runs x (d8192 at c1 and c4)
    assert all("d8192" in str(m) for m in acc.missing_points)


def test_complete_serving_runs_miss_nothing(tmp_path: Path) -> None:
    acc = load_runs(build_serving_tree(tmp_path / "serve", iterations=3)).accounting
    assert acc.missing_points == [] and "none missing" in acc.summary()


# --- g: other sentences ---------------------------------------------------------------------------------------

def test_compare_counts_the_comparisons_with_too_few_runs(tmp_path: Path, capsys) -> None:
    base, cur = tmp_path / "base", tmp_path / "cur"
    for i in range(1, MIN_N_INTERVAL):  # one run short of a t-interval on each side
        write(base, "h1", "native", i, metrics(i))
        write(cur, "h1", "native", i, metrics(i))
    assert main(["compare", str(base), str(cur)]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "undetermined" in line)
    assert f"2 comparisons have fewer than {MIN_N_INTERVAL} runs on a side" in line, out


def test_report_with_a_baseline_never_says_no_baseline(tmp_path: Path, capsys) -> None:
    base, cur = tmp_path / "base" / CAMPAIGN, tmp_path / "cur" / CAMPAIGN
    for i in range(1, 4):
        write(base, "h1", "native", i, {"peak_memory_gib": 70.0 + i})
        write(cur, "h1", "native", i, {"output_tok_s": 100.0 + i})
    text = summary_of(cur, "--baseline", str(base))
    assert "no --baseline" not in text and "baseline" in section(text, "Verdicts")
