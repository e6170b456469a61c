"""`sparkfleet report` never pools two campaigns into one cell (issue 23).

A directory holding two campaigns once gave one cell of both, without a word. Now the report is refused with a
one-line error naming each campaign, its runs and where they lie, and how to report one; each campaign's own
directory reports as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_compare import _normal, write_campaign

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from sparkfleet.cli import main
from sparkfleet.load import load_runs
from sparkfleet.report import analyse


def _two_campaigns(root: Path) -> Path:
    write_campaign(root / "c1", {("m", "native"): {"output_tok_s": _normal(100, 1, 5, 1)},
                                 ("m", "container"): {"output_tok_s": _normal(100, 1, 5, 2)}}, campaign="c1")
    write_campaign(root / "c2", {("m", "native"): {"output_tok_s": _normal(50, 1, 4, 3)},
                                 ("m", "container"): {"output_tok_s": _normal(50, 1, 4, 4)}}, campaign="c2")
    return root


def test_a_tree_of_two_campaigns_is_refused_naming_both(tmp_path: Path, capsys) -> None:
    results = _two_campaigns(tmp_path / "results")
    assert main(["report", str(results), "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "Traceback" not in out.err and out.err.count("\n") == 1, out.err
    assert f"c1 (10 runs under {results / 'c1'})" in out.err and f"c2 (8 runs under {results / 'c2'})" in out.err
    assert f"sparkfleet report {results / 'c1'}" in out.err  # how to report one
    assert not (results / "report").exists()  # nothing written that mixes them


def test_the_library_refuses_too(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="holds runs of 2 campaigns"):
        analyse(load_runs(_two_campaigns(tmp_path / "results")))


def test_each_campaign_reports_on_its_own(tmp_path: Path, capsys) -> None:
    results = _two_campaigns(tmp_path / "results")
    for name, runs in (("c1", 5), ("c2", 4)):
        assert main(["report", str(results / name), "--json"]) == 0
        cells = json.loads(capsys.readouterr().out)["cells"]
        assert {c["n"] for c in cells if c["metric"] == "output_tok_s"} == {runs}


def test_fleet_refuses_two_campaigns_too(tmp_path: Path, capsys) -> None:
    results = _two_campaigns(tmp_path / "results")
    assert main(["fleet", str(results)]) == 2
    err = capsys.readouterr().err
    assert "holds runs of 2 campaigns" in err and "Traceback" not in err
