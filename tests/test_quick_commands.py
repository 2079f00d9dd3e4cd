"""The user commands on config/quick.yaml's real output (the ``quick`` fixture,
tests/conftest.py): archive, verify, compare, report, gallery, aa, pool, the compare rule,
and the report in Chromium. They read the run and measure nothing, so ``make test`` runs
them in its parallel lane, on one worker (tests/conftest.py's SHARED_RUNS), on the run its
serial lane made and judged (tests/test_quick_config.py)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import scipy.stats
import test_archive
from test_archive import passes_the_validator
from test_compare import rounds_folder
from test_quick_config import HOST, PERFGRID, layout, perfgrid

from perfgrid import experiments
from perfgrid.kit.paths import Layout

from helpers import CHROMIUM, CHROMIUM_ARGS, SNAKEMAKE, job_counts, watched_page
from synthetic import result_folder

pytestmark = [pytest.mark.pipeline, pytest.mark.snakemake]

#: roc-validator's offline HTTP cache of the crate's contexts (tests/test_archive.py)
validator_cache = test_archive.validator_cache


@pytest.fixture(scope="module")
def made(quick: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``perfgrid archive results/quick ARCHIVE`` of the run."""
    out = tmp_path_factory.mktemp("archive") / f"perfgrid-{HOST}.tar.gz"
    perfgrid(quick, "archive", f"results/{HOST}", str(out))
    assert out.is_file() and Path(f"{out}.sha256").is_file()
    return out


@pytest.fixture(scope="module")
def let_go(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A result set with rounds a look let go (tests/test_compare.py builds it)."""
    return rounds_folder(tmp_path_factory.mktemp("let-go"), "letgo", 1.0)


def test_compare_of_the_run_with_itself(quick: Path, tmp_path: Path):
    done = perfgrid(quick, "compare", f"results/{HOST}", f"results/{HOST}",
                    "--out", str(tmp_path))
    assert "0 claims changed verdict" in done.stdout
    assert re.search(r"\b0 of [1-9]\d* testable points significant", done.stdout), done.stdout
    points = pd.read_csv(tmp_path / "points.csv")
    assert len(points) == sum(len(pd.read_csv(layout(quick).table(name)))
                              for name in experiments.available())
    assert points["ratio_b_over_a"].dropna().eq(1.0).all()
    assert (tmp_path / "compare.md").is_file() and (tmp_path / "compare.html").is_file()


def test_compare_of_the_run_with_its_archive(quick: Path, made: Path, tmp_path: Path):
    """The archive holds the run's raw files: every point compared, each the same rate
    (ratio 1, none significant), and no claim reads differently."""
    done = perfgrid(quick, "compare", f"results/{HOST}", str(made), "--out", str(tmp_path))
    assert "0 claims changed verdict" in done.stdout
    assert re.search(r"\b0 of [1-9]\d* testable points significant", done.stdout), done.stdout
    points = pd.read_csv(tmp_path / "points.csv")
    assert len(points) == sum(len(pd.read_csv(layout(quick).table(name)))
                              for name in experiments.available())
    assert set(points["experiment"]) == set(experiments.available())
    ratios = points["ratio_b_over_a"].dropna()
    assert len(ratios) and ratios.eq(1.0).all()
    assert "## Claims whose verdict changed\n\nNone." in (tmp_path / "compare.md").read_text()


def test_compare_of_a_result_set_with_rounds_let_go(let_go: Path, tmp_path: Path):
    done = perfgrid(tmp_path, "compare", str(let_go), str(let_go), "--out", str(tmp_path / "c"))
    assert "file_read: 1 points compared" in done.stdout
    assert "let go (not measured) left out" in (tmp_path / "c" / "compare.md").read_text()


def test_verify_passes_on_the_archive(made: Path):
    done = perfgrid(made.parent, "verify", str(made))
    assert "OK" in done.stdout


def test_a_report_from_the_archive_alone(quick: Path, made: Path, tmp_path: Path):
    fresh = tmp_path / "fresh"
    perfgrid(tmp_path, "report", str(made), "-o", str(fresh))
    assert (fresh / "report.html").is_file() and (fresh / "report.md").is_file()
    ran = layout(quick).root / "tables"
    assert sorted(p.name for p in (fresh / "tables").iterdir()) == sorted(
        p.name for p in ran.iterdir())
    for table in ran.iterdir():  # the archive's raw results alone give the run's tables
        assert (fresh / "tables" / table.name).read_bytes() == table.read_bytes(), table.name


def test_a_gallery_of_the_run_and_a_set_with_rounds_let_go(quick: Path, made: Path,
                                                          let_go: Path, tmp_path: Path):
    """Both runs listed, each with where its claims came from; every claim of the run's
    claims.csv a row with its verdict in the run's column; the set with rounds let go
    (no claims.csv: claims computed from its table) has file_read's, and no other."""
    site = tmp_path / "site"
    done = perfgrid(tmp_path, "gallery", str(made), str(let_go), "-o", str(site))
    matrix = pd.read_csv(site / "matrix.csv", keep_default_na=False)
    assert f"gallery: {len(matrix)} claims on 2 machines ({HOST}, letgo)" in done.stdout
    listed = json.loads((site / "gallery.json").read_text())["machines"]
    assert [(m["label"], m["claims"]) for m in listed] == [
        (HOST, "claims.csv"), ("letgo", "computed by the gallery from its tables (no "
                                        "claims.csv)")]
    claims = pd.read_csv(layout(quick).claims_table, keep_default_na=False)
    key = ["experiment", "runtime", "hypothesis"]
    run = claims.groupby(key)["verdict"].agg(list).to_dict()
    shown = {tuple(row[k] for k in key): row[HOST] for _, row in matrix.iterrows()}
    assert {k: shown.get(k) for k in run} == {k: v[0] for k, v in run.items()}
    other = matrix.loc[matrix["letgo"] != "missing"]
    assert len(other) and set(other["experiment"]) == {"file_read"}, other[key]


def whitespace_copy(root: Path, dest: Path, pad: str = " ") -> Path:
    """A copy of the result set ``root`` (its test data left out) that is another run by
    its files: no run.json, and ``pad`` appended to its first raw file (JSON whitespace,
    so its estimates are the same)."""
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns("data"))
    (dest / "run.json").unlink()
    first = next(p for p in sorted((dest / "raw").rglob("*.json")))
    first.write_text(first.read_text() + pad)
    return dest


def test_aa_refuses_the_run_against_itself_and_reads_a_same_estimates_pair_as_alike(
        quick: Path, tmp_path: Path):
    """The run against itself is refused (one run is no pair); a copy whose raw files differ
    by a byte of whitespace, its estimates the same, is judged: no reading differs, none is
    flagged, every counted claim with an estimate is compared."""
    root = quick / "results" / HOST
    same = subprocess.run([*PERFGRID, "aa", str(root), str(root), "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=quick)
    assert same.returncode == 2 and "the same run" in same.stderr
    assert not (tmp_path / "aa.csv").exists()
    twin = whitespace_copy(root, tmp_path / "twin")
    done = perfgrid(quick, "aa", str(root), str(twin), "--out", str(tmp_path))
    table = pd.read_csv(tmp_path / "aa.csv")
    both = table[table["present"] == "both"]
    assert len(both) == len(pd.read_csv(root / "claims.csv"))
    assert not both["readings_differ"].astype(bool).any()
    assert not both["flagged"].fillna(False).astype(bool).any()
    assert "0 readings differ" in done.stdout


def test_the_archive_passes_the_community_validator_at_every_profile_it_declares(
        made: Path, tmp_path: Path, validator_cache: Path):
    """The run's own archive (every raw file, table and figure of six experiments), not
    the synthetic crate of tests/test_archive.py, through roc-validator offline."""
    passes_the_validator(made, tmp_path / "x", validator_cache)


@pytest.mark.browser
def test_the_report_of_six_experiments_opens_with_every_section_and_image(quick: Path):
    """The run's report.html in a headless Chromium, offline, at desktop and phone width:
    its title, a section per experiment with a figure in each, every image loaded, no
    console error or failed request, no sideways scroll."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian package chromium; CI installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    report = layout(quick).report_html
    problems: list[str] = []
    seen: dict[int, tuple[str, list, list[int]]] = {}
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for width in (1280, 400):
                context, page = watched_page(browser, width, problems)
                page.goto(report.as_uri(), wait_until="load")
                # the section headings and images in document order
                order = page.evaluate(
                    "Array.from(document.querySelectorAll('h2, img')).map(e => e.tagName == "
                    "'H2' ? ['h2', e.id] : ['img', e.complete && e.naturalWidth > 0, e.alt])")
                seen[width] = (page.title(), order, page.evaluate(
                    "[document.documentElement.scrollWidth, window.innerWidth]"))
                context.close()
        finally:
            browser.close()
    assert problems == []
    for width, (title, order, (scroll, inner)) in seen.items():
        assert title == f"perfgrid report: {HOST}", width
        assert scroll <= inner, (width, scroll, inner)
        images: dict[str, list] = {}
        section = ""
        for kind, what, *alt in order:
            if kind == "h2":
                section = what
                images.setdefault(section, [])
            else:
                images[section].append((what, alt))
        assert set(experiments.available()) <= set(images), sorted(images)
        empty = [name for name in experiments.available() if not images[name]]
        assert empty == [], f"{width} px: no figure in {empty}"
        broken = [(name, alt) for name, found in images.items() for ok, alt in found if not ok]
        assert broken == [], f"{width} px: images that did not load: {broken}"


def markdown_sections(text: str) -> dict[str, list[dict[str, str]]]:
    """The tables of a Markdown page by their ``## heading``: each row as a dict."""
    out: dict[str, list[dict[str, str]]] = {}
    heading, header = "", None
    for line in text.splitlines():
        if line.startswith("## "):
            heading, header = line[3:].strip(), None
            out[heading] = []
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if header is None:
                header = cells
            else:
                out[heading].append(dict(zip(header, cells, strict=True)))
    return out


def test_the_compare_rule_sets_every_host_under_results_side_by_side(quick: Path):
    """``snakemake compare`` (workflow/rules/archive.smk) in the run's tree with a second
    host beside it (tests/synthetic.py's file_read-only ``beta``): one section per
    experiment, each of the run's points with its rate in its host's column, beta's two
    points in file_read's and nowhere else. The tree is left as it was."""
    results = quick / "results"
    beta = result_folder(quick, "beta", 0.8)
    try:
        done = subprocess.run([*SNAKEMAKE, "compare", "--cores", "1", "--configfile",
                               "config/quick.yaml"], cwd=quick, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        # only the compare rule ran: the run's own outputs were up to date
        assert job_counts(done.stdout + done.stderr) == {"compare": 1}
        assert "summary: 2 hosts" in (results / "compare" / "compare.log").read_text()
        text = (results / "compare" / "summary.md").read_text()
        assert (results / "compare" / "summary.html").stat().st_size > 1000
        sections = markdown_sections(text)
        names = {heading.split(" (rate in ")[0]: rows for heading, rows in sections.items()}
        assert list(names) == experiments.available()
        for name, rows in names.items():
            table = pd.read_csv(layout(quick).table(name))
            rates = sorted(f"{r:.4g}" for r in table["rate"].dropna())
            assert sorted(r[HOST] for r in rows if r[HOST]) == rates, name
            beta_rates = sorted(r.get("beta", "") for r in rows if r.get("beta"))
            if name == "file_read":
                made_beta = pd.read_csv(Layout(beta).table(name))["rate"]
                assert beta_rates == sorted(f"{r:.4g}" for r in made_beta) and beta_rates
            else:
                assert "beta" not in rows[0], name
    finally:
        shutil.rmtree(beta)
        shutil.rmtree(results / "compare", ignore_errors=True)


def test_pool_counts_a_run_of_one_boot_once_and_pools_the_draws_as_it_says(quick: Path,
                                                                           tmp_path: Path):
    """``perfgrid pool`` on three runs: the run, a whitespace copy of it (the same boot:
    one host draw with it), and a copy of another boot whose every log-scale estimate and
    interval is 10 % higher. Two draws, ``y`` and ``y + d`` (d = ln 1.1), of one within
    variance: the pooled value is the run's times sqrt(1.1), and its Hartung-Knapp
    interval ``mean -/+ t(0.975, 1 df) * d / 2``, each claim as the module doc says."""
    from perfgrid.analyse import claimrow

    root = quick / "results" / HOST
    claims = pd.read_csv(root / "claims.csv", keep_default_na=False)
    boots = set(claims["boot_id"]) - {""}  # a claim without an estimate has none
    assert len(boots) == 1, boots  # the run says which boot it ran in
    same_boot = whitespace_copy(root, tmp_path / "same-boot")
    other = whitespace_copy(root, tmp_path / "other-boot", pad="  ")
    scale = claims.apply(lambda row: claimrow.within_se(row).scale, axis=1) == "log"
    moved = claims.copy()
    for column in ("value", "ci_low", "ci_high", "eq_low", "eq_high"):
        numbers = pd.to_numeric(moved[column], errors="coerce")
        moved[column] = numbers.where(~scale, numbers * 1.1)
    moved["boot_id"] = "another boot"
    moved.to_csv(other / "claims.csv", index=False)

    done = perfgrid(quick, "pool", str(root), str(same_boot), str(other), "--out",
                    str(tmp_path / "out"))
    assert f"perfgrid pool: 3 runs, {len(claims)} claims" in done.stdout
    pooled = pd.read_csv(tmp_path / "out" / "pooled.csv", keep_default_na=False)
    assert len(pooled) == len(claims) and (pooled["runs"] == 3).all()
    t = float(scipy.stats.t.ppf(0.975, 1))
    checked = 0
    for (_, row), (_, claim) in zip(pooled.iterrows(), claims.iterrows(), strict=True):
        what = f"{claim['experiment']} {claim['hypothesis']}"
        assert (row["experiment"], row["hypothesis"]) == (claim["experiment"],
                                                          claim["hypothesis"]), what
        within = claimrow.within_se(claim)
        if within.se is None or within.se <= 0:  # no interval to pool: said so
            assert row["draws"] == 0 and row["verdict"] == "inconclusive", what
            continue
        assert row["draws"] == 2, what  # the run and its copy of one boot count once
        assert row["readings"] == "; ".join([claim["verdict"]] * 3), what
        if within.scale != "log":
            continue
        value = float(claim["value"]) * math.sqrt(1.1)
        assert float(row["value"]) == pytest.approx(value, rel=1e-9), what
        half = t * math.log(1.1) / 2
        assert float(row["ci_low"]) == pytest.approx(value * math.exp(-half), rel=1e-9), what
        assert float(row["ci_high"]) == pytest.approx(value * math.exp(half), rel=1e-9), what
        assert 0 <= float(row["i2"]) <= 1, what
        checked += 1
    assert checked, "no claim of the run has an estimate with an interval on the log scale"
