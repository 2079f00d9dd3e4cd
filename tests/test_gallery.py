"""``perfgrid gallery``: three machines with different grids, one site.

Three result sets are synthesized as the pipeline writes them (raw pyperf files, the
file_read table built from them, machine.json, claims.csv, a report.html), each host
with the worker counts ``workers: auto`` gives its CPU count, so one host lacks points
the others have. One of them goes in as an archive. The site must show every claim of
every host, mark missing points, pool each claim as DerSimonian and Laird do by hand,
refuse a tampered archive by name before writing anything, and open offline in Chromium.
"""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfgrid.analyse.analysis import Claim
from perfgrid.pipeline import cli
from perfgrid.publish import archive, gallery
from perfgrid.publish.report.claims import read_claims, write_claims

from helpers import CHROMIUM, CHROMIUM_ARGS, REPO, watched_page
from synthetic import result_folder

ARTIFACTS = REPO / "test-artifacts"
#: host label -> (speed, CPUs: workers auto gives 1, 2, 4, ... up to them)
HOSTS = {"alpha": (1.0, 4), "beta": (0.8, 2), "c$1$": (1.3, 8)}
POINTS = (("read", 4, 3), ("dd", 3, 3))
HYP = {"heterogeneous": "Parallel readers beat dd",
       "homogeneous": "With large blocks the runtime reads as fast as C (dd)",
       "partial": "Erlang with large blocks reads about as fast as C (dd)"}
#: host -> hypothesis -> (verdict, value, ci_low, ci_high); beta lacks the partial claim
CLAIMS = {
    "alpha": {"heterogeneous": ("reproduced", 1.5, 1.4, 1.6),
              "homogeneous": ("reproduced", 1.20, 1.10, 1.31),
              "partial": ("not reproduced", 0.5, 0.45, 0.56)},
    "beta": {"heterogeneous": ("inconclusive", 1.1, 0.95, 1.27),
             "homogeneous": ("reproduced", 1.21, 1.10, 1.33)},
    "c$1$": {"heterogeneous": ("reproduced", 2.0, 1.8, 2.2),
             "homogeneous": ("reproduced", 1.19, 1.08, 1.31),
             "partial": ("inconclusive", math.nan, math.nan, math.nan)},
}


def claim(name: str, verdict: str, value: float, low: float, high: float) -> Claim:
    runtime = "erlang" if name == "partial" else "python"
    measured = f"{value:.2f}x [{low}, {high}]" if math.isfinite(value) else "n/a"
    return Claim("file_read", HYP[name], "ratio >= 1", measured,
                 verdict, runtime, "made up", value, low, high, ">=", 1.0, "x")


def machine_folder(root: Path, host: str) -> Path:
    speed, cpus = HOSTS[host]
    counts = tuple(2**i for i in range(int(math.log2(cpus)) + 1))
    folder = result_folder(root, host, speed, POINTS, counts)
    (folder / "machine.json").write_text(json.dumps({
        "cpu_model": f"Test CPU {cpus}00", "cpus_logical": cpus, "cpus_physical": cpus // 2,
        "topology": {"packages": 1, "cores": cpus // 2, "threads_per_core": 2,
                     "l3_groups": [[0]], "numa_nodes": [0]},
        "restriction": {"restricted": False}, "auto_workers": {"counts": list(counts)},
        "memory_bytes": cpus * 2**30, "kernel": "6.1.0-test", "os": "Linux",
        "python": "3.11.2", "python_implementation": "CPython"}))
    claims = [claim(name, *facts) for name, facts in CLAIMS[host].items()]
    write_claims(pd.DataFrame([c.as_row() for c in claims]),
                        folder / "claims.csv")
    (folder / "report.html").write_text(f"<!doctype html><title>report {host}</title>"
                                        f"<p>the report of {host}</p>")
    return folder


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """alpha and beta as folders, c$1$ as an archive (archive.create on its folder)."""
    root = tmp_path_factory.mktemp("machines")
    folders = {host: machine_folder(root / host.replace("$", "d"), host) for host in HOSTS}
    made = archive.create(folders["c$1$"], root / "archives" / "perfgrid-c-test.tar.gz")
    return {"alpha": str(folders["alpha"]), "beta": str(folders["beta"]), "c$1$": str(made)}


@pytest.fixture(scope="module")
def site(sources: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "gallery"
    gallery.gallery(list(sources.values()), out)
    return out


class Tables(HTMLParser):
    """Every <table> of a page as rows of (cell text, cell class)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[tuple[str, str]]]] = []
        self.cell: list[str] | None = None
        self.css = ""

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell, self.css = [], dict(attrs).get("class") or ""
        elif tag == "br" and self.cell is not None:
            self.cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append(("".join(self.cell).strip(), self.css))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def tables(page: Path) -> list[list[list[tuple[str, str]]]]:
    parser = Tables()
    parser.feed(page.read_text())
    return parser.tables


def same_row(row: dict) -> dict:
    """A claim's row with NaN as a string, so that two rows compare equal field by field."""
    return {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


def test_claims_csv_gives_back_every_field_of_every_claim(tmp_path: Path):
    """What the report writes, the gallery reads unchanged: NaN stays NaN, a unit keeps its
    leading space, a reason keeps its comma, quote and line break."""
    claims = [Claim("spawn", "Creating a unit costs about 1 us", "us <= 1.2", "n/a",
                    "inconclusive", "erlang", 'no rows, "none", at all\nsecond line',
                    unit=" us"),
              claim("heterogeneous", "reproduced", 1.5, 1.4, 1.6)]
    path = tmp_path / "claims.csv"
    write_claims(pd.DataFrame([c.as_row() for c in claims]), path)
    back = read_claims(path)
    assert [same_row(c.as_row()) for c in back] == [same_row(c.as_row()) for c in claims]
    first = back[0].as_row()
    assert all(math.isnan(first[k]) for k in ("value", "ci_low", "ci_high", "threshold"))
    # a claims.csv from before claims named their points reads with none
    frame = pd.read_csv(path, keep_default_na=False).drop(columns=["points"])
    frame.to_csv(tmp_path / "older.csv", index=False)
    assert [c.point_keys for c in read_claims(tmp_path / "older.csv")] == [(), ()]
    path.write_text(path.read_text().replace("reproduced", "sort of", 1))
    # the line in the file: the first claim's reason spans lines 2 and 3
    with pytest.raises(ValueError, match="claims.csv line 4: verdict: 'sort of'"):
        read_claims(path)


def test_the_matrix_has_every_claim_of_every_host(site: Path):
    matrix = pd.read_csv(site / "matrix.csv", keep_default_na=False)
    assert len(matrix) == len(HYP)
    for host, claims in CLAIMS.items():
        for name, (verdict, *_) in claims.items():
            row = matrix[matrix["hypothesis"] == HYP[name]]
            assert row[host].tolist() == [verdict], (host, name)
    partial = matrix[matrix["hypothesis"] == HYP["partial"]]
    assert partial["beta"].tolist() == ["missing"]
    # the index shows the same: a header per host, one row per claim, verdict and interval
    grid = tables(site / "index.html")[0]
    assert [text for text, _ in grid[0]] == ["claim", *HOSTS, "across machines"]
    assert len(grid) == 1 + len(HYP)
    cells = {row[0][0].split("] ", 1)[1]: row[1:-1] for row in grid[1:]}
    assert cells[HYP["heterogeneous"]][1] == ("inconclusive 1.1x [0.95, 1.27]",
                                              "cell inconclusive")
    assert cells[HYP["partial"]][1][1] == "cell missing"
    assert cells[HYP["partial"]][2][0].startswith("inconclusive no estimate")
    # each machine's own report, copied and linked; the host label with $ stays literal
    for host in HOSTS:
        assert f"the report of {host}" in (site / "hosts" / host / "report.html").read_text()
    index = (site / "index.html").read_text()
    assert 'href="hosts/c%241%24/report.html"' in index
    for figure in ("claim-1", "claim-2", "claim-3", "file_read-rate"):
        assert (site / "figures" / f"{figure}.png").stat().st_size > 5000
        assert (site / "figures" / f"{figure}.svg").exists()


def test_points_on_some_machines_only_are_marked_missing(site: Path):
    page = site / "experiment-file_read.html"
    points = tables(page)[0]
    header = [text for text, _ in points[0]]
    rows = [dict(zip(header, row, strict=True)) for row in points[1:]]
    assert len(rows) == 2 * 4  # read and dd at 1, 2, 4 and 8 workers: the union
    missing = {(r["variant"][0], int(r["workers"][0]), host) for r in rows for host in HOSTS
               if r[host] == ("missing", "cell missing")}
    assert missing == {(v, w, "beta") for v in ("read", "dd") for w in (4, 8)} | {
        (v, 8, "alpha") for v in ("read", "dd")}
    assert all(r["c$1$"][0].endswith("]") for r in rows)  # a rate with its interval
    assert "4 grid points measured on every machine, 4 on some only" in page.read_text()
    # the differences from the first machine: every point both measured, compare's stats
    diffs = tables(page)[1]
    header = [text for text, _ in diffs[0]]
    machines = [dict(zip(header, row, strict=True))["machine"][0] for row in diffs[1:]]
    assert sorted(machines) == ["beta"] * 4 + ["c$1$"] * 6


def dersimonian_laird(values, lows, highs) -> dict[str, float]:
    """The pooled estimate by hand: log scale, SE from the 95 % interval, tau^2 >= 0."""
    y = np.log(values)
    v = ((np.log(highs) - np.log(lows)) / (2 * 1.959963984540054)) ** 2
    w = 1 / v
    fixed = np.sum(w * y) / np.sum(w)
    q = np.sum(w * (y - fixed) ** 2)
    df = len(y) - 1
    tau2 = max(0.0, (q - df) / (np.sum(w) - np.sum(w**2) / np.sum(w)))
    w_star = 1 / (v + tau2)
    mean = np.sum(w_star * y) / np.sum(w_star)
    se = 1 / np.sqrt(np.sum(w_star))
    return {"value": np.exp(mean), "ci_low": np.exp(mean - 1.959963984540054 * se),
            "ci_high": np.exp(mean + 1.959963984540054 * se), "tau": np.sqrt(tau2),
            "i2": max(0.0, (q - df) / q)}


@pytest.mark.parametrize("name", ["heterogeneous", "homogeneous"])
def test_the_pooled_estimate_is_dersimonian_laird(site: Path, name: str):
    """Heterogeneous: tau^2 > 0 widens the interval. Homogeneous: the one-step tau^2 is
    negative (statsmodels keeps it so) and must be taken as 0: the fixed-effect estimate."""
    facts = [CLAIMS[h][name] for h in HOSTS]
    expected = dersimonian_laird(*(np.array([f[i] for f in facts]) for i in (1, 2, 3)))
    assert (expected["tau"] > 0.1) == (name == "heterogeneous")
    pooled = pd.read_csv(site / "pooled.csv")
    row = pooled[pooled["hypothesis"] == HYP[name]].iloc[0]
    for key, value in expected.items():
        assert row[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    counts = {v: int(row[v]) for v in ("reproduced", "not reproduced", "at the threshold",
                                       "inconclusive")}
    verdicts = [f[0] for f in facts]
    assert counts == {v: verdicts.count(v) for v in counts}
    text = (site / "index.html").read_text()
    assert (f"holds on {verdicts.count('reproduced')} of 3 machines" in text)
    assert f"pooled {expected['value']:.3g}x [{expected['ci_low']:.3g}, " in text


def test_a_claim_with_one_interval_is_not_pooled_and_says_why(site: Path):
    pooled = pd.read_csv(site / "pooled.csv", keep_default_na=False)
    row = pooled[pooled["hypothesis"] == HYP["partial"]].iloc[0]
    assert row["value"] == "" and int(row["missing"]) == 1 and int(row["pooled_over"]) == 1
    assert "two or more needed" in row["pooled_reason"]


def tampered(good: Path, out: Path) -> Path:
    """``good`` with its table's bytes changed and its manifest left alone."""
    with tarfile.open(good) as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("tables/file_read.csv"):
                data = data.replace(b"read", b"READ", 1)
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return out


def test_an_archive_that_fails_verify_is_refused_by_name_before_anything_is_written(
        sources: dict[str, str], tmp_path: Path, capsys):
    bad = tampered(Path(sources["c$1$"]), tmp_path / "perfgrid-bad.tar.gz")
    assert archive.verify(bad)
    out = tmp_path / "site"
    with pytest.raises(ValueError, match=re.escape(str(bad)) + ".*changed: results/"):
        gallery.gallery([sources["alpha"], str(bad), sources["beta"]], out)
    assert not out.exists()
    with pytest.raises(SystemExit) as exited:
        cli.main(["gallery", sources["alpha"], str(bad), "-o", str(out)])
    err = capsys.readouterr().err
    assert exited.value.code == 1 and len(err.splitlines()) == 1 and str(bad) in err
    assert not out.exists()


def test_refuses_one_source_a_shared_label_and_a_foreign_folder(sources, tmp_path: Path):
    with pytest.raises(ValueError, match="two or more sources"):
        gallery.gallery([sources["alpha"]], tmp_path / "one")
    with pytest.raises(ValueError, match="both host 'alpha'"):  # two runs, one label
        other = shutil.copytree(sources["beta"], tmp_path / "other" / "alpha")
        gallery.gallery([sources["alpha"], str(other)], tmp_path / "twice")
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "index.html").write_text("my own page")
    with pytest.raises(ValueError, match="not a perfgrid gallery"):
        gallery.gallery([sources["alpha"], sources["beta"]], foreign)
    assert (foreign / "index.html").read_text() == "my own page"
    assert not (tmp_path / "one").exists() and not (tmp_path / "twice").exists()


def test_a_set_without_claims_csv_gets_its_claims_from_its_tables(sources, tmp_path: Path):
    """An older result set (no claims.csv): its claims are computed from its tables and
    the site says so; a gallery folder is written again in place."""
    older = tmp_path / "results" / "older"
    shutil.copytree(sources["beta"], older)
    (older / "claims.csv").unlink()
    out = tmp_path / "site"
    for _ in range(2):
        data = gallery.gallery([sources["alpha"], str(older)], out)
    marker = json.loads((out / gallery.MARKER).read_text())
    assert [m["claims"] for m in marker["machines"]] == [
        "claims.csv", "computed by the gallery from its tables (no claims.csv)"]
    computed = [c for c in data["claims"] if "older" in c["by_host"]]
    assert computed and all(c["experiment"] == "file_read" for c in computed)
    assert "computed by the gallery from its tables" in (out / "index.html").read_text()


@pytest.mark.browser
def test_the_site_opens_offline_in_chromium_at_desktop_and_phone_width(site: Path):
    """No console error, no request leaving the site, every image loaded; at 400 px
    wide the page does not scroll sideways (wide tables scroll in their own box)."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian package chromium; CI installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    pages = ["index.html", "claims.html", "experiment-file_read.html"]
    problems: list[str] = []
    requests: list[str] = []
    widths = {}
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for width in (1280, 400):
                context, page = watched_page(browser, width, problems)
                page.on("request", lambda r: requests.append(r.url))
                for name in pages:
                    page.goto((site / name).as_uri(), wait_until="load")
                    images = page.evaluate("Array.from(document.images).map("
                                           "i => [i.src, i.complete, i.naturalWidth])")
                    assert all(ok and w > 0 for _, ok, w in images), images
                    assert images or name == "index.html"
                    widths[(width, name)] = page.evaluate(
                        "[document.documentElement.scrollWidth, window.innerWidth]")
                    if name == "index.html":
                        page.screenshot(path=str(ARTIFACTS / f"gallery-index-{width}.png"),
                                        full_page=True)
                context.close()
        finally:
            browser.close()
    assert problems == []
    assert [u for u in requests if not u.startswith("file://")] == []
    for (width, name), (scroll, inner) in widths.items():
        assert scroll <= inner, (width, name, scroll, inner)
    for width in (1280, 400):
        assert (ARTIFACTS / f"gallery-index-{width}.png").stat().st_size > 10_000


# -- pooling: I squared in range, tau squared >= 0, one run counted once ------------------
def two_hosts(first: tuple[float, float, float], second: tuple[float, float, float]
              ) -> dict[str, Claim]:
    return {"one": claim("heterogeneous", "reproduced", *first),
            "two": claim("heterogeneous", "reproduced", *second)}


@pytest.mark.parametrize("facts", [(1.5, 1.4, 1.6), (1.2, 1.1, 1.31), (0.97, 0.87, 1.07),
                                   (8.7, 8.5, 8.9), (1.52, 1.39, 1.90)])
def test_identical_estimates_pool_with_i2_and_tau_zero(facts):
    """Two machines that read the same: Q is 0, so I^2 and tau are 0 and the pooled
    estimate is theirs. 1.5x [1.4, 1.6] made Q of -5.7e-14 as a difference of sums and
    printed I^2 1759218604441700 %."""
    pooled = gallery.pool(two_hosts(facts, facts), ["one", "two"])
    assert pooled["i2"] == 0.0 and pooled["tau"] == 0.0
    assert pooled["value"] == pytest.approx(facts[0], rel=1e-12)
    # two machines that agree: narrower than one, as two machines' worth of evidence
    assert pooled["ci_high"] / pooled["ci_low"] < facts[2] / facts[1]
    text = gallery.generality(two_hosts(facts, facts)["one"], pooled)
    assert "I\u00b2 0%" in text


@pytest.mark.parametrize("values", [
    [1.0, 1.0 + 1e-15], [1.0, 1.0, 1.0], [1.5, 1.4, 1.6], [1.0, 50.0], [0.5, 1.0, 2.0, 8.0]])
def test_i2_lies_in_its_range_and_tau2_is_never_negative(values):
    effect = np.log(values)
    for se in (np.full(len(values), 1e-3), np.full(len(values), 0.5),
               np.linspace(0.01, 0.3, len(values))):
        res = gallery.dersimonian_laird(effect, se)
        assert 0.0 <= res["i2"] < 1.0 and res["tau2"] >= 0.0 and res["q"] >= 0.0, res
        assert math.isfinite(res["mean"]) and res["sd"] > 0


def test_sources_that_disagree_beyond_their_intervals_pool_wider_than_either():
    """Two machines far apart: tau^2 > 0, I^2 near 100 %, and the pooled interval is
    wider than each machine's own (a machine is one draw of many, not a repeat)."""
    by_host = two_hosts((1.2, 1.15, 1.25), (2.0, 1.9, 2.1))
    pooled = gallery.pool(by_host, ["one", "two"])
    assert pooled["tau"] > 0.1 and 0.9 < pooled["i2"] < 1.0
    expected = dersimonian_laird(np.array([1.2, 2.0]), np.array([1.15, 1.9]),
                                 np.array([1.25, 2.1]))
    for key, value in expected.items():
        assert pooled[key] == pytest.approx(value, rel=1e-9), key
    for c in by_host.values():
        assert pooled["ci_high"] / pooled["ci_low"] > c.ci_high / c.ci_low


def test_each_machine_s_standard_error_uses_its_own_level():
    """A 99 % interval is wider than a 95 % one of the same standard error: read as 95 %,
    its machine would weigh too little."""
    import dataclasses

    from scipy.stats import norm

    z99 = norm.ppf(0.995)
    wide = claim("heterogeneous", "reproduced", 2.0, 2.0 * math.exp(-0.1 * z99),
                  2.0 * math.exp(0.1 * z99))
    by_host = {"one": claim("heterogeneous", "reproduced", 1.0, math.exp(-0.1 * 1.959963984540054),
                            math.exp(0.1 * 1.959963984540054)),
               "two": dataclasses.replace(wide, level=0.99)}
    pooled = gallery.pool(by_host, ["one", "two"])
    assert pooled["value"] == pytest.approx(math.sqrt(2.0), rel=1e-9)  # equal weights


def test_a_run_given_twice_is_refused_by_both_paths(sources, tmp_path: Path, capsys):
    """The issue's case: a run and its copy under another name (or its archive) pooled as
    two machines, with an interval narrower than either. Refused, naming both, before
    anything is written; two runs that only share a run.json (a copy resumed) too."""
    copy = shutil.copytree(sources["alpha"], tmp_path / "copy" / "alpha-again")
    out = tmp_path / "site"
    with pytest.raises(ValueError, match="are the same run: the same raw result files") as err:
        gallery.gallery([sources["alpha"], sources["beta"], str(copy)], out)
    assert sources["alpha"] in str(err.value) and str(copy) in str(err.value)
    assert not out.exists()
    packed = archive.create(Path(sources["alpha"]), tmp_path / "packed" / "alpha.tar.gz")
    with pytest.raises(ValueError, match="same run"):
        gallery.gallery([str(packed), sources["alpha"]], out)
    with pytest.raises(SystemExit) as exited:
        cli.main(["gallery", sources["alpha"], str(copy), "-o", str(out)])
    assert exited.value.code == 1 and str(copy) in capsys.readouterr().err
    assert not out.exists()
    # the same run.json, other raw files: one start of the pipeline, read twice
    started = {"argv": ["snakemake"], "started": 1.5e9, "cwd": "/w", "snakemake": "9"}
    beta_copy = shutil.copytree(sources["beta"], tmp_path / "b" / "beta-copy")
    (copy / "run.json").write_text(json.dumps(started))
    (beta_copy / "run.json").write_text(json.dumps(started))
    with pytest.raises(ValueError, match="same run: the same run.json"):
        gallery.gallery([str(copy), str(beta_copy)], out)
    (beta_copy / "run.json").write_text(json.dumps({**started, "started": 1.6e9}))
    data = gallery.gallery([str(copy), str(beta_copy)], out)
    assert data["hosts"] == ["alpha-again", "beta-copy"]


# -- a machine's own report is shown inert ---------------------------------------------
PLANTED = ("<!doctype html><html><head><title>planted</title>"
           "<script>console.log('PLANTED script ran'); alert('PLANTED');"
           "document.title = 'PLANTED';</script>"
           "<meta http-equiv=\"refresh\" content=\"0; url=https://example.invalid/\"></head>"
           "<body onload=\"console.log('PLANTED onload ran')\"><p>the planted report</p>"
           "<img src=\"data:,x\" onerror=\"console.log('PLANTED onerror ran')\">"
           "<svg><script>console.log('PLANTED svg script ran')</script></svg>"
           "<a id=\"go\" href=\"javascript:console.log('PLANTED link ran')\">go</a>"
           "</body></html>")


@pytest.fixture(scope="module")
def planted(sources: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A gallery of alpha and an archive of beta whose report.html carries a script."""
    root = tmp_path_factory.mktemp("planted")
    beta = shutil.copytree(sources["beta"], root / "results" / "beta")
    (beta / "report.html").write_text(PLANTED)
    made = archive.create(beta, root / "perfgrid-beta-planted.tar.gz")
    out = root / "gallery"
    gallery.gallery([sources["alpha"], str(made)], out)
    return out


class Tags(HTMLParser):
    """Every start tag of a page with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))


def test_a_report_with_a_planted_script_is_written_inert(planted: Path):
    """Issue 60: the gallery copied each archive's report.html unchanged, so a script
    planted in one ran on the gallery site. The page is now the gallery's own: the report
    is the text of a sandboxed frame without allow-scripts, under a no-script policy."""
    page = planted / "hosts" / "beta" / "report.html"
    parser = Tags()
    parser.feed(page.read_text())
    names = [tag for tag, _ in parser.tags]
    assert "script" not in names and "body" in names
    assert not [(t, a) for t, a in parser.tags if any(k.startswith("on") for k in a)]
    (frame,) = [a for t, a in parser.tags if t == "iframe"]
    assert frame["sandbox"] in ("", None) and frame["srcdoc"] == PLANTED
    (policy,) = [a["content"] for t, a in parser.tags
                 if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script" not in policy
    assert 'href="hosts/beta/report.html"' in (planted / "index.html").read_text()


@pytest.mark.browser
def test_a_planted_script_does_not_run_in_chromium(planted: Path):
    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian package chromium; CI installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    said: list[str] = []
    dialogs: list[str] = []
    requests: list[str] = []
    shown, titles = [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context, page = watched_page(browser, 1280, said)
            page.on("console", lambda m: said.append(m.text))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("request", lambda r: requests.append(r.url))
            for name in ("hosts/beta/report.html", "index.html"):
                page.goto((planted / name).as_uri(), wait_until="load")
                if name == "index.html":  # and the gallery's link to it
                    page.click('a[href="hosts/beta/report.html"]')
                    page.wait_for_load_state("load")
                page.wait_for_timeout(1500)  # the refresh and onload would have fired
                for frame in page.frames:
                    if frame.query_selector("#go"):
                        shown.append(frame.inner_text("body"))
                        frame.click("#go")
                page.wait_for_timeout(300)
                titles.append(page.title())
            context.close()
        finally:
            browser.close()
    assert not [s for s in said if "PLANTED" in s and "ran" in s and "Blocked" not in s
                and "Refused" not in s], said
    assert dialogs == []
    assert titles == ["perfgrid gallery: beta's own report"] * 2
    assert len(shown) == 2 and all("the planted report" in text for text in shown), shown
    assert [u for u in requests if not u.startswith(("file://", "data:", "about:"))] == []


# -- claims.csv read right or refused by line ---------------------------------------------
def written_claims(tmp_path: Path) -> Path:
    path = tmp_path / "claims.csv"
    write_claims(pd.DataFrame([claim(name, *facts).as_row()
                               for name, facts in CLAIMS["alpha"].items()]), path)
    return path


def test_a_claims_csv_with_a_byte_order_mark_is_read(tmp_path: Path):
    """Issue 60: a spreadsheet's BOM made it 'missing column experiment'."""
    path = written_claims(tmp_path)
    expected = read_claims(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert [same_row(c.as_row()) for c in read_claims(path)] == [
        same_row(c.as_row()) for c in expected]


@pytest.mark.parametrize("cut", ["last fields cut", "a middle row cut", "a field too many"])
def test_a_truncated_claims_csv_is_refused_naming_the_line(tmp_path: Path, cut: str):
    """Issue 60: a claims.csv cut short was read with the missing fields empty."""
    path = written_claims(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    fields = len(lines[0].split(","))
    if cut == "last fields cut":
        path.write_text("".join(lines[:-1]) + lines[-1].rsplit(",", 3)[0])
        line, given = 4, fields - 3
    elif cut == "a middle row cut":
        lines[2] = lines[2].rsplit(",", 1)[0] + "\n"
        path.write_text("".join(lines))
        line, given = 3, fields - 1
    else:
        lines[1] = lines[1].rstrip("\n") + ",extra\n"
        path.write_text("".join(lines))
        line, given = 2, fields + 1
    with pytest.raises(ValueError, match=re.escape(
            f"{path} line {line}: {given} fields where the header has {fields}")):
        read_claims(path)
