"""The HTML report in a real headless Chromium: it renders, every image loads,
and no request leaves the file. A screenshot of the first screen is kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import REPO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = REPO / "test-artifacts"

pytestmark = [
    pytest.mark.pipeline,
    pytest.mark.skipif(CHROMIUM is None,
                       reason="chromium not installed (Debian package chromium; CI installs it)"),
]


def test_report_renders_offline_with_every_image(tree):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    report = tree / "results" / "tiny" / "report.html"
    requests: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )
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
