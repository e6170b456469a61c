"""The facts each host recorded about itself: ``host.json``, ``host_metadata.json``, ``preflight.json`` and
``nvidia-smi -q`` (nvidia-smi-q.txt), as one host x fact table. The report names, with them, what differs on
a host that is out; ``sparkfleet fleet`` (fleet_state.py) lists every fact that is not the same everywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.attestation import identity
from sparkfleet.load import dig

#: Facts compared verbatim across hosts: (label, file, path inside the JSON).
FACTS: tuple[tuple[str, str, tuple[str | int, ...]], ...] = (
    ("gpu_name", "host_metadata.json", ("gpu_name",)),
    ("gpu_count", "host_metadata.json", ("gpu_count",)),
    ("driver", "host_metadata.json", ("driver_version",)),
    ("cuda", "host_metadata.json", ("cuda_version",)),
    ("vbios", "host_metadata.json", ("gpus", 0, "vbios")),
    ("kernel", "host.json", ("kernel",)),
    ("os", "host.json", ("os",)),
    ("cpu_model", "host.json", ("cpu_model",)),
    ("memory_total_mb", "host.json", ("memory_total_mb",)),
    ("docker_engine", "host.json", ("docker", "engine")),
    ("nvidia_container_toolkit", "host.json", ("nvidia_container_toolkit", "nvidia_ctk")),
    ("pstate", "preflight.json", ("gates", "performance_state", "value")),
)

#: Facts read from ``nvidia-smi -q`` (nvidia-smi-q.txt, first GPU): (label, section, key). A section of
#: None is the GPU's top level; each label takes the first (section, key) found, older drivers' names last.
SMI_FACTS: tuple[tuple[str, str | None, str], ...] = (
    ("power_limit", "GPU Power Readings", "Current Power Limit"),
    ("power_limit", "Power Readings", "Enforced Power Limit"),
    ("power_limit", "Power Readings", "Power Limit"),
    ("default_power_limit", "GPU Power Readings", "Default Power Limit"),
    ("default_power_limit", "Power Readings", "Default Power Limit"),
    ("max_sm_clock", "Max Clocks", "SM"),
    ("applications_clock", "Applications Clocks", "Graphics"),
    ("inforom", "Inforom Version", "Image Version"),
    ("vbios_smi", None, "VBIOS Version"),
    ("persistence_mode", None, "Persistence Mode"),
    ("ecc_mode", "ECC Mode", "Current"),
)


def smi_facts(text: str) -> dict[str, str]:
    """The SMI_FACTS of the first GPU in ``nvidia-smi -q`` text (values as printed, N/A left out)."""
    seen: dict[tuple[str | None, str], str] = {}
    section: str | None = None
    gpus = 0
    for line in text.splitlines():
        if line.startswith("GPU "):
            gpus += 1
            if gpus > 1:
                break
            continue
        stripped = line.strip()
        if not stripped or gpus != 1:
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = (part.strip() for part in stripped.partition(":"))
        if indent <= 4:
            section = None if sep and value else key
            if sep and value:
                seen.setdefault((None, key), value)
        elif sep:
            seen.setdefault((section, key), value)
    out: dict[str, str] = {}
    for label, where, key in SMI_FACTS:
        value = seen.get((where, key))
        if label not in out and value and value != "N/A":
            out[label] = value
    vbios = out.pop("vbios_smi", None)
    if vbios:
        out["vbios"] = vbios
    return out


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


#: attestation.json identity fields (sparkfleet_host.attestation.identity) that name a fact already read
#: elsewhere: filled in only where that fact is missing.
_ATTESTATION_SAME = {"kernel": "kernel", "driver_version": "driver", "cuda_version": "cuda",
                     "gpu0.vbios_version": "vbios", "gpu0.product_name": "gpu_name"}


def attestation_facts(att: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The facts a host's attestation.json adds (issue 24): BIOS, firmware devices, image digest, each GPU's VBIOS;
    {} without the file (a tree without it keeps its facts table as it was)."""
    if not isinstance(att, dict):
        return {}
    out = {}
    for key, value in identity(att).items():
        if value is None:
            continue
        label = _ATTESTATION_SAME.get(key)
        if label is None:
            out[key] = value if not isinstance(value, (dict, list)) else json.dumps(value, sort_keys=True)
        elif row.get(label) is None:
            out[label] = value
    return out


def facts_of(host_dirs: dict[str, Path]) -> pd.DataFrame:
    """host x fact: FACTS from each host directory's JSON files, then what nvidia-smi-q.txt adds (power
    limit, clocks, InfoROM, ...; its VBIOS where host_metadata.json has none)."""
    rows = {}
    for host, directory in host_dirs.items():
        files = {name: read_json(directory / name) for name in {f for _, f, _ in FACTS}}
        row = {label: dig(files[name], path) for label, name, path in FACTS}
        try:
            smi = smi_facts((directory / "nvidia-smi-q.txt").read_text(errors="replace"))
        except OSError:
            smi = {}
        for label, value in smi.items():
            if row.get(label) is None:
                row[label] = value
        row.update(attestation_facts(read_json(directory / "attestation.json"), row))
        rows[host] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def facts_for_runs(root: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """host x fact for the hosts of ``runs`` (loaded from ``root``): each host's directory is the one
    above the ``runs`` directory of its records (``<host>/runs/<run_id>``)."""
    if runs.empty or "record_dir" not in runs:
        return pd.DataFrame()
    dirs: dict[str, Path] = {}
    for host, record_dir in runs[["host", "record_dir"]].drop_duplicates("host").itertuples(index=False):
        parts = Path(str(record_dir)).parts
        if len(parts) >= 2 and parts[-2] == "runs":
            dirs[str(host)] = Path(root, *parts[:-2])
    return facts_of(dirs)
