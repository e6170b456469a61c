#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: NCCL's all-reduce inside each environment a cluster's multi-node runs use, one rank per node."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_nccl_env
short_description: Runs NCCL's all-reduce inside each environment a cluster's multi-node runs use
version_added: 0.1.0
description:
  - Runs this node's rank of an all-reduce through C(torch.distributed) over NCCL, inside each planned container
    environment, through C(docker run) with the environment's resolved flags and C(--network host), as a serving
    run's server is started. Every node of the cluster runs the task at once; the ranks meet at O(master_addr)
    (rank 0's cluster address) on O(master_port), without MPI.
  - The process gets the workload's variables, the node's fabric settings (O(fabric_env)) and C(NCCL_DEBUG=INFO),
    so its log says which transport the image's own NCCL chose.
  - Per size it checks one all-reduce's result, runs O(warmup) warm-ups and times O(iters) all-reduces between two
    CUDA events, as nccl-tests' C(all_reduce_perf) does. The verdict (bus bandwidth over the ranks, transport,
    versions) is the pair preflight's (C(pair_verdict) filter).
  - An environment the plan does not run (a native one, an image not on the node yet, RDMA not visible inside) is
    not judged. The test's container is removed afterwards.
options:
  environments:
    description: The planned environments as C({name, kind, docker_flags, run, reason}) (the C(nccl_environments)
      filter's).
    type: list
    elements: dict
    default: []
  image:
    description: The campaign's image.
    type: str
    default: ""
  docker:
    description: The docker executable.
    type: str
    default: docker
  fabric_env:
    description: The node's fabric settings (M(sparkfleet.bench.cluster_fabric)'s C(env)).
    type: dict
    default: {}
  workload_env:
    description: The workload's variables (the fabric's are set over them).
    type: dict
    default: {}
  rank:
    description: This node's rank (its place in the cluster, rank 0 first).
    type: int
    required: true
  world:
    description: The number of nodes.
    type: int
    required: true
  master_addr:
    description: Rank 0's address on the cluster's network, where the ranks meet.
    type: str
    required: true
  master_port:
    description: The TCP port rank 0 listens on for the first environment's rendezvous, one above for each next
      (sparkfleet_pair_nccl_env_port).
    type: int
    required: true
  sizes:
    description: The message sizes in bytes (empty, nccl-tests' C(-b 8M -e 2G -f 2)).
    type: list
    elements: int
    default: []
  warmup:
    description: Warm-up all-reduces per size.
    type: int
    default: 5
  iters:
    description: Timed all-reduces per size.
    type: int
    default: 20
  timeout_s:
    description: Seconds the test may take in one environment, a container's start and the rendezvous included.
    type: float
    default: 300
  log_dir:
    description: Where each environment's raw output is written (C(pair_nccl.<environment>.log)); empty, nowhere.
    type: path
    default: ""
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux hosts with Docker.
seealso:
  - module: sparkfleet.bench.cluster_rdma_env
  - module: sparkfleet.bench.cluster_fabric
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Run NCCL's all-reduce inside each environment, every node at once
  sparkfleet.bench.cluster_nccl_env:
    environments: "{{ sparkfleet_resolved_campaign | sparkfleet.bench.rdma_environments('pair', sparkfleet_plan.docker)
      | sparkfleet.bench.nccl_environments(['spark1', 'spark2'] | map('extract', hostvars, 'pair_rdma_env')) }}"
    image: "{{ sparkfleet_plan.image.ref }}"
    fabric_env: {NCCL_IB_HCA: "rocep1s0f0,roceP2p1s0f0", NCCL_SOCKET_IFNAME: enp1s0f0np0}
    rank: 0
    world: 2
    master_addr: 192.168.100.10
    master_port: 29517
  register: pair_nccl_env
"""

RETURN = r"""
environments:
  description:
    - One entry per environment with C(environment), C(kind), C(judged), C(reason), C(rank), C(world), C(error),
      C(reading) (C(result), the rank's figures; C(error), the script's; C(transport), its NCCL_DEBUG lines read),
      C(command) and C(log).
  returned: always
  type: list
  elements: dict
changed:
  description: Always V(false).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import task  # noqa: E402
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import nccl_env  # noqa: E402


def main():
    module = AnsibleModule(argument_spec=dict(environments=dict(type="list", elements="dict", default=[]),
                                              image=dict(type="str", default=""),
                                              docker=dict(type="str", default="docker"),
                                              fabric_env=dict(type="dict", default={}),
                                              workload_env=dict(type="dict", default={}),
                                              rank=dict(type="int", required=True),
                                              world=dict(type="int", required=True),
                                              master_addr=dict(type="str", required=True),
                                              master_port=dict(type="int", required=True),
                                              sizes=dict(type="list", elements="int", default=[]),
                                              warmup=dict(type="int", default=nccl_env.WARMUP),
                                              iters=dict(type="int", default=nccl_env.ITERS),
                                              timeout_s=dict(type="float", default=nccl_env.TIMEOUT_S),
                                              log_dir=dict(type="path", default="")),
                           supports_check_mode=True)
    task.exit_with(module, nccl_env.preflight_work)


if __name__ == "__main__":
    main()
