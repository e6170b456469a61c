"""Issue 33, items 6 and 7: `sparkfleet run` exits non-zero when a planned run failed (a status of its own when
none succeeded) and names each failed run with its cause as the engine or client said it; `run` and `report` end
with the numbers (per cell, per serving point), also for one engine in one environment, where the report used to
crash in the serving plots, and the report leads with them when there is nothing to compare. Synthetic trees
(serving_tree.py); ansible never runs."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import pytest
from _shared import REPO
from serving_tree import build_serving_tree, points_of

from sparkfleet.cli import main
from sparkfleet.commands import run as run_cmd
from sparkfleet.progress import report_verdicts
from sparkfleet.runner import RunOutcome

ONE_LEVEL = {"depth": (0, 4096), "concurrency": (1,), "pp": (512,), "tg": (64,)}  # one row per point and metric
OK = {"ok": 9, "changed": 1, "failed": 0, "unreachable": 0}
GPU_EXAMPLE = REPO / "examples" / "gpu" / "results" / "gpu"


def tree(tmp_path: Path, **kwargs) -> Path:
    kwargs = {"engines": ("llama.cpp",), "environments": ("native",), "iterations": 3, **kwargs}
    return build_serving_tree(tmp_path / "results" / "serve", **kwargs)


def numbers_block(out: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index("numbers:")
    block = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


def point_rows(block: list[str], engine: str) -> list[list[str]]:
    return [line.split() for line in block if line.strip().startswith(engine + " ")]


# --- item 7: numbers on the terminal, one engine in one environment -------------------------------------------

@pytest.mark.parametrize("profile", [ONE_LEVEL, None], ids=["one-concurrency", "two-concurrencies"])
def test_one_engine_one_environment_reports_its_numbers(tmp_path, capsys, profile) -> None:
    root = tree(tmp_path, iterations=5, **({"profile": profile} if profile else {}))
    assert main(["report", str(root)]) == 0  # no KeyError: 'engine' in the serving plots
    out = capsys.readouterr().out
    block = numbers_block(out)
    rows = point_rows(block, "llama.cpp")
    expected = points_of(profile) if profile else points_of()
    assert {(int(r[3]), int(r[4])) for r in rows} == {(p["depth"], p["concurrency"]) for p in expected}
    for row in rows:  # aggregate tok/s, per-user tok/s and TTFT: each a median with its interval
        figures = re.findall(r"([\d.]+) \[([\d.]+), ([\d.]+)\]", " ".join(row))
        assert len(figures) == 3
        (agg, *_), (user, *_), (ttft, *_) = figures
        assert 50 < float(agg) < 70 and 25 < float(user) < 35 and 350 < float(ttft) < 450  # BASE, ±noise
    # nothing to compare: the numbers come before the non-answer, here and in the report
    assert out.index("numbers:") < out.index("verdicts:") and "NO COMPARISON" in out
    for name in ("summary.md", "index.html"):
        text = (root / "report" / name).read_text()
        assert text.index("Numbers") < text.index("Verdicts"), name
    assert (root / "report" / "plots" / "serving_throughput.png").is_file()


def test_an_engine_that_never_served_leaves_the_report_and_its_numbers_whole(tmp_path, capsys) -> None:
    dead = [("vllm", "native", i) for i in (1, 2, 3)]
    root = tree(tmp_path, engines=("vllm", "llama.cpp"), profile=ONE_LEVEL, dead=dead)
    assert main(["report", str(root)]) == 0
    block = numbers_block(capsys.readouterr().out)
    assert len(point_rows(block, "llama.cpp")) == len(points_of(ONE_LEVEL)) and not point_rows(block, "vllm")


def test_numbers_follow_the_verdicts_where_there_is_a_comparison(tmp_path, capsys) -> None:
    root = tree(tmp_path, environments=("native", "container"), profile=ONE_LEVEL)
    assert main(["report", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.index("verdicts:") < out.index("numbers:")
    assert len(point_rows(numbers_block(out), "llama.cpp")) == 2 * len(points_of(ONE_LEVEL))
    html = (root / "report" / "index.html").read_text()
    assert "<h2>Numbers</h2>" not in html


def test_the_run_summary_keeps_the_numbers_block() -> None:
    lines = ["numbers:", "  per serving point, median [95% CI]:", "    engine  environment", "    llama.cpp  native",
             "verdicts:", "  NO COMPARISON: Nothing to compare", "      details", "5 runs (5 ok)",
             "wrote /r/report/index.html"]
    assert report_verdicts(lines) == [*lines[:6], "report: /r/report/index.html"]


# --- item 6: exit status and causes ------------------------------------------------------------------------

def test_every_run_failed_is_its_own_status_with_one_cause_per_run(tmp_path) -> None:
    root = tree(tmp_path, dead=[("llama.cpp", "native", i) for i in (1, 2, 3)])
    status, lines = run_cmd.run_status([str(root)], 0)
    assert status == run_cmd.EXIT_NONE_OK
    named = [line for line in lines if "[qwen.native.serve-quick" in line]
    assert len(named) == 3 and len({line.split("[")[1] for line in named}) == 3
    assert all("address in use" in line for line in named)  # the cause as the record gives it, once per run
    assert all(line.count("address in use") == 1 for line in named)


def test_some_runs_failed_is_the_other_status_naming_only_those(tmp_path) -> None:
    point = "d0.c1.pp512.tg64"
    root = tree(tmp_path, dead=[("llama.cpp", "native", 1)], failed={("llama.cpp", "native", 2): (point,)})
    status, lines = run_cmd.run_status([str(root)], 0)
    assert status == run_cmd.EXIT_RUNS_FAILED
    named = [line for line in lines if "[qwen.native.serve-quick" in line]
    assert [".i001." in line or ".i002." in line for line in named] == [True, True]
    assert "address in use" in named[0]
    assert point in named[1] and "client exited 1: timeout" in named[1]  # the failed point's own reason


def test_all_ok_is_0_and_a_failed_playbook_keeps_its_status(tmp_path) -> None:
    root = tree(tmp_path)
    assert run_cmd.run_status([str(root)], 0) == (0, [])
    dead = tree(tmp_path / "dead", dead=[("llama.cpp", "native", 1)])
    status, lines = run_cmd.run_status([str(dead)], 2)  # a host failed: the playbook's status, the causes too
    assert status == 2 and any("address in use" in line for line in lines)
    assert run_cmd.run_status([str(tmp_path / "absent")], 0) == (0, [])
    assert len({run_cmd.EXIT_RUNS_FAILED, run_cmd.EXIT_NONE_OK, 0, 1, 2, 4, 5, 99, 130, 250}) == 10


def test_a_planned_run_without_a_record_is_a_failure(tmp_path) -> None:
    root = tree(tmp_path, iterations=2)
    ids = [p.name for p in sorted((root / "spark-01" / "runs").iterdir())]
    lost = "qwen.native.serve-quick.llam.i003.0000000000"
    (root / "campaign.json").write_text(json.dumps({"hosts": {"spark-01": {"run_ids": [*ids, lost]}}}))
    status, lines = run_cmd.run_status([str(root)], 0)
    assert status == run_cmd.EXIT_RUNS_FAILED
    assert [line for line in lines if lost in line] and lines[0].startswith("1 of 3 ")


def _run(monkeypatch, tmp_path, outcome: RunOutcome) -> int:
    (tmp_path / "inv.ini").write_text("spark1\n")
    monkeypatch.setattr("sparkfleet.runner.run_playbook", lambda request, on_events: outcome)
    args = argparse.Namespace(inventory=str(tmp_path / "inv.ini"), playbook="bench.yml", extra_vars=[], env=[],
                              json_events=None, quiet=True)
    return run_cmd.run(args)


def test_run_ends_with_the_numbers_the_causes_and_the_status(tmp_path, monkeypatch, capsys) -> None:
    """The case of the issue, and more: the playbook succeeded (failed=0 on every host), one run's server never
    bound its port, the others served: the numbers, the failed run with its cause, a non-zero status."""
    root = tree(tmp_path, profile=ONE_LEVEL, dead=[("llama.cpp", "native", 2)])
    outcome = RunOutcome(rc=0, status="successful", stdout_tail=[], campaign_dirs=[str(root)],
                         stats={"spark1": OK})
    assert _run(monkeypatch, tmp_path, outcome) == run_cmd.EXIT_RUNS_FAILED
    out = capsys.readouterr().out
    assert len(point_rows(numbers_block(out), "llama.cpp")) == len(points_of(ONE_LEVEL))
    [failed] = [line for line in out.splitlines() if "[qwen.native.serve-quick" in line]
    assert ".i002." in failed and "address in use" in failed
    assert out.index("playbook finished") < out.index(failed)


def test_run_with_no_run_ok_exits_with_its_own_status(tmp_path, monkeypatch, capsys) -> None:
    root = tree(tmp_path, iterations=1, dead=[("llama.cpp", "native", 1)])
    outcome = RunOutcome(rc=0, status="successful", stdout_tail=[], campaign_dirs=[str(root)],
                         stats={"spark1": OK})
    assert _run(monkeypatch, tmp_path, outcome) == run_cmd.EXIT_NONE_OK
    assert "address in use" in capsys.readouterr().out


def test_the_statuses_are_in_the_help(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"{run_cmd.EXIT_RUNS_FAILED} some planned run failed" in help_text
    assert f"{run_cmd.EXIT_NONE_OK} no planned run succeeded" in help_text


def test_per_cell_numbers_name_each_cells_main_throughput_metric(tmp_path, capsys) -> None:
    campaign = tmp_path / "gpu"
    shutil.copytree(GPU_EXAMPLE, campaign, ignore=shutil.ignore_patterns("report"))
    assert main(["report", str(campaign)]) == 0
    block = numbers_block(capsys.readouterr().out)
    rows = [line.split() for line in block if line.strip().startswith("localhost ")]
    assert {(r[2], r[3], r[4]) for r in rows} == {(e, w, m) for e in ("bare", "bare.aa", "native")
                                                   for w, m in (("T1", "output_tok_s"), ("matmul", "gflops"))}


def test_a_playbook_that_measures_nothing_keeps_its_status(tmp_path, monkeypatch) -> None:
    root = tree(tmp_path, dead=[("llama.cpp", "native", 1)])
    outcome = RunOutcome(rc=0, status="successful", stdout_tail=[], campaign_dirs=[str(root)],
                         stats={"spark1": OK})
    (tmp_path / "inv.ini").write_text("spark1\n")
    monkeypatch.setattr("sparkfleet.runner.run_playbook", lambda request, on_events: outcome)
    args = argparse.Namespace(inventory=str(tmp_path / "inv.ini"), playbook="playbooks/validate.yml", extra_vars=[],
                              env=[], json_events=None, quiet=True)
    assert run_cmd.run(args) == 0
