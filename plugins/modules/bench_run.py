#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Run a host's planned benchmark runs: cooldown, launch, telemetry, timeout, parse, record, ledger."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_run
short_description: Execute a host's planned benchmark runs of a sparkfleet campaign and write their run records
version_added: 0.1.0
description:
  - Executes the planned runs (model x environment x workload x iteration) given in O(runs), in that order,
    on the host, writing one run record each as docs/RECORD.md describes. One call runs a host's whole plan,
    so that Ansible pays its per-task cost once per host rather than once per run; the matrix role starts
    it with C(async) and follows it with M(sparkfleet.bench.bench_follow), so that an hours-long matrix does not hang on one
    SSH session and a controller that dies does not stop the measurements.
  - "Before each run: waits for the GPU to cool and settle with the same rule as M(sparkfleet.bench.thermal_wait);
    then, when the workload says C(drop_caches), drops the page cache (C(sync; echo 3 > /proc/sys/vm/drop_caches),
    root only: a run that cannot is C(failed)); a workload's C(kv_fraction) becomes its run's
    C(--extra_llm_api_options) file."
  - "Memory state (record's C(memory) section, docs/MEMORY.md): /proc/meminfo, what CUDA reports free, at the
    start; the container's cgroup (memory.current/peak/max/stat) and meminfo at the sample of highest use."
  - "The run: launches the engine in its environment - C(native) through the provisioned chroot with
    the image's own environment (C(env -i)), C(container) through C(docker run) with the environment's
    flags, C(bare) straight on the host - as argv, never through a shell; enforces the timeout by killing the whole process group
    (and the container); samples telemetry in-process (NVML, or one persistent C(nvidia-smi) loop;
    C(/proc/meminfo); the container's cgroup memory)."
  - "After the run: parses the engine's output with sparkfleet's parsers, checks that the model the log
    says was loaded is the requested one (else the run is C(invalid)), and that what the engine shows it
    loaded (model path, weight files and sizes, architecture, layers, hidden size, dtype, parameter count)
    matches the model directory's card fingerprinted on the host (record C(provenance): C(confirmed),
    C(unconfirmed) or C(mismatch), the last making the run C(invalid)), writes C(bench.log),
    C(telemetry.csv) and C(record.json) (atomically) under C(<results_root>/<campaign>/<host>/runs/<run_id>/)
    and appends C(started)/C(finished) events to the host's C(ledger.jsonl)."
  - A run whose ledger says C(finished) and whose record exists is skipped (C(changed=false)), so
    re-running a campaign resumes it. A run that started but never finished is run again; its partial
    directory is kept beside it as C(<run_id>.interrupted-N).
  - A failed, timed-out or invalid run is recorded with its reason and the module still succeeds, so
    the matrix goes on. The task fails only when its inputs are wrong (checked for every run before the
    first one starts) or when the job is stopped.
  - "One job per host and campaign at a time (a lock in the host's results directory): a job left running
    by a killed controller finishes, or is stopped, before a new one starts, which then skips what the
    first one finished. Each job registers itself under C(<results_root>/.sparkfleet/jobs/) (see
    M(sparkfleet.bench.bench_stop)). On SIGTERM the job ends its workload (process group and container) and exits; that
    run stays unfinished in the ledger, so a resume runs it again."
options:
  runs:
    description: >-
      The host's campaign plan, in order; each entry has run_id, order_index, model, environment (a container's
      docker_flags resolved), workload, iteration, warmup, and the run's timeout_s and cooldown (else O(timeout_s)
      and O(cooldown)).
    type: list
    elements: dict
    required: true
  campaign:
    description: Campaign name.
    type: str
    required: true
  host:
    description: Host name used in the results tree and the run identity (inventory_hostname).
    type: str
    required: true
  results_root:
    description: Results directory on the host; must be visible at the same path in the chroot and container.
    type: path
    required: true
  total:
    description: Number of runs planned on this host (for progress events); 0 means the length of O(runs).
    type: int
    default: 0
  native:
    description: "Native environment: C(rootfs) (path) and C(image_env) (dict)."
    type: dict
    default: {}
  container:
    description: "Container environment: C(image), C(flags) (dict environment name -> list of docker run flags), C(docker)."
    type: dict
    default: {}
  gpu_present:
    description: Whether the host has an NVIDIA GPU; without one, C(--gpus) flags are dropped (and recorded).
    type: bool
    default: true
  env:
    description: Extra environment variables for the workload (names and values passed literally).
    type: dict
    default: {}
  models_dir:
    description: Models directory, bind-mounted read-only into the container at the same path.
    type: path
  cooldown:
    description: "Cooldown of a planned run that has none: enabled, threshold_c, settle_band_c, settle_window_s, min_wait_s, max_wait_s, poll_interval_s, on_timeout (fail|continue); the campaign's rules and defaults."
    type: dict
    default: {}
  timeout_s:
    description: Wall-clock limit for the commands of a planned run that has no timeout_s of its own, in seconds.
    type: float
    default: 3600
  telemetry_interval_s:
    description: Telemetry sampling period in seconds.
    type: float
    default: 1.0
  retry_failed:
    description: Run again runs whose last attempt finished as failed or timeout.
    type: bool
    default: false
  versions:
    description: Software versions to record (image digest, controller versions, ...).
    type: dict
    default: {}
  campaign_config:
    description:
      - "The campaign's configuration: C(config_hash) and C(resolved) (the resolved campaign). Kept as
        C(campaign-config.json) beside the host's ledger when the campaign first runs there; a later call whose
        configuration measures something else (another config hash, and a difference outside C(results_dir))
        is refused before anything runs, naming the fields that changed, so that runs of two configurations
        never mix under one campaign name. Results kept before this file existed are judged by the
        C(campaign_config_hash) their records carry."
      - Omitted, nothing is checked or kept.
    type: dict
  trtllm:
    description:
      - "The image's TensorRT-LLM version and CLI surface, as M(sparkfleet.bench.engine_probe) returns them
        (C(version), C(profile), C(surface), C(sources)), plus C(unknown_version) (C(refuse) or C(warn)) and
        C(hf_cache_dir). A trtllm run's commands are built for that version: C(trtllm-bench prepare-dataset)
        where it exists, else the image's C(benchmarks/cpp/prepare_dataset.py --stdout); the tokenizer from
        C(model.path); latency without C(--max_batch_size); C(--config) or C(--extra_llm_api_options) as the
        version spells it. An unknown or unsupported version fails the run at setup (C(refuse)) or runs with
        the nearest profile and a warning in its record (C(warn)). Kept in each record's C(versions.trtllm)."
      - "Runs are offline (C(HF_HUB_OFFLINE=1), C(TRANSFORMERS_OFFLINE=1)) unless C(hf_cache_dir) names a host
        directory: it is bound at C(/root/.cache/huggingface) into the container (the native rootfs binds it
        there too) and C(HF_HOME) points at it."
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: Checks every input (and the kept campaign configuration) and reports each run as C(planned); runs nothing, writes nothing.
  diff_mode:
    support: none
    description: Not supported.
  platform:
    support: full
    platforms: posix
    description: Linux hosts (C(/proc), process groups, cgroups); C(chroot) for native runs and C(docker) for container runs need root.
notes:
  - Run it with C(async) and C(poll=0) and follow it with M(sparkfleet.bench.bench_follow); in the foreground a
    long matrix ties up one SSH session for its whole length.
  - The plan entries come from the filter C(sparkfleet.bench.campaign_plan), which resolves each run's launch
    spec (container flags, timeout, cooldown) once on the controller; hand-written entries are checked with the
    same rules before the first run.
seealso:
  - module: sparkfleet.bench.bench_follow
  - module: sparkfleet.bench.bench_stop
  - module: sparkfleet.bench.thermal_wait
author:
  - sparkfleet contributors (@sparkfleet)
"""

EXAMPLES = r"""
- name: Start the host's matrix in the background (one call for the whole plan)
  sparkfleet.bench.bench_run:
    runs: "{{ sparkfleet_plan }}"
    campaign: "{{ sparkfleet_resolved_campaign.name }}"
    host: "{{ inventory_hostname }}"
    results_root: /var/lib/sparkfleet/results
    native: {rootfs: "{{ native_rootfs_path }}", image_env: "{{ native_rootfs_image_env }}"}
    container: {image: "{{ native_rootfs_digest }}"}
    campaign_config:
      config_hash: "{{ sparkfleet_resolved_campaign.config_hash }}"
      resolved: "{{ sparkfleet_resolved_campaign }}"
  async: 86400
  poll: 0
  register: matrix_job

- name: Plan only (check mode runs in the foreground)
  sparkfleet.bench.bench_run:
    runs: "{{ sparkfleet_plan }}"
    campaign: "{{ sparkfleet_resolved_campaign.name }}"
    host: "{{ inventory_hostname }}"
    results_root: /var/lib/sparkfleet/results
  check_mode: true
  register: matrix_plan

- name: Follow it until it ends (one retry line per finished run)
  sparkfleet.bench.bench_follow:
    job: "{{ matrix_job }}"
    ledger: "/var/lib/sparkfleet/results/{{ sparkfleet_resolved_campaign.name }}/{{ inventory_hostname }}/ledger.jsonl"
  register: matrix_follow
  until: matrix_follow.finished
  retries: 10000
  delay: 0
"""

RETURN = r"""
runs:
  description: One entry per planned run, in plan order (also when the job is stopped, for the runs it got to).
  returned: always
  type: list
  elements: dict
  contains:
    run_id:
      description: The run's identity.
      type: str
    status:
      description: ok, failed, timeout, invalid - or skipped when the ledger says the run is already done (planned in check mode).
      type: str
    reason:
      description: Why the run is not ok (exit code and last log line, timeout, model mismatch, ...).
      type: str
    record_path:
      description: Path of record.json on the host.
      type: str
    metrics:
      description: The run's figures with the contract's names.
      type: dict
    cooldown:
      description: What the wait before the run did (waited_s, start_temp_c, end_temp_c, threshold_c, reason).
      type: dict
    sparkfleet_event:
      description: Progress event for the sparkfleet.bench.progress callback (type run, run_id, status, duration_s, cooldown_s, ...).
      type: dict
  sample:
    - {run_id: llama-1b.native.T1.i001.3c2d9e41aa, status: ok, reason: "",
       record_path: /var/lib/sparkfleet/results/gpu/spark1/runs/llama-1b.native.T1.i001.3c2d9e41aa/record.json,
       metrics: {output_tok_s: 74.4}, cooldown: {waited_s: 5.5, start_temp_c: 30.0, reason: cool_and_settled}}
counts:
  description: Number of runs per status.
  returned: always
  type: dict
  sample: {"ok": 5, "failed": 1}
summary:
  description: One line - the number of runs, then the runs per status, in the order the statuses first occur.
  returned: always
  type: str
  sample: "6 runs \u2014 ok 5, failed 1"
sparkfleet_events:
  description: The runs' progress events (the sparkfleet.bench.progress callback reads this list).
  returned: always
  type: list
  elements: dict
"""

import datetime
import fcntl
import json
import os
import re
import signal
import subprocess
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import fingerprint, modelcard, trtllm_cli
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.chroot import (
    ChrootError,
    load_image_config,
    read_native_state,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.jobs import JobRegistration
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.ledger import (
    FINAL,
    append_event,
    run_states,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import parse_log
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.record import (
    ContractError,
    new_record,
    run_id,
    write_json_atomic,
    write_record,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.resume import check_host, keep_config
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.runexec import (
    WORKLOADS_SUBDIR,
    RunSetupError,
    container_cgroup_memory_file,
    container_command,
    engine_steps,
    model_matches,
    native_command,
    redact,
    run_process,
    strip_gpu_flags,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.settings import (
    CAMPAIGN_FIELDS,
    RETRY_STATUSES,
    SETTINGS_BY_NAME,
    WORKLOAD_FIELDS,
    Cooldown,
    check_mapping,
    field_problem,
)

_TIMEOUT_FIELD = next(f for f in CAMPAIGN_FIELDS if f.name == "timeout_s")
_TELEMETRY_FIELD = SETTINGS_BY_NAME["sparkfleet_telemetry_interval_s"]
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
TAIL_BYTES = 4000
# Model directories' cards (provenance), each read once per bench_run call.
_MODEL_CARDS = modelcard.Fingerprints()
# Space set aside before each run so that a run that fills the disk can still be recorded as failed.
RESERVE_BYTES = 512 * 1024
LOW_SPACE_BYTES = 4 * 1024 * 1024


def _free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _utc(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(fh.tell() - TAIL_BYTES, 0))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines()
                     if ln.strip() and not ln.startswith("Run 'docker")]  # docker's usage hint says nothing
        return lines[-1][:300] if lines else ""
    except OSError:
        return ""


def _cooldown(params: dict) -> dict:
    """Wait for the GPU like thermal_wait; a host without a GPU sensor skips the wait, saying so.

    ``params``: the campaign's cooldown, already checked by main() (Cooldown.from_mapping)."""
    cooldown = Cooldown(**(params or {}))
    if not cooldown.enabled:
        return {"reason": "disabled", "waited_s": 0.0}
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.gpu import (
        GpuSensorError,
        open_sensor,
    )
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.thermal import wait_for_cooldown

    try:
        sensor = open_sensor("auto")
    except (GpuSensorError, OSError) as exc:
        return {"reason": "no GPU sensor: %s" % exc, "waited_s": 0.0}
    try:
        result = wait_for_cooldown(sensor, **cooldown.wait_kwargs())
    except GpuSensorError as exc:
        return {"reason": "GPU sensor failed: %s" % exc, "waited_s": 0.0}
    finally:
        close = getattr(sensor, "close", None)
        if close:
            close()
    return {
        "reason": result.get("reason"),
        "waited_s": result.get("waited"),
        "start_temp_c": result.get("start_temp"),
        "end_temp_c": result.get("end_temp"),
        "threshold_c": result.get("threshold"),
        "timed_out": bool(result.get("timed_out")),
        "polls": result.get("polls"),
    }


class JobStopped(BaseException):
    """SIGTERM: end the current workload and leave its run unfinished (a resume runs it again)."""


def _stop_on_sigterm(signum, frame):
    raise JobStopped("stopped by signal %d" % signum)


class Run:
    """One execution of one planned run."""

    def __init__(self, module: AnsibleModule, plan, job=None):
        self.m = module
        p = module.params
        self.p = p
        self.plan = plan
        self.job = job
        self._tracker = None  # memstate.PeakTracker of the run in progress
        self._flags = None  # the container's resolved docker run flags
        self._fp = None  # fingerprint.Sampler of the measured step in progress
        self._launch_warnings = []  # launcher warnings (a rootfs marker without the image's entrypoint)
        if not isinstance(plan, dict):
            module.fail_json(msg="runs: each planned run must be a dict, got %r" % (plan,))
        for key in ("run_id", "model", "environment", "workload", "iteration"):
            if key not in self.plan:
                module.fail_json(msg="runs: missing key %r in the planned run %r" % (key, plan.get("run_id")))
        for what, name in (("campaign", p["campaign"]), ("host", p["host"])):
            if not SAFE_NAME.match(name):
                module.fail_json(msg="%s %r: use letters, digits, '.', '_' and '-' only" % (what, name))
        self.model = self.plan["model"]
        self.environment = self.plan["environment"]
        self.workload = self.plan["workload"]
        problems = []  # the campaign's rules for a workload (types, physical ranges, no NaN): the same definition
        check_mapping(self.workload if isinstance(self.workload, dict) else {}, WORKLOAD_FIELDS,
                      "runs[%s].workload" % plan.get("run_id"), problems, unknown=False, required=False)
        if problems or not isinstance(self.workload, dict):
            module.fail_json(msg="; ".join(problems) or "runs: workload must be a mapping, got %r" % (self.workload,))
        expected = run_id(p["campaign"], p["host"], self.model["name"], self.environment["name"],
                          self.workload["name"], int(self.plan["iteration"]))
        if expected != self.plan["run_id"]:
            module.fail_json(msg="run: run_id %r does not match its identity (%s)" % (self.plan["run_id"], expected))
        self.rid = expected
        # Each planned run carries its own timeout and cooldown (campaign.plan resolves them once, on the
        # controller); the module's options are the defaults of a plan entry without them. Checked with the
        # campaign's rules before any run starts.
        try:
            self.cooldown = Cooldown.from_mapping(self.plan.get("cooldown", p["cooldown"]), "cooldown").to_dict()
        except ValueError as exc:
            module.fail_json(msg="run %s: %s" % (self.rid, exc))
        self.timeout_s = self.plan.get("timeout_s", p["timeout_s"])
        problem = field_problem(_TIMEOUT_FIELD, self.timeout_s)
        if problem:
            module.fail_json(msg="run %s: timeout_s: %s" % (self.rid, problem))
        self.host_dir = os.path.join(p["results_root"], p["campaign"], p["host"])
        self.run_dir = os.path.join(self.host_dir, "runs", self.rid)
        self.ledger = os.path.join(self.host_dir, "ledger.jsonl")
        self.record_path = os.path.join(self.run_dir, "record.json")
        self.reserve = os.path.join(self.host_dir, ".sparkfleet-reserve")
        self.workloads_dir = os.path.join(p["results_root"], WORKLOADS_SUBDIR)

    # ---------------------------------------------------------------------------- resume
    def previous(self, states: dict):
        """The finished record when this run is already done, else None (after moving a partial dir aside).

        ``states``: the ledger's run states, read once per job (a run's own state changes only by its own run).
        """
        state = states.get(self.rid)
        record = None
        if os.path.exists(self.record_path):
            try:
                with open(self.record_path) as fh:
                    record = json.load(fh)
            except ValueError:
                record = None
        if record and record.get("status") in FINAL:
            if not state or state.get("event") != "finished":  # crashed between record and ledger
                append_event(self.ledger, "finished", self.rid, status=record["status"], recovered=True,
                             **self._ledger_fields(record))
            if self.p["retry_failed"] and record["status"] in RETRY_STATUSES:
                self._move_aside("retried")
                return None
            return record
        if os.path.isdir(self.run_dir):
            self._move_aside("interrupted")
        return None

    def _move_aside(self, why: str) -> None:
        n = 1
        while os.path.exists("%s.%s-%d" % (self.run_dir, why, n)):
            n += 1
        os.rename(self.run_dir, "%s.%s-%d" % (self.run_dir, why, n))

    # ------------------------------------------------------------------------------- run
    def _reserve_space(self) -> None:
        if not os.path.exists(self.reserve):
            with open(self.reserve, "wb") as fh:
                fh.write(b"\0" * RESERVE_BYTES)
                fh.flush()
                os.fsync(fh.fileno())

    def execute(self) -> dict:
        kind = self.environment.get("kind", "native")
        os.makedirs(self.run_dir, exist_ok=True)
        try:
            self._reserve_space()
        except OSError as exc:
            # The disk is already full: this run cannot even be recorded. It stays unfinished in the ledger
            # (a resume runs it once there is space); the task does not fail, so what this host measured
            # so far is still collected.
            record = self._base_record(kind)
            record.reason = "disk full on %s: the run was not started (%s)" % (self.host_dir, exc)
            return self._result(record.to_dict(), changed=False, written=False)
        append_event(self.ledger, "started", self.rid, order_index=self.plan.get("order_index"))
        record = self._base_record(kind)
        cooldown = _cooldown(self.cooldown)
        record.cooldown = cooldown
        if cooldown.get("timed_out") and self.cooldown["on_timeout"] == "fail":
            return self._finish(record, "failed", "cooldown: GPU not settled within max_wait_s", {}, None)
        try:
            steps = engine_steps(self.workload.get("engine", "trtllm"), self.workload, self.model,
                                 self.run_dir, self.workloads_dir, trtllm=self._trtllm(),
                                 hf_cache=bool(self._trtllm().get("hf_cache_dir")))
            launches = [(name, self._command(kind, name, argv), out) for name, argv, out in steps]
            if self.workload.get("engine", "trtllm") == "trtllm":  # the version the commands were built for
                record.versions["trtllm"] = trtllm_cli.record(self._trtllm(), trtllm_cli.resolve(self._trtllm()))
        except (RunSetupError, trtllm_cli.TrtllmCliError, ValueError, TypeError) as exc:
            return self._finish(record, "failed", "setup: %s" % exc, {}, None)
        record.command = redact(launches[-1][1])
        from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import memstate
        from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.telemetry import TelemetrySampler

        # Memory state (issue 15): the workload's page-cache factor, its LLM API options, the state at start.
        options = trtllm_cli.llm_api_options(self.workload)
        if options is not None:
            with open(os.path.join(self.run_dir, trtllm_cli.LLM_API_OPTIONS), "w") as fh:
                fh.write(options)
        drop = memstate.drop_page_cache() if self.workload.get("drop_caches") else None
        if drop is not None and not drop["done"]:
            record.memory = memstate.section(self.workload.get("kv_fraction"), drop, None, None, self._flags)
            return self._finish(record, "failed", "setup: drop_caches: %s (needs root)" % drop["error"], {}, None)
        start = memstate.start_state()
        self._tracker = memstate.PeakTracker()
        sampler = TelemetrySampler(os.path.join(self.run_dir, "telemetry.csv"),
                                   interval_s=float(self.p["telemetry_interval_s"]), memory_tracker=self._tracker)
        started = time.time()
        deadline = time.monotonic() + float(self.timeout_s)
        outcome = {"rc": None, "timed_out": False}
        sampler.start()
        try:
            for name, cmd, stdout in launches:
                log = os.path.join(self.run_dir, "bench.log" if name == "bench" else "%s.log" % name)
                self._fp = fingerprint.Sampler() if name == "bench" else None
                outcome = self._launch(kind, cmd, log, deadline - time.monotonic(), sampler, stdout)
                if outcome["timed_out"] or outcome["rc"] != 0:
                    outcome["step"] = name
                    break
        except OSError as exc:  # disk full, permissions: this run fails, the matrix goes on
            outcome = {"rc": None, "timed_out": False, "error": "%s: %s" % (type(exc).__name__, exc)}
        finally:
            telemetry = sampler.stop()
            self._tracker.close()
            record.fingerprint = self._fingerprint(kind)
            if kind == "container":
                subprocess.run([self._docker(), "rm", "-f", self._container_name()], capture_output=True)
        record.memory = memstate.section(self.workload.get("kv_fraction"), drop, start, self._tracker, self._flags)
        record.memory["environment"] = {k: self.environment.get(k) for k in
                                        ("name", "kind", "variant", "aa_group", "aa_member")}
        record.started_utc, record.ended_utc = _utc(started), _utc(time.time())
        record.duration_s = round(time.time() - started, 3)
        record.telemetry = telemetry
        record.exit_code = outcome.get("rc")
        return self._judge(record, outcome)

    def _docker(self) -> str:
        return (self.p["container"] or {}).get("docker") or "docker"

    def _container_name(self) -> str:
        return ("sf-" + self.rid)[:120]

    def _env(self) -> dict:
        env = {str(k): str(v) for k, v in (self.p["env"] or {}).items()}
        env.update({str(k): str(v) for k, v in (self.workload.get("env") or {}).items()})
        env.setdefault("SPARKFLEET_ENV_PROBE", "%s/%s" % (self.environment.get("kind"), self.environment["name"]))
        if self.workload.get("engine", "trtllm") == "trtllm":  # offline unless a Hugging Face cache is bound
            for key, value in trtllm_cli.run_env(self._trtllm().get("hf_cache_dir")).items():
                env.setdefault(key, value)
        return env

    def _trtllm(self) -> dict:
        """The image's TensorRT-LLM detection (engine_probe) with the run's unknown_version and hf_cache_dir."""
        return self.p["trtllm"] or {}

    def _command(self, kind: str, step: str, argv: list) -> list:
        if kind == "bare":  # straight on the host, with the module's own environment plus the workload's
            return ["/usr/bin/env", "-C", self.run_dir] + ["%s=%s" % kv for kv in self._env().items()] + list(argv)
        if kind == "native":
            native = self.p["native"] or {}
            return native_command(native.get("rootfs"), native.get("image_env") or {}, argv, self._env(), self.run_dir,
                                  warnings=self._launch_warnings)
        container = self.p["container"] or {}
        flags = self.environment.get("docker_flags")
        if flags is None:
            flags = (container.get("flags") or {}).get(self.environment["name"])
        if flags is None:
            raise RunSetupError("no docker flags resolved for environment %r" % self.environment["name"])
        if not self.p["gpu_present"]:
            flags = strip_gpu_flags(flags)
        self._flags = list(flags)
        results_root = self.p["results_root"]
        binds = [(results_root, results_root, False)]
        if self.p["models_dir"] and os.path.isdir(self.p["models_dir"]):
            binds.append((self.p["models_dir"], self.p["models_dir"], True))
        hf_cache = self._trtllm().get("hf_cache_dir") if self.workload.get("engine", "trtllm") == "trtllm" else None
        if hf_cache:  # opted in: the same cache, at the same place, as the native rootfs binds it
            if not os.path.isdir(hf_cache):
                raise RunSetupError("hf_cache_dir %r is not a directory on this host" % hf_cache)
            binds.append((hf_cache, trtllm_cli.HF_CACHE_TARGET, False))
        labels = {"sparkfleet.run_id": self.rid, "sparkfleet.campaign": self.p["campaign"], "sparkfleet.step": step}
        return container_command(self._docker(), self._container_name(), container.get("image"), flags, argv,
                                 self._env(), self.run_dir, binds, labels)

    def _launch(self, kind: str, cmd: list, log: str, timeout: float, sampler, stdout=None) -> dict:
        if kind != "container":
            return run_process(cmd, log, timeout, on_start=self._registered, stdout_path=stdout)
        docker, name = self._docker(), self._container_name()
        subprocess.run([docker, "rm", "-f", name], capture_output=True)  # a leftover from a killed run

        def watch_cgroup(proc):
            self._registered(proc, container=name, docker=docker)

            def find():
                path = container_cgroup_memory_file(docker, name)
                if path:
                    sampler.set_cgroup_memory_file(path)
                    if self._tracker is not None:
                        self._tracker.set_cgroup(path)
            threading.Thread(target=find, daemon=True).start()

        def kill_container():
            subprocess.run([docker, "kill", name], capture_output=True)

        try:
            return run_process(cmd, log, timeout, on_start=watch_cgroup, on_timeout=kill_container,
                               stdout_path=stdout)
        finally:
            subprocess.run([docker, "rm", "-f", name], capture_output=True)

    def _fingerprint(self, kind: str):
        """The record's fingerprint section (sparkfleet_host.fingerprint) of the measured step, or None."""
        if self._fp is None and not self._launch_warnings:
            return None
        launch = state = None
        if kind == "native":
            rootfs = (self.p["native"] or {}).get("rootfs")
            try:
                config = load_image_config(rootfs or "")
                launch = {"entrypoint": config["entrypoint"], "through_entrypoint": config["recorded"],
                          "working_dir": config["working_dir"], "user": config["user"]}
            except ChrootError:
                pass
            state = read_native_state(rootfs) if rootfs else None
        fp = self._fp.stop() if self._fp is not None else None
        return fingerprint.section(fp, kind, launch=launch, native_state=state, warnings=self._launch_warnings,
                                   error=self._fp.error if self._fp is not None else None)

    def _registered(self, proc, container=None, docker=None) -> None:
        if self._fp is not None:
            self._fp.start(proc.pid, container=container, docker=docker)
        if self.job is not None:
            self.job.running(self.rid, child_pgid=proc.pid, container=container, docker=docker)

    # ------------------------------------------------------------------------- judging
    def _judge(self, record, outcome: dict) -> dict:
        bench_log = os.path.join(self.run_dir, "bench.log")
        report_json = os.path.join(self.run_dir, "report.json")
        parsed = None
        try:
            with open(bench_log, "rb") as fh:
                text = fh.read()
            json_data = None
            if os.path.exists(report_json):
                with open(report_json, "rb") as fh:
                    json_data = fh.read()
            parsed = parse_log(text, json_data)
        except OSError:
            parsed = None
        metrics = dict(parsed.metrics) if parsed else {}
        if parsed:
            record.model_loaded, record.engine_version = parsed.model, parsed.engine_version
            record.metric_sources, record.samples = dict(parsed.sources), dict(parsed.samples)
            record.parse_warnings, record.parse_missing, record.probe = parsed.warnings, parsed.missing, parsed.probe
            record.versions["engine"] = parsed.engine
            record.versions["engine_version"] = parsed.engine_version
            record.provenance = self._provenance(parsed)
        if outcome.get("error"):
            return self._finish(record, "failed", outcome["error"], metrics, parsed)
        if outcome["timed_out"]:
            return self._finish(record, "timeout", "timed out after %.0f s (step %s)"
                                % (float(self.timeout_s), outcome.get("step", "bench")), metrics, parsed)
        if outcome["rc"] != 0:
            log = bench_log if outcome.get("step", "bench") == "bench" else os.path.join(
                self.run_dir, "%s.log" % outcome["step"])
            return self._finish(record, "failed", "step %s exited %s: %s"
                                % (outcome.get("step", "bench"), outcome["rc"], _last_line(log)), metrics, parsed)
        if not metrics:
            missing = ", ".join(parsed.missing) if parsed else "bench.log unreadable"
            return self._finish(record, "failed", "no figures in bench.log (missing: %s)" % missing, metrics, parsed)
        if parsed and parsed.model and not model_matches(self.model, parsed.model):
            return self._finish(record, "invalid", "log says model %r was loaded, campaign asked for %r"
                                % (parsed.model, self.model.get("hf_id") or self.model["name"]), metrics, parsed)
        provenance = record.provenance or {}
        if provenance.get("status") == "mismatch":
            return self._finish(record, "invalid", "provenance: %s" % provenance.get("reason"), metrics, parsed)
        # Unconfirmed stays ok for the statistics; the reason and the report's warning say so.
        reason = None if provenance.get("status") in ("confirmed", "not_applicable") else (
            "provenance unconfirmed: %s" % (provenance.get("reason") or "the log does not show the loaded model"))
        return self._finish(record, "ok", reason, metrics, parsed)

    def _provenance(self, parsed) -> dict:
        """Did the engine load the requested model? Its output (parsed.loaded) against the model directory's
        card (modelcard.fingerprint, read once per directory and call). A log's model name equal to our own
        argument is no evidence: only what the engine read from the checkpoint can confirm."""
        engine = self.workload.get("engine", "trtllm")
        try:
            path = self.model.get("path")
            card, problem = _MODEL_CARDS.get(path) if path else (
                None, "the model has no path; a Hugging Face id is loaded from the engine's own cache")
            extra = parsed.extra or {}
            world = 1
            for key in ("tp_size", "pp_size"):
                if isinstance(extra.get(key), int) and extra[key] > 0:
                    world *= extra[key]
            verdict = modelcard.judge(card, dict(parsed.loaded or {}), problem, world=world,
                                      applicable=engine != "matmul")
        except Exception as exc:  # a bug here must not lose the run: it stays unconfirmed, saying why
            verdict = {"status": "unconfirmed", "reason": "provenance check failed: %s: %s"
                       % (type(exc).__name__, exc), "expected": None, "loaded": None, "checks": {}}
        if parsed.model and not model_matches(self.model, parsed.model):
            want = self.model.get("hf_id") or self.model["name"]
            verdict["checks"]["model_name"] = {"ok": False, "expected": want, "loaded": parsed.model}
            verdict["reason"] = "; ".join(r for r in ("model_name: the engine loaded %s, the campaign asked for %s"
                                                      % (parsed.model, want), verdict.get("reason")) if r)
            verdict["status"] = "mismatch"
        return verdict

    def _base_record(self, kind: str):
        """The run's record from the contract's one builder (sparkfleet_host.record.new_record)."""
        return new_record(
            self.p["campaign"], self.p["host"], self.model["name"], self.environment["name"], self.workload["name"],
            int(self.plan["iteration"]),
            model_id=self.model.get("hf_id") or self.model.get("path"),
            environment_kind=kind,
            workload_params={k: v for k, v in self.workload.items() if k not in ("name", "env")},
            engine=self.workload.get("engine"),
            warmup=bool(self.plan.get("warmup")),
            order_index=self.plan.get("order_index"),
            versions=dict(self.p["versions"] or {}),
        )

    def _finish(self, record, status: str, reason, metrics: dict, parsed) -> dict:
        try:
            low = _free_bytes(self.host_dir) < LOW_SPACE_BYTES
        except OSError:
            low = False
        if low:  # whatever the workload said, a full disk is the cause worth naming
            status = "failed" if status == "ok" else status
            reason = "disk full on %s (%s)" % (self.host_dir, reason or "the run's output could not be written")
        record.status, record.reason, record.metrics = status, reason, metrics
        written = True
        data = record.to_dict()
        for attempt in (1, 2):
            try:
                # Validated against the contract as it is written: a record that breaks it is written as a
                # failed run whose reason names the violation, never as a file the report would skip.
                data, _ = write_record(self.record_path, record)
                append_event(self.ledger, "finished", self.rid, status=data["status"], **self._ledger_fields(data))
                break
            except ContractError as exc:  # the identity itself is broken: nothing honest can be written
                written = False
                data["reason"] = "%s; record not written: %s" % (reason or status, exc)
                break
            except OSError as exc:
                if attempt == 1 and os.path.exists(self.reserve):
                    os.unlink(self.reserve)  # give the record the space kept for it, then try again
                    continue
                written = False
                data["reason"] = "%s; record not written: %s" % (reason or status, exc)
        return self._result(data, changed=True, written=written)

    def _ledger_fields(self, record: dict) -> dict:
        """What a follower needs to show the finished run without reading its record."""
        return {"order_index": self.plan.get("order_index"), "duration_s": record.get("duration_s"),
                "cooldown_s": (record.get("cooldown") or {}).get("waited_s"), "model": record.get("model"),
                "environment": record.get("environment"), "workload": record.get("workload"),
                "iteration": record.get("iteration"), "warmup": record.get("warmup")}

    def _result(self, record: dict, changed: bool, written: bool = True, skipped: bool = False) -> dict:
        cooldown = record.get("cooldown") or {}
        status = "skipped" if skipped else record.get("status")
        event = {
            "type": "run", "run_id": self.rid, "order_index": self.plan.get("order_index"),
            "total": self.p["total"], "status": status, "duration_s": record.get("duration_s"),
            "cooldown_s": cooldown.get("waited_s"), "model": record.get("model"),
            "environment": record.get("environment"), "workload": record.get("workload"),
            "iteration": record.get("iteration"), "warmup": record.get("warmup"),
        }
        return {"changed": changed, "run_id": self.rid, "status": status, "reason": record.get("reason"),
                "record_path": self.record_path, "record_written": written, "metrics": record.get("metrics") or {},
                "cooldown": cooldown, "sparkfleet_event": event}


def _budget_s(runs: list) -> float:
    """Longest a job of these runs may take: each run's timeout and longest cooldown, and some slack."""
    return sum(float(run.timeout_s) + (float(run.cooldown["max_wait_s"]) if run.cooldown["enabled"] else 0.0) + 120
               for run in runs) + 600


def _take_lock(module: AnsibleModule, host_dir: str, runs: list):
    """One job per host and campaign: wait for a job a killed controller left running to end."""
    os.makedirs(host_dir, exist_ok=True)
    lock = open(os.path.join(host_dir, ".lock"), "w")  # noqa: SIM115 (held until the process exits)
    deadline = time.monotonic() + _budget_s(runs)
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except OSError:
            if time.monotonic() > deadline:
                module.fail_json(msg="%s: another bench_run still holds %s" % (module.params["host"], lock.name))
            time.sleep(0.5)


def _check_campaign_config(module: AnsibleModule, runs: list, keep: bool = False) -> None:
    """Refuse to resume results produced with another configuration of this campaign; keep this one."""
    config = module.params["campaign_config"]
    if not config or not runs:
        return
    host_dir = runs[0].host_dir
    problem = check_host(host_dir, module.params["campaign"], config)
    if problem:
        module.fail_json(msg="%s: %s" % (module.params["host"], problem))
    if keep:
        keep_config(host_dir, config, write_json_atomic)


def _summary(results: list) -> dict:
    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    line = "%d runs \u2014 %s" % (len(results), ", ".join("%s %d" % kv for kv in counts.items()))
    return {"runs": results, "counts": counts, "summary": line.rstrip(" \u2014"),
            "changed": any(r["changed"] for r in results),
            "sparkfleet_events": [r["sparkfleet_event"] for r in results]}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            runs=dict(type="list", elements="dict", required=True),
            campaign=dict(type="str", required=True),
            host=dict(type="str", required=True),
            results_root=dict(type="path", required=True),
            total=dict(type="int", default=0),
            native=dict(type="dict", default={}),
            container=dict(type="dict", default={}),
            gpu_present=dict(type="bool", default=True),
            env=dict(type="dict", default={}),
            models_dir=dict(type="path"),
            cooldown=dict(type="dict", default={}),
            timeout_s=dict(type="float", default=3600),
            telemetry_interval_s=dict(type="float", default=1.0),
            retry_failed=dict(type="bool", default=False),
            versions=dict(type="dict", default={}),
            campaign_config=dict(type="dict"),
            trtllm=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    params = module.params
    # The campaign's and the inventory's rules (settings): a NaN or an infinity is refused like a zero.
    for name, field in (("timeout_s", _TIMEOUT_FIELD), ("telemetry_interval_s", _TELEMETRY_FIELD)):
        problem = field_problem(field, params[name])
        if problem:
            module.fail_json(msg="%s: %s" % (name, problem))
    try:  # the campaign's rules (settings), checked before any run starts: never a ValueError mid-matrix
        params["cooldown"] = Cooldown.from_mapping(params["cooldown"], "cooldown").to_dict()
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if not params["total"]:
        params["total"] = len(params["runs"])
    runs = [Run(module, plan) for plan in params["runs"]]  # every run's inputs are checked before any starts
    seen = set()
    for run in runs:
        if run.rid in seen:
            module.fail_json(msg="runs: run %s is planned twice" % run.rid)
        seen.add(run.rid)
    if module.check_mode:
        _check_campaign_config(module, runs)
        results = []
        for run in runs:
            event = {"type": "run", "run_id": run.rid, "status": "planned", "total": params["total"],
                     "order_index": run.plan.get("order_index")}
            results.append({"changed": True, "run_id": run.rid, "status": "planned", "reason": "check mode: not run",
                            "record_path": run.record_path, "metrics": {}, "cooldown": {}, "sparkfleet_event": event})
        module.exit_json(**_summary(results))
    if not runs:
        module.exit_json(**_summary([]))
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    results = []
    try:
        with JobRegistration(params["results_root"], params["campaign"], params["host"]) as job:
            lock = _take_lock(module, runs[0].host_dir, runs)
            _check_campaign_config(module, runs, keep=True)
            states = run_states(runs[0].ledger)
            announced = False
            for run in runs:
                run.job = job
                previous = run.previous(states)
                if previous is not None:
                    results.append(run._result(previous, changed=False, skipped=True))
                    continue
                if not announced:  # before the first run it executes: a job with nothing to do leaves the ledger be
                    append_event(runs[0].ledger, "job", None, pid=os.getpid(), planned=len(runs),
                                 skipped=len(results))
                    announced = True
                results.append(run.execute())
                job.running()
            lock.close()
    except JobStopped as exc:
        summary = _summary(results)
        summary["changed"] = True
        module.fail_json(msg="%s: %s after %d of %d runs; the run it was in stays unfinished, a resume runs it again"
                         % (params["host"], exc, len(results), len(runs)), **summary)
    module.exit_json(**_summary(results))


if __name__ == "__main__":
    main()
