# Copyright: sparkfleet contributors
# Apache-2.0
"""What a host is, read once per campaign (issue 24): the host_attest module's work (:func:`report`). It runs
``nvidia-smi -q``, ``fwupdmgr get-devices --json`` and (where DMI does not say) ``dmidecode``, reads /proc's meminfo
and buddyinfo, builds attestation.attestation of them, and measures the host memory bandwidth with gpu_probe.py.

A command that fails, or a file that cannot be read, is an entry of ``errors``, never a failure of the task.
Stdlib only, Python 3.8+: shipped to the hosts with the other module_utils.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..sensors.gpu import report_argv
from ..task import Task, TaskFailed
from . import attestation
from .host_state import RC_NO_BACKEND


def _run(task: Task, argv: Sequence[str], timeout: float, errors: List[str]) -> Optional[str]:
    """stdout of a command that exited 0, else None with the reason appended to ``errors``."""
    path = argv[0] if os.sep in argv[0] else task.which(argv[0])
    if not path or not os.path.exists(path):
        errors.append("%s: not found%s" % (argv[0], "" if os.sep in argv[0] else " on PATH"))
        return None
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        # errors="replace": a host tool's text in another encoding (a Latin-1 byte in a DMI string) is read.
        proc = subprocess.run([path] + list(argv[1:]), capture_output=True, text=True, errors="replace",
                              timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        errors.append("%s: no answer within %g s" % (" ".join(argv), timeout))
        return None
    except OSError as exc:
        errors.append("%s: %s" % (argv[0], exc))
        return None
    if proc.returncode != 0:
        errors.append("%s: rc=%d %s" % (" ".join(argv), proc.returncode, (proc.stderr or proc.stdout).strip()[-300:]))
        return None
    return proc.stdout


def _read(path: str, errors: List[str]) -> Optional[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError as exc:
        errors.append("%s: %s" % (path, exc.strerror or exc))
        return None


def measure_bandwidth(p: Mapping[str, Any]) -> Dict[str, Any]:
    """gpu_probe.py bandwidth's JSON, or a null figure with the reason."""
    out: Dict[str, Any] = {"bandwidth_bytes_s": None, "backend": None, "error": None}
    if not p["bandwidth"]:
        out["error"] = "not measured (bandwidth: false)"
        return out
    if not p["probe_script"] or not os.path.isfile(p["probe_script"]):
        out["error"] = "probe script %s not found" % (p["probe_script"] or "gpu_probe.py")
        return out
    argv = [p["python"], p["probe_script"], "bandwidth", "--mib", str(p["bandwidth_mib"])]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=4 * p["timeout_s"],
                              check=False)
    except subprocess.TimeoutExpired:
        out["error"] = "%s: no answer within %g s" % (" ".join(argv), 4 * p["timeout_s"])
        return out
    except OSError as exc:
        out["error"] = "%s: %s" % (p["python"], exc)
        return out
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        out["error"] = "gpu_probe.py bandwidth: rc=%d %s" % (proc.returncode, tail[-1] if tail else "no output")
        return out
    out.update(result)
    if proc.returncode == RC_NO_BACKEND:
        out["bandwidth_bytes_s"] = None
    return out


def attest(task: Task, p: Mapping[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    errors: List[str] = []
    smi_q = _run(task, report_argv(p["nvidia_smi"]), p["timeout_s"], errors)
    fwupd = _run(task, [p["fwupdmgr"], "get-devices", "--json"], p["timeout_s"], errors)
    dmi = attestation.read_dmi_id(p["dmi_root"])
    dmidecode = None
    if any(dmi[name] is None for name in attestation.DMI_FIELDS):
        dmidecode = _run(task, [p["dmidecode"], "-t", "bios", "-t", "system", "-t", "baseboard"], p["timeout_s"],
                         errors)
    meminfo = _read(os.path.join(p["proc_root"], "meminfo"), errors)
    buddyinfo = _read(os.path.join(p["proc_root"], "buddyinfo"), errors)
    try:
        att = attestation.attestation(kernel=os.uname().release, smi_q=smi_q, fwupd_json=fwupd, dmi=dmi,
                                      dmidecode=dmidecode, meminfo=meminfo, buddyinfo=buddyinfo,
                                      page_size=os.sysconf("SC_PAGE_SIZE"), image_digest=p["image_digest"])
    except attestation.AttestationError as exc:  # one bad input: record it and attest without it
        errors.append(str(exc))
        bad = str(exc).split(":", 1)[0]
        att = attestation.attestation(
            kernel=os.uname().release, smi_q=None if bad.startswith("nvidia-smi") else smi_q,
            fwupd_json=None if bad.startswith("fwupdmgr") else fwupd, dmi=dmi, dmidecode=dmidecode, meminfo=meminfo,
            buddyinfo=None if bad.startswith("/proc/buddyinfo") else buddyinfo,
            page_size=os.sysconf("SC_PAGE_SIZE"), image_digest=p["image_digest"])
    return att, errors


def report(params: Mapping[str, Any], task: Task) -> Dict[str, Any]:
    """The host_attest module's result: ``attestation``, ``bandwidth`` and the ``errors`` met on the way."""
    if params["bandwidth_mib"] < 1:
        raise TaskFailed("bandwidth_mib must be at least 1, got %d" % params["bandwidth_mib"])
    if not params["timeout_s"] > 0:
        raise TaskFailed("timeout_s must be greater than 0, got %g" % params["timeout_s"])
    att, errors = attest(task, params)
    return dict(changed=False, attestation=att, bandwidth=measure_bandwidth(params), errors=errors)
