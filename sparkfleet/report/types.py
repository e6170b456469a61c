"""The report's answers as plain values: warnings (`Finding`), verdicts (`Verdict`, `VerdictLine`) and the
memory study's tables (`MemoryStudy`). Built by findings.py, verdicts.py and memory.py; read by every renderer."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd


def plain(value: Any) -> Any:
    """JSON-safe scalars: NaN/NA -> null, numpy -> Python, timestamps -> ISO text."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) or math.isinf(value) else float(value)
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value


@dataclass(frozen=True)
class Finding:
    """One warning line; ``details`` holds the single facts it groups (one per metric or run), which the
    reports show collapsed."""

    kind: str
    message: str
    details: tuple[str, ...] = ()
    subject: str = ""  # the cell or host a grouped finding is about


@dataclass(frozen=True)
class Verdict:
    """One metric's answer to one question: side ``b`` against the reference ``a``."""

    question: str  # environment | hosts | regression
    subject: str  # what the line is about: "deepseek / study", a host, a cell
    metric: str
    a: str  # the reference: native environment, "baseline", "fleet median"
    b: str  # what is compared with it: the other environment, "current", a host
    outcome: str  # different | same | undetermined
    reason: str  # sparkfleet.compare.classify's reason code (hosts too: each host against the other hosts)
    text: str  # this metric's clause, in words
    n_a: int | None = None
    n_b: int | None = None
    mean_a: float | None = None
    mean_b: float | None = None
    diff: float | None = None  # b - a, in the metric's unit
    change_pct: float | None = None  # (b - a) / |a| x 100
    ci_low_pct: float | None = None  # the interval of change_pct (None below MIN_N_INTERVAL runs)
    ci_high_pct: float | None = None
    p_value: float | None = None
    required_n: int | None = None  # runs per side that would settle an undetermined answer
    cv_pct: float | None = None  # the pooled run-to-run CV of the two sides, which required_n is computed from
    better: bool | None = None  # b better than a by the metric's direction (None: no difference or not judged)
    note: str = ""  # e.g. an interval bound outside the metric's physical range
    noise_floor_pct: float | None = None  # the metric's A/A noise floor (report/memory.py), where measured
    under_noise_floor: bool | None = None  # |change_pct| below it: the difference means nothing
    p_family: float | None = None  # p adjusted over the verdict kind's family (compare.hold_to_family: Holm)
    family_size: int | None = None  # the comparisons in that family

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class VerdictLine:
    """One line of the verdict block: one question about one subject, in one sentence."""

    question: str
    subject: str
    outcome: str  # different | same | undetermined: the line's strongest answer
    label: str  # the badge: different, same, undetermined, regression, improved, host out, hosts agree
    text: str  # the full sentence with the numbers (effect, interval, runs, iterations needed)
    verdicts: tuple[Verdict, ...] = field(default_factory=tuple)
    headline: str = ""  # the answer in a few plain words, shown first ("" where the text is short already)
    caveats: tuple[str, ...] = ()  # e.g. the fingerprints' "not like for like: ..." (also in text)

    def as_dict(self) -> dict[str, Any]:
        return {"question": self.question, "subject": self.subject, "outcome": self.outcome,
                "label": self.label, "headline": self.headline, "text": self.text,
                "metrics": [v.as_dict() for v in self.verdicts], "caveats": list(self.caveats)}


@dataclass
class MemoryStudy:
    """Everything the memory sections show (empty frames where the campaign cannot answer)."""

    parts: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per run
    decomposition: pd.DataFrame = field(default_factory=pd.DataFrame)  # per (host, model, workload, env)
    gaps: pd.DataFrame = field(default_factory=pd.DataFrame)  # each environment's KV gap against its reference
    effects: pd.DataFrame = field(default_factory=pd.DataFrame)  # per (model, factor, metric)
    aa_pairs: pd.DataFrame = field(default_factory=pd.DataFrame)  # per A/A pair, cell and metric
    noise: pd.DataFrame = field(default_factory=pd.DataFrame)  # per metric: cv, floor, mde, required n

    def floors(self) -> dict[str, float]:
        """Noise floor (relative) per metric."""
        if self.noise.empty:
            return {}
        return {str(m): float(f) for m, f in zip(self.noise["metric"], self.noise["floor"], strict=True)
                if not math.isnan(f)}
