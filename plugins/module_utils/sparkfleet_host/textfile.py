# Copyright: sparkfleet contributors
# Apache-2.0
"""Write a small text file (a JSON record) only when its content changes, atomically.

For records whose ``changed`` must mean "the file is different now" (a module's result, check mode): the
content is compared first, then written to a temporary file beside it and renamed over it, so a reader (or a
crash) never sees half a file. The controller can import it too (``sparkfleet_host.textfile``).

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
import tempfile
from typing import Optional, Tuple


def read_text(path: str) -> Optional[str]:
    """The file's text, or None when there is no such file."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


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
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=dir_mode, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True, before
