"""What the serving runs served (issue 35): per engine, environment and model, the engine's version the runs
recorded, the weights' card (a GGUF's header, size, tensor bytes and first-MiB hash; a directory's config and
weights) and how many runs confirmed them, as the serving section's "What was served" lines.

Records written before these were recorded load as they are and say so: the version "not recorded", the weights
"no card in the records", provenance "unconfirmed" with the record's own reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import RECORD_NAME
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.serving import EXTERNAL
from sparkfleet.load import usable_record
from sparkfleet.report.wording import num

#: Records read per group for the weights' card (the first that has one is shown).
RECORDS_PER_GROUP = 3
_KEYS = ["engine", "environment", "model"]


def _card(root: Path | None, record_dirs: list[str]) -> dict[str, Any] | None:
    for record_dir in record_dirs[:RECORDS_PER_GROUP] if root is not None else []:
        data = usable_record(Path(root) / record_dir / RECORD_NAME) or {}
        provenance = data.get("provenance")
        card = provenance.get("expected") if isinstance(provenance, dict) else None
        if isinstance(card, dict):
            return card
    return None


def card_words(card: dict[str, Any] | None) -> str:
    """"GGUF llama F16, 1.08 B parameters, 2.16 GB of tensors in 2.16 GB, first MiB sha256 b416417d5e70..." or a
    directory's "LlamaForCausalLM bfloat16, ... (config.json sha256 ...)"; "no card in the records" for none."""
    if not card:
        return "no card in the records (written before the weights were fingerprinted, or unreadable)"
    kind = "GGUF" if card.get("format") == "gguf" else "directory"
    what = " ".join(str(v) for v in (card.get("architecture"), card.get("file_type") or card.get("dtype"),
                                     card.get("quantization") if card.get("format") != "gguf" else None) if v)
    parts = [f"{kind} {what}".strip()]
    if isinstance(card.get("param_count"), (int, float)) and card["param_count"]:
        parts.append(f"{card['param_count'] / 1e9:.3g} B parameters")
    if isinstance(card.get("tensor_bytes"), (int, float)) and card["tensor_bytes"]:
        parts.append(f"{card['tensor_bytes'] / 1e9:.3g} GB of tensors")
    if card.get("head_sha256"):
        parts.append(f"first MiB sha256 {str(card['head_sha256'])[:12]}")
    elif card.get("config_sha256"):
        parts.append(f"config.json sha256 {str(card['config_sha256'])[:12]}")
    if card.get("path"):
        parts.append(str(card["path"]))
    return ", ".join(parts)


def _versions(values: pd.Series) -> str:
    seen = sorted({str(v) for v in values.dropna()})
    missing = int(values.isna().sum())
    if not seen:
        return "not recorded"
    return " / ".join(seen) + (f" ({missing} run(s) without one)" if missing else "")


def _provenance(group: pd.DataFrame) -> str:
    status = (group["provenance_status"] if "provenance_status" in group
              else pd.Series(pd.NA, index=group.index, dtype="object")).astype("string")
    n = len(group)
    counts = status.fillna("unconfirmed").value_counts()
    text = ", ".join(f"{s} in {int(c)} of {n} run(s)" for s, c in counts.items())
    if not status.eq("confirmed").fillna(False).all():
        reasons = group["provenance_reason"] if "provenance_reason" in group else pd.Series(dtype="object")
        first = next((str(r) for r in reasons if isinstance(r, str) and r), None)
        text += f" ({first or 'the records have no provenance check'})"
    return text


def served_lines(root: Path | None, runs: pd.DataFrame, run_ids: set[str]) -> list[str]:
    """One line per engine / environment / model of the serving runs ``run_ids``: the engine's version, the
    weights served, provenance."""
    if runs.empty or not run_ids:
        return []
    mine = runs[runs["run_id"].astype(str).isin(run_ids)]
    lines = []
    for (engine, environment, model), group in mine.groupby(_KEYS, sort=True, dropna=False):
        if engine == EXTERNAL:  # issue 37: an endpoint's server; nothing of it was read
            lines.append(f"{engine} / {environment} / {model}: {UNMANAGED_WORDS}")
            continue
        versions = group["engine_version"] if "engine_version" in group else pd.Series(None, index=group.index)
        dirs = [str(d) for d in group.get("record_dir", pd.Series(dtype="object")).dropna()]
        lines.append(f"{engine} / {environment} / {model}: engine version {_versions(versions)}; weights "
                     f"{card_words(_card(root, dirs))}; provenance {_provenance(group)}")
    return lines


#: What the report says of the runs of an unmanaged server (engine external, the workload's endpoint).
UNMANAGED_WORDS = ("unmanaged server (the workload's endpoint): sparkfleet did not start, check or stop it; no engine "
                   "version, weights card, KV figure or provenance check of it; the runs' readiness and attestation "
                   "are of the host that ran the client, the server's own only when the endpoint is on that host")


def served_intro(n: int) -> str:
    return (f"What was served ({num(n)} engine / environment / model group(s)): the engine's version as its own "
            "version command gave it in the run's environment, the weights as the host read them when the server "
            "started (a GGUF's header, size, tensor bytes and the SHA-256 of its first MiB; a directory's "
            "config.json and weights), and whether the engine showed it loaded those weights (confirmed), showed "
            "nothing that identifies them (unconfirmed) or other weights (mismatch: the run is invalid); an "
            "unmanaged server's line says so instead (none of these was read).")
