# Copyright: sparkfleet contributors
# Apache-2.0
"""The pair preflight: can the hosts of a cluster serve one model together? Its settings and its verdict.

A cluster is the hosts whose ``sparkfleet_cluster`` names it; rank 0 is the first of them in the inventory, the
one that drives (``ib_write_bw``/``ib_write_lat`` clients, NCCL's test, later the engine's rank 0). The playbook
(``playbooks/pair_preflight.yml``) gathers each node's readings (``cluster_fabric``), runs the tools and hands
what it registered to :func:`judge`, which is pure: the rules are :mod:`fabric`'s ``check_*`` (rails, MTU,
subnets, RDMA bandwidth and latency, parity, the readiness probe's clocks) and :func:`nccl.transport_verdict`
(sockets refused, NET/IB RoCE on every HCA), each recorded with its reason and floor; the causes of a refusal
name the node, the rail and the figure.

The floors are settings (:data:`FIELDS`) whose defaults and sources are :data:`fabric.FLOORS`'s, and NCCL's bus
bandwidth floor below.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..contract.fields import Field
from ..health import readiness
from ..parsers import nccl, rdma
from . import fabric, nccl_env
from .probe_container import tail

GIB = 1024 ** 3
#: NCCL all_reduce_perf busbw between two Sparks: about 23.7 GB/s at MTU 9000, 18.9-21.0 GB/s at 1500
#: (eugr/spark-vllm-docker docs/NETWORKING.md @3e84d9d0; NVIDIA/dgx-spark-playbooks nvidia/nccl/README.md).
NCCL_BUSBW_GBS_MIN = (20.0, "GB/s", "NCCL's all-reduce between two Sparks reached about 23.7 GB/s bus bandwidth "
                      "at MTU 9000 and 18.9-21.0 GB/s at 1500 (eugr/spark-vllm-docker docs/NETWORKING.md @3e84d9d0)")

#: The readiness probe's clocks across a pair: a tensor-parallel pair steps at its slower GPU's pace, and the probe
#: itself notes a clock below 0.9 x the expected one (health/readiness.py DEFAULT_MIN_FRACTION).
PROBE_CLOCK_RATIO_MIN = (readiness.DEFAULT_MIN_FRACTION, "", "The readiness probe notes a clock below 0.9 x the "
                         "expected one (health/readiness.py DEFAULT_MIN_FRACTION); a tensor-parallel pair steps at "
                         "its slower GPU's pace, so the slower node's probe clock below 0.9 x the faster's refuses "
                         "the pair.")


def _floor(name: str, option: str, what: str, kind: str, high: float, floor: Any = None, **kw: Any) -> Field:
    value, unit, source = floor or fabric.FLOORS[name]
    return Field("sparkfleet_pair_" + option, kind, value, "Pair preflight: %s. %s" % (what, source), unit, 0,
                 high, option=option, **kw)


FIELDS = (
    Field("sparkfleet_cluster", "str", None, "The cluster the host belongs to: the hosts naming the same cluster "
          "serve one model together and are checked together by the pair preflight (playbooks/pair_preflight.yml); "
          "rank 0 is the first of them in the inventory (null: none).", nullable=True,
          check=lambda v: None if v.strip() and v == v.strip() else "must be a non-empty name", option="name"),
    Field("sparkfleet_pair_preflight", "bool", True, "Run the pair preflight (playbooks/pair_preflight.yml) as a "
          "stage of bench.yml for the clusters a campaign serves on (false: leave it out, e.g. for llama.cpp's RPC "
          "over plain TCP; the playbook run alone always checks).", option="preflight"),
    Field("sparkfleet_fabric", "list", None, "The host's RDMA rails as {hca, netdev, port, roce_v2_gid_index} "
          "(null: every port under /sys/class/infiniband, its netdev and RoCE v2 GID index). A given rail's port "
          "state, MTU and address are still read on the host.", nullable=True, elements="dict", option="fabric"),
    _floor("mtu", "mtu_min", "the smallest MTU of a rail's netdev (a ping of this size with don't-fragment must "
           "cross)", "int", 65536),
    _floor("ib_write_bw_per_twin_gbps", "rdma_gbps_min", "ib_write_bw on each rail at or above this", "float",
           10000.0),
    _floor("ib_write_bw_sum_gbps", "rdma_sum_gbps_min", "ib_write_bw summed over the rails at or above this",
           "float", 100000.0),
    _floor("ib_write_lat_typical_us", "rdma_lat_us_max", "ib_write_lat's typical latency at or below this",
           "float", 10000.0, low_open=True),
    _floor("", "nccl_busbw_gbs_min", "NCCL all-reduce bus bandwidth at 1 GiB and above at or above this", "float",
           100000.0, NCCL_BUSBW_GBS_MIN),
    _floor("", "probe_clock_ratio_min", "the slowest node's SM clock under the latest readiness probe at or above "
           "this fraction of the fastest node's (a node no run has probed yet is named, not judged)", "float", 1.0,
           PROBE_CLOCK_RATIO_MIN),
    Field("sparkfleet_pair_nccl_command", "list", ["mpirun", "--allow-run-as-root", "-np", "{nodes}", "-H",
                                                   "{hosts}", "all_reduce_perf", "-b", "8M", "-e", "2G", "-f",
                                                   "2", "-g", "1"],
          "Pair preflight: NCCL's test as rank 0 runs it, argv with {nodes} (the cluster's size) and {hosts} "
          "(addr:1,... over each node's first rail); nccl-tests' output, with NCCL_DEBUG=INFO and the fabric's "
          "NCCL settings in its environment.", elements="str", option="nccl_command"),
    Field("sparkfleet_pair_rdma_port", "int", 18515, "Pair preflight: the TCP port of the first rail's "
          "ib_write_bw server (one per rail, counting up; ib_write_lat's 100 above; perftest's default 18515).",
          "", 1024, 65000, option="rdma_port"),
    Field("sparkfleet_pair_rdma_env_check", "bool", True, "Check RDMA inside each environment a multi-node run over "
          "NCCL uses (tensor or pipeline), with the docker flags it runs with: a uverbs device in /dev/infiniband, "
          "an ACTIVE port on each rail HCA, unlimited memlock (cluster/rdma_env.py). The pair preflight checks each "
          "container environment whose image the node already has; each such run checks it again at its start and "
          "fails with a reason starting 'rdma:' (false: leave it out, e.g. NCCL over sockets on purpose).",
          option="rdma_env_check"),
    Field("sparkfleet_pair_nccl_env_check", "bool", True, "Run NCCL's all-reduce inside each container environment "
          "a multi-node run over NCCL uses, as a stage of bench.yml: one rank per node through torch.distributed in "
          "the image, with the environment's docker flags, the fabric's settings and NCCL_DEBUG=INFO "
          "(cluster/nccl_env.py); its transport, bus bandwidth (the nccl_busbw_gbs_min floor) and each node's NCCL "
          "version are judged (false: leave it out).", option="nccl_env_check"),
    Field("sparkfleet_pair_nccl_env_port", "int", 29517, "Pair preflight: the TCP port on rank 0's cluster address "
          "where the in-environment NCCL test's ranks meet (torch.distributed's MASTER_PORT).", "", 1024, 65000,
          option="nccl_env_port"),
    Field("sparkfleet_pair_rdma_duration_s", "int", 5, "Pair preflight: seconds each ib_write_bw runs (-D).", "s",
          1, 600, option="rdma_duration_s"),
)


#: The floor settings each check is judged by (recorded with the check; parity's is equality).
CHECK_FLOORS = {"mtu": ("mtu_min",), "jumbo_ping": ("mtu_min",), "ib_write_bw": ("rdma_gbps_min", "rdma_sum_gbps_min"),
                "ib_write_lat": ("rdma_lat_us_max",), "nccl_busbw": ("nccl_busbw_gbs_min",),
                "nccl_busbw_in_environment": ("nccl_busbw_gbs_min",),
                "probe_clocks": ("probe_clock_ratio_min",)}
#: Facts a node may leave unread without failing parity (named all the same). Only the image's ID: bench.yml builds
#: or pulls the image in the matrix stage, after this preflight, so a first campaign's nodes have none yet. An
#: unread driver, kernel, firmware, NCCL version or clock cap leaves the nodes' match unproven
#: (fabric.check_parity) and refuses the pair. The readiness probe's clock is judged apart (probe_clocks).
MAY_BE_UNREAD = ("image_digest",)


def _floor_text(name: str, floors: Mapping[str, Any]) -> str:
    if name == "parity":
        return "equal on every node"
    return ", ".join("%s=%s" % (o, floors.get(o)) for o in CHECK_FLOORS.get(name, ())) or "-"


def _record(checks: List[dict], name: str, node: str, verdict: Any) -> None:
    ok, reason = verdict
    checks.append({"check": name, "node": node, "pass": ok, "reason": reason})


def _results(registered: Any) -> List[Mapping[str, Any]]:
    """The loop results of a registered task that ran (skipped items and hosts left out)."""
    if not isinstance(registered, Mapping):
        return []
    return [r for r in registered.get("results") or [] if isinstance(r, Mapping) and not r.get("skipped")]


def _why(result: Mapping[str, Any], parsed: Mapping[str, Any]) -> str:
    if parsed.get("errors"):
        return "; ".join(parsed["errors"])
    return "rc=%s %s" % (result.get("rc"), tail("%s %s %s" % (result.get("stderr") or "", result.get("stdout")
                                                                or "", result.get("msg") or "")))


def _argv(run: Mapping[str, Any]) -> List[str]:
    """The command a registered result ran (``cmd``: a list, or the string Ansible sometimes reports)."""
    cmd = run.get("cmd") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd]


def _arg(run: Mapping[str, Any], flag: str) -> str:
    cmd = _argv(run)
    return cmd[cmd.index(flag) + 1] if flag in cmd[:-1] else "?"


def judge(cluster: str, nodes: Sequence[Mapping[str, Any]], floors: Mapping[str, Any]) -> Dict[str, Any]:
    """The pair's verdict from what the playbook registered on each node (``nodes``: their variables, rank 0
    first: ``inventory_hostname``, ``pair_node`` from cluster_fabric, ``pair_pings``, ``pair_rdma_env`` from
    cluster_rdma_env (RDMA inside each environment, as a bench.yml stage), ``pair_nccl_env`` from cluster_nccl_env
    (NCCL's all-reduce inside each environment, every node a rank); on rank 0 ``pair_bw``,
    ``pair_lat`` and ``pair_nccl``). Every check is {check, node, pass, reason, floor}; ``causes`` are the failed
    checks as ``<check> on <node>: <reason>``; ``pass`` when none failed."""
    checks: List[dict] = []
    # a plan made before the probe's floor existed judges by its default
    floors = dict(floors, probe_clock_ratio_min=floors.get("probe_clock_ratio_min", PROBE_CLOCK_RATIO_MIN[0]))
    names = [str(n["inventory_hostname"]) for n in nodes]
    for host, node in zip(names, nodes):
        found = node.get("pair_node") or {}
        rails = found.get("rails") or []
        # a given rail must be up (named with its state); found ones: both twins of the cable (FLOORS active_twins)
        _record(checks, "rails_active", host, fabric.check_active(
            rails, [r["hca"] for r in rails] or None, 1) if found.get("given") else fabric.check_active(rails))
        _record(checks, "mtu", host, fabric.check_mtu(rails, floors["mtu_min"]))
        _record(checks, "subnets", host, fabric.check_subnets(rails))
        for ping in _results(node.get("pair_pings")):
            size = int(_arg(ping, "-s")) + 28  # ICMP payload + 8 bytes ICMP + 20 bytes IPv4 header
            crossed = ping.get("rc") == 0
            _record(checks, "jumbo_ping", host, (crossed, "%d-byte ping with don't-fragment from %s to %s: %s" % (
                size, _arg(ping, "-I"), _argv(ping)[-1], "crossed" if crossed else "did not cross (%s)" % tail(
                    ping.get("stdout") or ping.get("stderr") or ""))))
        for env in (node.get("pair_rdma_env") or {}).get("environments") or []:
            _record(checks, "rdma_in_environment", host, (bool(env.get("pass")), "%s (%s): %s" % (
                env.get("environment"), env.get("kind"), env.get("reason"))))
    if nodes:
        _judge_rank0(checks, names[0], nodes[0], floors)
    env_versions = _judge_in_environments(checks, names, nodes, floors)
    if len(nodes) > 1:
        _judge_parity(checks, names, nodes, floors, env_versions)
    for check in checks:
        check["floor"] = _floor_text(check["check"], floors)
    causes = ["%s on %s: %s" % (c["check"], c["node"], c["reason"]) for c in checks if not c["pass"]]
    return {"cluster": cluster, "nodes": names, "pass": not causes, "checks": checks, "causes": causes,
            "floors": {f.option: floors.get(f.option) for f in FIELDS if f.option in FLOOR_OPTIONS}}


#: The settings that are floors (recorded with the verdict).
FLOOR_OPTIONS = ("mtu_min", "rdma_gbps_min", "rdma_sum_gbps_min", "rdma_lat_us_max", "nccl_busbw_gbs_min",
                 "probe_clock_ratio_min")


def nccl_versions(run: Any, names: Sequence[str]) -> Dict[str, Optional[str]]:
    """Each node's NCCL version from NCCL's test run on rank 0 with NCCL_DEBUG=INFO (None: not in its output).
    Rank i runs on node i (nccl_argv lists the nodes in order, one slot each); nccl-tests' ``# Rank i ... on
    <host>`` line names the host whose log prefix carries that rank's own ``NCCL version`` line."""
    if not isinstance(run, Mapping) or run.get("skipped"):
        return dict.fromkeys(names)
    text = "%s\n%s" % (run.get("stdout") or "", run.get("stderr") or "")
    by_host = nccl.nccl_transport(text)["versions_by_host"]
    host_of_rank = {d["rank"]: d["host"] for d in nccl.parse_nccl_tests(text)["devices"]}
    # a rank the table does not name is unread (never the version of a line without a host prefix)
    return {name: by_host.get(host_of_rank[rank]) if rank in host_of_rank else None
            for rank, name in enumerate(names)}


def _active_hcas(node: Mapping[str, Any]) -> List[str]:
    return [r["hca"] for r in (node.get("pair_node") or {}).get("rails") or [] if r.get("active")]


def _judge_in_environments(checks: List[dict], names: Sequence[str], nodes: Sequence[Mapping[str, Any]],
                           floors: Mapping[str, Any]) -> Dict[str, Dict[str, Optional[str]]]:
    """NCCL's all-reduce inside each environment (nccl_env.judge); returns each judged environment's NCCL version
    per node, for parity."""
    found, versions = nccl_env.judge(names, [n.get("pair_nccl_env") for n in nodes],
                                     [_active_hcas(n) for n in nodes], float(floors["nccl_busbw_gbs_min"]))
    for name, host, verdict in found:
        _record(checks, name, host, verdict)
    return versions


def _judge_parity(checks: List[dict], names: Sequence[str], nodes: Sequence[Mapping[str, Any]],
                  floors: Mapping[str, Any], env_versions: Optional[Mapping[str, Mapping[str, Any]]] = None) -> None:
    """What the nodes must share (their facts, each one's NCCL version on the host and inside each environment the
    test ran in), and the readiness probe's clocks."""
    versions = nccl_versions(nodes[0].get("pair_nccl"), names)
    facts = {host: dict((node.get("pair_node") or {}).get("facts") or {}, nccl_version=versions[host],
                        **{"nccl_version[%s]" % env: by_node.get(host)
                           for env, by_node in (env_versions or {}).items()})
             for host, node in zip(names, nodes)}
    _record(checks, "parity", names[0], fabric.check_parity(facts, may_be_unread=MAY_BE_UNREAD))
    clocks = {host: ((node.get("pair_node") or {}).get("probe") or {}).get("sm_clock_mhz")
              for host, node in zip(names, nodes)}
    _record(checks, "probe_clocks", names[0], fabric.check_clock_spread(
        clocks, float(floors["probe_clock_ratio_min"]), "readiness probe SM clock"))


def _judge_rank0(checks: List[dict], host: str, rank0: Mapping[str, Any], floors: Mapping[str, Any]) -> None:
    """ib_write_bw (each rail to each peer, and their sum), ib_write_lat, NCCL's transport and bus bandwidth."""
    gbps: Dict[str, Optional[float]] = {}
    for run in _results(rank0.get("pair_bw")):
        parsed = rdma.parse_ib_write_bw(run.get("stdout") or "")
        label = "%s->%s" % (parsed.get("device") or _arg(run, "-d"), _argv(run)[-1])
        gbps[label] = parsed["bw_average_gbps"] if parsed["ok"] else None
        if not parsed["ok"]:
            _record(checks, "ib_write_bw", host, (False, "%s gave no result: %s" % (label, _why(run, parsed))))
    if gbps:
        _record(checks, "ib_write_bw", host, fabric.check_bandwidth(gbps, floors["rdma_gbps_min"],
                                                                    floors["rdma_sum_gbps_min"]))
    for run in _results(rank0.get("pair_lat")):
        parsed = rdma.parse_ib_write_lat(run.get("stdout") or "")
        label = "%s->%s" % (parsed.get("device") or _arg(run, "-d"), _argv(run)[-1])
        ok, reason = fabric.check_latency(parsed.get("t_typical_us") if parsed["ok"] else None,
                                          floors["rdma_lat_us_max"])
        _record(checks, "ib_write_lat", host, (ok, "%s: %s%s" % (label, reason, "" if parsed["ok"] else
                                                                 " (%s)" % _why(run, parsed))))
    run = rank0.get("pair_nccl")
    if not isinstance(run, Mapping) or run.get("skipped"):
        return
    text = "%s\n%s" % (run.get("stdout") or "", run.get("stderr") or "")
    _record(checks, "nccl_transport", host, nccl.transport_verdict(nccl.nccl_transport(text), _active_hcas(rank0)))
    busbw = nccl.large_message_busbw(nccl.parse_nccl_tests(text), nccl.GIB)
    floor = floors["nccl_busbw_gbs_min"]
    if busbw is None:
        verdict = (False, "no result row of 1 GiB or more (rc=%s: %s)" % (run.get("rc"), tail(text)))
    else:
        verdict = (busbw >= floor, "all-reduce bus bandwidth at >= 1 GiB %.2f GB/s (floor %.2f)" % (busbw, floor))
    _record(checks, "nccl_busbw", host, verdict)


def perftest_args(rail: Mapping[str, Any], cluster: Mapping[str, Any], index: int, latency: bool = False) -> list:
    """perftest's arguments for rail ``index`` (server and client alike; the client adds the peer's address):
    the HCA and port, a TCP port per rail (latency servers 100 above), -F (no CPU-frequency warning as an error),
    the RoCE v2 GID index where known; ib_write_bw reports Gb/s and runs ``rdma_duration_s`` (-D)."""
    port = int(cluster["rdma_port"]) + int(index) + (100 if latency else 0)
    argv = ["-d", str(rail["hca"]), "-i", str(rail.get("port") or 1), "-p", str(port), "-F"]
    if rail.get("roce_v2_gid_index") is not None:
        argv += ["-x", str(rail["roce_v2_gid_index"])]
    if not latency:
        argv += ["--report_gbits", "-D", str(cluster["rdma_duration_s"])]
    return argv


def nccl_argv(command: Sequence[str], rails_by_node: Sequence[Sequence[Mapping[str, Any]]]) -> list:
    """The NCCL test's argv: {nodes} the cluster's size, {hosts} ``addr:1,...`` over each node's first rail."""
    hosts = ",".join("%s:1" % ((rails[0] if rails else {}).get("ipv4") or "?") for rails in rails_by_node)
    return [str(a).replace("{nodes}", str(len(rails_by_node))).replace("{hosts}", hosts) for a in command]
