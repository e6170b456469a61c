"""result_files: several result files in one call, atomically, idempotently, check and diff mode."""

from __future__ import annotations

import os
import stat

from _ansible_modules import load_module, run_module

result_files = load_module("result_files")


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_creates_the_directory_and_writes_every_file(tmp_path):
    target = tmp_path / "results" / "c1" / "spark1"
    out = run_module(result_files, {"dir": str(target), "files": {"host.json": '{"a": 1}\n', "q.txt": "x\n"}})
    assert out["changed"] and out["written"] == ["host.json", "q.txt"] and out["unchanged"] == []
    assert (target / "host.json").read_text() == '{"a": 1}\n' and (target / "q.txt").read_text() == "x\n"
    assert _mode(target / "host.json") == 0o644 and _mode(target) == 0o755 and _mode(tmp_path / "results") == 0o755
    assert not [p for p in os.listdir(target) if p.startswith(".result_files.")]


def test_a_second_call_with_the_same_content_changes_nothing(tmp_path):
    args = {"dir": str(tmp_path / "d"), "files": {"a.json": "{}\n", "b.py": "print(1)\n"}}
    run_module(result_files, args)
    before = os.stat(tmp_path / "d" / "a.json").st_ino
    again = run_module(result_files, args)
    assert not again["changed"] and again["written"] == [] and again["unchanged"] == ["a.json", "b.py"]
    assert os.stat(tmp_path / "d" / "a.json").st_ino == before  # not rewritten


def test_only_the_changed_file_is_rewritten_and_a_wrong_mode_is_fixed(tmp_path):
    d = tmp_path / "d"
    run_module(result_files, {"dir": str(d), "files": {"a": "1\n", "b": "2\n"}})
    os.chmod(d / "b", 0o600)
    out = run_module(result_files, {"dir": str(d), "files": {"a": "one\n", "b": "2\n"}})
    assert out["written"] == ["a", "b"] and (d / "a").read_text() == "one\n" and _mode(d / "b") == 0o644


def test_check_mode_reports_and_writes_nothing_with_a_diff(tmp_path):
    d = tmp_path / "d"
    out = run_module(result_files, {"dir": str(d), "files": {"a": "new\n"}, "_ansible_diff": True}, check_mode=True)
    assert out["changed"] and out["written"] == ["a"] and not d.exists()
    path = str(d / "a")
    assert out["diff"] == [{"before_header": path, "after_header": path, "before": "", "after": "new\n"}]


def test_unicode_content_is_written_as_utf8(tmp_path):
    run_module(result_files, {"dir": str(tmp_path), "files": {"n.txt": "GPU \u00b0C \u2014 ok\n"}})
    assert (tmp_path / "n.txt").read_bytes() == "GPU \u00b0C \u2014 ok\n".encode()


def test_names_that_are_not_plain_file_names_are_refused_before_anything_is_written(tmp_path):
    for bad in ("../escape", "a/b", "..", "."):
        out = run_module(result_files, {"dir": str(tmp_path / "d"), "files": {"ok": "1\n", bad: "x"}})
        assert out["failed"] and bad in out["msg"] and "not plain file names" in out["msg"]
    assert not (tmp_path / "d").exists() and not (tmp_path / "escape").exists()


def test_content_that_is_not_text_is_refused_with_a_hint(tmp_path):
    out = run_module(result_files, {"dir": str(tmp_path), "files": {"host.json": {"a": 1}}})
    assert out["failed"] and "host.json" in out["msg"] and "to_nice_json" in out["msg"]


def test_a_file_where_the_directory_should_be_is_a_clear_error(tmp_path):
    (tmp_path / "d").write_text("")
    out = run_module(result_files, {"dir": str(tmp_path / "d"), "files": {"a": "1"}})
    assert out["failed"] and "is not a directory" in out["msg"]


def test_a_directory_where_a_file_should_be_is_a_clear_error(tmp_path):
    (tmp_path / "host.json").mkdir()
    out = run_module(result_files, {"dir": str(tmp_path), "files": {"a.json": "{}\n", "host.json": "{}\n"}})
    assert out["failed"] and out["msg"] == f"result_files: {tmp_path / 'host.json'}: is a directory"
    assert not (tmp_path / "a.json").exists()  # refused before anything was written
