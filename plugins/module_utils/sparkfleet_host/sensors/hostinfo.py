# Copyright: sparkfleet contributors
# Apache-2.0
"""What a host's records say about its CPU and its container software, parsed from the tools' own output.

* The CPU model: ``lscpu``'s ``Model name`` (every distinct one: a GB10 has two core types, Cortex-X925 and
  Cortex-A725), else its ``BIOS Model name`` (SMBIOS, the DMI processor record), else ``/proc/cpuinfo``'s
  ``model name``; never a count. (Ansible's ``processor`` fact is a flat list that on aarch64 holds only the
  processor numbers, so its third item is "2".)
* Docker: ``docker version --format '{{json .}}'`` (the engine the containers ran on, the server side: its
  version, API version, containerd and runc), None where Docker or its daemon is absent.
* The NVIDIA container toolkit: ``nvidia-ctk --version`` and ``nvidia-container-cli --version``, each None
  where absent.

Stdlib only; Python 3.8 syntax (runs on the hosts).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional

_LSCPU_LINE = re.compile(r"^\s*(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)\s*$")
_UNKNOWN = ("", "-", "unknown", "not specified", "to be filled by o.e.m.", "none")
_CTK = re.compile(r"NVIDIA Container Toolkit CLI version\s+v?(\S+)")
_CLI = re.compile(r"^cli-version:\s*(\S+)", re.M)
_LIB = re.compile(r"^lib-version:\s*(\S+)", re.M)


def _known(value: Optional[str]) -> bool:
    """A real name: not empty, not a placeholder, not a bare count or index."""
    return value is not None and value.strip().lower() not in _UNKNOWN and not value.strip().isdigit()


def _lscpu_values(text: str, key: str) -> List[str]:
    found = []  # type: List[str]
    for line in (text or "").splitlines():
        m = _LSCPU_LINE.match(line)
        if m and m.group("key") == key and _known(m.group("value")) and m.group("value") not in found:
            found.append(m.group("value"))
    return found


def cpu_model(lscpu: Optional[str] = None, cpuinfo: Optional[str] = None) -> Dict[str, Optional[str]]:
    """``{"cpu_model": name or None, "cpu_model_source": "lscpu" | "lscpu-bios" | "cpuinfo" | None}``.
    Several core types are joined with " + " in lscpu's order."""
    for key, source in (("Model name", "lscpu"), ("BIOS Model name", "lscpu-bios")):
        names = _lscpu_values(lscpu or "", key)
        if names:
            return {"cpu_model": " + ".join(names), "cpu_model_source": source}
    models = []  # type: List[str]
    for line in (cpuinfo or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "model name" and _known(value) and value.strip() not in models:
            models.append(value.strip())
    if models:
        return {"cpu_model": " + ".join(models), "cpu_model_source": "cpuinfo"}
    return {"cpu_model": None, "cpu_model_source": None}


def docker_version(text: Optional[str]) -> Optional[Dict[str, Any]]:
    """The engine's (server's) versions from ``docker version --format '{{json .}}'``; None without a server
    (Docker not installed, or its daemon not answering: the JSON then has ``"Server": null``)."""
    try:
        data = json.loads(text or "")
    except ValueError:
        return None
    server = data.get("Server") if isinstance(data, dict) else None
    if not isinstance(server, dict) or not server.get("Version"):
        return None
    components = {}  # type: Dict[str, Optional[str]]
    for item in server.get("Components") or []:
        if isinstance(item, dict) and item.get("Name"):
            components[str(item["Name"]).lower()] = item.get("Version")
    platform = server.get("Platform") if isinstance(server.get("Platform"), dict) else {}
    client = data.get("Client") if isinstance(data.get("Client"), dict) else {}
    return {
        "engine": server.get("Version"),
        "api_version": server.get("ApiVersion"),
        "platform": platform.get("Name") or None,
        "os_arch": "{}/{}".format(server.get("Os"), server.get("Arch")) if server.get("Os") else None,
        "containerd": components.get("containerd"),
        "runc": components.get("runc"),
        "client": client.get("Version"),
    }


def nvidia_ctk_version(text: Optional[str]) -> Optional[str]:
    """The version from ``nvidia-ctk --version``, or None."""
    m = _CTK.search(text or "")
    return m.group(1) if m else None


def nvidia_container_cli_version(text: Optional[str]) -> Optional[Dict[str, str]]:
    """``{"cli": ..., "lib": ...}`` from ``nvidia-container-cli --version`` (libnvidia-container), or None."""
    cli, lib = _CLI.search(text or ""), _LIB.search(text or "")
    if not cli:
        return None
    out = {"cli": cli.group(1)}
    if lib:
        out["lib"] = lib.group(1)
    return out
