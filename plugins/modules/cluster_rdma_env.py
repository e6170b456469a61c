#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: RDMA as a multi-node run's engine will see it, inside each of the campaign's environments."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_rdma_env
short_description: Checks RDMA inside each environment a cluster's multi-node runs use
version_added: 0.1.0
description:
  - Runs a short POSIX C(sh) probe inside each container environment, through C(docker run) with the environment's
    resolved flags and C(--network host), as a serving run's server is started. The probe lists
    C(/dev/infiniband), reads each port's state (C(ibv_devinfo) when the image has it, else sysfs) and C(ulimit -l).
  - The check passes only when C(/dev/infiniband) holds a C(uverbs) device, every HCA of O(fabric_env)'s
    C(NCCL_IB_HCA) has an ACTIVE port, and memlock is unlimited. Otherwise the reason names each cause and its fix (C(--device=/dev/infiniband),
    C(--ulimit memlock=-1)). NCCL would otherwise fall back to TCP sockets without a word.
  - A container whose image the node does not have yet, or a native environment, is not judged. Each multi-node run
    checks it again at its start.
  - The probe's container is removed afterwards.
options:
  environments:
    description: The environments as C({name, kind, docker_flags}) (the C(rdma_environments) filter's).
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
    description: The node's fabric settings (M(sparkfleet.bench.cluster_fabric)'s C(env)); the HCAs of its
      C(NCCL_IB_HCA) must each show an ACTIVE port inside.
    type: dict
    default: {}
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux hosts with Docker.
seealso:
  - module: sparkfleet.bench.cluster_fabric
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Check RDMA inside each environment
  sparkfleet.bench.cluster_rdma_env:
    environments: "{{ sparkfleet_resolved_campaign | sparkfleet.bench.rdma_environments('pair', sparkfleet_plan.docker) }}"
    image: "{{ sparkfleet_plan.image.ref }}"
    fabric_env: {NCCL_IB_HCA: "rocep1s0f0,roceP2p1s0f0"}
  register: pair_rdma_env
"""

RETURN = r"""
environments:
  description:
    - One entry per environment with C(environment), C(kind), C(judged), C(pass), C(reason), C(reading) (the
      probe's output read) and C(command).
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
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import rdma_env  # noqa: E402


def main():
    module = AnsibleModule(argument_spec=dict(environments=dict(type="list", elements="dict", default=[]),
                                              image=dict(type="str", default=""),
                                              docker=dict(type="str", default="docker"),
                                              fabric_env=dict(type="dict", default={})),
                           supports_check_mode=True)
    task.exit_with(module, rdma_env.preflight_work)


if __name__ == "__main__":
    main()
