"""The numbers first (issue 33): per cell its main throughput metric, per serving point its generation throughput
(aggregate and per user) and time to first token, each with its 95% interval.

The terminal summary of `sparkfleet report` (and so the end of `sparkfleet run`) always shows them; the report
(index.html, summary.md) leads with them when the verdict block has nothing to compare, where the verdicts would
otherwise be a non-answer. Built from the report's own cells (stats.cell_statistics, serving.cell_statistics):
nothing here computes a statistic.
"""

from __future__ import annotations

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import MEMORY_METRICS
from sparkfleet import serving
from sparkfleet.report.compose import Report
from sparkfleet.report.document import N_TOO_SMALL, Paragraph, Section, fmt, table
from sparkfleet.report.verdicts import THROUGHPUT_METRICS
from sparkfleet.report.wording import num
from sparkfleet.stats import CELL_KEYS, MIN_N_BOOTSTRAP, MIN_N_INTERVAL, range_violation

#: A serving point's headline figures: (metric, column words), generation throughput then latency.
POINT_METRICS = (("tg_tok_s", "aggregate tok/s"), ("tg_req_tok_s", "per-user tok/s"), ("e2e_ttft_ms", "TTFT ms"))
#: Rows of each table on the terminal (the report's tables and the CSVs hold every row).
MAX_TERMINAL_ROWS = 40


def nothing_to_compare(analysis: Report) -> bool:
    """The verdict block is only its "nothing to compare" line."""
    return bool(analysis.verdicts) and all(line.question == "none" for line in analysis.verdicts)


def main_metric(metrics: set[str]) -> str | None:
    """A cell's main figure: its first throughput metric (as the verdicts choose it), else its first result
    metric that is not a memory or configuration figure; None for a cell with neither (a serving run's cell,
    whose figures are its points')."""
    first = next((m for m in THROUGHPUT_METRICS if m in metrics), None)
    return first or next((m for m in sorted(metrics) if m not in MEMORY_METRICS), None)


def with_ci(value: float, low: float, high: float, n: float, minimum: int, metric: str) -> str:
    """ "60.13 [59.11, 60.91]": a figure with its 95% interval, "(n too small)" below ``minimum`` runs; a bound
    outside the metric's physical range is marked (never clipped here)."""
    text = _num(value)
    if pd.isna(n) or n < minimum:
        return f"{text} ({N_TOO_SMALL})"
    if pd.isna(low) or pd.isna(high):
        return text
    note = range_violation(metric, float(low), float(high))
    return f"{text} [{_num(low)}, {_num(high)}]" + (f" ({note}: outside the physical range)" if note else "")


def _num(value: float) -> str:
    """4 significant digits, thousands and more whole and spaced (wording.num); missing as an en dash."""
    return "–" if pd.isna(value) else num(float(value), 4)


def cell_table(analysis: Report) -> pd.DataFrame:
    """One row per cell with a main metric: n, median with the bootstrap CI of the median, mean with the t CI
    of the mean (each "n too small" below its minimum runs); formatted text."""
    cells = analysis.cells
    if cells.empty:
        return pd.DataFrame()
    keys = list(CELL_KEYS)
    chosen = cells.groupby(keys, sort=True)["metric"].agg(lambda m: main_metric(set(m.astype(str))))
    chosen = chosen.dropna().rename("metric").reset_index()
    if chosen.empty:
        return pd.DataFrame()
    rows = chosen.merge(cells, on=[*keys, "metric"], how="left")
    return pd.DataFrame({
        **{k: rows[k].astype(str) for k in keys},
        "metric": rows["metric"].astype(str),
        "n": rows["n"].map(fmt),
        "median [95% CI]": [with_ci(v, lo, hi, n, MIN_N_BOOTSTRAP, m) for v, lo, hi, n, m in zip(
            rows["median"], rows["median_ci_low"], rows["median_ci_high"], rows["n"], rows["metric"], strict=True)],
        "mean [95% CI]": [with_ci(v, lo, hi, n, MIN_N_INTERVAL, m) for v, lo, hi, n, m in zip(
            rows["mean"], rows["ci_low"], rows["ci_high"], rows["n"], rows["metric"], strict=True)],
    })


def point_table(analysis: Report) -> pd.DataFrame:
    """One row per serving point (engine, environment, model, profile): n, then per POINT_METRICS the median
    and its 95% interval as the Serving section shows them (the median's bootstrap, else the mean's t)."""
    cells = analysis.serving.cells
    if cells.empty:
        return pd.DataFrame()
    keys = list(serving.POINT_KEYS)
    wanted = [(m, words) for m, words in POINT_METRICS if m in set(cells["metric"])]
    if not wanted:
        return pd.DataFrame()
    part = cells[cells["metric"].isin([m for m, _ in wanted])]
    points = serving.in_point_order(part.drop_duplicates(keys)[keys])
    by = part.set_index([*keys, "metric"])
    index = list(points.itertuples(index=False, name=None))
    out: dict[str, list[str] | pd.Series] = {k: points[k].astype(str) for k in serving.shown_keys(points)}
    out["n"] = [fmt(by["n"].reindex([(*p, m) for m, _ in wanted]).max()) for p in index]
    for metric, words in wanted:
        rows = by.reindex([(*p, metric) for p in index])
        out[words] = [with_ci(v, lo, hi, n, MIN_N_INTERVAL, metric) for v, lo, hi, n in zip(
            rows["median"], rows["ci95_low"], rows["ci95_high"], rows["n"], strict=True)]
    return pd.DataFrame(out)


CELL_CAPTION = ("Per cell: its main throughput metric over the measured runs (ok, not warm-ups, not found suspect "
                "by the readiness probe); median with the bootstrap 95% CI of the median, mean with the t 95% CI of "
                "the mean")
POINT_CAPTION = ("Per serving point: generation throughput (aggregate: all concurrent requests; per user: one "
                 "request) and end-to-end time to first token over the iterations, each the median [95% CI] (the "
                 "median's bootstrap interval, else the mean's t-interval)")
#: The terminal's shorter captions.
CELL_LINE = ("per cell, its main throughput metric over the measured runs (95% CI: bootstrap of the median, t of the "
             "mean)")
POINT_LINE = ("per serving point, median [95% CI] over the iterations: generation tok/s (aggregate, per user), "
              "time to first token")


def section(analysis: Report) -> Section | None:
    """The "Numbers" section (the tables above), or None where the campaign has neither."""
    blocks: list = []
    cells, points = cell_table(analysis), point_table(analysis)
    if not cells.empty:
        blocks.append(table(cells, CELL_CAPTION, "cells.csv"))
    if not points.empty:
        blocks.append(table(points, POINT_CAPTION, "serving_cells.csv"))
    if not blocks:
        return None
    return Section("Numbers", [Paragraph("Nothing to compare in this campaign (see the verdicts below): the "
                                         "measured figures first."), *blocks])


def _text_table(frame: pd.DataFrame, limit: int = MAX_TERMINAL_ROWS) -> list[str]:
    shown = frame.head(limit)
    rows = [list(map(str, shown.columns)), *(list(map(str, r)) for r in shown.itertuples(index=False, name=None))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if len(frame) > limit:
        lines.append(f"    ... and {len(frame) - limit} more row(s) (every row in the report)")
    return lines


def terminal_lines(analysis: Report) -> list[str]:
    """A "numbers:" block (a caption line per table, its rows indented further); [] for a campaign with no
    measured figure."""
    cells, points = cell_table(analysis), point_table(analysis)
    lines: list[str] = []
    if not cells.empty:
        lines += [f"  {CELL_LINE}:", *_text_table(cells)]
    if not points.empty:
        lines += [f"  {POINT_LINE}:", *_text_table(points)]
    return ["numbers:", *lines] if lines else []


__all__ = ["cell_table", "nothing_to_compare", "point_table", "section", "terminal_lines"]
