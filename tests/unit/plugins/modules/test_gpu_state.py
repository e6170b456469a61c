"""gpu_state against the nvidia-smi stand-in on PATH, a temp sysfs tree and a temp drop_caches file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from _ansible_modules import STANDINS, host_util, load_module, run_module

gpu_control = host_util("gpu_control")
task = host_util("task")

GOVERNORS = "conservative ondemand userspace powersave performance schedutil"


class Host:
    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
        self.tmp = tmp
        self.fake_state = tmp / "fake-gpu.json"
        self.cpu_root = tmp / "sys" / "devices" / "system" / "cpu"
        self.drop = tmp / "drop_caches"
        self.drop.write_text("")
        self.record = tmp / "run" / "gpu-state.json"
        for i in range(4):
            d = self.cpu_root / f"cpu{i}" / "cpufreq"
            d.mkdir(parents=True)
            (d / "scaling_governor").write_text("ondemand\n")
            (d / "scaling_available_governors").write_text(GOVERNORS + "\n")
        (self.cpu_root / "cpufreq").mkdir()  # not a cpuN directory: ignored
        monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("SPARKFLEET_FAKE_GPU_STATE", str(self.fake_state))
        monkeypatch.setenv("SPARKFLEET_FAKE_GPU_MODEL", model)
        monkeypatch.delenv("SPARKFLEET_FAKE_GPU_LOAD", raising=False)
        monkeypatch.delenv("SPARKFLEET_FAKE_GPU_IGNORE_SETS", raising=False)

    def args(self, **kw: Any) -> dict[str, Any]:
        return {
            "cpu_sysfs_root": str(self.cpu_root),
            "drop_caches_path": str(self.drop),
            "state_file": str(self.record),
            **kw,
        }

    def fake_gpu(self) -> dict[str, Any]:
        return json.loads(self.fake_state.read_text())["gpus"]["0"]

    def governors(self) -> list[str]:
        return [(self.cpu_root / f"cpu{i}/cpufreq/scaling_governor").read_text().strip() for i in range(4)]


@pytest.fixture
def gs():
    return load_module("gpu_state")


@pytest.fixture
def h200(tmp_path, monkeypatch) -> Host:
    return Host(tmp_path, monkeypatch, "h200")


@pytest.fixture
def gb10(tmp_path, monkeypatch) -> Host:
    return Host(tmp_path, monkeypatch, "gb10")


PIN = {
    "persistence_mode": False,
    "locked_clocks": {"min": 1200, "max": 1500},
    "power_limit": 500,
    "cpu_governor": "performance",
}


def test_query_reads_without_changing(gs, gb10):
    res = run_module(gs, gb10.args(state="query"))
    assert res["changed"] is False and res["before"] == res["after"]
    gpu = res["before"]["gpus"][0]
    assert gpu["name"] == "NVIDIA GB10" and gpu["index"] == 0
    assert gpu["persistence_mode"] is True
    assert gpu["power_limit"] is None and gpu["power_max_limit"] is None  # no power cap on a GB10
    assert gpu["clocks_max_sm"] == 3003 and gpu["locked_clocks"] is None
    assert res["before"]["cpu_governor"] == "ondemand"
    assert res["before"]["cpu_governors"] == {f"cpu{i}": "ondemand" for i in range(4)}
    assert not gb10.record.exists()


def test_set_then_idempotent(gs, h200):
    res = run_module(gs, h200.args(**PIN, drop_caches=True))
    assert "failed" not in res, res
    assert res["changed"] is True and res["dropped_caches"] is True
    assert res["changes"] == [
        "GPU 0: persistence_mode true -> false",
        "GPU 0: power_limit 700.0 -> 500.0",
        "GPU 0: locked_clocks none -> 1200,1500",
        "cpu_governor (cpu0): ondemand -> performance",
        "cpu_governor (cpu1): ondemand -> performance",
        "cpu_governor (cpu2): ondemand -> performance",
        "cpu_governor (cpu3): ondemand -> performance",
    ]
    after = res["after"]["gpus"][0]
    assert after["persistence_mode"] is False and after["power_limit"] == 500
    assert after["locked_clocks"] == {"min": 1200, "max": 1500}
    assert res["after"]["cpu_governor"] == "performance"
    assert res["before"]["gpus"][0]["power_limit"] == 700
    # The stand-in's own state and the host files really changed.
    fake = h200.fake_gpu()
    assert fake["persistence"] is False and fake["power_limit"] == 500 and fake["locked_clocks"] == [1200, 1500]
    assert h200.governors() == ["performance"] * 4
    assert h200.drop.read_text() == "3\n"
    assert res["diff"]["before"]["gpu0"]["power_limit"] == 700
    assert res["diff"]["after"]["gpu0"]["locked_clocks"] == {"min": 1200, "max": 1500}

    again = run_module(gs, h200.args(**PIN))
    assert again["changed"] is False and again["changes"] == [] and "diff" not in again
    assert again["before"] == again["after"]


def test_check_mode_runs_no_setter(gs, h200):
    run_module(gs, h200.args(state="query"))  # let the stand-in create its state file
    fake_before = h200.fake_state.read_text()
    res = run_module(gs, h200.args(**PIN, drop_caches=True), check_mode=True)
    assert res["changed"] is True and res["dropped_caches"] is False
    assert len(res["changes"]) == 7
    assert res["after"]["gpus"][0]["power_limit"] == 500  # predicted
    assert json.loads(h200.fake_state.read_text())["gpus"] == json.loads(fake_before)["gpus"]
    assert h200.governors() == ["ondemand"] * 4
    assert h200.drop.read_text() == ""
    assert not h200.record.exists()


def test_restore_from_saved(gs, h200):
    pinned = run_module(gs, h200.args(**PIN))
    restored = run_module(gs, h200.args(state="restore", saved=pinned["before"]))
    assert "failed" not in restored, restored
    assert restored["changed"] is True
    assert "GPU 0: locked_clocks 1200,1500 -> none" in restored["changes"]
    gpu = restored["after"]["gpus"][0]
    assert gpu["persistence_mode"] is True and gpu["power_limit"] == 700 and gpu["locked_clocks"] is None
    assert h200.governors() == ["ondemand"] * 4
    assert h200.fake_gpu()["locked_clocks"] is None
    assert json.loads(h200.record.read_text()) == {"locked_clocks": {"0": None}}
    again = run_module(gs, h200.args(state="restore", saved=pinned["before"]))
    assert again["changed"] is False


def test_restore_leaves_clocks_it_did_not_lock(gs, h200):
    before = run_module(gs, h200.args(state="query"))["before"]
    res = run_module(gs, h200.args(state="restore", saved=before))
    assert res["changed"] is False and res["changes"] == []


def test_reset_locked_clocks_when_unknown_then_idempotent(gs, h200):
    first = run_module(gs, h200.args(reset_locked_clocks=True))
    assert first["changes"] == ["GPU 0: locked_clocks none -> none"] and first["changed"] is True
    second = run_module(gs, h200.args(reset_locked_clocks=True))
    assert second["changed"] is False


def test_gb10_power_limit_is_unsupported_not_a_failure(gs, gb10):
    res = run_module(gs, gb10.args(power_limit=100, persistence_mode=True))
    assert "failed" not in res
    assert res["unsupported"] == ["power_limit"]
    assert res["changed"] is False  # persistence already on, power limit skipped
    # ansible-core 2.19 returns warnings as structured events; the text is what matters.
    assert "power_limit: not supported by GPU 0 (NVIDIA GB10): power.limit is [N/A]" in json.dumps(res["warnings"])


def test_gb10_locks_clocks(gs, gb10):
    res = run_module(gs, gb10.args(locked_clocks={"min": 2405, "max": 2405}))
    assert res["changed"] is True and res["unsupported"] == []
    assert gb10.fake_gpu()["locked_clocks"] == [2405, 2405]


def test_verification_failure_names_the_control(gs, h200, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_IGNORE_SETS", "pm")
    res = run_module(gs, h200.args(persistence_mode=False))
    assert res["failed"] is True
    assert res["msg"] == "persistence_mode did not take on GPU 0: set false, reads true"


def test_power_limit_verification(gs, h200, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_IGNORE_SETS", "pl")
    res = run_module(gs, h200.args(power_limit=450))
    assert res["failed"] is True and res["msg"].startswith("power_limit did not take on GPU 0")


def test_governor_verification(gs, h200, monkeypatch):
    gs_writes: list[str] = []

    def lazy_write(self, cpu: str, governor: str) -> None:  # the kernel refused silently
        gs_writes.append(cpu)

    monkeypatch.setattr(gpu_control.GpuState, "write_governor", lazy_write)
    res = run_module(gs, h200.args(cpu_governor="performance"))
    assert res["failed"] is True and res["msg"].startswith("cpu_governor did not take on cpu0")
    assert gs_writes == ["cpu0", "cpu1", "cpu2", "cpu3"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"power_limit": 900}, "power_limit 900 W is outside GPU 0 (NVIDIA H200)'s range 200-700 W"),
        ({"power_limit": -5}, "power_limit must be greater than 0"),
        ({"cpu_governor": "turbo"}, "cpu_governor 'turbo' is not available"),
        ({"locked_clocks": {"min": 2000, "max": 1000}}, "locked_clocks: min (2000) must not exceed max (1000)"),
        ({"locked_clocks": {"min": 1, "max": 2}, "reset_locked_clocks": True}, "mutually exclusive"),
        ({"state": "restore"}, "saved"),
        ({"state": "query", "power_limit": 300}, "power_limit cannot be used with state=query"),
        ({"state": "restore", "saved": {"nope": 1}}, "saved must be the 'before'"),
        ({"gpus": [3]}, "gpus: no GPU with index [3]"),
        ({"gpus": []}, "gpus must be a non-empty list"),
    ],
)
def test_bad_input_fails_before_any_setter(gs, h200, args, needle):
    res = run_module(gs, h200.args(**args))
    assert res["failed"] is True and needle in res["msg"], res["msg"]
    assert h200.governors() == ["ondemand"] * 4
    if h200.fake_state.exists():
        assert h200.fake_gpu()["power_limit"] == 700


def test_no_cpufreq_reports_governor_unsupported(gs, h200, tmp_path):
    empty = tmp_path / "nocpufreq"
    empty.mkdir()
    res = run_module(gs, h200.args(cpu_governor="performance", cpu_sysfs_root=str(empty)))
    assert "failed" not in res and res["unsupported"] == ["cpu_governor"] and res["changed"] is False
    assert res["before"]["cpu_governors"] == {} and res["before"]["cpu_governor"] is None


def test_missing_nvidia_smi_fails_clearly(gs, h200):
    res = run_module(gs, h200.args(state="query", nvidia_smi="/nonexistent/nvidia-smi"))
    assert res["failed"] is True and "nvidia-smi not found" in res["msg"]


def test_host_without_a_gpu_reports_gpu_controls_unsupported(gs, h200, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi anywhere: a host without an NVIDIA driver
    res = run_module(gs, h200.args(persistence_mode=True, power_limit=300.0))
    assert not res.get("failed"), res
    assert res["changed"] is False and res["before"]["gpus"] == []
    assert set(res["unsupported"]) == {"persistence_mode", "power_limit"}


def test_only_selected_gpus(gs, h200, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_COUNT", "2")
    res = run_module(gs, h200.args(gpus=[1], persistence_mode=False))
    assert [g["index"] for g in res["before"]["gpus"]] == [1]
    assert res["changes"] == ["GPU 1: persistence_mode true -> false"]
    state = json.loads(h200.fake_state.read_text())["gpus"]
    assert state["0"]["persistence"] is True and state["1"]["persistence"] is False


def test_the_work_runs_without_ansible_module(h200):
    """The module is its argument spec and one call: gpu_control.apply takes plain params and a Task."""
    warnings: list[str] = []
    params = {"state": "present", "gpus": None, "persistence_mode": None, "locked_clocks": None,
              "reset_locked_clocks": False, "power_limit": None, "cpu_governor": "performance", "drop_caches": False,
              "saved": None, "nvidia_smi": "nvidia-smi", **h200.args()}
    run = host_util("gpu").subprocess_runner
    planned = gpu_control.apply(params, task.Task(run, lambda *a, **k: None, warnings.append, check_mode=True))
    assert planned["changed"] is True and planned["after"]["cpu_governor"] == "performance"
    assert h200.governors() == ["ondemand"] * 4 and warnings == []
    with pytest.raises(task.TaskFailed, match="power_limit must be greater than 0"):
        gpu_control.apply({**params, "power_limit": -1.0}, task.Task(run, lambda *a, **k: None, warnings.append))


def test_docs_are_valid_yaml(gs):
    import yaml

    doc = yaml.safe_load(gs.DOCUMENTATION)
    assert {"state", "persistence_mode", "locked_clocks", "power_limit", "cpu_governor", "drop_caches",
            "saved", "cpu_sysfs_root", "drop_caches_path", "state_file"} <= set(doc["options"])
    assert {"before", "after", "changes", "unsupported", "diff"} <= set(yaml.safe_load(gs.RETURN))
    yaml.safe_load(gs.EXAMPLES)
