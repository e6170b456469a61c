"""Issue 34: a new preflight gate is one file. A Gate declared on its own (here: fans, read from a file in the
work dir, and a --query-gpu field) and listed in the registry is measured, judged, recorded and named in the
messages; preflight_check takes its limit, checked by its field; its field is a limit field, which the
controller's settings table takes; the role passes the limits without naming any gate."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from _ansible_modules import STANDINS, host_util, load_module, run_module

gates = host_util("gates")
fields = host_util("fields")
Command = gates.Command
REPO = Path(__file__).resolve().parents[4]

MAX_FANS = fields.Field("sparkfleet_preflight_max_fans", "int", 2, "Gate: fans spinning.", "", 0, 100,
                        option="max_fans")


def measure(probe) -> int:
    with open(os.path.join(probe.work_dir, "fans"), encoding="ascii") as fh:
        return int(fh.read())


def judge(limits: dict[str, Any], fans: int) -> dict[str, Any]:
    limit = int(limits["max_fans"])
    return {"value": fans, "limit": limit, "unit": "fans", "pass": fans <= limit}


#: What the new gate's file would hold.
FANS = gates.Gate("fans", (MAX_FANS,), measure, judge, gpu_fields=("fan.speed",))


@pytest.fixture
def registry(monkeypatch):
    """The registry with the new gate listed last."""
    monkeypatch.setattr(gates, "REGISTRY", gates.REGISTRY + (FANS,))


def test_the_new_gate_is_measured_judged_recorded_and_named(registry, tmp_path):
    (tmp_path / "fans").write_text("3\n")
    calls = []

    def run(argv):
        calls.append(argv[1])
        return Command(0, "0, 38, P8, 40\n") if argv[1].startswith("--query-gpu") else Command(0)

    measured = gates.measure(str(tmp_path), "nvidia-smi", run)
    assert calls[0] == "--query-gpu=index,temperature.gpu,pstate,fan.speed"  # still one query
    assert measured["fans"] == 3
    limits = {**gates.LIMIT_DEFAULTS, "max_fans": 2}
    record = gates.evaluate(limits, measured)
    assert list(record) == [*gates.GATES, "fans"]
    assert record["fans"] == {"value": 3, "limit": 2, "unit": "fans", "pass": False}
    assert gates.failed_gates(record, fail_on_unknown=False)[-1] == "fans"
    assert gates.failure_message("h", record, ["fans"]) == "preflight gate(s) failed on h: fans measured 3 fans " \
                                                           "(limit 2 fans)"
    assert '"fans": {\n' in gates.record_text("h", record)
    assert gates.limit_problems({"max_fans": 101}) == ["max_fans must be at most 100, got 101"]
    assert gates.limit_spec()["max_fans"] == {"type": "int", "default": 2}


def test_preflight_check_takes_the_new_gates_limit(registry, tmp_path, monkeypatch):
    (tmp_path / "fans").write_text("1\n")
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_STATE", str(tmp_path / "fake-gpu.json"))
    args = {"host": "spark1", "work_dir": str(tmp_path), "results_dir": str(tmp_path / "results"),
            "limits": {"max_load_per_cpu": 1000, "min_free_memory_gib": 0, "min_free_disk_gib": 0, "max_fans": 0}}
    res = run_module(load_module("preflight_check"), args, check_mode=True)
    assert res["gates"]["fans"] == {"value": 1, "limit": 0, "unit": "fans", "pass": False}
    assert "fans measured 1 fans (limit 0 fans)" in res["msg"]
    res = run_module(load_module("preflight_check"), {**args, "limits": {"max_fans": "x"}}, check_mode=True)
    assert res["failed"] is True and "'max_fans' is of type str and we were unable to convert to int" in res["msg"]


def test_the_new_gates_field_is_a_limit_field_and_so_a_setting():
    assert gates.limit_fields(gates.REGISTRY + (FANS,)) == (*gates.LIMIT_FIELDS[:-1], MAX_FANS, gates.FAIL_ON_UNKNOWN)
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning, settings  # noqa: PLC0415

    assert gates.limit_fields(gates.REGISTRY) == gates.LIMIT_FIELDS
    # the settings table takes the limit fields whole (settings.py: *LIMIT_FIELDS)
    assert all(settings.SETTINGS_BY_NAME[f.name] is f for f in gates.LIMIT_FIELDS)
    # and the host's plan carries each under its key, which the role passes whole
    assert {f.option: f.name for f in gates.LIMIT_FIELDS}.items() <= planning.PLAN_GROUPS["preflight"].items()


def test_the_role_passes_the_limits_without_naming_a_gate():
    task, = yaml.safe_load((REPO / "roles" / "preflight_gates" / "tasks" / "main.yml").read_text())
    assert task["sparkfleet.bench.preflight_check"]["limits"] == "{{ sparkfleet_plan.preflight }}"
    assert not {f.option for f in gates.LIMIT_FIELDS} & set(task["sparkfleet.bench.preflight_check"])
