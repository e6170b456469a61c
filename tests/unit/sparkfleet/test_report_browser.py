"""The HTML report opened in headless Chromium: the plots must actually render (not blank, not broken)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg
from test_report import build_fleet  # sibling test module: the same synthetic fleet

from sparkfleet.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="chromium not installed (apt-get install -y chromium) - cannot render")


def screenshot(page: Path, out: Path, profile: Path, size: str = "1400,5000") -> np.ndarray:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={out}",
               f"--window-size={size}", page.as_uri()]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    assert out.is_file() and out.stat().st_size > 0
    return mpimg.imread(out)


def distinct_colours(pixels: np.ndarray) -> int:
    rgb = (pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
    return len(np.unique(rgb, axis=0))


def test_plots_render_in_chromium(tmp_path: Path) -> None:
    results = build_fleet(tmp_path / "synthetic")
    assert main(["report", str(results)]) == 0
    page = results / "report" / "index.html"
    # A page holding only the plots, so the screenshot is mostly plot area.
    html = page.read_text()
    figures = html[html.index("<figure"):html.rindex("</figure>") + len("</figure>")]
    plots_only = tmp_path / "plots.html"
    plots_only.write_text(f"<!DOCTYPE html><html><body style='margin:0'>{figures}</body></html>")

    full = screenshot(page, tmp_path / "report.png", tmp_path / "profile-a")
    plots = screenshot(plots_only, tmp_path / "plots.png", tmp_path / "profile-b", "1400,2400")
    assert full.shape[0] >= 1000 and full.shape[1] >= 1000
    # A blank page has 1 colour, text-only pages a few dozen anti-aliasing greys; rendered matplotlib
    # figures (coloured boxes, bars, scatter points) give hundreds.
    assert distinct_colours(plots) > 200
    top = plots[: plots.shape[0] // 3]
    assert distinct_colours(top) > 100
    assert (top[..., :3] < 0.95).any(axis=-1).mean() > 0.02  # ink on the canvas, not a white sheet


def dump_dom(page: Path, profile: Path) -> str:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", "--dump-dom", page.as_uri()]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout


def test_verdict_block_is_the_first_content(tmp_path: Path) -> None:
    """On the GPU example as committed on 2026-11-21 (tests/fixtures/records-v1), as the browser lays it out: the
    first thing after the title is the verdict block, and it fills the first screen (1280x900) with its lines
    and the start of its figure."""
    import re
    import shutil

    from _shared import REPO

    results = tmp_path / "gpu"
    fixture = REPO / "tests" / "fixtures" / "records-v1" / "gpu"
    shutil.copytree(fixture, results, ignore=shutil.ignore_patterns("report"))
    assert main(["report", str(results)]) == 0
    page = results / "report" / "index.html"
    dom = dump_dom(page, tmp_path / "profile-dom")
    body = dom[dom.index("<body>") + len("<body>"):]
    children = re.findall(r"<(h1|section)\b[^>]*>", body)
    assert children[:2] == ["h1", "section"]
    first = body[body.index("<section"):body.index("</section>")]
    assert first.startswith('<section class="verdicts"')
    items = re.findall(r'<li class="(different|same|undetermined)"><span class="badge">([^<]+)</span>'
                       r'<strong class="headline">([^<]+)</strong>', first)
    assert [i[2].split(":")[0] for i in items] == ["llama-1b / T1", "llama-1b / T4", "llama-1b / T6",
                                                   "llama-1b / matmul"]
    assert all(outcome == "undetermined" for outcome, _, _ in items)
    assert '<figure id="fig-effects"' in first  # the first figure answers the first verdict

    shot = screenshot(page, tmp_path / "first-screen.png", tmp_path / "profile-shot", "1280,900")
    rgb = (shot[..., :3] * 255).round().astype(int)
    verdict_background = (rgb == (0xF6, 0xF8, 0xFA)).all(axis=-1)  # ul.verdicts li
    rows = np.flatnonzero(verdict_background.mean(axis=1) > 0.5)
    assert rows.size > 100 and rows.min() < 250 and rows.max() < 600  # four verdict lines, near the top
    below = rgb[rows.max() + 40:]
    assert distinct_colours(below / 255.0) > 100  # the effects figure starts on the first screen
