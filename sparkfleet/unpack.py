"""Unpack a host's fetched results archive into the controller's results tree, safely.

A fetched tree comes from a machine we do not fully control: members with absolute paths, ``..``,
links or device files are refused, so nothing can land outside ``results/<campaign>/<host>/``. Files are
written to a temporary directory and moved into place, so an interrupted unpack never leaves half a run.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from sparkfleet.errors import UsageError
from sparkfleet.files import FileProblem, check_file


def _safe_member(member: tarfile.TarInfo, host: str) -> str | None:
    """The member's path relative to the host dir, or None to skip it; raises on hostile members."""
    name = member.name
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise UsageError(f"refusing archive member {name!r}: absolute path or '..'")
    if member.issym() or member.islnk():
        raise UsageError(f"refusing archive member {name!r}: links are not allowed in fetched results")
    if not (member.isfile() or member.isdir()):
        raise UsageError(f"refusing archive member {name!r}: not a regular file or directory")
    parts = [p for p in path.parts if p not in ("", ".")]
    if not parts or parts[0] != host:
        raise UsageError(f"refusing archive member {name!r}: outside the host directory {host!r}")
    return "/".join(parts[1:])


def unpack_host_archive(archive: str | os.PathLike[str], campaign_dir: str | os.PathLike[str], host: str) -> int:
    """Merge ``archive`` (a tar of ``<host>/...``) into ``campaign_dir/<host>/``. Returns files written.

    Existing files are replaced only by the archive's newer copy of the same path; files the archive does
    not have are kept (nothing already collected is lost).
    """
    if not host or "/" in host or host in (".", ".."):
        raise UsageError(f"bad host name {host!r}")
    check_file(archive, "results archive")  # missing, a directory, a FIFO, no permission: one line naming it
    target = Path(campaign_dir) / host
    target.mkdir(parents=True, exist_ok=True)
    written = 0
    try:
        tar = tarfile.open(archive, "r:*")  # noqa: SIM115 (closed by the with below)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise FileProblem(archive, f"not a tar archive ({str(exc).splitlines()[0].rstrip(':')})") from None
    with tar, tempfile.TemporaryDirectory(dir=target, prefix=".unpack-") as tmp:
        members = []
        for member in tar.getmembers():  # check every member before writing any
            rel = _safe_member(member, host)
            if rel and member.isfile():
                members.append((member, rel))
        for member, rel in members:
            staged = Path(tmp) / rel
            staged.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            if src is None:
                continue
            with src, open(staged, "wb") as out:
                shutil.copyfileobj(src, out)
            os.utime(staged, (member.mtime, member.mtime))
        for _member, rel in members:
            final = target / rel
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(Path(tmp) / rel, final)
            written += 1
    return written
