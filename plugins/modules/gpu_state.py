#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: read, set and restore GPU and host state for benchmarking; the work is sparkfleet_host.gpu_control."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_state
short_description: Reads, sets and restores GPU and host state for benchmark runs
description:
  - Reads and sets GPU persistence mode (C(nvidia-smi -pm)), locked GPU clocks (C(nvidia-smi -lgc) /
    C(-rgc)) and the GPU power limit (C(nvidia-smi -pl)), the CPU frequency governor
    (C(/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)), and drops the page cache.
  - With O(state=present) it applies the desired settings and returns the state before (RV(before)), which a
    later O(state=restore) takes back in O(saved). O(state=query) only reads.
  - Idempotent - a control already in the desired state is left alone; C(changed) is V(true) only when a
    setter ran. After setting, the state is read again and the task fails naming the control that did not
    take.
  - A control the GPU does not support is skipped, listed in RV(unsupported) and warned about; it does not
    fail the task. A DGX Spark (GB10) reports C([N/A]) for its power limit (it has no power cap) and for
    the memory clock, and C(nvidia-smi -pl) answers "Changing power management limit is not supported".
  - Locked GPU clocks cannot be read back through C(nvidia-smi --query-gpu) on all drivers. The module
    therefore records the clocks it locked (or that it reset them) per GPU in O(state_file), which lives in
    C(/run) by default so that the record disappears on reboot together with the lock. RV(before) reports
    that record; V(null) means unlocked or unknown. A driver may clamp the requested maximum; the record
    keeps what was requested.
version_added: "0.1.0"
options:
  state:
    description:
      - V(present) applies the settings given; V(query) reads only; V(restore) applies O(saved).
    type: str
    choices: [present, query, restore]
    default: present
  gpus:
    description:
      - Indices of the GPUs to read and set, as C(nvidia-smi) numbers them. All GPUs when omitted.
    type: list
    elements: int
  persistence_mode:
    description:
      - Enable or disable GPU persistence mode.
    type: bool
  locked_clocks:
    description:
      - Lock the GPU (graphics/SM) clock to a range in MHz, C(nvidia-smi -lgc MIN,MAX).
      - Mutually exclusive with O(reset_locked_clocks).
    type: dict
    suboptions:
      min:
        description: Lowest clock in MHz.
        type: int
        required: true
      max:
        description: Highest clock in MHz.
        type: int
        required: true
  reset_locked_clocks:
    description:
      - Unlock the GPU clocks, C(nvidia-smi -rgc). Runs unless O(state_file) records them as already reset.
    type: bool
    default: false
  power_limit:
    description:
      - GPU power limit in watts, C(nvidia-smi -pl). Must lie between C(power.min_limit) and
        C(power.max_limit). Unsupported on a GB10.
    type: float
  cpu_governor:
    description:
      - CPU frequency governor to set on every CPU, for example V(performance).
    type: str
  drop_caches:
    description:
      - Sync and drop the page cache, dentries and inodes (C(echo 3 > /proc/sys/vm/drop_caches)). On unified
        memory (GB10) the page cache competes with the GPU's allocations.
      - An action rather than a state; it reports a change whenever it runs, and it does not run in check mode.
    type: bool
    default: false
  saved:
    description:
      - The RV(before) of an earlier O(state=present) task; required with O(state=restore).
      - Restores persistence mode, power limit, locked clocks and CPU governors. A V(null) C(locked_clocks)
        resets the clocks only where O(state_file) records a lock set by this module.
    type: dict
  state_file:
    description:
      - Where the clocks this module locked are recorded (see the description).
    type: path
    default: /run/sparkfleet/gpu-state.json
  cpu_sysfs_root:
    description:
      - Directory holding the C(cpuN/cpufreq/scaling_governor) files; a test can point it at a fake tree.
    type: path
    default: /sys/devices/system/cpu
  drop_caches_path:
    description:
      - File written to drop caches.
    type: path
    default: /proc/sys/vm/drop_caches
  nvidia_smi:
    description:
      - Name or path of the C(nvidia-smi) executable.
    type: str
    default: nvidia-smi
notes:
  - Setting any GPU control needs root.
  - Check mode reports what would change, in RV(changes) and RV(after), without running any setter.
  - Supports C(--diff).
attributes:
  check_mode:
    support: full
    description: Reports what it would change and changes nothing.
  diff_mode:
    support: full
    description: Supported.
seealso:
  - module: sparkfleet.bench.thermal_wait
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Pin the benchmark state, keeping what was there before
  become: true
  sparkfleet.bench.gpu_state:
    persistence_mode: true
    locked_clocks: {min: 2405, max: 2405}
    cpu_governor: performance
    drop_caches: true
  register: sparkfleet_gpu_state

- name: Read only
  sparkfleet.bench.gpu_state:
    state: query
  register: sparkfleet_gpu_facts

- name: Put everything back (in the always section of the block)
  become: true
  sparkfleet.bench.gpu_state:
    state: restore
    saved: "{{ sparkfleet_gpu_state.before }}"
"""

RETURN = r"""
before:
  description:
    - State before the task; pass it as O(saved) to restore it.
  returned: always
  type: dict
  contains:
    gpus:
      description:
        - One entry per selected GPU with C(index), C(name), C(uuid), C(persistence_mode) (bool),
          C(power_limit), C(power_default_limit), C(power_min_limit), C(power_max_limit) (watts, V(null)
          where unsupported), C(clocks_sm), C(clocks_max_sm), C(clocks_applications_graphics) (MHz), and
          C(locked_clocks) (C({min, max}) as recorded in O(state_file), or V(null)).
      type: list
      elements: dict
    cpu_governor:
      description: The governor of every CPU if they agree, else V(null).
      type: str
    cpu_governors:
      description: Governor per CPU (C(cpu0) ...); empty where cpufreq is absent.
      type: dict
  sample:
    gpus:
      - index: 0
        name: NVIDIA GB10
        persistence_mode: false
        power_limit: null
        locked_clocks: null
    cpu_governor: ondemand
    cpu_governors: {cpu0: ondemand, cpu1: ondemand}
after:
  description: State after the task, read again from the GPU; in check mode, the predicted state.
  returned: always
  type: dict
  sample: {gpus: [{index: 0, persistence_mode: true, locked_clocks: {min: 2405, max: 2405}}]}
changes:
  description: What was (or in check mode would be) changed, one line per control and GPU.
  returned: always
  type: list
  elements: str
  sample: ["GPU 0: persistence_mode false -> true", "cpu_governor: ondemand -> performance"]
unsupported:
  description: Controls asked for that this hardware does not support; they were skipped.
  returned: always
  type: list
  elements: str
  sample: [power_limit]
dropped_caches:
  description: Whether the page cache was dropped.
  returned: always
  type: bool
  sample: true
diff:
  description: Before and after of the managed controls, for C(--diff).
  returned: when a control changed or would change
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import gpu_control, task  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="present", choices=["present", "query", "restore"]),
            gpus=dict(type="list", elements="int"),
            persistence_mode=dict(type="bool"),
            locked_clocks=dict(
                type="dict",
                options=dict(min=dict(type="int", required=True), max=dict(type="int", required=True)),
            ),
            reset_locked_clocks=dict(type="bool", default=False),
            power_limit=dict(type="float"),
            cpu_governor=dict(type="str"),
            drop_caches=dict(type="bool", default=False),
            saved=dict(type="dict"),
            state_file=dict(type="path", default=gpu_control.DEFAULT_LOCK_RECORD),
            cpu_sysfs_root=dict(type="path", default="/sys/devices/system/cpu"),
            drop_caches_path=dict(type="path", default="/proc/sys/vm/drop_caches"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
        ),
        mutually_exclusive=[("locked_clocks", "reset_locked_clocks")],
        required_if=[("state", "restore", ("saved",))],
        supports_check_mode=True,
    )
    task.exit_with(module, gpu_control.apply)


if __name__ == "__main__":
    main()
