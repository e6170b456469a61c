# -*- coding: utf-8 -*-
"""Launching one run: the cooldown before it, its commands in its environment, and what is measured meanwhile.

Used by ``matrix_run`` (the bench_run module's job). :func:`wait_cooldown` waits for the GPU like
thermal_wait; a :class:`Launcher` belongs to one planned run (``matrix_run.PlannedRun``): it builds the run's
commands for its environment (``bare``, ``native`` through the chroot, ``container`` through ``docker run``;
the argv pieces are runexec's), runs them with telemetry, memory state and the process fingerprint sampled,
and fills the record's measured fields. A serving run (:meth:`Launcher.serve`) starts its engine server in the
environment and drives the load generator on the host through the profile's points. Judging the output is
run_judge's, writing the record run_record's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time

from ..cluster import rdma_env, rsh
from ..contract.ledger import append_point, utc
from ..engines import modelcard, serving, serving_client, serving_provenance, trtllm_cli
from ..health.thermal import Cooldown, wait_for_cooldown
from ..rootfs.chroot import ChrootError, load_image_config, read_native_state
from ..sensors import fingerprint, memstate
from ..sensors.gpu import GpuSensorError, open_sensor
from ..sensors.telemetry import TelemetrySampler
from . import sla_search
from .jobs import ROOT_LABEL, RUN_LABEL
from .replica_proxy import ReplicaProxy
from .runexec import (
    COMPILE_CACHE_SUBDIR,
    WORKLOADS_SUBDIR,
    RunSetupError,
    bare_env,
    container_cgroup_memory_file,
    container_command,
    engine_steps,
    host_path,
    native_command,
    redact,
    run_process,
    strip_gpu_flags,
)

#: What a run's setup may raise: the run fails at setup, naming it; the matrix goes on.
SETUP_ERRORS = (RunSetupError, trtllm_cli.TrtllmCliError, serving.ServingError, ValueError, TypeError)
#: The env(1) that starts a host-side command in the run directory with extra variables (as ``bare`` runs do).
ENV_BIN = "/usr/bin/env"


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


def run_env(base: dict, workload: dict, environment: dict, trtllm: dict, results_root=None) -> dict:
    """A run's environment variables: ``base`` (the inventory's), the workload's, the probe, trtllm's offline
    defaults, hf-generate's Inductor cache under ``results_root``. The one definition: ``sparkfleet plan``
    shows what this returns."""
    env = {str(k): str(v) for k, v in (base or {}).items()}
    env.update({str(k): str(v) for k, v in (workload.get("env") or {}).items()})
    env.setdefault("SPARKFLEET_ENV_PROBE", "%s/%s" % (environment.get("kind"), environment["name"]))
    if workload.get("engine") == "hf-generate" and results_root:
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(results_root, COMPILE_CACHE_SUBDIR))
    if workload.get("engine", "trtllm") == "trtllm":  # offline unless a Hugging Face cache is bound
        for key, value in trtllm_cli.run_env(trtllm.get("hf_cache_dir")).items():
            env.setdefault(key, value)
    elif serving.is_serving(workload):  # engine servers load from local paths: nothing leaves the host
        for key, value in trtllm_cli.run_env(None).items():
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
        self.network = {}  # a serving container's network: {"network", "network_added"}
        self.executables = {}  # a bare run's step -> the executable its command resolved to on the host's PATH
        self.tokenizer = None  # a serving run's tokenizer (serving.tokenizer_choice), chosen at setup
        self.served = None  # a serving run's weights as served: {"card", "problem"} (modelcard.weights_card)
        self.rdma = None  # a multi-node NCCL run's RDMA check in its environment (rdma_env.check), or None

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

    def remove_container(self) -> None:
        """Remove this run's container if one is left (the readiness probe's, a killed run's)."""
        if self.kind == "container":
            subprocess.run([self.docker(), "rm", "-f", self.container_name()], capture_output=True)

    def container_name(self) -> str:
        return ("sf-" + self.run.rid)[:120]

    def trtllm(self) -> dict:
        """The image's TensorRT-LLM detection (engine_probe) with the run's unknown_version and hf_cache_dir."""
        return self.p["trtllm"] or {}

    def fabric_env(self) -> dict:
        """A multi-node run's fabric variables (this node's rails'); {} for any other run."""
        return dict((self.p.get("serving") or {}).get("fabric_env") or {}) if self.run.plan.get("cluster") else {}

    def rdma_hcas(self) -> list:
        """The rail HCAs whose RDMA this run must see in its environment (rdma_env.hcas_to_check); [] for a run that
        is not a multi-node run over NCCL."""
        wanted = (self.p.get("serving") or {}).get("rdma_env_check", True)  # sparkfleet_pair_rdma_env_check
        return rdma_env.hcas_to_check(self.fabric_env(), serving.over_nccl(self.run.workload), wanted)

    def check_rdma(self):
        """RDMA as the engine will see it, in the run's environment with its flags, before the server starts
        (cluster/rdma_env.py: NCCL would fall back to TCP sockets without a word); kept as ``self.rdma``. Why the
        run cannot go on, or None (passed, or no RDMA to check)."""
        hcas = self.rdma_hcas()
        if not hcas:
            return None
        try:
            self.rdma = rdma_env.check(lambda argv: self.command("rdma", argv), hcas, rdma_env.TIMEOUT_S)
        finally:
            self.remove_container()  # a probe killed at its timeout leaves its container
        if self.rdma["command"]:
            self.rdma["command"] = redact(self.rdma["command"])
        return None if self.rdma["pass"] else self.rdma["reason"]

    def env(self) -> dict:
        base = dict(self.fabric_env(), **(self.p["env"] or {}))  # the inventory's and the workload's win
        return run_env(base, self.run.workload, self.run.environment, self.trtllm(),
                       results_root=self.p["results_root"])

    def command(self, step: str, argv: list) -> list:
        run_dir, environment = self.run.run_dir, self.run.environment
        if self.kind == "bare":  # straight on the host: the workload's variables, the host's PATH (runexec.bare_env)
            env, self.executables[step] = bare_env(argv, self.env())
            return [ENV_BIN, "-C", run_dir] + ["%s=%s" % kv for kv in env.items()] + list(argv)
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
        if serving.is_serving(self.run.workload):  # the client on the host must reach the server's loopback
            flags, self.network = serving.with_host_network(flags)
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
        labels = {RUN_LABEL: self.run.rid, "sparkfleet.campaign": self.p["campaign"], "sparkfleet.step": step,
                  ROOT_LABEL: self.p["results_root"]}  # a clean-up removes this root's containers only
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
        self.fill_measured(record, drop, start, started, telemetry, outcome.get("rc"))
        return outcome

    def fill_measured(self, record, drop, start, started: float, telemetry, exit_code) -> None:
        """The record's memory, times, telemetry and exit code once the run's commands ended."""
        environment = self.run.environment
        record.memory = memstate.section(drop, start, self.tracker, self.flags)
        record.memory["environment"] = {k: environment.get(k) for k in
                                        ("name", "kind", "variant", "aa_group", "aa_member")}
        record.started_utc, record.ended_utc = utc(started), utc(time.time())
        record.duration_s = round(time.time() - started, 3)
        record.telemetry = telemetry
        record.exit_code = exit_code

    # ------------------------------------------------------------------------ serving
    def prepare_serving(self, record):
        """A serving run's server: (its argv, that argv in the run's environment), the client and its inputs
        checked; records the command. Raises one of SETUP_ERRORS when the run cannot be launched as asked."""
        workload, model = self.run.workload, self.run.model
        serving_client.driver(workload.get("client"))  # a client sparkfleet drives
        self.client_path()
        # the client's tokenizer: the model's, its directory's, or its GGUF's (derived once, under the results root)
        self.tokenizer = serving.tokenizer_choice(model, os.path.join(self.p["results_root"],
                                                                      serving.TOKENIZER_CACHE))
        corpus = (self.p.get("serving") or {}).get("corpus")
        if corpus and not os.path.isfile(corpus):
            raise RunSetupError("serving corpus %r is not a file on this host (sparkfleet_serving_corpus; its default, "
                                "the collection's corpus, is installed by the serving_client role)" % corpus)
        overriding = serving.overriding_args(workload)  # refused at validate; a plan written before is refused here
        if overriding:
            raise RunSetupError("; ".join(text for _, text in overriding))
        if not serving.managed(workload):  # an endpoint sparkfleet measures but does not start (issue 37)
            record.versions["engine"] = workload["engine"]
            return None, None
        if self.run.plan.get("cluster"):  # rank 0 of a multi-node run: its server names the workers started
            workers = list((self.p.get("serving") or {}).get("workers") or [])
            if len(workers) != len(self.run.plan["cluster"]["nodes"]) - 1:
                raise RunSetupError("multi-node run on cluster %s: %d worker address(es) given for nodes %s "
                                    "(playbooks/cluster_runs.yml starts the workers and gives their addresses)" % (
                                        self.run.plan["cluster"]["name"], len(workers),
                                        ", ".join(self.run.plan["cluster"]["nodes"][1:])))
            # the run's variables by name: a launcher that starts the other ranks itself (mpirun) passes them on
            argv = serving.head_argv(workload, model, workers, (self.p.get("serving") or {}).get("head_address"),
                                     sorted(self.env()))
            if serving.starts_workers_from_rank_0(workload):  # mpirun: over SSH, checked before it starts
                problem = rsh.unreachable(workers, dict(os.environ, **self.env()))
                if problem:
                    raise RunSetupError(problem)
        else:
            argv = serving.server_argv(workload, model)
        command = self.command("server", argv)
        record.command = redact(command)
        record.versions["engine"] = workload["engine"]
        return argv, command

    def tokenizer_path(self) -> str:
        """The tokenizer the client counts with (chosen at setup, else now)."""
        if self.tokenizer is None:
            self.tokenizer = serving.tokenizer_choice(self.run.model, os.path.join(self.p["results_root"],
                                                                                   serving.TOKENIZER_CACHE))
        return self.tokenizer["path"]

    def client_path(self) -> str:
        """The load generator's executable: bench_run's serving.client (llama-benchy's: sparkfleet_serving_client),
        else its serving.clients entry (what the serving_client role installed), else the driver's executable on the
        host's PATH (runexec.host_path: the login shell's, the module's, ~/.local/bin, the system directories)."""
        drv = serving_client.driver(self.run.workload.get("client"))
        given = self.p.get("serving") or {}
        path = ((given.get("client") if drv.name == serving_client.LlamaBenchy.name else None)
                or (given.get("clients") or {}).get(drv.name) or shutil.which(drv.EXECUTABLE, path=host_path()))
        if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise RunSetupError("serving client %s not found (%r): install it (the serving_client role installs %s "
                                "%s), or set sparkfleet_serving_client" % (drv.name, path, drv.PACKAGE, drv.PIN))
        return path

    def serving_section(self, argv) -> dict:
        """The record's serving section as a run starts (``argv``: its server's, None for an endpoint): the server,
        the client, the tokenizer, the cluster (its workers, this node's fabric variables and RDMA check) and no
        points yet. A run refused before its server starts records it as it is."""
        run, workload = self.run, self.run.workload
        seed = serving.shuffled_points(workload, run.rid)[1]
        given = self.p.get("serving") or {}
        return {
            "engine": workload["engine"],
            "server": dict({"managed": True, "argv": redact(argv or []), "port": serving.port(workload),
                            "ready_s": None, "log": "server.log", "stopped": None, "exit_code": None,
                            "listener": None},
                           **self.network, **({"executable": self.executables["server"]}
                                              if self.executables.get("server") else {}))
            if serving.managed(workload) else serving.unmanaged_server(workload),
            "client": {"name": serving_client.driver(workload.get("client")).name, "version": None, "argv": None,
                       "coherence_check": serving_client.driver(workload.get("client")).coherence(
                           bool(run.model.get("random_weights")), workload.get("client_args"))},
            "tokenizer": self.tokenizer, "corpus": given.get("corpus"),
            "cluster": dict(run.plan["cluster"], workers=list(given.get("workers") or []),
                            fabric_env=self.fabric_env(), rdma=self.rdma)
            if run.plan.get("cluster") else None,
            "random_weights": bool(run.model.get("random_weights")),
            "kv": None, "point_order_seed": seed, "points": []}

    def serve(self, record, server: tuple, drop, timeout_s) -> dict:
        """A serving run within ``timeout_s``: the server started in its environment and waited for, the client
        run on the host once per profile point (seeded shuffled order, each point a share of the time left),
        the server always stopped. Telemetry, memory and the server's fingerprint are sampled throughout.
        Fills the record's measured fields and its ``serving`` section (kv excepted: run_judge reads it from
        server.log). Returns the outcome: {"error": None or why the points never ran, "deadline_hit": bool}."""
        run, workload = self.run, self.run.workload
        argv, command = server
        points = serving.shuffled_points(workload, run.rid)[0]
        section = self.serving_section(argv)
        record.serving = section
        outcome = {"error": None, "deadline_hit": False}
        start = memstate.start_state()
        self.tracker = memstate.PeakTracker()
        sampler = TelemetrySampler(os.path.join(run.run_dir, "telemetry.csv"),
                                   interval_s=float(self.p["telemetry_interval_s"]), memory_tracker=self.tracker)
        started = time.time()
        deadline = time.monotonic() + float(timeout_s)
        # what is served (issue 35): the engine's build, asked in the run's environment before the server starts,
        # and the weights' card, read as the server is about to load them
        self.engine_version(record, section, deadline)
        if serving.managed(workload):
            card, problem = modelcard.weights_card(run.model.get("path"))
            self.served = {"card": card, "problem": problem}
        container = (self.docker(), self.container_name()) if self.kind == "container" else None
        on_start = (lambda proc: self.container_started(proc, sampler)) if container else self.registered
        self.fp = fingerprint.Sampler()
        sampler.start()
        try:
            if not serving.managed(workload):  # the endpoint's server: nothing to start, check or stop
                outcome["deadline_hit"] = self.run_points(section, points, serving.Unmanaged(), deadline)
            else:
                self.run_server(section, points, command, (container, on_start), deadline, outcome)
        except serving.ServingError as exc:  # the port is taken: the server was not started
            outcome["error"] = str(exc)
        except OSError as exc:  # disk full, permissions: this run fails, the matrix goes on
            outcome["error"] = "%s: %s" % (type(exc).__name__, exc)
        finally:
            telemetry = sampler.stop()
            self.tracker.close()
            record.fingerprint = self.fingerprint()
            shutil.rmtree(serving_client.client_env(run.run_dir)["HOME"], ignore_errors=True)
        stopped = section["server"]
        self.fill_measured(record, drop, start, started, telemetry,
                           stopped["exit_code"] if stopped.get("stopped") == "exited" else None)
        return outcome

    def run_server(self, section: dict, points: list, command: list, started: tuple, deadline: float,
                   outcome: dict) -> None:
        """The started server's life within a serving run: start it (``started``: (container, on_start)), wait
        until it answers, check its listener, drive the points, always stop it; ``outcome`` filled. Raises
        ServingError when its port is taken (the server was not started)."""
        workload, (container, on_start) = self.run.workload, started
        # the port is checked free before the start, and its listener once the server answers: only the server
        # sparkfleet started is measured (issue 33)
        with serving.ServerProcess(command, os.path.join(self.run.run_dir, "server.log"), serving.ready_url(workload),
                                   container=container, on_start=on_start, port=serving.port(workload)) as proc:
            try:
                ready_within = min(float(workload.get("ready_timeout_s") or 900), deadline - time.monotonic())
                section["server"]["ready_s"] = proc.wait_ready(ready_within)
                listener = section["server"]["listener"] = proc.check_listener()
                if listener["status"] == "foreign":
                    raise serving.ServingError(listener["detail"])
                if workload["engine"] == "llama.cpp":  # its own counts of the model it loaded (provenance)
                    section["server"]["model_meta"] = proc.model_meta()
            except serving.ServingError as exc:
                outcome["error"] = str(exc)
            else:
                outcome["deadline_hit"] = self.drive(section, points, proc, deadline)
            finally:
                section["server"].update(proc.stop())

    def engine_version(self, record, section: dict, deadline: float) -> None:
        """The engine's version from its own version command, run in the run's environment (a bare run's on the
        host's PATH, a native one's in the chroot, a container's in the image) into version.log: the record's
        engine_version, versions.engine_version and serving.engine_version ({version, source, argv, log, error}).
        A version that cannot be read never fails the run; it is named instead."""
        workload = self.run.workload
        argv, label = serving.version_command(workload)
        entry = {"version": None, "source": label if argv else None, "argv": argv, "log": None, "error": None}
        section["engine_version"] = entry
        if argv is None:
            entry["error"] = label
            return
        log = os.path.join(self.run.run_dir, "version.log")
        try:
            command = self.command("version", argv)
            result = run_process(command, log, max(1.0, min(serving_provenance.VERSION_TIMEOUT_S,
                                                            deadline - time.monotonic())))
        except SETUP_ERRORS as exc:
            entry["error"] = str(exc)
            return
        except OSError as exc:
            entry["error"] = "%s: %s" % (type(exc).__name__, exc)
            return
        finally:
            self.remove_container()
        entry["log"] = "version.log"
        try:
            with open(log, "rb") as fh:
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            text = ""
        parsed = serving_provenance.parse_version(workload["engine"], text)
        if result["timed_out"]:
            parsed.setdefault("error", "timed out after %.0f s" % result["seconds"])
        elif result["rc"] != 0 and parsed.get("version") is None:
            parsed["error"] = "exited %s: %s" % (result["rc"], parsed.get("error") or serving.log_tail(log))
        entry.update(parsed)
        fallback = (self.trtllm() or {}).get("version") if workload["engine"] == "trtllm-serve" else None
        if entry["version"] is None and fallback and self.kind != "bare":  # what engine_probe read from the image
            entry.update(version=fallback, source="the image's tensorrt_llm version files (engine_probe)")
        record.engine_version = entry["version"]
        record.versions["engine_version"] = entry["version"]

    def drive(self, section: dict, points: list, server, deadline: float) -> bool:
        """run_points against rank 0's server; a ``replicas`` run's client goes through a round-robin proxy over
        every replica (rank 0's and its workers'), whose split is recorded in the section's cluster."""
        workload, cluster = self.run.workload, section.get("cluster")
        if not cluster or serving.topology(workload) != "replicas":
            return self.run_points(section, points, server, deadline)
        with ReplicaProxy(serving.replica_urls(workload, cluster["workers"])) as proxy:
            try:
                return self.run_points(section, points, server, deadline, proxy.url + "/v1")
            finally:
                cluster["split"] = proxy.counts
                cluster["proxy_failures"] = proxy.failures

    def run_points(self, section: dict, points: list, server, deadline: float, base_url=None) -> bool:
        """Run the client once per point (appended to section["points"]); whether the run's deadline stopped
        them. A point whose client fails is recorded failed and the next one runs; once the server is gone or
        the time is up, the points left are recorded as not run."""
        run, workload = self.run, self.run.workload
        drv = serving_client.driver(workload.get("client"))
        seed = serving.order_seed(run.rid)  # AIPerf draws its prompts with it (and the point's name)
        client = self.client_path()
        section["client"]["version"] = drv.version(client)
        points_dir = os.path.join(run.run_dir, "points")
        os.makedirs(points_dir, exist_ok=True)
        env = serving_client.client_env(run.run_dir, drv)
        os.makedirs(env["HOME"], exist_ok=True)
        corpus = (self.p.get("serving") or {}).get("corpus")
        hit = False
        with contextlib.ExitStack() as stack:
            corpus_url = stack.enter_context(serving_client.CorpusServer(
                corpus, os.path.join(run.run_dir, ".corpus"))).url if corpus else None

            def measure(point: dict, k: int, n: int, share: float) -> dict:
                """Run the client for one point within ``share`` seconds; its entry, appended to the section."""
                entry = dict(point, status="failed", reason=None, metrics={}, samples={}, raw=None, duration_s=None)
                section["points"].append(entry)
                raw = os.path.join("points", drv.raw_name(point["point"]))
                argv = drv.point_argv(client, point, base_url or serving.base_url(workload),
                                      serving.served_name(workload, run.model), self.tokenizer_path(),
                                      int(workload.get("runs") or 3), bool(workload.get("prefix_caching")),
                                      corpus_url, os.path.join(run.run_dir, raw), workload.get("client_args"),
                                      skip_coherence=bool(run.model.get("random_weights")), seed=seed)
                if section["client"]["argv"] is None:
                    section["client"]["argv"] = redact(argv)
                cmd = [ENV_BIN, "-C", run.run_dir] + ["%s=%s" % kv for kv in env.items()] + argv
                self.point_progress(k, n, entry, "started")
                result = run_process(cmd, os.path.join(run.run_dir, "bench.log"), share)
                entry["duration_s"] = round(result["seconds"], 3)
                if result["timed_out"]:
                    entry["reason"] = "timed out after %.0f s (its share of the run's timeout_s)" % share
                elif result["rc"] != 0:
                    entry["reason"] = "client exited %s: %s" % (result["rc"], serving.log_tail(
                        os.path.join(run.run_dir, "bench.log")))
                else:
                    self.read_point(entry, drv, raw, point)
                self.point_progress(k, n, entry, "finished")
                return entry

            for i, point in enumerate(points):
                left = deadline - time.monotonic()
                why = self.not_run(server, left)
                if why:
                    hit = hit or left <= 0
                    section["points"].append(dict(point, status="failed", reason=why, metrics={}, samples={},
                                                  raw=None, duration_s=None))
                    continue
                measure(point, i, len(points), left / (len(points) - i))
            if workload.get("sla"):  # issue 37: the largest concurrency within the targets, searched after
                hit = self.search_sla(section, measure, server, deadline) or hit
        return hit

    @staticmethod
    def not_run(server, left: float):
        """Why the next point cannot run (the server is gone, the run's time is up), or None."""
        if not server.running():
            return "not run: the server exited (code %s): %s" % (server.proc.returncode,
                                                                 serving.log_tail(server.log_path))
        if left <= 0:
            return "not run: the run's timeout_s was reached"
        return None

    def search_sla(self, section: dict, measure, server, deadline: float) -> bool:
        """The SLA search (run/sla_search.py) per (depth, pp, tg) of the profile, after its points: each level it
        needs that the profile did not measure is run as a point marked ``sla_probe``; section["sla"] keeps the
        targets and per (depth, pp, tg) the capacity and every level measured. A level whose point failed (the
        client or the server erred) or whose latency at a target's percentile cannot be read stops that search
        with the reason: neither is a latency miss, and a point is never measured twice under one name. Whether
        the deadline stopped it."""
        workload = self.run.workload
        drv = serving_client.driver(workload.get("client"))
        goals = sla_search.targets(workload["sla"])
        profile = serving.profile_points(workload)
        concurrencies = sorted({p["concurrency"] for p in profile})
        groups = list(dict.fromkeys((p["depth"], p["pp"], p["tg"]) for p in profile))
        section["sla"] = {"targets": goals, "max_concurrency": workload["sla"].get("max_concurrency"),
                          "latencies_from": drv.name, "groups": []}
        hit = False
        for g, (depth, pp, tg) in enumerate(groups):
            search = sla_search.Bracket(concurrencies[0], sla_search.cap_of(workload["sla"], concurrencies))
            measured, stopped = [], None
            while (level := search.next()) is not None:
                name = serving.point_name(depth, level, pp, tg)
                entry = next((p for p in section["points"] if p["point"] == name), None)
                if entry is None:
                    left = deadline - time.monotonic()
                    stopped = self.not_run(server, left)
                    if stopped:
                        hit = hit or left <= 0
                        break
                    point = {"point": name, "depth": depth, "concurrency": level, "pp": pp, "tg": tg,
                             "order": len(section["points"]), "sla_probe": True}
                    entry = measure(point, len(section["points"]), len(section["points"]) + 1,
                                    left / (2 * (len(groups) - g)))
                if entry["status"] != "ok":  # an error is not an SLA miss: stop, say why
                    stopped = "level %d: point %s %s: %s" % (level, name, entry["status"], entry.get("reason"))
                    break
                latencies = drv.sla_latencies(entry, self.run.run_dir, goals)
                unread = sorted(k for k in goals if latencies.get(k) is None)
                if unread:  # unknown is not a miss either: the level tells nothing of the targets
                    stopped = "level %d: %s unread from point %s" % (level, ", ".join(unread), name)
                    break
                ok = sla_search.passes(latencies, goals)
                search.record(level, ok)
                measured.append(sla_search.measured_entry(entry, latencies, ok))
            section["sla"]["groups"].append(sla_search.group_section(depth, pp, tg, search, measured, stopped))
        return hit

    def point_progress(self, i: int, n: int, entry: dict, phase: str) -> None:
        """The ledger's ``point`` event: bench_follow shows point i+1 of n and an ETA within the run from it."""
        done = {"status": entry["status"], "duration_s": entry["duration_s"]} if phase == "finished" else {}
        append_point(self.run.ledger, self.run.rid, i + 1, n, entry["point"], phase, **done)

    def read_point(self, entry: dict, drv, raw: str, point: dict) -> None:
        """Fill a point's figures from the client's output file (``raw``, relative to the run directory)."""
        try:
            with open(os.path.join(self.run.run_dir, raw), "rb") as fh:
                parsed = drv.parse_point(fh.read(), point, source=raw)
        except OSError as exc:
            entry["reason"] = "no client output %s: %s" % (raw, exc.strerror or exc)
            return
        except serving_client.ClientOutputError as exc:
            entry["reason"] = str(exc)
            return
        entry["raw"] = raw
        entry["metrics"], entry["samples"] = parsed["metrics"], parsed["samples"]
        if parsed.get("context_load"):
            entry["context_load"] = parsed["context_load"]
        if not parsed["metrics"]:
            entry["reason"] = "no figures in %s (the client measured nothing)" % raw
            return
        entry["status"] = "ok"

    def launch(self, cmd: list, log: str, timeout: float, sampler, stdout=None) -> dict:
        if self.kind != "container":
            return run_process(cmd, log, timeout, on_start=self.registered, stdout_path=stdout)
        docker, name = self.docker(), self.container_name()
        subprocess.run([docker, "rm", "-f", name], capture_output=True)  # a leftover from a killed run

        def watch_cgroup(proc):
            self.container_started(proc, sampler)

        def kill_container():
            subprocess.run([docker, "kill", name], capture_output=True)

        try:
            return run_process(cmd, log, timeout, on_start=watch_cgroup, on_timeout=kill_container,
                               stdout_path=stdout)
        finally:
            subprocess.run([docker, "rm", "-f", name], capture_output=True)

    def container_started(self, proc, sampler) -> None:
        """A container run's process started: register it, and find its cgroup for telemetry and memory."""
        docker, name = self.docker(), self.container_name()
        self.registered(proc, container=name, docker=docker)

        def find():
            path = container_cgroup_memory_file(docker, name)
            if path:
                sampler.set_cgroup_memory_file(path)
                if self.tracker is not None:
                    self.tracker.set_cgroup(path)
        threading.Thread(target=find, daemon=True).start()

    def registered(self, proc, container=None, docker=None) -> None:
        if self.fp is not None:
            self.fp.start(proc.pid, container=container, docker=docker)
        if self.job is not None:
            self.job.running(self.run.rid, child_pgid=proc.pid, container=container, docker=docker)

    def fingerprint(self):
        """The record's fingerprint section (sparkfleet_host.sensors.fingerprint) of the measured step, or None."""
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
