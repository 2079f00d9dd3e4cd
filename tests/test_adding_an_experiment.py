"""docs/adding-an-experiment.md's worked example, built and run through the pipeline.

The test copies the workflow, writes the guide's three files of the package into the copy
(the registry finds the package, the schema takes its section, by themselves), and runs
Snakemake to the report: a new experiment needs nothing else.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from perfgrid.experiments.base import ANALYSIS_FILE, SCHEMA_FILE

from helpers import REPO, copy_workflow

GUIDE = REPO / "docs" / "adding-an-experiment.md"
PACKAGE = "src/perfgrid/experiments/<name>/"


def guide_files() -> dict[str, str]:
    """The guide's code blocks, by the name in the comment above each."""
    text = GUIDE.read_text()
    return dict(re.findall(r"<!-- file: (.+?) -->\n```\w+\n(.*?)```", text, re.S))


def add_toy(root: Path) -> None:
    """The guide's files, written in the copy at ``root``: nothing else is edited."""
    for name, text in guide_files().items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_guides_table_lists_the_package_files_its_example_writes():
    """The table's package rows are the example's files, which are the names the pipeline
    looks for; nothing outside the package is written."""
    rows = re.findall(r"^\| `([^`]+)`", GUIDE.read_text(), re.M)
    listed = {row.replace("<name>", "toy") for row in rows if row.startswith(PACKAGE)}
    assert listed == set(guide_files())
    assert {Path(name).name for name in listed} == {"__init__.py", ANALYSIS_FILE, SCHEMA_FILE}


@pytest.mark.pipeline
def test_the_guides_toy_experiment_runs_to_the_report(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    copy_workflow(root, None)
    add_toy(root)
    config = {"host": "toy", "experiments": ["toy"], "results": str(tmp_path / "results"),
              "toy": {"sizes": [100, 10000]},
              "measure": {"processes": 1, "values": 2, "warmups": 0, "loops": 5,
                          "target_ci": None, "max_seconds": None}}
    (root / "toy.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    snakemake = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "toy.yaml"]
    proc = subprocess.run(snakemake, cwd=root, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = tmp_path / "results" / "toy"
    table = pd.read_csv(result / "tables" / "toy.csv")
    assert sorted(zip(table["variant"], table["size"], strict=True)) == [
        ("builtin", 100), ("builtin", 10000), ("loop", 100), ("loop", 10000)]
    assert (table["rate"] > 0).all()
    report = (result / "report.md").read_text()
    assert "## toy" in report
    assert "The builtin sum is faster than a Python loop" in report
