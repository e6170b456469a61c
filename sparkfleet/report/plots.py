"""Report figures as PNG bytes (embedded base64 in the HTML, written to report/plots/ for summary.md).

Each figure is bounded (cells, hosts, points, telemetry files) so a 100k-run campaign renders in about the
time a small one does; what a figure leaves out is said in its title.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: reports are written on controllers and CI runners without a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sparkfleet.report.memory import PART_WORDS, PARTS  # noqa: E402
from sparkfleet.report.verdicts import THROUGHPUT_METRICS  # noqa: E402
from sparkfleet.stats import CELL_KEYS, measured_runs  # noqa: E402

MAX_CELLS = 24
MAX_HOSTS = 4
MAX_POINTS = 2000
MAX_TELEMETRY_RUNS = 6
#: How many run directories we probe for telemetry.csv: checking all 100k would cost more than the report.
TELEMETRY_PROBES = 200
PLOT_METRICS = ("output_tok_s", "latency_ms_avg", "latency_ms_p50", "peak_memory_gib", "kv_cache_gib",
                "gflops")
DPI = 90
#: The report's series colours, in order (every figure module takes them from here).
COLORS = plt.get_cmap("tab10").colors


def subplots(*args, **kwargs):
    """plt.subplots with the report's layout (constrained)."""
    return plt.subplots(*args, layout="constrained", **kwargs)


def png_bytes(fig: plt.Figure) -> bytes:
    """The figure as the report's PNG; the figure is closed."""
    buffer = io.BytesIO()
    # Constrained layout (set per figure) instead of bbox_inches="tight", which draws every figure twice;
    # light PNG compression: the page is local, encoding time matters more than bytes.
    fig.savefig(buffer, format="png", dpi=DPI, pil_kwargs={"compress_level": 3})
    plt.close(fig)
    return buffer.getvalue()


def plot_metrics(runs: pd.DataFrame) -> list[str]:
    measured = measured_runs(runs)
    present = [m for m in PLOT_METRICS if m in measured and measured[m].notna().any()]
    if "latency_ms_avg" in present and "latency_ms_p50" in present:
        present.remove("latency_ms_p50")
    return present[:4]


def _cell_order(measured: pd.DataFrame) -> list[tuple]:
    return sorted(measured.groupby(list(CELL_KEYS)).groups)[:MAX_CELLS]


def _environment_colors(environments: list[str]) -> dict[str, tuple]:
    return {env: COLORS[i % len(COLORS)] for i, env in enumerate(sorted(set(environments)))}


def _labels(cells: list[tuple], sep: str = "\n") -> list[str]:
    """Cell labels naming only the keys that differ between the cells shown (one host: no host name)."""
    varying = [i for i in range(len(CELL_KEYS)) if len({c[i] for c in cells}) > 1] or [1]
    return [sep.join(str(c[i]) for i in varying) for c in cells]


def _shown(total: int, shown: int, what: str) -> str:
    return "" if shown >= total else f" (first {shown} of {total} {what})"


def box_plots(runs: pd.DataFrame) -> bytes | None:
    """Distribution of each key metric per cell: the spread the means hide."""
    measured = measured_runs(runs)
    metrics = plot_metrics(runs)
    if not metrics:
        return None
    cells = _cell_order(measured)
    total = measured.groupby(list(CELL_KEYS)).ngroups
    grouped = measured.groupby(list(CELL_KEYS))[metrics]  # only the plotted columns: get_group copies them
    colors = _environment_colors([c[2] for c in cells])
    size = (max(6, 0.9 * len(cells) + 1), 2.4 * len(metrics))
    fig, axes = subplots(len(metrics), 1, figsize=size, squeeze=False, sharex=True)
    for ax, metric in zip(axes[:, 0], metrics, strict=True):
        data = [grouped.get_group(c)[metric].dropna().to_numpy() for c in cells]
        boxes = ax.boxplot(data, patch_artist=True, widths=0.6, showfliers=True)
        for patch, cell in zip(boxes["boxes"], cells, strict=True):
            patch.set_facecolor(colors[cell[2]])
            patch.set_alpha(0.7)
        ax.set_ylabel(metric)
        ax.set_xticks(range(1, len(cells) + 1), _labels(cells), fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].set_title("Runs per cell" + _shown(total, len(cells), "cells"))
    return png_bytes(fig)


def ci_bars(cells_table: pd.DataFrame, runs: pd.DataFrame) -> bytes | None:
    """Mean per cell with its 95% t confidence interval as the error bar (none below stats.MIN_N_INTERVAL
    runs: the table's CIs are NaN there)."""
    metrics = plot_metrics(runs)
    if not metrics or cells_table.empty:
        return None
    cell_keys = _cell_order(measured_runs(runs))
    indexed = cells_table.set_index([*CELL_KEYS, "metric"])
    colors = _environment_colors([c[2] for c in cell_keys])
    size = (4.2 * len(metrics), max(3, 0.28 * len(cell_keys) + 1.5))
    fig, axes = subplots(1, len(metrics), figsize=size, squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        rows = [indexed.loc[(*c, metric)] if (*c, metric) in indexed.index else None for c in cell_keys]
        means = np.array([r["mean"] if r is not None else np.nan for r in rows], dtype=float)
        low = np.array([r["ci_low"] if r is not None else np.nan for r in rows], dtype=float)
        high = np.array([r["ci_high"] if r is not None else np.nan for r in rows], dtype=float)
        errors = np.nan_to_num(np.vstack([means - low, high - means]))
        y = np.arange(len(cell_keys))
        ax.barh(y, means, xerr=errors, color=[colors[c[2]] for c in cell_keys], alpha=0.8, capsize=3)
        ax.set_yticks(y, _labels(cell_keys, " / "), fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{metric}: mean ± 95% CI" + (" (none: n too small)" if np.isnan(low).all() else ""),
                     fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        if metric != metrics[0]:
            ax.set_yticklabels([])
    return png_bytes(fig)


def throughput_by_batch(runs: pd.DataFrame) -> bytes | None:
    """Throughput against batch size per (model, environment): where batching stops paying."""
    measured = measured_runs(runs)
    if "workload_batch" not in measured or "output_tok_s" not in measured:
        return None
    data = measured.assign(batch=pd.to_numeric(measured["workload_batch"], errors="coerce"))
    data = data.dropna(subset=["batch", "output_tok_s"])
    if data["batch"].nunique() < 2:
        return None
    curves = data.groupby(["model", "environment", "batch"])["output_tok_s"].agg(["mean", "std"]).reset_index()
    series = sorted(curves.groupby(["model", "environment"]).groups)[:12]
    fig, ax = subplots(figsize=(7, 4))
    for i, (model, environment) in enumerate(series):
        line = curves[(curves["model"] == model) & (curves["environment"] == environment)].sort_values("batch")
        ax.errorbar(line["batch"], line["mean"], yerr=line["std"].fillna(0), marker="o", capsize=3,
                    color=COLORS[i % len(COLORS)], label=f"{model} / {environment}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("output_tok_s (mean ± sd)")
    ax.set_title("Throughput against batch size")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return png_bytes(fig)


def campaign_timeline(runs: pd.DataFrame) -> bytes | None:
    """Peak memory, throughput and start temperature in run order, coloured by environment: sequential
    blocks and drift are visible at a glance."""
    measured = measured_runs(runs).dropna(subset=["order_index"])
    panels = [m for m in ("peak_memory_gib", "output_tok_s", "telemetry_gpu_temp_start_c")
              if m in measured and pd.to_numeric(measured[m], errors="coerce").notna().any()]
    if measured.empty or not panels:
        return None
    hosts = sorted(measured["host"].unique())[:MAX_HOSTS]
    colors = _environment_colors(list(measured["environment"].unique()))
    size = (5.5 * len(hosts), 2.4 * len(panels))
    fig, axes = subplots(len(panels), len(hosts), figsize=size, squeeze=False, sharex="col")
    for col, host in enumerate(hosts):
        data = measured[measured["host"] == host]
        if len(data) > MAX_POINTS:
            data = data.sample(MAX_POINTS, random_state=0)
        for row, metric in enumerate(panels):
            ax = axes[row, col]
            for environment, part in data.groupby("environment"):
                # plot() with markers draws one Line2D: far cheaper than scatter() at thousands of points
                ax.plot(part["order_index"].astype(float), pd.to_numeric(part[metric], errors="coerce"), "o",
                        ms=3.5, color=colors[environment], label=str(environment))
            ax.set_ylabel(metric.removeprefix("telemetry_"), fontsize=8)
            ax.grid(alpha=0.3)
        axes[0, col].set_title(f"{host}: in run order", fontsize=9)
        axes[-1, col].set_xlabel("order_index")
    axes[0, 0].legend(fontsize=7)
    return png_bytes(fig)


def kv_budget(kv_runs: pd.DataFrame, fraction: float) -> bytes | None:
    """Measured KV cache against the headroom (device_total - peak, + tmp_kv where the record carries it)
    with the budget line."""
    if kv_runs.empty:
        return None
    data = kv_runs.sample(MAX_POINTS, random_state=0) if len(kv_runs) > MAX_POINTS else kv_runs
    tmp_kv = data["tmp_kv_gib"].fillna(0.0) if "tmp_kv_gib" in data else 0.0
    data = data.assign(_budget=data["headroom_gib"] + tmp_kv)
    term = " + tmp_kv" if "tmp_kv_gib" in data and data["tmp_kv_gib"].notna().any() else ""
    colors = _environment_colors(list(data["environment"].unique()))
    fig, ax = subplots(figsize=(6, 4))
    for environment, part in data.groupby("environment"):
        ax.plot(part["_budget"], part["kv_cache_gib"], "o", ms=4, color=colors[environment],
                label=str(environment))
    x = np.linspace(0, float(data["_budget"].max()) * 1.05, 50)
    ax.plot(x, fraction * x, color="black", lw=1, label=f"kv = {fraction:g} × (total − peak{term})")
    ax.set_xlabel(f"device_total − peak{term} (GiB)")
    ax.set_ylabel("kv_cache (GiB)")
    ax.set_title("KV cache is what the peak leaves over")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return png_bytes(fig)


def telemetry_files(runs: pd.DataFrame, root: Path) -> list[tuple[pd.Series, Path]]:
    """A bounded, evenly spread sample of runs that have a telemetry.csv."""
    if runs.empty or "record_dir" not in runs:
        return []
    step = max(1, len(runs) // TELEMETRY_PROBES)
    found = []
    for _, run in runs.iloc[::step].iterrows():
        path = root / str(run["record_dir"]) / "telemetry.csv"
        if path.is_file():
            found.append((run, path))
            if len(found) >= MAX_TELEMETRY_RUNS:
                break
    return found


def telemetry(runs: pd.DataFrame, root: Path) -> bytes | None:
    """GPU temperature and memory over each sampled run (columns the file lacks are skipped)."""
    samples = telemetry_files(runs, root)
    series = []
    for run, path in samples:
        try:
            frame = pd.read_csv(path)
        except (OSError, ValueError, pd.errors.ParserError):
            continue
        if "t_s" in frame:
            series.append((run, frame))
    panels = [c for c in ("gpu_temp_c", "mem_used_gib", "gpu_power_w") if any(c in f for _, f in series)]
    if not series or not panels:
        return None
    fig, axes = subplots(len(panels), 1, figsize=(7, 2.4 * len(panels)), squeeze=False, sharex=True)
    for i, (run, frame) in enumerate(series):
        label = f"{run['model']} / {run['environment']} #{run['iteration']} @{run['host']}"
        for ax, column in zip(axes[:, 0], panels, strict=True):
            if column in frame:
                ax.plot(frame["t_s"], pd.to_numeric(frame[column], errors="coerce"), lw=1,
                        color=COLORS[i % len(COLORS)], label=label)
                ax.set_ylabel(column, fontsize=8)
                ax.grid(alpha=0.3)
    axes[0, 0].set_title(f"Telemetry of {len(series)} sampled runs")
    axes[0, 0].legend(fontsize=6)
    axes[-1, 0].set_xlabel("t (s)")
    return png_bytes(fig)


_OUTCOME_COLORS = {"different": "#bc4c00", "same": "#1a7f37", "undetermined": "#6e7781"}
_EFFECT_COLUMNS = (("throughput", "throughput"), ("peak_memory_gib", "peak memory"), ("kv_cache_gib", "KV cache"))


def effects(lines: list, threshold: float) -> bytes | None:
    """The first verdict as a figure: per subject (model / workload) and metric, b's relative difference
    from a with its 95% CI, the ±threshold band shaded and each point coloured by its verdict. Points
    without an interval (too few runs) are hollow and say so; nothing is clipped."""
    verdicts = [v for line in lines if line.question == "environment" for v in line.verdicts]
    if not verdicts:
        verdicts = [v for line in lines if line.question == "regression" for v in line.verdicts]
    verdicts = [v for v in verdicts if v.change_pct is not None]
    if not verdicts:
        return None

    def column(v) -> str:
        return "throughput" if v.metric in THROUGHPUT_METRICS else v.metric

    rows = list(dict.fromkeys(f"{v.subject}\n{v.b} vs {v.a}" for v in verdicts))[:MAX_CELLS]
    columns = [(key, title) for key, title in _EFFECT_COLUMNS if any(column(v) == key for v in verdicts)]
    columns += [(m, m) for m in dict.fromkeys(column(v) for v in verdicts) if m not in dict(columns)]
    band = threshold * 100
    size = (3.6 * len(columns) + 1.6, 0.55 * len(rows) + 1.4)
    fig, axes = subplots(1, len(columns), figsize=size, squeeze=False, sharey=True)
    y_of = {row: i for i, row in enumerate(rows)}
    for ax, (key, title) in zip(axes[0], columns, strict=True):
        ax.axvspan(-band, band, color="#d0d7de", alpha=0.45, lw=0)
        ax.axvline(0, color="#57606a", lw=0.8)
        shown = [v for v in verdicts if column(v) == key and f"{v.subject}\n{v.b} vs {v.a}" in y_of]
        extent = [band * 1.6]
        for v in shown:
            y, x, color = y_of[f"{v.subject}\n{v.b} vs {v.a}"], v.change_pct, _OUTCOME_COLORS[v.outcome]
            extent.append(abs(x))
            if v.ci_low_pct is not None and v.ci_high_pct is not None:
                ax.errorbar(x, y, xerr=[[x - v.ci_low_pct], [v.ci_high_pct - x]], fmt="o", ms=6, color=color,
                            capsize=4, lw=1.6)
                extent += [abs(v.ci_low_pct), abs(v.ci_high_pct)]
            else:
                hollow = v.reason not in ("identical", "exact")
                ax.plot(x, y, "o", ms=7, mfc="white" if hollow else color, mec=color, mew=1.6)
                label = "n too small" if v.reason == "n-too-small" else \
                    "identical" if v.reason == "identical" else "exact" if v.reason == "exact" else ""
                if label:
                    ax.annotate(label, (x, y), xytext=(6, 5), textcoords="offset points", fontsize=7, color=color)
        limit = max(extent) * 1.15
        ax.set_xlim(-limit, limit)
        unit_names = sorted({v.metric for v in shown})
        ax.set_title(f"{title}" + (f" ({', '.join(unit_names)})" if key == "throughput" else ""), fontsize=9)
        ax.set_xlabel("relative difference (%)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].set_yticks(range(len(rows)), rows, fontsize=8)
    axes[0, 0].set_ylim(len(rows) - 0.5, -0.5)
    fig.suptitle(f"Relative difference with 95% CI; grey band ±{band:g}% (smaller differences do not matter); "
                 "colour = verdict (orange different, green same, grey undetermined; hollow: no interval, "
                 "n too small)", fontsize=8)
    return png_bytes(fig)


_PART_COLORS = {"model_gib": "#8c959f", "page_cache_gib": "#d4a72c", "cgroup_gib": "#bc4c00",
                "unexplained_gib": "#cf222e", "kv_gib": "#1a7f37", "reserve_gib": "#d0d7de"}


def memory_decomposition(table: pd.DataFrame) -> bytes | None:
    """Where the memory went: each environment's device total as stacked parts (report/memory.py), per
    cell; a negative unexplained part (more attributed than the peak) is drawn left of zero."""
    if table.empty:
        return None
    data = table.head(MAX_CELLS)
    keys = [k for k in ("host", "model", "workload") if data[k].nunique() > 1] or ["workload"]
    labels = [" / ".join([*(str(r[k]) for k in keys), str(r["environment"])]) for _, r in data.iterrows()]
    fig, ax = subplots(figsize=(9, 0.42 * len(data) + 2.2))
    y = np.arange(len(data))
    left_pos = np.zeros(len(data))
    left_neg = np.zeros(len(data))
    for part in PARTS:
        values = np.nan_to_num(data[part].to_numpy(dtype=float))
        positive, negative = np.clip(values, 0, None), np.clip(values, None, 0)
        ax.barh(y, positive, left=left_pos, color=_PART_COLORS[part], label=PART_WORDS[part], height=0.7)
        if (negative < 0).any():
            ax.barh(y, negative, left=left_neg, color=_PART_COLORS[part], hatch="//", height=0.7, alpha=0.6)
        left_pos += positive
        left_neg += negative
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="#57606a", lw=0.8)
    ax.set_xlabel("GiB (sums to the engine's device total)")
    ax.set_title("Where the memory went: device total per environment" + _shown(len(table), len(data), "rows"),
                 fontsize=9)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="outside lower center", ncols=len(PARTS))
    ax.grid(axis="x", alpha=0.3)
    return png_bytes(fig)
