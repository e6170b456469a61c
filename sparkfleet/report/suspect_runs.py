"""The runs the readiness probe found suspect, left out of every statistic and named.

Under ``sparkfleet_readiness_policy: mark`` a suspect run is recorded with status ok; stats.kept_apart keeps it (and
its serving points) out of every statistic, comparison and figure, and the host verdict compares it on its own
(host_normal.py). This module names each such run with its reason: a warning, the section "Runs left out for
readiness" and suspect_runs.csv beside the report, and ``suspect_runs`` in the JSON. Nothing shows (the CSV is not
written) for a campaign without suspect runs.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sparkfleet import stats
from sparkfleet.report.document import Paragraph, Section, shown, table
from sparkfleet.report.types import Finding

TITLE = "Runs left out for readiness"
CSV_NAME = "suspect_runs.csv"
FINDING_KIND = "suspect-run"
COLUMNS = ["host", "model", "environment", "workload", "run_id", "iteration", "reason"]
#: Lines a warning's details list at most (the CSV holds every run).
MAX_LISTED = 50


def reason_of(reasons: Any) -> str:
    """The run's reason in the words its record's ``reason`` uses under the policy mark: "readiness suspect: ..."."""
    return f"readiness suspect: {reasons}" if isinstance(reasons, str) and reasons else "readiness suspect"


def suspect_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok runs (not warm-ups) that the readiness probe found suspect, of any node: COLUMNS, in run order."""
    ok = stats.ok_runs(runs)
    apart = ok[stats.kept_apart(ok)]
    reasons = apart[stats.READINESS_REASONS] if stats.READINESS_REASONS in apart else pd.Series(None, apart.index)
    frame = apart.assign(reason=[reason_of(r) for r in reasons])[COLUMNS]
    return frame.sort_values(["host", "model", "environment", "workload", "iteration", "run_id"]).reset_index(drop=True)


def _line(row: Any) -> str:
    return (f"{row.host} / {row.model} / {row.environment} / {row.workload}, run {row.run_id} "
            f"(iteration {row.iteration}): {row.reason}")


def findings(frame: pd.DataFrame) -> list[Finding]:
    """One warning counting the suspect runs left out, one detail per run; none without any."""
    if frame.empty:
        return []
    hosts = ", ".join(sorted(set(frame["host"].astype(str))))
    return [Finding(FINDING_KIND, f"{len(frame)} run(s) on {hosts} found suspect by the readiness probe are left out "
                                  f"of every statistic and comparison (named in \"{TITLE}\" and {CSV_NAME})",
                    tuple(_line(r) for r in frame.head(MAX_LISTED).itertuples(index=False)))]


def overview_words(frame: pd.DataFrame) -> str:
    """The overview's clause on them ("" without any): what "in stats" leaves out beside warm-ups."""
    if frame.empty:
        return ""
    return f", and the {len(frame)} run(s) the readiness probe found suspect (\"{TITLE}\")"


def section(report: Any) -> Section | None:
    """The table of the suspect runs with their reasons; None without any."""
    frame = getattr(report, "suspect_runs", None)
    if frame is None or frame.empty:
        return None
    text = (f"{len(frame)} run(s) ran although the readiness probe before them found the GPU suspect (the policy "
            "mark records them with status ok). They are left out of every statistic, comparison, figure and "
            "serving cell, never averaged in; a host's suspect runs are compared on their own in \"Is this host "
            "normal?\". A multi-node run counts as suspect when any node's probe "
            "was.")
    rows = shown(frame)
    return Section(TITLE, [Paragraph(text), table(rows.astype({"iteration": str}), "Left out of the statistics, "
                                                  "and why", CSV_NAME, len(frame))])


def tables(report: Any) -> dict[str, pd.DataFrame]:
    """{CSV_NAME: every suspect run} where there is one; {} otherwise."""
    frame = getattr(report, "suspect_runs", None)
    return {} if frame is None or frame.empty else {CSV_NAME: frame}


__all__ = ["CSV_NAME", "FINDING_KIND", "TITLE", "findings", "overview_words", "section", "suspect_runs", "tables"]
