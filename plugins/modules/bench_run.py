#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Run a host's planned benchmark runs: cooldown, launch, telemetry, timeout, parse, record, ledger.

The module checks its options and calls the host code (sparkfleet_host.run.matrix_run and the run_launch,
run_judge, run_record and ledger pieces it drives).
"""

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
    root only: a run that cannot is C(failed)); the workload goes unchanged to the engine's command builder
    (a trtllm workload's KV-cache fraction becomes its run's C(--extra_llm_api_options) file)."
  - "Memory state (record's C(memory) section, docs/MEMORY.md): /proc/meminfo, what CUDA reports free, at the
    start; the container's cgroup (memory.current/peak/max/stat) and meminfo at the sample of highest use."
  - "The run: launches the engine in its environment - C(native) through the provisioned chroot with
    the image's own environment (C(env -i)), C(container) through C(docker run) with the environment's
    flags, C(bare) straight on the host (its command found on the host's PATH: the login shell's, the module's,
    C(~/.local/bin), the system directories; C(PATH) in the run's env replaces that) - as argv, never through a
    shell; enforces the timeout by killing the whole process group
    (and the container); samples telemetry in-process (NVML, or one persistent C(nvidia-smi) loop;
    C(/proc/meminfo); the container's cgroup memory)."
  - "After the run: parses the engine's output with sparkfleet's parsers, checks that the model the log
    says was loaded is the requested one (else the run is C(invalid)), and that what the engine shows it
    loaded (model path, weight files and sizes, architecture, layers, hidden size, dtype, parameter count)
    matches the model directory's card fingerprinted on the host (record C(provenance): C(confirmed),
    C(unconfirmed) or C(mismatch), the last making the run C(invalid)), writes C(bench.log),
    C(telemetry.csv) and C(record.json) (atomically) under C(<results_root>/<campaign>/<host>/runs/<run_id>/)
    and appends C(started)/C(finished) events to the host's C(ledger.jsonl) (and a serving run C(point) events,
    as each point of its profile starts and finishes, for M(sparkfleet.bench.bench_follow))."
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
  fresh:
    description:
      - "Measure again, keeping the previous results: before the first run (under the job's lock) everything in
        C(<results_root>/<campaign>/<host>/) (ledger, runs, kept configuration) is moved, never deleted, to
        C(<results_root>/<campaign>.<UTC stamp>/<host>/) (RV(previous_instance)); then every planned run is run."
      - Without it, a campaign whose planned runs are all done measures nothing and RV(summary) says
        C(N runs already done on HOST (dates\); nothing measured) (RV(nothing_measured)).
    type: bool
    default: false
  versions:
    description: Software versions to record (image digest, controller versions, ...); a C(bare) run's record leaves
      out C(image) and C(image_ref) (it uses no image).
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
      - "The image's TensorRT-LLM version and trtllm-bench CLI surface, as M(sparkfleet.bench.engine_probe)
        returns them (C(version), C(profile), C(surface), C(sources)), plus C(unknown_version) (C(refuse) or
        C(warn)) and C(hf_cache_dir). A trtllm run's commands are built from that surface, whatever the version:
        C(trtllm-bench prepare-dataset) where it exists, else the image's C(benchmarks/cpp/prepare_dataset.py
        --stdout); the tokenizer from C(model.path); latency without C(--max_batch_size); C(--config) else
        C(--extra_llm_api_options); every argv checked against the surface, a command or option it lacks failing
        the run at setup, by name. Without a readable surface the captured one for the version is used; a version
        older than every capture fails the run at setup (C(refuse)) or is built as for the oldest with a warning
        in its record (C(warn)). Kept in each record's C(versions.trtllm)."
      - "Runs are offline (C(HF_HUB_OFFLINE=1), C(TRANSFORMERS_OFFLINE=1)) unless C(hf_cache_dir) names a host
        directory: it is bound at C(/root/.cache/huggingface) into the container (the native rootfs binds it
        there too) and C(HF_HOME) points at it."
    type: dict
    default: {}
  serving:
    description:
      - "Serving runs (a workload whose engine is C(llama.cpp), C(vllm), C(sglang) or C(trtllm-serve)): the
        engine's server starts in the run's environment on 127.0.0.1 (a container gets C(--network host) unless
        its flags pick a network), its port checked free before the start, is waited for (its readiness URL,
        within the workload's C(ready_timeout_s)) and, once it answers, its port must be held by the server
        started (else the run fails naming the holder), then the load generator runs on the host once per point of the workload's C(profile) (depth x
        concurrency x pp x tg, in an order shuffled with a seed from the run_id), and the server is always
        stopped. The record's C(serving) section holds each point's figures and raw samples."
      - "What is served is recorded and checked (issue 35): before the server starts, the engine's own version
        command runs in the run's environment (C(llama-server --version), C(vllm --version), the C(sglang) or
        C(tensorrt_llm) package's version as its C(python3) has it; C(version.log)) and the weights are
        fingerprinted on the host (a GGUF's header, size, SHA-256 of its first and last MiB and tensor bytes; a
        directory's card); after it, what the engine showed it loaded (llama-server's C(/v1/models) model meta, the
        start-up lines of the others) is checked against that card, and the weights at that path against the first
        run of the campaign on the host that served them (kept in C(.sparkfleet-weights.json) beside the ledger):
        other weights, or a GGUF naming another source than the model's C(hf_id), make the run C(invalid)."
    type: dict
    default: {}
    suboptions:
      client:
        description: The llama-benchy executable on the host; omitted, the one in C(clients), else C(llama-benchy)
          on the host's PATH (as a bare run's command is found).
        type: path
      clients:
        description: Each load generator's executable on the host, by client name (C(llama-benchy), C(aiperf)), as
          the serving_client role installed them; a client not named here is looked for on the host's PATH.
        type: dict
        default: {}
      corpus:
        description: >-
          A text file on the host the client builds its prompts from, served on 127.0.0.1 for its C(--book-url)
          (the plan always gives one: C(sparkfleet_serving_corpus), by default the collection's corpus); omitted,
          the client downloads its own default book.
        type: path
      workers:
        description:
          - The addresses of the workers of a multi-node run (a planned run with C(cluster), led by this host as its
            cluster's rank 0), in rank order. C(playbooks/cluster_runs.yml) starts the workers there with
            M(sparkfleet.bench.cluster_worker) before the run, and gives their addresses here.
          - Rank 0's server then names them by the engine's own runtime (llama.cpp C(--rpc address:port,...)).
        type: list
        elements: str
        default: []
      head_address:
        description:
          - This host's address on the cluster's network in a multi-node run (rank 0's), which its server gives the
            engine's runtime (vLLM C(--master-addr), SGLang C(--dist-init-addr)); C(cluster_run.yml) gives it.
        type: str
      fabric_env:
        description:
          - The NCCL, UCX, GLOO, TP and MPI variables this host's rails call for (the C(env) that
            M(sparkfleet.bench.cluster_fabric) returns), under a multi-node run's own environment (O(env) and the workload's C(env) override them); the
            record's C(serving.cluster.fabric_env) keeps them. Each worker gets its own node's the same way.
        type: dict
        default: {}
      rdma_env_check:
        description:
          - "A multi-node run over NCCL (topology C(tensor) or C(pipeline)) whose O(serving.fabric_env) names HCAs
            (C(NCCL_IB_HCA)) first checks RDMA inside its environment, with the command and flags the server gets:
            a C(uverbs) device in C(/dev/infiniband), an ACTIVE port on each of those HCAs (C(ibv_devinfo) when the
            image has it, else sysfs) and an unlimited memlock. Else the run fails with a reason starting
            C(rdma:) that names what is missing and the fix; the check is kept in C(serving.cluster.rdma)."
          - V(false) leaves the check out (the C(sparkfleet_pair_rdma_env_check) setting).
        type: bool
        default: true
  readiness:
    description:
      - "The readiness probe before each run, after its cooldown (issue 24): a short fixed GPU load (the
        workload script C(gpu_probe.py) with torch or cupy) while the SM clock, power, utilisation,
        clock-event reasons and counters are read; the verdict (C(healthy), C(suspect), C(invalid), C(unknown):
        faults from the thermal and power-brake counters, class floors, delivered TFLOP/s, issue 32) and its
        reasons go into the record's C(readiness) section. Under
        C(policy=refuse) a suspect host's run is not started (failed, naming why); under C(mark) (the default)
        it runs and its record says C(suspect) with the reason, which the report keeps apart. C(probe_s=0)
        skips the probe."
      - "Keys: C(policy) (C(mark) or C(refuse)), C(min_fraction) of C(expected_clock_mhz) (null: the GPU's
        maximum SM clock with a fraction of 0.75; a note, never a fault), C(probe_s) (at most 60),
        C(degraded_bands) (a list of [low, high] MHz, a GB10's)."
    type: dict
    default: {}
  nvml:
    description:
      - "The NVML bindings the job reads the GPU through (issue 35): C(path), the directory the
        C(sparkfleet.bench.nvml) role installed the pinned C(nvidia-ml-py) into (C(pynvml.py) there), imported from
        there ahead of any the module's Python has, so that the cooldown, the readiness probe's readings, the memory
        state and the telemetry read NVML in this process; C(note), why there are none (no GPU, not installed, pip
        reached no index)."
      - "Without bindings, or where NVML does not initialise, they read C(nvidia-smi) (telemetry: one persistent
        C(nvidia-smi -lms) loop); the record's C(telemetry.sensor) says which read, C(telemetry.nvml_bindings) what NVML
        was read through, C(telemetry.sensor_note) (and C(readiness.sensor_note)) why NVML did not read."
    type: dict
    default: {}
    suboptions:
      path:
        description: The bindings' directory on the host (empty or omitted, none).
        type: path
      note:
        description: Why there are none.
        type: str
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
extends_documentation_fragment:
  - sparkfleet.bench.attributes
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
      description: Progress event (sparkfleet run shows it from the runner event stream) (type run, run_id, status, duration_s, cooldown_s, ...).
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
nothing_measured:
  description: >-
    True when every planned run was already done (skipped from the ledger): nothing was measured, and RV(summary)
    says "N runs already done on HOST (first .. last date); nothing measured".
  returned: always
  type: bool
previous_instance:
  description: Where O(fresh) moved the host's previous results of the campaign (null when it moved nothing).
  returned: always
  type: str
sparkfleet_events:
  description: The runs' progress events (sparkfleet run reads this list from the runner event stream).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run.matrix_run import (
    JobStopped,
    MatrixError,
    check_request,
    plan_only,
    run_job,
    summary,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors.gpu import use_bindings


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
            serving=dict(type="dict", default={}, options=dict(client=dict(type="path"), clients=dict(type="dict", default={}),
                                                                 corpus=dict(type="path"),
                                                                 workers=dict(type="list", elements="str", default=[]),
                                                                 head_address=dict(type="str"),
                                                                 fabric_env=dict(type="dict", default={}),
                                                                 rdma_env_check=dict(type="bool", default=True))),
            readiness=dict(type="dict", default={}),
            fresh=dict(type="bool", default=False),
            nvml=dict(type="dict", default={}, options=dict(path=dict(type="path"), note=dict(type="str"))),
        ),
        supports_check_mode=True,
    )
    params = module.params
    results = []
    try:
        runs = check_request(params)  # every run's inputs are checked before any starts
        if module.check_mode:
            module.exit_json(**plan_only(params, runs))
        # the pinned NVML bindings of the nvml role, ahead of any other, before any sensor opens
        use_bindings((params["nvml"] or {}).get("path"), (params["nvml"] or {}).get("note"))
        run_job(params, runs, results)
    except MatrixError as exc:
        module.fail_json(msg=str(exc))
    except JobStopped as exc:
        stopped = summary(results, params["host"], params.get("previous_instance"))
        stopped["changed"] = True
        module.fail_json(msg="%s: %s after %d of %d runs; the run it was in stays unfinished, a resume runs it again"
                         % (params["host"], exc, len(results), len(runs)), **stopped)
    module.exit_json(**summary(results, params["host"], params.get("previous_instance")))


if __name__ == "__main__":
    main()
