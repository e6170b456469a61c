"""A fake ``/sys`` with a DGX Spark's RDMA devices, for tests of cluster/fabric.py's read_fabric().

:func:`build` writes ``class/infiniband/<hca>/ports/1/{state,phys_state,link_layer,rate,gids/*,gid_attrs/types/*,
gid_attrs/ndevs/*}``, ``class/infiniband/<hca>/device/net/<netdev>/`` and ``class/net/<netdev>/{mtu,operstate,
carrier}`` under a directory, in the kernel's formats (drivers/infiniband/core/sysfs.c: ``"%d: %s"`` states,
GIDs as 8 groups of 4 hex digits; drivers/infiniband/core/cache.c: ``IB/RoCE v1`` / ``RoCE v2``).

The default machine is the DGX Spark of NVIDIA's two-Spark benchmarking guide (NVIDIA/dgx-spark-playbooks
@0db7c141da60870ca6ed5c99436320f4e35cd531 nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md):
four RDMA devices rocep1s0f0, rocep1s0f1, roceP2p1s0f0, roceP2p1s0f1 (netdevs enp1s0f0np0, enp1s0f1np1,
enP2p1s0f0np0, enP2p1s0f1np1), the cable in the inner QSFP port so its twins rocep1s0f0 and roceP2p1s0f0 are
ACTIVE with 192.168.200.12/24 and 192.168.201.12/24, the others DOWN with no address. A port with an IPv4 address
has the mlx5 GID table a RoCE port shows: 0/1 the link-local GID (RoCE v1 / v2), 2/3 the IPv4-mapped one (v1 / v2),
so the RoCE v2 IPv4 GID is index 3 (NCCL_IB_GID_INDEX=3 in sparkrun and the Spark playbooks).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPARK_RAILS: list[dict[str, Any]] = [
    {"hca": "rocep1s0f0", "netdev": "enp1s0f0np0", "active": True, "ipv4": "192.168.200.12/24"},
    {"hca": "rocep1s0f1", "netdev": "enp1s0f1np1", "active": False, "ipv4": None},
    {"hca": "roceP2p1s0f0", "netdev": "enP2p1s0f0np0", "active": True, "ipv4": "192.168.201.12/24"},
    {"hca": "roceP2p1s0f1", "netdev": "enP2p1s0f1np1", "active": False, "ipv4": None},
]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _mapped(address: str) -> str:
    octets = [int(b) for b in address.split("/")[0].split(".")]
    return "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}".format(*tuple(octets))


def build(root: Path, rails: Sequence[dict[str, Any]] | None = None, mtu: int = 9000,
          roce_v2_index: int = 3) -> Path:
    """Write the tree under ``root`` and return ``root`` (pass it as read_fabric's ``sysfs``).

    ``rails``: dicts with ``hca``, ``netdev``, ``active`` and optional ``ipv4`` (``a.b.c.d/len``), ``mtu``,
    ``link_layer`` (Ethernet), ``gid_types`` (index -> type, overriding the table above), ``no_ndevs`` (True: no
    gid_attrs/ndevs, so the netdev comes from device/net). ``roce_v2_index``: where the IPv4 RoCE v2 GID sits.
    """
    root = Path(root)
    for n, rail in enumerate(SPARK_RAILS if rails is None else rails):
        hca, netdev = rail["hca"], rail["netdev"]
        base = root / "class" / "infiniband" / hca
        port = base / "ports" / "1"
        active = rail.get("active", True)
        _write(port / "state", "4: ACTIVE" if active else "1: DOWN")
        _write(port / "phys_state", "5: LinkUp" if active else "3: Disabled")
        _write(port / "link_layer", rail.get("link_layer", "Ethernet"))
        _write(port / "rate", "100 Gb/sec (2X HDR)" if active else "10 Gb/sec (4X SDR)")
        _write(base / "fw_ver", "28.45.4028")
        (base / "device" / "net" / netdev).mkdir(parents=True, exist_ok=True)
        link_local = "fe80:0000:0000:0000:4ebb:47ff:fe2d:%04x" % (0x1a16 + n)
        table = {0: (link_local, "IB/RoCE v1"), 1: (link_local, "RoCE v2")}
        if rail.get("ipv4"):
            table[roce_v2_index - 1] = (_mapped(rail["ipv4"]), "IB/RoCE v1")
            table[roce_v2_index] = (_mapped(rail["ipv4"]), "RoCE v2")
        for index, kind in (rail.get("gid_types") or {}).items():
            table[index] = (table.get(index, (link_local, ""))[0], kind)
        for index in range(max(table) + 3):
            gid, kind = table.get(index, ("0000:0000:0000:0000:0000:0000:0000:0000", None))
            _write(port / "gids" / str(index), gid)
            if kind:  # an empty entry's attributes cannot be read (EINVAL): no file here
                _write(port / "gid_attrs" / "types" / str(index), kind)
                if not rail.get("no_ndevs"):
                    _write(port / "gid_attrs" / "ndevs" / str(index), netdev)
        net = root / "class" / "net" / netdev
        _write(net / "mtu", str(rail.get("mtu", mtu)))
        _write(net / "operstate", "up" if active else "down")
        _write(net / "carrier", "1" if active else "0")
    return root


def ip_addr_json(rails: Sequence[dict[str, Any]] | None = None, mtu: int = 9000) -> str:
    """``ip -j addr`` for the rails' netdevs (iproute2's keys: ifname, mtu, operstate, addr_info[family, local,
    prefixlen])."""
    links = []
    for i, rail in enumerate(SPARK_RAILS if rails is None else rails):
        info = []
        if rail.get("ipv4"):
            address, _, prefix = rail["ipv4"].partition("/")
            info.append({"family": "inet", "local": address, "prefixlen": int(prefix or 32), "scope": "global",
                         "label": rail["netdev"]})
        links.append({"ifindex": 4 + i, "ifname": rail["netdev"], "mtu": rail.get("mtu", mtu),
                      "operstate": "UP" if rail.get("active", True) else "DOWN", "addr_info": info})
    return json.dumps(links)
