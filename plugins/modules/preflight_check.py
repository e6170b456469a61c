#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Ansible module: check that a host is fit for benchmarking and record every gate in preflight.json."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_check
short_description: Checks that a host is fit for benchmarking and records every gate in preflight.json
version_added: 0.1.0
description:
  - 'Measures every preflight I(gate) on the host, compares each with its limit, writes every measured value,
    limit and verdict to C(preflight.json) in O(results_dir), and fails naming every failed gate with its
    measured value, unit and limit, for example V(preflight gate(s\) failed on spark2: gpu_temperature measured
    85.0 C (limit 60.0 C\)).'
  - The gates are the collection's registry, one file each under C(plugins/module_utils/sparkfleet_host/gates/)
    saying what the gate reads on the host (C(nvidia-smi), C(/proc), C(statvfs) of O(work_dir)), its limits and
    how it judges; they are measured, recorded and named in the registry's order.
  - Memory and disk are recorded in GiB rounded to two decimals.
  - A gate that cannot be measured (no C(nvidia-smi), no GPU, a query the driver refuses) is recorded with
    C(pass) V(null) and an C(error); it is a warning, or with C(fail_on_unknown) in O(limits) a failed gate. The
    load, memory and disk figures are always there on Linux; the task fails if they cannot be read (for
    instance when O(work_dir) does not exist) and then writes nothing.
  - Reads only; the one file it writes is C(preflight.json), and only when its content differs.
options:
  host:
    description: The host's name in the record and in the failure message (give it C(inventory_hostname)).
    type: str
    required: true
  work_dir:
    description: A directory on the file system the free disk gate checks (the per-host work directory).
    type: path
    required: true
  results_dir:
    description:
      - Where C(preflight.json) is written (beside C(host.json)). Created, with its missing parents, with mode
        C(0755) where it is missing; the file gets mode C(0644).
    type: path
    required: true
  limits:
    description:
      - "The gates' limits by key, for example V({max_gpu_temp_c: 45, pstates: [P0]}); a key left out takes its
        default. Values are converted as options are (V('30') is a number)."
      - The keys, their types, defaults and ranges are the gates' own (each gate's file declares them). They are the
        collection's C(sparkfleet_preflight_*) settings without that prefix (the README's settings table), and
        C(fail_on_unknown), which fails a gate that cannot be measured (C(pass) V(null)) instead of warning.
      - The role passes the host's plan for the gates, C(sparkfleet_plan.preflight), whole; its
        C(max_fail_percentage) is the play's, accepted and not used here.
    type: dict
    default: {}
  nvidia_smi:
    description: Name or path of the C(nvidia-smi) executable (looked up on the host's C(PATH)).
    type: str
    default: nvidia-smi
attributes:
  check_mode:
    support: full
    description:
      - Measures and judges as in a normal run (it only reads) and fails on a failed gate the same way, but does
        not write C(preflight.json); C(changed) says whether it would have changed, as
        M(sparkfleet.bench.result_files) does in check mode.
  diff_mode:
    support: full
    description: A before/after diff of C(preflight.json) when it changes (or would).
  platform:
    support: full
    platforms: posix
    description: Linux hosts (C(/proc/loadavg), C(/proc/meminfo)); C(nvidia-smi) for the GPU gates.
notes:
  - C(changed) is V(true) when C(preflight.json) was written, which is nearly every run, since the load and the
    free memory move.
seealso:
  - module: sparkfleet.bench.result_files
  - module: sparkfleet.bench.thermal_wait
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Check the host against the default limits; record preflight.json beside host.json
  sparkfleet.bench.preflight_check:
    host: "{{ inventory_hostname }}"
    work_dir: /var/lib/sparkfleet
    results_dir: "/var/lib/sparkfleet/results/sanity/{{ inventory_hostname }}"

- name: Stricter gates - GPUs in P0 and at most 45 C, and fail a host whose GPU cannot be read
  sparkfleet.bench.preflight_check:
    host: "{{ inventory_hostname }}"
    work_dir: /var/lib/sparkfleet
    results_dir: "/var/lib/sparkfleet/results/study/{{ inventory_hostname }}"
    limits:
      max_gpu_temp_c: 45
      pstates: [P0]
      fail_on_unknown: true
  register: preflight
"""

RETURN = r"""
host:
  description: The O(host) recorded.
  returned: always
  type: str
  sample: spark1
path:
  description: The path of C(preflight.json).
  returned: always
  type: str
  sample: /var/lib/sparkfleet/results/sanity/spark1/preflight.json
gates:
  description:
    - Every gate's record, as written to C(preflight.json) under C(gates). Each has C(value) (what was measured;
      V(null) when it could not be, V([]) for C(performance_state)), C(limit) and C(pass) (V(true), V(false), or V(null) when not measured);
      C(unit) where there is one; C(gpu_temperature) and C(gpu_processes) an C(error) (empty when measured);
      C(cpu_load) the online C(cpus); C(free_disk) the C(path) checked; C(gpu_processes) the C(processes) lines.
  returned: always
  type: dict
  sample:
    gpu_temperature: {value: 38.0, limit: 60.0, unit: C, pass: true, error: ""}
    performance_state: {value: [P8], limit: [], pass: true}
    cpu_load: {value: 0.42, limit: 8.0, cpus: 16, pass: true}
    free_memory: {value: 101.37, limit: 8.0, unit: GiB, pass: true}
    free_disk: {value: 812.5, limit: 20.0, unit: GiB, path: /var/lib/sparkfleet, pass: true}
    gpu_processes: {value: 0, limit: 0, processes: [], pass: true, error: ""}
failed_gates:
  description: Names of the gates that failed the host (with C(fail_on_unknown) in O(limits), also those not measured).
  returned: always
  type: list
  elements: str
  sample: [gpu_temperature]
unknown_gates:
  description: Names of the gates that could not be measured (C(pass) V(null)).
  returned: always
  type: list
  elements: str
  sample: [gpu_processes]
msg:
  description: A one-line summary; on failure, every failed gate with its measured value, unit and limit.
  returned: always
  type: str
  sample: "preflight gate(s) failed on spark2: gpu_temperature measured 85.0 C (limit 60.0 C)"
"""

import os  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # noqa: E402
from ansible.module_utils.errors import UnsupportedError  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.textfile import (  # noqa: E402
    write_text_if_changed,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.gates import (  # noqa: E402
    Command,
    Unmeasurable,
    evaluate,
    failed_gates,
    failure_message,
    limit_problems,
    limit_spec,
    measure,
    record_text,
    unknown_gates,
    unknown_warning,
)

RECORD = "preflight.json"
#: The plan's preflight group, which the role passes whole as ``limits``, also carries the play's
#: max_fail_percentage: accepted, no gate's.
PLAY_LIMITS = {"max_fail_percentage": dict(type="raw")}


def checked_limits(module: AnsibleModule, given: dict[str, Any]) -> dict[str, Any]:
    """Every gate's limits: ``given`` with the gates' defaults, converted as options are and checked by the
    gates' rules; a bad or unknown key fails the task."""
    result = ArgumentSpecValidator({**limit_spec(), **PLAY_LIMITS}).validate(given)
    problems = [f"limits: {'unknown key ' if isinstance(e, UnsupportedError) else ''}{e}" for e in result.errors]
    problems = problems or limit_problems(result.validated_parameters)
    if problems:
        module.fail_json(msg=problems[0], problems=problems)
    return result.validated_parameters


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(type="str", required=True),
            work_dir=dict(type="path", required=True),
            results_dir=dict(type="path", required=True),
            limits=dict(type="dict", default={}),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    limits = checked_limits(module, p["limits"])

    def run(argv: Sequence[str]) -> Command:
        try:
            rc, out, err = module.run_command(list(argv), environ_update={"LC_ALL": "C"}, handle_exceptions=False)
        except OSError as exc:  # not there, not executable: what ansible.builtin.command reports
            return Command.not_started(exc.errno or 1)
        return Command(rc, out, err)

    try:
        measured = measure(p["work_dir"], p["nvidia_smi"], run)
    except Unmeasurable as exc:
        module.fail_json(msg=f"preflight_check: cannot measure {exc.gate} on {p['host']} "
                             f"(work_dir {p['work_dir']}): {exc.reason}")
    gates = evaluate(limits, measured)

    path = os.path.join(os.path.abspath(p["results_dir"]), RECORD)
    text = record_text(p["host"], gates)
    changed, before = write_text_if_changed(path, text, check_mode=module.check_mode)

    unknown = unknown_gates(gates)
    failed = failed_gates(gates, limits["fail_on_unknown"])
    if not limits["fail_on_unknown"]:
        for name in unknown:
            module.warn(unknown_warning(name, gates, measured))
    result = dict(changed=changed, host=p["host"], path=path, gates=gates, failed_gates=failed,
                  unknown_gates=unknown)
    if module._diff and changed:
        result["diff"] = {"before_header": path, "after_header": path, "before": before or "", "after": text}
    if failed:
        module.fail_json(msg=failure_message(p["host"], gates, failed), **result)
    measured_count = len(gates) - len(unknown)
    module.exit_json(msg=f"preflight gates passed on {p['host']} ({measured_count} of {len(gates)} measured)",
                     **result)


if __name__ == "__main__":
    main()
