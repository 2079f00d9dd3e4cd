"""docs/adding-an-experiment.md's worked example, built and run through the pipeline.

The test copies the workflow, writes the guide's two modules into the copy, makes the
edits the guide's table lists (the name in the schema, its section; the registry finds the
module by itself), and runs Snakemake to the report: a new experiment needs nothing else.
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

from helpers import REPO, copy_workflow

GUIDE = REPO / "docs" / "adding-an-experiment.md"

pytestmark = pytest.mark.pipeline


def guide_files() -> dict[str, str]:
    """The guide's code blocks, by the name in the comment above each."""
    text = GUIDE.read_text()
    return dict(re.findall(r"<!-- file: (.+?) -->\n```\w+\n(.*?)```", text, re.S))


def add_toy(root: Path) -> None:
    """The guide's edits, made in the copy at ``root``."""
    files = guide_files()
    for name in ("src/perfgrid/experiments/toy.py", "src/perfgrid/analysis/toy.py"):
        (root / name).write_text(files[name])
    schema_path = root / "workflow" / "schemas" / "config.schema.yaml"
    schema = yaml.safe_load(schema_path.read_text())
    schema["properties"]["experiments"]["items"]["enum"].append("toy")
    schema["properties"].update(yaml.safe_load(files["schema section"]))
    schema_path.write_text(yaml.safe_dump(schema, sort_keys=False))


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
