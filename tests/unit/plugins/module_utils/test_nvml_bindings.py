"""NVML on every GPU host (issue 35), the host side: bench_run imports pynvml from the nvml role's bindings directory
ahead of any other (gpu.use_bindings), so the cooldown, the readiness probe's readings and the telemetry read NVML
in its own process; a record says which sensor read, what NVML was read through, and why NVML did not read."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module, sparkfleet_gpu
from _fake_nvml import isolated_bindings, make_bindings

gpu = sparkfleet_gpu
telemetry = host_util("telemetry")
host_state = host_util("host_state")
record = host_util("record")

NOTE = "pip could not install nvidia-ml-py==13.615.71 (ERROR: No matching distribution found): nothing installed"


@pytest.fixture
def isolated():
    with isolated_bindings():
        yield


@pytest.fixture
def no_pynvml(isolated, monkeypatch):
    """No pynvml importable, whatever this machine has installed."""
    sys.modules["pynvml"] = None  # `import pynvml` raises ImportError; isolated_bindings puts it back


@pytest.fixture
def standin(monkeypatch, tmp_path):
    """The nvidia-smi stand-in first on PATH (a GB10 at idle), with its own state file."""
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_STATE", str(tmp_path / "gpu.json"))
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_MODEL", "gb10")


# ------------------------------------------------------------------------------------------- the pin


def test_the_pin_is_one_release_and_its_wheel():
    assert gpu.NVML_PACKAGE == "nvidia-ml-py" and gpu.NVML_VERSION.count(".") == 2
    assert f"nvidia_ml_py-{gpu.NVML_VERSION}-py3-none-any.whl" == gpu.NVML_WHEEL
    assert len(gpu.NVML_WHEEL_SHA256) == 64 and int(gpu.NVML_WHEEL_SHA256, 16) >= 0


# --------------------------------------------------------------------------------- use_bindings


def test_the_bindings_directory_comes_first_and_is_named_in_what_nvml_read_through(tmp_path, isolated):
    bindings = make_bindings(tmp_path / "clients" / f"nvidia-ml-py-{gpu.NVML_VERSION}")
    path = list(sys.path)
    assert gpu.use_bindings(str(bindings)) == str(bindings)
    sensor = gpu.open_sensor("auto")
    try:
        assert sensor.kind == "nvml" and sensor.note is None
        assert sensor.read()[0].name == "NVIDIA H100 80GB HBM3"
        assert gpu.bindings(sensor.nvml) == f"nvidia-ml-py {gpu.NVML_VERSION} ({bindings})"
    finally:
        sensor.close()
    assert sys.modules["pynvml"].__file__ == str(bindings / "pynvml.py") and sys.path == path  # the path untouched


def test_the_bindings_come_before_the_ones_the_python_has(tmp_path, isolated):
    """A pynvml the module's Python has (here: one on its import path) is not the one read."""
    own = make_bindings(tmp_path / "site", version="12.535.77")
    sys.path.insert(0, str(own))  # isolated_bindings puts the path back
    pinned = make_bindings(tmp_path / "pinned")
    gpu.use_bindings(str(pinned))
    nvml = gpu.load_nvml()
    try:
        assert gpu.bindings(nvml) == f"nvidia-ml-py {gpu.NVML_VERSION} ({pinned})"
    finally:
        gpu.shutdown_nvml(nvml)


def test_broken_bindings_read_as_none(tmp_path, isolated):
    broken = make_bindings(tmp_path / "b")
    (broken / "pynvml.py").write_text("raise OSError('half a file')\n")
    gpu.use_bindings(str(broken))
    with pytest.raises(gpu.GpuSensorError, match=f"pynvml in {broken} does not load: OSError: half a file"):
        gpu.load_nvml()
    assert "pynvml" not in sys.modules


def test_without_bindings_the_note_says_why_and_auto_reads_nvidia_smi(standin, no_pynvml):
    assert gpu.use_bindings("", NOTE) is None
    with pytest.raises(gpu.GpuSensorError, match=r"pynvml \(nvidia-ml-py\) is not importable: .*pip could not"):
        gpu.load_nvml()
    sensor = gpu.open_sensor("auto")
    assert sensor.kind == "nvidia-smi" and sensor.note.startswith("nvml: pynvml (nvidia-ml-py) is not importable")
    assert NOTE in sensor.note


def test_a_directory_without_pynvml_is_not_put_on_the_path(tmp_path, no_pynvml):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert gpu.use_bindings(str(empty), "why") is None
    with pytest.raises(gpu.GpuSensorError, match=f"no pynvml.py in {empty}; why"):
        gpu.load_nvml()


def test_a_failing_nvml_init_names_the_bindings(tmp_path, isolated):
    bindings = make_bindings(tmp_path / "b")
    (bindings / "pynvml.py").write_text((bindings / "pynvml.py").read_text().replace(
        "def nvmlInit():\n    pass", "def nvmlInit():\n    raise NVMLError('NVML Shared Library Not Found')"))
    gpu.use_bindings(str(bindings))
    with pytest.raises(gpu.GpuSensorError, match=r"nvmlInit failed: NVML Shared Library Not Found \(through "
                                                 rf"nvidia-ml-py {gpu.NVML_VERSION} \({bindings}\)\)"):
        gpu.load_nvml()


def test_bindings_of_a_module_without_metadata_or_file():
    assert gpu.bindings(object()) is None
    assert gpu.bindings(type("M", (), {"__file__": "/x/pynvml.py"})) == "pynvml (/x/pynvml.py)"


# ------------------------------------------------------------------------------------ telemetry


def test_telemetry_says_it_read_nvml_and_through_what(tmp_path, isolated):
    bindings = make_bindings(tmp_path / "b")
    gpu.use_bindings(str(bindings))
    summary = telemetry.TelemetrySampler(str(tmp_path / "t.csv"), interval_s=0.05, sensor="auto")
    summary.start()
    summary = summary.stop()
    assert summary["sensor"] == "nvml" and summary["sensor_note"] is None and summary["errors"] == []
    assert summary["nvml_bindings"] == f"nvidia-ml-py {gpu.NVML_VERSION} ({bindings})"
    assert summary["processes_spawned"] == 0 and summary["samples"] >= 1 and summary["gpu_temp_c_max"] == 33.0


def test_telemetry_says_why_it_read_nvidia_smi(tmp_path, standin, no_pynvml):
    gpu.use_bindings("", NOTE)
    sampler = telemetry.TelemetrySampler(str(tmp_path / "t.csv"), interval_s=0.05, sensor="auto")
    sampler.start()
    summary = sampler.stop()
    assert summary["sensor"] == "nvidia-smi" and summary["nvml_bindings"] is None
    assert summary["sensor_note"].startswith("nvml: pynvml (nvidia-ml-py) is not importable") and NOTE in summary[
        "sensor_note"]
    assert summary["errors"] == []  # a fallback under auto is no error


def test_telemetry_without_any_gpu_sensor_says_both(tmp_path, monkeypatch, no_pynvml):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    gpu.use_bindings("", "no GPU on this host: nvidia-smi lists none")
    sampler = telemetry.TelemetrySampler(str(tmp_path / "t.csv"), interval_s=0.05, sensor="auto")
    sampler.start()
    summary = sampler.stop()
    assert summary["sensor"] == "none" and "no GPU on this host" in summary["sensor_note"]
    assert summary["sensor_note"].endswith("nvidia-smi not found on PATH: no GPU sensor")


def test_an_explicit_nvidia_smi_sensor_has_no_note(tmp_path, standin):
    sampler = telemetry.TelemetrySampler(str(tmp_path / "t.csv"), interval_s=0.05, sensor="nvidia-smi")
    sampler.start()
    summary = sampler.stop()
    assert summary["sensor"] == "nvidia-smi" and summary["sensor_note"] is None and summary["nvml_bindings"] is None


# ------------------------------------------------------------------------------------ readiness


def _load_script(tmp_path: Path) -> str:
    path = tmp_path / "load.py"
    path.write_text("import json, sys, time\n"
                    f"print({host_state.LOAD_STARTED!r}, flush=True)\n"
                    "time.sleep(float(sys.argv[sys.argv.index('--seconds') + 1]))\n"
                    "print(json.dumps({'mode': 'load', 'backend': 'fake'}))\n")
    return str(path)


@pytest.mark.parametrize("with_bindings", [True, False])
def test_the_readiness_probe_reads_nvml_in_process_or_says_why_not(tmp_path, standin, isolated, with_bindings):
    if with_bindings:
        gpu.use_bindings(str(make_bindings(tmp_path / "b")))
    else:
        sys.modules["pynvml"] = None
        gpu.use_bindings("", NOTE)
    section = host_state.readiness_probe({"probe_s": 0.6}, None, True, script=_load_script(tmp_path),
                                         python=sys.executable, sample_interval_s=0.05)
    if with_bindings:
        assert section["sensor"] == "nvml" and section["sensor_note"] is None
    else:
        assert section["sensor"] == "nvidia-smi" and NOTE in section["sensor_note"]
    assert section["samples"] >= 1


# ------------------------------------------------------------------------------------ bench_run


def _bench_run(tmp_path: Path, nvml: dict) -> dict:
    workload = {"name": "t", "engine": "trtllm", "preset": "T1", "requests": 2}
    environment = {"name": "bare", "kind": "bare"}
    runs = [{"run_id": record.run_id("c1", "h1", "m", "bare", "t", 1), "order_index": 0,
             "model": {"name": "m", "path": str(STANDINS)}, "environment": environment, "workload": workload,
             "iteration": 1, "warmup": False}]
    args = {"runs": runs, "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
            "cooldown": {"enabled": False}, "timeout_s": 60, "telemetry_interval_s": 0.05,
            "readiness": {"probe_s": 0}, "nvml": nvml,
            "trtllm": {"version": "1.1.0rc3",
                       "surface": {"prepare_dataset_script": str(STANDINS / "prepare_dataset.py")}},
            "env": {"SPARKFLEET_FAKE_RUNTIME_S": "0.3", "SPARKFLEET_FAKE_ALLOC_MIB": "1"}}
    out = run_module(load_module("bench_run"), args)
    assert not out.get("failed"), out
    rec = json.loads(Path(out["runs"][0]["record_path"]).read_text())
    assert rec["status"] == "ok", rec["reason"]
    assert record.validate(rec) == []
    return rec


def test_bench_run_reads_the_roles_bindings_and_its_record_says_so(tmp_path, standin, isolated):
    bindings = make_bindings(tmp_path / "work" / "clients" / f"nvidia-ml-py-{gpu.NVML_VERSION}")
    rec = _bench_run(tmp_path, {"path": str(bindings), "note": ""})
    tel = rec["telemetry"]
    assert tel["sensor"] == "nvml" and tel["sensor_note"] is None
    assert tel["nvml_bindings"] == f"nvidia-ml-py {gpu.NVML_VERSION} ({bindings})"
    assert rec["memory"]["start"]["cuda"]["source"] == "nvml"  # the memory state reads it too


def test_bench_run_without_bindings_records_the_roles_note(tmp_path, standin, no_pynvml):
    rec = _bench_run(tmp_path, {"path": "", "note": NOTE})
    tel = rec["telemetry"]
    assert tel["sensor"] == "nvidia-smi" and tel["nvml_bindings"] is None and NOTE in tel["sensor_note"]
