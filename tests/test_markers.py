"""The markers mean what pyproject.toml says, so ``-m "not pipeline"`` is a reliable quick
subset: ``pipeline`` and ``snakemake`` on every test that runs Snakemake (itself, through a
function of its module, or through a fixture such as ``tree``), and on the same tests;
``browser`` on every test that opens Chromium.

The whole suite is read as this session collected it (in a second process where the session
collected less); each test's code, and the code of every fixture it uses, is read for what
it calls (:func:`calls`)."""

from __future__ import annotations

import dis
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import helpers
from helpers import REPO

#: what runs Snakemake: the helpers, and the command line they build
RUNNERS = (helpers.run, helpers.snakemake, helpers.SNAKEMAKE, helpers.copy_workflow)


def calls(code: types.CodeType, namespace: dict, what: str, seen: set | None = None) -> bool:
    """Whether ``code`` (with its module's ``namespace``) runs Snakemake (``what`` is
    ``"snakemake"``) or opens Chromium (``"browser"``): by a runner it loads (a global, an
    import inside the function, ``helpers.run``), a ``-m snakemake`` command line, or a
    function of the tests it loads that does."""
    seen = set() if seen is None else seen
    strings = {c for c in code.co_consts if isinstance(c, str)}
    if what == "snakemake" and {"-m", "snakemake"} <= strings:
        return True
    if what == "browser" and "sync_playwright" in code.co_names:
        return True
    module = None  # the module an IMPORT_NAME or a global just loaded
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            obj = namespace.get(ins.argval)
        elif ins.opname in ("IMPORT_FROM", "LOAD_ATTR", "LOAD_METHOD") and module is not None:
            obj = getattr(module, ins.argval, None)
        elif ins.opname == "IMPORT_NAME":
            obj = sys.modules.get(ins.argval)
        else:
            obj = None
        if ins.opname not in ("IMPORT_FROM", "STORE_FAST", "STORE_NAME", "POP_TOP"):
            module = obj if isinstance(obj, types.ModuleType) else None
        if what == "snakemake" and any(obj is runner for runner in RUNNERS):
            return True
        if (isinstance(obj, types.FunctionType) and obj not in seen
                and Path(obj.__code__.co_filename).parent == REPO / "tests"
                and obj.__module__ != "helpers"):
            seen.add(obj)
            if calls(obj.__code__, obj.__globals__, what, seen):
                return True
    return any(calls(c, namespace, what, seen) for c in code.co_consts
               if isinstance(c, types.CodeType))


class Collect:
    """Reads tests for their markers, fixtures (closure), and whether they or a fixture
    they use run Snakemake or open Chromium; as a plugin, writes what it read of a
    collection to ``out``."""

    def __init__(self, out: str = "") -> None:
        self.out = out
        self.found: dict[tuple[types.CodeType, str], bool] = {}

    def calls(self, code: types.CodeType, namespace: dict, what: str) -> bool:
        """:func:`calls`, read once per function: the tests of one function (its
        parameters) and the users of one fixture share its answer."""
        key = (code, what)
        if key not in self.found:
            self.found[key] = calls(code, namespace, what)
        return self.found[key]

    def read(self, items: list[pytest.Item], config: pytest.Config) -> dict:
        """Each test's row, by node id, and the fixtures conftest names as running Snakemake."""
        rows = {}
        for item in items:
            func = getattr(item, "function", None)
            codes = [] if func is None else [(func.__code__, func.__globals__)]
            running = set()  # the fixtures it uses that run Snakemake
            defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
            for name in item.fixturenames:
                for fixturedef in defs.get(name, ()):
                    fixture = getattr(fixturedef.func, "__wrapped__", fixturedef.func)
                    if isinstance(fixture, types.FunctionType):
                        codes.append((fixture.__code__, fixture.__globals__))
                        if self.calls(fixture.__code__, fixture.__globals__, "snakemake"):
                            running.add(name)
            rows[item.nodeid] = {
                "markers": sorted({m.name for m in item.iter_markers()}),
                "fixtures": sorted(item.fixturenames),
                "snakemake": any(self.calls(c, ns, "snakemake") for c, ns in codes),
                "browser": any(self.calls(c, ns, "browser") for c, ns in codes),
                "running_fixtures": sorted(running),
            }
        named = next(plugin.RUNS_SNAKEMAKE for plugin in config.pluginmanager.get_plugins()
                     if hasattr(plugin, "RUNS_SNAKEMAKE"))
        return {"items": rows, "named": sorted(named)}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        Path(self.out).write_text(json.dumps(self.read(session.items, session.config)))


@pytest.fixture(scope="module")
def collection(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> dict:
    """Every test of the suite as :meth:`Collect.read` reads it: from this session's own
    collection where it holds every test module (``make test``; conftest's ``COLLECTED``,
    before ``-m`` left any out), else from a collection in a second process (~5 s)."""
    from conftest import COLLECTED

    items = request.config.stash.get(COLLECTED, [])
    if {Path(str(item.path)) for item in items} >= set((REPO / "tests").glob("test_*.py")):
        return Collect().read(items, request.config)
    out = tmp_path_factory.mktemp("markers") / "collected.json"
    code = ("import sys, pytest, test_markers\n"
            f"sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', "
            f"{str(REPO / 'tests')!r}], plugins=[test_markers.Collect({str(out)!r})]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def collected(collection: dict) -> dict[str, dict]:
    """Test id -> its row (markers, fixtures, whether it runs Snakemake, opens Chromium)."""
    return collection["items"]


def test_every_test_that_runs_snakemake_is_marked_pipeline_and_snakemake(collected):
    unmarked = [nodeid for nodeid, row in collected.items()
                if row["snakemake"] and not {"pipeline", "snakemake"} <= set(row["markers"])]
    assert unmarked == []
    # the reading finds them: through the tree fixture, a helper, and a function's own import
    found = {nodeid.split("::")[0] for nodeid, row in collected.items() if row["snakemake"]}
    assert {"tests/test_pipeline.py", "tests/test_registry.py", "tests/test_testfile.py",
            "tests/test_report_browser.py", "tests/test_adding_an_experiment.py"} <= found


def test_every_fixture_that_runs_snakemake_is_named_for_the_marking_hook(collection):
    """tests/conftest.py marks the users of the fixtures in its ``RUNS_SNAKEMAKE``."""
    running = {name for row in collection["items"].values() for name in row["running_fixtures"]}
    assert {"tree", "without_tools"} <= running
    assert sorted(running - set(collection["named"])) == []


def test_every_test_that_uses_the_tree_fixture_is_marked(collected):
    using = {nodeid: row for nodeid, row in collected.items() if "tree" in row["fixtures"]}
    assert using, "no test uses tree"
    assert [n for n, row in using.items() if "pipeline" not in row["markers"]
            or "snakemake" not in row["markers"]] == []


def test_pipeline_and_snakemake_mark_the_same_tests(collected):
    def marked(name: str) -> set[str]:
        return {nodeid for nodeid, row in collected.items() if name in row["markers"]}

    assert marked("pipeline") == marked("snakemake")


def test_every_test_that_opens_chromium_is_marked_browser(collected):
    opening = {nodeid for nodeid, row in collected.items() if row["browser"]}
    assert {n.split("::")[0] for n in opening} >= {"tests/test_report_browser.py",
                                                   "tests/test_gallery.py"}
    assert sorted(n for n in opening if "browser" not in collected[n]["markers"]) == []


#: the tests that measure, wait for a quiet machine or load every CPU (tests/conftest.py):
#: ``serial`` on each, by hand
MEASURING = (
    "tests/test_end_to_end.py::test_make_bench_measures_every_fact_and_prints_it_beside_its_"
    "target",
    "tests/test_counters.py::test_a_real_counting_pass_through_the_harness",
    "tests/test_noiseprofile.py::test_a_real_profile_of_two_blocks_of_the_syscall_pair_writes_"
    "valid_json",
    "tests/test_reliability.py::test_busy_machine_is_waited_for_then_flagged",
    "tests/test_quiet.py::test_a_real_round_records_its_window_and_each_measurement",
    "tests/test_openloop.py::test_a_200ms_stall_shows_in_the_open_loop_p99_with_abs_report_"
    "beside_it",
    "tests/test_openloop.py::test_a_sweep_stops_at_the_first_saturated_step_and_bounds_each_step",
    "tests/test_openloop.py::test_unsent_requests_are_dropped_at_the_deadline_not_sent_late",
)


def test_the_tests_that_measure_run_alone_and_only_they(collected):
    """``serial`` (``make test`` runs those first, nothing beside them) on each test that
    measures and on the module of the shipped quick run (it waits for a quiet machine), and
    on no other: the rest run in parallel, the user commands on the quick run's output
    (tests/test_quick_commands.py) among them."""
    serial = {nodeid for nodeid, row in collected.items() if "serial" in row["markers"]}
    quick = {nodeid for nodeid in collected if nodeid.startswith("tests/test_quick_config.py")}
    commands = {nodeid for nodeid in collected
                if nodeid.startswith("tests/test_quick_commands.py")}
    assert quick | commands >= {nodeid for nodeid, row in collected.items()
                                if "quick" in row["fixtures"]}
    assert quick and commands and set(MEASURING) <= set(collected)  # each still exists
    assert serial == quick | set(MEASURING)


def test_the_users_of_a_fixtures_run_share_one_worker(collected):
    """In ``make test``'s parallel lane a test using a fixture that runs Snakemake is in that
    run's set (tests/conftest.py's SHARED_RUNS): one worker makes the run once for all."""
    from conftest import RUNS_SNAKEMAKE, shared_run

    wrong = []
    for nodeid, row in collected.items():
        for name in RUNS_SNAKEMAKE.intersection(row["fixtures"]):
            if "serial" in row["markers"]:  # the quick run: one process, no workers
                continue
            want = "slurm" if nodeid.startswith("tests/test_slurm.py::") else name
            if shared_run(nodeid) != want:
                wrong.append((nodeid, name, shared_run(nodeid)))
    assert wrong == []
    assert {shared_run(n) for n in collected} >= {"tree", "without_tools", "slurm", "quick"}
