# Copyright: sparkfleet contributors
# Apache-2.0
"""Unpack a host's fetched results archive into the controller's results tree, safely and atomically.

Used by the results_unpack action (plugins/action/results_unpack.py) on the controller. Standard library
and the run-record contract only (module_utils record.py: a record is read as every reader reads it): the
collection does not depend on the sparkfleet package (whose loader, ``sparkfleet.load``, imports the staging
directory names below from here).

A fetched tree comes from a machine we do not fully control: members with absolute paths, ``..``,
links or device files are refused, so nothing can land outside ``results/<campaign>/<host>/``.

Atomic per run: the whole archive is first written into a staging directory inside the host directory
(``.sparkfleet-staging-<pid>-*``, the same file system), then each run directory is moved into place with
one rename (an existing copy is swapped out with one ``renameat2(RENAME_EXCHANGE)`` where the kernel has it),
and each host-level file with one ``os.replace``. A controller killed at any point leaves every run
directory either as it was or as the archive has it, never half of each; what is left in the staging
directory is never read as results (the report's loader skips :data:`STAGING_PREFIXES` and names such
leftovers) and the next unpack of that host removes it.

Never older over newer: a run directory already collected is replaced only by a copy of the same run that
is not older (its record's ``ended_utc``; without records, the files' modification times); a host-level file
only by a copy not older (``ledger.jsonl``, append-only: not shorter; other files: modification time).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import errno
import json
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.ledger import LEDGER_NAME
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import (
    RECORD_NAME,
    checked_record,
)

#: Names of staging directories (the current one, and the ``tempfile`` prefix earlier versions used):
#: never results. ``sparkfleet.load`` skips them and names them as leftovers.
STAGING_PREFIX = ".sparkfleet-staging-"
STAGING_PREFIXES = (STAGING_PREFIX, ".unpack-")
_TAR_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error)


class UnpackError(Exception):
    """One line naming what is wrong: a hostile member, a bad host name, an unreadable or broken archive."""


def check_file(path, what: str) -> None:
    """``path`` is a readable regular file (not read: an archive may be large); UnpackError naming it otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UnpackError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise UnpackError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UnpackError(f"{path}: a directory, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise UnpackError(f"{path}: not a regular file ({what})")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UnpackError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    os.close(fd)


def _safe_member(member: tarfile.TarInfo, host: str) -> str | None:
    """The member's path relative to the host dir, or None to skip it; raises on hostile members."""
    name = member.name
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise UnpackError(f"refusing archive member {name!r}: absolute path or '..'")
    if member.issym() or member.islnk():
        raise UnpackError(f"refusing archive member {name!r}: links are not allowed in fetched results")
    if not (member.isfile() or member.isdir()):
        raise UnpackError(f"refusing archive member {name!r}: not a regular file or directory")
    parts = [p for p in path.parts if p not in ("", ".")]
    if not parts or parts[0] != host:
        raise UnpackError(f"refusing archive member {name!r}: outside the host directory {host!r}")
    if any(p.startswith(STAGING_PREFIXES) for p in parts[1:]):
        raise UnpackError(f"refusing archive member {name!r}: a staging directory name")
    return "/".join(parts[1:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_staging(host_dir: Path) -> None:
    """Remove staging directories under ``host_dir`` that no live unpack owns."""
    try:
        entries = list(os.scandir(host_dir))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(STAGING_PREFIXES) or not entry.is_dir(follow_symlinks=False):
            continue
        owner = entry.name[len(STAGING_PREFIX):].split("-", 1)[0] if entry.name.startswith(STAGING_PREFIX) else ""
        if owner.isdigit() and int(owner) != os.getpid() and _pid_alive(int(owner)):
            continue  # another unpack of this host is running now
        shutil.rmtree(entry.path, ignore_errors=True)


def _ended(run_dir: Path) -> datetime.datetime | None:
    """The record's ended_utc (or started_utc) as an aware datetime; None without a readable, valid record."""
    try:
        data = checked_record(json.loads((run_dir / RECORD_NAME).read_bytes()))
    except (OSError, ValueError):  # broken JSON, or a record no reader may use (RecordError)
        return None
    for key in ("ended_utc", "started_utc"):
        value = data.get(key)
        if isinstance(value, str):
            try:
                stamp = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.timezone.utc)
    return None


def _newest_mtime(run_dir: Path) -> float:
    newest = 0.0
    for dirpath, _dirs, files in os.walk(run_dir):
        for name in files:
            with contextlib.suppress(OSError):  # a file removed meanwhile
                newest = max(newest, os.stat(os.path.join(dirpath, name), follow_symlinks=False).st_mtime)
    return newest


def _count_files(path: Path) -> int:
    return sum(len(files) for _d, _s, files in os.walk(path))


def _not_older_run(staged: Path, existing: Path) -> tuple[bool, bool]:
    """(install the staged copy, it is the same attempt: keep the existing copy's extra files)."""
    new, old = _ended(staged), _ended(existing)
    if new is not None and old is not None:
        return new >= old, new == old
    if old is not None:  # the collected copy has a record, the host's has none (yet): keep what we have
        return False, False
    if new is not None:
        return True, False
    return _newest_mtime(staged) >= _newest_mtime(existing), True


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the system has no such call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.renameat2
    except (OSError, AttributeError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if call(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _install_run(staged: Path, final: Path, staging: Path) -> int:
    """Move one staged run directory into place as a unit; returns the files it brought (0: kept the old)."""
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staged, final)
        return _count_files(final)
    if not final.is_dir() or final.is_symlink():
        raise UnpackError(f"{final}: not a run directory; move it aside and collect again")
    install, same = _not_older_run(staged, final)
    if not install:
        return 0
    if same:  # the same attempt: files collected earlier that the host no longer has are kept
        for dirpath, _dirs, files in os.walk(final):
            rel = Path(dirpath).relative_to(final)
            for name in files:
                if not (staged / rel / name).exists():
                    (staged / rel).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(Path(dirpath) / name, staged / rel / name)
    count = _count_files(staged)
    if not _exchange(staged, final):  # two renames: a kill between them leaves both copies in staging
        os.rename(final, staging / f"old-{final.name}")
        os.rename(staged, final)
    return count


def _install_file(staged: Path, final: Path) -> int:
    """Replace one host-level file unless the collected copy is newer; returns 1 when replaced."""
    if final.exists():
        if final.is_dir():
            raise UnpackError(f"{final}: a directory where the archive has a file; move it aside and collect again")
        new, old = staged.stat(), final.stat()
        older = new.st_size < old.st_size if final.name == LEDGER_NAME else new.st_mtime < old.st_mtime
        if older:
            return 0
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, final)
    return 1


def unpack_host_archive(archive: str | os.PathLike[str], campaign_dir: str | os.PathLike[str], host: str) -> int:
    """Merge ``archive`` (a tar of ``<host>/...``) into ``campaign_dir/<host>/``. Returns files written.

    Each run directory is installed as a unit and only over an older copy of it; files the archive does
    not have are kept (nothing already collected is lost)."""
    if not host or "/" in host or host in (".", "..") or host.startswith(STAGING_PREFIXES):
        raise UnpackError(f"bad host name {host!r}")
    check_file(archive, "results archive")  # missing, a directory, a FIFO, no permission: one line naming it
    target = Path(campaign_dir) / host
    try:
        tar = tarfile.open(archive, "r:*")  # noqa: SIM115 (closed by the with below)
        with tar:
            members = []
            for member in tar.getmembers():  # check every member before writing any
                rel = _safe_member(member, host)
                if rel and member.isfile():
                    members.append((member, rel))
            target.mkdir(parents=True, exist_ok=True)
            remove_stale_staging(target)
            staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=target))
            try:
                for member, rel in members:
                    staged = staging / "new" / rel
                    staged.parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as src, open(staged, "wb") as out:  # a regular file: never None
                        shutil.copyfileobj(src, out)
                    os.utime(staged, (member.mtime, member.mtime))
                return _install(staging, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except _TAR_ERRORS as exc:
        if isinstance(exc, OSError) and not isinstance(exc, (tarfile.TarError, EOFError)) and exc.filename:
            raise
        reason = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
        raise UnpackError(f"{archive}: not a tar archive, or cut short ({reason})") from None


def _install(staging: Path, target: Path) -> int:
    new = staging / "new"
    written = 0
    runs = new / "runs"
    if runs.is_dir():
        for entry in sorted(runs.iterdir()):
            if entry.is_dir():
                written += _install_run(entry, target / "runs" / entry.name, staging)
            else:
                written += _install_file(entry, target / "runs" / entry.name)
    for dirpath, _dirs, files in os.walk(new):
        if Path(dirpath) == runs or runs in Path(dirpath).parents:
            continue
        for name in sorted(files):
            staged = Path(dirpath) / name
            written += _install_file(staged, target / staged.relative_to(new))
    return written
