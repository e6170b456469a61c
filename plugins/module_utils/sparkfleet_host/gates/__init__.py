# Copyright: sparkfleet contributors
# Apache-2.0
"""Preflight gates: is a host fit for benchmarking? The rules behind the ``preflight_check`` module.

A gate is one file in this package declaring a :class:`~.gate.Gate`: its name, its limits (fields), how it
measures the host and how it judges (``gpu_temperature.py`` is an example); :data:`REGISTRY` lists them. Each is
recorded in ``preflight.json`` with what was measured, its limit and its verdict (``pass``; None when it could
not be measured, which ``fail_on_unknown`` decides to fail or only warn about). Sizes are GiB rounded to 2
decimals.

The limits, their defaults and their rules are :data:`LIMIT_FIELDS`: the keys of the module's ``limits``, and
the inventory settings ``sparkfleet_preflight_*`` (the controller's settings table takes these fields).
:func:`evaluate` and the message functions are pure; :func:`measure` reads the host, running commands through a
runner (tests pass fakes).

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Sequence

from ..contract.fields import Field, field_problem
from . import cpu_load, free_disk, free_memory, gpu_processes, gpu_temperature, performance_state
from .gate import Command, CommandRunner, Gate, Probe, Record

#: The gates, in the order they are measured, evaluated, recorded and named in a failure.
REGISTRY = (gpu_temperature.GATE, performance_state.GATE, cpu_load.GATE, free_memory.GATE, free_disk.GATE,
            gpu_processes.GATE)
FAIL_ON_UNKNOWN = Field("sparkfleet_preflight_fail_on_unknown", "bool", False,
                        "Gate: fail a gate whose value is unknown.", option="fail_on_unknown")


def limit_fields(registry: Sequence[Gate]) -> tuple:
    """Every gate's limit fields in the registry's order, then :data:`FAIL_ON_UNKNOWN`."""
    return tuple(f for gate in registry for f in gate.fields) + (FAIL_ON_UNKNOWN,)


#: The gates' names, in the registry's order.
GATES = tuple(gate.name for gate in REGISTRY)
#: The limits: each an inventory setting (its name) and a key of the module's ``limits`` (its ``option``).
LIMIT_FIELDS = limit_fields(REGISTRY)
LIMIT_DEFAULTS = {f.option: f.default for f in LIMIT_FIELDS}

__all__ = ["Command", "CommandRunner", "FAIL_ON_UNKNOWN", "GATES", "Gate", "LIMIT_DEFAULTS", "LIMIT_FIELDS",
           "Probe", "REGISTRY", "Unmeasurable", "evaluate", "failed_gates", "failure_message", "limit_fields",
           "limit_problems", "limit_spec", "measure", "record_text", "unknown_gates", "unknown_warning"]


# --------------------------------------------------------------------------- limits


def limit_spec() -> Dict[str, Dict[str, Any]]:
    """The limits as an Ansible argument spec (type, list elements, default), for the module's ``limits``."""
    spec = {}
    for f in limit_fields(REGISTRY):
        entry = {"type": f.to_ansible_type(), "default": list(f.default) if isinstance(f.default, list)
                 else f.default}
        if f.elements:
            entry["elements"] = f.elements
        spec[f.option] = entry
    return spec


def limit_problems(limits: Mapping[str, Any]) -> List[str]:
    """Problems with the limits (each naming its key) by their fields' rules; [] if fine."""
    problems = []
    for f in limit_fields(REGISTRY):
        if f.option in limits:
            problem = field_problem(f, limits[f.option])
            if problem:
                problems.append("%s %s" % (f.option, problem))
    return problems


# --------------------------------------------------------------------------- measuring and judging


class Unmeasurable(Exception):
    """A gate could not read a figure the host always has (the load, a directory's file system): the task fails."""

    def __init__(self, gate: str, reason: Exception) -> None:
        super().__init__("%s: %s" % (gate, reason))
        self.gate, self.reason = gate, reason


def measure(work_dir: str, nvidia_smi: str, run: CommandRunner) -> Dict[str, Any]:
    """What every gate measured on this host, by gate name; one ``--query-gpu`` of every field the gates read."""
    gpu_fields = []  # type: List[str]
    for gate in REGISTRY:
        gpu_fields += [f for f in gate.gpu_fields if f not in gpu_fields]
    probe = Probe(work_dir, nvidia_smi, run, gpu_fields)
    measured = {}
    for gate in REGISTRY:
        try:
            measured[gate.name] = gate.measure(probe)
        except (OSError, ValueError, IndexError) as exc:
            raise Unmeasurable(gate.name, exc) from exc
    return measured


def evaluate(limits: Mapping[str, Any], measured: Mapping[str, Any]) -> Dict[str, Record]:
    """Every gate's record (``preflight.json``'s ``gates``) from what was measured (:func:`measure`) and
    ``limits`` (every key of :data:`LIMIT_FIELDS`)."""
    return {gate.name: gate.judge(limits, measured[gate.name]) for gate in REGISTRY}


def record_text(host: str, gates: Mapping[str, Mapping[str, Any]]) -> str:
    """``preflight.json``: ``{"host", "gates"}`` as the role wrote it (``to_nice_json``: 4 spaces, sorted keys,
    ASCII), with a final newline."""
    return json.dumps({"host": host, "gates": gates}, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def unknown_gates(gates: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """Gates that could not be measured (``pass`` is None)."""
    return [name for name, gate in gates.items() if gate["pass"] is None]


def failed_gates(gates: Mapping[str, Mapping[str, Any]], fail_on_unknown: bool) -> List[str]:
    """Gates that fail the host: ``pass`` false, or unknown with ``fail_on_unknown``."""
    return [name for name, gate in gates.items()
            if gate["pass"] is False or (gate["pass"] is None and fail_on_unknown)]


def _gate(name: str) -> Gate:
    return next(gate for gate in REGISTRY if gate.name == name)


def failure_message(host: str, gates: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> str:
    """``preflight gate(s) failed on HOST: NAME measured VALUE UNIT (limit LIMIT UNIT); ...``"""
    parts = [_gate(name).failure(name, gates[name]) for name in names]
    return "preflight gate(s) failed on %s: %s" % (host, "; ".join(parts))


def unknown_warning(name: str, gates: Mapping[str, Mapping[str, Any]], measured: Mapping[str, Any]) -> str:
    """The warning for a gate that could not be measured, with the gate's reason."""
    return "preflight gate %s could not be measured: %s" % (name, _gate(name).unknown(gates[name], measured[name]))
