"""Fetched result trees cannot escape results/<campaign>/<host>/."""

from __future__ import annotations

import io
import tarfile

import pytest

from sparkfleet.errors import UsageError
from sparkfleet.unpack import unpack_host_archive


def _archive(tmp_path, members):
    path = tmp_path / "h.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
    return path


def test_a_normal_tree_is_merged_and_old_files_kept(tmp_path):
    campaign = tmp_path / "results" / "c"
    (campaign / "h1" / "runs" / "old").mkdir(parents=True)
    (campaign / "h1" / "runs" / "old" / "record.json").write_text("{}")
    arch = _archive(tmp_path, [("h1", "dir", b""), ("h1/runs/r1/record.json", "file", b'{"a": 1}'),
                               ("h1/ledger.jsonl", "file", b"x\n")])
    assert unpack_host_archive(arch, campaign, "h1") == 2
    assert (campaign / "h1/runs/r1/record.json").read_text() == '{"a": 1}'
    assert (campaign / "h1/runs/old/record.json").exists()


@pytest.mark.parametrize(("members", "message"), [
    ([("h1/../../etc/x", "file", b"x")], "absolute path or '..'"),
    ([("/etc/cron.d/x", "file", b"x")], "absolute path or '..'"),
    ([("h1/runs/r/link", "symlink", "/etc/passwd")], "links are not allowed"),
    ([("h1/fifo", "fifo", b"")], "not a regular file"),
    ([("h2/runs/r/record.json", "file", b"{}")], "outside the host directory"),
])
def test_hostile_members_are_refused_before_anything_is_written(tmp_path, members, message):
    campaign = tmp_path / "results" / "c"
    arch = _archive(tmp_path, [("h1/runs/ok/record.json", "file", b"{}"), *members])
    with pytest.raises(UsageError, match=message):
        unpack_host_archive(arch, campaign, "h1")
    assert not (campaign / "h1/runs/ok/record.json").exists()
