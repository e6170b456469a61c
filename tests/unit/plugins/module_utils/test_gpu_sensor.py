"""sparkfleet_gpu: nvidia-smi CSV parsing, the NVML sensor (fake pynvml), sensor choice, telemetry."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from _ansible_modules import STANDINS, sparkfleet_gpu

g = sparkfleet_gpu
SMI = str(STANDINS / "nvidia-smi")

# Real output of driver 580.159.04 on an H200 for g.QUERY_FIELDS (captured on the device machine).
H200_HEADER = (
    "index, uuid, name, temperature.gpu, power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz], "
    "utilization.gpu [%], memory.used [MiB], memory.total [MiB], pstate, clocks_event_reasons.active\n"
)
H200_UNITS = (
    "0, GPU-d26b4720-63b1-2190-432f-25324ea5810e, NVIDIA H200, 35, 77.43 W, 345 MHz, 3201 MHz, 0 %, 0 MiB, "
    "143771 MiB, P0, 0x0000000000000001\n"
)
H200_NOUNITS = "0, GPU-d26b4720-63b1-2190-432f-25324ea5810e, NVIDIA H200, 35, 77.47, 345, 3201, 0, 0, 143771, P0, 0x0000000000000001\n"  # noqa: E501
GB10_NOUNITS = "0, GPU-2dee1e25-b3b5-007e-2b55-79f2d0f2ebe5, NVIDIA GB10, 41, 4.12, 208, [N/A], 0, [N/A], [N/A], P8, 0x0000000000000001\n"  # noqa: E501


def runner_for(*outputs: str, rc: int = 0):
    calls: list[list[str]] = []
    queue = list(outputs)

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        calls.append(list(argv))
        return rc, queue.pop(0) if len(queue) > 1 else queue[0], "boom" if rc else ""

    run.calls = calls  # type: ignore[attr-defined]
    return run


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("77.43", 77.43),
        (" 77.43 W", 77.43),
        ("3201 MHz", 3201.0),
        ("0 %", 0.0),
        ("143771 MiB", 143771.0),
        ("0x0000000000000041", 65.0),
        ("[N/A]", None),
        ("N/A", None),
        ("[Not Supported]", None),
        ("Not Supported", None),
        ("[Unknown Error]", None),
        ("", None),
        (None, None),
        ("P0", None),
    ],
)
def test_parse_number(raw, expected):
    assert g.parse_number(raw) == expected


def test_parse_query_csv_skips_header_and_maps_unavailable_to_none():
    rows = g.parse_query_csv(H200_HEADER + H200_UNITS, g.QUERY_FIELDS)
    assert len(rows) == 1 and rows[0]["name"] == "NVIDIA H200" and rows[0]["power.draw"] == "77.43 W"
    gb = g.parse_query_csv(GB10_NOUNITS, g.QUERY_FIELDS)[0]
    assert gb["memory.used"] is None and gb["memory.total"] is None and gb["clocks.mem"] is None
    assert gb["temperature.gpu"] == "41"


def test_parse_query_csv_rejects_a_wrong_column_count():
    with pytest.raises(g.GpuSensorError, match="3 columns for 12 fields"):
        g.parse_query_csv("0, a, b\n", g.QUERY_FIELDS)


def test_not_supported_in_any_field():
    line = "1, [Not Supported], NVIDIA GB10, [Not Supported], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [Not Supported]\n"  # noqa: E501
    r = g.NvidiaSmiSensor(SMI, runner_for(line)).read()[0]
    assert r.index == 1 and r.name == "NVIDIA GB10"
    assert r.uuid is None and r.temperature_c is None and r.pstate is None and r.throttle_mask is None
    assert r.throttle_reasons is None


# --------------------------------------------------------------------------- nvidia-smi sensor


@pytest.mark.parametrize("text", [H200_NOUNITS, H200_HEADER + H200_UNITS])
def test_nvidia_smi_sensor_h200(text):
    run = runner_for(text)
    (r,) = g.NvidiaSmiSensor(SMI, run).read()
    assert (r.index, r.name, r.temperature_c, r.sm_clock_mhz, r.mem_clock_mhz) == (0, "NVIDIA H200", 35, 345, 3201)
    assert r.memory_total_mib == 143771 and r.memory_used_mib == 0 and r.utilization_pct == 0
    assert r.pstate == "P0" and r.throttle_mask == 1 and r.throttle_reasons == ["gpu_idle"]
    assert run.calls[0] == [
        run.calls[0][0],
        "--query-gpu=" + ",".join(g.QUERY_FIELDS),
        "--format=csv,noheader,nounits",
    ]


def test_nvidia_smi_sensor_gb10_memory_fields_are_none():
    (r,) = g.NvidiaSmiSensor(SMI, runner_for(GB10_NOUNITS)).read()
    assert r.temperature_c == 41 and r.power_w == 4.12
    assert r.memory_used_mib is None and r.memory_total_mib is None and r.mem_clock_mhz is None
    assert r.throttle_reasons == ["gpu_idle"]


def test_nvidia_smi_sensor_selects_and_reports_missing_gpus():
    two = GB10_NOUNITS + GB10_NOUNITS.replace("0, GPU-2dee", "1, GPU-3dee").replace(", 41,", ", 44,")
    sensor = g.NvidiaSmiSensor(SMI, runner_for(two))
    assert [r.temperature_c for r in sensor.read([1, 0])] == [44, 41]
    with pytest.raises(g.GpuSensorError, match=r"no GPU with index \[5\]; present: \[0, 1\]"):
        sensor.read([5])


def test_nvidia_smi_failure_is_a_sensor_error():
    with pytest.raises(g.GpuSensorError, match="rc=9"):
        g.NvidiaSmiSensor(SMI, runner_for("", rc=9)).read()


def test_nvidia_smi_missing_executable():
    with pytest.raises(g.GpuSensorError, match="not found"):
        g.NvidiaSmiSensor("/nonexistent/nvidia-smi")


# --------------------------------------------------------------------------- NVML sensor with a fake pynvml


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - the bindings' name
    pass


def fake_pynvml(*, gb10: bool = True, count: int = 1, init_fails: bool = False, new_api: bool = True) -> Any:
    state = {"init": 0, "shutdown": 0}

    def not_supported(*_: Any) -> Any:
        raise NVMLError_NotSupported("Not Supported")

    def init() -> None:
        if init_fails:
            raise NVMLError("Driver Not Loaded")
        state["init"] += 1

    nv = SimpleNamespace(
        NVMLError=NVMLError,
        NVML_TEMPERATURE_GPU=0,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        state=state,
        nvmlInit=init,
        nvmlShutdown=lambda: state.__setitem__("shutdown", state["shutdown"] + 1),
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetName=lambda h: b"NVIDIA GB10" if gb10 else "NVIDIA H200",  # old bindings return bytes
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetTemperature=lambda h, sensor: 52 if sensor == 0 else not_supported(),
        nvmlDeviceGetPowerUsage=lambda h: 11250,  # milliwatts
        nvmlDeviceGetClockInfo=lambda h, clk: {1: 2405, 2: None}[clk] if clk == 1 or not gb10 else not_supported(),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=96, memory=0),
        nvmlDeviceGetMemoryInfo=(
            not_supported if gb10 else lambda h: SimpleNamespace(used=2 * 2**30, total=141 * 2**30, free=0)
        ),
        nvmlDeviceGetPerformanceState=lambda h: 0,
    )
    if new_api:
        nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4
    else:
        nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x20
    return nv


def test_nvml_sensor_gb10_reads_none_for_unsupported_fields():
    nv = fake_pynvml()
    sensor = g.NvmlSensor(nv)
    (r,) = sensor.read()
    assert r.name == "NVIDIA GB10" and r.uuid == "GPU-h0"
    assert r.temperature_c == 52 and r.power_w == 11.25 and r.sm_clock_mhz == 2405 and r.utilization_pct == 96
    assert r.memory_used_mib is None and r.memory_total_mib is None and r.mem_clock_mhz is None
    assert r.pstate == "P0" and r.throttle_reasons == ["sw_power_cap"]
    sensor.close()
    sensor.close()
    assert nv.state == {"init": 1, "shutdown": 1}


def test_nvml_sensor_discrete_gpu_and_old_throttle_api():
    (r,) = g.NvmlSensor(fake_pynvml(gb10=False, new_api=False)).read([0])
    assert r.name == "NVIDIA H200" and r.memory_used_mib == 2048 and r.memory_total_mib == 141 * 1024
    assert r.throttle_reasons == ["sw_thermal_slowdown"]


def test_nvml_sensor_index_out_of_range():
    with pytest.raises(g.GpuSensorError, match="no GPU with index 3"):
        g.NvmlSensor(fake_pynvml(count=2)).read([3])


def test_open_sensor_auto_prefers_nvml():
    assert g.open_sensor("auto", nvml=fake_pynvml()).kind == "nvml"


def test_open_sensor_auto_falls_back_to_nvidia_smi():
    sensor = g.open_sensor("auto", runner=runner_for(GB10_NOUNITS), nvidia_smi=SMI, nvml=fake_pynvml(init_fails=True))
    assert sensor.kind == "nvidia-smi" and sensor.read()[0].temperature_c == 41


def test_open_sensor_nvml_explicit_does_not_fall_back():
    with pytest.raises(g.GpuSensorError, match="nvmlInit failed: Driver Not Loaded"):
        g.open_sensor("nvml", nvml=fake_pynvml(init_fails=True))


def test_open_sensor_rejects_unknown_kind():
    with pytest.raises(g.GpuSensorError, match="sensor must be one of"):
        g.open_sensor("dcgm")


def test_nvml_sensor_without_pynvml(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    with pytest.raises(g.GpuSensorError, match="pynvml .* is not importable"):
        g.NvmlSensor()
    assert g.open_sensor("auto", runner=runner_for(GB10_NOUNITS), nvidia_smi=SMI).kind == "nvidia-smi"


def test_decode_throttle_reasons():
    assert g.decode_throttle_reasons(0) == []
    assert g.decode_throttle_reasons(0x41) == ["gpu_idle", "hw_thermal_slowdown"]
    assert g.decode_throttle_reasons(0x1000 | 0x4) == ["sw_power_cap", "unknown_0x1000"]
