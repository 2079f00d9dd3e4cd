"""Fixtures shared by the test modules, and the CI rule: no test may skip in CI.

Helpers live in ``helpers.py``; this file keeps fixtures and hooks only.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from perfgrid.kit import testfile

from helpers import SNAKEMAKE, copy_workflow, in_ci, run

#: (test id, reason) of every test skipped in this session
_SKIPPED: list[tuple[str, str]] = []

#: fixtures that run Snakemake (``tree`` and ``quick`` here, ``tree`` in tests/test_slurm.py,
#: ``summary`` in tests/test_quick_config.py, ``without_tools`` in
#: tests/test_reliability.py): a test that uses one, even through another fixture, runs it
#: (tests/test_markers.py finds every such fixture and checks it is named here)
RUNS_SNAKEMAKE = frozenset({"tree", "quick", "summary", "without_tools"})
#: one set under two names: ``-m "not pipeline"`` and ``-m "not snakemake"`` leave out the same
PIPELINE_MARKERS = ("pipeline", "snakemake")
# ``serial`` (marked by hand, test by test or module by module; tests/test_markers.py
# lists them): the test measures (asserts on a time or a count a busy machine would
# change), waits for a quiet machine (the shipped quick config: its busy_share flags
# rows; a harness round with ``--busy-share 0``), or loads every CPU on purpose.
# ``make test`` runs these first, one at a time, with nothing beside them; the rest after
# them in parallel (pytest-xdist): Snakemake runs of plumbing configs
# (``noise.busy_share: 1.0`` never waits nor flags), the harness's correctness checks,
# whose bounds hold however busy the machine is, and the user commands on the quick run's
# output (tests/test_quick_commands.py: they read it, measure nothing).

#: a folder ``make test`` makes for each of its runs and removes after: its serial lane
#: leaves the quick run there (:func:`quick`), and its parallel lane's user commands read it
QUICK_RUN_ENV = "PERFGRID_QUICK_RUN"


#: the tests that share one run of a Snakemake fixture (or another costly module fixture),
#: by node id prefix: ``make test``'s parallel lane gives each set to one worker, which
#: makes the run once for them all
#: (:func:`pytest_xdist_make_scheduler`; tests/test_markers.py checks every user is here)
SHARED_RUNS = {
    "tree": ("tests/test_pipeline.py::", "tests/test_code_inputs.py::",
             "tests/test_report_browser.py::"),
    "without_tools": ("tests/test_reliability.py::test_missing_tool_rows_",
                      "tests/test_reliability.py::test_without_perf_"),
    "slurm": ("tests/test_slurm.py::",),  # its own tree
    "quick": ("tests/test_quick_commands.py::",),  # made by the serial lane, if it ran
    # not Snakemake: the suite read once (its module fixture ``collection``; in a second
    # process where this session did not collect all of it), on one worker
    "collection": ("tests/test_markers.py::",),
}


def shared_run(nodeid: str) -> str | None:
    """The name of the fixture run (a key of :data:`SHARED_RUNS`) the test shares, if any."""
    return next((name for name, prefixes in SHARED_RUNS.items() if nodeid.startswith(prefixes)),
                None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` as this suite means it: the tests of one :data:`SHARED_RUNS` set
    on one worker, every other test on any. pytest-xdist's own loadgroup reads
    ``xdist_group`` marks through a node id pytest 9.2 no longer lets it change, and then
    spreads a group over the workers (pytest-dev/pytest-xdist#1386)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedRuns(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_run(nodeid) or nodeid

    return SharedRuns(config, log)


#: every test this session collected, marked, before ``-m`` or ``-k`` left any out
#: (tests/test_markers.py reads the suite from it where the session collected all of it)
COLLECTED = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that runs Snakemake carries ``pipeline`` and ``snakemake``: marked with either
    (module or test), or using a fixture of :data:`RUNS_SNAKEMAKE`. First, so that what
    ``-m`` selects sees these marks, and :data:`COLLECTED` every test."""
    for item in items:
        if (RUNS_SNAKEMAKE.intersection(getattr(item, "fixturenames", ()))
                or any(item.get_closest_marker(name) for name in PIPELINE_MARKERS)):
            for name in PIPELINE_MARKERS:
                if item.get_closest_marker(name) is None:
                    item.add_marker(name)
    config.stash[COLLECTED] = list(items)


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


@pytest.fixture(scope="session")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the workflow after ``snakemake --cores 2 --configfile config/quick.yaml``,
    the shipped config untouched; how long it took is printed (the config's budget is
    five minutes on a 2-CPU machine). Made once per ``make test``: under
    ``$PERFGRID_QUICK_RUN`` (:data:`QUICK_RUN_ENV`) by the serial lane, whose
    tests/test_quick_config.py judges it, and read there by the parallel lane; made here
    where that folder holds no finished run (a module run alone, the serial lane left out)."""
    shared = os.environ.get(QUICK_RUN_ENV)
    root = Path(shared) / "quick" if shared else None
    if root is not None and (root / "quick-run.ok").is_file():
        return root
    if root is None or root.exists():  # none shared, or a failed run there: one of our own
        root = tmp_path_factory.mktemp("quick")
    root.mkdir(parents=True, exist_ok=True)
    copy_workflow(root, config=None)
    started = time.monotonic()
    done = subprocess.run([*SNAKEMAKE, "--cores", "2", "--configfile", "config/quick.yaml"],
                          cwd=root, capture_output=True, text=True, timeout=1800)
    elapsed = time.monotonic() - started
    print(f"\nconfig/quick.yaml end to end: {elapsed:.0f} s", flush=True)
    (root / "quick-run.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    (root / "quick-run.ok").write_text(f"{elapsed:.0f} s\n")
    return root
