#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: read, set and restore GPU and host state for benchmarking."""

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
author:
  - sparkfleet contributors (@sparkfleet)
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

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.gpu import (  # noqa: E402
    GpuSensorError,
    find_nvidia_smi,
    lock_clocks_argv,
    parse_int,
    parse_number,
    persistence_mode_argv,
    power_limit_argv,
    query_gpu,
    reset_clocks_argv,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.textfile import write_atomic  # noqa: E402

STATE_FIELDS = (
    "index",
    "name",
    "uuid",
    "persistence_mode",
    "power.limit",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
    "clocks.sm",
    "clocks.max.sm",
    "clocks.applications.graphics",
)

_NOT_SUPPORTED = re.compile(r"not supported", re.IGNORECASE)
_POWER_TOLERANCE_W = 0.5  # nvidia-smi prints two decimals; drivers round to their own step


class GpuState:
    """Reads and sets the controls; one instance per module run."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        p = module.params
        self.nvidia_smi: str | None = None
        self.state_file: str = p["state_file"]
        self.cpu_root: str = p["cpu_sysfs_root"]
        self.gpu_ids: list[int] | None = list(dict.fromkeys(p["gpus"])) if p["gpus"] is not None else None
        self.no_gpu = False  # no nvidia-smi at all: a host without an NVIDIA driver

    # ------------------------------------------------------------------ GPU reads

    def run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        rc, out, err = self.module.run_command(list(argv), environ_update={"LC_ALL": "C"})
        return rc, out, err

    def smi(self) -> str:
        if self.nvidia_smi is None:
            try:
                self.nvidia_smi = find_nvidia_smi(self.module.params["nvidia_smi"])
            except GpuSensorError as exc:
                self.module.fail_json(msg=str(exc))
        return self.nvidia_smi

    def read_records(self) -> dict[str, Any]:
        try:
            with open(self.state_file, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.module.fail_json(msg=f"state_file {self.state_file} is unreadable: {exc}")
        return data.get("locked_clocks", {}) if isinstance(data, dict) else {}

    def write_records(self, records: dict[str, Any]) -> None:
        try:
            write_atomic(self.state_file, json.dumps({"locked_clocks": records}, indent=1, sort_keys=True))
        except OSError as exc:
            self.module.fail_json(msg=f"state_file {self.state_file} cannot be written: {exc}")

    def read_gpus(self) -> list[dict[str, Any]]:
        try:
            find_nvidia_smi(self.module.params["nvidia_smi"])
        except GpuSensorError:
            if "/" in self.module.params["nvidia_smi"]:
                self.smi()  # an explicit path that does not exist is a mistake: fail naming it
            # No driver: GPU controls are reported unsupported; CPU governor and caches still apply.
            self.no_gpu = True
            return []
        try:
            rows = query_gpu(STATE_FIELDS, self.smi(), self.run)
        except GpuSensorError as exc:
            self.module.fail_json(msg=f"cannot read GPU state: {exc}")
        records = self.read_records()
        gpus = []
        for row in rows:
            index = parse_int(row["index"])
            pm = row["persistence_mode"]
            record = records.get(str(index))
            gpus.append(
                {
                    "index": index,
                    "name": row["name"],
                    "uuid": row["uuid"],
                    "persistence_mode": None if pm is None else pm.lower() == "enabled",
                    "power_limit": parse_number(row["power.limit"]),
                    "power_default_limit": parse_number(row["power.default_limit"]),
                    "power_min_limit": parse_number(row["power.min_limit"]),
                    "power_max_limit": parse_number(row["power.max_limit"]),
                    "clocks_sm": parse_number(row["clocks.sm"]),
                    "clocks_max_sm": parse_number(row["clocks.max.sm"]),
                    "clocks_applications_graphics": parse_number(row["clocks.applications.graphics"]),
                    "locked_clocks": dict(record) if isinstance(record, dict) else None,
                    # Internal: whether the record says "reset" (null) rather than nothing at all.
                    "_locked_known": str(index) in records,
                }
            )
        if self.gpu_ids is not None:
            present = {g["index"] for g in gpus}
            missing = [i for i in self.gpu_ids if i not in present]
            if missing:
                self.module.fail_json(msg=f"gpus: no GPU with index {missing}; present: {sorted(present)}")
            gpus = [g for g in gpus if g["index"] in self.gpu_ids]
        return gpus

    # ------------------------------------------------------------------ CPU governor

    def governor_paths(self) -> dict[str, str]:
        paths = {}
        try:
            names = os.listdir(self.cpu_root)
        except OSError:
            return {}
        for name in names:
            path = os.path.join(self.cpu_root, name, "cpufreq", "scaling_governor")
            if re.fullmatch(r"cpu\d+", name) and os.path.isfile(path):
                paths[name] = path
        return dict(sorted(paths.items(), key=lambda kv: int(kv[0][3:])))

    def read_governors(self) -> dict[str, str]:
        governors = {}
        for cpu, path in self.governor_paths().items():
            try:
                with open(path, encoding="ascii") as fh:
                    governors[cpu] = fh.read().strip()
            except OSError as exc:
                self.module.fail_json(msg=f"cpu_governor: cannot read {path}: {exc}")
        return governors

    def available_governors(self) -> set[str] | None:
        found: set[str] | None = None
        for path in self.governor_paths().values():
            avail = os.path.join(os.path.dirname(path), "scaling_available_governors")
            try:
                with open(avail, encoding="ascii") as fh:
                    names = set(fh.read().split())
            except OSError:
                continue
            found = names if found is None else found & names
        return found

    def write_governor(self, cpu: str, governor: str) -> None:
        path = self.governor_paths()[cpu]
        try:
            with open(path, "w", encoding="ascii") as fh:
                fh.write(governor)
        except OSError as exc:
            self.module.fail_json(msg=f"cpu_governor: cannot write {governor!r} to {path}: {exc}")

    # ------------------------------------------------------------------ snapshot

    def snapshot(self) -> dict[str, Any]:
        governors = self.read_governors()
        unique = set(governors.values())
        return {
            "gpus": self.read_gpus(),
            "cpu_governor": unique.pop() if len(unique) == 1 else None,
            "cpu_governors": governors,
        }


def public(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot without internal keys."""
    return {
        **snapshot,
        "gpus": [{k: v for k, v in g.items() if not k.startswith("_")} for g in snapshot["gpus"]],
    }


class Plan:
    """Changes to make: (control, gpu index or None, description, apply function, predicted-state update)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.unsupported: list[str] = []
        self.warnings: list[str] = []

    def add(self, control: str, gpu: int | None, old: Any, new: Any, **step: Any) -> None:
        where = f"GPU {gpu}: " if gpu is not None else ""
        self.steps.append(
            dict(control=control, gpu=gpu, old=old, new=new, line=f"{where}{control} {_show(old)} -> {_show(new)}",
                 **step)
        )

    def skip(self, control: str, reason: str) -> None:
        if control not in self.unsupported:
            self.unsupported.append(control)
        self.warnings.append(f"{control}: {reason}; left as is")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict) and set(value) == {"min", "max"}:
        return f"{value['min']},{value['max']}"
    if value is None:
        return "none"
    return str(value)


def desired_from_params(params: dict[str, Any]) -> dict[str, Any]:
    want: dict[str, Any] = {}
    if params["persistence_mode"] is not None:
        want["persistence_mode"] = params["persistence_mode"]
    if params["locked_clocks"] is not None:
        want["locked_clocks"] = {"min": params["locked_clocks"]["min"], "max": params["locked_clocks"]["max"]}
    elif params["reset_locked_clocks"]:
        want["locked_clocks"] = None
    if params["power_limit"] is not None:
        want["power_limit"] = params["power_limit"]
    if params["cpu_governor"] is not None:
        want["cpu_governors"] = params["cpu_governor"]  # the same for every CPU
    return want


def desired_from_saved(module: AnsibleModule, saved: dict[str, Any]) -> dict[int | str, Any]:
    """Per GPU index the controls to restore, plus 'cpu_governors'."""
    gpus = saved.get("gpus")
    if not isinstance(gpus, list) or not all(isinstance(g, dict) and "index" in g for g in gpus):
        module.fail_json(msg="saved must be the 'before' of an earlier gpu_state task (a dict with 'gpus')")
    want: dict[int | str, Any] = {}
    for g in gpus:
        w: dict[str, Any] = {}
        if g.get("persistence_mode") is not None:
            w["persistence_mode"] = bool(g["persistence_mode"])
        if g.get("power_limit") is not None:
            w["power_limit"] = float(g["power_limit"])
        lock = g.get("locked_clocks")
        w["locked_clocks"] = {"min": int(lock["min"]), "max": int(lock["max"])} if lock else None
        want[int(g["index"])] = w
    if saved.get("cpu_governors"):
        want["cpu_governors"] = dict(saved["cpu_governors"])
    return want


def plan_changes(
    st: GpuState, before: dict[str, Any], per_gpu: dict[int, dict[str, Any]], governors: Any, restore: bool
) -> Plan:
    plan = Plan()
    smi = st.smi
    for g in before["gpus"]:
        idx = g["index"]
        want = per_gpu.get(idx, {})
        label = f"GPU {idx} ({g['name']})"
        if "persistence_mode" in want:
            if g["persistence_mode"] is None:
                plan.skip("persistence_mode", f"not supported by {label}: persistence_mode is [N/A]")
            elif g["persistence_mode"] != want["persistence_mode"]:
                plan.add("persistence_mode", idx, g["persistence_mode"], want["persistence_mode"],
                         argv=lambda i=idx, v=want["persistence_mode"]: persistence_mode_argv(smi(), i, v))
        if "power_limit" in want:
            watts = want["power_limit"]
            if g["power_limit"] is None:
                plan.skip("power_limit", f"not supported by {label}: power.limit is [N/A] (no power cap)")
            elif abs(g["power_limit"] - watts) > _POWER_TOLERANCE_W:
                lo, hi = g["power_min_limit"], g["power_max_limit"]
                if lo is not None and hi is not None and not lo <= watts <= hi:
                    st.module.fail_json(
                        msg=f"power_limit {watts:g} W is outside {label}'s range {lo:g}-{hi:g} W"
                    )
                plan.add("power_limit", idx, g["power_limit"], watts,
                         argv=lambda i=idx, w=watts: power_limit_argv(smi(), i, w))
        if "locked_clocks" in want:
            lock = want["locked_clocks"]
            if lock is not None:
                if lock["min"] > lock["max"]:
                    st.module.fail_json(msg=f"locked_clocks: min ({lock['min']}) must not exceed max ({lock['max']})")
                if g["locked_clocks"] != lock:
                    plan.add("locked_clocks", idx, g["locked_clocks"], lock,
                             argv=lambda i=idx, lk=lock: lock_clocks_argv(smi(), i, lk["min"], lk["max"]))
            elif g["locked_clocks"] is not None or (not restore and not g["_locked_known"]):
                # reset_locked_clocks resets unless the record says this module already did; a restore only
                # undoes a lock this module recorded, and leaves clocks it knows nothing about alone.
                plan.add("locked_clocks", idx, g["locked_clocks"], None,
                         argv=lambda i=idx: reset_clocks_argv(smi(), i))
    if governors is not None:
        current = before["cpu_governors"]
        if not current:
            plan.skip("cpu_governor", f"no cpufreq scaling_governor under {st.cpu_root}")
        else:
            wanted = {cpu: governors for cpu in current} if isinstance(governors, str) else governors
            avail = st.available_governors()
            for cpu, gov in wanted.items():
                if cpu not in current or current[cpu] == gov:
                    continue
                if avail is not None and gov not in avail:
                    st.module.fail_json(
                        msg=f"cpu_governor {gov!r} is not available; choose from {', '.join(sorted(avail))}"
                    )
                plan.add("cpu_governor", None, current[cpu], gov, cpu=cpu)
            # One line for all CPUs that change alike, rather than one per CPU.
            gov_steps = [s for s in plan.steps if s["control"] == "cpu_governor"]
            if len(gov_steps) > 1:
                for s in gov_steps:
                    s["line"] = f"cpu_governor ({s['cpu']}): {_show(s['old'])} -> {_show(s['new'])}"
    return plan


def predict(before: dict[str, Any], plan: Plan) -> dict[str, Any]:
    after = json.loads(json.dumps(before))
    by_index = {g["index"]: g for g in after["gpus"]}
    for s in plan.steps:
        if s["control"] == "cpu_governor":
            after["cpu_governors"][s["cpu"]] = s["new"]
        else:
            by_index[s["gpu"]][s["control"]] = s["new"]
            if s["control"] == "locked_clocks":
                by_index[s["gpu"]]["_locked_known"] = True
    unique = set(after["cpu_governors"].values())
    after["cpu_governor"] = unique.pop() if len(unique) == 1 else None
    return after


def apply(st: GpuState, plan: Plan, before: dict[str, Any]) -> None:
    records = st.read_records()
    for s in plan.steps:
        if s["control"] == "cpu_governor":
            st.write_governor(s["cpu"], s["new"])
            continue
        argv = s["argv"]()
        rc, out, err = st.run(argv)
        text = f"{out}\n{err}".strip()
        if _NOT_SUPPORTED.search(text):
            # nvidia-smi exits 0 here ("Treating as warning and moving on") unless -eow.
            plan.skip(s["control"], f"not supported by GPU {s['gpu']}: {text.splitlines()[0]}")
            s["skipped"] = True
            continue
        if rc != 0:
            st.module.fail_json(
                msg=f"{s['control']}: {' '.join(argv)} failed (rc={rc}): {text}",
                before=public(before),
                changes=[x["line"] for x in plan.steps if x.get("done")],
            )
        s["done"] = True
        if s["control"] == "locked_clocks":
            records[str(s["gpu"])] = s["new"]
            st.write_records(records)


def verify(st: GpuState, plan: Plan, after: dict[str, Any], before: dict[str, Any]) -> None:
    by_index = {g["index"]: g for g in after["gpus"]}
    for s in plan.steps:
        if s.get("skipped"):
            continue
        if s["control"] == "cpu_governor":
            got = after["cpu_governors"].get(s["cpu"])
            ok = got == s["new"]
            where = f"on {s['cpu']}"
        elif s["control"] == "locked_clocks":
            continue  # not readable back; the record was written from what nvidia-smi accepted
        else:
            got = by_index[s["gpu"]][s["control"]]
            where = f"on GPU {s['gpu']}"
            ok = (
                got is not None and abs(got - s["new"]) <= _POWER_TOLERANCE_W
                if s["control"] == "power_limit"
                else got == s["new"]
            )
        if not ok:
            st.module.fail_json(
                msg=f"{s['control']} did not take {where}: set {_show(s['new'])}, reads {_show(got)}",
                before=public(before),
                after=public(after),
                changes=[x["line"] for x in plan.steps if x.get("done")],
            )


def drop_page_cache(module: AnsibleModule, path: str) -> None:
    os.sync()
    try:
        with open(path, "w", encoding="ascii") as fh:
            fh.write("3\n")
    except OSError as exc:
        module.fail_json(msg=f"drop_caches: cannot write {path}: {exc}")


def _diff_view(snapshot: dict[str, Any], controls: set[str]) -> dict[str, Any]:
    view: dict[str, Any] = {}
    for g in snapshot["gpus"]:
        keys = ("persistence_mode", "power_limit", "locked_clocks")
        view[f"gpu{g['index']}"] = {k: g[k] for k in keys if k in controls}
    if "cpu_governor" in controls:
        view["cpu_governors"] = snapshot["cpu_governors"]
    return view


def run_module() -> None:
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
            state_file=dict(type="path", default="/run/sparkfleet/gpu-state.json"),
            cpu_sysfs_root=dict(type="path", default="/sys/devices/system/cpu"),
            drop_caches_path=dict(type="path", default="/proc/sys/vm/drop_caches"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
        ),
        mutually_exclusive=[("locked_clocks", "reset_locked_clocks")],
        required_if=[("state", "restore", ("saved",))],
        supports_check_mode=True,
    )
    p = module.params
    if p["gpus"] is not None and (not p["gpus"] or any(g < 0 for g in p["gpus"])):
        module.fail_json(msg=f"gpus must be a non-empty list of GPU indices (0 or more), got {p['gpus']}")
    if p["power_limit"] is not None and p["power_limit"] <= 0:
        module.fail_json(msg=f"power_limit must be greater than 0, got {p['power_limit']:g}")
    if p["state"] != "present":
        given = [k for k in ("persistence_mode", "locked_clocks", "power_limit", "cpu_governor") if p[k] is not None]
        given += [k for k in ("reset_locked_clocks", "drop_caches") if p[k]]
        if given:
            module.fail_json(msg=f"{', '.join(given)} cannot be used with state={p['state']}")

    st = GpuState(module)
    before = st.snapshot()
    result: dict[str, Any] = dict(changed=False, changes=[], unsupported=[], dropped_caches=False)

    if p["state"] == "query":
        snap = public(before)
        module.exit_json(before=snap, after=snap, **result)

    if p["state"] == "restore":
        want = desired_from_saved(module, p["saved"])
        governors = want.pop("cpu_governors", None)
        per_gpu = {k: v for k, v in want.items() if isinstance(k, int)}
    else:
        flat = desired_from_params(p)
        governors = flat.pop("cpu_governors", None)
        per_gpu = {g["index"]: flat for g in before["gpus"]}

    plan = plan_changes(st, before, per_gpu, governors, restore=p["state"] == "restore")
    if st.no_gpu and p["state"] == "present":
        for control in ("persistence_mode", "locked_clocks", "power_limit"):
            if control in flat:
                plan.skip(control, "no NVIDIA GPU on this host (nvidia-smi not found)")
    controls = {s["control"] for s in plan.steps}

    if module.check_mode:
        after = predict(before, plan)
    else:
        apply(st, plan, before)
        if p["drop_caches"]:
            drop_page_cache(module, p["drop_caches_path"])
            result["dropped_caches"] = True
        after = st.snapshot() if any(s.get("done") for s in plan.steps) else before
        verify(st, plan, after, before)

    for warning in plan.warnings:
        module.warn(warning)
    applied = [s for s in plan.steps if not s.get("skipped")]
    result.update(
        before=public(before),
        after=public(after),
        changes=[s["line"] for s in applied],
        unsupported=plan.unsupported,
        changed=bool(applied) or result["dropped_caches"],
    )
    if applied:
        result["diff"] = dict(before=_diff_view(public(before), controls), after=_diff_view(public(after), controls))
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
