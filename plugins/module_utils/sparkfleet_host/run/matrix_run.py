# -*- coding: utf-8 -*-
"""A host's matrix job (the bench_run module): check the request, then run the planned runs in order.

Each run goes through its pieces, named by job: cooldown and launch (run_launch), judging the output
(run_judge), writing the record and the ledger (run_record, ledger). This file checks the request and each
planned run before the first one starts (:func:`check_request`, :class:`PlannedRun`), holds the host's lock,
resumes (skips what is done), and sums the results up as the module returns them.

Every refusal is a :class:`MatrixError` whose message is the task's one-line error; a SIGTERM ends the job
with :class:`JobStopped` (the run it was in stays unfinished, so a resume runs it again).
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import time
from typing import Optional

from .. import gpu_control
from ..contract.fields import WEEK_S, Field, field_problem
from ..contract.ledger import LEDGER_NAME, append_event, finished_fields, run_states
from ..contract.record import RECORD_NAME, run_id, write_json_atomic
from ..contract.resume import check_host, keep_config
from ..contract.reuse import done_message, move_host_instance, nothing_measured, stamp
from ..contract.run_record import Recorder
from ..engines import modelcard, serving
from ..engines.serving_provenance import SeenWeights
from ..health import host_state
from ..health.thermal import Cooldown
from .jobs import JobRegistration, remove_left_containers
from .run_judge import judge, judge_serving, read_output
from .run_launch import SETUP_ERRORS, Launcher, wait_cooldown

#: bench_run's number options (the argument_spec types them; a NaN, an infinity or a zero is refused here). The
#: campaign's timeout_s and sparkfleet_telemetry_interval_s have the same ranges, checked on the controller.
TIMEOUT_FIELD = Field("timeout_s", "float", unit="s", low=0.0, high=WEEK_S, low_open=True)
TELEMETRY_FIELD = Field("telemetry_interval_s", "float", unit="s", low=0.0, high=60.0, low_open=True)
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class MatrixError(Exception):
    """The task fails: bad inputs (checked before the first run) or a job that cannot start."""


class JobStopped(BaseException):
    """SIGTERM: end the current workload and leave its run unfinished (a resume runs it again)."""


def stop_on_sigterm(signum, frame):
    raise JobStopped("stopped by signal %d" % signum)


# ---------------------------------------------------------------------------------- checking


def check_request(params: dict) -> list:
    """Check the module's options and every planned run before any starts; the planned runs, in order.

    ``params``: bench_run's options (argument_spec checked); its ``cooldown`` is normalised and ``total``
    (0) set to the number of runs, in place."""
    for name, field in (("timeout_s", TIMEOUT_FIELD), ("telemetry_interval_s", TELEMETRY_FIELD)):
        problem = field_problem(field, params[name])
        if problem:
            raise MatrixError("%s: %s" % (name, problem))
    try:  # the cooldown's rules (thermal), checked before any run starts: never a ValueError mid-matrix
        params["cooldown"] = Cooldown.from_mapping(params["cooldown"], "cooldown").to_dict()
    except ValueError as exc:
        raise MatrixError(str(exc)) from None
    if not params["total"]:
        params["total"] = len(params["runs"])
    runs = [PlannedRun(params, plan) for plan in params["runs"]]
    seen = set()
    for run in runs:
        if run.rid in seen:
            raise MatrixError("runs: run %s is planned twice" % run.rid)
        seen.add(run.rid)
    return runs


class PlannedRun:
    """One entry of the plan, checked: its identity, timeout, cooldown and paths on the host."""

    def __init__(self, params: dict, plan):
        if not isinstance(plan, dict):
            raise MatrixError("runs: each planned run must be a dict, got %r" % (plan,))
        for key in ("run_id", "model", "environment", "workload", "iteration"):
            if key not in plan:
                raise MatrixError("runs: missing key %r in the planned run %r" % (key, plan.get("run_id")))
        for what, name in (("campaign", params["campaign"]), ("host", params["host"])):
            if not SAFE_NAME.match(name):
                raise MatrixError("%s %r: use letters, digits, '.', '_' and '-' only" % (what, name))
        self.plan = plan
        self.model = plan["model"]
        self.environment = plan["environment"]
        self.workload = plan["workload"]  # checked with the campaign, on the controller
        if not isinstance(self.workload, dict):
            raise MatrixError("runs: workload must be a mapping, got %r" % (self.workload,))
        self.serving = serving.is_serving(self.workload)
        if self.serving:  # its profile, checked before any run starts
            try:
                serving.profile_points(self.workload)
            except ValueError as exc:
                raise MatrixError("run %s: %s" % (plan["run_id"], exc)) from None
        expected = run_id(params["campaign"], params["host"], self.model["name"], self.environment["name"],
                          self.workload["name"], int(plan["iteration"]))
        if expected != plan["run_id"]:
            raise MatrixError("run: run_id %r does not match its identity (%s)" % (plan["run_id"], expected))
        self.rid = expected
        # Each planned run carries its own timeout and cooldown (campaign.plan resolves them once, on the
        # controller); the module's options are the defaults of a plan entry without them. Checked before any
        # run starts.
        try:
            self.cooldown = Cooldown.from_mapping(plan.get("cooldown", params["cooldown"]), "cooldown").to_dict()
        except ValueError as exc:
            raise MatrixError("run %s: %s" % (self.rid, exc)) from None
        self.timeout_s = plan.get("timeout_s", params["timeout_s"])
        problem = field_problem(TIMEOUT_FIELD, self.timeout_s)
        if problem:
            raise MatrixError("run %s: timeout_s: %s" % (self.rid, problem))
        self.host_dir = os.path.join(params["results_root"], params["campaign"], params["host"])
        self.run_dir = os.path.join(self.host_dir, "runs", self.rid)
        self.ledger = os.path.join(self.host_dir, LEDGER_NAME)
        self.record_path = os.path.join(self.run_dir, RECORD_NAME)
        self.reserve = os.path.join(self.host_dir, ".sparkfleet-reserve")


def check_campaign_config(params: dict, runs: list, keep: bool = False) -> None:
    """Refuse to resume results produced with another configuration of this campaign; keep this one."""
    config = params["campaign_config"]
    if not config or not runs:
        return
    host_dir = runs[0].host_dir
    problem = check_host(host_dir, params["campaign"], config)
    if problem:
        raise MatrixError("%s: %s" % (params["host"], problem))
    if keep:
        keep_config(host_dir, config, write_json_atomic)


# ------------------------------------------------------------------------------------- results


def run_result(run, total: int, record: dict, changed: bool, written: bool = True, skipped: bool = False,
               finished_ts=None) -> dict:
    """The module's entry for one run, with its progress event (shown by sparkfleet run); ``finished_ts``: when
    a skipped run was finished (its ledger event's time)."""
    status = "skipped" if skipped else record.get("status")
    event = {"type": "run", "run_id": run.rid, "total": total, "status": status,
             **finished_fields(record, run.plan.get("order_index"))}
    if finished_ts:
        event["finished_ts"] = finished_ts
    return {"changed": changed, "run_id": run.rid, "status": status, "reason": record.get("reason"),
            "record_path": run.record_path, "record_written": written, "metrics": record.get("metrics") or {},
            "cooldown": record.get("cooldown") or {}, "sparkfleet_event": event}


def planned_result(run, total: int) -> dict:
    """Check mode's entry for a run: planned, not run."""
    event = {"type": "run", "run_id": run.rid, "status": "planned", "total": total,
             "order_index": run.plan.get("order_index")}
    return {"changed": True, "run_id": run.rid, "status": "planned", "reason": "check mode: not run",
            "record_path": run.record_path, "metrics": {}, "cooldown": {}, "sparkfleet_event": event}


def summary(results: list, host: Optional[str] = None, previous_instance: Optional[str] = None) -> dict:
    """The module's return values for these results. Every planned run already done (``nothing_measured``):
    the summary says so, "N runs already done on HOST (dates); nothing measured". ``previous_instance``: where
    a fresh measurement moved the host's previous results (None: nowhere)."""
    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    line = ("%d runs \u2014 %s" % (len(results), ", ".join("%s %d" % kv for kv in counts.items()))).rstrip(" \u2014")
    idle = nothing_measured(r["status"] for r in results)
    if idle:
        line = done_message(host or "this host", [r["sparkfleet_event"].get("finished_ts") for r in results])
    if previous_instance:
        line += "; the previous results were moved to %s" % previous_instance
    return {"runs": results, "counts": counts, "summary": line, "nothing_measured": idle,
            "previous_instance": previous_instance,
            "changed": any(r["changed"] for r in results) or bool(previous_instance),
            "sparkfleet_events": [r["sparkfleet_event"] for r in results]}


# ----------------------------------------------------------------------------------- one run


def execute(run, params: dict, job, cards) -> dict:
    """Run one planned run start to finish: reserve, cooldown, launch, judge, record. Its module entry.

    ``cards``: the model directories' cards (modelcard.Fingerprints), read once per job."""
    total = params["total"]
    recorder = Recorder(run, params["campaign"], params["host"], params["versions"])
    launcher = Launcher(run, params, job)
    kind = launcher.kind

    def finish(record, status, reason, metrics):
        data, written = recorder.write(record, status, reason, metrics)
        return run_result(run, total, data, changed=True, written=written)

    os.makedirs(run.run_dir, exist_ok=True)
    try:
        recorder.reserve_space()
    except OSError as exc:
        # The disk is already full: this run cannot even be recorded. It stays unfinished in the ledger
        # (a resume runs it once there is space); the task does not fail, so what this host measured
        # so far is still collected.
        record = recorder.new_record(kind)
        record.reason = "disk full on %s: the run was not started (%s)" % (run.host_dir, exc)
        return run_result(run, total, record.to_dict(), changed=False, written=False)
    append_event(run.ledger, "started", run.rid, order_index=run.plan.get("order_index"))
    record = recorder.new_record(kind)
    cooldown = wait_cooldown(run.cooldown)
    record.cooldown = cooldown
    if cooldown.get("timed_out") and run.cooldown["on_timeout"] == "fail":
        return finish(record, "failed", "cooldown: GPU not settled within max_wait_s", {})
    try:
        launches = launcher.prepare_serving(record) if run.serving else launcher.prepare(record)
    except SETUP_ERRORS as exc:
        return finish(record, "failed", "setup: %s" % exc, {})
    # A multi-node run over NCCL: RDMA as its engine will see it (issue 36), or NCCL falls back to TCP unsaid.
    problem = launcher.check_rdma() if run.serving else None
    if problem:
        record.serving = launcher.serving_section(launches[0])  # the check, in serving.cluster.rdma
        return finish(record, "failed", "rdma: %s" % problem, {})
    # Is the GPU what it should be right now (issue 24)? A short fixed load after the cooldown: a run on a
    # degraded host is refused or marked suspect under the policy, never silently averaged in.
    controls = gpu_control.applied_controls(params["results_root"])
    settings = params.get("readiness") or {}
    if settings.get("probe_s", 1) != 0:  # 0: the probe is off
        def probe() -> dict:
            section = host_state.readiness_probe(
                settings, controls, params["gpu_present"],
                script=os.path.join(launcher.workloads_dir, host_state.PROBE_SCRIPT),
                wrap=lambda argv: launcher.command("probe", argv))  # in the run's environment, with its torch
            launcher.remove_container()
            return section
        # A lost cap that sparkfleet set itself is put back once and probed again: the second verdict counts.
        record.readiness = gpu_control.reapply_lost_controls(probe(), controls, probe)
    if record.readiness and record.readiness["action"]["action"] == "refuse":
        return finish(record, "failed", "readiness: %s" % readiness_reason(record.readiness), {})
    drop, problem = launcher.prepare_memory(record)
    if problem:
        return finish(record, "failed", problem, {})
    before = host_state.run_state_before(controls=controls)
    if run.serving:  # one server lifetime, the client through the profile's points (issue 25)
        outcome = launcher.serve(record, launches, drop, run.timeout_s)
        status, reason, metrics = judge_serving(record, outcome, run.run_dir, run.model, launcher.served,
                                                SeenWeights(run.host_dir))
    else:
        outcome = launcher.measure(record, launches, drop, run.timeout_s)
        status, reason, metrics = judge(record, outcome, read_output(run.run_dir), run.model, run.workload,
                                        run.timeout_s, run.run_dir, cards)
    tokens = output_tokens(run.workload, record.serving)
    server = (record.serving or {}).get("server") if isinstance(record.serving, dict) else None
    record.attestation = host_state.run_state_after(
        before, os.path.join(run.run_dir, "telemetry.csv"), tokens,
        output_tok_s=host_state.output_rate(metrics, record.serving, tokens),  # the steady J/token's rate
        not_before_s=(server or {}).get("ready_s"))  # a serving run's load starts once its server is ready
    if status == "ok" and (record.readiness or {}).get("state") == "suspect":
        reason = "; ".join(r for r in ("readiness suspect: %s" % readiness_reason(record.readiness), reason) if r)
    return finish(record, status, reason, metrics)


def readiness_reason(section: dict) -> str:
    return "; ".join(r.get("message", "") for r in section.get("reasons") or []) or section.get("state", "")


def output_tokens(workload: dict, serving_section) -> Optional[float]:
    """The output tokens a run generated, as its workload fixes them (exact lengths: trtllm's --eos_id -1,
    hf-generate's fixed new tokens, the client's --exact-tg): the denominator of energy per output token."""
    engine = workload.get("engine", "trtllm")
    try:
        if serving_section:
            return float(sum(int(p["concurrency"]) * int(p["tg"]) * int(workload.get("runs") or 3)
                             for p in serving_section.get("points") or [] if p.get("status") == "ok")) or None
        if engine == "trtllm" and workload.get("requests") and workload.get("output_len"):
            return float(int(workload["requests"]) * int(workload["output_len"]))
        if engine == "hf-generate":
            return float(int(workload.get("batch", 1)) * int(workload.get("output_len", 128))
                         * (int(workload.get("iterations", 10)) + int(workload.get("warmup", 2))))
    except (TypeError, ValueError, KeyError):
        return None
    return None


# ------------------------------------------------------------------------------------ the job


def budget_s(runs: list) -> float:
    """Longest a job of these runs may take: each run's timeout and longest cooldown, and some slack."""
    return sum(float(run.timeout_s) + (float(run.cooldown["max_wait_s"]) if run.cooldown["enabled"] else 0.0) + 120
               for run in runs) + 600


def take_lock(host: str, host_dir: str, runs: list):
    """One job per host and campaign: wait for a job a killed controller left running to end."""
    os.makedirs(host_dir, exist_ok=True)
    lock = open(os.path.join(host_dir, ".lock"), "w")  # noqa: SIM115 (held until the job ends)
    deadline = time.monotonic() + budget_s(runs)
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except OSError:
            if time.monotonic() > deadline:
                lock.close()
                raise MatrixError("%s: another bench_run still holds %s" % (host, lock.name)) from None
            time.sleep(0.5)


def remove_left_behind(params: dict, runs: list) -> None:
    """The campaign's run containers an earlier job could not remove (Docker was down then, or the job was
    killed) go before this job's first run: under the lock no run of the campaign is in one."""
    if any(run.environment.get("kind") == "container" for run in runs):
        remove_left_containers((params.get("container") or {}).get("docker") or "docker", params["results_root"],
                               params["campaign"])


def plan_only(params: dict, runs: list) -> dict:
    """Check mode: the kept campaign configuration checked, every run reported as planned."""
    check_campaign_config(params, runs)
    return summary([planned_result(run, params["total"]) for run in runs])


def run_job(params: dict, runs: list, results: list) -> None:
    """Run the planned runs in order as this host's one job, appending each run's entry to ``results``
    (a finished run is skipped). Raises MatrixError when the job cannot start, JobStopped on SIGTERM.

    ``params["fresh"]``: first move this host's previous results of the campaign aside (a new instance,
    reuse.move_host_instance), their new place set as ``params["previous_instance"]``."""
    if not runs:
        return
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    cards = modelcard.Fingerprints()  # the model directories' cards (provenance), each read once per job
    with JobRegistration(params["results_root"], params["campaign"], params["host"]) as job:
        lock = take_lock(params["host"], runs[0].host_dir, runs)
        try:
            if params.get("fresh"):  # under the lock: no job of this campaign writes there meanwhile
                try:
                    params["previous_instance"] = move_host_instance(runs[0].host_dir, stamp())
                except OSError as exc:
                    raise MatrixError("%s: cannot move the previous results of %s aside for a fresh measurement "
                                      "(%s); nothing was measured" % (params["host"], runs[0].host_dir, exc)) from None
            check_campaign_config(params, runs, keep=True)
            remove_left_behind(params, runs)
            states = run_states(runs[0].ledger)
            announced = False
            for run in runs:
                previous = Recorder(run, params["campaign"], params["host"], params["versions"]).previous(
                    states, params["retry_failed"])
                if previous is not None:
                    results.append(run_result(run, params["total"], previous, changed=False, skipped=True,
                                              finished_ts=(states.get(run.rid) or {}).get("ts")))
                    continue
                if not announced:  # before the first run it executes: a job with nothing to do leaves the ledger be
                    append_event(runs[0].ledger, "job", None, pid=os.getpid(), planned=len(runs),
                                 skipped=len(results))
                    announced = True
                results.append(execute(run, params, job, cards))
                job.running()
        finally:
            lock.close()
