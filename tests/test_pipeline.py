"""End to end: a tiny file_read grid through Snakemake, then what reruns after edits."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pyperf
import pytest
import yaml

from perfgrid import experiments
from perfgrid.analyse.analysis import VERDICTS
from perfgrid.kit.paths import Layout
from perfgrid.publish.report.claims import read_claims

from helpers import CONFIG, SNAKEMAKE, edited, job_counts, run

AXES = ["variant", "cache", "binding", "workers", "block_size"]
KiB, MiB = 1 << 10, 1 << 20
#: the grid helpers.CONFIG asks for, written out from its literal values (not worked out by
#: the code under test, so a point that went missing fails): (variant, cache, binding,
#: workers, block_size)
GRID = {
    # single readers: every block size, one worker, no binding
    *((v, "warm", "none", 1, bs) for v in ("read", "readinto", "readinto_unaligned", "dd")
      for bs in (KiB, MiB)),
    ("whole", "warm", "none", 1, 8 * MiB),  # the whole 8 MiB test file in one read
    # parallel readers: parallel block sizes x workers, unbound
    *((v, "warm", "none", w, MiB) for v in ("pread_parallel", "fio") for w in (1, 2)),
}


@pytest.mark.pipeline
def test_every_grid_point_reaches_the_table_and_report(tree):
    assert len(GRID) == 13
    table = pd.read_csv(tree / "results/tiny/tables/file_read.csv")
    got = [tuple(r) for r in table[AXES].itertuples(index=False)]
    skipped = json.loads((tree / "results/tiny/skipped.json").read_text())
    missed = {tuple(s[a] for a in AXES) for s in skipped}
    # each point of the grid has one row, or was skipped with its reason (a tool missing)
    assert len(got) == len(set(got)) and set(got) | missed == GRID and not set(got) & missed
    assert all(s["experiment"] == "file_read" and s["variant"] in s["reason"]
               for s in skipped), skipped
    assert (table["rate"] > 0).all()
    # points a claim compares: 3 processes and an interval over them; the rest: one process
    claimed = table.apply(lambda r: experiments.get("file_read").used_by_claims(
        {a: r[a] for a in AXES}), axis=1)
    assert claimed.any() and not claimed.all()
    assert (table.loc[claimed, "n_processes"] == 3).all()
    assert (table.loc[claimed, "ci_method"] == "hierarchical bootstrap").all()
    assert (table.loc[claimed, "rate_ci_low"] < table.loc[claimed, "rate"]).all()
    assert (table.loc[claimed, "rate"] < table.loc[claimed, "rate_ci_high"]).all()
    assert (table.loc[~claimed, "n_values"] == 2).all()
    assert (table.loc[~claimed, "ci_method"] != "hierarchical bootstrap").all()
    assert table.loc[table["variant"] == "dd", "ratio_to_native"].eq(1.0).all()
    md = (tree / "results/tiny/report.md").read_text()
    html = (tree / "results/tiny/report.html").read_text()
    for variant in table["variant"].unique():
        assert f"| {variant} |" in md
    claims_section = md.split("## Precision")[0]
    claim_rows = [line for line in claims_section.splitlines() if line.startswith("| file_read |")]
    assert len(claim_rows) == 5
    assert all(any(f"| {v} |" in line for v in VERDICTS) for line in claim_rows)
    # every claim's data is in the grid: each is judged on an interval, none lacks its rows
    assert all(" [" in line and "no warm" not in line and "no interval" not in line
               for line in claim_rows), claim_rows
    assert all(("% interval " in line) and any(
        word in line for word in ("straddles", "wholly", "lies within")) for line in claim_rows
    ), claim_rows
    # every point with two different values is above the config's tiny CV threshold
    flagged = md.split("### Flagged points", 1)[1].split("\n#", 1)[0]
    assert flagged.count("CV above 0%") == (table["cv"] > 1e-9).sum() > 0
    assert "Verdicts: " in md and "claims.png" in md
    # the same claims, machine-readable, for perfgrid gallery: verdicts and intervals
    claims = read_claims(tree / "results/tiny/claims.csv")
    assert [c.verdict for c in claims] == [
        next(v for v in VERDICTS if f"| {v} |" in line) for line in claim_rows]
    assert all(c.ci_low <= c.value <= c.ci_high for c in claims)
    assert html.count("data:image/png;base64,") == 3  # the claims figure and two plots
    assert "http://" not in html and "https://" not in html
    # the noise profile ran first (the run's experiments' pairs: file_read's) and is reported
    noise = json.loads((tree / "results/tiny/noise.json").read_text())
    assert noise["blocks"] == 2 and list(noise["pairs"]) == ["file_read 1 MiB warm"]
    assert len(noise["pairs"]["file_read 1 MiB warm"]["records"]) == 2
    assert "not among this run's experiments" in noise["skipped"]["syscall getuid"]
    assert "## Noise profile" in md and "| file_read 1 MiB warm | readinto / dd |" in md
    assert "<h2>Noise profile</h2>" in html


@pytest.mark.pipeline
def test_a_local_run_stops_snakemakes_rate_limiter(tree):
    """Left running, it would wake Snakemake beside every measurement (noise.quiet_scheduler)."""
    record = json.loads((tree / "results/tiny/run.json").read_text())
    assert record["job_rate_limiter_stopped"] is True


@pytest.mark.pipeline
def test_every_result_is_complete_pyperf_json(tree):
    for path in (tree / "results/tiny/raw").rglob("*.json"):
        bench = pyperf.Benchmark.load(str(path))
        assert len(bench.get_values()) in (2, 3)  # 1 process x 2, or 3 x 1 for a claim point
        assert bench.get_metadata()["perfgrid_experiment"] == "file_read"
    assert not list((tree / "results").rglob(".*.tmp*"))


@pytest.mark.pipeline
def test_no_two_benchmark_jobs_overlapped(tree):
    spans = sorted(
        (meta["perfgrid_started"], meta["perfgrid_finished"])
        for meta in (pyperf.Benchmark.load(str(p)).get_metadata()
                     for p in (tree / "results/tiny/raw").rglob("*.json"))
    )
    assert len(spans) >= 7
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end
    # the noise profile (priority 1) measured before the first benchmark
    noise = json.loads((tree / "results/tiny/noise.json").read_text())
    assert noise["started"] + noise["seconds"] <= spans[0][0]


@pytest.mark.pipeline
def test_up_to_date_dry_run_plans_nothing(tree):
    output = run(tree, "-n")
    assert "Nothing to be done" in output


@pytest.mark.pipeline
def test_editing_the_workload_reruns_its_jobs_and_what_derives(tree):
    points = len(GRID) - len(json.loads((tree / "results/tiny/skipped.json").read_text()))
    with edited(tree / "src/perfgrid/experiments/file_read/__init__.py"):
        counts = job_counts(run(tree, "-n"))
    # the test file and its temp() ready note are removed after the run: made again first,
    # and the noise profile, which reads it, measured again before the benchmarks
    assert counts == {"testfile": 1, "noise_profile": 1, "file_read": points, "table": 1,
                      "plots": 1, "report": 1, "all": 1}
    assert "Nothing to be done" in run(tree, "-n")  # the edit undone, the tree as it was


@pytest.mark.pipeline
def test_editing_a_plot_reruns_only_plots_and_report(tree):
    with edited(tree / "src/perfgrid/experiments/file_read/analysis.py"):
        counts = job_counts(run(tree, "-n"))
    assert counts == {"plots": 1, "report": 1, "all": 1}


@pytest.mark.pipeline
@pytest.mark.parametrize("edit, reruns_profile", [
    ({"noise": {"profile": {"blocks": 3}}}, True),   # what the profile measures
    ({"noise": {"cv_threshold": 0.5}}, False),       # a key it does not read
])
def test_a_config_edit_reruns_the_noise_profile_only_when_it_changes_what_it_measures(
        tree, edit, reruns_profile):
    config = tree / "tiny.yaml"
    before, times = config.read_bytes(), config.stat()
    raw = yaml.safe_load(before)
    for section, keys in edit.items():
        for key, value in keys.items():
            raw[section][key] = {**raw[section].get(key, {}), **value} if isinstance(
                value, dict) else value
    try:
        config.write_text(yaml.safe_dump(raw))
        counts = job_counts(run(tree, "-n"))
    finally:
        config.write_bytes(before)
        os.utime(config, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert ("noise_profile" in counts) == reruns_profile, counts
    # no benchmark reads these keys: file_read's jobs rerun only where the profile needs
    # the test file made again (it is removed after a run), as after any profile rerun
    assert ("file_read" in counts) == ("testfile" in counts) == reruns_profile, counts


@pytest.mark.pipeline
def test_report_zip_has_every_plot(tree):
    run(tree, "--report", "report.zip")
    import zipfile

    names = zipfile.ZipFile(tree / "report.zip").namelist()
    assert any(n.endswith("throughput_by_block_size.png") for n in names)
    assert any(n.endswith("parallel_by_workers.png") for n in names)


@pytest.mark.pipeline
def test_the_report_job_imports_neither_seaborn_nor_scipy_stats(tree, tmp_path):
    """The report draws no seaborn figure and takes t quantiles from scipy.special: seaborn,
    which imports scipy.stats, and scipy.stats were ~0.5 s of each report's ~2.5 s."""
    root = tree / "results" / "tiny"
    args = ["report", "--root", str(root), "--experiments", "file_read", "--cv-threshold",
            "0.1", "--fixture-facts", f"testfile={root / 'data' / 'testfile.bin.json'}",
            "--noise-profile", str(root / "noise.json"),
            "--html", str(tmp_path / "report.html"), "--md", str(tmp_path / "report.md")]
    code = ("import atexit, runpy, sys\n"
            "atexit.register(lambda: print('loaded', [m for m in ('seaborn', 'scipy.stats')"
            " if m in sys.modules]))\n"
            f"sys.argv = ['perfgrid', *{args!r}]\n"
            "runpy.run_module('perfgrid.pipeline.cli', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tree)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "report.md").is_file()
    assert done.stdout.splitlines()[-1] == "loaded []"


@pytest.mark.pipeline
def test_archive_round_trip(tree, tmp_path):
    import subprocess
    import tarfile

    from perfgrid.publish import archive

    run(tree, "--cores", "1", "archive")
    (made,) = (tree / "results/archive").glob("perfgrid-tiny-*.tar.gz")
    assert archive.verify(made) == []
    cli = subprocess.run([*SNAKEMAKE[:1], "-m", "perfgrid.pipeline.cli", "verify", str(made)],
                         capture_output=True, text=True)
    assert cli.returncode == 0 and "OK" in cli.stdout

    # tamper one byte of one table: verify names it and fails
    tampered = tmp_path / "tampered.tar.gz"
    with tarfile.open(made) as src, tarfile.open(tampered, "w:gz") as dst:
        for member in src:
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("tables/file_read.csv"):
                data = data[:-2] + bytes([data[-2] ^ 1]) + data[-1:]
            dst.addfile(member, __import__("io").BytesIO(data) if data is not None else None)
    problems = archive.verify(tampered)
    assert problems == ["changed: results/tiny/tables/file_read.csv"]
    cli = subprocess.run([*SNAKEMAKE[:1], "-m", "perfgrid.pipeline.cli", "verify", str(tampered)],
                         capture_output=True, text=True)
    assert cli.returncode == 1 and "changed" in cli.stdout

    # extracted elsewhere, the workflow plans nothing
    top = archive.extract(made, tmp_path / "extracted")
    result = subprocess.run(
        [*SNAKEMAKE, "-n", "--configfile", "results/tiny/config.used.yaml"],
        cwd=top, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Nothing to be done" in result.stdout + result.stderr

    # and a comparison of the folder against the archive: identical, not significant
    out = tmp_path / "cmp"
    cli = subprocess.run([*SNAKEMAKE[:1], "-m", "perfgrid.pipeline.cli", "compare",
                          str(tree / "results/tiny"), str(made), "--out", str(out)],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    md = (out / "compare.md").read_text()
    assert "| significant |" not in md and "not significant" in md
    assert "0 claims changed verdict" in md
    assert (out / "file_read_ratio.png").exists()


@pytest.mark.pipeline
def test_a_report_from_the_archive_alone_reproduces_the_claims(tree, tmp_path):
    """The archive's crate names what ran as machine.json recorded it, its SHA-256 stands
    beside it, and ``perfgrid report ARCHIVE -o DIR`` on a fresh folder (this code, the
    archive's raw results) gives the run's tables and claims table byte for byte."""
    import hashlib
    import subprocess
    from urllib.parse import unquote

    from rocrate.rocrate import ROCrate

    from perfgrid.publish import archive

    run(tree, "--cores", "1", "archive")
    (made,) = (tree / "results/archive").glob("perfgrid-tiny-*.tar.gz")
    digest = hashlib.sha256(made.read_bytes()).hexdigest()
    assert archive.sidecar(made).read_text() == f"{digest}  {made.name}\n"

    top = archive.extract(made, tmp_path / "extracted")
    crate = ROCrate(top)
    (action,) = crate.get_by_type("CreateAction")
    assert action["instrument"] is crate.mainEntity and crate.mainEntity.id == "Snakefile"
    assert "results/tiny/report.md" in {e.id for e in action["result"]}
    machine = json.loads((tree / "results/tiny/machine.json").read_text())
    versions = {a["name"]: a["softwareVersion"]
                for a in crate.mainEntity["softwareRequirements"]}
    assert versions["snakemake"] == machine["packages"]["snakemake"]
    assert versions["C compiler (cc)"] == machine["tools"]["cc"]
    assert versions["fio"] == machine["tools"]["fio"]
    for entity in crate.get_by_type("File"):
        data = (top / unquote(entity.id)).read_bytes()
        assert entity["sha256"] == hashlib.sha256(data).hexdigest(), entity.id

    fresh = tmp_path / "fresh"
    done = subprocess.run([*SNAKEMAKE[:1], "-m", "perfgrid.pipeline.cli", "report", str(made),
                           "-o", str(fresh)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not the archive's own code" in done.stdout
    ran = tree / "results/tiny"
    files = Layout(ran).table_files("file_read")  # the table and its side tables
    assert sorted(p.name for p in (fresh / "tables").iterdir()) == sorted(p.name for p in files)
    assert {f"results/tiny/tables/{p.name}" for p in files} <= {e.id for e in action["result"]}
    for path in files:
        assert (fresh / "tables" / path.name).read_bytes() == path.read_bytes(), path.name

    def claims(report: str) -> str:
        return report[report.index("## Claims"):report.index("## Precision")]

    rendered = (fresh / "report.md").read_text()
    assert claims(rendered) == claims((ran / "report.md").read_text())
    assert claims(rendered).count("| file_read |") >= 2  # the table, not just its title
    assert f"rendered from: archive {made.name} (sha256 {digest})" in rendered
    assert (fresh / "report.html").exists() and (fresh / "claims.png").exists()
    assert sorted(p.name for p in (fresh / "plots/file_read").glob("*.png")) == sorted(
        p.name for p in (ran / "plots/file_read").glob("*.png"))


def test_archive_never_extracts_outside_its_folder(tmp_path):
    import io
    import tarfile

    from perfgrid.publish import archive

    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        for name in ("top/ok.txt", "top/../../escaped.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(ValueError, match="outside"):
        archive.extract(evil, tmp_path / "target")
    assert not (tmp_path / "escaped.txt").exists()
    assert not (tmp_path / "target" / "top" / "ok.txt").exists()


@pytest.mark.pipeline
def test_a_a_run_reports_the_noise_floor(tree):
    """`perfgrid aa` runs one small config twice and compares the two runs; Snakemake's
    arguments after `--` reach both runs (here: up to the tables, all a comparison reads;
    the tree above has checked the plots and the report)."""
    import subprocess

    config = {**CONFIG, "file_read": {**CONFIG["file_read"], "variants": ["read", "dd"],
                                      "block_sizes": [1048576], "bindings": ["none"],
                                      "workers": [1]}}
    (tree / "aa.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [*SNAKEMAKE[:1], "-m", "perfgrid.pipeline.cli", "aa", "--configfile", "aa.yaml",
         "--label", "aa", "--cores", "2", "--", "--until", "table"], cwd=tree,
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "testable points" in done.stdout and "claims changed verdict" in done.stdout
    for side in ("a", "b"):
        assert (tree / f"results/aa-{side}/tables/file_read.csv").exists()
        assert not (tree / f"results/aa-{side}/report.md").exists()  # `--until table` went on
    points = pd.read_csv(tree / "results/compare/aa-aa/points.csv")
    assert len(points) == 2 and {"ratio_ci_low", "ratio_ci_high", "q", "test"} <= set(points)
    assert "Claims whose verdict changed" in (tree / "results/compare/aa-aa/compare.md").read_text()
