"""A tiny document model (sections of paragraphs, bullet lists, tables, figures) rendered to both Markdown
and HTML, so the two reports never disagree."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from sparkfleet.stats import range_violation

#: Rows shown per table; full tables are in the CSV files beside the report.
MAX_TABLE_ROWS = 400


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]
    css_class: str = ""


@dataclass(frozen=True)
class Table:
    frame: pd.DataFrame  # cells already formatted as strings
    caption: str = ""
    total_rows: int = 0
    full_table: str = ""  # CSV beside the report holding every row


@dataclass(frozen=True)
class Figure:
    name: str  # file stem under report/plots/
    title: str
    png: bytes


@dataclass(frozen=True)
class Verdicts:
    """The verdict block: (label, outcome, headline, text) per line; outcome is different / same /
    undetermined, the headline the answer in plain words ("" for none), the text the numbers behind it."""

    lines: list[tuple[str, str, str, str]]


@dataclass(frozen=True)
class Details:
    """Blocks shown collapsed (HTML <details>, which GitHub also folds in Markdown)."""

    summary: str
    blocks: list = field(default_factory=list)


Block = Paragraph | Bullets | Table | Figure | Verdicts | Details


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


def fmt(value: object, digits: int = 4) -> str:
    """Numbers with ``digits`` significant digits; missing as an en dash."""
    if value is None or value is pd.NA:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            return "–"
        if isinstance(value, float) and math.isinf(value):
            return "∞" if value > 0 else "−∞"
        if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e6:
            return str(int(value))
        return f"{value:.{digits}g}"
    try:
        if pd.isna(value):
            return "–"
    except (TypeError, ValueError):
        pass
    return str(value)


def fmt_p(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.2g}" if value >= 1e-4 else f"{value:.1e}"


def fmt_pct(value: float, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:+.{digits}f}%"


#: What a table shows instead of an interval its cell has too few runs for (stats.MIN_N_INTERVAL).
N_TOO_SMALL = "n too small"


def fmt_ci(low: float, high: float, n: float, minimum: int, metric: str = "", digits: int = 4) -> str:
    """An interval for a table cell under the small-sample rule: "n too small (n=2)" below ``minimum`` runs,
    and a note when a bound leaves the metric's physical range (never clipped)."""
    if n is None or (isinstance(n, float) and math.isnan(n)) or n < minimum:
        return f"{N_TOO_SMALL} (n={fmt(n)})"
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (low, high)):
        return "–"
    text = f"[{fmt(float(low), digits)}, {fmt(float(high), digits)}]"
    note = range_violation(metric, float(low), float(high)) if metric else ""
    return f"{text} ({note}: outside the physical range)" if note else text


def table(frame: pd.DataFrame, caption: str = "", full_table: str = "", total_rows: int | None = None) -> Table:
    """A display table limited to MAX_TABLE_ROWS rows (the renderers say when rows were cut).

    Callers format ``shown(source)`` rather than the whole source and pass ``total_rows=len(source)``:
    formatting 20k rows only to show 400 would dominate a large report.
    """
    visible = frame.head(MAX_TABLE_ROWS)
    return Table(frame=visible.astype(str), caption=caption,
                 total_rows=len(frame) if total_rows is None else total_rows, full_table=full_table)


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows a table will show."""
    return frame.head(MAX_TABLE_ROWS)
