"""The nvidia-smi stand-in: output formats as driver 580 prints them, state persistence, thermal curve."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, sparkfleet_gpu

SMI = STANDINS / "nvidia-smi"
FIELDS = ",".join(sparkfleet_gpu.QUERY_FIELDS)
# Header printed by the real nvidia-smi 580.159.04 for the sensor's fields (captured on an H200).
REAL_HEADER = (
    "index, uuid, name, temperature.gpu, power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz], "
    "utilization.gpu [%], memory.used [MiB], memory.total [MiB], pstate, clocks_event_reasons.active"
)


class Smi:
    def __init__(self, tmp: Path, model: str = "gb10", **env: str) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_FAKE")}
        self.env.update(
            SPARKFLEET_FAKE_GPU_STATE=str(tmp / "state.json"),
            SPARKFLEET_FAKE_GPU_MODEL=model,
            SPARKFLEET_FAKE_GPU_LOAD=str(tmp / "load" / "marker"),
            **env,
        )
        (tmp / "load").mkdir(exist_ok=True)
        self.marker = tmp / "load" / "marker"

    def __call__(self, *args: str, now: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(self.env)
        if now is not None:
            env["SPARKFLEET_FAKE_NOW"] = repr(now)
        proc = subprocess.run([sys.executable, str(SMI), *args], env=env, capture_output=True, text=True)
        if check:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def temp(self, now: float) -> int:
        return int(self("--query-gpu=temperature.gpu", "--format=csv,noheader,nounits", now=now).stdout)


def test_is_an_executable_python_script():
    assert os.access(SMI, os.X_OK)
    assert SMI.read_text().startswith("#!/usr/bin/env python3\n")


# --------------------------------------------------------------------------- formats


def test_query_formats_match_the_real_tool(tmp_path):
    smi = Smi(tmp_path, "h200")
    with_header = smi(f"--query-gpu={FIELDS}", "--format=csv").stdout.splitlines()
    assert with_header[0] == REAL_HEADER
    assert re.fullmatch(
        r"0, GPU-[0-9a-f-]{36}, NVIDIA H200, 33, 77\.40 W, 345 MHz, 3201 MHz, 0 %, 0 MiB, 143771 MiB, P0, "
        r"0x0000000000000001",
        with_header[1],
    )
    assert smi(f"--query-gpu={FIELDS}", "--format=csv,noheader").stdout.splitlines() == with_header[1:]
    nounits = smi(f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits").stdout
    assert nounits.split(", ")[4:10] == ["77.40", "345", "3201", "0", "0", "143771"]


def test_gb10_reports_na_memory_and_power_cap(tmp_path):
    smi = Smi(tmp_path)
    out = smi(
        "--query-gpu=name,memory.used,memory.total,memory.free,clocks.mem,power.limit,power.max_limit,temperature.gpu",
        "--format=csv",
    ).stdout
    assert out.splitlines()[1] == "NVIDIA GB10, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], 38"
    (reading,) = sparkfleet_gpu.NvidiaSmiSensor(str(SMI), lambda argv: (0, smi(*argv[1:]).stdout, "")).read()
    assert reading.name == "NVIDIA GB10" and reading.temperature_c == 38 and reading.memory_used_mib is None


def test_state_fields_and_aliases(tmp_path):
    smi = Smi(tmp_path, "h200")
    out = smi(
        "--query-gpu=index,persistence_mode,power.limit,power.default_limit,power.min_limit,power.max_limit,"
        "clocks.sm,clocks.max.sm,clocks.applications.graphics,clocks_event_reasons.active,gpu_name",
        "--format=csv",
    ).stdout.splitlines()
    assert out[0] == (
        "index, persistence_mode, power.limit [W], power.default_limit [W], power.min_limit [W], "
        "power.max_limit [W], clocks.current.sm [MHz], clocks.max.sm [MHz], clocks.applications.graphics [MHz], "
        "clocks_event_reasons.active, name"
    )
    assert out[1] == (
        "0, Enabled, 700.00 W, 700.00 W, 200.00 W, 700.00 W, 345 MHz, 1980 MHz, 1980 MHz, 0x0000000000000001, "
        "NVIDIA H200"
    )


def test_invalid_field_and_missing_gpu(tmp_path):
    smi = Smi(tmp_path)
    bad = smi("--query-gpu=index,bogus.field", "--format=csv", check=False)
    assert bad.returncode == 2 and bad.stdout == 'Field "bogus.field" is not a valid field to query.\n\n'
    missing = smi("-i", "4", "-L", check=False)
    assert missing.returncode == 6 and missing.stdout == "No devices were found\n"


def test_list_gpus(tmp_path):
    out = Smi(tmp_path, SPARKFLEET_FAKE_GPU_COUNT="2")("-L").stdout.splitlines()
    assert len(out) == 2
    assert re.fullmatch(r"GPU 1: NVIDIA GB10 \(UUID: GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\)", out[1])


@pytest.mark.parametrize("model", ["gb10", "h200", "h100"])
def test_summary_table_layout(tmp_path, model):
    lines = Smi(tmp_path, model)().stdout.splitlines()
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}       ", lines[0])
    assert all(len(line) == 91 for line in lines[1:] if line)
    assert lines[8].startswith("|   0  NVIDIA ")
    if model == "gb10":
        assert lines[8].endswith("On  |   0000000F:01:00.0 Off |                  N/A |")
        assert lines[9] == "| N/A   38C    P8              4W /  N/A  | Not Supported          |      0%      Default |"
    else:
        assert "MiB / " in lines[9] and "W /  700W |" in lines[9]


def test_h200_table_row_matches_the_real_layout(tmp_path):
    line = Smi(tmp_path, "h200")().stdout.splitlines()[9]
    # Real driver 580 row: "| N/A   36C    P0            124W /  700W |       0MiB / 143771MiB |      0%      Default |"
    assert line == "| N/A   33C    P0             77W /  700W |       0MiB / 143771MiB |      0%      Default |"


def test_query_report_layout(tmp_path):
    out = Smi(tmp_path)("-q").stdout
    lines = out.splitlines()
    assert lines[1] == "==============NVSMI LOG=============="
    assert all(line.index(":") == 55 for line in lines if " : " in line)
    assert "    Product Name                                       : NVIDIA GB10" in lines
    assert "        Total                                          : N/A" in lines
    assert "        GPU Current Temp                               : 38 C" in lines
    assert "        Current Power Limit                            : N/A" in lines


# --------------------------------------------------------------------------- setters and persistence


def test_persistence_mode_persists(tmp_path):
    smi = Smi(tmp_path)
    assert smi("-pm", "0").stdout == "Disabled persistence mode for GPU 0000000F:01:00.0.\nAll done.\n"
    assert smi("-pm", "0").stdout == "Persistence mode is already Disabled for GPU 0000000F:01:00.0.\nAll done.\n"
    assert smi("--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Disabled\n"
    smi("-pm", "1")
    assert smi("--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Enabled\n"


def test_locked_clocks_cap_the_sm_clock_and_reset(tmp_path):
    smi = Smi(tmp_path, "h200")
    out = smi("-lgc", "1000,1200").stdout
    assert out == 'GPU clocks set to "(gpuClkMin 1000, gpuClkMax 1200)" for GPU 00000000:00:06.0\nAll done.\n'
    smi.marker.touch()
    assert smi("--query-gpu=clocks.sm", "--format=csv,noheader,nounits").stdout == "1200\n"
    assert smi("-rgc").stdout == "All done.\n"
    assert smi("--query-gpu=clocks.sm", "--format=csv,noheader,nounits").stdout == "1980\n"
    assert smi("-lgc", "1500,1000", check=False).returncode == 2


def test_power_limit_h200(tmp_path):
    smi = Smi(tmp_path, "h200")
    assert smi("-pl", "450").stdout == (
        "Power limit for GPU 00000000:00:06.0 was set to 450.00 W from 700.00 W.\nAll done.\n"
    )
    assert smi("--query-gpu=power.limit", "--format=csv,noheader,nounits").stdout == "450.00\n"
    bad = smi("-pl", "900", check=False)
    assert bad.returncode == 2
    assert "is not a valid power limit which should be between 200.00 W and 700.00 W" in bad.stdout


def test_power_limit_unsupported_on_gb10(tmp_path):
    smi = Smi(tmp_path)
    proc = smi("-pl", "100")
    assert proc.stdout == (
        "Changing power management limit is not supported for GPU: 0000000F:01:00.0.\n"
        "Treating as warning and moving on.\nAll done.\n"
    )
    assert smi("-pl", "100", "-eow", check=False).returncode == 3


# --------------------------------------------------------------------------- thermal curve


def test_heats_under_load_then_cools_monotonically(tmp_path):
    smi = Smi(tmp_path, SPARKFLEET_FAKE_COOL_TAU_S="20")
    t0 = time.time()
    assert smi.temp(t0) == 38  # idle
    smi.marker.touch()
    heating = [smi.temp(t0 + dt) for dt in (0, 10, 30, 60, 120)]
    assert heating == sorted(heating) and heating[-1] >= 65
    smi.marker.unlink()
    cooling = [smi.temp(t0 + 120 + dt) for dt in (0, 1, 2, 5, 10, 20, 40, 60, 90, 120, 200)]
    assert cooling == sorted(cooling, reverse=True), cooling
    assert cooling[0] >= 65 and cooling[-1] == 38
    # Power and SM clock follow the load.
    idle = smi("--query-gpu=power.draw,clocks.sm,utilization.gpu", "--format=csv,noheader,nounits", now=t0 + 400)
    assert idle.stdout == "4.00, 208, 0\n"


def test_cooling_time_constant_is_configurable(tmp_path):
    temps = {}
    for tau in ("10", "180"):
        (tmp_path / tau).mkdir()
        smi = Smi(tmp_path / tau, SPARKFLEET_FAKE_COOL_TAU_S=tau)
        t0 = time.time()
        smi.temp(t0)
        smi.marker.touch()
        smi.temp(t0 + 300)
        smi.marker.unlink()
        temps[tau] = smi.temp(t0 + 360)
    assert temps["10"] == 38 and temps["180"] > 50


def test_h200_model_cools_like_the_trace(tmp_path):
    smi = Smi(tmp_path, "h200")
    t0 = time.time()
    smi.temp(t0)
    smi.marker.touch()
    assert smi.temp(t0 + 75) == 50
    smi.marker.unlink()
    # The real trace: 50 C under load, 33-35 C about 2 s after the load stops, 33 C later.
    assert 33 <= smi.temp(t0 + 77) <= 36
    assert smi.temp(t0 + 200) == 33


# --------------------------------------------------------------------------- loop mode (-l / -lms)


def _loop(smi: Smi, *args: str) -> subprocess.Popen:
    # As from a terminal: Ctrl+C reaches the tool. A test run started in the background (`cmd &`, nohup)
    # hands its children SIGINT ignored, and Python then never raises KeyboardInterrupt.
    return subprocess.Popen(
        [sys.executable, str(SMI), *args], env=smi.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_interruptible,
    )


def _interruptible() -> None:
    # The signal mask is inherited across exec too: a worker thread that blocks SIGINT would hand it down blocked.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _end(proc: subprocess.Popen, sig: int) -> int:
    """Send ``sig`` and return the exit code; a loop that does not end is killed (never left to later tests)."""
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=20)  # generous: a loaded CI machine
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def test_loop_ms_prints_one_flushed_block_per_period_until_killed(tmp_path):
    smi = Smi(tmp_path, "h200", SPARKFLEET_FAKE_GPU_COUNT="2")
    proc = _loop(smi, "--query-gpu=index,temperature.gpu,power.draw", "--format=csv", "-lms", "100")
    try:
        assert proc.stdout is not None
        lines, stamps = [], []
        for _ in range(7):  # header once, then three blocks of two GPUs, read while it runs (flushed)
            lines.append(proc.stdout.readline().rstrip("\n"))
            stamps.append(time.monotonic())
        assert proc.poll() is None
    finally:
        rc = _end(proc, signal.SIGTERM)
    assert rc == 0 and proc.stderr is not None and proc.stderr.read() == ""
    assert lines[0] == "index, temperature.gpu, power.draw [W]"
    assert [line.split(", ")[0] for line in lines[1:]] == ["0", "1", "0", "1", "0", "1"]
    assert lines[1] == "0, 33, 77.40 W"
    assert stamps[5] - stamps[1] >= 0.18  # blocks one period apart (the tool sleeps the period in between)


def test_loop_seconds_and_option_forms(tmp_path):
    smi = Smi(tmp_path)
    for args in (["-l"], ["-l", "1"], ["--loop=1"], ["--loop-ms=250"]):
        proc = _loop(smi, "--query-gpu=index,temperature.gpu", "--format=csv,noheader,nounits", *args, "-i", "0")
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "0, 38\n"  # the first block at once
        finally:
            rc = _end(proc, signal.SIGINT)  # Ctrl+C ends the loop quietly
        assert rc == 0
    assert smi("-lms", check=False).returncode == 2
    assert smi("--query-gpu=index", "--format=csv", "--loop-ms=0", check=False).returncode == 2
    assert smi("-L", "-l", "1").stdout.startswith("GPU 0: NVIDIA GB10")  # -L does not loop
