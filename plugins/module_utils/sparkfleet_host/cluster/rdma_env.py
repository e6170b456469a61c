# Copyright: sparkfleet contributors
# Apache-2.0
"""Is RDMA usable inside the environment a multi-node run uses (issue 36)? The probe, its reading, its verdict.

NCCL falls back to TCP sockets without a word when the engine's process cannot open the verbs devices
(``/dev/infiniband/uverbs*`` not passed into the container), sees no ACTIVE port, or may not pin memory (a
``memlock`` limit). So the probe runs *inside* the environment, through the very command the run uses: a POSIX
``sh -c`` script (:func:`probe_argv`) that a container's ``docker run`` (with the environment's flags), the native
chroot or a bare run wraps alike. It prints, between markers:

* ``dev``: the entries of ``/dev/infiniband``;
* ``ibv_devinfo``: rdma-core's ``ibv_devinfo`` output, when the image has it (NGC images do), and its exit code.
  Format: linux-rdma/rdma-core @00b335ca30c62282efda76304630a06397642d0f libibverbs/examples/devinfo.c
  (``hca_id:\\t%s``, ``\\t\\tport:\\t%d``, ``\\t\\t\\tstate:\\t\\t\\t%s (%d)`` with port_state_str's
  ``PORT_ACTIVE``...; ``Failed to open device`` on stderr when the uverbs device cannot be opened);
* ``sysfs``: each ``/sys/class/infiniband/<hca>/ports/<port>/state`` (``"%d: %s"``, ``4: ACTIVE``: Linux
  drivers/infiniband/core/sysfs.c), the reading used when ibv_devinfo gave no port;
* ``memlock``: ``ulimit -l`` (KiB, or ``unlimited``).

:func:`parse` and :func:`verdict` are pure; :func:`check` runs the probe through a wrapper and never raises for a
probe that fails: the run on rank 0 (run/matrix_run.py) and each worker call it before their engine starts.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import probe_container

MARK = "==sparkfleet-rdma:"
SECTIONS = ("dev", "ibv_devinfo", "sysfs", "memlock", "end")

#: The probe: POSIX sh only (dash, busybox and bash alike), every section printed even when a reading fails.
PROBE_SCRIPT = "\n".join((
    "echo '%sdev=='" % MARK,
    "ls -1 /dev/infiniband 2>/dev/null",
    "echo '%sibv_devinfo=='" % MARK,
    "if command -v ibv_devinfo >/dev/null 2>&1; then ibv_devinfo 2>&1; echo \"rc=$?\"; fi",
    "echo '%ssysfs=='" % MARK,
    "for f in /sys/class/infiniband/*/ports/*/state; do",
    "  [ -r \"$f\" ] && printf '%s %s\\n' \"$f\" \"$(cat \"$f\")\"",
    "done",
    "echo '%smemlock=='" % MARK,
    "ulimit -l",
    "echo '%send=='" % MARK,
))

#: How long the probe may take: a container's start included.
TIMEOUT_S = 60.0

#: The fixes the reasons name (a container's docker_flags; the host's limits for a bare or native run).
FIX_DEVICES = ("add --device=/dev/infiniband (or --privileged) to the environment's docker_flags "
               "(sparkfleet_docker_flags or the environment's own)")
FIX_MEMLOCK = ("add --ulimit memlock=-1 to the environment's docker_flags (a bare or native run: the host's "
               "memlock limit, e.g. LimitMEMLOCK=infinity or limits.conf)")

Verdict = Tuple[bool, str]

_SYSFS_LINE = re.compile(r"^/sys/class/infiniband/([^/]+)/ports/(\d+)/state\s+(\d+):\s*(\S+)")
_HCA_ID = re.compile(r"^hca_id:\s*(\S+)")
_PORT = re.compile(r"^\s+port:\s*(\d+)")
_STATE = re.compile(r"^\s+state:\s*(\S+)\s*\((\d+)\)")


def probe_argv() -> List[str]:
    """The probe as an argv, for the environment's wrapper (Launcher.command, a worker's, or none)."""
    return ["sh", "-c", PROBE_SCRIPT]


def _sections(text: str) -> Dict[str, List[str]]:
    """Marker name -> its lines (a section the output lacks is absent)."""
    found: Dict[str, List[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(MARK) and line.endswith("=="):
            current = line[len(MARK):-2]
            found[current] = []
        elif current is not None:
            found[current].append(line)
    return found


def _port(hca: str, port: int, state: str, code: Optional[int]) -> Dict[str, Any]:
    name = state[5:] if state.startswith("PORT_") else state  # ibv_devinfo's PORT_ACTIVE is sysfs's ACTIVE
    return {"hca": hca, "port": port, "state": name, "state_code": code, "active": name == "ACTIVE"}


def parse_ibv_devinfo(lines: Sequence[str]) -> List[Dict[str, Any]]:
    """Each port ibv_devinfo printed: {hca, port, state ("ACTIVE", "DOWN", ...), state_code, active}."""
    ports, hca, port = [], None, None
    for line in lines:
        match = _HCA_ID.match(line)
        if match:
            hca, port = match.group(1), None
            continue
        match = _PORT.match(line)
        if match and hca:
            port = int(match.group(1))
            continue
        match = _STATE.match(line)
        if match and hca and port is not None:
            ports.append(_port(hca, port, match.group(1), int(match.group(2))))
    return ports


def parse_sysfs(lines: Sequence[str]) -> List[Dict[str, Any]]:
    """Each port state file the probe read: ``/sys/class/infiniband/<hca>/ports/<p>/state 4: ACTIVE``."""
    ports = []
    for line in lines:
        match = _SYSFS_LINE.match(line.strip())
        if match:
            ports.append(_port(match.group(1), int(match.group(2)), match.group(4), int(match.group(3))))
    return ports


def _memlock(lines: Sequence[str]) -> Tuple[Optional[str], Optional[int]]:
    """(``unlimited`` or the limit's text, the limit in KiB or None)."""
    text = next((line.strip() for line in lines if line.strip()), None)
    return text, int(text) if text and text.isdigit() else None


def parse(text: str) -> Dict[str, Any]:
    """The probe's output read: {complete (its end marker seen), devices (``/dev/infiniband`` entries), ports,
    ports_from ("ibv_devinfo", "sysfs" or None), ibv_devinfo (its rc and first error line, or None when the
    environment has no ibv_devinfo), memlock (text), memlock_kib (None when unlimited or unread)}."""
    sections = _sections(text)
    devinfo_lines = sections.get("ibv_devinfo") or []
    from_devinfo = parse_ibv_devinfo(devinfo_lines)
    from_sysfs = parse_sysfs(sections.get("sysfs") or [])
    rc = next((int(line[3:]) for line in devinfo_lines if re.match(r"^rc=\d+$", line)), None)
    errors = [line.strip() for line in devinfo_lines if line.strip() and not line.startswith(("\t", "hca_id:", "rc="))]
    memlock, memlock_kib = _memlock(sections.get("memlock") or [])
    return {"complete": "end" in sections,
            "devices": sorted(line.strip() for line in sections.get("dev") or [] if line.strip()),
            "ports": from_devinfo or from_sysfs,
            "ports_from": "ibv_devinfo" if from_devinfo else "sysfs" if from_sysfs else None,
            "ibv_devinfo": {"rc": rc, "error": errors[0] if errors else None} if devinfo_lines else None,
            "memlock": memlock, "memlock_kib": memlock_kib}


def _devices_problem(reading: Mapping[str, Any]) -> Optional[str]:
    devices = list(reading.get("devices") or [])
    if any(d.startswith("uverbs") for d in devices):
        return None
    found = ", ".join(devices) if devices else "no /dev/infiniband at all"
    return "no uverbs device in /dev/infiniband inside the environment (%s): %s" % (found, FIX_DEVICES)


def _ports_problem(reading: Mapping[str, Any], hcas: Sequence[str]) -> Optional[str]:
    ports = list(reading.get("ports") or [])
    active = {p["hca"] for p in ports if p.get("active")}
    seen = ", ".join("%s/%s %s" % (p["hca"], p["port"], p["state"]) for p in ports) or "no RDMA port visible"
    how = " (read by %s)" % reading["ports_from"] if reading.get("ports_from") else ""
    if hcas:
        missing = [h for h in hcas if h not in active]
        if missing:
            return "rail HCA(s) %s with no ACTIVE port inside the environment (%s%s)" % (", ".join(missing), seen,
                                                                                      how)
        return None
    if not active:
        return "no ACTIVE RDMA port inside the environment (%s%s)" % (seen, how)
    return None


def _memlock_problem(reading: Mapping[str, Any]) -> Optional[str]:
    if reading.get("memlock") == "unlimited":
        return None
    kib = reading.get("memlock_kib")
    found = "%d KiB" % kib if kib is not None else "unread (%r)" % reading.get("memlock")
    return "memlock limited to %s inside the environment (RDMA pins its buffers): %s" % (found, FIX_MEMLOCK)


def verdict(reading: Mapping[str, Any], hcas: Optional[Sequence[str]] = None) -> Verdict:
    """(ok, reason): refused, naming each cause and its fix, when ``/dev/infiniband`` has no ``uverbs*`` device,
    when a rail HCA the node uses (``hcas``, from its fabric; none given: any) has no ACTIVE port visible inside,
    or when memlock is not unlimited. A probe whose output ended early is refused as not run."""
    if not reading.get("complete"):
        return False, "the probe did not run to its end in the environment"
    hcas = [str(h) for h in hcas or () if str(h)]
    causes = [p for p in (_devices_problem(reading), _ports_problem(reading, hcas), _memlock_problem(reading)) if p]
    if causes:
        return False, "; ".join(causes)
    active = list(dict.fromkeys(p["hca"] for p in reading["ports"] if p.get("active")))
    return True, "%s in /dev/infiniband; ACTIVE inside: %s (read by %s); memlock unlimited" % (
        ", ".join(d for d in reading["devices"] if d.startswith("uverbs")), ", ".join(active), reading["ports_from"])


def hcas_to_check(fabric_env: Optional[Mapping[str, str]], over_nccl: bool, wanted: bool = True) -> List[str]:
    """The rail HCAs whose RDMA a node of a multi-node run must see in its environment: those its fabric gives NCCL
    (NCCL_IB_HCA, its ``hca:port`` and exact-match ``=`` forms too) when the run goes over NCCL (``over_nccl``:
    serving.over_nccl) and the check is ``wanted`` (sparkfleet_pair_rdma_env_check); [] nothing to check."""
    hcas = str((fabric_env or {}).get("NCCL_IB_HCA") or "").lstrip("=")
    if not hcas or not wanted or not over_nccl:
        return []
    return [h.split(":")[0].strip() for h in hcas.split(",") if h.strip()]


def check(wrap: Callable[[List[str]], List[str]], hcas: Optional[Sequence[str]] = None,
          timeout_s: float = TIMEOUT_S) -> Dict[str, Any]:
    """Run the probe through ``wrap`` (argv -> the environment's command) within ``timeout_s`` and judge it:
    {pass, reason, reading, command}. Never raises for a probe that fails: a wrapper that cannot build the
    command, a command that cannot start, times out or prints no probe output is a refusal naming why. The caller
    removes a container the probe may leave (a container run's wrapper names one)."""
    argv = probe_argv()
    try:
        command = [str(a) for a in wrap(argv)]
    except Exception as exc:  # noqa: BLE001 (any wrapper's refusal, e.g. RunSetupError: named, not raised)
        return {"pass": False, "reason": "the environment's command could not be built: %s" % exc, "reading": None,
                "command": None}
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return {"pass": False, "reason": "the probe did not end within %.0f s" % timeout_s, "reading": None,
                "command": command}
    except OSError as exc:
        return {"pass": False, "reason": "the probe could not start: %s" % exc, "reading": None, "command": command}
    text = done.stdout.decode("utf-8", "replace")
    reading = dict(parse(text), rc=done.returncode)
    ok, reason = verdict(reading, hcas)
    if not reading["complete"]:
        reason = "%s (exit %s: %s)" % (reason, done.returncode, probe_container.tail(text))
    return {"pass": ok, "reason": reason, "reading": reading, "command": command}


#: Why an environment is not judged at the pair preflight (named in its check, which passes).
NOT_JUDGED = "not judged here: %s; each multi-node run checks it at its start"


def in_environments(environments: Sequence[Mapping[str, Any]], hcas: Sequence[str],
                    has_image: Callable[[], bool], wrap_for: Callable[[Mapping[str, Any]], Callable],
                    cleanup: Callable[[], None], timeout_s: float = TIMEOUT_S) -> List[Dict[str, Any]]:
    """The pair preflight's check in each environment ({name, kind, docker_flags}): a container whose image the
    node has is probed through ``wrap_for(environment)`` (its ``docker run`` with its flags), then ``cleanup``; a
    container without its image yet (bench.yml builds or pulls it after this stage) and a native one (its rootfs
    is made by the matrix stage) are not judged. Each: {environment, kind, judged, pass, reason, reading, command}."""
    out = []
    for env in environments:
        entry = {"environment": env.get("name"), "kind": env.get("kind"), "judged": False, "pass": True,
                 "reading": None, "command": None}
        if env.get("kind") != "container":
            entry["reason"] = NOT_JUDGED % "the native rootfs is made by the matrix stage"
        elif not has_image():
            entry["reason"] = NOT_JUDGED % "the image is not on the node yet"
        else:
            try:
                entry.update(check(wrap_for(env), hcas, timeout_s), judged=True)
            finally:
                cleanup()
        out.append(entry)
    return out


def preflight_work(params: Dict[str, Any], _task: Any) -> Dict[str, Any]:
    """The cluster_rdma_env module's work: :func:`in_environments` through ``docker run`` of the node's image with
    each container environment's flags, placed as a run's process is (probe_container.ProbeContainer: the host's
    network, ``--gpus`` dropped on a host without a GPU, named for this process), checking the HCAs the node's
    fabric gives NCCL; the container is removed after."""
    container = probe_container.ProbeContainer(params["docker"], params["image"], "sparkfleet-rdma-probe", "rdma")
    # the environments given are those of a cluster whose workloads go over NCCL (the rdma_environments filter)
    hcas = hcas_to_check(params["fabric_env"], over_nccl=True)
    return {"changed": False, "environments": in_environments(params["environments"], hcas, container.has_image,
                                                               container.wrap, container.remove)}
