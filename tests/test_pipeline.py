"""End to end: a tiny file_read grid through Snakemake, then what reruns after edits."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pandas as pd
import pyperf
import pytest
import yaml

from conftest import REPO, SNAKEMAKE
from perfgrid import settings
from perfgrid.analysis import VERDICTS

pytestmark = pytest.mark.pipeline

CONFIG = {
    "host": "tiny",
    "experiments": ["file_read"],
    "testfile": {"size": "8MiB", "seed": 3},
    "file_read": {
        "variants": ["read", "readinto", "whole", "pread_parallel", "dd", "fio"],
        "block_sizes": [65536],
        "parallel_block_sizes": [1048576],
        "workers": [1, 2],
        "bindings": ["none", "single"],
        "caches": ["warm"],
        "measure": {"processes": 1, "values": 2, "warmups": 0, "loops": 1},
    },
}


def run(tree: Path, *args: str) -> str:
    import subprocess

    result = subprocess.run(
        [*SNAKEMAKE, "--configfile", str(tree / "tiny.yaml"), *args],
        cwd=tree, capture_output=True, text=True, timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def edit(path: Path) -> None:
    """Change a source file's content (Snakemake compares content, not just mtime)."""
    with open(path, "a") as handle:
        handle.write("\n# edited by a test\n")


def job_counts(output: str) -> dict[str, int]:
    """Rule -> job count from Snakemake's "Job stats" table."""
    stats = output.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.MULTILINE)
            if m.group(1) != "total"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the workflow (so edits stay here) after one complete run."""
    root = tmp_path_factory.mktemp("tree")
    for name in ("Snakefile", "workflow", "config", "profiles", "src"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, root / name)
    (root / "tiny.yaml").write_text(yaml.safe_dump(CONFIG))
    run(root, "--cores", "2")
    return root


def effective() -> dict:
    from snakemake.utils import validate

    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg.update(CONFIG)
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return settings.effective(cfg, check_disk=False)


def test_every_grid_point_reaches_the_table_and_report(tree):
    runnable, skipped = settings.split_grid(effective(), "file_read")
    table = pd.read_csv(tree / "results/tiny/tables/file_read.csv")
    assert len(table) == len(runnable)
    axes = ["variant", "cache", "binding", "workers", "block_size"]
    got = {tuple(r) for r in table[axes].itertuples(index=False)}
    assert got == {tuple(p[a] for a in axes) for p in runnable}
    assert (table["rate"] > 0).all() and (table["n_values"] == 2).all()
    assert table.loc[table["variant"] == "dd", "ratio_to_native"].eq(1.0).all()
    md = (tree / "results/tiny/report.md").read_text()
    html = (tree / "results/tiny/report.html").read_text()
    for variant in table["variant"].unique():
        assert f"| {variant} |" in md
    claim_rows = [line for line in md.splitlines() if line.startswith("| file_read |")]
    assert len(claim_rows) == 5
    assert all(any(f"| {v} |" in line for v in VERDICTS) for line in claim_rows)
    assert html.count("data:image/png;base64,") == 2
    assert "http://" not in html and "https://" not in html
    recorded = json.loads((tree / "results/tiny/skipped.json").read_text())
    assert len(recorded) == len(skipped)


def test_every_result_is_complete_pyperf_json(tree):
    for path in (tree / "results/tiny/raw").rglob("*.json"):
        bench = pyperf.Benchmark.load(str(path))
        assert len(bench.get_values()) == 2
        assert bench.get_metadata()["perfgrid_experiment"] == "file_read"
    assert not list((tree / "results").rglob(".*.tmp*"))


def test_no_two_benchmark_jobs_overlapped(tree):
    spans = sorted(
        (meta["perfgrid_started"], meta["perfgrid_finished"])
        for meta in (pyperf.Benchmark.load(str(p)).get_metadata()
                     for p in (tree / "results/tiny/raw").rglob("*.json"))
    )
    assert len(spans) >= 7
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end


def test_up_to_date_dry_run_plans_nothing(tree):
    started = time.perf_counter()
    output = run(tree, "-n")
    elapsed = time.perf_counter() - started
    assert "Nothing to be done" in output
    print(f"up-to-date dry run: {elapsed:.2f} s")


def test_editing_the_workload_reruns_its_jobs_and_what_derives(tree):
    points = len(settings.split_grid(effective(), "file_read")[0])
    edit(tree / "src/perfgrid/experiments/file_read.py")
    counts = job_counts(run(tree, "-n"))
    assert counts == {"file_read": points, "table": 1, "plots": 1, "report": 1, "all": 1}


def test_editing_a_plot_reruns_only_plots_and_report(tree):
    run(tree, "--cores", "2", "--touch")  # bring everything up to date again
    edit(tree / "src/perfgrid/analysis/file_read.py")
    counts = job_counts(run(tree, "-n"))
    assert counts == {"plots": 1, "report": 1, "all": 1}


def test_report_zip_has_every_plot(tree):
    run(tree, "--report", "report.zip")
    import zipfile

    names = zipfile.ZipFile(tree / "report.zip").namelist()
    assert any(n.endswith("throughput_by_block_size.png") for n in names)
    assert any(n.endswith("parallel_by_workers.png") for n in names)
