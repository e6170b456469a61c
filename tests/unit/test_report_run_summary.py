"""`sparkfleet run` ends with the verdicts: the report play hands `sparkfleet report`'s lines to the progress
callback (a "report" event), and the run's final summary prints the verdict headlines and the report's path."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from _shared import REPO
from test_progress_callback import _env, _events, _playbook

from sparkfleet.progress import Progress, report_verdicts

GPU_EXAMPLE = REPO / "examples" / "gpu" / "results" / "gpu"


def test_report_play_passes_the_verdicts_to_the_run_summary(tmp_path: Path) -> None:
    shutil.copytree(GPU_EXAMPLE, tmp_path / "results" / "gpu", ignore=shutil.ignore_patterns("report"))
    events_file = tmp_path / "events.jsonl"
    extra = json.dumps({"sparkfleet_controller_results": str(tmp_path / "results"),
                        "sparkfleet_resolved_campaign": {"name": "gpu"},
                        "ansible_playbook_python": sys.executable})
    done = _playbook(REPO / "playbooks" / "report.yml", _env(tmp_path, events_file), tmp_path, "-e", extra)
    assert done.returncode == 0, done.stdout + done.stderr
    reports = [e for e in _events(events_file) if e["event"] == "report"]
    assert len(reports) == 1 and reports[0]["lines"][0] == "verdicts:"
    progress = Progress()
    for event in _events(events_file):
        progress.update(event)
    summary = progress.summary(0)
    assert summary[-1] == "playbook finished: rc=0"
    start = summary.index("verdicts:")
    assert summary[start + 1].startswith("  UNDETERMINED: llama-1b / T1: bare and native have identical peak memory")
    assert summary[-2] == f"report: {tmp_path / 'results' / 'gpu' / 'report' / 'index.html'}"
    assert (tmp_path / "results" / "gpu" / "report" / "index.html").is_file()


def test_report_verdicts_keeps_the_headlines_only() -> None:
    lines = ["verdicts:", "  DIFFERENT: m / w: container has 30 GiB more peak memory than native.",
             "      m / w, container vs native: peak memory +30 GiB (+43%; 95% CI ...), significant.",
             "63 runs (63 ok) in 6 cells; 0 record(s) skipped", "warnings: 3 sequential",
             "  ! sequential order on ...", "wrote /r/report/summary.md", "wrote /r/report/index.html"]
    assert report_verdicts(lines) == ["verdicts:", lines[1], "report: /r/report/index.html"]
    assert report_verdicts([]) == []
