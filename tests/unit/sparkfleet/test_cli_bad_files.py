"""Every CLI command that reads a named file, walked through every kind of unreadable file.

missing, a directory, not a regular file (a named pipe), no permission, not UTF-8, not YAML / not JSON, too
large: each is exit 2 with one line naming the file and the problem, never a traceback (issue 17).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _shared import STUDY_JSON

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import files
from sparkfleet.cli import main

UTF8_BAD = b"name: caf\xe9\nmodels: [a]\n"  # Latin-1, not UTF-8


def _make(tmp_path: Path, kind: str, name: str, good: bytes, bad_syntax: bytes, limit: int) -> Path:
    path = tmp_path / name
    if kind == "missing":
        return path
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "not-utf8":
        path.write_bytes(UTF8_BAD)
    elif kind == "bad-syntax":
        path.write_bytes(bad_syntax)
    elif kind == "too-large":
        with open(path, "wb") as fh:  # sparse: costs no disk
            fh.truncate(limit + 1)
    elif kind == "no-permission":
        path.write_bytes(good)
        path.chmod(0)
    return path


@pytest.fixture
def deny(monkeypatch):
    """Permission denied for these paths, also as root (root reads files whatever their mode)."""
    denied: set[str] = set()
    real_open, real_access = os.open, os.access

    def fake_open(path, flags, *args, **kwargs):
        if os.fspath(path) in denied:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    def fake_access(path, mode, *args, **kwargs):
        return False if os.fspath(path) in denied else real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "access", fake_access)
    return denied


EXPECT = {
    "missing": "no such file",
    "directory": "is a directory",
    "fifo": "not a regular file (a named pipe)",
    "no-permission": "permission denied",
    "not-utf8": "not UTF-8 text (byte 0xe9 at line 1)",
    "too-large": "too large",
}
FILE_KINDS = list(EXPECT) + ["bad-syntax"]

GOOD_CAMPAIGN = b"name: t\nmodels: [m]\nenvironments: [native]\nworkloads: [matmul]\n"
INVENTORY = "localhost ansible_connection=local\n"


def _argv(command: str, path: Path, tmp_path: Path) -> list[str]:
    if command == "validate":
        return ["validate", str(path)]
    if command == "run":
        inventory = tmp_path / "inv.ini"
        inventory.write_text(INVENTORY)
        return ["run", "-i", str(inventory), "-e", f"@{path}", "--quiet"]
    if command == "run-inventory":
        return ["run", "-i", str(path), "--quiet"]
    if command == "parse":
        return ["parse", str(path)]
    if command == "parse-report-json":
        log = tmp_path / "bench.log"
        log.write_text("nothing\n")
        return ["parse", str(log), "--report-json", str(path)]
    if command == "import":
        return ["import", "benchmark-spark", str(path), "--out", str(tmp_path / "out")]
    if command == "validate-record":
        return ["validate-record", str(path)]
    raise AssertionError(command)


#: command -> (good content, malformed content and its message, size limit)
FILE_COMMANDS = {
    "validate": (GOOD_CAMPAIGN, b"name: [unclosed\n", "not valid YAML line", files.MAX_TEXT_BYTES),
    "run": (b"sparkfleet_campaign:\n  name: t\n", b"a: {b\n", "not valid YAML line", files.MAX_TEXT_BYTES),
    "run-inventory": (INVENTORY.encode(), None, None, files.MAX_TEXT_BYTES),
    "parse": (b"nothing\n", None, None, files.MAX_LOG_BYTES),
    "parse-report-json": (b"{}", None, None, files.MAX_LOG_BYTES),
    "import": (b'{"models": {}}', b'{"models": ', "not JSON (line 1", files.MAX_TEXT_BYTES),
    "validate-record": (b"{}", b"{x", "not JSON (line 1", files.MAX_TEXT_BYTES),
}


def _cases():
    for command, (_, bad_syntax, _, _) in FILE_COMMANDS.items():
        for kind in FILE_KINDS:
            if kind == "bad-syntax" and bad_syntax is None:
                continue  # a log has no syntax; a garbled report JSON is the parser's warning (test_parse_cli)
            if kind == "not-utf8" and command == "parse-report-json":
                continue  # ditto: report JSON content is the parser's to judge
            if kind == "directory" and command == "run-inventory":
                continue  # an inventory directory is a valid inventory
            yield pytest.param(command, kind, id=f"{command}-{kind}")


def _one_line_error(capsys, code, path) -> str:
    out = capsys.readouterr()
    assert code == 2, (code, out.out, out.err)
    assert "Traceback" not in out.err and "Traceback" not in out.out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert str(path) in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("command", "kind"), list(_cases()))
def test_every_command_names_an_unreadable_file_in_one_line(tmp_path, capsys, deny, command, kind):
    good, bad_syntax, syntax_message, limit = FILE_COMMANDS[command]
    path = _make(tmp_path, kind, "input", good, bad_syntax or b"", limit)
    if kind == "no-permission":
        deny.add(str(path))
    line = _one_line_error(capsys, main(_argv(command, path, tmp_path)), path)
    assert (syntax_message if kind == "bad-syntax" else EXPECT[kind]) in line, line


# ------------------------------------------------------------------------------- results directories

DIR_KINDS = ["missing", "a-file", "no-permission"]


def _results(tmp_path: Path, kind: str, name: str) -> Path:
    path = tmp_path / name
    if kind == "a-file":
        path.write_text("not a directory\n")
    elif kind == "no-permission":
        path.mkdir()
    return path


@pytest.mark.parametrize("command", ["report", "compare-baseline", "compare-current"])
@pytest.mark.parametrize("kind", DIR_KINDS)
def test_results_directory_commands_name_an_unusable_directory(tmp_path, capsys, deny, command, kind):
    bad = _results(tmp_path, kind, "results")
    if kind == "no-permission":
        deny.add(str(bad))
    other = tmp_path / "other"
    other.mkdir()
    argv = {"report": ["report", str(bad)], "compare-baseline": ["compare", str(bad), str(other)],
            "compare-current": ["compare", str(other), str(bad)]}[command]
    if command == "compare-current":  # the baseline is read first: give it records so the current is reached
        assert main(["import", "benchmark-spark", str(STUDY_JSON), "--out", str(other)]) == 0
        capsys.readouterr()
    line = _one_line_error(capsys, main(argv), bad)
    assert {"missing": "no such directory", "a-file": "is a file, not a", "no-permission": "permission denied"}[
        kind] in line


@pytest.mark.parametrize("command", ["report", "compare"])
@pytest.mark.parametrize("kind", ["directory", "not-utf8", "bad-syntax"])
def test_results_with_only_unreadable_records_are_exit_2_naming_each(tmp_path, capsys, command, kind):
    """A bad record.json is skipped with a line naming it; with none left the command is exit 2."""
    results = tmp_path / "results"
    run_dir = results / "c" / "h" / "runs" / "r"
    run_dir.mkdir(parents=True)
    record = _make(run_dir, kind, "record.json", b"{}", b"{not json", 0)
    other = tmp_path / "other"  # compare refuses one directory on both sides: the baseline is read first
    other.mkdir()
    argv = ["report", str(results)] if command == "report" else ["compare", str(results), str(other)]
    code = main(argv)
    out = capsys.readouterr()
    assert code == 2 and "Traceback" not in out.err, out.err
    assert str(record) in out.err and "no valid run records" in out.err.strip().splitlines()[-1]


def test_a_campaign_refused_by_validation_stops_run_before_ansible(tmp_path, capsys):
    extra = tmp_path / "campaign.yml"
    extra.write_text("sparkfleet_campaign:\n  name: t\n  models: [m]\n  environments: [native]\n"
                     "  workloads: [matmul]\n  cooldown: {threshold_c: -300}\n")
    inventory = tmp_path / "inv.ini"
    inventory.write_text(INVENTORY)
    code = main(["run", "-i", str(inventory), "-e", f"@{extra}", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and str(extra) in err and "campaign.cooldown.threshold_c: must not be negative" in err


def test_a_log_cut_mid_character_is_still_text(tmp_path, capsys):
    log = tmp_path / "bench.log"
    log.write_bytes("temperature 45 °C\n".encode() + "°".encode()[:1])
    assert main(["parse", str(log)]) == 1  # read, and not recognised: not a file error
    assert "kind: unknown" in capsys.readouterr().out


def test_bad_settings_in_an_extra_vars_file_stop_run_before_ansible(tmp_path, capsys):
    extra = tmp_path / "vars.yml"
    extra.write_text("sparkfleet_telemetry_interval_s: .nan\nsparkfleet_work_dir: relative\n")
    inventory = tmp_path / "inv.ini"
    inventory.write_text(INVENTORY)
    code = main(["run", "-i", str(inventory), "-e", f"@{extra}", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{extra}: sparkfleet_telemetry_interval_s: must be a finite number, got nan" in err
    assert f"{extra}: sparkfleet_work_dir: must be an absolute path" in err


@pytest.mark.parametrize("kind", ["missing", "fifo", "no-permission", "not-utf8"])
def test_doctor_names_an_unreadable_inventory_too(tmp_path, capsys, deny, kind):
    path = _make(tmp_path, kind, "input", INVENTORY.encode(), b"", 0)
    if kind == "no-permission":
        deny.add(str(path))
    line = _one_line_error(capsys, main(["doctor", "-i", str(path)]), path)
    assert EXPECT[kind] in line, line


@pytest.mark.parametrize("argv", [["fleet", "RESULTS", "--tolerance", "nan"],
                                  ["doctor", "-i", "INV", "--timeout", "inf"],
                                  ["doctor", "-i", "INV", "--max-skew=-inf"]])
def test_numeric_options_refuse_nan_and_infinity(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and "is not a finite number" in capsys.readouterr().err
