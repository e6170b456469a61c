#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: start or stop a cluster worker, the process a multi-node engine runs beside rank 0."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_worker
short_description: Starts or stops the worker process of a multi-node serving run
version_added: 0.1.0
description:
  - Starts the worker a multi-node engine runs on a node other than rank 0, for example llama.cpp's
    C(ggml-rpc-server), or a replica's own server. The argv comes from the engine registry, C(serving.worker_spec).
  - The worker runs in the run's O(environment), in its own session, as rank 0's server does - bare (found on
    the host's PATH as a bare run's command is), native (chrooted into the image's rootfs) or container (C(docker
    run) of the image with the run's docker flags and the host's network). The task returns once its TCP port
    accepts on O(address), and fails with the worker's log tail when the worker exits or O(timeout_s) passes.
    With O(ready_url) it also waits until that URL answers 200 (a server that has loaded its model).
  - With O(node) and O(results_dir), the node is watched first, also when it has no worker of its own (O(argv)
    omitted, as when rank 0's launcher, mpirun, starts the rank here) - the readiness probe in the run's environment (a
    refusal fails the task, naming the node), then a telemetry daemon until the worker is stopped - and written
    to C(<results_dir>/cluster_nodes/<run_id>/node.json) with C(telemetry.csv) beside it.
  - Stops a worker and its node's watch (completing the node file), or every one in O(dir) when O(name) is not
    given (C(restore.yml)). It signals the process group only while the recorded pid still runs the recorded
    executable, and removes a container worker's container.
options:
  state:
    description: V(started) or V(stopped).
    type: str
    choices: [started, stopped]
    required: true
  name:
    description: The worker's name (its pid file and log in O(dir)). Required to start.
    type: str
  dir:
    description: Where the pid files and logs are kept.
    type: path
    required: true
  argv:
    description: The worker's command line; omitted, nothing is started (the node is only watched).
    type: list
    elements: str
  environment:
    description:
      - The run's environment on this node, as rank 0's run has it - C(name), C(kind) (V(bare), V(native),
        V(container)); native C(rootfs) and C(image_env); container C(image), C(docker), C(docker_flags) and
        C(gpu_present) (false drops C(--gpus)); C(results_root) and C(models_dir), bound into a container.
      - Omitted, the worker runs bare.
    type: dict
  node:
    description:
      - Who this node is in the run - C(run_id) (rank 0's run), C(campaign), C(cluster), C(head), C(host),
        C(rank), C(address) - written to its node file. Omitted, the node is not watched.
    type: dict
  results_dir:
    description: This host's results directory of the campaign, where the node file is written.
    type: path
  rdma_hcas:
    description:
      - The rail HCAs whose RDMA the worker's engine must see in its environment (a multi-node run over NCCL; the
        C(worker_spec) filter's C(rdma_hcas)). Before the worker starts, C(/dev/infiniband), an ACTIVE port of each
        and unlimited memlock are checked there with the run's docker flags; a failure fails the task naming the
        node, the cause and the fix, and the node file keeps the check (C(rdma)). Empty, nothing is checked.
    type: list
    elements: str
    default: []
  readiness:
    description: The readiness probe's settings (the plan's C(readiness)); C(probe_s) 0 leaves the probe out.
    type: dict
  telemetry_interval_s:
    description: Seconds between telemetry samples.
    type: float
    default: 1.0
  max_s:
    description: Longest the telemetry daemon samples when nothing stops it (a controller killed before restore).
    type: float
    default: 86400
  nvml:
    description: The pinned NVML bindings the nvml role installed (C(path)), or why there are none (C(note)).
    type: dict
  address:
    description: The address the worker listens on (the cluster's network), polled until it accepts.
    type: str
  port:
    description:
      - The worker's TCP port, polled on O(address) until it accepts.
      - Omitted, the worker has none to probe (a vLLM C(--headless) node, an SGLang rank 1 or more, which answer
        nothing until rank 0 has joined them). It is then ready once it still runs after a settle time (5 s), and
        rank 0's readiness is the whole cluster's.
    type: int
  ready_url:
    description: A URL that answers 200 once the worker is ready (a replica's readiness path).
    type: str
  timeout_s:
    description: Longest wait for the port to accept and O(ready_url) to answer.
    type: float
    default: 120
  env:
    description: Environment variables of the worker (PATH among them replaces the host's).
    type: dict
    default: {}
attributes:
  check_mode:
    support: none
    description: It starts or stops a process; check mode is not supported.
  diff_mode:
    support: none
    description: Shows no diff.
  platform:
    support: full
    platforms: posix
    description: Linux hosts (C(/proc)).
seealso:
  - module: sparkfleet.bench.bench_run
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Start llama.cpp's RPC server on a worker
  sparkfleet.bench.cluster_worker:
    state: started
    name: pair-rpc
    dir: /var/lib/sparkfleet/results/.sparkfleet/cluster
    argv: [ggml-rpc-server, --host, 192.168.200.13, --port, "50052"]
    address: 192.168.200.13
    port: 50052

- name: Stop every worker this host runs
  sparkfleet.bench.cluster_worker:
    state: stopped
    dir: /var/lib/sparkfleet/results/.sparkfleet/cluster
"""

RETURN = r"""
worker:
  description: The started worker, with C(pid), C(argv), C(executable), C(container), C(log), C(started) and
    C(ready_s); null when it has none.
  returned: state is started
  type: dict
node:
  description: The node file (C(file)) and the readiness probe's state (C(readiness)); null without O(node).
  returned: state is started
  type: dict
stopped:
  description: The workers stopped, each C({name, stopped, node}) with V(signalled), V(gone) (it had exited) or
    V(none), and the node file completed (or null).
  returned: state is stopped
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import task  # noqa: E402
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import worker  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(state=dict(type="str", required=True, choices=["started", "stopped"]),
                           name=dict(type="str"), dir=dict(type="path", required=True),
                           argv=dict(type="list", elements="str"), address=dict(type="str"),
                           port=dict(type="int"), ready_url=dict(type="str"),
                           timeout_s=dict(type="float", default=120.0),
                           env=dict(type="dict", default={}), environment=dict(type="dict"),
                           node=dict(type="dict"), results_dir=dict(type="path"), readiness=dict(type="dict"),
                           rdma_hcas=dict(type="list", elements="str", default=[]),
                           telemetry_interval_s=dict(type="float", default=1.0),
                           max_s=dict(type="float", default=86400.0), nvml=dict(type="dict")),
        required_if=[("state", "started", ("name", "address"))],
        supports_check_mode=False)
    task.exit_with(module, worker.work)


if __name__ == "__main__":
    main()
