"""Fetched result trees cannot escape results/<campaign>/<host>/; each run lands whole, never over a newer copy.

The unpack is the collection's results_unpack action (plugins/action/results_unpack.py) over
plugins/plugin_utils/unpack.py, which the collection ships without the sparkfleet package."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import _ansible_modules  # noqa: F401  (the collection loader)
import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.sparkfleet.bench.plugins.action import results_unpack
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.unpack import (
    STAGING_PREFIX,
    UnpackError,
    unpack_host_archive,
)
from sparkfleet.load import load_runs


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
    with pytest.raises(UnpackError, match=message):
        unpack_host_archive(arch, campaign, "h1")
    assert not (campaign / "h1/runs/ok/record.json").exists()


# ------------------------------------------------------------------ atomic per run, never older over newer
# (issue 23: a controller killed while unpacking left a staging directory that later reports counted)

ROOT = Path(__file__).resolve().parents[4]


def _record(host: str, i: int, version: int) -> dict:
    rid = contract.run_id("c", host, "m", "native", "w", i)
    return {"schema_version": 1, "run_id": rid, "campaign": "c", "host": host, "model": "m",
            "environment": "native", "environment_kind": "native", "workload": "w", "iteration": i,
            "order_index": i, "status": "ok", "exit_code": 0,
            "started_utc": f"2026-01-0{version}T00:00:00Z", "ended_utc": f"2026-01-0{version}T00:10:00Z",
            "metrics": {"output_tok_s": 100.0 * version + i}, "metric_sources": {}}


def _host_archive(tmp_path: Path, name: str, version: int, runs: int = 30, log_bytes: int = 1000,
                  host: str = "h1", schema_version: int = 1) -> Path:
    """A host's results as collect packs them: runs/<run_id>/{record.json, bench.log} and ledger.jsonl."""
    path = tmp_path / name
    with tarfile.open(path, "w:gz") as tar:
        def add(rel: str, data: bytes, mtime: float) -> None:
            info = tarfile.TarInfo(f"{host}/{rel}")
            info.size, info.mtime = len(data), mtime
            tar.addfile(info, io.BytesIO(data))
        ledger = b""
        for i in range(1, runs + 1):
            rec = {**_record(host, i, version), "schema_version": schema_version}
            add(f"runs/{rec['run_id']}/record.json", json.dumps(rec).encode(), 1e9 + version)
            # random bytes: gzip cannot shrink them, so a large log makes the unpack take a while
            add(f"runs/{rec['run_id']}/bench.log", f"v{version}\n".encode() + os.urandom(log_bytes), 1e9 + version)
            ledger += json.dumps({"event": "finished", "run_id": rec["run_id"], "status": "ok"}).encode() + b"\n"
        add("ledger.jsonl", ledger * version, 1e9 + version)
    return path


def _versions(campaign: Path) -> dict[str, int]:
    """run dir -> its version; asserts that record and log of every run are of one version (no half run)."""
    out = {}
    for run in sorted((campaign / "h1" / "runs").iterdir()):
        rec = json.loads((run / "record.json").read_text())
        version = int(rec["started_utc"][9])
        assert (run / "bench.log").read_bytes().startswith(f"v{version}\n".encode()), run
        out[run.name] = version
    return out


def test_a_run_directory_is_replaced_as_a_unit_and_never_by_an_older_copy(tmp_path):
    campaign = tmp_path / "results" / "c"
    new, old = _host_archive(tmp_path, "new.tgz", 2), _host_archive(tmp_path, "old.tgz", 1)
    unpack_host_archive(new, campaign, "h1")
    assert set(_versions(campaign).values()) == {2}
    assert unpack_host_archive(old, campaign, "h1") == 0  # nothing older replaces the newer copy
    assert set(_versions(campaign).values()) == {2}
    ledger_after_new = (campaign / "h1" / "ledger.jsonl").read_bytes()
    assert ledger_after_new.count(b"\n") == 60  # the older (shorter) ledger did not replace it
    assert not [p for p in (campaign / "h1").iterdir() if p.name.startswith(".")]  # no staging left


def test_an_older_copy_is_replaced_by_a_newer_one_keeping_files_only_the_controller_has(tmp_path):
    campaign = tmp_path / "results" / "c"
    unpack_host_archive(_host_archive(tmp_path, "old.tgz", 1), campaign, "h1")
    run = sorted((campaign / "h1" / "runs").iterdir())[0]
    (run / "notes.txt").write_text("kept")
    unpack_host_archive(_host_archive(tmp_path, "same.tgz", 1), campaign, "h1")
    assert (run / "notes.txt").read_text() == "kept"  # the same attempt: extra files kept
    unpack_host_archive(_host_archive(tmp_path, "new.tgz", 2), campaign, "h1")
    assert set(_versions(campaign).values()) == {2}


def test_a_copy_whose_record_no_reader_may_use_never_replaces_a_collected_run(tmp_path):
    """The unpack reads a record's time as every reader does (record.checked_record): a record of a format
    version this controller cannot read is no record, so it never counts as newer than a collected one."""
    campaign = tmp_path / "results" / "c"
    unpack_host_archive(_host_archive(tmp_path, "old.tgz", 1, runs=3), campaign, "h1")
    future = _host_archive(tmp_path, "future.tgz", 2, runs=3, schema_version=contract.SCHEMA_VERSION + 1)
    assert unpack_host_archive(future, campaign, "h1") == 1  # the ledger only
    assert set(_versions(campaign).values()) == {1}


def test_staging_directories_are_never_results_and_are_named(tmp_path):
    campaign = tmp_path / "results" / "c"
    unpack_host_archive(_host_archive(tmp_path, "a.tgz", 1, runs=3), campaign, "h1")
    stale = campaign / "h1" / f"{STAGING_PREFIX}999999999-x" / "new" / "runs"
    for older in (stale, campaign / "h1" / ".unpack-abc" / "runs"):  # also the prefix earlier versions used
        for run in (campaign / "h1" / "runs").iterdir():
            (older / run.name).mkdir(parents=True)
            (older / run.name / "record.json").write_text((run / "record.json").read_text())
    loaded = load_runs(campaign)
    assert len(loaded.runs) == 3 and not loaded.problems  # no duplicate warnings, no stale copies
    assert sorted(p.name for p in loaded.accounting.leftovers) == sorted([".unpack-abc",
                                                                          f"{STAGING_PREFIX}999999999-x"])
    unpack_host_archive(_host_archive(tmp_path, "b.tgz", 1, runs=3), campaign, "h1")  # the next unpack clears them
    assert not load_runs(campaign).accounting.leftovers


def _unpack_cmd(archive: Path, campaign: Path) -> list[str]:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import unpack; "
            "unpack.unpack_host_archive(sys.argv[2], sys.argv[3], 'h1')")
    return [sys.executable, "-c", code, str(ROOT / "plugins" / "plugin_utils"), str(archive), str(campaign)]


def test_an_unpack_killed_at_random_points_leaves_whole_runs_and_no_counted_staging(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'plugins' / 'module_utils'}"}
    old = _host_archive(tmp_path, "old.tgz", 1, runs=40, log_bytes=20000)
    new = _host_archive(tmp_path, "new.tgz", 2, runs=40, log_bytes=20000)
    probe = tmp_path / "probe" / "c"
    unpack_host_archive(old, probe, "h1")
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "import sys, tarfile, ctypes"], env=env, check=True)
    startup = time.monotonic() - start  # kill points are drawn after most of the interpreter's start
    start = time.monotonic()
    subprocess.run(_unpack_cmd(new, probe), env=env, check=True, capture_output=True)
    full = time.monotonic() - start
    rng = random.Random(23)
    for attempt in range(6):
        campaign = tmp_path / f"k{attempt}" / "c"
        unpack_host_archive(old, campaign, "h1")
        proc = subprocess.Popen(_unpack_cmd(new, campaign), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.8 * startup, full))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        versions = _versions(campaign)  # every run whole: its record and its log of one version
        assert len(versions) == 40
        loaded = load_runs(campaign)
        assert len(loaded.runs) == 40 and not loaded.problems, loaded.problems  # no staging copy counted
        assert sorted(loaded.runs["run_id"]) == sorted(versions)
        subprocess.run(_unpack_cmd(new, campaign), env=env, check=True, capture_output=True)
        assert set(_versions(campaign).values()) == {2}
        assert not load_runs(campaign).accounting.leftovers


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo", "garbage"])
def test_an_unreadable_or_broken_archive_is_one_line_naming_it(tmp_path, kind):
    path = tmp_path / "h1.tgz"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "garbage":
        path.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(UnpackError) as exc:
        unpack_host_archive(path, tmp_path / "c", "h1")
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "c" / "h1" / "runs").exists()


def _action(check_mode=False, **args):
    action = results_unpack.ActionModule.__new__(results_unpack.ActionModule)
    action._task = SimpleNamespace(args=args, check_mode=check_mode)
    return action


@pytest.fixture
def no_base_run(monkeypatch):
    monkeypatch.setattr(results_unpack.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})


def test_the_action_unpacks_for_the_inventory_host_and_fails_on_hostile_members(tmp_path, no_base_run):
    campaign = tmp_path / "results" / "c"
    good = _host_archive(tmp_path, "good.tgz", 1, runs=2)
    out = _action(archive=str(good), campaign_dir=str(campaign)).run(task_vars={"inventory_hostname": "h1"})
    assert out["changed"] is True and out["files"] == 5 and out["dest"] == f"{campaign}/h1"
    assert not good.exists()  # the fetched copy goes once unpacked: each run fetches one of its own name
    good = _host_archive(tmp_path, "good.tgz", 1, runs=2)
    again = _action(archive=str(good), campaign_dir=str(campaign), host="h1").run(task_vars={})
    assert again["files"] == 5 and again["changed"] is True  # the same copies again: not older, so installed
    hostile = _archive(tmp_path, [("h1/runs/r/link", "symlink", "/etc/passwd")])
    with pytest.raises(AnsibleActionFail, match="links are not allowed"):
        _action(archive=str(hostile), campaign_dir=str(campaign), host="h1").run(task_vars={})
    assert Path(hostile).exists()  # a refused archive is kept, to be looked at
    with pytest.raises(AnsibleActionFail, match="campaign_dir"):
        _action(archive=str(_host_archive(tmp_path, "good.tgz", 1, runs=2))).run(task_vars={})
    dry = _action(check_mode=True, archive=str(tmp_path / "absent.tgz"), campaign_dir=str(tmp_path / "x"))
    assert dry.run(task_vars={"inventory_hostname": "h1"})["changed"] is False
    assert not (tmp_path / "x").exists()
