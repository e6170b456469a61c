# Copyright: sparkfleet contributors
# Apache-2.0
"""GPU and host state control, in one place: what the gpu_state module reads, sets and restores (persistence mode,
locked clocks, power limit, CPU governor, page cache), the record of the clocks it locked (nvidia-smi cannot read
a lock back), what the gpu_state role applied as a run reads it back, and the lost cap a run puts back.

* :func:`apply` is the gpu_state module's work: ``apply(module.params, task)``.
* :func:`read_applied_controls` / :func:`applied_controls` read the role's saved file and the module's lock record.
* :func:`reapply_lost_controls` runs, once, what sparkfleet applied when the readiness probe finds the cap lost.

Every nvidia-smi command line comes from gpu.py. Stdlib only, Python 3.8+: shipped to the hosts with the other
module_utils.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from .contract.textfile import write_atomic
from .sensors.gpu import (
    GpuSensorError,
    Runner,
    find_nvidia_smi,
    lock_clocks_argv,
    parse_int,
    parse_number,
    persistence_mode_argv,
    power_limit_argv,
    query_gpu,
    reset_clocks_argv,
    subprocess_runner,
)
from .task import Task, TaskFailed

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
#: A power limit within this of the wanted one is left alone (and reads back as set): nvidia-smi prints two
#: decimals; drivers round to their own step.
POWER_TOLERANCE_W = 0.5
#: The gpu_state module's record of the clocks it locked (its option state_file's default): in /run, so that it
#: goes on reboot together with the lock.
DEFAULT_LOCK_RECORD = "/run/sparkfleet/gpu-state.json"
#: Where the gpu_state role keeps the state it found before applying (roles/gpu_state/defaults/main.yml:
#: ``{{ sparkfleet_plan.paths.work_dir }}/state/gpu_state_saved.json``; results_root is ``<work_dir>/results``).
SAVED_STATE_NAME = os.path.join("state", "gpu_state_saved.json")
#: The most of nvidia-smi's answers kept in ``reapplied.output``.
REAPPLY_OUTPUT_MAX = 2000


def read_lock_record(path: str) -> Dict[str, Any]:
    """The lock record's ``{gpu index: {min, max} | None}`` (None: this module reset that GPU's clocks); OSError
    (FileNotFoundError: no lock was ever recorded) or ValueError when it cannot be read."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return (data.get("locked_clocks") or {}) if isinstance(data, dict) else {}


def write_lock_record(path: str, records: Mapping[str, Any]) -> None:
    write_atomic(path, json.dumps({"locked_clocks": records}, indent=1, sort_keys=True))


# --------------------------------------------------------------------------- the gpu_state module


class GpuState:
    """Reads and sets the controls; one instance per module run."""

    def __init__(self, params: Mapping[str, Any], task: Task) -> None:
        self.task = task
        self.nvidia_smi_name: str = params["nvidia_smi"]
        self.nvidia_smi: str | None = None
        self.state_file: str = params["state_file"]
        self.cpu_root: str = params["cpu_sysfs_root"]
        self.gpu_ids: list[int] | None = list(dict.fromkeys(params["gpus"])) if params["gpus"] is not None else None
        self.no_gpu = False  # no nvidia-smi at all: a host without an NVIDIA driver

    # ------------------------------------------------------------------ GPU reads

    def run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        return self.task.run(argv)

    def smi(self) -> str:
        if self.nvidia_smi is None:
            try:
                self.nvidia_smi = find_nvidia_smi(self.nvidia_smi_name)
            except GpuSensorError as exc:
                raise TaskFailed(str(exc)) from None
        return self.nvidia_smi

    def read_records(self) -> dict[str, Any]:
        try:
            return read_lock_record(self.state_file)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise TaskFailed(f"state_file {self.state_file} is unreadable: {exc}") from None

    def write_records(self, records: dict[str, Any]) -> None:
        try:
            write_lock_record(self.state_file, records)
        except OSError as exc:
            raise TaskFailed(f"state_file {self.state_file} cannot be written: {exc}") from None

    def read_gpus(self) -> list[dict[str, Any]]:
        try:
            find_nvidia_smi(self.nvidia_smi_name)
        except GpuSensorError:
            if "/" in self.nvidia_smi_name:
                self.smi()  # an explicit path that does not exist is a mistake: fail naming it
            # No driver: GPU controls are reported unsupported; CPU governor and caches still apply.
            self.no_gpu = True
            return []
        try:
            rows = query_gpu(STATE_FIELDS, self.smi(), self.run)
        except GpuSensorError as exc:
            raise TaskFailed(f"cannot read GPU state: {exc}") from None
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
                raise TaskFailed(f"gpus: no GPU with index {missing}; present: {sorted(present)}")
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
                raise TaskFailed(f"cpu_governor: cannot read {path}: {exc}") from None
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
            raise TaskFailed(f"cpu_governor: cannot write {governor!r} to {path}: {exc}") from None

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


def check_params(params: Mapping[str, Any]) -> None:
    """What the argument spec cannot say; TaskFailed naming the first wrong option."""
    if params["gpus"] is not None and (not params["gpus"] or any(g < 0 for g in params["gpus"])):
        raise TaskFailed(f"gpus must be a non-empty list of GPU indices (0 or more), got {params['gpus']}")
    if params["power_limit"] is not None and params["power_limit"] <= 0:
        raise TaskFailed(f"power_limit must be greater than 0, got {params['power_limit']:g}")
    if params["state"] != "present":
        given = [k for k in ("persistence_mode", "locked_clocks", "power_limit", "cpu_governor")
                 if params[k] is not None]
        given += [k for k in ("reset_locked_clocks", "drop_caches") if params[k]]
        if given:
            raise TaskFailed(f"{', '.join(given)} cannot be used with state={params['state']}")


def desired_from_params(params: Mapping[str, Any]) -> dict[str, Any]:
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


def desired_from_saved(saved: dict[str, Any]) -> dict[int | str, Any]:
    """Per GPU index the controls to restore, plus 'cpu_governors'."""
    gpus = saved.get("gpus")
    if not isinstance(gpus, list) or not all(isinstance(g, dict) and "index" in g for g in gpus):
        raise TaskFailed("saved must be the 'before' of an earlier gpu_state task (a dict with 'gpus')")
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
            elif abs(g["power_limit"] - watts) > POWER_TOLERANCE_W:
                lo, hi = g["power_min_limit"], g["power_max_limit"]
                if lo is not None and hi is not None and not lo <= watts <= hi:
                    raise TaskFailed(f"power_limit {watts:g} W is outside {label}'s range {lo:g}-{hi:g} W")
                plan.add("power_limit", idx, g["power_limit"], watts,
                         argv=lambda i=idx, w=watts: power_limit_argv(smi(), i, w))
        if "locked_clocks" in want:
            lock = want["locked_clocks"]
            if lock is not None:
                if lock["min"] > lock["max"]:
                    raise TaskFailed(f"locked_clocks: min ({lock['min']}) must not exceed max ({lock['max']})")
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
                    raise TaskFailed(f"cpu_governor {gov!r} is not available; choose from {', '.join(sorted(avail))}")
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


def run_steps(st: GpuState, plan: Plan, before: dict[str, Any]) -> None:
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
            raise TaskFailed(f"{s['control']}: {' '.join(argv)} failed (rc={rc}): {text}", before=public(before),
                             changes=[x["line"] for x in plan.steps if x.get("done")])
        s["done"] = True
        if s["control"] == "locked_clocks":
            records[str(s["gpu"])] = s["new"]
            st.write_records(records)


def verify(plan: Plan, after: dict[str, Any], before: dict[str, Any]) -> None:
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
                got is not None and abs(got - s["new"]) <= POWER_TOLERANCE_W
                if s["control"] == "power_limit"
                else got == s["new"]
            )
        if not ok:
            raise TaskFailed(f"{s['control']} did not take {where}: set {_show(s['new'])}, reads {_show(got)}",
                             before=public(before), after=public(after),
                             changes=[x["line"] for x in plan.steps if x.get("done")])


def drop_page_cache(path: str) -> None:
    os.sync()
    try:
        with open(path, "w", encoding="ascii") as fh:
            fh.write("3\n")
    except OSError as exc:
        raise TaskFailed(f"drop_caches: cannot write {path}: {exc}") from None


def _diff_view(snapshot: dict[str, Any], controls: set[str]) -> dict[str, Any]:
    view: dict[str, Any] = {}
    for g in snapshot["gpus"]:
        keys = ("persistence_mode", "power_limit", "locked_clocks")
        view[f"gpu{g['index']}"] = {k: g[k] for k in keys if k in controls}
    if "cpu_governor" in controls:
        view["cpu_governors"] = snapshot["cpu_governors"]
    return view


def apply(params: Mapping[str, Any], task: Task) -> dict[str, Any]:
    """The gpu_state module's result for its ``params``: query, apply (state=present) or restore (state=restore)
    the controls, then read them again and check that each took. Check mode predicts instead; TaskFailed on a
    wrong option, a failing setter or a control that did not take."""
    check_params(params)
    st = GpuState(params, task)
    before = st.snapshot()
    result: dict[str, Any] = dict(changed=False, changes=[], unsupported=[], dropped_caches=False)

    if params["state"] == "query":
        snap = public(before)
        return dict(before=snap, after=snap, **result)

    if params["state"] == "restore":
        want = desired_from_saved(params["saved"])
        governors = want.pop("cpu_governors", None)
        per_gpu = {k: v for k, v in want.items() if isinstance(k, int)}
    else:
        flat = desired_from_params(params)
        governors = flat.pop("cpu_governors", None)
        per_gpu = {g["index"]: flat for g in before["gpus"]}

    plan = plan_changes(st, before, per_gpu, governors, restore=params["state"] == "restore")
    if st.no_gpu and params["state"] == "present":
        for control in ("persistence_mode", "locked_clocks", "power_limit"):
            if control in flat:
                plan.skip(control, "no NVIDIA GPU on this host (nvidia-smi not found)")
    controls = {s["control"] for s in plan.steps}

    if task.check_mode:
        after = predict(before, plan)
    else:
        run_steps(st, plan, before)
        if params["drop_caches"]:
            drop_page_cache(params["drop_caches_path"])
            result["dropped_caches"] = True
        after = st.snapshot() if any(s.get("done") for s in plan.steps) else before
        verify(plan, after, before)

    for warning in plan.warnings:
        task.warn(warning)
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
    return result


# --------------------------------------------------------------------------- what the role applied, read back


def saved_state_file(results_root: str) -> str:
    """The gpu_state role's saved-state file of the host whose results root is ``results_root``."""
    return os.path.join(os.path.dirname(os.path.normpath(results_root)), SAVED_STATE_NAME)


def read_applied_controls(saved_file: Optional[str]) -> Dict[str, Any]:
    """The controls sparkfleet applied, from the gpu_state role's files (nvidia-smi cannot read a lock back).

    The role writes ``saved_file`` (``{host, saved, state_file}``, the state found before it applied anything,
    kept until undo) and its module records each lock in ``state_file`` (``{"locked_clocks": {"0": {min, max}
    | null}}``). Returns ``{"applied", "source", "state_file", "locked_clocks": {gpu: {min, max} | None},
    "requested", "prior", "error"}``: ``applied`` False (with ``error`` None) when no saved file exists (the
    role has not applied controls, or undo ran); ``requested`` is the plan's gpu_state group when the saved file
    carries it (None otherwise); ``prior`` the saved state's persistence, power limit and lock per GPU."""
    out: Dict[str, Any] = {"applied": False, "source": saved_file, "state_file": None, "locked_clocks": {},
                           "requested": None, "prior": None, "error": None}
    if not saved_file or not os.path.exists(saved_file):
        return out
    try:
        with open(saved_file, encoding="utf-8") as fh:
            saved = json.load(fh)
        if not isinstance(saved, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        out["error"] = "%s: %s" % (saved_file, exc)
        return out
    out["applied"] = True
    out["requested"] = saved.get("requested")
    prior = saved.get("saved") if isinstance(saved.get("saved"), dict) else {}
    out["prior"] = {"cpu_governor": prior.get("cpu_governor"),
                    "gpus": {str(g.get("index")): {k: g.get(k) for k in ("persistence_mode", "power_limit",
                                                                         "locked_clocks")}
                             for g in prior.get("gpus") or [] if isinstance(g, dict)}}
    state_file = saved.get("state_file") or DEFAULT_LOCK_RECORD
    out["state_file"] = state_file
    try:
        out["locked_clocks"] = {str(k): v for k, v in read_lock_record(state_file).items()}
    except FileNotFoundError:
        pass  # no lock was ever set (or the host rebooted: /run is gone, and so is the lock)
    except (OSError, ValueError) as exc:
        out["error"] = "%s: %s" % (state_file, exc)
    return out


def applied_controls(results_root: str) -> Dict[str, Any]:
    """:func:`read_applied_controls` of the host whose results root is ``results_root``."""
    return read_applied_controls(saved_state_file(results_root))


def applied_lock(controls: Optional[Mapping[str, Any]], gpu: int = 0) -> Optional[Tuple[float, float]]:
    """The (min, max) MHz lock recorded for ``gpu``, or None."""
    lock = ((controls or {}).get("locked_clocks") or {}).get(str(gpu))
    if isinstance(lock, dict) and lock.get("min") is not None and lock.get("max") is not None:
        return float(lock["min"]), float(lock["max"])
    return None


def applied_power_limit(controls: Optional[Mapping[str, Any]], gpu: int = 0) -> Optional[float]:
    """The power limit (W) sparkfleet's gpu_state role set on ``gpu``, or None: the plan asked for one (the saved
    file's ``requested``, for this GPU) and the GPU had a different one before (none, as on a GB10: the module
    skipped it; an equal one: the module left it alone, so sparkfleet applied nothing)."""
    controls = controls or {}
    requested = controls.get("requested") if isinstance(controls.get("requested"), dict) else {}
    watts = requested.get("power_limit")
    gpus = requested.get("gpus")
    if watts is None or (gpus is not None and gpu not in [int(g) for g in gpus]):
        return None
    prior = (((controls.get("prior") or {}).get("gpus") or {}).get(str(gpu)) or {}).get("power_limit")
    if prior is None or abs(float(prior) - float(watts)) <= POWER_TOLERANCE_W:
        return None
    return float(watts)


# --------------------------------------------------------------------------- a lost cap put back


def controls_to_reapply(controls: Optional[Mapping[str, Any]], gpu: int = 0) -> Optional[Dict[str, Any]]:
    """What sparkfleet applied to ``gpu`` and a lost cap would take back: ``{"gpu", "locked_clocks": {min, max},
    "power_limit": W | None}``, or None when sparkfleet recorded no lock for it (no saved file: the role never
    ran here, or undo ran; no lock record: none was asked for, or a reboot emptied /run)."""
    controls = controls or {}
    if not controls.get("applied") or applied_lock(controls, gpu) is None:
        return None
    lock = controls["locked_clocks"][str(gpu)]
    return {"gpu": gpu, "locked_clocks": {"min": int(lock["min"]), "max": int(lock["max"])},
            "power_limit": applied_power_limit(controls, gpu)}


def _has_lost_cap(section: Optional[Mapping[str, Any]]) -> bool:
    return any(r.get("cause") == "lost_cap" for r in (section or {}).get("reasons") or [])


def reapply_controls(wanted: Mapping[str, Any], nvidia_smi: str = "nvidia-smi", runner: Runner = subprocess_runner
                     ) -> Dict[str, Any]:
    """Run the setters for ``wanted`` (:func:`controls_to_reapply`) in the module's order, power limit then lock,
    stopping at the first failure as the module does. Returns ``{"controls", "commands", "rc", "output"}``: ``rc``
    0 when every setter succeeded, else the failing one's (127: no nvidia-smi)."""
    out: Dict[str, Any] = {"controls": dict(wanted), "commands": [], "rc": 0, "output": ""}
    try:
        smi = find_nvidia_smi(nvidia_smi)
    except GpuSensorError as exc:
        out.update(rc=127, output=str(exc))
        return out
    gpu, lock = int(wanted["gpu"]), wanted["locked_clocks"]
    argvs = [power_limit_argv(smi, gpu, float(wanted["power_limit"]))] if wanted.get("power_limit") else []
    argvs.append(lock_clocks_argv(smi, gpu, int(lock["min"]), int(lock["max"])))
    texts = []
    for argv in argvs:
        rc, stdout, stderr = runner(argv)
        out["commands"].append(" ".join(argv))
        texts.append(("%s\n%s" % (stdout, stderr)).strip())
        if rc != 0:
            out["rc"] = rc
            break
    out["output"] = "\n".join(t for t in texts if t)[-REAPPLY_OUTPUT_MAX:]
    return out


def reapply_lost_controls(section: Optional[Dict[str, Any]], controls: Optional[Mapping[str, Any]],
                          probe: Callable[[], Dict[str, Any]], *, gpu: int = 0, nvidia_smi: str = "nvidia-smi",
                          runner: Runner = subprocess_runner) -> Optional[Dict[str, Any]]:
    """The readiness section after putting a lost cap back (issue 24: controls re-applied once a lost cap is
    detected). When ``section`` (host_state.readiness_probe's, for ``gpu``) has a ``lost_cap`` reason and
    sparkfleet recorded a lock for that GPU in ``controls`` (:func:`read_applied_controls`), runs exactly what
    sparkfleet applied (``-pl W`` where it set a power limit, ``-lgc MIN,MAX``) and calls ``probe`` once more: the
    second section is returned, with ``reapplied`` ({controls, commands, rc, output}) and ``before_reapply`` (the
    first). A setter that fails: the first section with ``reapplied``, not probed again (its verdict stands).
    Anything else (no lost cap, nothing sparkfleet applied): ``section`` unchanged, nothing run."""
    if not _has_lost_cap(section):
        return section
    wanted = controls_to_reapply(controls, gpu)
    if wanted is None:
        return section
    reapplied = reapply_controls(wanted, nvidia_smi, runner)
    if reapplied["rc"] != 0:
        return dict(section or {}, reapplied=reapplied)
    first = {k: v for k, v in (section or {}).items() if k not in ("reapplied", "before_reapply")}
    return dict(probe(), reapplied=reapplied, before_reapply=first)
