# Copyright: sparkfleet contributors
# Apache-2.0
"""One node of a cluster as the pair preflight reads it: its RDMA rails (given, or found in sysfs:
:func:`fabric.read_fabric`), each with its port state, MTU and IPv4 address, the facts the nodes of a pair must
share, and the NCCL/UCX/GLOO/MPI settings its rails call for (:func:`fabric.fabric_env`). Reads only.

The facts a pair must share: driver, kernel, HCA firmware, the image's ID, the fabric environment (``env``), the
engine's workload environment (``engine_env``: a digest per variable, since values may hold tokens), the clock cap
sparkfleet's gpu_state role applied (``clock_cap``, from its records: nvidia-smi cannot read a lock back); and,
apart from the facts, the SM clock the latest readiness probe reached here (``probe``), when a run has probed.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import glob
import hashlib
import os
import platform
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import gpu_control
from ..contract.textfile import read_json_object
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


def value_digest(value: Any) -> str:
    """A short digest of one variable's value: equal values compare equal, and no value (a token) is recorded."""
    return "sha256:" + hashlib.sha256(str(value).encode("utf-8")).hexdigest()[:12]


def clock_cap(controls: Mapping[str, Any]) -> Optional[str]:
    """The clock lock and power limit sparkfleet applied per GPU (gpu_control.read_applied_controls), in words;
    None when its records could not be read (unread, not "none")."""
    if controls.get("error"):
        return None
    if not controls.get("applied"):
        return "none applied"
    caps = ["GPU%s locked %s-%s MHz" % (gpu, lock["min"], lock["max"])
            for gpu, lock in sorted((controls.get("locked_clocks") or {}).items())
            if isinstance(lock, Mapping) and lock.get("min") is not None]
    watts = gpu_control.applied_power_limit(controls, 0)
    if watts is not None:
        caps.append("GPU0 power limit %g W" % watts)
    return "; ".join(caps) or "none applied"


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:  # a run directory removed meanwhile
        return 0.0


def latest_probe(results_dir: str) -> Dict[str, Any]:
    """{sm_clock_mhz, run_id} of the newest run record under ``<results_dir>/runs`` whose readiness probe read an
    SM clock; both None when no run has probed here yet (the probe runs before each run, after the preflight)."""
    paths = glob.glob(os.path.join(glob.escape(results_dir), "runs", "*", "record.json")) if results_dir else []
    for path in sorted(paths, key=_mtime, reverse=True):
        ready = (read_json_object(path) or {}).get("readiness")
        if isinstance(ready, Mapping) and isinstance(ready.get("sm_clock_mhz"), (int, float)):
            return {"sm_clock_mhz": float(ready["sm_clock_mhz"]), "run_id": os.path.basename(os.path.dirname(path))}
    return {"sm_clock_mhz": None, "run_id": None}


def readings(given: Optional[List[Mapping[str, Any]]], run: Runner, which: Which, sysfs: str = "/sys",
             image: str = "", docker: str = "docker", workload_env: Optional[Mapping[str, Any]] = None,
             results_root: str = "", results_dir: str = "") -> Dict[str, Any]:
    """{rails, ports, given, env, facts, probe} of this node: the ``given`` rails (sparkfleet_fabric) checked against
    the node, else the ACTIVE ones of every port sysfs shows (``ports``). A missing tool leaves its reading None.
    ``workload_env``: the engine's environment (sparkfleet_workload_env), recorded as a digest per variable;
    ``results_root``: where the gpu_state role's records lie (``clock_cap``; empty: not read); ``results_dir``:
    this host's campaign results, whose newest probed run gives ``probe``."""
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
    facts["engine_env"] = {str(k): value_digest(v) for k, v in sorted((workload_env or {}).items())}
    if results_root:
        facts["clock_cap"] = clock_cap(gpu_control.applied_controls(results_root))
    return {"rails": rails, "ports": ports, "given": bool(given), "env": env, "facts": facts,
            "probe": latest_probe(results_dir)}
