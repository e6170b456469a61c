"""Serving figures as PNG bytes, drawn like plots.py's (embedded in the HTML, written to report/plots/).

Both read the point cells (sparkfleet.serving.cell_statistics): a line through the medians per (engine,
environment), the band its 95% interval (the median's bootstrap interval, else the mean's t-interval; no band
where the cell has too few iterations). A band is never drawn outside its metric's physical range: the cells'
``ci95_low``/``ci95_high`` are held at 0 where the normal interval reaches below it (serving.clip_to_range), and
the title says how many were. Aggregate and per-user throughput are always in separate panels.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import SERVING_METRICS
from sparkfleet.report.plots import COLORS, png_bytes, subplots

#: Panel rows a figure draws at most (the rest are in serving_cells.csv; the title says how many are left out).
MAX_ROWS = 8
#: Throughput panels, left to right: generation then prompt, each aggregate beside per user.
THROUGHPUT_PANELS = ("tg_tok_s", "tg_req_tok_s", "pp_tok_s", "pp_req_tok_s")


def _series_colors(cells: pd.DataFrame) -> dict[tuple[str, str], tuple]:
    series = sorted(set(zip(cells["engine"].astype(str), cells["environment"].astype(str), strict=True)))
    return {s: COLORS[i % len(COLORS)] for i, s in enumerate(series)}


def _line(ax, part: pd.DataFrame, x: str, color: tuple, label: str) -> None:
    part = part.sort_values(x)
    xs = part[x].to_numpy(float)
    ax.plot(xs, part["median"].to_numpy(float), "o-", ms=4, lw=1.4, color=color, label=label)
    low, high = part["ci95_low"].to_numpy(float), part["ci95_high"].to_numpy(float)
    if np.isfinite(low).any():
        ax.fill_between(xs, low, high, color=color, alpha=0.2, lw=0)


def _band_words(cells: pd.DataFrame) -> str:
    kinds = sorted(set(cells["ci95_of"].astype(str)) - {""})
    words = f"band: 95% CI of the {' / '.join(kinds)}" if kinds else "no band: too few iterations for an interval"
    notes = cells["ci95_note"].fillna("").astype(str) if "ci95_note" in cells else pd.Series(dtype=str)
    clipped = int((notes != "").sum())
    if clipped:
        words += f"; {clipped} band(s) clipped at 0: the normal interval does not fit (ci95_note)"
    return words


def _groups(cells: pd.DataFrame, by: list[str]) -> tuple[list[tuple], str]:
    groups = sorted(cells.groupby(by, sort=True).groups)
    left = f" (first {MAX_ROWS} of {len(groups)} rows)" if len(groups) > MAX_ROWS else ""
    return groups[:MAX_ROWS], left


def throughput_vs_concurrency(cells: pd.DataFrame) -> bytes | None:
    """Throughput against concurrency, one row of panels per (model, pp, tg, depth), one line per (engine,
    environment); generation and prompt throughput, each aggregate and per user in its own panel."""
    if cells.empty:
        return None
    panels = [(m, SERVING_METRICS[m].scope) for m in THROUGHPUT_PANELS if m in set(cells["metric"])]
    if not panels:
        return None
    data = cells[cells["metric"].isin([m for m, _ in panels])]
    rows, left = _groups(data, ["model", "pp", "tg", "depth"])
    colors = _series_colors(data)
    fig, axes = subplots(len(rows), len(panels), figsize=(3.4 * len(panels) + 0.6, 2.5 * len(rows) + 0.8),
                         squeeze=False)
    indexed = data.set_index(["model", "pp", "tg", "depth", "metric"]).sort_index()
    for r, (model, pp, tg, depth) in enumerate(rows):
        for c, (metric, scope) in enumerate(panels):
            ax = axes[r, c]
            if (model, pp, tg, depth, metric) in indexed.index:
                # a list of one key: always a frame (a lone key matching one row, as in a campaign of one engine,
                # one environment and one concurrency, gives a Series without the engine column)
                part = indexed.loc[[(model, pp, tg, depth, metric)]]
                for (engine, environment), line in part.groupby(["engine", "environment"], sort=True):
                    _line(ax, line, "concurrency", colors[(str(engine), str(environment))],
                          f"{engine} / {environment}")
            ax.set_xscale("log", base=2)
            levels = sorted(set(data["concurrency"].astype(int)))
            ax.set_xticks(levels, [str(c) for c in levels])  # the measured levels, not powers of two
            ax.minorticks_off()
            ax.set_title(f"{metric} ({scope})\n{model}, depth {depth}, pp {pp}, tg {tg}", fontsize=8)
            ax.set_xlabel("concurrency", fontsize=8)
            ax.set_ylabel(f"{metric} (tok/s, median)", fontsize=8)
            ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="outside lower center", ncols=min(len(labels), 4))
    fig.suptitle(f"Throughput against concurrency per (engine, environment); {_band_words(data)}{left}", fontsize=9)
    return png_bytes(fig)


def ttft_vs_depth(cells: pd.DataFrame) -> bytes | None:
    """End-to-end time to first token against depth, one panel per (model, pp, tg, concurrency), one line per
    (engine, environment)."""
    data = cells[cells["metric"] == "e2e_ttft_ms"] if not cells.empty else cells
    if data.empty:
        return None
    groups, left = _groups(data, ["model", "pp", "tg", "concurrency"])
    colors = _series_colors(data)
    columns = min(len(groups), 4)
    count = -(-len(groups) // columns)
    fig, axes = subplots(count, columns, figsize=(3.6 * columns + 0.4, 2.8 * count + 0.8), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    for ax, (model, pp, tg, concurrency) in zip(axes.flat, groups, strict=False):
        part = data[(data["model"] == model) & (data["pp"] == pp) & (data["tg"] == tg)
                    & (data["concurrency"] == concurrency)]
        for (engine, environment), line in part.groupby(["engine", "environment"], sort=True):
            _line(ax, line, "depth", colors[(str(engine), str(environment))], f"{engine} / {environment}")
        ax.set_title(f"{model}, concurrency {concurrency}, pp {pp}, tg {tg}", fontsize=8)
        ax.set_xlabel("depth (tokens of context)", fontsize=8)
        ax.set_ylabel("e2e_ttft_ms (median)", fontsize=8)
        ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="outside lower center", ncols=min(len(labels), 4))
    fig.suptitle(f"End-to-end time to first token against depth; {_band_words(data)}{left}", fontsize=9)
    return png_bytes(fig)


def _errors(centre: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """matplotlib's asymmetric error lengths (2 x n) from an interval; 0 where there is none."""
    below, above = np.nan_to_num(centre - low), np.nan_to_num(high - centre)
    return np.vstack([np.clip(below, 0, None), np.clip(above, 0, None)])


def pareto_front(table: pd.DataFrame) -> bytes | None:
    """Per-user against aggregate output throughput (sparkfleet.pareto's table), one panel per (model, depth, pp,
    tg, client pair), one line per configuration through its concurrencies (labelled ``c``), each point with its
    95% interval on both axes as error bars; the front's points ringed in black and joined by a dashed line, a
    dominated point crossed."""
    if table.empty:
        return None
    by = ["model", "depth", "pp", "tg", "aggregate_metric", "per_user_metric"]
    groups, left = _groups(table, by)
    names = sorted(set(table["configuration"].astype(str)))
    colors = {name: COLORS[i % len(COLORS)] for i, name in enumerate(names)}
    columns = min(len(groups), 3)
    count = -(-len(groups) // columns)
    fig, axes = subplots(count, columns, figsize=(4.2 * columns + 0.4, 3.4 * count + 1.0), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    indexed = table.set_index(by).sort_index()
    for ax, key in zip(axes.flat, groups, strict=False):
        panel = indexed.loc[[key]].reset_index()
        for name, line in panel.groupby("configuration", sort=True):
            line = line.sort_values("concurrency")
            x, y = line["aggregate"].to_numpy(float), line["per_user"].to_numpy(float)
            xerr = _errors(x, line["aggregate_low"].to_numpy(float), line["aggregate_high"].to_numpy(float))
            yerr = _errors(y, line["per_user_low"].to_numpy(float), line["per_user_high"].to_numpy(float))
            color = colors[str(name)]
            ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o-", ms=4, lw=1.2, elinewidth=0.8, capsize=2,
                        color=color, label=str(name))
            for cx, cy, c in zip(x, y, line["concurrency"], strict=True):
                ax.annotate(f"c{int(c)}", (cx, cy), textcoords="offset points", xytext=(4, 4), fontsize=6)
            dominated = (line["status"] == "dominated").to_numpy()
            if dominated.any():
                ax.plot(x[dominated], y[dominated], "x", ms=9, mew=1.6, color="0.2")
        best = panel[panel["on_front"].astype(bool)].sort_values("aggregate")
        if not best.empty:
            ax.plot(best["aggregate"], best["per_user"], "o", ms=10, mfc="none", mec="black", mew=1.4)
            ax.plot(best["aggregate"], best["per_user"], "--", lw=1, color="black", alpha=0.6)
        model, depth, pp, tg, aggregate, per_user = key
        ax.set_title(f"{model}, depth {depth}, pp {pp}, tg {tg}", fontsize=8)
        ax.set_xlabel(f"{aggregate} (aggregate tok/s)", fontsize=8)
        ax.set_ylabel(f"{per_user} (per-user tok/s)", fontsize=8)
        ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="outside lower center", ncols=min(len(labels), 3))
    kinds = sorted(set(table["ci95_of"].astype(str)) - {""})
    marks = [f"bars: 95% CI of the {' / '.join(kinds)}" if kinds else "no bars: too few iterations for an interval"]
    marks += ["ringed: on the front"] if table["on_front"].astype(bool).any() else []
    marks += ["crossed: dominated"] if (table["status"] == "dominated").any() else []
    fig.suptitle(f"Pareto front: per-user against aggregate output throughput per configuration{left}\n"
                 f"{'; '.join(marks)}", fontsize=9)
    return png_bytes(fig)


__all__ = ["pareto_front", "throughput_vs_concurrency", "ttft_vs_depth"]
