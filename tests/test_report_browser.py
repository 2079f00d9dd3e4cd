"""The HTML pages in a real headless Chromium: the report renders, every image loads,
and no request leaves the file (a screenshot of the first screen is kept); the report,
compare.html, summary.html and the gallery, made from one pipeline run by the commands
a user runs, open at desktop and phone width without a console error or a sideways
scroll (wide tables scroll in their own box)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CHROMIUM, CHROMIUM_ARGS, REPO, watched_page
from synthetic import result_folder

ARTIFACTS = REPO / "test-artifacts"
#: viewport widths: a desktop window and a phone
WIDTHS = (1280, 400)

pytestmark = [
    pytest.mark.pipeline,
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None,
                       reason="chromium not installed (Debian package chromium; CI installs it)"),
]


def test_report_renders_offline_with_every_image(tree):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    report = tree / "results" / "tiny" / "report.html"
    requests: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report.as_uri(), wait_until="load")
            images = page.evaluate(
                "Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])")
            title = page.title()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report-first-screen.png"))
        finally:
            browser.close()
    assert title == "perfgrid report: tiny"
    assert len(images) >= 2
    assert all(complete and width > 0 for _, complete, width in images), images
    outside = [u for u in requests if not u.startswith(("file://", "data:"))]
    assert outside == []
    assert Path(ARTIFACTS / "report-first-screen.png").stat().st_size > 10_000


def cli(*args: str | Path) -> None:
    done = subprocess.run([sys.executable, "-m", "perfgrid.pipeline.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def pages(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every HTML page a user opens, from the pipeline's run ``tiny``: its report;
    ``compare`` of it with itself; ``summary`` and ``gallery`` of it beside a second
    host ``beta`` synthesized as the pipeline writes one (tests/synthetic.py)."""
    tiny = tree / "results" / "tiny"
    out = tmp_path_factory.mktemp("pages")
    beta = result_folder(out, "beta", 0.8)
    shutil.copytree(tiny / "tables", out / "results" / "tiny" / "tables")
    cli("compare", tiny, tiny, "--out", out / "compare")
    cli("summary", out / "results", "--out-md", out / "summary.md",
        "--out-html", out / "summary.html")
    cli("gallery", tiny, beta, "-o", out / "gallery")
    return {"report": tiny / "report.html", "compare": out / "compare" / "compare.html",
            "summary": out / "summary.html", "gallery index": out / "gallery" / "index.html",
            "gallery experiment": out / "gallery" / "experiment-file_read.html"}


def test_every_page_opens_without_error_or_sideways_scroll_at_desktop_and_phone_width(pages):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    problems: list[str] = []
    widths: dict[tuple[int, str], list[int]] = {}
    tables: dict[tuple[int, str], int] = {}
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for width in WIDTHS:
                context, page = watched_page(browser, width, problems)
                for name, path in pages.items():
                    page.goto(path.as_uri(), wait_until="load")
                    widths[(width, name)] = page.evaluate(
                        "[document.documentElement.scrollWidth, window.innerWidth]")
                    tables[(width, name)] = page.evaluate(
                        "document.querySelectorAll('table').length")
                context.close()
        finally:
            browser.close()
    assert problems == []
    assert all(count > 0 for count in tables.values()), tables  # each page has its tables
    scrolls = {key: w for key, w in widths.items() if w[0] > w[1]}
    assert scrolls == {}, scrolls  # (width, page): [scrollWidth, innerWidth]
