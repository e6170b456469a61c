# Copyright: sparkfleet contributors
# Apache-2.0
"""A host's RDMA fabric, the communication environment derived from it, and a pair preflight's verdicts.

**Rails.** :func:`read_fabric` reads one rail per (HCA, port) from sysfs, as sparkrun's ``scripts/ib_detect.sh``
and ``ibdev2netdev`` do (spark-arena/sparkrun v0.2.40 @0041b8f8fc1320ffa2e85d2d0ac760ee6be19de7). A DGX Spark's
ConnectX-7 shows each QSFP port as two PCIe x4 "twins" (``rocep1s0f1`` / ``roceP2p1s0f1`` for the outer port,
``rocep1s0f0`` / ``roceP2p1s0f0`` for the inner one; netdevs ``enp1s0f1np1`` / ``enP2p1s0f1np1``), each up to
~100 Gb/s; NCCL reaches 200 Gb/s only with both twins in ``NCCL_IB_HCA`` (eugr/spark-vllm-docker docs/NETWORKING.md
@3e84d9d05399cd52ce9e237df12fd5fb056498e2). Each rail is::

    {"hca": str, "port": int,
     "state": "ACTIVE"|"DOWN"|...|None, "state_code": int|None, "active": bool,   # ports/<p>/state "4: ACTIVE"
     "phys_state": "LinkUp"|...|None,                                             # ports/<p>/phys_state "5: LinkUp"
     "link_layer": "Ethernet"|"InfiniBand"|None, "rate": "100 Gb/sec (2X HDR)"|None,
     "netdev": str|None,                    # gid_attrs/ndevs/<gid index>, else the first of device/net/*
     "roce_v2_gid_index": int|None, "roce_v2_gid": str|None,
     "ipv4": str|None, "prefixlen": int|None,
     "ipv4_source": "ip-addr"|"gid"|"given"|None,   # `ip -j addr` (with prefix), the IPv4-mapped GID (no prefix)
     "mtu": int|None, "operstate": str|None}        # /sys/class/net/<netdev>/{mtu,operstate}

sysfs formats (Linux drivers/infiniband/core/sysfs.c, Documentation/ABI/stable/sysfs-class-infiniband): ``state``
and ``phys_state`` are ``"%d: %s"``; ``gids/<i>`` is a GID as 8 groups of 4 hex digits (an IPv4-mapped RoCE v2
GID reads ``0000:0000:0000:0000:0000:ffff:c0a8:c80c``); ``gid_attrs/types/<i>`` is ``IB/RoCE v1`` or ``RoCE v2``
(drivers/infiniband/core/cache.c gid_type_str); ``gid_attrs/ndevs/<i>`` the netdev name. Reading an empty GID
entry's attributes fails (EINVAL): such entries are skipped.

**Environment.** :func:`fabric_env` is sparkrun's ``generate_nccl_env()`` (src/sparkrun/orchestration/
infiniband.py) over the rails instead of ib_detect.sh's output; :func:`ray_non_carry_over` is the list sparkrun
writes to vLLM's ``ray_non_carry_over_env_vars.json`` (src/sparkrun/runtimes/vllm_ray.py, issue #135) so that Ray
does not copy the head's per-host values to the workers.

**Pair preflight.** The ``check_*`` functions are pure and return ``(ok, reason)``; ``pair.judge`` applies them to
what the pair preflight measured. Their default limits are :data:`FLOORS`.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import ipaddress
import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..parsers.rdma import gid_ipv4

Verdict = Tuple[bool, str]

#: Default limits of the pair preflight: name -> (value, unit, where it comes from). ``ib_write_lat_typical_us``
#: is a ceiling, the others floors. The bandwidth and latency limits are sparkfleet's reading of published runs
#: (issue 36), not a vendor specification.
FLOORS: Dict[str, Tuple[Any, str, str]] = {
    "active_twins": (2, "rails", "A DGX Spark reaches 200 Gb/s over one QSFP cable only through both PCIe twins of "
                     "the port, each ~100 Gb/s; NCCL_IB_HCA must list both (eugr/spark-vllm-docker "
                     "docs/NETWORKING.md @3e84d9d05399cd52ce9e237df12fd5fb056498e2)."),
    "mtu": (9000, "bytes", "Owners set mtu: 9000 on the CX-7 netdevs (eugr/spark-vllm-docker docs/NETWORKING.md "
            "@3e84d9d0 netplan); NVIDIA's two-Spark ib_write_bw run at the default 1500 shows 'Mtu : 1024[B]' where "
            "9000 gives RoCE's 4096 (NVIDIA/dgx-spark-playbooks @0db7c141 "
            "nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md)."),
    "ib_write_bw_per_twin_gbps": (85.0, "Gb/s", "NVIDIA's two-Spark run measured 92.57 and 97.28 Gb/s on the two "
                                  "twins (ib_write_bw -F --report_gbits, one process per twin; NVIDIA/dgx-spark-"
                                  "playbooks @0db7c141 performance_benchmarking_guide.md); 85 leaves ~8% below the "
                                  "lower one."),
    "ib_write_bw_sum_gbps": (170.0, "Gb/s", "The same run summed 92.57 + 97.28 = 189.85 Gb/s on one 200 GbE cable; "
                             "170 is ~90% of it."),
    "ib_write_lat_typical_us": (3.0, "us", "ib_write_lat between two Sparks: t_typical 1.47 us, 99.9% 1.93 us "
                                "(eugr/spark-vllm-docker docs/NETWORKING.md @3e84d9d0); TCP on the same link costs "
                                "~10 us a message, so above 3 us the path is not RDMA as it should be."),
}

#: The default GID index sparkrun falls back to when it finds no RoCE v2 entry (scripts/ib_detect.sh:
#: "GID detect failed, defaulting to 3"); on a DGX Spark the RoCE v2 IPv4 GID is index 3.
DEFAULT_GID_INDEX = 3

#: Keys of a rail, in order (see the module's docstring).
RAIL_KEYS = ("hca", "port", "state", "state_code", "active", "phys_state", "link_layer", "rate", "netdev",
             "roce_v2_gid_index", "roce_v2_gid", "ipv4", "prefixlen", "ipv4_source", "mtu", "operstate")


# --------------------------------------------------------------------------- reading the fabric


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _state(text: Optional[str]) -> Tuple[Optional[int], Optional[str]]:
    """``"4: ACTIVE"`` -> (4, "ACTIVE")."""
    if not text:
        return None, None
    code, _, name = text.partition(":")
    code = code.strip()
    return (int(code) if code.isdigit() else None), (name.strip() or None)


def hca_order(name: str) -> Tuple[str, str]:
    """Sort key of RDMA device names: case-insensitive first, as ``ls`` under a UTF-8 locale lists them
    (``rocep1s0f0`` before ``roceP2p1s0f0``, the order NVIDIA's and eugr's Spark docs name them)."""
    return name.lower(), name


def ip_addresses(ip_addr: Any) -> Dict[str, Tuple[str, int]]:
    """ifname -> (first IPv4 address, prefix length) from ``ip -j addr`` (its JSON text or the decoded list)."""
    if isinstance(ip_addr, (str, bytes)):
        try:
            ip_addr = json.loads(ip_addr)
        except ValueError:
            return {}
    found: Dict[str, Tuple[str, int]] = {}
    for link in ip_addr or ():
        if not isinstance(link, Mapping):
            continue
        for info in link.get("addr_info") or ():
            if isinstance(info, Mapping) and info.get("family") == "inet" and info.get("local"):
                found.setdefault(str(link.get("ifname")), (str(info["local"]), int(info.get("prefixlen", 32))))
    return found


def _roce_v2(port_dir: str) -> Tuple[Optional[int], Optional[str], Optional[str]]:
    """(index, GID, netdev) of the port's RoCE v2 GID: the lowest index with an IPv4-mapped GID (show_gids'
    ``v2`` + IPv4 row, sparkrun's first choice), else the lowest RoCE v2 index (its sysfs fallback)."""
    candidates = []
    for name in _listdir(os.path.join(port_dir, "gid_attrs", "types")):
        if not name.isdigit():
            continue
        kind = _read(os.path.join(port_dir, "gid_attrs", "types", name)) or ""
        if "RoCE v2" not in kind and "RoCEv2" not in kind:
            continue
        gid = _read(os.path.join(port_dir, "gids", name))
        if not gid or gid.replace("0", "").replace(":", "") == "":
            continue
        candidates.append((gid_ipv4(gid) is None, int(name), gid))
    if not candidates:
        return None, None, None
    _, index, gid = min(candidates)
    return index, gid, _read(os.path.join(port_dir, "gid_attrs", "ndevs", str(index))) or None


def link_readings(sysfs: str, hca: str, port: int, netdev: Optional[str]) -> Dict[str, Any]:
    """What sysfs shows of one port and its netdev: state, state_code, active, phys_state, link_layer, rate, mtu,
    operstate (None where unreadable: no such port or netdev there)."""
    port_dir = os.path.join(sysfs, "class", "infiniband", hca, "ports", str(port))
    code, state = _state(_read(os.path.join(port_dir, "state")))
    out = {"state": state, "state_code": code, "active": bool(state and "ACTIVE" in state),
           "phys_state": _state(_read(os.path.join(port_dir, "phys_state")))[1],
           "link_layer": _read(os.path.join(port_dir, "link_layer")) or None,
           "rate": _read(os.path.join(port_dir, "rate")) or None, "mtu": None, "operstate": None}
    if netdev:
        mtu = _read(os.path.join(sysfs, "class", "net", netdev, "mtu"))
        out["mtu"] = int(mtu) if mtu and mtu.isdigit() else None
        out["operstate"] = _read(os.path.join(sysfs, "class", "net", netdev, "operstate")) or None
    return out


def read_fabric(sysfs: str = "/sys", ip_addr: Any = None) -> List[Dict[str, Any]]:
    """One rail per (HCA, port) under ``<sysfs>/class/infiniband``, HCAs in :func:`hca_order`; [] without RDMA.

    ``ip_addr``: ``ip -j addr``'s output (JSON text or decoded), for each netdev's IPv4 address and prefix; without
    it the address comes from the rail's IPv4-mapped RoCE v2 GID, with no prefix.
    """
    base = os.path.join(sysfs, "class", "infiniband")
    addresses = ip_addresses(ip_addr)
    rails = []
    for hca in sorted(_listdir(base), key=hca_order):
        ports_dir = os.path.join(base, hca, "ports")
        for port in sorted((p for p in _listdir(ports_dir) if p.isdigit()), key=int):
            index, gid, netdev = _roce_v2(os.path.join(ports_dir, port))
            if netdev is None:
                nets = sorted(_listdir(os.path.join(base, hca, "device", "net")))
                netdev = nets[0] if nets else None
            rail = dict.fromkeys(RAIL_KEYS)
            rail.update({"hca": hca, "port": int(port), "netdev": netdev, "roce_v2_gid_index": index,
                         "roce_v2_gid": gid, **link_readings(sysfs, hca, int(port), netdev)})
            if netdev in addresses:
                rail["ipv4"], rail["prefixlen"] = addresses[netdev]
                rail["ipv4_source"] = "ip-addr"
            elif gid_ipv4(gid):
                rail["ipv4"], rail["ipv4_source"] = gid_ipv4(gid), "gid"
            rails.append(rail)
    return rails


def given_rails(entries: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Rails given in the inventory instead of read (each needs ``hca``; ``netdev``, ``port`` (1), ``active``
    (True), ``roce_v2_gid_index``, ``ipv4`` as ``a.b.c.d`` or ``a.b.c.d/len``, ``mtu`` optional), as
    :func:`read_fabric` returns them."""
    rails = []
    for entry in entries:
        rail = dict.fromkeys(RAIL_KEYS)
        rail.update({k: v for k, v in entry.items() if k in RAIL_KEYS})
        rail["port"] = int(entry.get("port") or 1)
        rail["active"] = bool(entry.get("active", True))
        rail["state"] = rail["state"] or ("ACTIVE" if rail["active"] else "DOWN")
        address = entry.get("ipv4")
        if address and "/" in str(address):
            address, _, prefix = str(address).partition("/")
            rail["ipv4"], rail["prefixlen"] = address, int(prefix)
        if rail["ipv4"]:
            rail["ipv4_source"] = rail["ipv4_source"] or "given"
        rails.append(rail)
    return rails


# --------------------------------------------------------------------------- the environment


def _joined(names: Iterable[Optional[str]]) -> str:
    """Comma list, in order, without blanks or repeats (sparkrun's _nccl_socket_ifname_list)."""
    seen: List[str] = []
    for name in names:
        name = (name or "").strip()
        if name and name not in seen:
            seen.append(name)
    return ",".join(seen)


def fabric_env(rails: Sequence[Mapping[str, Any]], bootstrap_ifname: Optional[str] = None,
               topology: Optional[str] = None, node_ip: Optional[str] = None) -> Dict[str, str]:
    """The NCCL / UCX / GLOO / TP / MPI environment of one host from its rails; {} when no rail is ACTIVE.

    sparkrun ``generate_nccl_env()`` (orchestration/infiniband.py @0041b8f8) over ib_detect.sh's findings:

    * always ``NCCL_IGNORE_CPU_AFFINITY=1 NCCL_NET=IB NCCL_IB_DISABLE=0 NCCL_CROSS_NIC=1``;
    * ``NCCL_IB_HCA``: every ACTIVE HCA (both twins), comma-separated (DETECTED_HCA_LIST);
    * ``UCX_NET_DEVICES``: ``<hca>:<port>`` of each (DETECTED_UCX_LIST);
    * with ``bootstrap_ifname`` (sparkrun's default-route interface, DETECTED_SOCKET_IFNAME): ``MN_IF_NAME``,
      ``OMPI_MCA_btl_tcp_if_include``, ``GLOO_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME`` = it, and
      ``NCCL_SOCKET_IFNAME`` = it, then the rails' netdevs (NCCL tries them in order); without it all five are the
      rails' netdevs (DETECTED_NET_LIST);
    * ``NCCL_IB_GID_INDEX``: the first ACTIVE rail's RoCE v2 index (:data:`DEFAULT_GID_INDEX` when none), except
      for ``topology="ring"`` (a 3-node mesh without a switch), which sets ``NCCL_NET_PLUGIN=none
      NCCL_IB_SUBNET_AWARE_ROUTING=1 NCCL_IB_MERGE_NICS=0`` instead (generate_ring_nccl_overrides);
    * ``NODE_IP``: ``node_ip`` when given (sparkrun always sets it, "" when the management IP is unknown; an empty
      value is left out here).
    """
    active = [r for r in rails if r.get("active")]
    if not active:
        return {}
    env = {"NCCL_IGNORE_CPU_AFFINITY": "1", "NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_CROSS_NIC": "1",
           "NCCL_IB_HCA": _joined(r.get("hca") for r in active)}
    nets = _joined(r.get("netdev") for r in active)
    socket = (bootstrap_ifname or "").strip() or nets
    if socket:
        for key in ("MN_IF_NAME", "OMPI_MCA_btl_tcp_if_include", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
            env[key] = socket
        env["NCCL_SOCKET_IFNAME"] = _joined([bootstrap_ifname] + nets.split(","))
    env["UCX_NET_DEVICES"] = _joined("%s:%s" % (r.get("hca"), r.get("port") or 1) for r in active)
    if node_ip:
        env["NODE_IP"] = node_ip
    if topology == "ring":
        env.update({"NCCL_NET_PLUGIN": "none", "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_MERGE_NICS": "0"})
    else:
        index = active[0].get("roce_v2_gid_index")
        env["NCCL_IB_GID_INDEX"] = str(DEFAULT_GID_INDEX if index is None else index)
    return env


def ray_non_carry_over(envs_by_host: Mapping[str, Mapping[str, str]]) -> List[str]:
    """Sorted names of the variables that differ between hosts or are missing on some: what sparkrun writes to
    ``ray_non_carry_over_env_vars.json`` in the head's container (``ClusterCommEnv.from_per_host()`` then
    ``per_host_keys()``, orchestration/comm_env.py and runtimes/vllm_ray.py @0041b8f8) so that vLLM's Ray executor
    does not copy the head's ``NCCL_*`` / ``UCX_*`` values over the workers' own. [] for one host or identical
    environments (sparkrun then writes no file)."""
    hosts = list(envs_by_host)
    if len(hosts) < 2:
        return []
    keys = set()
    for env in envs_by_host.values():
        keys.update(env)
    first = envs_by_host[hosts[0]]
    return sorted(k for k in keys
                  if k not in first or any(envs_by_host[h].get(k) != first[k] for h in hosts[1:]))


# --------------------------------------------------------------------------- pair preflight verdicts


def _floor(name: str, value: Optional[float]) -> Any:
    return FLOORS[name][0] if value is None else value


def check_active(rails: Sequence[Mapping[str, Any]], hcas: Optional[Sequence[str]] = None,
                 minimum: Optional[int] = None) -> Verdict:
    """Both twins up: every HCA in ``hcas`` has an ACTIVE rail, or (no ``hcas``) at least ``minimum`` rails are
    ACTIVE (``FLOORS["active_twins"]``)."""
    active = [str(r.get("hca")) for r in rails if r.get("active")]
    if hcas:
        missing = [h for h in hcas if h not in active]
        if missing:
            states = {str(r.get("hca")): r.get("state") for r in rails}
            return False, "not ACTIVE: %s" % ", ".join("%s (%s)" % (h, states.get(h, "absent")) for h in missing)
        return True, "ACTIVE: %s" % ", ".join(hcas)
    minimum = _floor("active_twins", minimum)
    if len(active) < minimum:
        return False, "%d ACTIVE rail(s) (%s), need %d" % (len(active), ", ".join(active) or "none", minimum)
    return True, "ACTIVE: %s" % ", ".join(active)


def check_mtu(rails: Sequence[Mapping[str, Any]], floor: Optional[int] = None) -> Verdict:
    """Every ACTIVE rail's netdev MTU at least ``floor`` (``FLOORS["mtu"]``, 9000)."""
    floor = _floor("mtu", floor)
    active = [r for r in rails if r.get("active")]
    if not active:
        return False, "no ACTIVE rail"
    bad = ["%s %s" % (r.get("netdev") or r.get("hca"), "unknown" if r.get("mtu") is None else r.get("mtu"))
           for r in active if r.get("mtu") is None or int(r["mtu"]) < floor]
    if bad:
        return False, "MTU below %d: %s" % (floor, ", ".join(bad))
    return True, "MTU >= %d on %s" % (floor, ", ".join(str(r.get("netdev") or r.get("hca")) for r in active))


def check_subnets(rails: Sequence[Mapping[str, Any]]) -> Verdict:
    """The ACTIVE rails' IPv4 networks are pairwise distinct (twins on one subnet confuse routing and NCCL's
    discovery: eugr/spark-vllm-docker docs/NETWORKING.md "DO NOT use the same subnet on both twins")."""
    nets = []
    for rail in rails:
        if not rail.get("active"):
            continue
        name = rail.get("netdev") or rail.get("hca")
        if not rail.get("ipv4") or rail.get("prefixlen") is None:
            return False, "%s: no IPv4 address with a prefix known" % name
        nets.append((name, ipaddress.ip_interface("%s/%s" % (rail["ipv4"], rail["prefixlen"])).network))
    for i, (name_a, net_a) in enumerate(nets):
        for name_b, net_b in nets[i + 1:]:
            if net_a.overlaps(net_b):
                return False, "%s (%s) and %s (%s) share a subnet" % (name_a, net_a, name_b, net_b)
    return True, "distinct subnets: %s" % ", ".join("%s %s" % (n, net) for n, net in nets)


def check_bandwidth(per_twin_gbps: Mapping[str, Optional[float]], per_twin_floor: Optional[float] = None,
                    sum_floor: Optional[float] = None) -> Verdict:
    """ib_write_bw averages (Gb/s) by twin: each at least ``per_twin_floor``, their sum at least ``sum_floor``
    (``FLOORS["ib_write_bw_per_twin_gbps"]``, ``FLOORS["ib_write_bw_sum_gbps"]``)."""
    per_twin_floor = _floor("ib_write_bw_per_twin_gbps", per_twin_floor)
    sum_floor = _floor("ib_write_bw_sum_gbps", sum_floor)
    if not per_twin_gbps:
        return False, "no ib_write_bw result"
    unmeasured = [t for t, v in per_twin_gbps.items() if v is None]
    if unmeasured:
        return False, "ib_write_bw not measured on %s" % ", ".join(unmeasured)
    figures = ", ".join("%s %.2f" % (t, v) for t, v in per_twin_gbps.items())
    low = ["%s %.2f" % (t, v) for t, v in per_twin_gbps.items() if v < per_twin_floor]
    total = sum(float(v) for v in per_twin_gbps.values())
    if low:
        return False, "ib_write_bw below %.2f Gb/s per twin: %s" % (per_twin_floor, ", ".join(low))
    if total < sum_floor:
        return False, "ib_write_bw sum %.2f Gb/s below %.2f (%s)" % (total, sum_floor, figures)
    return True, "ib_write_bw %s; sum %.2f Gb/s" % (figures, total)


def check_latency(typical_us: Optional[float], ceiling: Optional[float] = None) -> Verdict:
    """ib_write_lat's t_typical (us) at most ``ceiling`` (``FLOORS["ib_write_lat_typical_us"]``)."""
    ceiling = _floor("ib_write_lat_typical_us", ceiling)
    if typical_us is None:
        return False, "ib_write_lat not measured"
    if typical_us > ceiling:
        return False, "ib_write_lat typical %.2f us above %.2f" % (typical_us, ceiling)
    return True, "ib_write_lat typical %.2f us" % typical_us


def _flat(facts: Mapping[str, Any]) -> Dict[str, Any]:
    """One level of nesting flattened: ``{"env": {"A": 1}}`` -> ``{"env.A": 1}``."""
    flat: Dict[str, Any] = {}
    for key, value in facts.items():
        if isinstance(value, Mapping):
            flat.update({"%s.%s" % (key, k): v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def _unread(facts_by_node: Mapping[str, Mapping[str, Any]], nodes: Sequence[str]) -> Dict[str, List[str]]:
    """fact -> the nodes that could not read it (a top-level fact that is None or missing; a key missing inside a
    nested mapping such as ``env`` is an absent variable, a difference, not an unread fact)."""
    keys = sorted({k for facts in facts_by_node.values() for k in facts})
    unread: Dict[str, List[str]] = {}
    for key in keys:
        missing = [n for n in nodes if facts_by_node[n].get(key) is None]
        if missing:
            unread[key] = missing
    return unread


def _unread_text(key: str, missing: Sequence[str], facts_by_node: Mapping[str, Mapping[str, Any]],
                 nodes: Sequence[str]) -> str:
    read = ["%s=%r" % (n, facts_by_node[n][key]) for n in nodes if n not in missing]
    return "%s on %s%s" % (key, ", ".join(missing), " (%s)" % ", ".join(read) if read else "")


def check_parity(facts_by_node: Mapping[str, Mapping[str, Any]], ignore: Iterable[str] = (),
                 may_be_unread: Iterable[str] = ()) -> Verdict:
    """The nodes' facts (driver, kernel, firmware, NCCL version, image digest, clock cap, ``env``: {...},
    ``engine_env``: {...}) are equal; a nested mapping is compared key by key (``env.NCCL_IB_HCA``), a key missing
    on a node counts as None. ``ignore``: keys (flattened names) that may differ, e.g. ``env.`` + each of
    :func:`ray_non_carry_over`. The reason names every differing key with each node's value.

    A top-level fact a node could not read (None) is named ``unread`` with the values the other nodes read, never
    compared as equal: parity is the claim that the nodes match, and an unread fact cannot back it, so it fails,
    except for the facts in ``may_be_unread`` (named, not failed)."""
    nodes = list(facts_by_node)
    if len(nodes) < 2:
        return False, "parity needs two nodes, got %d" % len(nodes)
    unread = _unread(facts_by_node, nodes)
    flat = {node: _flat({k: v for k, v in facts_by_node[node].items() if k not in unread}) for node in nodes}
    skip = set(ignore)
    keys = sorted({k for facts in flat.values() for k in facts} - skip)
    differing = []
    for key in keys:
        values = [flat[node].get(key) for node in nodes]
        if any(v != values[0] for v in values[1:]):
            differing.append("%s: %s" % (key, ", ".join("%s=%r" % (n, v) for n, v in zip(nodes, values))))
    optional = set(may_be_unread)
    failing = [_unread_text(k, m, facts_by_node, nodes) for k, m in unread.items() if k not in optional]
    noted = [_unread_text(k, m, facts_by_node, nodes) for k, m in unread.items() if k in optional]
    parts = (["differ: " + "; ".join(differing)] if differing else []) + (
        ["unread: " + "; ".join(failing)] if failing else [])
    note = "; not read (not judged): %s" % "; ".join(noted) if noted else ""
    if parts:
        return False, "; ".join(parts) + note
    return True, "%d fact(s) equal on %s%s" % (len(keys), ", ".join(nodes), note)


def check_clock_spread(clocks_by_node: Mapping[str, Optional[float]], ratio_min: float, what: str) -> Verdict:
    """The nodes' clocks (MHz) within ``ratio_min`` of each other: the slowest at least ``ratio_min`` x the
    fastest (a tensor-parallel pair steps at its slower GPU's pace). A node without a reading is named; it does not
    fail (``what`` says which reading, e.g. the readiness probe's, which exists only once a run has probed)."""
    missing = [n for n, v in clocks_by_node.items() if v is None]
    read = {n: float(v) for n, v in clocks_by_node.items() if v is not None}
    figures = ", ".join("%s=%.0f MHz" % (n, v) for n, v in read.items())
    unread = "%s unread on %s (not judged)" % (what, ", ".join(missing)) if missing else ""
    if len(read) < 2:
        return True, unread or "%s on fewer than two nodes (not judged)" % what
    slow, fast = min(read.values()), max(read.values())
    ratio = slow / fast if fast > 0 else 0.0
    text = "%s: %s (slowest/fastest %.2f, floor %.2f)%s" % (what, figures, ratio, ratio_min,
                                                          "; " + unread if unread else "")
    return ratio >= ratio_min, text
