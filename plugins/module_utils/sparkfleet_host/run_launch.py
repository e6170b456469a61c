# -*- coding: utf-8 -*-
"""Launching one run: the cooldown before it, its commands in its environment, and what is measured meanwhile.

Used by ``matrix_run`` (the bench_run module's job). :func:`wait_cooldown` waits for the GPU like
thermal_wait; a :class:`Launcher` belongs to one planned run (``matrix_run.PlannedRun``): it builds the run's
commands for its environment (``bare``, ``native`` through the chroot, ``container`` through ``docker run``;
the argv pieces are runexec's), runs them with telemetry, memory state and the process fingerprint sampled,
and fills the record's measured fields. Judging the output is run_judge's, writing the record run_record's.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

from . import fingerprint, memstate, trtllm_cli
from .chroot import ChrootError, load_image_config, read_native_state
from .gpu import GpuSensorError, open_sensor
from .ledger import utc
from .runexec import (
    WORKLOADS_SUBDIR,
    RunSetupError,
    container_cgroup_memory_file,
    container_command,
    engine_steps,
    native_command,
    redact,
    run_process,
    strip_gpu_flags,
)
from .telemetry import TelemetrySampler
from .thermal import Cooldown, wait_for_cooldown

#: What a run's setup may raise: the run fails at setup, naming it; the matrix goes on.
SETUP_ERRORS = (RunSetupError, trtllm_cli.TrtllmCliError, ValueError, TypeError)


def wait_cooldown(params: dict) -> dict:
    """Wait for the GPU like thermal_wait; a host without a GPU sensor skips the wait, saying so.

    ``params``: the run's cooldown, already checked (Cooldown.from_mapping)."""
    cooldown = Cooldown(**(params or {}))
    if not cooldown.enabled:
        return {"reason": "disabled", "waited_s": 0.0}
    try:
        sensor = open_sensor("auto")
    except (GpuSensorError, OSError) as exc:
        return {"reason": "no GPU sensor: %s" % exc, "waited_s": 0.0}
    try:
        result = wait_for_cooldown(sensor, **cooldown.wait_kwargs())
    except GpuSensorError as exc:
        return {"reason": "GPU sensor failed: %s" % exc, "waited_s": 0.0}
    finally:
        sensor.close()
    return {
        "reason": result.get("reason"),
        "waited_s": result.get("waited"),
        "start_temp_c": result.get("start_temp"),
        "end_temp_c": result.get("end_temp"),
        "threshold_c": result.get("threshold"),
        "timed_out": bool(result.get("timed_out")),
        "polls": result.get("polls"),
    }


def run_env(base: dict, workload: dict, environment: dict, trtllm: dict) -> dict:
    """A run's environment variables: ``base`` (the inventory's), the workload's, the probe, trtllm's offline
    defaults. The one definition: ``sparkfleet plan`` shows what this returns."""
    env = {str(k): str(v) for k, v in (base or {}).items()}
    env.update({str(k): str(v) for k, v in (workload.get("env") or {}).items()})
    env.setdefault("SPARKFLEET_ENV_PROBE", "%s/%s" % (environment.get("kind"), environment["name"]))
    if workload.get("engine", "trtllm") == "trtllm":  # offline unless a Hugging Face cache is bound
        for key, value in trtllm_cli.run_env(trtllm.get("hf_cache_dir")).items():
            env.setdefault(key, value)
    return env


class Launcher:
    """The commands of one planned run (``run``: a matrix_run.PlannedRun) in its environment.

    ``params``: the bench_run request (native, container, gpu_present, env, models_dir, results_root,
    campaign, telemetry_interval_s, trtllm); ``job``: the jobs.JobRegistration told what runs now, or None.
    """

    def __init__(self, run, params: dict, job=None):
        self.run = run
        self.p = params
        self.job = job
        self.kind = run.environment.get("kind", "native")
        self.workloads_dir = os.path.join(params["results_root"], WORKLOADS_SUBDIR)
        self.flags = None  # the container's resolved docker run flags
        self.tracker = None  # memstate.PeakTracker of the run in progress
        self.fp = None  # fingerprint.Sampler of the measured step in progress
        self.warnings = []  # launcher warnings (a rootfs marker without the image's entrypoint)

    # ------------------------------------------------------------------------- commands
    def prepare(self, record) -> list:
        """The run's launches [(step, command, stdout_path), ...]; records the command and the trtllm version.
        Raises one of SETUP_ERRORS when the run cannot be launched as asked."""
        workload = self.run.workload
        steps = engine_steps(workload.get("engine", "trtllm"), workload, self.run.model,
                             self.run.run_dir, self.workloads_dir, trtllm=self.trtllm(),
                             hf_cache=bool(self.trtllm().get("hf_cache_dir")))
        launches = [(name, self.command(name, argv), out) for name, argv, out in steps]
        if workload.get("engine", "trtllm") == "trtllm":  # the version the commands were built for
            record.versions["trtllm"] = trtllm_cli.record(self.trtllm(), trtllm_cli.resolve(self.trtllm()))
        record.command = redact(launches[-1][1])
        return launches

    def docker(self) -> str:
        return (self.p["container"] or {}).get("docker") or "docker"

    def container_name(self) -> str:
        return ("sf-" + self.run.rid)[:120]

    def trtllm(self) -> dict:
        """The image's TensorRT-LLM detection (engine_probe) with the run's unknown_version and hf_cache_dir."""
        return self.p["trtllm"] or {}

    def env(self) -> dict:
        return run_env(self.p["env"], self.run.workload, self.run.environment, self.trtllm())

    def command(self, step: str, argv: list) -> list:
        run_dir, environment = self.run.run_dir, self.run.environment
        if self.kind == "bare":  # straight on the host, with the module's own environment plus the workload's
            return ["/usr/bin/env", "-C", run_dir] + ["%s=%s" % kv for kv in self.env().items()] + list(argv)
        if self.kind == "native":
            native = self.p["native"] or {}
            return native_command(native.get("rootfs"), native.get("image_env") or {}, argv, self.env(), run_dir,
                                  warnings=self.warnings)
        container = self.p["container"] or {}
        flags = environment.get("docker_flags")
        if flags is None:
            flags = (container.get("flags") or {}).get(environment["name"])
        if flags is None:
            raise RunSetupError("no docker flags resolved for environment %r" % environment["name"])
        if not self.p["gpu_present"]:
            flags = strip_gpu_flags(flags)
        self.flags = list(flags)
        results_root = self.p["results_root"]
        binds = [(results_root, results_root, False)]
        if self.p["models_dir"] and os.path.isdir(self.p["models_dir"]):
            binds.append((self.p["models_dir"], self.p["models_dir"], True))
        engine = self.run.workload.get("engine", "trtllm")
        hf_cache = self.trtllm().get("hf_cache_dir") if engine == "trtllm" else None
        if hf_cache:  # opted in: the same cache, at the same place, as the native rootfs binds it
            if not os.path.isdir(hf_cache):
                raise RunSetupError("hf_cache_dir %r is not a directory on this host" % hf_cache)
            binds.append((hf_cache, trtllm_cli.HF_CACHE_TARGET, False))
        labels = {"sparkfleet.run_id": self.run.rid, "sparkfleet.campaign": self.p["campaign"],
                  "sparkfleet.step": step}
        return container_command(self.docker(), self.container_name(), container.get("image"), flags, argv,
                                 self.env(), run_dir, binds, labels)

    # --------------------------------------------------------------------------- memory
    def prepare_memory(self, record):
        """The workload's LLM API options file and page-cache drop (issue 15), before the run: (drop, problem),
        ``problem`` the setup failure to record (the record's memory section then says what was done)."""
        workload = self.run.workload
        options = trtllm_cli.llm_api_options(workload)
        if options is not None:
            with open(os.path.join(self.run.run_dir, trtllm_cli.LLM_API_OPTIONS), "w") as fh:
                fh.write(options)
        drop = memstate.drop_page_cache() if workload.get("drop_caches") else None
        if drop is not None and not drop["done"]:
            record.memory = memstate.section(drop, None, None, self.flags)
            return drop, "setup: drop_caches: %s (needs root)" % drop["error"]
        return drop, None

    # ---------------------------------------------------------------------------- run
    def measure(self, record, launches: list, drop, timeout_s) -> dict:
        """Run the launches in order within ``timeout_s`` while sampling telemetry, memory and the measured
        step's fingerprint; fill the record's measured fields. Returns the outcome (run_process's dict, with
        ``step`` the step that stopped the run, or ``error``)."""
        run_dir = self.run.run_dir
        start = memstate.start_state()
        self.tracker = memstate.PeakTracker()
        sampler = TelemetrySampler(os.path.join(run_dir, "telemetry.csv"),
                                   interval_s=float(self.p["telemetry_interval_s"]), memory_tracker=self.tracker)
        started = time.time()
        deadline = time.monotonic() + float(timeout_s)
        outcome = {"rc": None, "timed_out": False}
        sampler.start()
        try:
            for name, cmd, stdout in launches:
                log = os.path.join(run_dir, "bench.log" if name == "bench" else "%s.log" % name)
                self.fp = fingerprint.Sampler() if name == "bench" else None
                outcome = self.launch(cmd, log, deadline - time.monotonic(), sampler, stdout)
                if outcome["timed_out"] or outcome["rc"] != 0:
                    outcome["step"] = name
                    break
        except OSError as exc:  # disk full, permissions: this run fails, the matrix goes on
            outcome = {"rc": None, "timed_out": False, "error": "%s: %s" % (type(exc).__name__, exc)}
        finally:
            telemetry = sampler.stop()
            self.tracker.close()
            record.fingerprint = self.fingerprint()
            if self.kind == "container":
                subprocess.run([self.docker(), "rm", "-f", self.container_name()], capture_output=True)
        environment = self.run.environment
        record.memory = memstate.section(drop, start, self.tracker, self.flags)
        record.memory["environment"] = {k: environment.get(k) for k in
                                        ("name", "kind", "variant", "aa_group", "aa_member")}
        record.started_utc, record.ended_utc = utc(started), utc(time.time())
        record.duration_s = round(time.time() - started, 3)
        record.telemetry = telemetry
        record.exit_code = outcome.get("rc")
        return outcome

    def launch(self, cmd: list, log: str, timeout: float, sampler, stdout=None) -> dict:
        if self.kind != "container":
            return run_process(cmd, log, timeout, on_start=self.registered, stdout_path=stdout)
        docker, name = self.docker(), self.container_name()
        subprocess.run([docker, "rm", "-f", name], capture_output=True)  # a leftover from a killed run

        def watch_cgroup(proc):
            self.registered(proc, container=name, docker=docker)

            def find():
                path = container_cgroup_memory_file(docker, name)
                if path:
                    sampler.set_cgroup_memory_file(path)
                    if self.tracker is not None:
                        self.tracker.set_cgroup(path)
            threading.Thread(target=find, daemon=True).start()

        def kill_container():
            subprocess.run([docker, "kill", name], capture_output=True)

        try:
            return run_process(cmd, log, timeout, on_start=watch_cgroup, on_timeout=kill_container,
                               stdout_path=stdout)
        finally:
            subprocess.run([docker, "rm", "-f", name], capture_output=True)

    def registered(self, proc, container=None, docker=None) -> None:
        if self.fp is not None:
            self.fp.start(proc.pid, container=container, docker=docker)
        if self.job is not None:
            self.job.running(self.run.rid, child_pgid=proc.pid, container=container, docker=docker)

    def fingerprint(self):
        """The record's fingerprint section (sparkfleet_host.fingerprint) of the measured step, or None."""
        if self.fp is None and not self.warnings:
            return None
        launch = state = None
        if self.kind == "native":
            rootfs = (self.p["native"] or {}).get("rootfs")
            try:
                config = load_image_config(rootfs or "")
                launch = {"entrypoint": config["entrypoint"], "through_entrypoint": config["recorded"],
                          "working_dir": config["working_dir"], "user": config["user"]}
            except ChrootError:
                pass
            state = read_native_state(rootfs) if rootfs else None
        fp = self.fp.stop() if self.fp is not None else None
        return fingerprint.section(fp, self.kind, launch=launch, native_state=state, warnings=self.warnings,
                                   error=self.fp.error if self.fp is not None else None)
