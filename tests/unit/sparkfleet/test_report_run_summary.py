"""`sparkfleet run` ends with the verdicts: after bench.yml it writes the campaign's report in-process (as
`sparkfleet report results/<campaign>` does), and the run's final summary prints the verdict headlines and the
report's path."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
from _shared import REPO

from sparkfleet.commands import run as run_cmd
from sparkfleet.progress import report_verdicts
from sparkfleet.runner import RunOutcome

GPU_EXAMPLE = REPO / "examples" / "gpu" / "results" / "gpu"
OK = {"ok": 9, "changed": 1, "failed": 0, "unreachable": 0}


def _run(monkeypatch, tmp_path, outcome: RunOutcome, playbook: str = "bench.yml", events=None):
    (tmp_path / "inv.ini").write_text("spark1\n")
    monkeypatch.setattr("sparkfleet.runner.run_playbook", lambda request, on_events: (on_events(events or []),
                                                                                       outcome)[1])
    args = argparse.Namespace(inventory=str(tmp_path / "inv.ini"), playbook=playbook, extra_vars=[], env=[],
                              json_events=str(tmp_path / "ev.jsonl"), quiet=True)
    return run_cmd.run(args)


def test_after_bench_yml_the_run_writes_the_report_and_ends_with_its_verdicts(tmp_path, monkeypatch, capsys):
    campaign = tmp_path / "results" / "gpu"
    shutil.copytree(GPU_EXAMPLE, campaign, ignore=shutil.ignore_patterns("report"))
    outcome = RunOutcome(rc=0, status="successful", stdout_tail=[], campaign_dirs=[str(campaign)],
                         stats={"spark1": OK})
    assert _run(monkeypatch, tmp_path, outcome) == 0
    summary = capsys.readouterr().out.splitlines()
    assert summary[-1] == "playbook finished: rc=0"
    start = summary.index("verdicts:")
    assert summary[start + 1].startswith("  UNDETERMINED: llama-1b / T1: bare and native have ")
    assert summary[-2] == f"report: {campaign / 'report' / 'index.html'}"
    assert (campaign / "report" / "index.html").is_file() and (campaign / "report" / "summary.md").is_file()
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["report"] and events[0]["lines"][0] == "verdicts:"


@pytest.mark.parametrize(("playbook", "stats", "cancelled"), [
    ("tests/fixtures/playbooks/fake_matrix.yml", {"spark1": OK}, False),  # not bench.yml
    ("bench.yml", {"spark1": {**OK, "failed": 1}, "spark2": {**OK, "unreachable": 1}}, False),  # no host got through
    ("bench.yml", None, False),  # the playbook never got to its end
    ("bench.yml", {"spark1": OK}, True),  # interrupted
])
def test_no_report_when_bench_yml_did_not_get_to_it(tmp_path, monkeypatch, capsys, playbook, stats, cancelled):
    campaign = tmp_path / "results" / "gpu"
    shutil.copytree(GPU_EXAMPLE, campaign, ignore=shutil.ignore_patterns("report"))
    outcome = RunOutcome(rc=130 if cancelled else 0, status="x", stdout_tail=[], campaign_dirs=[str(campaign)],
                         stats=stats, cancelled=cancelled)
    _run(monkeypatch, tmp_path, outcome, playbook=playbook)
    assert "verdicts:" not in capsys.readouterr().out
    assert not (campaign / "report").exists()


def test_a_report_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    campaign = tmp_path / "results" / "empty"
    campaign.mkdir(parents=True)
    outcome = RunOutcome(rc=0, status="successful", stdout_tail=[], campaign_dirs=[str(campaign)],
                         stats={"spark1": OK})
    assert _run(monkeypatch, tmp_path, outcome) == 2
    captured = capsys.readouterr()
    [line] = [x for x in captured.err.splitlines() if x.startswith("sparkfleet run: report:")]
    assert str(campaign) in line and "no valid run records" in line
    assert captured.out.splitlines()[-1] == "playbook finished: rc=2"


def test_report_verdicts_keeps_the_headlines_only() -> None:
    lines = ["verdicts:", "  DIFFERENT: m / w: container has 30 GiB more peak memory than native.",
             "      m / w, container vs native: peak memory +30 GiB (+43%; 95% CI ...), significant.",
             "63 runs (63 ok) in 6 cells; 0 record(s) skipped", "warnings: 3 sequential",
             "  ! sequential order on ...", "wrote /r/report/summary.md", "wrote /r/report/index.html"]
    assert report_verdicts(lines) == ["verdicts:", lines[1], "report: /r/report/index.html"]
    assert report_verdicts([]) == []


def test_bench_yml_has_no_report_stage_and_says_how_to_write_it() -> None:
    bench = (REPO / "bench.yml").read_text()
    assert "report.yml" not in bench and not (REPO / "playbooks" / "report.yml").exists()
    assert "sparkfleet report {{ bench_campaign_dir }}" in bench
    assert Path(REPO / "README.md").read_text().count("sparkfleet report results/<campaign>") >= 2
