"""`sparkfleet validate` on every bad campaign file in tests/fixtures/bad_campaigns/: exit 2 and the message.

Each file's first line is ``# expect: <substring>``: the error `sparkfleet validate` prints must contain it
(and name the file). A bad campaign must never get past validation, nor crash it with a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkfleet.cli import main

BAD = Path(__file__).resolve().parents[1] / "fixtures" / "bad_campaigns"
FILES = sorted(BAD.glob("*.yml"))
EXPECT = "# expect: "

#: Files that show a product bug (validation raises instead of naming the field); strict: fixed -> XPASS fails.


def _expected(path: Path) -> str:
    first = path.read_text().split("\n", 1)[0]
    assert first.startswith(EXPECT), f"{path.name}: the first line must be '{EXPECT}<substring>'"
    return first[len(EXPECT):].strip()


def test_there_are_enough_bad_files_with_unique_numbers():
    assert len(FILES) >= 30
    numbers = [p.name.split("-", 1)[0] for p in FILES]
    assert all(n.isdigit() and len(n) == 2 for n in numbers) and len(set(numbers)) == len(numbers)
    assert all(_expected(p) for p in FILES)


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=p.stem) for p in FILES],
)
def test_validate_rejects_the_file_naming_the_problem(path, capsys):
    expected = _expected(path)
    try:
        code = main(["validate", str(path)])
    except SystemExit as exc:  # argparse-level exits would be a harness bug, not a rejection
        code = exc.code
    out = capsys.readouterr()
    assert code == 2, (code, out.out, out.err)
    assert "Traceback" not in out.err
    assert expected in out.err, (expected, out.err)
    assert str(path) in out.err, out.err  # the message names the file
    assert out.out == ""  # no plan printed for a bad campaign
