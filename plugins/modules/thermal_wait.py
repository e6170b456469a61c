#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: wait until the GPUs are cool and their temperature has settled."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: thermal_wait
short_description: Waits until GPUs have cooled down and their temperature has settled
description:
  - Polls the temperature of the selected GPUs every O(poll_interval) seconds and returns as soon as every
    one of them has I(settled), that is, it is no longer cooling down. Meant to run between benchmark runs,
    so that each run starts from the same thermal state.
  - "A GPU is I(cool) when its latest reading is at or below O(threshold)."
  - "A GPU is I(settled) when its readings span the last O(settle_window) seconds and their least-squares
    trend changes the temperature by at most O(settle_band) degrees across that window
    (|slope| * O(settle_window) <= O(settle_band)). The window starts at the last reading taken at or before
    O(settle_window) seconds ago, so the earliest a GPU can settle is O(settle_window) seconds after the wait
    began. A fitted trend rather than max - min keeps +-1 C sensor flicker and integer steps from holding the
    wait open. With O(settle_window=0) every GPU counts as settled at once."
  - "Stop rule: from O(min_wait) on, the wait ends at the first poll where every selected GPU is settled.
    RV(reason) is V(cool_and_settled) if every GPU is also cool, V(settled) if some GPU settled above
    O(threshold). Settling above the threshold ends the wait because waiting longer would not make that GPU
    any cooler: it sits at the temperature it idles at in this room, and every run will start from that same
    equilibrium. Set O(require_cool=true) to keep waiting in that case. A GPU that is cool but still falling
    is not settled: a run started then would start from a different point of the cooling curve."
  - At O(max_wait) the wait ends with RV(reason=max_wait) and RV(timed_out=true); O(on_timeout) decides
    whether that fails the task.
  - The study this project replaces waited for < 45 C and then a fixed five minutes (about 38% of a
    14-hour campaign); this rule stops as soon as the temperature stops falling. See BENCHMARKS.md,
    section "thermal_wait policy", for seconds waited and start-temperature spread of both policies.
  - Works on a DGX Spark (GB10), which reports a temperature but C([N/A]) for its memory fields.
  - Never reports a change.
version_added: "0.1.0"
options:
  threshold:
    description:
      - Temperature in degrees Celsius at or below which a GPU counts as cool.
    type: float
    default: 45
  settle_band:
    description:
      - Largest change of the fitted temperature trend, in degrees Celsius, across O(settle_window) for a
        GPU to count as settled.
      - Must be 0 or more.
    type: float
    default: 1
  settle_window:
    description:
      - Length in seconds of the window over which the temperature trend is fitted.
      - V(0) turns the settle criterion off (every GPU is settled at once).
      - Must not exceed O(max_wait).
    type: float
    default: 30
  min_wait:
    description:
      - Seconds to wait at least, even if the GPUs are settled earlier.
    type: float
    default: 0
  max_wait:
    description:
      - Maximum number of seconds to wait.
    type: float
    default: 900
  poll_interval:
    description:
      - Seconds between two readings. Must be greater than 0.
      - More readings per O(settle_window) make the fitted trend less sensitive to sensor noise; a reading
        costs microseconds through NVML and one short C(nvidia-smi) process otherwise.
    type: float
    default: 2
  gpus:
    description:
      - Indices of the GPUs to wait for, as C(nvidia-smi) numbers them. All GPUs when omitted.
    type: list
    elements: int
  sensor:
    description:
      - How to read the temperature.
      - V(nvml) uses the nvidia-ml-py bindings (C(import pynvml)); V(nvidia-smi) runs C(nvidia-smi
        --query-gpu); V(auto) uses NVML when it is importable and works, else nvidia-smi.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  require_cool:
    description:
      - Keep waiting while a settled GPU is above O(threshold), until it is cool or O(max_wait) is reached.
    type: bool
    default: false
  on_timeout:
    description:
      - What to do when O(max_wait) is reached first.
      - V(fail) fails the task; the result still carries the readings.
      - V(continue) returns normally with RV(timed_out=true), so that the run can go on and be marked.
    type: str
    choices: [fail, continue]
    default: continue
  nvidia_smi:
    description:
      - Name or path of the C(nvidia-smi) executable used by the nvidia-smi sensor.
    type: str
    default: nvidia-smi
notes:
  - Check mode takes one reading and returns it without waiting.
  - Supports C(check_mode).
seealso:
  - module: ansible.builtin.wait_for
  - module: sparkfleet.bench.gpu_state
extends_documentation_fragment:
  - sparkfleet.bench.attributes
  - sparkfleet.bench.attributes.reports_changes
"""

EXAMPLES = r"""
- name: Wait until the GPU is cool and settled (default 45 C, 1 C over 30 s), at most 15 minutes
  sparkfleet.bench.thermal_wait:

- name: Wait for GPUs 0 and 1, polling every 2 s, and go on (marking the run) if they never settle
  sparkfleet.bench.thermal_wait:
    gpus: [0, 1]
    poll_interval: 2
    max_wait: 600
    on_timeout: continue
  register: cooldown

- name: A plain threshold wait without the settle criterion (wait until every GPU is at or below 45 C)
  sparkfleet.bench.thermal_wait:
    threshold: 45
    settle_window: 0
    require_cool: true

- name: A slow-cooling DGX Spark - a longer window starts runs closer to the room temperature, for a longer wait
  sparkfleet.bench.thermal_wait:
    settle_window: 120
    settle_band: 1
    max_wait: 1800
"""

RETURN = r"""
reason:
  description:
    - Why the wait ended. V(cool_and_settled), V(settled) (settled above O(threshold)), V(max_wait), or
      V(check_mode).
  returned: always
  type: str
  sample: cool_and_settled
timed_out:
  description: Whether O(max_wait) was reached before the GPUs settled.
  returned: always
  type: bool
  sample: false
waited:
  description: Seconds from the first to the last reading.
  returned: always
  type: float
  sample: 65.0
polls:
  description: Number of readings taken.
  returned: always
  type: int
  sample: 14
gpus:
  description: Indices of the GPUs waited for.
  returned: always
  type: list
  elements: int
  sample: [0]
sensor:
  description: The sensor used, V(nvml) or V(nvidia-smi).
  returned: always
  type: str
  sample: nvidia-smi
threshold:
  description: The O(threshold) in effect.
  returned: always
  type: float
  sample: 45.0
start_temp:
  description: Highest temperature over the selected GPUs at the first reading, in degrees Celsius.
  returned: always
  type: float
  sample: 61.0
end_temp:
  description:
    - Highest temperature over the selected GPUs at the last reading, in degrees Celsius. This is the
      temperature the next run starts at.
  returned: always
  type: float
  sample: 41.0
start_temps:
  description: Temperature of each GPU at the first reading, in the order of RV(gpus).
  returned: always
  type: list
  elements: float
  sample: [61.0]
end_temps:
  description: Temperature of each GPU at the last reading, in the order of RV(gpus).
  returned: always
  type: list
  elements: float
  sample: [41.0]
cool:
  description: Whether every selected GPU was at or below O(threshold) at the last reading.
  returned: always
  type: bool
  sample: true
settled:
  description: Whether every selected GPU was settled at the last reading (always V(false) in check mode).
  returned: always
  type: bool
  sample: true
drift:
  description:
    - For each GPU, the fitted temperature change across the last O(settle_window) in degrees Celsius
      (negative while cooling); V(null) while the readings do not yet span the window.
  returned: always
  type: list
  elements: float
  sample: [-0.4]
trace:
  description:
    - Every reading, as C([seconds since the first reading, temperature of each GPU in RV(gpus) order]).
  returned: always
  type: list
  elements: list
  sample: [[0.0, 61.0], [5.0, 55.0], [10.0, 51.0]]
msg:
  description: A one-line summary.
  returned: always
  type: str
  sample: GPU 0 cool and settled at 41 C after 65 s
"""

import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health.thermal import (  # noqa: E402
    COOLDOWN_BY_OPTION,
    COOLDOWN_DEFAULTS,
    CooldownError,
    validate_cooldown_options,
    wait_for_cooldown,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors.gpu import (  # noqa: E402
    GpuSensor,
    GpuSensorError,
    Runner,
    open_sensor,
)

# Seams for tests: a fake clock and a fake sensor replace these (looked up at call time).
_monotonic: Callable[[], float] = time.monotonic
_sleep: Callable[[float], None] = time.sleep


def _open_sensor(kind: str, runner: Runner, nvidia_smi: str) -> GpuSensor:
    return open_sensor(kind, runner=runner, nvidia_smi=nvidia_smi)


_COOLDOWN_OPTIONS = ("threshold", "settle_band", "settle_window", "min_wait", "max_wait", "poll_interval")


def run_module() -> None:
    d = COOLDOWN_DEFAULTS
    module = AnsibleModule(
        argument_spec=dict(
            threshold=dict(type="float", default=d["threshold"]),
            settle_band=dict(type="float", default=d["settle_band"]),
            settle_window=dict(type="float", default=d["settle_window"]),
            min_wait=dict(type="float", default=d["min_wait"]),
            max_wait=dict(type="float", default=d["max_wait"]),
            poll_interval=dict(type="float", default=d["poll_interval"]),
            gpus=dict(type="list", elements="int"),
            sensor=dict(type="str", default="auto", choices=["auto", "nvml", "nvidia-smi"]),
            require_cool=dict(type="bool", default=d["require_cool"]),
            on_timeout=dict(type="str", default=d["on_timeout"], choices=list(COOLDOWN_BY_OPTION["on_timeout"].choices)),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    problems = validate_cooldown_options(p)
    if problems:
        module.fail_json(msg=problems[0], problems=problems)

    def runner(argv: Sequence[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(list(argv), environ_update={"LC_ALL": "C"})
        return rc, out, err

    try:
        sensor = _open_sensor(p["sensor"], runner, p["nvidia_smi"])
    except GpuSensorError as exc:
        module.fail_json(msg=f"cannot read GPU temperature: {exc}", changed=False)

    try:
        res = wait_for_cooldown(
            sensor,
            **{name: p[name] for name in _COOLDOWN_OPTIONS},
            gpus=p["gpus"],
            require_cool=p["require_cool"],
            check_mode=module.check_mode,
            monotonic=_monotonic,
            sleep=_sleep,
        )
    except CooldownError as exc:
        module.fail_json(changed=False, **{**exc.result, "msg": exc.msg})
    finally:
        sensor.close()
    if res["timed_out"] and p["on_timeout"] == "fail":
        module.fail_json(changed=False, **res)
    module.exit_json(changed=False, **res)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
