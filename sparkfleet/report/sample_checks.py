"""Serving figures and samples that cannot be, left out of every statistic and named (issue 32).

sparkfleet.serving.impossible_samples finds them in the points table (a negative or non-finite figure or sample,
fewer samples than the point's requests, a per-request rate above concurrency x its run's aggregate, a per-user
figure above concurrency x the aggregate); the serving statistics read serving.screened_points, which leaves them
out. This module names them: the section "Serving samples left out" (one row per host / model / environment /
workload / point / run and check, with what was left out and why), a warning, serving_left_out.csv beside the
report, and the intervals whose lower bound was held at 0 (serving.clip_to_range). Nothing here shows for a
campaign whose serving samples all pass, or without serving runs.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sparkfleet import serving
from sparkfleet.report.document import Bullets, Paragraph, Section, shown, table
from sparkfleet.report.types import Finding

TITLE = "Serving samples left out"
CSV_NAME = "serving_left_out.csv"
#: Lines a warning's details list at most (the CSV holds every row).
MAX_LISTED = 50


def left_out(points: pd.DataFrame) -> pd.DataFrame:
    """What the serving statistics leave out because it cannot be (serving.impossible_samples's columns)."""
    return serving.impossible_samples(points)


def _what(row: Any) -> str:
    return str(row.left_out)


def findings(frame: pd.DataFrame) -> list[Finding]:
    """One warning naming how many run x point rows lost a figure (or all of them), and why, one detail each."""
    if frame.empty:
        return []
    details = tuple(f"{r.host} / {r.model} / {r.environment} / {r.workload}, point {r.point}, run {r.run_id} "
                    f"(iteration {r.iteration}): {_what(r)} left out: {serving.CHECKS.get(r.check, r.check)}: {r.why}"
                    for r in shown(frame).itertuples(index=False))
    points = frame[["run_id", "point"]].drop_duplicates()
    checks = ", ".join(sorted({serving.CHECKS.get(c, c) for c in frame["check"]}))
    return [Finding("serving-impossible",
                    f"{len(points)} serving run x point row(s) hold figures or samples that cannot be ({checks}); "
                    f"they are left out of the serving statistics and named in \"{TITLE}\" and {CSV_NAME}",
                    details[:MAX_LISTED], "serving")]


def _clipped(cells: pd.DataFrame) -> list[str]:
    if cells.empty or "ci95_note" not in cells:
        return []
    clipped = cells[cells["ci95_note"].fillna("").astype(str) != ""]
    return [f"{r.model} / {r.engine} / {r.environment}, point d{r.depth}.c{r.concurrency}.pp{r.pp}.tg{r.tg}, "
            f"{r.metric}: {r.ci95_note}" for r in shown(clipped).itertuples(index=False)]


def section(report: Any) -> Section | None:
    """The section naming every left-out figure and every interval held at 0; None when there is neither."""
    study = getattr(report, "serving", None)
    if study is None or not study.present:
        return None
    frame = getattr(report, "serving_left_out", None)
    frame = left_out(study.points) if frame is None else frame
    clipped = _clipped(study.cells)
    if frame.empty and not clipped:
        return None
    blocks: list = []
    if not frame.empty:
        blocks.append(Paragraph(
            "Figures and samples that cannot be are left out of every serving statistic, comparison and noise floor, "
            "and named here: a negative or non-finite figure or sample; fewer (or more) samples than the point's "
            "requests (llama-benchy drops a request that failed, so the point's figures stand for fewer requests "
            "than it names: every figure of that point is left out); a per-request rate above concurrency x its "
            "own run's aggregate rate, or a per-user figure above concurrency x the aggregate (a request's tokens "
            "are part of its run's aggregate: at concurrency 1 they are one figure)."))
        rows = shown(frame)
        blocks.append(table(pd.DataFrame({
            "host": rows["host"], "model": rows["model"], "environment": rows["environment"],
            "workload": rows["workload"], "engine": rows["engine"].astype(str), "point": rows["point"],
            "run": rows["run_id"], "iteration": rows["iteration"].astype(str),
            "left out": [_what(r) for r in rows.itertuples(index=False)],
            "check": rows["check"].map(lambda c: serving.CHECKS.get(c, c)), "why": rows["why"],
        }), "Left out of the serving statistics, and why", CSV_NAME, len(frame)))
    if clipped:
        blocks.append(Paragraph(
            "Intervals whose lower bound is shown at 0 (throughput and latency are never negative): the normal "
            "interval reaches below 0, i.e. it does not fit these few, spread iterations. The computed bounds are "
            "in serving_cells.csv (ci_low, ci_high)."))
        blocks.append(Bullets(clipped, "warnings"))
    return Section(TITLE, blocks)


def tables(report: Any) -> dict[str, pd.DataFrame]:
    """{CSV_NAME: every left-out row} for a campaign with serving runs; {} without."""
    study = getattr(report, "serving", None)
    if study is None or not study.present:
        return {}
    frame = getattr(report, "serving_left_out", None)
    return {CSV_NAME: left_out(study.points) if frame is None else frame}


__all__ = ["CSV_NAME", "TITLE", "findings", "left_out", "section", "tables"]
