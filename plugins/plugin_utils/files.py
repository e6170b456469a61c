"""Reading the files a user names on the command line: one line naming the file and the problem, never a traceback.

Every way a file can be unreadable - missing, a directory (or another non-regular file), no permission, too
large, not UTF-8, not YAML / not JSON - is a :class:`~sparkfleet.errors.UsageError` ``FILE: problem``, which
the CLI prints as one line with exit code 2. Every command that reads a named file goes through here.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError

#: A campaign, an extra-vars file or a published results file is small; a log can be large.
MAX_TEXT_BYTES = 16 * 1024 * 1024
MAX_LOG_BYTES = 1024 * 1024 * 1024


class FileProblem(UsageError):
    """``PATH: problem``; ``path`` and ``problem`` kept apart for callers that name the file their own way."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        self.path, self.problem = str(path), problem
        super().__init__(f"{path}: {problem}")


def _a(what: str) -> str:
    return ("an " if what[:1].lower() in "aeiou" else "a ") + what


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


def _open_regular(name: str, what: str) -> tuple[int, os.stat_result]:
    """An open descriptor and the stat of ``name`` as a regular file; FileProblem naming why not. The caller
    closes the descriptor."""
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except FileNotFoundError:
        raise FileProblem(name, "no such file") from None
    except PermissionError:
        raise FileProblem(name, f"permission denied ({what})") from None
    except IsADirectoryError:
        raise FileProblem(name, f"is a directory, not {_a(what)}") from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise FileProblem(name, "no such file (a path component is not a directory)") from None
        raise FileProblem(name, f"cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise FileProblem(name, f"is a directory, not {_a(what)}")
        if not stat.S_ISREG(st.st_mode):
            kind = next((word for test, word in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                                                 (stat.S_ISCHR, "a character device"),
                                                 (stat.S_ISBLK, "a block device")) if test(st.st_mode)),
                        "not a regular file")
            raise FileProblem(name, f"is not a regular file ({kind}), not {_a(what)}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bytes(path: str | os.PathLike, what: str = "file", max_bytes: int = MAX_LOG_BYTES) -> bytes:
    """The file's bytes; UsageError ``PATH: problem`` when it is missing, not a regular file, unreadable or
    larger than ``max_bytes``."""
    name = str(path)
    fd, st = _open_regular(name, what)
    try:
        if st.st_size > max_bytes:
            raise FileProblem(name, f"too large for {_a(what)} ({_mib(st.st_size)}, at most {_mib(max_bytes)})")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:  # grew while being read
                raise FileProblem(name, f"too large for {_a(what)} (more than {_mib(max_bytes)})")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise FileProblem(name, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, what: str = "file", max_bytes: int = MAX_TEXT_BYTES,
              cut_tail_ok: bool = False) -> str:
    """The file as UTF-8 text (a leading BOM dropped); UsageError naming the file and the first bad byte.

    ``cut_tail_ok``: a log cut mid-character by a killed writer (an incomplete sequence in its last 3 bytes)
    is still text."""
    return decode_text(read_bytes(path, what, max_bytes), path, what, cut_tail_ok)


def decode_text(data: bytes, path: str | os.PathLike, what: str = "file", cut_tail_ok: bool = False) -> str:
    """``data`` (the bytes of ``path``) as UTF-8 text; see :func:`read_text`."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if cut_tail_ok and exc.start >= len(data) - 3 and "end of data" in exc.reason:
            return data[: exc.start].decode("utf-8-sig")
        line = data[: exc.start].count(b"\n") + 1
        raise FileProblem(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}); "
                          f"{_a(what)} must be UTF-8") from None


def read_yaml(path: str | os.PathLike, what: str = "YAML file", max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """The file's YAML document; UsageError ``PATH: not valid YAML line L column C: problem``."""
    import yaml  # noqa: PLC0415 - only the commands that read YAML pay for it

    text = read_text(path, what, max_bytes)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise FileProblem(path, f"not valid YAML{where}: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. a timestamp out of range
        raise FileProblem(path, f"not valid YAML: {exc}") from None


def read_json(path: str | os.PathLike, what: str = "JSON file", max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """The file's JSON document; UsageError ``PATH: not JSON line L column C: problem``."""
    text = read_text(path, what, max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileProblem(path, f"not JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise FileProblem(path, "not JSON (nested too deeply)") from None


def check_dir(path: str | os.PathLike, what: str = "results directory") -> Path:
    """``path`` as a readable directory; UsageError ``PATH: problem`` (missing, a file, no permission)."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise FileProblem(p, f"no such directory ({what})") from None
    except PermissionError:
        raise FileProblem(p, f"permission denied ({what})") from None
    except OSError as exc:
        raise FileProblem(p, f"cannot open: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise FileProblem(p, f"is a file, not {_a(what)}")
    if not os.access(p, os.R_OK | os.X_OK):
        raise FileProblem(p, f"permission denied ({what})")
    return p
