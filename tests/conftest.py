"""Fixtures shared by the test modules, the CI rule (no test may skip in CI), and
which tests may run side by side under pytest-xdist.

Helpers live in ``helpers.py``; this file keeps fixtures and hooks only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgrid import testfile

from helpers import copy_workflow, in_ci, run

#: the xdist group of the tests that run benchmark jobs (pytest-xdist's ``loadgroup``)
PIPELINE_GROUP = "pipeline"
#: ... and of the SLURM tests, which mostly wait on SLURM's status checks
SLURM_GROUP = "slurm"
#: (test id, reason) of every test skipped in this session
_SKIPPED: list[tuple[str, str]] = []


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``pipeline`` tests that run benchmark jobs in one xdist group: with ``-n N
    --dist loadgroup`` (``make test``) they run one after another on one worker, so their
    pipelines never measure beside each other, while the other tests share the other
    workers. Pipeline tests whose Snakemake stops before any benchmark job
    (``stops_before_benchmarks``) need no such care. The SLURM tests are a group of their
    own, which may run beside the first: they mostly wait between SLURM's status checks,
    and assert where the jobs ran, not how fast."""
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group(SLURM_GROUP))
        elif (item.get_closest_marker("pipeline")
                and not item.get_closest_marker("stops_before_benchmarks")):
            item.add_marker(pytest.mark.xdist_group(PIPELINE_GROUP))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember each skip (an expected failure is not a skip)."""
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(
            report.longrepr)
        _SKIPPED.append((report.nodeid, reason.removeprefix("Skipped: ")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI every collected test must run: a skip (a tool or SLURM missing) fails the run."""
    if in_ci() and _SKIPPED and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Say why a CI run failed although every test passed."""
    if in_ci() and _SKIPPED:
        terminalreporter.section("skipped in CI (each fails the run)", red=True)
        for nodeid, reason in _SKIPPED:
            terminalreporter.line(f"{nodeid}: {reason}")


@pytest.fixture(scope="session")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4 MiB seeded random file (page-size multiple)."""
    path = tmp_path_factory.mktemp("data") / "small.bin"
    testfile.generate(path, 4 << 20, seed=7)
    return path


@pytest.fixture(scope="session")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the workflow (so edits stay here) after one complete run."""
    root = copy_workflow(tmp_path_factory.mktemp("tree"))
    run(root, "--cores", "2")
    return root
