"""docs/adding-an-experiment.md's worked example, built and run through the pipeline.

The test copies the workflow, writes the guide's four files of the package into the copy
(the registry finds the package, the schema takes its section, the ledger its claim, by
themselves), and runs Snakemake to the report: a new experiment needs nothing else.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from perfgrid import experiments
from perfgrid.analyse import ledger
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
    assert {Path(name).name for name in listed} == {"__init__.py", ANALYSIS_FILE, SCHEMA_FILE,
                                                    ledger.FILE}


@pytest.mark.pipeline
def test_the_guides_toy_experiment_runs_to_the_report(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    copy_workflow(root, None)
    add_toy(root)
    config = {"host": "toy", "experiments": ["toy"], "results": str(tmp_path / "results"),
              "toy": {"list_sizes": [100, 10000]},
              # a plumbing test, not a measurement: never wait for a quiet machine, and no
              # noise profile (the toy has no pair to profile)
              "noise": {"busy_share": 1.0, "profile": {"blocks": 0}},
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
    assert sorted(zip(table["variant"], table["list_size"], strict=True)) == [
        ("builtin", 100), ("builtin", 10000), ("for_loop", 100), ("for_loop", 10000)]
    assert (table["rate"] > 0).all()
    report = (result / "report.md").read_text()
    assert "## toy" in report
    assert "The builtin sum is faster than a Python loop" in report


#: the tests of shared code that list the experiments, read their config sections or their
#: words, run again with a seventh experiment in the tree (this file adds the toy itself)
REGISTRY_READERS = ("test_registry.py", "test_layers.py", "test_config.py",
                    "test_config_readme.py", "test_ledger.py", "test_order.py",
                    "test_erlang.py", "test_auto_workers.py", "test_code_inputs.py")
#: the seventh's name: the toy renamed, so that the tests that add the toy themselves still can
SEVENTH = "sums"


def free_place() -> int:
    """A report position no experiment holds, among the others rather than last."""
    taken = sorted(experiments.get(e).report_position for e in experiments.available())
    return next(p for p in range(taken[0] + 1, taken[-1] + 2) if p not in taken)


@pytest.mark.pipeline
def test_a_seventh_experiment_breaks_no_test_of_shared_code(tmp_path):
    """What the guide asks of a new experiment and nothing else: its package (the guide's
    files, renamed), its sections in config/config.yaml and config/quick.yaml, and its key
    table in config/README.md written by ``python -m perfgrid.pipeline.configdoc``. The tests that
    list the experiments, read their sections or guard their words pass there unchanged."""
    root = tmp_path / "repo"
    root.mkdir()
    copy_workflow(root, None)
    for name in ("tests", "docs"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", root)  # the markers
    shutil.copy2(REPO / "README.md", root)  # its Layout names every module
    place = free_place()
    for name, text in guide_files().items():
        text = re.sub(r"\btoy\b", SEVENTH, text).replace("Toy", SEVENTH.title())
        text = re.sub(r"report_position = \d+.*", f"report_position = {place}", text)
        path = root / name.replace("/toy/", f"/{SEVENTH}/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for config, section in (("config.yaml", {"list_sizes": [1000, 100000]}),
                            ("quick.yaml", {"list_sizes": [1000]})):
        with (root / "config" / config).open("a") as out:
            out.write("\n" + yaml.safe_dump({SEVENTH: section}))
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    subprocess.run([sys.executable, "-m", "perfgrid.pipeline.configdoc"], cwd=root, env=env,
                   check=True, capture_output=True, timeout=120)
    assert f"## {SEVENTH}" in (root / "config" / "README.md").read_text()
    names = subprocess.run([sys.executable, "-c", "from perfgrid import experiments; "
                            "print(' '.join(experiments.available()))"], cwd=root, env=env,
                           check=True, capture_output=True, text=True, timeout=120)
    before = [e for e in experiments.available() if experiments.get(e).report_position < place]
    assert before and names.stdout.split() == [*before, SEVENTH,
                                               *experiments.available()[len(before):]]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-m", "not pipeline", *(f"tests/{t}" for t in REGISTRY_READERS)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert re.search(r"\d+ passed", done.stdout) and " failed" not in done.stdout
