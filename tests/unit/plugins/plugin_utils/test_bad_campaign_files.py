"""`sparkfleet validate` on every bad campaign file in tests/fixtures/bad_campaigns/: exit 2 and the message.

Each file's first line is ``# expect: <substring>``: the error `sparkfleet validate` prints must contain it
(and name the file). A bad campaign must never get past validation, nor crash it with a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import files
from sparkfleet.cli import main

BAD = Path(__file__).resolve().parents[3] / "fixtures" / "bad_campaigns"
FILES = sorted(BAD.glob("*.yml"))
EXPECT = "# expect: "

#: Files that show a product bug (validation raises instead of naming the field); strict: fixed -> XPASS fails.


def _expected(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode()  # some files are deliberately not UTF-8 past line 1
    assert first.startswith(EXPECT), f"{path.name}: the first line must be '{EXPECT}<substring>'"
    return first[len(EXPECT):].strip()


def test_there_are_enough_bad_files_with_unique_numbers():
    assert len(FILES) >= 30
    numbers = [p.name.split("-", 1)[0] for p in FILES]
    assert all(n.isdigit() and len(n) in (2, 3) for n in numbers) and len(set(numbers)) == len(numbers)
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


# ------------------------------------------------------------------ files that cannot be read at all
# (not committable as fixtures: made on the spot)


def _directory(tmp):
    path = tmp / "campaign.yml"
    path.mkdir()
    return path, "is a directory, not a campaign"


def _fifo(tmp):
    path = tmp / "campaign.yml"
    os.mkfifo(path)  # reading it would block forever: refused before reading
    return path, "is not a regular file (a named pipe)"


def _dangling_symlink(tmp):
    path = tmp / "campaign.yml"
    path.symlink_to(tmp / "gone.yml")
    return path, "no such file"


def _symlink_loop(tmp):
    path = tmp / "campaign.yml"
    path.symlink_to(path)
    return path, "cannot open: Too many levels of symbolic links"


def _too_large(tmp):
    path = tmp / "campaign.yml"
    with open(path, "wb") as fh:
        fh.write(b"name: c\n")
        fh.truncate(files.MAX_TEXT_BYTES + 1)  # sparse
    return path, "too large for a campaign"


def _under_a_file(tmp):
    (tmp / "file").write_text("x")
    return tmp / "file" / "campaign.yml", "no such file (a path component is not a directory)"


UNREADABLE = [_directory, _fifo, _dangling_symlink, _symlink_loop, _too_large, _under_a_file]


@pytest.mark.parametrize("make", UNREADABLE, ids=[m.__name__.strip("_") for m in UNREADABLE])
def test_validate_names_a_file_it_cannot_read(tmp_path, capsys, make):
    path, expected = make(tmp_path)
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and "Traceback" not in out.err, out.err
    assert out.err.count("\n") == 1 and f"{path}: {expected}" in out.err, out.err


def test_validate_names_a_file_without_permission(tmp_path, capsys, monkeypatch):
    path = tmp_path / "campaign.yml"
    path.write_text("name: c\n")
    path.chmod(0)
    real_open = os.open

    def denied(name, flags, *args, **kwargs):  # root reads whatever the mode: deny it here too
        if os.fspath(name) == str(path):
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"sparkfleet validate: error: {path}: permission denied (campaign)"
