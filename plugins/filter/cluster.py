"""Cluster filters: the pair preflight's command lines and verdict (cluster/pair.py), and a multi-node run's
workers (their addresses, command line and port: the engine registry's launcher)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import nccl_env, pair, rdma_env
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings


def pair_verdict(nodes, cluster, floors):
    """pair.judge over the cluster's nodes (their variables, rank 0 first)."""
    try:
        return pair.judge(str(cluster), [dict(n) for n in nodes], dict(floors))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"pair_verdict: the nodes' readings are not what pair_preflight.yml registers: "
                                 f"{exc!r}") from None


def cluster_addresses(fabric_results, nodes):
    """Each worker's address on the cluster's network: its first ACTIVE rail's IPv4 (cluster_fabric's results, in
    the nodes' order), else its inventory address (ansible_host, else its name)."""
    out = []
    for result, node in zip(fabric_results, nodes, strict=True):
        rails = [r for r in (result or {}).get("rails") or [] if r.get("active") and r.get("ipv4")]
        out.append(str(rails[0]["ipv4"]) if rails else str(node.get("ansible_host") or node["inventory_hostname"]))
    return out


def worker_spec(run, address, rank=1, head_address=None, fabric_env=None, rdma_check=True):
    """serving.worker_spec: what worker ``rank`` of the planned multi-node ``run`` runs on ``address``, rank 0 being
    on ``head_address`` (argv; the port it is ready on once it accepts, or None: it must only keep running; the URL
    that answers once it is ready, or None), and ``rdma_hcas``: the HCAs of its ``fabric_env`` whose RDMA it must see
    in its environment before it starts (rdma_env.hcas_to_check; ``rdma_check``: sparkfleet_pair_rdma_env_check)."""
    try:
        workload = dict(run["workload"])
        spec = serving.worker_spec(workload, dict(run["model"]), str(address), int(rank), len(run["cluster"]["nodes"]),
                                   None if head_address is None else str(head_address))
        return dict(spec, rdma_hcas=rdma_env.hcas_to_check(fabric_env, serving.over_nccl(workload), bool(rdma_check)))
    except (serving.ServingError, KeyError) as exc:
        raise AnsibleFilterError(f"worker_spec: {exc}") from None


def rdma_environments(campaign, cluster, docker):
    """The campaign's container and native environments whose RDMA the pair preflight checks on this node, each
    {name, kind, docker_flags} with a container's flags resolved as its runs get them (settings.resolve_docker_flags
    over the plan's docker group); [] when no workload of ``cluster`` goes over NCCL (serving.over_nccl)."""
    workloads = [w for w in (campaign or {}).get("workloads") or [] if w.get("cluster") == cluster]
    if not any(serving.over_nccl(dict(w)) for w in workloads):
        return []
    variables = {"sparkfleet_docker_" + k: v for k, v in dict(docker or {}).items() if v is not None}
    try:
        return [{"name": e["name"], "kind": e.get("kind"), "docker_flags": settings.resolve_docker_flags(e, variables)
                 if e.get("kind") == "container" else None}
                for e in campaign.get("environments") or [] if e.get("kind") in ("container", "native")]
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError(f"rdma_environments: {exc}") from None


def nccl_environments(environments, rdma_results):
    """nccl_env.plan: which of ``environments`` (rdma_environments') the in-environment NCCL test runs in, from each
    node's cluster_rdma_env result (``rdma_results``, rank 0 first; skipped when that check was left out)."""
    try:
        return nccl_env.plan([dict(e) for e in environments or []], list(rdma_results or []))
    except (AttributeError, TypeError) as exc:
        raise AnsibleFilterError(f"nccl_environments: {exc!r}") from None


class FilterModule:
    def filters(self):
        return {"pair_verdict": pair_verdict, "perftest_args": pair.perftest_args, "nccl_argv": pair.nccl_argv,
                "cluster_addresses": cluster_addresses, "worker_spec": worker_spec,
                "rdma_environments": rdma_environments, "nccl_environments": nccl_environments}
