#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: read one cluster node's RDMA rails, the facts a pair must share, and its fabric settings."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_fabric
short_description: Reads a cluster node's RDMA rails, the facts a pair must share and its NCCL/UCX settings
version_added: 0.1.0
description:
  - Reads the node's RDMA rails, either those given in O(fabric) or the ACTIVE ports under
    C(/sys/class/infiniband) with their netdev and RoCE v2 GID index.
  - For each rail it reads the port's state (sysfs, else C(ibv_devinfo)), the netdev's MTU
    (C(/sys/class/net/<netdev>/mtu)) and its first IPv4 address (C(ip -j -4 addr)).
  - It also reads what the nodes of a pair must share (driver, kernel, HCA firmware, the image's ID, the engine's
    environment as a digest per variable, the clock cap sparkfleet's gpu_state role applied), and derives the
    node's NCCL, UCX, GLOO, TP and MPI settings from its rails.
  - With O(results_dir), it reads the SM clock the newest readiness probe reached on the node.
  - Reads only. A missing tool leaves its reading V(null), and the pair preflight records that reading as
    not measured.
options:
  fabric:
    description:
      - The node's rails as C({hca, netdev, port, roce_v2_gid_index}) (the C(sparkfleet_fabric) setting). Empty or
        V(null) finds them in sysfs.
    type: list
    elements: dict
  image:
    description: An image whose ID is read for the parity check (empty when no container runs the engine).
    type: str
    default: ""
  docker:
    description: The docker executable.
    type: str
    default: docker
  workload_env:
    description:
      - The engine's environment (the C(sparkfleet_workload_env) setting). Each variable is recorded as a digest
        of its value, never the value itself, since values may hold tokens.
    type: dict
    default: {}
  results_root:
    description:
      - The host's results root (C(sparkfleet_plan.paths.results_root)). The gpu_state role's records beside it
        give the clock lock and power limit sparkfleet applied. Empty does not read them.
    type: path
    default: ""
  results_dir:
    description:
      - The host's results directory of the campaign (C(sparkfleet_plan.paths.results_dir)). The newest run record
        under it whose readiness probe read an SM clock gives the returned C(probe). Empty reads none.
    type: path
    default: ""
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux hosts (sysfs, iproute2).
seealso:
  - module: sparkfleet.bench.preflight_check
extends_documentation_fragment:
  - sparkfleet.bench.attributes
  - sparkfleet.bench.attributes.read_only
"""

EXAMPLES = r"""
- name: Read this node's rails and fabric settings
  sparkfleet.bench.cluster_fabric:
    fabric: "{{ sparkfleet_plan.cluster.fabric }}"
  register: pair_node
"""

RETURN = r"""
rails:
  description:
    - One entry per rail, with C(hca), C(netdev), C(port), C(roce_v2_gid_index), C(state) (V(ACTIVE), V(DOWN),
      ...), C(active), C(mtu), C(ipv4) and C(prefixlen) (the keys of C(cluster/fabric.py)). A reading that could
      not be taken is V(null).
  returned: always
  type: list
  elements: dict
  sample: [{hca: rocep1s0f0, netdev: enp1s0f0np0, port: 1, roce_v2_gid_index: 3, state: ACTIVE, active: true,
            mtu: 9000, ipv4: 192.168.200.12, prefixlen: 24}]
ports:
  description: Every port read (the given rails, or every port under C(/sys/class/infiniband), DOWN ones too).
  returned: always
  type: list
  elements: dict
given:
  description: Whether the rails were given (O(fabric)) rather than found.
  returned: always
  type: bool
env:
  description: The NCCL, UCX, GLOO, TP and MPI environment the node's rails call for.
  returned: always
  type: dict
facts:
  description:
    - C(driver), C(kernel), C(firmware), C(image_digest) (with O(image)), C(env), C(engine_env) (variable to
      C(sha256:) digest) and C(clock_cap) (with O(results_root); V(null) when the gpu_state role's records could
      not be read).
  returned: always
  type: dict
probe:
  description:
    - C(sm_clock_mhz) and C(run_id) of the newest run whose readiness probe read an SM clock here; both V(null)
      when no run has probed yet.
  returned: always
  type: dict
changed:
  description: Always V(false).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import task  # noqa: E402
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import node  # noqa: E402


def work(params, run):
    return dict(changed=False, **node.readings(params["fabric"], run.run, run.which, image=params["image"],
                                               docker=params["docker"], workload_env=params["workload_env"],
                                               results_root=params["results_root"],
                                               results_dir=params["results_dir"]))


def main():
    module = AnsibleModule(argument_spec=dict(fabric=dict(type="list", elements="dict"),
                                              image=dict(type="str", default=""),
                                              docker=dict(type="str", default="docker"),
                                              workload_env=dict(type="dict", default={}),
                                              results_root=dict(type="path", default=""),
                                              results_dir=dict(type="path", default="")),
                           supports_check_mode=True)
    task.exit_with(module, work)


if __name__ == "__main__":
    main()
