"""Preflight gates: the rules (sparkfleet_host/gates/, one file per gate) on made-up measurements, and the
preflight_check module run end to end against the nvidia-smi stand-in on PATH, a temp results dir and the build
machine's /proc."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module

gates = host_util("gates")
gate = host_util("gates.gate")
cpu_load, free_memory, free_disk, gpu_processes = (host_util(f"gates.{name}") for name in (
    "cpu_load", "free_memory", "free_disk", "gpu_processes"))
Command = gates.Command

LIMITS = {"max_gpu_temp_c": 60.0, "pstates": [], "max_load_per_cpu": 0.5, "min_free_memory_gib": 8.0,
          "min_free_disk_gib": 20.0, "max_gpu_processes": 0, "fail_on_unknown": False}
GIB_KIB = 1024 * 1024
NO_APPS = Command(0, "No running processes found\n")


def rows(*gpus: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"index": str(i), "temperature.gpu": temp, "pstate": state} for i, (temp, state) in enumerate(gpus)]


def measured(gpu_rows=None, gpu_error: str = "", apps: Command = NO_APPS, load1: float = 1.0, cpus: int = 16,
             mem_kib: int = 64 * GIB_KIB, disk_kib: int = 500 * GIB_KIB) -> dict[str, Any]:
    """What each gate's measure gives, by gate name."""
    gpus = (rows(("38", "P8")) if gpu_rows is None else gpu_rows, gpu_error)
    return {"gpu_temperature": gpus, "performance_state": gpus, "cpu_load": (load1, cpus), "free_memory": mem_kib,
            "free_disk": (disk_kib, "/var/lib/sparkfleet"), "gpu_processes": apps}


def evaluate(limits: dict[str, Any] | None = None, **measurements: Any):
    return gates.evaluate({**LIMITS, **(limits or {})}, measured(**measurements))


# --------------------------------------------------------------------------- the rules


def test_a_fit_host_passes_every_gate_with_the_record_the_role_wrote():
    g = evaluate(mem_kib=8 * GIB_KIB, load1=8.0)  # both exactly at their limit: pass
    assert g == {
        "gpu_temperature": {"value": 38.0, "limit": 60.0, "unit": "C", "pass": True, "error": ""},
        "performance_state": {"value": ["P8"], "limit": [], "pass": True},
        "cpu_load": {"value": 8.0, "limit": 8.0, "cpus": 16, "pass": True},
        "free_memory": {"value": 8.0, "limit": 8.0, "unit": "GiB", "pass": True},
        "free_disk": {"value": 500.0, "limit": 20.0, "unit": "GiB", "path": "/var/lib/sparkfleet", "pass": True},
        "gpu_processes": {"value": 0, "limit": 0, "processes": ["No running processes found"], "pass": True,
                          "error": ""},
    }
    assert list(g) == list(gates.GATES)
    assert gates.failed_gates(g, fail_on_unknown=True) == [] and gates.unknown_gates(g) == []


def test_failed_gates_are_named_with_value_unit_and_limit_in_the_roles_words():
    g = evaluate(gpu_rows=rows(("41", "P0"), ("85", "P0")), load1=8.01, mem_kib=GIB_KIB // 2,
                 disk_kib=19 * GIB_KIB, apps=Command(0, "1234, python3, 1024 MiB\n"))
    assert g["gpu_temperature"]["value"] == 85.0  # the hottest GPU
    names = gates.failed_gates(g, fail_on_unknown=False)
    assert names == ["gpu_temperature", "cpu_load", "free_memory", "free_disk", "gpu_processes"]
    assert gates.failure_message("spark2", g, names) == (
        "preflight gate(s) failed on spark2: gpu_temperature measured 85.0 C (limit 60.0 C); "
        "cpu_load measured 8.01 (limit 8.0); free_memory measured 0.5 GiB (limit 8.0 GiB); "
        "free_disk measured 19.0 GiB (limit 20.0 GiB); gpu_processes measured 1 (limit 0)")


@pytest.mark.parametrize(("temps", "verdict"), [(("59", "60"), True), (("60", "61"), False)])
def test_the_hottest_gpu_at_its_limit_passes(temps, verdict):
    g = evaluate(gpu_rows=rows(*((t, "P0") for t in temps)))
    assert g["gpu_temperature"]["value"] == float(temps[1]) and g["gpu_temperature"]["pass"] is verdict


def test_gates_that_cannot_be_measured_are_null_and_warned_or_failed():
    missing = Command.not_started(2)
    m = measured(gpu_rows=[], gpu_error=missing.error, apps=missing)
    g = gates.evaluate(LIMITS, m)
    assert g["gpu_temperature"] == {"value": None, "limit": 60.0, "unit": "C", "pass": None,
                                    "error": "Error executing command."}
    assert g["performance_state"] == {"value": [], "limit": [], "pass": None}
    assert g["gpu_processes"] == {"value": None, "limit": 0, "processes": [], "pass": None,
                                  "error": "Error executing command."}
    assert gates.unknown_gates(g) == ["gpu_temperature", "performance_state", "gpu_processes"]
    assert gates.failed_gates(g, fail_on_unknown=False) == []
    names = gates.failed_gates(g, fail_on_unknown=True)
    # As the role's Jinja printed it: an unmeasured value is empty.
    assert gates.failure_message("h", g, names) == (
        "preflight gate(s) failed on h: gpu_temperature measured  C (limit 60.0 C); "
        "performance_state measured [] (limit []); gpu_processes measured  (limit 0)")
    assert gates.unknown_warning("performance_state", g, m) == (
        "preflight gate performance_state could not be measured: Error executing command.")
    assert gates.unknown_warning("gpu_processes", g, m) == (
        "preflight gate gpu_processes could not be measured: Error executing command.")


def test_a_gpu_without_a_temperature_leaves_the_gate_unmeasured_with_the_output():
    g = evaluate(gpu_rows=rows(("[N/A]", "P0")), gpu_error="0, [N/A], P0")
    assert g["gpu_temperature"]["pass"] is None and g["gpu_temperature"]["error"] == "0, [N/A], P0"
    assert g["performance_state"] == {"value": ["P0"], "limit": [], "pass": True}
    g = evaluate(gpu_rows=rows(("[N/A]", "P0"), ("44", "P0")))
    assert g["gpu_temperature"]["value"] == 44.0 and g["gpu_temperature"]["pass"] is True


@pytest.mark.parametrize(("allowed", "verdict"), [
    ([], True),              # empty: any state, recorded only
    (["P0"], False),         # P2 is not allowed
    (["P0", "P2"], True),
    (["P8"], False),
])
def test_performance_states_are_an_allow_list(allowed, verdict):
    g = evaluate({"pstates": allowed}, gpu_rows=rows(("40", "P0"), ("41", "P2")))
    assert g["performance_state"] == {"value": ["P0", "P2"], "limit": allowed, "pass": verdict}


@pytest.mark.parametrize(("load1", "cpus", "per_cpu", "limit", "verdict"), [
    (7.9, 16, 0.5, 8.0, True),
    (8.01, 16, 0.5, 8.0, False),
    (8.01, 32, 0.5, 16.0, True),   # the same load on twice the CPUs
    (0.31, 3, 0.1, 0.30000000000000004, False),  # float arithmetic as the role's Jinja did it
])
def test_load_is_judged_per_online_cpu(load1, cpus, per_cpu, limit, verdict):
    g = evaluate({"max_load_per_cpu": per_cpu}, load1=load1, cpus=cpus)
    assert g["cpu_load"] == {"value": load1, "limit": limit, "cpus": cpus, "pass": verdict}


def test_sizes_are_gib_rounded_to_two_decimals():
    assert gate.gib(1234567) == round(1234567 / 1048576, 2) == 1.18
    g = evaluate(mem_kib=23_570_000, disk_kib=65_536_000)
    assert g["free_memory"]["value"] == 22.48 and g["free_disk"]["value"] == 62.5


def test_process_count_skips_blank_lines_and_the_no_process_line():
    apps = Command(0, "1234, /usr/bin/python3, 1024 MiB\n\n5678, ./trtllm, 2048 MiB\r\n")
    assert gpu_processes.process_count(apps) == 2
    assert gpu_processes.process_count(NO_APPS) == 0
    g = evaluate({"max_gpu_processes": 2}, apps=apps)
    assert g["gpu_processes"] == {"value": 2, "limit": 2, "pass": True, "error": "",
                                  "processes": ["1234, /usr/bin/python3, 1024 MiB", "", "5678, ./trtllm, 2048 MiB"]}


def test_a_failed_command_records_its_output_then_the_command_modules_msg():
    cmd = Command(9, "NVIDIA-SMI has failed.\n", "driver gone\n")
    assert not cmd.ok and cmd.error == "NVIDIA-SMI has failed.driver gonenon-zero return code"
    assert Command(0, "out\n").error == "out" and Command(0).error == ""


def test_the_gpu_gates_share_one_query_through_gpu_query_gpu():
    calls = []

    def run(argv):
        calls.append(list(argv))
        return Command(0, "0, 38, P8\n1, 40, P0\n") if "--query-gpu" in argv[1] else NO_APPS

    m = gates.measure("/", "nvidia-smi", run)
    assert calls == [["nvidia-smi", "--query-gpu=index,temperature.gpu,pstate", "--format=csv,noheader,nounits"],
                     ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]]
    found, error = m["gpu_temperature"]
    assert m["performance_state"] is m["gpu_temperature"]
    assert [(r["temperature.gpu"], r["pstate"]) for r in found] == [("38", "P8"), ("40", "P0")]
    assert error == "0, 38, P8\n1, 40, P0"  # the output, recorded only if no temperature can be read from it

    fields = ("index", "temperature.gpu", "pstate")
    assert gate.query_gpus(fields, "x", lambda argv: Command(6, "No devices were found\n")) == (
        [], "No devices were foundnon-zero return code")
    found, error = gate.query_gpus(fields, "x", lambda argv: Command(0, "0, 38\n"))
    assert found == [] and "2 columns for 3 fields" in error


def test_a_figure_linux_always_has_that_cannot_be_read_names_its_gate(tmp_path):
    with pytest.raises(gates.Unmeasurable) as caught:
        gates.measure(str(tmp_path / "missing"), "nvidia-smi", lambda argv: NO_APPS)
    assert caught.value.gate == "free_disk" and isinstance(caught.value.reason, FileNotFoundError)


def test_limits_are_checked_by_the_campaign_settings_rules():
    assert gates.limit_problems(LIMITS) == []
    assert gates.LIMIT_DEFAULTS == LIMITS  # the settings registry's defaults
    problems = gates.limit_problems({**LIMITS, "max_gpu_temp_c": 500.0, "min_free_disk_gib": -1.0,
                                     "max_load_per_cpu": math.nan})
    assert problems == ["max_gpu_temp_c must be at most 120 C, got 500", "max_load_per_cpu must be a finite number, "
                        "got nan", "min_free_disk_gib must not be negative, got -1"]


def test_record_text_is_to_nice_json():
    text = gates.record_text("spark1", evaluate())
    assert text.endswith("}\n") and '\n    "gates": {\n        "cpu_load": {\n' in text
    assert json.loads(text) == {"host": "spark1", "gates": evaluate()}
    assert '"error": "caf\\u00e9' in gates.record_text("h", evaluate(gpu_rows=[], gpu_error="café"))


def test_readers(tmp_path):
    (tmp_path / "loadavg").write_text("2.73 1.10 0.90 3/612 4242\n")
    (tmp_path / "meminfo").write_text("MemTotal:       131072000 kB\nMemFree: 1 kB\nMemAvailable:   23570000 kB\n")
    (tmp_path / "bad").write_text("MemTotal: 1 kB\n")
    assert cpu_load.load_1min(str(tmp_path / "loadavg")) == 2.73
    assert free_memory.mem_available_kib(str(tmp_path / "meminfo")) == 23570000
    with pytest.raises(ValueError, match="no MemAvailable"):
        free_memory.mem_available_kib(str(tmp_path / "bad"))
    assert cpu_load.online_cpus() == os.sysconf("SC_NPROCESSORS_ONLN")
    st = os.statvfs(tmp_path)
    assert free_disk.disk_available_kib(str(tmp_path)) == -(-st.f_bavail * st.f_frsize // 1024)


def test_free_disk_rounds_up_to_whole_kib_as_df_does(monkeypatch):
    class St:
        f_bavail, f_frsize = 3, 512

    monkeypatch.setattr(free_disk.os, "statvfs", lambda path: St)
    assert free_disk.disk_available_kib("/x") == 2


# --------------------------------------------------------------------------- the module


@pytest.fixture
def pc():
    return load_module("preflight_check")


class Host:
    """The stand-in nvidia-smi on PATH; limits this build machine meets whatever else runs on it."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp
        self.work = tmp / "work"
        self.work.mkdir()
        self.results = tmp / "work" / "results" / "sanity" / "spark1"
        self.bin = tmp / "bin"
        self.bin.mkdir()
        monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("SPARKFLEET_FAKE_GPU_STATE", str(tmp / "fake-gpu.json"))
        monkeypatch.setenv("SPARKFLEET_FAKE_GPU_MODEL", "gb10")
        for name in ("SPARKFLEET_FAKE_GPU_LOAD", "SPARKFLEET_FAKE_IDLE_TEMP", "SPARKFLEET_FAKE_GPU_COUNT"):
            monkeypatch.delenv(name, raising=False)

    def args(self, nvidia_smi: str = "nvidia-smi", work_dir: Path | None = None, **limits: Any) -> dict[str, Any]:
        """The module's arguments; ``limits`` go in its ``limits``."""
        return {"host": "spark1", "work_dir": str(work_dir or self.work), "results_dir": str(self.results),
                "nvidia_smi": nvidia_smi,
                "limits": {"max_load_per_cpu": 1000, "min_free_memory_gib": 0, "min_free_disk_gib": 0, **limits}}

    def record(self) -> dict[str, Any]:
        return json.loads((self.results / "preflight.json").read_text())

    def smi_with_apps(self, apps: str) -> str:
        """An nvidia-smi that logs its arguments, answers --query-gpu through the stand-in and lists ``apps``."""
        log = self.tmp / "smi.log"
        script = self.bin / "nvidia-smi-apps"
        script.write_text(f"""#!/bin/sh
echo "$*" >> {log}
case "$1" in
  --query-compute-apps=*) printf '{apps}' ;;
  *) exec {STANDINS / "nvidia-smi"} "$@" ;;
esac
""")
        script.chmod(0o755)
        return str(script)


@pytest.fixture
def host(tmp_path, monkeypatch) -> Host:
    return Host(tmp_path, monkeypatch)


def test_module_records_every_gate_and_warns_about_the_unmeasured(pc, host):
    res = run_module(pc, host.args())
    assert not res.get("failed"), res
    assert res["changed"] is True and res["path"] == str(host.results / "preflight.json")
    rec = host.record()
    assert rec == {"host": "spark1", "gates": res["gates"]}
    assert (host.results / "preflight.json").read_text() == gates.record_text("spark1", res["gates"])
    assert stat.S_IMODE((host.results / "preflight.json").stat().st_mode) == 0o644
    g = rec["gates"]
    assert g["gpu_temperature"] == {"value": 38.0, "limit": 60.0, "unit": "C", "pass": True, "error": ""}
    assert g["performance_state"] == {"value": ["P8"], "limit": [], "pass": True}
    assert g["cpu_load"]["cpus"] == os.sysconf("SC_NPROCESSORS_ONLN") and g["free_disk"]["path"] == str(host.work)
    for name in ("cpu_load", "free_memory", "free_disk"):
        assert g[name]["pass"] is True and isinstance(g[name]["value"], float)
    # The stand-in has no --query-compute-apps: unknown, warned, not failed.
    assert g["gpu_processes"]["pass"] is None and "Invalid combination" in g["gpu_processes"]["error"]
    assert res["unknown_gates"] == ["gpu_processes"] and res["failed_gates"] == []
    assert "preflight gate gpu_processes could not be measured: Invalid combination" in json.dumps(res["warnings"])


def test_module_fails_a_hot_gpu_naming_value_and_limit(pc, host, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_IDLE_TEMP", "85")
    res = run_module(pc, host.args(pstates=["P0"]))
    assert res["failed"] is True
    assert res["msg"] == ("preflight gate(s) failed on spark1: gpu_temperature measured 85.0 C (limit 60.0 C); "
                          "performance_state measured ['P8'] (limit ['P0'])")
    assert res["failed_gates"] == ["gpu_temperature", "performance_state"]
    assert host.record()["gates"]["gpu_temperature"]["pass"] is False  # recorded before failing


def test_module_calls_nvidia_smi_as_the_real_tool_is_called_and_counts_processes(pc, host):
    smi = host.smi_with_apps("1234, /usr/bin/python3, 1024 MiB\\n5678, ./trtllm, 2048 MiB\\n")
    res = run_module(pc, host.args(nvidia_smi=smi, max_gpu_processes=1))
    assert (host.tmp / "smi.log").read_text().splitlines() == [
        "--query-gpu=index,temperature.gpu,pstate --format=csv,noheader,nounits",
        "--query-compute-apps=pid,process_name,used_memory --format=csv,noheader",
    ]
    assert res["gates"]["gpu_processes"] == {"value": 2, "limit": 1, "pass": False, "error": "",
                                             "processes": ["1234, /usr/bin/python3, 1024 MiB",
                                                           "5678, ./trtllm, 2048 MiB"]}
    assert res["msg"] == "preflight gate(s) failed on spark1: gpu_processes measured 2 (limit 1)"
    assert "warnings" not in res or not res["warnings"]


def test_module_without_nvidia_smi_warns_or_fails_on_unknown(pc, host):
    res = run_module(pc, host.args(nvidia_smi=str(host.tmp / "no-such-smi")))
    assert not res.get("failed") and res["unknown_gates"] == ["gpu_temperature", "performance_state",
                                                              "gpu_processes"]
    assert json.dumps(res["warnings"]).count("could not be measured: Error executing command.") == 3
    res = run_module(pc, host.args(nvidia_smi=str(host.tmp / "no-such-smi"), fail_on_unknown=True))
    assert res["failed"] is True and not res.get("warnings")
    assert res["msg"] == ("preflight gate(s) failed on spark1: gpu_temperature measured  C (limit 60.0 C); "
                          "performance_state measured [] (limit []); gpu_processes measured  (limit 0)")


def test_module_in_check_mode_reads_judges_and_writes_nothing(pc, host, monkeypatch):
    res = run_module(pc, host.args(), check_mode=True)
    assert not res.get("failed") and res["changed"] is True and res["gates"]["gpu_temperature"]["value"] == 38.0
    assert not (host.work / "results").exists()
    monkeypatch.setenv("SPARKFLEET_FAKE_IDLE_TEMP", "85")
    res = run_module(pc, host.args(), check_mode=True)
    assert res["failed"] is True and "gpu_temperature measured 85.0 C" in res["msg"]
    assert not (host.work / "results").exists()


def test_module_leaves_an_unchanged_record_alone_and_diffs_a_changed_one(pc, host, monkeypatch):
    res = run_module(pc, {**host.args(), "_ansible_diff": True})
    assert res["diff"]["before"] == "" and res["diff"]["after"] == (host.results / "preflight.json").read_text()
    text = gates.record_text("spark1", res["gates"])
    monkeypatch.setattr(pc, "record_text", lambda h, g: text)  # as if nothing had moved since
    res = run_module(pc, {**host.args(), "_ansible_diff": True})
    assert res["changed"] is False and "diff" not in res


def test_module_refuses_limits_out_of_range_and_an_unreadable_work_dir(pc, host):
    res = run_module(pc, host.args(max_gpu_temp_c=500))
    assert res["failed"] is True and res["msg"] == "max_gpu_temp_c must be at most 120 C, got 500"
    res = run_module(pc, host.args(work_dir=host.tmp / "missing"))
    assert res["failed"] is True and res["msg"].startswith(
        f"preflight_check: cannot measure free_disk on spark1 (work_dir {host.tmp / 'missing'}): [Errno 2]")
    assert not (host.work / "results").exists()


def test_module_takes_limits_as_strings_as_extra_vars_give_them(pc, host):
    res = run_module(pc, host.args(max_gpu_temp_c="30", max_load_per_cpu="100", fail_on_unknown="false"))
    assert res["failed"] is True and res["gates"]["gpu_temperature"]["limit"] == 30.0
    assert res["msg"] == "preflight gate(s) failed on spark1: gpu_temperature measured 38.0 C (limit 30.0 C)"


def test_module_takes_the_plans_preflight_group_whole_and_refuses_what_no_gate_takes(pc, host):
    res = run_module(pc, host.args(max_gpu_temp=45, max_gpu_processes="x"))
    assert res["failed"] is True and res["problems"][0].startswith(
        "limits: argument 'max_gpu_processes' is of type str and we were unable to convert to int")
    assert res["problems"][1].startswith("limits: unknown key max_gpu_temp. Supported parameters include: ")
    assert not (host.work / "results").exists()
    res = run_module(pc, host.args(max_fail_percentage=100))  # the play's, carried by the same plan group
    assert not res.get("failed") and res["gates"]["cpu_load"]["limit"] == 1000 * os.sysconf("SC_NPROCESSORS_ONLN")
    res = run_module(pc, {k: v for k, v in host.args().items() if k != "limits"})  # every default
    assert res["gates"]["free_disk"]["limit"] == 20.0 and res["gates"]["cpu_load"]["limit"] == 0.5 * os.sysconf(
        "SC_NPROCESSORS_ONLN")


def test_write_text_if_changed_writes_only_a_change_atomically(tmp_path, monkeypatch):
    textfile = host_util("textfile")
    path = tmp_path / "a" / "b" / "record.json"
    assert textfile.write_text_if_changed(str(path), "one\n", check_mode=True) == (True, None)
    assert not (tmp_path / "a").exists()
    assert textfile.write_text_if_changed(str(path), "one\n") == (True, None)
    assert path.read_text() == "one\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert textfile.write_text_if_changed(str(path), "one\n") == (False, "one\n")
    assert textfile.write_text_if_changed(str(path), "two\n", check_mode=True) == (True, "one\n")
    assert path.read_text() == "one\n"

    def broken(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(textfile.os, "replace", broken)
    with pytest.raises(OSError, match="disk gone"):
        textfile.write_text_if_changed(str(path), "two\n")
    assert path.read_text() == "one\n" and sorted(p.name for p in path.parent.iterdir()) == ["record.json"]
