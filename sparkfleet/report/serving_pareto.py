"""The Pareto front of serving in the report (issue 37): the "Serving: the Pareto front" section after "Serving",
its figure (serving_plots.pareto_front) and pareto.csv beside the other serving CSVs. The front and its rule are
sparkfleet.pareto's; here it is said in words, each sentence of the campaign shown: a panel of one configuration has
nothing to compare, a panel where no point has an interval can call nothing dominated, and a configuration is
named dominated only where sparkfleet.pareto says so.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from sparkfleet import pareto, stats
from sparkfleet.report.document import Bullets, Figure, Paragraph, Section, table

FIGURE = "serving_pareto"
TITLES = {FIGURE: "Serving: per-user against aggregate output throughput, the Pareto front"}
CSV = "pareto.csv"
#: Panels worded one by one at most (the rest are in pareto.csv).
MAX_PANELS = 40


def panel_words(key: tuple) -> str:
    model, depth, pp, tg, aggregate, per_user = key
    return f"{model}, depth {depth}, pp {pp}, tg {tg} (per user {per_user} against aggregate {aggregate})"


def _has_interval(group: pd.DataFrame) -> pd.Series:
    bounds = group[["aggregate_low", "aggregate_high", "per_user_low", "per_user_high"]].astype(float)
    return bounds.apply(lambda row: all(math.isfinite(v) for v in row), axis=1)


def _at(summary: pd.DataFrame, column: str) -> str:
    return "; ".join(f"{r.configuration} at concurrency {getattr(r, column)}" for r in summary.itertuples()
                     if getattr(r, column))


def panel_sentence(key: tuple, group: pd.DataFrame, summary: pd.DataFrame) -> str:
    """What one panel's front says, true of it: one configuration, no interval, or the front, the dominated
    configurations (by which) and the points not separated."""
    head = panel_words(key)
    configurations = sorted(set(group["configuration"]))
    if len(configurations) == 1:
        return (f"{head}: one configuration ({configurations[0]}, {len(group)} concurrency level(s)): nothing to "
                "compare it with, no configuration is dominated.")
    said = [f"{len(configurations)} configurations, {len(group)} points"]
    with_interval = _has_interval(group)
    if not with_interval.any():
        said.append(f"no point has an interval on both axes (fewer than {stats.MIN_N_INTERVAL} iterations): none "
                    "can be called dominated")
    elif with_interval.sum() < len(group):
        said.append(f"{int((~with_interval).sum())} point(s) without an interval on both axes can neither dominate "
                    "nor be dominated")
    front = _at(summary, "front_at")
    said += [f"on the front: {front}"] if front else []
    dominated = summary[summary["dominated_at"] != ""]
    if dominated.empty:
        said.append("no configuration is dominated at any concurrency")
    else:
        said.append("dominated: " + "; ".join(
            f"{r.configuration} at concurrency {r.dominated_at}"
            + (" (every level it ran)" if r.dominated_everywhere else "") + f" by {r.dominated_by}"
            for r in dominated.itertuples()))
    apart = _at(summary, "not_separated_at")
    if apart:
        said.append(f"behind the front but not separated: {apart}")
    return f"{head}: " + "; ".join(said) + "."


def _summary_table(summary: pd.DataFrame) -> Any:
    frame = pd.DataFrame({
        "panel": [panel_words(tuple(r)) for r in summary[list(pareto.PANEL)].itertuples(index=False, name=None)],
        "configuration": summary["configuration"], "points": summary["points"].astype(str),
        "on the front at concurrency": summary["front_at"].replace("", "–"),
        "dominated at concurrency": summary["dominated_at"].replace("", "–"),
        "dominated by": summary["dominated_by"].replace("", "–"),
        "not separated at concurrency": summary["not_separated_at"].replace("", "–"),
    })
    return table(frame, "Each configuration on the front, dominated (by which) or not separated, per panel",
                 CSV, len(summary))


def section(marked: pd.DataFrame, twins: list[str], figures: dict[str, Figure]) -> Section:
    """The section: what is compared and the rule, a sentence per panel, the figure, the table."""
    if marked.empty:
        return Section("Serving: the Pareto front", [Paragraph(
            "No measured point has both an aggregate and a per-user output throughput of one client "
            f"({', '.join(f'{a} and {u}' for a, u in pareto.OUTPUT_PAIRS)}): there is no front to draw.")])
    text = ("Per-user against aggregate output throughput: one curve per configuration (engine / environment / "
            "workload) through its concurrencies, per panel (model, depth, pp, tg and the client's pair of rates: "
            "one client's figures are never set against another's). Each coordinate over the iterations is, as "
            f"the serving tables' intervals are, the median with its bootstrap 95% interval from "
            f"{stats.MIN_N_BOOTSTRAP} iterations on, else the mean with its t-interval from {stats.MIN_N_INTERVAL} "
            "on, no interval below. A point is dominated only when a point of another configuration, at any "
            "concurrency, is apart from it on both axes: that point's lower bounds at or above its upper bounds on "
            "both, above on one. A point behind the front on the estimates that no "
            "other configuration is so apart from is \"not separated\", never dominated; on the front: no point "
            "of its panel is as high on both estimates and higher on one. Every point, its bounds and status are "
            f"in {CSV}.")
    if twins:
        text += f" A/A twin environment(s) left out, they repeat their original: {', '.join(sorted(twins))}."
    summary = pareto.by_configuration(marked)
    panels = list(marked.groupby(list(pareto.PANEL), sort=True))
    lines = [panel_sentence(key, group, summary.merge(pd.DataFrame([key], columns=list(pareto.PANEL))))
             for key, group in panels[:MAX_PANELS]]
    if len(panels) > MAX_PANELS:
        lines.append(f"{len(panels) - MAX_PANELS} more panel(s) in {CSV}.")
    blocks: list = [Paragraph(text), Bullets(lines, "pareto")]
    blocks += [figures[FIGURE]] if FIGURE in figures else []
    blocks.append(_summary_table(summary))
    return Section("Serving: the Pareto front", blocks)


__all__ = ["CSV", "FIGURE", "TITLES", "panel_sentence", "section"]
