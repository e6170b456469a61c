# Copyright: sparkfleet contributors
# Apache-2.0
"""One node of a cluster as the pair preflight reads it: its RDMA rails (given, or found in sysfs:
:func:`fabric.read_fabric`), each with its port state, MTU and IPv4 address, the facts the nodes of a pair must
share, and the NCCL/UCX/GLOO/MPI settings its rails call for (:func:`fabric.fabric_env`). Reads only.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import platform
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..parsers import rdma
from . import fabric

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]
Which = Callable[..., Optional[str]]


def _output(argv: Sequence[str], run: Runner, which: Which) -> Optional[str]:
    """The command's stdout, or None when the tool is missing or fails."""
    if not which(argv[0]):
        return None
    rc, out, _ = run(argv)
    return out if rc == 0 else None


def _checked(rail: Dict[str, Any], sysfs: str, devinfo: Mapping[str, Any], addresses: Mapping[str, Any]) -> None:
    """A given rail's port state, MTU and address as the node shows them (a given rail is not taken on trust):
    sysfs (fabric.link_readings), else ibv_devinfo's port state."""
    shown = fabric.link_readings(sysfs, str(rail["hca"]), rail["port"], rail.get("netdev"))
    if shown["state"] is None:
        ports = [p for p in (devinfo.get(rail["hca"]) or {}).get("ports") or [] if p.get("port") == rail["port"]]
        state = str(ports[0]["state"]).replace("PORT_", "") if ports and ports[0].get("state") else None
        shown.update(state=state, active=state == "ACTIVE")
    rail.update({k: v for k, v in shown.items() if v is not None or k in ("state", "active")})
    if rail["netdev"] in addresses and not rail.get("ipv4"):
        (rail["ipv4"], rail["prefixlen"]), rail["ipv4_source"] = addresses[rail["netdev"]], "ip-addr"


def readings(given: Optional[List[Mapping[str, Any]]], run: Runner, which: Which, sysfs: str = "/sys",
             image: str = "", docker: str = "docker") -> Dict[str, Any]:
    """{rails, ports, given, env, facts} of this node: the ``given`` rails (sparkfleet_fabric) checked against the
    node, else the ACTIVE ones of every port sysfs shows (``ports``). A missing tool leaves its reading None."""
    devinfo = {d["hca"]: d for d in rdma.parse_ibv_devinfo(_output(["ibv_devinfo"], run, which) or "")}
    ip_addr = _output(["ip", "-j", "addr"], run, which)
    if given:
        rails = fabric.given_rails(given)
        for rail in rails:
            _checked(rail, sysfs, devinfo, fabric.ip_addresses(ip_addr))
        ports = rails
    else:
        # found: every port is recorded, the ACTIVE ones are the rails (a Spark's unused QSFP port is DOWN)
        ports = fabric.read_fabric(sysfs, ip_addr)
        rails = [r for r in ports if r.get("active")]
    driver = _output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], run, which)
    facts = {"kernel": platform.release(), "driver": driver.strip().splitlines()[0] if driver else None,
             "firmware": ",".join(sorted({d["fw_ver"] for d in devinfo.values() if d.get("fw_ver")})) or None}
    if image:
        digest = _output([docker, "image", "inspect", "--format", "{{.Id}}", image], run, which)
        facts["image_digest"] = digest.strip() if digest else None
    env = fabric.fabric_env(rails)
    facts["env"] = env
    return {"rails": rails, "ports": ports, "given": bool(given), "env": env, "facts": facts}
