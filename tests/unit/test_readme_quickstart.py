"""The README's quick start works on a root-only machine without sudo (issue 23): it says how to run
bootstrap.sh as root, and bootstrap.sh itself needs no sudo."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _quick_start() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("## Quick start")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_the_quick_start_says_how_to_run_bootstrap_as_root_without_sudo():
    section = _quick_start()
    for mode in ("bench", "test"):
        assert re.search(rf"sudo \./bootstrap\.sh {mode}\b", section)
        # the same command without sudo, for a machine where the user is root and sudo is absent
        assert re.search(rf"(?<!sudo )`\./bootstrap\.sh {mode}`", section), mode
    assert "root" in section and "without `sudo`" in section


def test_bootstrap_itself_never_calls_sudo():
    code = [line for line in (REPO / "bootstrap.sh").read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if re.search(r"\bsudo\b", line)]
