"""The facts each host recorded about itself: ``host.json``, ``host_metadata.json``, ``preflight.json`` and
``nvidia-smi -q`` (nvidia-smi-q.txt), as one host x fact table. The report names, with them, what differs on
a host that is out; ``sparkfleet fleet`` (fleet_state.py) lists every fact that is not the same everywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.textfile import read_json_object
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health.attestation import (
    identity,
    is_unread,
    parse_smi_q_tree,
)
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
    gpus = parse_smi_q_tree(text)["gpus"]
    out: dict[str, str] = {}
    for label, where, key in SMI_FACTS if gpus else ():
        value = (gpus[0] if where is None else gpus[0].get(where) or {}).get(key)
        if label not in out and isinstance(value, str) and value and value != "N/A":
            out[label] = value
    vbios = out.pop("vbios_smi", None)
    if vbios:
        out["vbios"] = vbios
    return out


#: attestation.json identity fields (sparkfleet_host.health.attestation.identity) that name a fact already read
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
        files = {name: read_json_object(directory / name) for name in {f for _, f, _ in FACTS}}
        row = {label: dig(files[name], path) for label, name, path in FACTS}
        try:
            smi = smi_facts((directory / "nvidia-smi-q.txt").read_text(errors="replace"))
        except OSError:
            smi = {}
        for label, value in smi.items():
            if row.get(label) is None:
                row[label] = value
        row.update(attestation_facts(read_json_object(directory / "attestation.json"), row))
        # a fact the host could not read ("N/A", "[Unknown Error]", "ERROR: ...") is missing, never a value
        rows[host] = {label: value for label, value in row.items() if not is_unread(value)}
    return pd.DataFrame.from_dict(rows, orient="index")


#: The kind of fact a label names, for a sentence (first match by substring; "vbios" before "bios_").
FACT_WORDS = (("firmware", "firmware"), ("vbios", "VBIOS"), ("bios_", "firmware"), ("driver", "driver"),
              ("cuda", "CUDA"), ("kernel", "kernel"), ("image_digest", "image"), ("gpu_name", "GPU"),
              ("product_name", "GPU"), ("power_limit", "power limit"), ("clock", "clocks"))


def fact_word(label: str) -> str:
    return next((word for part, word in FACT_WORDS if part in label), label)


def unread_facts(facts: pd.DataFrame) -> dict[str, dict[str, list[str]]]:
    """host -> {kind of fact: [labels]} for each fact some other host recorded and this host did not (absent,
    null or an error marker): unknown there, so not compared and never a difference. Empty below two hosts."""
    out: dict[str, dict[str, list[str]]] = {}
    if len(facts.index) < 2:
        return out
    for label in facts.columns:
        read = facts[label].notna()
        if not read.any():
            continue
        for host in facts.index[~read]:
            out.setdefault(str(host), {}).setdefault(fact_word(str(label)), []).append(str(label))
    return out


def unread_sentences(facts: pd.DataFrame) -> list[str]:
    """One sentence per host and kind of fact it did not record though another host did: "firmware not read on
    spark2 (firmware.UEFI Device Firmware): not compared, not counted as a difference"."""
    out = []
    for host, kinds in sorted(unread_facts(facts).items()):
        if facts.loc[host].isna().all():
            out.append(f"no host fact recorded on {host} (no host.json, host_metadata.json, nvidia-smi-q.txt or "
                       "attestation.json read): its facts are not compared, never counted as differences")
            continue
        for word, labels in kinds.items():
            readers = [str(h) for h in facts.index[facts[labels].notna().any(axis=1)] if str(h) != host]
            named = ", ".join(labels[:4]) + (f" and {len(labels) - 4} more" if len(labels) > 4 else "")
            out.append(f"{word} not read on {host} ({named}; read on {', '.join(readers)}): not compared, not "
                       "counted as a difference")
    return out


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
