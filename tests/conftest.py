"""Fixtures shared by the test modules, and the CI rule: no test may skip in CI.

Helpers live in ``helpers.py``; this file keeps fixtures and hooks only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgrid.kit import testfile

from helpers import copy_workflow, in_ci, run

#: (test id, reason) of every test skipped in this session
_SKIPPED: list[tuple[str, str]] = []

#: fixtures that run Snakemake (``tree`` here and in tests/test_slurm.py, ``quick`` and
#: ``summary`` in tests/test_quick_config.py, ``without_tools`` in
#: tests/test_reliability.py): a test that uses one, even through another fixture, runs it
#: (tests/test_markers.py finds every such fixture and checks it is named here)
RUNS_SNAKEMAKE = frozenset({"tree", "quick", "summary", "without_tools"})
#: one set under two names: ``-m "not pipeline"`` and ``-m "not snakemake"`` leave out the same
PIPELINE_MARKERS = ("pipeline", "snakemake")
#: the modules whose tests measure (run the harness, a load, perf or the noise profile) or
#: load the machine on purpose (tests/test_reliability.py's hogs): with every test that runs
#: Snakemake (its benchmark jobs measure), they are marked ``serial``; ``make test`` runs
#: them first, alone, and the rest after them in parallel (pytest-xdist), so nothing runs
#: beside a test that measures
MEASURING_MODULES = frozenset({
    "test_adaptive", "test_counters", "test_erlang", "test_file_read", "test_http",
    "test_noiseprofile", "test_openloop", "test_quiet", "test_reliability", "test_ring",
    "test_spawn", "test_syscall", "test_timers"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that runs Snakemake carries ``pipeline`` and ``snakemake``: marked with either
    (module or test), or using a fixture of :data:`RUNS_SNAKEMAKE`. Those, and the tests of
    :data:`MEASURING_MODULES`, carry ``serial``."""
    for item in items:
        if (RUNS_SNAKEMAKE.intersection(getattr(item, "fixturenames", ()))
                or any(item.get_closest_marker(name) for name in PIPELINE_MARKERS)):
            for name in PIPELINE_MARKERS:
                if item.get_closest_marker(name) is None:
                    item.add_marker(name)
        if item.get_closest_marker("serial") is None and (
                item.get_closest_marker("pipeline") is not None
                or Path(str(item.path)).stem in MEASURING_MODULES):
            item.add_marker("serial")


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


@pytest.fixture(autouse=True)
def _one_run_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests of an analysis judge their synthetic tables as one run: the between-run
    component the recorded runs give (perfgrid.analyse.betweenrun) is set aside in this process,
    except in tests marked ``between_run``, which check it (tests/test_betweenrun.py keeps
    its own). A pipeline's jobs, in processes of their own, judge as a user's run does."""
    if request.node.get_closest_marker("between_run") is None:
        from perfgrid.analyse import betweenrun

        monkeypatch.setattr(betweenrun, "run_of", lambda root: betweenrun.Judging())


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
