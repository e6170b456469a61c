# Copyright: sparkfleet contributors
# Apache-2.0
"""The one atomic file writer of the host code (and of the controller, ``sparkfleet_host.contract.textfile``).

:func:`write_atomic` writes a whole file so that a reader (or a crash) never sees half of it: a temporary
file beside it, fsync, the mode set, then a rename over it. Every module and module_utils file that replaces
a file writes through it.

:func:`write_text_if_changed` is for records whose ``changed`` must mean "the file is different now" (a
module's result, check mode): the content is compared first and written only when it differs.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Dict, Optional, Tuple, Union


def read_text(path: str) -> Optional[str]:
    """The file's text, or None when there is no such file."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def read_json_object(path: str) -> Optional[Dict[str, Any]]:
    """The file's JSON object, or None when it is missing, unreadable, not JSON or not an object."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_text_if_changed(path: str, text: str, check_mode: bool = False, mode: int = 0o644,
                          dir_mode: int = 0o755) -> Tuple[bool, Optional[str]]:
    """(changed, the text before or None): write ``text`` to ``path`` (with ``mode``) unless it already holds
    exactly that; missing directories are created with ``dir_mode`` (less the umask). ``check_mode``: only
    tell whether it would change."""
    before = read_text(path)
    if before == text:
        return False, before
    if check_mode:
        return True, before
    write_atomic(path, text, mode=mode, dir_mode=dir_mode)
    return True, before


def write_atomic(path: "Union[str, os.PathLike[str]]", data: Union[str, bytes], mode: int = 0o644,
                 dir_mode: int = 0o755) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) so that a reader or a crash sees the old
    file or the new one, never a part: a temporary file in the same directory, fsync, ``mode``, rename.
    Missing directories are created with ``dir_mode`` (less the umask). On any failure the temporary file
    goes and ``path`` is left as it was."""
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=dir_mode, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
