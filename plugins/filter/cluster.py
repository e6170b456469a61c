"""The pair preflight's filters: perftest's and NCCL's command lines, and the pair's verdict (cluster/pair.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import pair


def pair_verdict(nodes, cluster, floors):
    """pair.judge over the cluster's nodes (their variables, rank 0 first)."""
    try:
        return pair.judge(str(cluster), [dict(n) for n in nodes], dict(floors))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"pair_verdict: the nodes' readings are not what pair_preflight.yml registers: "
                                 f"{exc!r}") from None


class FilterModule:
    def filters(self):
        return {"pair_verdict": pair_verdict, "perftest_args": pair.perftest_args, "nccl_argv": pair.nccl_argv}
