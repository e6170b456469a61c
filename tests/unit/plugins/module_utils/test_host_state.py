"""host_state (issue 24): the readiness probe's wiring with a fake sensor and a fake load script, the energy
integral on telemetry.csv files with known power steps, counters as deltas through the nvidia-smi stand-in, and
the applied controls read back from the gpu_state role's files (gpu_control)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _ansible_modules import REPO, STANDINS, host_util

host_state = host_util("host_state")
gpu_control = host_util("gpu_control")
gpu = host_util("gpu")
FIXTURES = REPO / "tests" / "fixtures" / "attestation"
HEADER = "t_s,gpu,gpu_temp_c,gpu_power_w,sm_clock_mhz,gpu_util_pct,throttle_reasons,mem_used_gib,cgroup_mem_gib\n"


class FakeSensor(gpu.GpuSensor):
    """Reports a fixed SM clock and power of a GB10 (a stand-in for NVML); counts its reads."""

    kind = "fake"

    def __init__(self, sm: float | None, power: float | None = 90.0, name: str | None = "NVIDIA GB10") -> None:
        self.sm, self.power, self.reads, self.name = sm, power, 0, name

    def read(self, indices=None):
        self.reads += 1
        return [gpu.GpuReading(index=0, sm_clock_mhz=self.sm, power_w=self.power, name=self.name)]


def load_script(tmp_path: Path, rc: int = 0, started: bool = True, error: str | None = None) -> str:
    """A load script that behaves as gpu_probe.py does, without a GPU: says it started, sleeps, prints JSON."""
    body = ["import json, sys, time"]
    if started:
        body.append(f"print({host_state.LOAD_STARTED!r}, flush=True)")
    body += ["time.sleep(float(sys.argv[sys.argv.index('--seconds') + 1]))",
             f"print(json.dumps({{'mode': 'load', 'backend': None if {rc} else 'fake', 'error': {error!r}}}))",
             f"sys.exit({rc})"]
    path = tmp_path / f"probe_rc{rc}_{'started' if started else 'silent'}.py"
    path.write_text("\n".join(body) + "\n")
    return str(path)


SETTINGS = {"policy": "mark", "min_fraction": 0.9, "expected_clock_mhz": 2400.0, "probe_s": 0.6,
            "degraded_bands": [[690, 890]]}


def probe(tmp_path, sensor, settings=None, controls=None, **kw):
    if "script" not in kw:
        kw["script"] = load_script(tmp_path)
    return host_state.readiness_probe({**SETTINGS, **(settings or {})}, controls, True, python=sys.executable,
                                      sensor=sensor, sample_interval_s=0.05, **kw)


# --------------------------------------------------------------------------- the probe


def test_a_healthy_host_runs_with_its_clock_and_power_under_load(tmp_path):
    sensor = FakeSensor(2405.0, 92.0)
    section = probe(tmp_path, sensor)
    assert section["state"] == "healthy" and section["reasons"] == []
    assert section["action"]["action"] == "run" and section["action"]["warn"] is False
    assert section["sm_clock_mhz"] == 2405.0 and section["power_w"] == 92.0
    assert section["expected_clock_mhz"] == 2400.0 and section["expected_source"] == "campaign"
    assert section["policy"] == "mark" and section["error"] is None
    assert section["samples"] >= 1 and sensor.reads == section["samples"]
    assert section["load"]["backend"] == "fake"
    assert section["duration_s"] >= 0.6


class MarkerSensor(FakeSensor):
    """The load's clock while the load script's marker file exists, the idle clock otherwise."""

    def __init__(self, marker: Path) -> None:
        super().__init__(None)
        self.marker = marker

    def read(self, indices=None):
        self.sm = 2405.0 if self.marker.exists() else 208.0
        return super().read(indices)


def test_readings_after_the_load_ended_are_left_out_however_long_the_teardown(tmp_path):
    # gpu_probe.py's order: started, the load, "ended", then the library and the process tear down at idle
    # clocks (a CUDA context takes a while to go); the teardown here is twice as long as the load
    marker = tmp_path / "loaded"
    script = tmp_path / "probe_with_teardown.py"
    script.write_text("\n".join([
        "import json, pathlib, sys, time",
        f"marker = pathlib.Path({str(marker)!r})",
        "marker.touch()",
        f"print({host_state.LOAD_STARTED!r}, flush=True)",
        "time.sleep(float(sys.argv[sys.argv.index('--seconds') + 1]))",
        f"print({host_state.LOAD_ENDED!r}, flush=True)",
        "marker.unlink()",
        "time.sleep(1.2)",
        "print(json.dumps({'mode': 'load', 'backend': 'fake', 'error': None}))",
    ]) + "\n")
    sensor = MarkerSensor(marker)
    section = probe(tmp_path, sensor, script=str(script))
    assert section["state"] == "healthy" and section["sm_clock_mhz"] == 2405.0, section
    assert sensor.reads >= section["samples"] >= 1


def test_a_clock_in_the_degraded_band_is_marked_suspect_and_refused_under_refuse(tmp_path):
    marked = probe(tmp_path, FakeSensor(850.0))
    assert marked["state"] == "suspect"
    assert {r["cause"] for r in marked["reasons"]} == {"degraded_band"}
    assert "below_fraction" in {n["cause"] for n in marked["notes"]}  # the clock ratio: a note, never a fault
    assert marked["action"] == {"action": "mark", "warn": True, "state": "suspect", "reasons": marked["reasons"]}
    refused = probe(tmp_path, FakeSensor(850.0), settings={"policy": "refuse"})
    assert refused["action"]["action"] == "refuse" and refused["policy"] == "refuse"


def test_a_lost_cap_is_named_from_the_lock_the_gpu_state_role_recorded(tmp_path):
    controls = {"locked_clocks": {"0": {"min": 2000, "max": 2000}}}
    section = probe(tmp_path, FakeSensor(2405.0), controls=controls)
    assert section["state"] == "suspect" and section["applied_lock_mhz"] == 2000.0
    assert [r["cause"] for r in section["reasons"]] == ["lost_cap"]
    held = probe(tmp_path, FakeSensor(2000.0), controls=controls)  # 2000 of min(2400, lock 2000): healthy
    assert held["state"] == "healthy" and held["expected_clock_mhz"] == 2000.0


def test_without_an_expected_clock_the_max_clock_is_the_yardstick_at_its_own_fraction(tmp_path):
    # 2405 of a 3003 MHz maximum is 0.80: healthy against 0.75 (a GB10 under load), suspect against 0.9
    section = probe(tmp_path, FakeSensor(2405.0), settings={"expected_clock_mhz": None}, max_clock_mhz=3003.0)
    assert section["state"] == "healthy" and section["expected_source"] == "max_clock"
    assert section["min_fraction"] == 0.75 and section["fraction"] == pytest.approx(2405 / 3003, abs=1e-4)


def test_no_gpu_library_is_unknown_with_the_scripts_reason_and_marked(tmp_path):
    script = load_script(tmp_path, rc=3, started=False, error="no GPU array library: torch: No module named 'torch'")
    sensor = FakeSensor(208.0)
    section = probe(tmp_path, sensor, script=script)
    assert section["state"] == "unknown" and section["sm_clock_mhz"] is None
    assert section["reasons"][0]["cause"] == "no_load" and "No module named 'torch'" in section["reasons"][0]["message"]
    assert section["action"]["action"] == "mark" and sensor.reads == 0  # idle clocks are never judged


def test_the_real_probe_script_without_torch_or_cupy_is_the_documented_fallback(tmp_path):
    if not _no_gpu_library():
        pytest.skip("torch or cupy importable here")
    script = REPO / "roles" / "matrix" / "files" / "gpu_probe.py"
    section = probe(tmp_path, FakeSensor(2405.0), script=str(script))
    assert section["state"] == "unknown" and section["reasons"][0]["cause"] == "no_load"
    assert section["load"]["backend"] is None and section["error"] is None


def _no_gpu_library() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is None and importlib.util.find_spec("cupy") is None


def test_no_gpu_means_nothing_to_probe_and_nothing_to_mark(tmp_path):
    section = host_state.readiness_probe(SETTINGS, None, False, script=load_script(tmp_path))
    assert section["state"] == "unknown" and section["reasons"][0]["cause"] == "no_gpu"
    assert section["action"]["action"] == "run" and section["action"]["warn"] is False


def test_bad_settings_and_a_missing_script_are_errors_not_exceptions(tmp_path):
    bad = host_state.readiness_probe({"policy": "ignore"}, None, True, script=load_script(tmp_path))
    assert bad["state"] == "unknown" and "readiness.policy" in bad["error"]
    missing = host_state.readiness_probe(SETTINGS, None, True, script=str(tmp_path / "nope.py"),
                                         sensor=FakeSensor(2405.0))
    assert missing["state"] == "unknown" and "not found" in missing["error"]


def test_the_section_has_the_records_keys_and_types():
    record = host_util("record")
    section = host_state.readiness_probe(SETTINGS, None, False)
    kinds = record.SECTION_KEYS["readiness"]
    assert set(kinds) <= set(section)
    assert record._section_problems("readiness", tuple(section), tuple(map(type, section.values()))) == ()


# --------------------------------------------------------------------------- energy


def write_csv(path: Path, rows: list[tuple]) -> str:
    lines = [HEADER] + [f"{t},{g},40,{'' if p is None else p},2400,97,none,10,\n" for t, g, p in rows]
    path.write_text("".join(lines))
    return str(path)


def test_constant_100_w_for_10_s_is_1000_j(tmp_path):
    csv_path = write_csv(tmp_path / "telemetry.csv", [(t, 0, 100.0) for t in range(11)])  # t = 0..10 s
    spent = host_state.energy(csv_path, output_tokens=500, scope="GPU board")
    assert spent["energy_j"] == pytest.approx(1000.0)
    assert spent["j_per_output_token"] == pytest.approx(2.0)  # 1000 J / 500 tokens
    assert spent["covered_s"] == pytest.approx(10.0) and spent["window_s"] == [0.0, 10.0]
    assert spent["scope"] == "GPU board" and spent["error"] is None


def test_a_step_from_50_to_150_w_is_integrated_as_trapezoids(tmp_path):
    # 50 W for 0..4 s, a step to 150 W between 4 and 5 s, 150 W for 5..9 s:
    # 4 s x 50 W + 1 s x (50 + 150) / 2 + 4 s x 150 W = 200 + 100 + 600 = 900 J
    rows = [(t, 0, 50.0) for t in range(5)] + [(t, 0, 150.0) for t in range(5, 10)]
    spent = host_state.energy(write_csv(tmp_path / "t.csv", rows))
    assert spent["energy_j"] == pytest.approx(900.0)
    assert spent["j_per_output_token"] is None


def test_two_gpus_add_up_and_a_missing_reading_is_a_gap_not_zero_watts(tmp_path):
    # GPU 0: 100 W over 0..4 s = 400 J; GPU 1: 200 W at 0, 1, (missing at 2), 3, 4 s: 0..1 and 3..4 only = 400 J
    rows = [(t, 0, 100.0) for t in range(5)] + [(0, 1, 200.0), (1, 1, 200.0), (2, 1, None), (3, 1, 200.0),
                                                 (4, 1, 200.0)]
    spent = host_state.energy(write_csv(tmp_path / "t.csv", rows))
    assert spent["gpus"]["0"]["energy_j"] == pytest.approx(400.0)
    assert spent["gpus"]["1"]["energy_j"] == pytest.approx(400.0)
    assert spent["energy_j"] == pytest.approx(800.0) and spent["gap_s"] == pytest.approx(2.0)


def test_the_window_limits_the_samples_and_host_memory_rows_are_left_out(tmp_path):
    rows = [(t, 0, 100.0) for t in range(11)]
    path = tmp_path / "t.csv"
    write_csv(path, rows)
    with open(path, "a") as fh:
        fh.write("11,,,,,,,10,\n")  # a host-memory-only row (no GPU)
    spent = host_state.energy(str(path), window_s=(2.0, 6.0))
    assert spent["energy_j"] == pytest.approx(400.0) and spent["window_s"] == [2.0, 6.0]


def test_no_power_samples_is_an_error_with_no_figure(tmp_path):
    spent = host_state.energy(write_csv(tmp_path / "t.csv", [(0, 0, None), (1, 0, None)]))
    assert spent["energy_j"] is None and spent["error"]
    assert "No such file or directory" in host_state.energy(str(tmp_path / "absent.csv"))["error"]


def test_the_scope_says_gpu_rail_only_on_a_gb10():
    assert host_state.energy_scope(["NVIDIA GB10"]) == "GPU rail only"
    assert host_state.energy_scope(["NVIDIA H100 80GB HBM3"]) == "GPU board"
    assert host_state.energy_scope([]) is None


# --------------------------------------------------------------------------- controls


def write_role_files(tmp_path: Path, lock=None, requested=None, prior_power_limit=None) -> str:
    """The gpu_state role's saved file (its 'Save the prior state' task) and its module's lock record."""
    work = tmp_path / "work"
    (work / "state").mkdir(parents=True)
    lock_record = tmp_path / "run" / "gpu-state.json"
    lock_record.parent.mkdir()
    if lock is not None:
        lock_record.write_text(json.dumps({"locked_clocks": {"0": lock}}, indent=1, sort_keys=True))
    saved = {"host": "spark1", "state_file": str(lock_record),
             "saved": {"gpus": [{"index": 0, "name": "NVIDIA GB10", "persistence_mode": False,
                                 "power_limit": prior_power_limit, "locked_clocks": None}],
                       "cpu_governor": "ondemand", "cpu_governors": {}}}
    if requested is not None:
        saved["requested"] = requested
    (work / "state" / "gpu_state_saved.json").write_text(json.dumps(saved))
    return str(work / "results")


def test_the_controls_are_read_back_from_the_saved_file_and_the_lock_record(tmp_path):
    results_root = write_role_files(tmp_path, lock={"min": 2405, "max": 2405})
    controls = gpu_control.applied_controls(results_root)
    assert controls["applied"] is True and controls["error"] is None
    assert controls["locked_clocks"] == {"0": {"min": 2405, "max": 2405}}
    assert controls["prior"] == {"cpu_governor": "ondemand", "gpus": {"0": {"persistence_mode": False,
                                                                            "power_limit": None,
                                                                            "locked_clocks": None}}}
    assert gpu_control.applied_lock(controls) == (2405.0, 2405.0)


def test_no_saved_file_means_nothing_applied_and_a_rebooted_host_has_no_lock(tmp_path):
    assert gpu_control.applied_controls(str(tmp_path / "results"))["applied"] is False
    controls = gpu_control.applied_controls(write_role_files(tmp_path, lock=None))  # /run emptied by a reboot
    assert controls["applied"] is True and controls["locked_clocks"] == {} and controls["error"] is None
    assert gpu_control.applied_lock(controls) is None


def test_a_corrupt_saved_file_is_an_error_not_an_exception(tmp_path):
    results_root = write_role_files(tmp_path)
    Path(gpu_control.saved_state_file(results_root)).write_text("{not json")
    controls = gpu_control.applied_controls(results_root)
    assert controls["applied"] is False and "gpu_state_saved.json" in controls["error"]


# --------------------------------------------------------------------------- counters, through the stand-in


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(STANDINS / "nvidia-smi")
    for name in [n for n in os.environ if n.startswith("SPARKFLEET_FAKE")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_STATE", str(tmp_path / "gpu-state.json"))
    (tmp_path / "load").mkdir()
    marker = tmp_path / "load" / "marker"
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_LOAD", str(marker))
    return marker


def test_counters_over_a_degraded_run_grow_by_the_time_under_load(fake_smi, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_DEGRADED", "1")
    token = host_state.run_state_before(results_root=write_role_files(tmp_path, lock=None))
    assert token["gpu_names"] == ["NVIDIA GB10"] and token["errors"] == []
    fake_smi.touch()
    t0 = os.stat(fake_smi).st_mtime
    os.utime(fake_smi, (t0 - 2.0, t0 - 2.0))  # the load began 2 s ago
    section = host_state.run_state_after(token, None)
    deltas = section["counters"]["gpus"]["0000000F:01:00.0"]
    assert deltas["reset"] == [] and deltas["missing"] == []
    assert deltas["deltas"]["sw_power_capping"] >= 2_000_000  # us: at least the 2 s under load
    assert deltas["deltas"]["hw_thermal_slowdown"] == 0
    assert section["counters"]["unit"] == "us" and section["counters"]["reported"] is True
    assert section["controls_applied"]["applied"] is True
    assert section["controls_applied"]["readback"][0]["max_sm_clock_mhz"] == 3003.0
    assert section["energy"] is None and section["errors"] == []


def test_counters_as_deltas_between_the_two_real_h100_snapshots(tmp_path):
    token = {"counters": host_state._counters(host_util("attestation").parse_nvidia_smi_q(
        (FIXTURES / "nvidia-smi-q-d-performance-h100-before.txt").read_text())), "gpu_names": ["NVIDIA H100"]}
    after_text = (FIXTURES / "nvidia-smi-q-d-performance-h100-after.txt").read_text()

    def runner(argv):
        assert argv[1:] == ["-q", "-d", "PERFORMANCE"]
        return 0, after_text, ""

    csv_path = write_csv(tmp_path / "telemetry.csv", [(t, 0, 700.0) for t in range(26)])
    section = host_state.run_state_after(token, csv_path, 1000, nvidia_smi=sys.executable, runner=runner)
    deltas = section["counters"]["gpus"]["00000000:00:06.0"]["deltas"]
    assert deltas["sw_power_capping"] == 47151374 - 21051280  # the fixtures' two readings, README
    assert section["energy"]["energy_j"] == pytest.approx(17500.0)  # 700 W x 25 s
    assert section["energy"]["j_per_output_token"] == pytest.approx(17.5)
    assert section["energy"]["scope"] == "GPU board"


def test_memory_at_start_reads_meminfo_and_buddyinfo(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemFree: 400 kB\nMemAvailable: 600 kB\nCached: 150 kB\n")
    # 4 KiB pages: order 9 = 2 MiB; 3 blocks of order 9 and 1 of order 10 (= 2 x 2 MiB): 5 free 2 MiB blocks
    (proc / "buddyinfo").write_text("Node 0, zone   Normal " + " ".join(["0"] * 9) + " 3 1\n")
    token = host_state.run_state_before(proc_root=str(proc), nvidia_smi="/nonexistent/nvidia-smi")
    memory = token["memory"]
    assert (memory["mem_free_kib"], memory["mem_available_kib"], memory["cached_kib"]) == (400, 600, 150)
    if os.sysconf("SC_PAGE_SIZE") == 4096:
        assert memory["free_huge_blocks"] == 5
    assert token["counters"] is None and any(e.startswith("counters:") for e in token["errors"])
    section = host_state.run_state_after(token, None, nvidia_smi="/nonexistent/nvidia-smi")
    assert section["counters"] is None and section["memory_start"] == memory


# --------------------------------------------------------------------------- a lost cap put back


def fake_gpu_state() -> dict:
    """The stand-in's own state (what the 'GPU' holds now), not sparkfleet's record of it."""
    return json.loads(Path(os.environ["SPARKFLEET_FAKE_GPU_STATE"]).read_text())["gpus"]["0"]


class Calls:
    """A probe or a runner that counts its calls (and returns what it is given)."""

    def __init__(self, result=None) -> None:
        self.result, self.args = result, []

    def __call__(self, *args):
        self.args.append(args)
        return self.result


def lost_cap_section(tmp_path) -> dict:
    """A first probe's section naming a lost cap: the clock under load (2405) above a 2000 MHz lock."""
    section = probe(tmp_path, FakeSensor(2405.0), controls={"locked_clocks": {"0": {"min": 2000, "max": 2000}}})
    assert [r["cause"] for r in section["reasons"]] == ["lost_cap"]
    return section


def test_a_lost_cap_is_relocked_to_the_recorded_range_and_the_second_probe_counts(fake_smi, tmp_path):
    fake_smi.touch()  # under load from here on: the stand-in reports its load clock, clamped by any lock
    controls = gpu_control.applied_controls(write_role_files(tmp_path, lock={"min": 1800, "max": 2000}))

    def again():
        return probe(tmp_path, gpu.NvidiaSmiSensor(), controls=controls)

    first = again()  # the GPU lost the lock (a hang, a driver reset): its load clock, 2405 MHz
    assert first["state"] == "suspect" and "lost_cap" in {r["cause"] for r in first["reasons"]}
    assert first["sm_clock_mhz"] == 2405.0
    section = gpu_control.reapply_lost_controls(first, controls, again)
    assert fake_gpu_state()["locked_clocks"] == [1800, 2000]  # exactly the range sparkfleet recorded
    assert section["reapplied"]["rc"] == 0
    assert section["reapplied"]["controls"] == {"gpu": 0, "locked_clocks": {"min": 1800, "max": 2000},
                                                "power_limit": None}  # a GB10 has no power limit to put back
    assert section["state"] == "healthy" and section["sm_clock_mhz"] == 2000.0  # the re-probe, under the lock
    assert section["action"]["action"] == "run"
    assert section["before_reapply"]["state"] == "suspect" and section["before_reapply"]["sm_clock_mhz"] == 2405.0
    record = host_util("record")
    assert record._section_problems("readiness", tuple(section), tuple(map(type, section.values()))) == ()


def test_a_clock_below_the_lock_is_no_lost_cap_and_a_degraded_band_stays_suspect(fake_smi, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_DEGRADED", "1")  # 850 MHz under load whatever the lock allows
    fake_smi.touch()
    controls = gpu_control.applied_controls(write_role_files(tmp_path, lock={"min": 600, "max": 2000}))

    def again():
        return probe(tmp_path, gpu.NvidiaSmiSensor(), controls=controls)

    # below a lock is what a power cap or a fault does, never a lost lock (issue 32): nothing is re-applied; the
    # clock sits in the GB10's degraded band, above which sparkfleet locked it (max 2000): suspect
    section = gpu_control.reapply_lost_controls(again(), controls, again)
    assert section["reapplied"] is None and section["before_reapply"] is None
    assert section["state"] == "suspect" and section["sm_clock_mhz"] == 850.0
    assert [r["cause"] for r in section["reasons"]] == ["degraded_band"]
    assert section["gpu_class"] == "gb10" and section["active_reasons"] == ["sw_power_cap"]
    assert section["power_limited"] is False  # SW power cap dominates, but a GB10 has no power limit to reach


def test_a_power_limit_sparkfleet_set_is_put_back_before_the_lock(fake_smi, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_MODEL", "h100")  # 700 W limit, settable
    requested = {"gpus": None, "locked_clocks": {"min": 1500, "max": 1500}, "power_limit": 450.0}
    controls = gpu_control.applied_controls(write_role_files(tmp_path, lock={"min": 1500, "max": 1500},
                                                            requested=requested, prior_power_limit=700.0))
    reprobe = Calls({"state": "healthy", "reasons": []})
    section = gpu_control.reapply_lost_controls(lost_cap_section(tmp_path), controls, reprobe)
    assert fake_gpu_state()["power_limit"] == 450.0 and fake_gpu_state()["locked_clocks"] == [1500, 1500]
    assert [c.split()[3] for c in section["reapplied"]["commands"]] == ["-pl", "-lgc"]  # gpu_state's order
    assert len(reprobe.args) == 1 and section["state"] == "healthy"


@pytest.mark.parametrize("requested, prior, gpus_note", [
    ({"power_limit": None}, 700.0, "no power limit asked for"),
    ({"power_limit": 700.0}, 700.0, "asked for the limit the GPU already had: the module set nothing"),
    ({"power_limit": 450.0}, None, "no power limit on this GPU (a GB10): the module skipped it"),
    ({"power_limit": 450.0, "gpus": [1]}, 700.0, "asked for another GPU only"),
])
def test_a_power_limit_sparkfleet_did_not_set_is_left_alone(tmp_path, requested, prior, gpus_note):
    controls = gpu_control.applied_controls(write_role_files(tmp_path, lock={"min": 2000, "max": 2000},
                                                            requested=requested, prior_power_limit=prior))
    assert gpu_control.applied_power_limit(controls) is None, gpus_note
    assert gpu_control.controls_to_reapply(controls)["power_limit"] is None


def test_without_a_lock_sparkfleet_recorded_nothing_is_run_and_the_verdict_stays(tmp_path):
    section = lost_cap_section(tmp_path)
    runner, reprobe = Calls((0, "", "")), Calls({"state": "healthy", "reasons": []})
    rebooted = gpu_control.applied_controls(write_role_files(tmp_path, lock=None))  # /run emptied: no record
    not_ours = {"applied": False, "locked_clocks": {"0": {"min": 2000, "max": 2000}}}  # no saved file: not set by us
    for controls in (rebooted, not_ours, None):
        out = gpu_control.reapply_lost_controls(section, controls, reprobe, nvidia_smi=sys.executable, runner=runner)
        assert out == section
    assert runner.args == [] and reprobe.args == []


def test_a_healthy_or_otherwise_suspect_section_is_never_reapplied(tmp_path):
    controls = gpu_control.applied_controls(write_role_files(tmp_path, lock={"min": 2000, "max": 2000}))
    runner, reprobe = Calls((0, "", "")), Calls({"state": "healthy", "reasons": []})
    for sensor in (FakeSensor(2000.0), FakeSensor(2405.0)):  # held; above, but no lock given to the judge
        section = probe(tmp_path, sensor)
        assert gpu_control.reapply_lost_controls(section, controls, reprobe, nvidia_smi=sys.executable,
                                                runner=runner) == section
    degraded = probe(tmp_path, FakeSensor(850.0))
    assert gpu_control.reapply_lost_controls(degraded, controls, reprobe, nvidia_smi=sys.executable,
                                            runner=runner) == degraded
    assert runner.args == [] and reprobe.args == []


def test_a_failed_reapply_is_recorded_and_the_first_verdict_stands(tmp_path):
    controls = gpu_control.applied_controls(write_role_files(tmp_path, lock={"min": 2000, "max": 2000}))
    section = lost_cap_section(tmp_path)
    runner = Calls((4, "", "Insufficient Permissions"))
    reprobe = Calls({"state": "healthy", "reasons": []})
    out = gpu_control.reapply_lost_controls(section, controls, reprobe, nvidia_smi=sys.executable, runner=runner)
    assert [argv[0][-2:] for argv in runner.args] == [["-lgc", "2000,2000"]]
    assert reprobe.args == []  # not probed again
    assert out["reapplied"]["rc"] == 4 and out["reapplied"]["output"]
    assert out["state"] == "suspect" and out["reasons"] == section["reasons"] and out["before_reapply"] is None
    missing = gpu_control.reapply_lost_controls(section, controls, reprobe, nvidia_smi="/nonexistent/nvidia-smi")
    assert missing["reapplied"]["rc"] != 0 and missing["state"] == "suspect" and reprobe.args == []
