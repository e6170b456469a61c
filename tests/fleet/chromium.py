"""The report as headless Chromium lays it out: its DOM after scripts ran, a section of it by id, and a screenshot
of a part of the page alone (to tell a rendered figure from a blank or broken image)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def run(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium on ``page`` with its own profile directory, no network of its own (no sync, updates)."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install -y chromium): cannot check the HTML report")
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", *args, page.as_uri()]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)


def dump_dom(page: Path, profile: Path) -> str:
    return run(page, profile, "--virtual-time-budget=5000", "--dump-dom").stdout


def section(dom: str, section_id: str) -> str:
    """The <section> whose element id is ``section_id``, up to its end (KeyError naming the id if absent)."""
    marker = f'id="{section_id}"'
    if marker not in dom:
        raise KeyError(f"no section {section_id} in the report")
    part = dom[dom.index(marker):]
    return part[:part.index("</section>")]


def colours_of(html_part: str, tmp_path: Path, name: str, size: str = "1400,2400") -> int:
    """How many distinct colours ``html_part``, alone on a page, shows in a screenshot (a figure that rendered
    shows hundreds; a blank or broken image a handful)."""
    import numpy as np
    from matplotlib import image as mpimg

    alone = tmp_path / f"{name}.html"
    alone.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{html_part}</body></html>")
    shot = tmp_path / f"{name}.png"
    run(alone, tmp_path / f"profile-{name}", f"--screenshot={shot}", f"--window-size={size}")
    pixels = mpimg.imread(shot)
    return len(np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0))
