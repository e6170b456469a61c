"""Like for like? The environment fingerprints of a cell's native and container runs, compared.

Each run record may carry a ``fingerprint`` (docs/RECORD.md): the NVIDIA/CUDA libraries the benchmark
process really mapped, its ``LD_LIBRARY_PATH``, Python/torch/TensorRT-LLM versions. Native and container are
meant to differ only in isolation; when their fingerprints differ in anything else (another libcuda, the
image's compat driver on one side only, another library path), the environment verdict of that cell is not
like for like, and its line says so (:func:`caveats`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import RECORD_NAME
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors import fingerprint as fp_mod
from sparkfleet.load import usable_record
from sparkfleet.stats import measured_runs

Cell = tuple[str, str, str]  # (model, workload, environment)
#: Records read per cell for its fingerprint (the richest of them is kept): runs of one cell run one image.
RECORDS_PER_CELL = 3


def _record_fingerprint(root: Path, record_dir: str) -> dict[str, Any] | None:
    value = (usable_record(root / record_dir / RECORD_NAME) or {}).get("fingerprint")
    return value if isinstance(value, dict) and value.get("libraries") is not None else None


def cell_fingerprints(runs: pd.DataFrame, root: Path | None) -> dict[Cell, dict[str, Any]]:
    """(model, workload, environment) -> the richest fingerprint among the first ok, measured runs of the cell."""
    if root is None or runs.empty or "record_dir" not in runs:
        return {}
    out: dict[Cell, list[dict[str, Any]]] = {}
    for row in measured_runs(runs)[["model", "workload", "environment", "record_dir"]].itertuples(index=False):
        cell = (str(row.model), str(row.workload), str(row.environment))
        if len(out.get(cell, ())) >= RECORDS_PER_CELL:
            continue  # the loader has read every record once already: a few per cell tell what it loaded
        fp = _record_fingerprint(Path(root), str(row.record_dir))
        if fp is not None:
            out.setdefault(cell, []).append(fp)
    return {cell: fp_mod.richest(prints) for cell, prints in out.items()}


def caveats(prints: dict[Cell, dict[str, Any]], model: str, workload: str, native: str,
            environment: str) -> list[str]:
    """What differs between the two environments' fingerprints besides isolation ([] when like for like or
    when either side has none)."""
    a, b = prints.get((model, workload, native)), prints.get((model, workload, environment))
    if not a or not b:
        return []
    # Only native against a container is meant to differ by isolation alone; bare runs the host's own userland.
    kinds = (a.get("environment_kind") or "native", b.get("environment_kind") or "container")
    if kinds != ("native", "container"):
        return []
    return fp_mod.differences(a, b, native, environment)


def caveat_text(differences: list[str]) -> str:
    """"not like for like: native loaded libcuda 580.95.05 from the host, container libcuda 590.44.01 compat"."""
    return "not like for like: " + "; ".join(differences) if differences else ""
