"""Each job's code inputs are the import closure of what it runs
(perfgrid.design.codeinputs), so editing a module reruns the jobs that run it, and no other."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfgrid import experiments
from perfgrid.design import jobs
from perfgrid.design.codeinputs import code_inputs
from perfgrid.kit.paths import PACKAGE

from helpers import edited, job_counts, run


def write(root: Path, files: dict[str, str]) -> Path:
    """A package ``perfgrid`` under ``root`` with these files (path -> source)."""
    package = root / "perfgrid"
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return package


def listed(package: Path, *roots: str) -> list[str]:
    return [path.removeprefix(f"{package}/") for path in code_inputs(package, *roots)]


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return write(tmp_path, {
        "__init__.py": '"""The package."""\n',
        "plots.py": """
            import json
            import os.path

            import numpy as np
            import pandas

            from perfgrid import scaling


            def write():
                from perfgrid.helpers import draw  # imported lazily, only when called

                return draw()
            """,
        "scaling.py": "from .sub import deep\n",
        "helpers.py": """
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from perfgrid import typing_only


            def draw():
                try:
                    from perfgrid.sub import other
                except ImportError:
                    other = None
                return other
            """,
        "typing_only.py": "",
        "sub/__init__.py": "",
        "sub/deep.py": "from . import sibling\n",
        "sub/sibling.py": "",
        "sub/other.py": "",
        "unused.py": "import perfgrid.plots\n",
        "cli.py": """
            from perfgrid.atomic import write


            def _plots():
                from perfgrid.plots import write


            def _report():
                from perfgrid import report
            """,
        "atomic.py": "",
        "report.py": 'TEMPLATE = "page.html.j2"\n',
        "templates/page.html.j2": "",
        "templates/other.html.j2": "",
    })


def test_a_module_imported_inside_a_function_is_found(package):
    found = listed(package, "perfgrid.plots")
    assert "helpers.py" in found  # imported in write()
    assert "sub/other.py" in found  # imported in draw(), in a try


def test_relative_imports_and_parent_packages_are_followed(package):
    found = listed(package, "perfgrid.plots")
    assert {"__init__.py", "scaling.py", "sub/__init__.py", "sub/deep.py",
            "sub/sibling.py"} <= set(found)


def test_only_files_of_the_package_are_listed(package):
    found = listed(package, "perfgrid.plots")
    assert found == sorted(found)
    assert all((package / rel).is_file() for rel in found)
    # json, os.path (standard library), numpy, pandas (third party): no file of the package
    assert not any(name in rel for rel in found for name in ("json", "os", "numpy", "pandas"))
    assert "unused.py" not in found  # it imports plots; plots does not import it
    assert "typing_only.py" not in found  # imported for type checkers only


def test_a_root_may_be_one_function_of_an_entry_point(package):
    found = listed(package, "perfgrid.cli:_plots")
    assert {"cli.py", "atomic.py", "plots.py", "helpers.py"} <= set(found)
    assert "report.py" not in found  # another command's import
    assert "report.py" in listed(package, "perfgrid.cli")


def test_a_data_file_a_module_names_is_listed(package):
    assert listed(package, "perfgrid.report") == ["__init__.py", "report.py",
                                                  "templates/page.html.j2"]


# --- the real package -----------------------------------------------------------------


def real(*roots: str) -> set[str]:
    return {path.removeprefix(f"{PACKAGE}/") for path in code_inputs(PACKAGE, *roots)}


def plots_code(experiment: str) -> set[str]:
    return real("perfgrid.pipeline.cli:_plots", f"perfgrid.experiments.{experiment}.analysis")


def test_a_plot_job_runs_the_plot_helpers_and_its_own_analysis_only():
    names = experiments.available()
    for name in names:
        found = plots_code(name)
        assert {"publish/plots.py", "analyse/scaling.py", "analyse/analysis/__init__.py",
                f"experiments/{name}/analysis.py"} <= found
        assert not {f"experiments/{other}/analysis.py" for other in names} - {
            f"experiments/{name}/analysis.py"} & found
        assert "measure/bench.py" not in found and "publish/report/__init__.py" not in found


def test_no_benchmark_or_table_job_runs_an_analysis_or_the_plot_helpers():
    for name in experiments.available():
        workload = {p.removeprefix(f"{PACKAGE}/")
                    for p in jobs.workload(experiments.get(name), str(PACKAGE))}
        table = real("perfgrid.pipeline.cli:_table", f"perfgrid.experiments.{name}")
        assert {"measure/bench.py", f"experiments/{name}/__init__.py"} <= workload
        for code in (workload, table):
            assert not any(p.endswith("analysis.py") for p in code)
            assert "publish/plots.py" not in code


def test_the_report_reads_its_templates():
    assert {"publish/report/__init__.py", "templates/report.html.j2",
            "templates/report.md.j2"} <= real("perfgrid.pipeline.cli:_report")


def test_what_a_plot_job_imports_is_in_its_code_inputs():
    """The modules of perfgrid loaded by importing what a plot job runs, asked of Python
    itself, are all in the closure found by reading."""
    script = ("import sys, perfgrid.publish.plots, perfgrid.experiments.file_read.analysis\n"
              "print('\\n'.join(m for m in sys.modules if m.startswith('perfgrid')))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True).stdout.split()
    found = plots_code("file_read")
    for module in loaded:
        parts = module.split(".")[1:]
        assert ("/".join(parts) + ".py" in found
                or "/".join([*parts, "__init__.py"]) in found), module


# --- a pipeline after one complete run ------------------------------------------------


@pytest.mark.pipeline
def test_editing_the_plot_helpers_reruns_the_plot_jobs(tree):
    with edited(tree / "src/perfgrid/publish/plots.py"):
        output = run(tree, "-n")
    # the report shows the figures: Snakemake makes it again after them
    assert job_counts(output) == {"plots": 1, "report": 1, "all": 1}
    assert "Nothing to be done" in run(tree, "-n")


@pytest.mark.pipeline
def test_editing_an_experiments_analysis_reruns_its_plots_and_report(tree):
    with edited(tree / "src/perfgrid/experiments/file_read/analysis.py"):
        output = run(tree, "-n")
    # its table is aggregated without it (test_no_benchmark_or_table_job_runs_an_analysis)
    assert job_counts(output) == {"plots": 1, "report": 1, "all": 1}
    assert "experiment=file_read" in output


@pytest.mark.pipeline
def test_editing_a_module_no_job_runs_reruns_nothing(tree):
    with edited(tree / "src/perfgrid/publish/gallery.py"):
        assert "Nothing to be done" in run(tree, "-n")


@pytest.mark.pipeline
def test_editing_the_aggregation_reruns_the_tables_and_what_derives(tree):
    with edited(tree / "src/perfgrid/analyse/aggregate.py"):
        counts = job_counts(run(tree, "-n"))
    assert counts == {"table": 1, "plots": 1, "report": 1, "all": 1}
