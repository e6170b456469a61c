"""The one result shape every parser returns, and the small value helpers they share.

Parsers never raise on bad input: whatever they could not find goes to ``missing``, whatever looked
wrong goes to ``warnings``. Metric names and units are those of ``sparkfleet_host.contract.record.METRICS``.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..contract.record import METRICS, SAMPLES

# Source labels, kept here so reports and tests use one spelling.
SRC_REPORT_TEXT = "trtllm-bench report text"
SRC_REPORT_JSON = "report_json"


@dataclass
class ParseResult:
    """What one parser (or the merge of several) found in a log or report."""

    kind: str = "unknown"
    metrics: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    backend: str | None = None
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Figures without a record metric name (weights memory, request counts, ...), for reports.
    extra: dict[str, Any] = field(default_factory=dict)
    #: Where the workload ran (``[sparkfleet-probe]`` lines), for native-vs-container checks.
    probe: dict[str, str] = field(default_factory=dict)
    #: Raw per-iteration samples with the record's names (``sparkfleet_host.contract.record.SAMPLES``), in order.
    samples: dict[str, list[float]] = field(default_factory=dict)
    #: What the output shows of the model the engine loaded (provenance, sparkfleet_host.engines.modelcard.judge):
    #: model_path, weight_files, architecture, num_hidden_layers, hidden_size, dtype, param_count,
    #: checkpoint_bytes, weights_bytes (one rank's), quantization; only what the output really shows.
    loaded: dict[str, Any] = field(default_factory=dict)

    def set_metric(self, name: str, value: float | None, source: str, overwrite: bool = False) -> bool:
        """Record one figure; refuses names outside the contract and non-finite values."""
        if name not in METRICS:
            self.warnings.append(f"internal: '{name}' is not a record metric")
            return False
        if value is None:
            return False
        if not math.isfinite(value):
            self.warnings.append(f"{name}: non-finite value {value!r} from {source} ignored")
            return False
        if name in self.metrics and not overwrite:
            return False
        self.metrics[name] = float(value)
        self.sources[name] = source
        return True

    def set_samples(self, name: str, values: list[float], source: str) -> bool:
        """Keep one series of per-iteration samples; refuses names outside the contract, drops (and says so)
        values that are not finite numbers."""
        if name not in SAMPLES:
            self.warnings.append(f"internal: '{name}' is not a record sample series")
            return False
        if not values:
            return False
        kept = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v)]
        if len(kept) != len(values):
            self.warnings.append(f"{name}: {len(values) - len(kept)} sample(s) from {source} were not finite numbers")
        self.samples[name] = kept
        return True

    def note_missing(self, expected: list[str] | tuple[str, ...]) -> None:
        """Add every expected metric (or field) that was not found to ``missing``, once."""
        for name in expected:
            found = name in self.metrics if name in METRICS else getattr(self, name, None)
            if not found and name not in self.missing:
                self.missing.append(name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")


def to_number(text: str | None) -> float | None:
    """A strict float: '1.0526E+15' and '90.00%' (as 90.0) yes; 'None', 'nan', '1.2.3', '' no."""
    if text is None:
        return None
    token = text.strip().rstrip("%").strip()
    if not _NUMBER.match(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


#: Binary byte units to GiB. TensorRT-LLM divides by 2**30 / 2**20 but labels some figures "GB"/"MB"
#: (the C++ runtime's MemUsageChange lines, the report's MACHINE DETAILS), so those count as binary too.
_TO_GIB = {
    "gib": 1.0,
    "gb": 1.0,
    "mib": 1.0 / 1024,
    "mb": 1.0 / 1024,
    "kib": 1.0 / 1024**2,
    "kb": 1.0 / 1024**2,
}


def to_gib(value: float | None, unit: str | None) -> float | None:
    if value is None or unit is None:
        return None
    factor = _TO_GIB.get(unit.strip().lower())
    return None if factor is None else value * factor


#: Time units to milliseconds.
_TO_MS = {
    "ms": 1.0,
    "s": 1000.0,
    "sec": 1000.0,
    "secs": 1000.0,
    "seconds": 1000.0,
    "second": 1000.0,
    "us": 0.001,
    "µs": 0.001,
    "ns": 1e-6,
}


def to_ms(value: float | None, unit: str | None) -> float | None:
    """Milliseconds; an absent unit means the value is already in ms (the report's default)."""
    if value is None:
        return None
    if not unit:
        return value
    factor = _TO_MS.get(unit.strip().lower())
    return None if factor is None else value * factor


def compact(value: float) -> int | float:
    """Counts read as floats ('TP Size: 1', JSON 4.0) come back as ints; other figures stay floats."""
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def as_text(data: str | bytes) -> str:
    """Logs may hold stray bytes (progress bars, cut multibyte characters): decode without failing."""
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data if isinstance(data, str) else str(data)


def last_block(text: str, begin: str, end: str, label: str, result: ParseResult) -> list[str]:
    """Lines of the last ``begin``…``end`` block of a workload's output (a log may hold a retried run)."""
    blocks = text.split(begin)
    if len(blocks) > 2:
        result.warnings.append(f"{len(blocks) - 1} {label} blocks in one output; using the last one")
    body = blocks[-1]
    if end not in body:
        result.warnings.append(f"{label} output has no end marker: truncated?")
    return body.split(end)[0].splitlines()
