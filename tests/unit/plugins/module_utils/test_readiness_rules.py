"""The readiness verdict on the rules trusted tools use (issue 32, item 3): faults from the clock-event counters
and sustained HW slowdown, power-limited and healthy, class floors and the GB10's degraded band, a lock or a power
limit sparkfleet applied, delivered TFLOP/s against the class reference and the fleet's peers, "invalid" when the
load did not run. Real captures (tests/fixtures/attestation, the committed GPU example), synthetic readings as a
table, and whole probes through the nvidia-smi stand-in."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _ansible_modules import REPO, STANDINS, host_util

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning, settings

readiness = host_util("readiness")
host_state = host_util("host_state")
gpu_control = host_util("gpu_control")
attestation = host_util("attestation")
gpu = host_util("gpu")
FIXTURES = REPO / "tests" / "fixtures" / "attestation"
EXAMPLE = REPO / "examples" / "gpu" / "results" / "gpu" / "localhost"
H100 = "NVIDIA H100 80GB HBM3"
GB10 = "NVIDIA GB10"


def causes(verdict: dict) -> list[str]:
    return [r["cause"] for r in verdict["reasons"]]


def notes(verdict: dict) -> list[str]:
    return [n["cause"] for n in verdict["notes"]]


def loaded(n: int = 8, *reasons: str, sm: float = 1500.0, power: float = 690.0, util: float = 100.0) -> list[dict]:
    """``n`` samples under load with the same active reasons."""
    return [{"sm_clock_mhz": sm, "power_w": power, "utilization_pct": util, "reasons": list(reasons)}] * n


# --------------------------------------------------------------------------- real captures


def test_the_h100_under_load_capture_is_power_limited_and_healthy():
    # 1,320 MHz of 1,980 (67%), 698.53 W of 700 W, SW Power Cap active: a healthy, power-limited H100
    (g,) = attestation.parse_nvidia_smi_q(
        (FIXTURES / "nvidia-smi-q-d-performance-clock-power-h100-under-load.txt").read_text())["gpus"]
    # -d PERFORMANCE,CLOCK,POWER prints no product name: the full -q of the same machine and session does
    (full,) = attestation.parse_nvidia_smi_q((FIXTURES / "nvidia-smi-q-h100-580.159.04.txt").read_text())["gpus"]
    sample = {"sm_clock_mhz": g["sm_clock_mhz"], "power_w": g["power_draw_w"], "reasons": g["clock_reasons_active"]}
    verdict = readiness.judge(g["sm_clock_mhz"], g["power_draw_w"], gpu_name=full["product_name"],
                              expected_sm_clock_mhz=g["max_sm_clock_mhz"], expected_source="max_clock",
                              power_limit_w=g["power_limit_w"], samples=[sample])
    assert (g["sm_clock_mhz"], g["power_draw_w"], g["clock_reasons_active"]) == (1320.0, 698.53, ["sw_power_cap"])
    assert verdict["state"] == "healthy" and verdict["reasons"] == [], verdict
    assert verdict["power_limited"] is True and verdict["power_limit_w"] == 700.0
    assert verdict["gpu_class"] == "hopper-700w" and verdict["active_reasons"] == ["sw_power_cap"]
    assert "below_fraction" in notes(verdict)  # 67% of the maximum: said, never judged


def test_the_h100_counters_over_a_real_30_s_load_are_no_fault():
    # the two real snapshots 30 s apart around a 25 s bf16 load: SW power capping grew 26.1 s, the 0xE8 ones 0
    before, after = (attestation.parse_event_counters((FIXTURES / f"nvidia-smi-q-d-performance-h100-{edge}.txt")
                                                      .read_text())["00000000:00:06.0"] for edge in ("before", "after"))
    deltas = attestation.counter_deltas(before, after)["deltas"]
    verdict = readiness.judge(1320, 698.53, gpu_name=H100, max_clock_mhz=1980, power_limit_w=700,
                              counter_deltas_us=deltas, window_s=30.0)
    assert deltas["sw_power_capping"] == 26100094 and verdict["fault_counter_us"] == 0
    assert verdict["state"] == "healthy" and verdict["power_limited"] is True  # the counter dominates: 87%


def example_readings() -> list[tuple[str, dict]]:
    return [(p.parent.name, json.loads(p.read_text())["readiness"])
            for p in sorted((EXAMPLE / "runs").glob("*/record.json"))]


@pytest.mark.parametrize(("run", "section"), example_readings(), ids=[r for r, _ in example_readings()])
def test_every_committed_example_reading_is_healthy(run, section):
    limit = attestation.parse_nvidia_smi_q((EXAMPLE / "nvidia-smi-q.txt").read_text())["gpus"][0]["power_limit_w"]
    load = section["load"]
    verdict = readiness.judge(section["sm_clock_mhz"], section["power_w"], gpu_name=load["device"],
                              expected_sm_clock_mhz=section["expected_clock_mhz"], expected_source="max_clock",
                              power_limit_w=limit, tflops=load["tflops"], tflops_size=load["size"],
                              tflops_dtype=host_state.PROBE_DTYPES[load["backend"]])
    assert verdict["state"] == "healthy", verdict
    assert verdict["tflops_floor"] == pytest.approx(0.71 * 700) and load["tflops"] > verdict["tflops_floor"]


def test_a_real_h200_probe_with_counters_is_power_limited_and_healthy():
    # this probe on a lent H200 (driver 580.159.04, torch 2.11, 2026-11-27): 8 samples, SW power cap in all,
    # SW power capping 2.100 s over the 2.031 s window (the reads' own time), 651.987 TFLOP/s bf16 at 4096^2
    verdict = readiness.judge(1537.5, 690.6, gpu_name="NVIDIA H200", expected_sm_clock_mhz=1980,
                              expected_source="max_clock", power_limit_w=700,
                              samples=loaded(8, "sw_power_cap", sm=1537.5, power=690.58, util=97.0),
                              counter_deltas_us={"hw_power_braking": 0, "hw_thermal_slowdown": 0,
                                                 "sw_power_capping": 2100004, "sw_thermal_slowdown": 0,
                                                 "sync_boost": 0},
                              window_s=2.031, tflops=651.987)
    assert verdict["state"] == "healthy" and verdict["reasons"] == [] and verdict["notes"] == []
    assert verdict["power_limited"] is True and verdict["fault_counter_us"] == 0


@pytest.mark.parametrize("reasons", [["sw_power_cap"], None])
def test_the_issues_h100_reading_is_healthy_with_or_without_its_reasons(reasons):
    # issue 32: 1,395 MHz, 698.9 W of 700 W, 663 TFLOP/s bf16 was marked suspect ("70% of the expected 1980 MHz")
    samples = [{"sm_clock_mhz": 1395.0, "power_w": 698.9, "utilization_pct": 100, "reasons": reasons}] * 8
    verdict = readiness.judge(1395, 698.9, gpu_name=H100, expected_sm_clock_mhz=1980, expected_source="max_clock",
                              power_limit_w=700, samples=samples, tflops=663)
    assert verdict["state"] == "healthy" and verdict["reasons"] == []
    assert verdict["power_limited"] is (reasons is not None)


# --------------------------------------------------------------------------- the rules, as data

#: (case, judge's arguments, state, causes). Clocks and powers are the field's (readiness's docstring).
CASES = [
    # rule 2: faults from the counters over the probe's window, and sustained HW slowdown
    ("hw thermal counter 25% of the window", dict(
        sm_clock_mhz=1500, gpu_name=H100, max_clock_mhz=1980, samples=loaded(8),
        counter_deltas_us={"hw_thermal_slowdown": 500_000, "sw_power_capping": 0}, window_s=2.0),
     "suspect", ["thermal_or_power_brake"]),
    ("sw thermal + power brake just over 1%", dict(
        sm_clock_mhz=2400, gpu_name=GB10, samples=loaded(8, sm=2400, power=80),
        counter_deltas_us={"sw_thermal_slowdown": 15_000, "hw_power_braking": 10_000}, window_s=2.0),
     "suspect", ["thermal_or_power_brake"]),
    ("fault counters under 1% of the window", dict(
        sm_clock_mhz=2400, gpu_name=GB10, samples=loaded(8, sm=2400, power=80),
        counter_deltas_us={"sw_thermal_slowdown": 15_000}, window_s=2.0),
     "healthy", []),
    ("hw slowdown + hw thermal in 3 consecutive samples", dict(
        sm_clock_mhz=1500, gpu_name=H100, max_clock_mhz=1980,
        samples=loaded(3) + loaded(3, "hw_slowdown", "hw_thermal_slowdown") + loaded(2)),
     "suspect", ["hw_slowdown", "thermal_or_power_brake"]),
    ("hw slowdown flashing in one sample at a time", dict(
        sm_clock_mhz=1500, gpu_name=H100, max_clock_mhz=1980,
        samples=loaded(2) + loaded(1, "hw_slowdown") + loaded(2) + loaded(1, "hw_slowdown") + loaded(2)),
     "healthy", []),
    # rule 3: power-limited and healthy; not when the power is short of the limit
    ("power-limited h100 at 1320 MHz", dict(
        sm_clock_mhz=1320, gpu_name=H100, max_clock_mhz=1980, power_limit_w=700,
        samples=loaded(8, "sw_power_cap", sm=1320, power=698.5)),
     "healthy", []),
    ("applied 400 W limit, ~395 W, sw power cap, 900 MHz", dict(
        sm_clock_mhz=900, gpu_name=H100, max_clock_mhz=1980, power_limit_w=400, applied_power_limit_w=400,
        samples=loaded(8, "sw_power_cap", sm=900, power=395), tflops=330),
     "healthy", []),
    ("applied 400 W limit, driver's limit unread", dict(
        sm_clock_mhz=900, gpu_name=H100, max_clock_mhz=1980, applied_power_limit_w=400,
        samples=loaded(8, "sw_power_cap", sm=900, power=395)),
     "healthy", []),
    ("sw power cap but power far below the limit, clock under the floor", dict(
        sm_clock_mhz=900, gpu_name=H100, max_clock_mhz=1980, power_limit_w=700,
        samples=loaded(8, "sw_power_cap", sm=900, power=400)),
     "suspect", ["below_class_floor"]),
    # rule 4: the GB10's floor and degraded band; an owner's cap is not sparkfleet's lock and needs none
    ("gb10 in the degraded band", dict(sm_clock_mhz=850, gpu_name=GB10, samples=loaded(8, "sw_power_cap", sm=850)),
     "suspect", ["degraded_band"]),
    ("gb10 at 695 MHz, 96% utilisation", dict(sm_clock_mhz=695, gpu_name=GB10, utilization_pct=96),
     "suspect", ["degraded_band"]),
    ("gb10 above the band, below the 1400 MHz floor", dict(sm_clock_mhz=1200, gpu_name=GB10, samples=loaded(8)),
     "suspect", ["below_class_floor"]),
    ("gb10 owner's cap at 2100 MHz (70% of 3003)", dict(
        sm_clock_mhz=2100, gpu_name=GB10, expected_sm_clock_mhz=3003, expected_source="max_clock",
        samples=loaded(8, sm=2100, power=70)),
     "healthy", []),
    ("gb10 lock sparkfleet set inside the band", dict(
        sm_clock_mhz=800, gpu_name=GB10, applied_lock_mhz=(800, 800), samples=loaded(8, sm=800, power=40)),
     "healthy", []),
    ("gb10 lock sparkfleet set at 1200 MHz, under the floor", dict(
        sm_clock_mhz=1195, gpu_name=GB10, applied_lock_mhz=(0, 1200), samples=loaded(8, sm=1195, power=50)),
     "healthy", []),
    ("gb10 lock sparkfleet set above the band, clock in it", dict(
        sm_clock_mhz=850, gpu_name=GB10, applied_lock_mhz=(0, 2000), samples=loaded(8, sm=850, power=40)),
     "suspect", ["degraded_band"]),
    ("h100 at 1100 MHz of 1980, not power-limited", dict(
        sm_clock_mhz=1100, gpu_name=H100, max_clock_mhz=1980, power_limit_w=700, samples=loaded(8, sm=1100)),
     "suspect", ["below_class_floor"]),
    ("sparkfleet lock lost: 2480 MHz over a 2000 MHz lock", dict(
        sm_clock_mhz=2480, gpu_name=GB10, applied_lock_mhz=(0, 2000), samples=loaded(8, sm=2480)),
     "suspect", ["lost_cap"]),
    # rule 5: delivered TFLOP/s against the class reference (0.71 x 700 = 497 at 700 W)
    ("h100 delivering 450 TFLOP/s", dict(
        sm_clock_mhz=1500, gpu_name=H100, max_clock_mhz=1980, power_limit_w=700, samples=loaded(8), tflops=450),
     "suspect", ["low_tflops"]),
    ("h100 delivering 500 TFLOP/s", dict(
        sm_clock_mhz=1500, gpu_name=H100, max_clock_mhz=1980, power_limit_w=700, samples=loaded(8), tflops=500),
     "healthy", []),
    ("400 W limit: 250 TFLOP/s under the scaled floor 284", dict(
        sm_clock_mhz=900, gpu_name=H100, max_clock_mhz=1980, power_limit_w=400,
        samples=loaded(8, "sw_power_cap", sm=900, power=395), tflops=250),
     "suspect", ["low_tflops"]),
    ("fp16 products: no bf16 reference to fail", dict(
        sm_clock_mhz=1500, gpu_name=H100, max_clock_mhz=1980, samples=loaded(8), tflops=300, tflops_dtype="fp16"),
     "healthy", []),
    # rule 1: the load did not run
    ("utilisation 5%", dict(sm_clock_mhz=345, gpu_name=H100, max_clock_mhz=1980, samples=loaded(8, sm=345, util=5)),
     "invalid", ["load_not_running"]),
    ("gpu idle in most samples", dict(
        sm_clock_mhz=208, gpu_name=GB10, samples=loaded(6, "gpu_idle", sm=208, util=None) + loaded(2, sm=208)),
     "invalid", ["gpu_idle"]),
    ("idle, with a thermal fault all the same", dict(
        sm_clock_mhz=208, gpu_name=GB10, samples=loaded(8, "gpu_idle", sm=208, util=0),
        counter_deltas_us={"hw_thermal_slowdown": 900_000}, window_s=2.0),
     "suspect", ["thermal_or_power_brake", "load_not_running", "gpu_idle"]),
    # unknown: no clock reading, or nothing to judge it by
    ("no clock reading", dict(sm_clock_mhz=None, gpu_name=GB10), "unknown", ["missing_reading"]),
    ("unnamed, no maximum, no reasons", dict(sm_clock_mhz=2400), "unknown", ["no_clock_floor"]),
]


@pytest.mark.parametrize(("case", "kwargs", "state", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_rules(case, kwargs, state, expected):
    kwargs = dict(kwargs)
    verdict = readiness.judge(kwargs.pop("sm_clock_mhz"), **kwargs)
    assert (verdict["state"], causes(verdict)) == (state, expected), verdict
    assert json.loads(json.dumps(verdict)) == verdict
    assert readiness.action(verdict)["action"] == ("run" if state == "healthy" else "mark")


@pytest.mark.parametrize("ratio", [0.41, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 0.99])
def test_the_clock_ratio_alone_never_makes_a_run_suspect(ratio):
    # a power-limited H100 at any clock; a GB10 above its floor at any fraction of its maximum
    h100 = readiness.judge(1980 * ratio, 698, gpu_name=H100, expected_sm_clock_mhz=1980, expected_source="max_clock",
                           power_limit_w=700, samples=loaded(8, "sw_power_cap", sm=1980 * ratio, power=698))
    assert h100["state"] == "healthy"
    clock = max(1401.0, 3003 * ratio)
    gb10 = readiness.judge(clock, 70, gpu_name=GB10, expected_sm_clock_mhz=3003, expected_source="max_clock",
                           samples=loaded(8, sm=clock, power=70))
    assert gb10["state"] == "healthy"


def test_a_lock_and_a_power_limit_sparkfleet_applied_set_the_expectations():
    # the lock: expectation min(lock max, class healthy clock); below 0.9 x that is a note
    held = readiness.judge(1700, gpu_name=GB10, applied_lock_mhz=(1800, 1800), samples=loaded(8, sm=1700, power=60))
    assert held["state"] == "healthy" and "below_lock" not in notes(held)
    low = readiness.judge(1500, gpu_name=GB10, applied_lock_mhz=(1800, 1800), samples=loaded(8, sm=1500, power=60))
    assert low["state"] == "healthy" and "below_lock" in notes(low)
    # the power limit: the reference TFLOP/s is scaled to it; an applied limit the driver does not enforce is noted
    verdict = readiness.judge(1000, gpu_name=H100, max_clock_mhz=1980, power_limit_w=700, applied_power_limit_w=400,
                              samples=loaded(8, "sw_power_cap", sm=1000, power=690), tflops=600)
    assert verdict["power_limit_source"] == "enforced" and "power_limit_not_applied" in notes(verdict)
    assert readiness.tflops_reference(H100, power_limit_w=400) == 400.0
    assert readiness.tflops_reference(H100) == 700.0 and readiness.tflops_reference(GB10) is None
    assert readiness.tflops_reference(H100, size=1024) is None


@pytest.mark.parametrize(("name", "cls"), [
    ("NVIDIA GB10", "gb10"), ("cuda:0 NVIDIA H200", "hopper-700w"), (H100, "hopper-700w"),
    ("NVIDIA H100 PCIe", "other"), ("NVIDIA H200 NVL", "other"), ("NVIDIA GH200 480GB", "other"),
    ("Tesla V100-SXM2-16GB", "other"), (None, "unknown"),
])
def test_gpu_classes_by_name(name, cls):
    assert readiness.gpu_class(name) == cls


def test_the_fleets_peers_are_a_pure_function_and_a_note():
    got = readiness.compare_to_peers({"a": 660.0, "b": 650.0, "c": 560.0, "d": None})
    assert [h for h, v in got.items() if v["warn"]] == ["c"] and set(got) == {"a", "b", "c"}
    assert got["c"]["peer_median"] == 655.0 and "85% of its peers' median 655.0" in got["c"]["message"]
    assert readiness.compare_to_peers({"alone": 600.0})["alone"] == {
        "tflops": 600.0, "peer_median": None, "fraction": None, "warn": False, "message": None}
    verdict = readiness.judge(2400, gpu_name=GB10, samples=loaded(8, sm=2400, power=80), tflops=50.0,
                              peer_tflops=[61.0, 60.0, 62.0])
    assert verdict["state"] == "healthy" and notes(verdict) == ["below_peers"]  # it warns, never marks
    assert verdict["peer_tflops_median"] == 61.0


def test_the_reason_and_counter_names_are_gpu_pys_and_the_parsers():
    assert set(readiness.FAULT_COUNTERS) | {readiness.POWER_CAP_COUNTER} <= set(gpu.CLOCK_EVENT_COUNTER_FIELDS)
    (g,) = attestation.parse_nvidia_smi_q((FIXTURES / "nvidia-smi-q-d-performance-h100-before.txt").read_text())["gpus"]
    assert set(g["clock_event_counters_us"]) == set(gpu.CLOCK_EVENT_COUNTER_FIELDS)
    assert readiness.FAULT_REASONS == ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                                       "hw_power_brake_slowdown")  # DCGM's 0xE8


def test_the_probe_reports_the_element_type_of_its_products():
    sys.path.insert(0, str(REPO / "roles" / "matrix" / "files"))
    try:
        import gpu_probe  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    backend = gpu_probe.Backend("fake", "0", "cuda:0 fake", lambda n: n, lambda a, b: None, None, None,
                                lambda: None, "bf16")
    out = gpu_probe.run_load(backend, 0.05, 64)
    assert out["dtype"] == "bf16" and out["size"] == 64 and out["products"] > 0


# --------------------------------------------------------------------------- NVML


class _Value:
    def __init__(self, ret: int, ns: int) -> None:
        self.nvmlReturn, self.valueType = ret, 3
        self.value = type("Union", (), {"ullVal": ns})()


def test_nvml_reads_the_counters_by_the_bindings_names_and_the_enforced_limit():
    from test_gpu_sensor import fake_pynvml  # noqa: PLC0415 (the same fake NVML as the sensor's tests)

    nv = fake_pynvml(gb10=False)
    # nvidia-ml-py 13.610.43's IDs, as read on a lent H200 with driver 580.159.04 (a 12.x binding had 251-253)
    ids = {"NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP": 74, "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST": 76,
           "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN": 269,
           "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN": 270,
           "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN": 271}
    for name, fid in ids.items():
        setattr(nv, name, fid)
    asked = []

    def field_values(handle, fields):
        asked.append(list(fields))
        return [_Value(3 if fid == 76 else 0, 1_500_000 * (fid % 10)) for fid in fields]  # 76: NotSupported

    nv.nvmlDeviceGetFieldValues = field_values
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 400000  # mW
    nv.nvmlDeviceGetMaxClockInfo = lambda h, clk: 1980
    sensor = gpu.NvmlSensor(nv)
    assert asked == [] and sensor.clock_event_counters_us(0) == {
        "sw_power_capping": 6000, "sw_thermal_slowdown": 13500, "hw_thermal_slowdown": 0, "hw_power_braking": 1500}
    assert asked == [[74, 76, 269, 270, 271]]
    assert sensor.facts(0) == {"name": "NVIDIA H200", "max_sm_clock_mhz": 1980.0, "power_limit_w": 400.0}
    del nv.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP  # older bindings: that counter is not read, never guessed
    assert "sw_power_capping" not in sensor.clock_event_counters_us(0)
    assert gpu.NvmlSensor(fake_pynvml()).clock_event_counters_us(0) is None  # no field IDs in the bindings


# --------------------------------------------------------------------------- whole probes, through the stand-in


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """The nvidia-smi stand-in on PATH, its state in tmp_path; returns the load marker (exists: under load)."""
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


def load_script(tmp_path: Path, tflops: float = 650.0) -> str:
    """gpu_probe.py's protocol without a GPU: started, the load's seconds, ended, its JSON (torch bf16 4096)."""
    path = tmp_path / "probe.py"
    path.write_text("\n".join([
        "import json, sys, time",
        f"print({host_state.LOAD_STARTED!r}, flush=True)",
        "time.sleep(float(sys.argv[sys.argv.index('--seconds') + 1]))",
        f"print({host_state.LOAD_ENDED!r}, flush=True)",
        "print(json.dumps({'mode': 'load', 'backend': 'torch', 'dtype': 'bf16', 'size': 4096, "
        f"'tflops': {tflops}, 'error': None}}))",
    ]) + "\n")
    return str(path)


def run_probe(tmp_path, controls=None, tflops=650.0):
    # 3 s, the default: a window of 2 s holds several samples though each stand-in query starts a Python process
    return host_state.readiness_probe({"probe_s": 3.0}, controls, True, script=load_script(tmp_path, tflops),
                                      python=sys.executable, sensor=gpu.NvidiaSmiSensor(), sample_interval_s=0.05)


def role_files(tmp_path: Path, lock=None, power_limit=None, prior_power_limit=None):
    """The controls the gpu_state role records (its saved file and its module's lock record)."""
    (tmp_path / "work" / "state").mkdir(parents=True, exist_ok=True)
    lock_record = tmp_path / "gpu-state-lock.json"
    if lock is not None:
        lock_record.write_text(json.dumps({"locked_clocks": {"0": lock}}))
    saved = {"host": "h", "state_file": str(lock_record),
             "requested": {"gpus": None, "power_limit": power_limit, "locked_clocks": lock},
             "saved": {"gpus": [{"index": 0, "power_limit": prior_power_limit, "persistence_mode": True,
                                 "locked_clocks": None}]}}
    (tmp_path / "work" / "state" / "gpu_state_saved.json").write_text(json.dumps(saved))
    return gpu_control.applied_controls(str(tmp_path / "work" / "results"))


def smi_set(*args: str) -> None:
    import subprocess  # noqa: PLC0415

    subprocess.run(["nvidia-smi", *args], check=True, capture_output=True)


def test_a_probe_on_an_hw_thermal_h100_is_a_fault_from_its_counters_and_samples(smi, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_MODEL", "h100")
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_HW_THERMAL", "1")
    smi.touch()
    section = run_probe(tmp_path)
    assert section["state"] == "suspect", section
    assert {"thermal_or_power_brake", "hw_slowdown"} <= set(causes(section))
    assert section["counter_source"] == "nvidia-smi -q -d PERFORMANCE" and section["window_s"] > 0
    assert section["counter_deltas_us"]["hw_thermal_slowdown"] > 0.5 * section["window_s"] * 1e6
    assert section["active_reasons"] == ["hw_slowdown", "hw_thermal_slowdown"] and section["samples"] >= 2


def test_a_probe_under_a_400_w_limit_sparkfleet_applied_is_power_limited_and_healthy(smi, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_MODEL", "h100")
    smi_set("-pl", "400")
    controls = role_files(tmp_path, power_limit=400.0, prior_power_limit=700.0)
    smi.touch()
    section = run_probe(tmp_path, controls, tflops=330.0)
    assert section["state"] == "healthy" and section["reasons"] == [], section
    assert section["power_limited"] is True and section["power_limit_w"] == 400.0
    assert 390 <= section["power_w"] <= 400 and section["active_reasons"] == ["sw_power_cap"]
    assert section["tflops"] == 330.0 and section["tflops_floor"] == pytest.approx(0.71 * 400)
    assert section["counter_deltas_us"]["sw_power_capping"] > 0


def test_an_owners_2100_mhz_cap_on_a_gb10_is_healthy(smi, tmp_path):
    smi_set("-lgc", "2100,2100")  # the owner's: sparkfleet recorded no lock
    smi.touch()
    section = run_probe(tmp_path, tflops=60.0)
    assert section["state"] == "healthy" and section["sm_clock_mhz"] == 2100.0, section
    assert section["gpu_class"] == "gb10" and section["max_clock_mhz"] == 3003.0
    assert section["tflops_reference"] is None  # a GB10 has no published reference: only its peers judge it


def test_a_lock_sparkfleet_set_inside_the_band_is_not_suspect_and_an_owners_is(smi, tmp_path):
    smi_set("-lgc", "800,800")
    smi.touch()
    ours = run_probe(tmp_path, role_files(tmp_path, lock={"min": 800, "max": 800}), tflops=20.0)
    assert ours["state"] == "healthy" and ours["sm_clock_mhz"] == 800.0, ours
    owners = run_probe(tmp_path, tflops=20.0)
    assert owners["state"] == "suspect" and causes(owners) == ["degraded_band"]


def test_a_load_that_did_not_run_is_invalid(smi, tmp_path):
    # no marker: the stand-in sits idle (0% utilisation, GPU_IDLE) while the "load" runs
    section = run_probe(tmp_path)
    assert section["state"] == "invalid" and set(causes(section)) == {"load_not_running", "gpu_idle"}, section
    assert section["action"] == {"action": "mark", "warn": True, "state": "invalid", "reasons": section["reasons"]}


# --------------------------------------------------------------------------- item 4: a probe the host cannot honour


def test_a_probe_longer_than_the_host_runs_is_refused_at_validate_from_one_constant():
    assert settings.SETTINGS_BY_NAME["sparkfleet_readiness_probe_s"].high == readiness.PROBE_S_MAX
    assert host_state.PROBE_S_MAX == readiness.PROBE_S_MAX == 60.0
    for value, shown in ((120, "120"), ("120", "120"), (60.5, "60.5")):
        errors, _ = settings.setting_problems("h1", {"sparkfleet_readiness_probe_s": value})
        assert errors == [f"h1: sparkfleet_readiness_probe_s: must be at most 60 s, got {shown}"], errors
    with pytest.raises(planning.PlanningError, match="sparkfleet_readiness_probe_s: must be at most 60 s, got 120"):
        planning.check_host("h1", {"name": "c1", "models": [{"name": "m", "path": "/var/lib/sparkfleet/models/m"}],
                                   "environments": ["native"], "workloads": ["T1"]},
                            {"sparkfleet_readiness_probe_s": 120})
    for value in (0, 3, 60):  # 0: no probe; what validate accepts, the host runs
        assert settings.setting_problems("h1", {"sparkfleet_readiness_probe_s": value}) == ([], [])
        if value:
            assert host_state.probe_settings({"probe_s": value})["probe_s"] == value
    with pytest.raises(ValueError, match=r"seconds in \(0, 60\]"):
        host_state.probe_settings({"probe_s": 60.5})


class CountingSensor(gpu.GpuSensor):
    """A GB10 at 2405 MHz whose NVML counters say what it is given, one reading per call."""

    kind = "fake-nvml"

    def __init__(self, *counters: dict) -> None:
        self.counters = list(counters)

    def read(self, indices=None):
        return [gpu.GpuReading(index=0, name=GB10, sm_clock_mhz=2405.0, power_w=80.0, utilization_pct=97.0,
                               throttle_mask=0)]

    def clock_event_counters_us(self, index):
        return self.counters.pop(0) if len(self.counters) > 1 else self.counters[0]


def test_counters_come_from_nvidia_smi_first_and_nvml_only_without_it(smi, tmp_path):
    nvml = CountingSensor({"hw_thermal_slowdown": 5})
    counters, source, why = host_state.probe_counters(nvml, 0)  # the stand-in answers: its labels win
    assert source == "nvidia-smi -q -d PERFORMANCE" and why is None and counters["hw_thermal_slowdown"] == 0
    counters, source, why = host_state.probe_counters(nvml, 0, nvidia_smi=str(tmp_path / "absent"))
    assert (counters, source, why) == ({"hw_thermal_slowdown": 5}, "nvml field values", None)
    assert host_state.probe_counters(None, 0, nvidia_smi=str(tmp_path / "absent"))[2] == \
        f"{tmp_path / 'absent'} not found on PATH"


def test_a_counter_growing_faster_than_the_window_is_another_field_and_not_judged(tmp_path):
    # a binding of another release than the driver reads another field under a counter's name: 1000 s in ~2 s
    sensor = CountingSensor({"hw_thermal_slowdown": 0}, {"hw_thermal_slowdown": 1_000_000_000})
    section = host_state.readiness_probe({"probe_s": 3.0}, None, True, script=load_script(tmp_path),
                                         python=sys.executable, sensor=sensor, sample_interval_s=0.05,
                                         nvidia_smi=str(tmp_path / "absent"))
    assert section["state"] == "healthy" and section["counter_deltas_us"] is None, section
    assert any("hw_thermal_slowdown grew faster than the" in e for e in section["sensor_errors"])
    honest = CountingSensor({"hw_thermal_slowdown": 0}, {"hw_thermal_slowdown": 1_000_000})  # 1 s of ~2 s
    section = host_state.readiness_probe({"probe_s": 3.0}, None, True, script=load_script(tmp_path),
                                         python=sys.executable, sensor=honest, sample_interval_s=0.05,
                                         nvidia_smi=str(tmp_path / "absent"))
    assert section["state"] == "suspect" and causes(section) == ["thermal_or_power_brake"], section
    assert section["counter_source"] == "nvml field values"
