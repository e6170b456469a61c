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
    default: 60
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
    default: 1
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
    default: fail
  nvidia_smi:
    description:
      - Name or path of the C(nvidia-smi) executable used by the nvidia-smi sensor.
    type: str
    default: nvidia-smi
notes:
  - Check mode takes one reading and returns it without waiting.
  - Supports C(check_mode).
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
seealso:
  - module: ansible.builtin.wait_for
  - module: gpu_state
author:
  - sparkfleet contributors
"""

EXAMPLES = r"""
- name: Wait until the GPU is cool and settled (default 45 C, 1 C over 60 s), at most 15 minutes
  thermal_wait:

- name: Wait for GPUs 0 and 1, polling every 2 s, and go on (marking the run) if they never settle
  thermal_wait:
    gpus: [0, 1]
    poll_interval: 2
    max_wait: 600
    on_timeout: continue
  register: cooldown

- name: A plain threshold wait without the settle criterion (wait until every GPU is at or below 45 C)
  thermal_wait:
    threshold: 45
    settle_window: 0
    require_cool: true

- name: A slow-cooling DGX Spark - a longer window starts runs closer to the room temperature, for a longer wait
  thermal_wait:
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
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.sparkfleet_gpu import (  # noqa: E402
    GpuSensor,
    GpuSensorError,
    Runner,
    open_sensor,
)

# Seams for tests: a fake clock and a fake sensor replace these.
_monotonic: Callable[[], float] = time.monotonic
_sleep: Callable[[float], None] = time.sleep


def _open_sensor(kind: str, runner: Runner, nvidia_smi: str) -> GpuSensor:
    return open_sensor(kind, runner=runner, nvidia_smi=nvidia_smi)


_EPS = 1e-9


def fitted_drift(points: Sequence[tuple[float, float]], window: float) -> float | None:
    """Least-squares slope of ``points`` (t, temp) times ``window``; None with fewer than two distinct t."""
    n = len(points)
    if n < 2:
        return None
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    if var_t <= _EPS:
        return None
    cov = sum((t - mean_t) * (y - mean_y) for t, y in points)
    return cov / var_t * window


def window_points(
    times: Sequence[float], temps: Sequence[float], now: float, window: float
) -> list[tuple[float, float]] | None:
    """Readings of the last ``window`` seconds, anchored at the last one at or before ``now - window``.

    None while the readings do not yet reach back that far.
    """
    start = now - window
    anchor = None
    for i, t in enumerate(times):
        if t <= start + _EPS:
            anchor = i
        else:
            break
    if anchor is None:
        return None
    return list(zip(times[anchor:], temps[anchor:]))  # noqa: B905 (same length by construction)


class _Gpu:
    """Readings of one GPU and the settle criterion."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.temps: list[float] = []

    def drift(self, times: Sequence[float], now: float, window: float) -> float | None:
        if window <= 0:
            return 0.0
        points = window_points(times, self.temps, now, window)
        return None if points is None else fitted_drift(points, window)


def _validate(module: AnsibleModule) -> None:
    p = module.params
    for name in ("settle_band", "settle_window", "min_wait", "max_wait"):
        if p[name] < 0:
            module.fail_json(msg=f"{name} must be 0 or more, got {p[name]}")
    if p["poll_interval"] <= 0:
        module.fail_json(msg=f"poll_interval must be greater than 0, got {p['poll_interval']}")
    if p["min_wait"] > p["max_wait"]:
        module.fail_json(msg=f"min_wait ({p['min_wait']}) must not exceed max_wait ({p['max_wait']})")
    if p["settle_window"] > p["max_wait"]:
        module.fail_json(
            msg=f"settle_window ({p['settle_window']}) must not exceed max_wait ({p['max_wait']}): "
            "the GPUs could never settle in time"
        )
    if p["gpus"] is not None:
        negative = [g for g in p["gpus"] if g < 0]
        if negative:
            module.fail_json(msg=f"gpus must be GPU indices (0 or more), got {negative}")
        if not p["gpus"]:
            module.fail_json(msg="gpus must not be empty; omit it to wait for all GPUs")


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            threshold=dict(type="float", default=45.0),
            settle_band=dict(type="float", default=1.0),
            settle_window=dict(type="float", default=60.0),
            min_wait=dict(type="float", default=0.0),
            max_wait=dict(type="float", default=900.0),
            poll_interval=dict(type="float", default=1.0),
            gpus=dict(type="list", elements="int"),
            sensor=dict(type="str", default="auto", choices=["auto", "nvml", "nvidia-smi"]),
            require_cool=dict(type="bool", default=False),
            on_timeout=dict(type="str", default="fail", choices=["fail", "continue"]),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
        ),
        supports_check_mode=True,
    )
    _validate(module)
    p = module.params
    threshold: float = p["threshold"]
    window: float = p["settle_window"]
    band: float = p["settle_band"]

    def runner(argv: Sequence[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(list(argv), environ_update={"LC_ALL": "C"})
        return rc, out, err

    try:
        sensor = _open_sensor(p["sensor"], runner, p["nvidia_smi"])
    except GpuSensorError as exc:
        module.fail_json(msg=f"cannot read GPU temperature: {exc}", changed=False)

    gpu_ids: list[int] | None = list(dict.fromkeys(p["gpus"])) if p["gpus"] is not None else None
    gpus: list[_Gpu] = []
    times: list[float] = []
    trace: list[list[float | None]] = []
    start = _monotonic()
    result: dict[str, Any] = dict(changed=False, sensor=sensor.kind, threshold=threshold)

    def read() -> float:
        nonlocal gpus
        t = _monotonic() - start
        try:
            readings = sensor.read(gpu_ids)
        except GpuSensorError as exc:
            module.fail_json(msg=f"cannot read GPU temperature: {exc}", **result)
        if not gpus:
            gpus = [_Gpu(r.index) for r in readings]
            result["gpus"] = [g.index for g in gpus]
        for g, r in zip(gpus, readings):  # noqa: B905 (the sensor returns the GPUs asked for)
            if r.temperature_c is None:
                module.fail_json(msg=f"GPU {r.index} reports no temperature", **result)
            g.temps.append(float(r.temperature_c))
        times.append(t)
        trace.append([round(t, 1), *(g.temps[-1] for g in gpus)])
        return t

    def summary(reason: str, settled: bool, drifts: list[float | None]) -> dict[str, Any]:
        start_temps = [g.temps[0] for g in gpus]
        end_temps = [g.temps[-1] for g in gpus]
        result.update(
            reason=reason,
            timed_out=reason == "max_wait",
            waited=round(times[-1] - times[0], 1),
            polls=len(times),
            start_temp=max(start_temps),
            end_temp=max(end_temps),
            start_temps=start_temps,
            end_temps=end_temps,
            cool=all(t <= threshold for t in end_temps),
            settled=settled,
            drift=[_round(d, 2) for d in drifts],
            trace=trace,
        )
        return result

    try:
        if module.check_mode:
            read()
            res = summary("check_mode", False, [None] * len(gpus))
            res["msg"] = f"check mode: GPU temperature {res['end_temp']:g} C, not waited"
            module.exit_json(**res)

        deadline = start + p["max_wait"]
        earliest = start + p["min_wait"]
        while True:
            t = read()
            drifts = [g.drift(times, t, window) for g in gpus]
            settled = all(d is not None and abs(d) <= band + _EPS for d in drifts)
            cool = all(g.temps[-1] <= threshold for g in gpus)
            if settled and t >= p["min_wait"] - _EPS and (cool or not p["require_cool"]):
                reason = "cool_and_settled" if cool else "settled"
                res = summary(reason, True, drifts)
                where = "cool and settled" if cool else f"settled above {threshold:g} C"
                res["msg"] = f"GPU {_names(res['gpus'])} {where} at {res['end_temp']:g} C after {res['waited']:g} s"
                module.exit_json(**res)
            now = _monotonic()
            if now >= deadline - _EPS:
                res = summary("max_wait", settled, drifts)
                res["msg"] = (
                    f"GPU {_names(res['gpus'])} not {'cool and ' if p['require_cool'] else ''}settled after "
                    f"{p['max_wait']:g} s (now {res['end_temp']:g} C)"
                )
                if p["on_timeout"] == "fail":
                    module.fail_json(**res)
                module.exit_json(**res)
            # Poll on a fixed grid from the start, so slow reads do not stretch the interval; wake exactly at
            # min_wait and max_wait so that neither is overshot by up to a poll interval.
            next_poll = start + len(times) * p["poll_interval"]
            wake = min(next_poll, deadline, earliest if now < earliest else next_poll)
            _sleep(max(0.0, wake - now))
    finally:
        sensor.close()


def _names(indices: Sequence[int]) -> str:
    return ",".join(str(i) for i in indices)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
