"""spawn (seed E1): every chain makes exactly its spawns, pins where told, leaves nothing."""

from __future__ import annotations

import ast
import builtins
import copy
import inspect
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pandas as pd
import psutil
import pytest
import yaml
from snakemake.utils import validate

from perfgrid import binding
from perfgrid.analysis import spawn as analysis
from perfgrid.experiments import get
from perfgrid.experiments import spawn as spawn_mod

from conftest import REPO

EXP = get("spawn")
HAVE_CC = shutil.which("cc") is not None
CPUS = sorted(os.sched_getaffinity(0))
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
FULL = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.fixture(scope="module")
def native_binary(tmp_path_factory) -> str:
    if not HAVE_CC:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("bin") / "spawn"
    subprocess.run(["cc", "-O2", "-Wall", "-pthread", "-o", str(out),
                    str(REPO / "src" / "perfgrid" / "native" / "spawn.c")], check=True)
    return str(out)


def point(variant: str, bind: str, chains: int, total: int) -> dict:
    return {"variant": variant, "binding": bind, "chains": chains, "total": total}


def live_children() -> list[psutil.Process]:
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.NoSuchProcess:
            continue
    return out


def run_case(pt: dict, options: dict | None = None, passes: int = 2) -> dict:
    """Prepare, time ``passes`` loops, close; the observed metadata. Checks nothing is left."""
    threads_before = threading.active_count()
    affinity = sorted(os.sched_getaffinity(0))
    case = EXP.prepare(pt, options or {})
    try:
        assert case.work_per_loop == pt["total"]
        assert case.time(passes) > 0
        meta = case.observed()
    finally:
        case.close()
    assert not live_children()
    assert threading.active_count() == threads_before
    assert sorted(os.sched_getaffinity(0)) == affinity  # the runner's pinning is undone
    assert meta["perfgrid_spawns"] == passes * pt["total"]
    return meta


def test_chain_lengths_split_the_total_evenly():
    assert spawn_mod.chain_lengths(10, 3) == [4, 3, 3]
    assert spawn_mod.chain_lengths(5, 5) == [1] * 5
    with pytest.raises(ValueError, match="chains <= total"):
        spawn_mod.chain_lengths(3, 4)


@pytest.mark.parametrize("variant, chains, total", [
    ("asyncio_task", 1, 500), ("asyncio_task", 7, 500),
    ("thread", 1, 60), ("thread", 5, 60),
    ("posix_spawn", 3, 12),
    ("fork", 1, 30), ("fork", 4, 30),
    ("mp_fork", 1, 6), ("mp_fork", 3, 6),
])
def test_python_chains_make_every_spawn_and_leave_nothing(variant, chains, total):
    meta = run_case(point(variant, "none", chains, total))
    assert meta["perfgrid_user_s"] >= 0 and meta["perfgrid_sys_s"] >= 0
    assert meta["perfgrid_peak_rss_bytes"] > 0


@pytest.mark.parametrize("variant", ["thread", "posix_spawn"])
def test_chains_are_pinned_as_the_binding_says(variant):
    meta = run_case(point(variant, "single", 3, 9), passes=1)
    assert meta["perfgrid_chain_cpus"] == "|".join([str(CPUS[0])] * 3)  # read back per chain
    if len(CPUS) >= 2:
        meta = run_case(point(variant, "spread", 2, 4), passes=1)
        assert meta["perfgrid_chain_cpus"] == binding.describe(binding.plan("spread", 2))


def test_fork_runner_is_a_lean_interpreter():
    """The fork chains run in a bare interpreter, not in the pandas-laden pyperf worker."""
    meta = run_case(point("fork", "single", 2, 10), passes=1)
    assert meta["perfgrid_peak_rss_bytes"] < 40 << 20


def test_lean_runner_source_needs_nothing_from_its_module():
    """The runner's source runs alone (python -c): every name it uses it defines or imports."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(spawn_mod.lean_runner_main)))
    loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load)}
    bound = ({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
             | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
             | {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
             | {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names})
    assert loads - bound - set(dir(builtins)) == set()


@pytest.mark.parametrize("variant, chains, total", [
    ("native_pthread", 1, 200), ("native_pthread", 4, 200),
    ("native_fork", 1, 40), ("native_fork", 4, 40),
    ("native_posix_spawn", 2, 10),
])
def test_native_chains_make_every_spawn(native_binary, variant, chains, total):
    meta = run_case(point(variant, "spread", chains, total), {"binary": native_binary})
    assert 0 < meta["perfgrid_peak_rss_bytes"] < 20 << 20


@pytest.mark.parametrize("args, needle", [
    (["clone", "1", "10", "0", "0"], "unknown primitive"),
    (["fork", "5", "3", "0|0|0|0|0", "0"], "CHAINS <= TOTAL"),
    (["fork", "2", "10", "0", "0"], "CHAIN_PLAN"),
])
def test_native_program_refuses_bad_arguments(native_binary, args, needle):
    proc = subprocess.run([native_binary, *args], capture_output=True, text=True)
    assert proc.returncode != 0 and needle in proc.stderr


def tagged(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``marker`` (orphans included)."""
    out = []
    for proc in psutil.process_iter():
        try:
            if (proc.status() != psutil.STATUS_ZOMBIE
                    and proc.environ().get("PERFGRID_KILLTEST") == marker):
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("variant, total, sig, started", [
    ("fork", 200000, signal.SIGKILL, 4),  # manager, worker, lean runner, a unit
    ("mp_fork", 100000, signal.SIGTERM, 4),  # manager, worker, runner, drivers...
    ("thread", 10000000, signal.SIGKILL, 2),  # manager, worker (the threads are inside)
    pytest.param("native_fork", 10000000, signal.SIGKILL, 3, marks=pytest.mark.skipif(
        not HAVE_CC, reason="no C compiler")),
])
def test_killed_job_leaves_no_process(tmp_path, native_binary_or_none, variant, total, sig,
                                      started):
    """Kill `python -m perfgrid.bench spawn` half way: no process it started survives."""
    marker = f"perfgrid-test-{uuid.uuid4()}"
    cmd = [sys.executable, "-m", "perfgrid.bench", "spawn", "--point", f"variant={variant}",
           "--point", "binding=none", "--point", "chains=3", "--point", f"total={total}",
           "--result", str(tmp_path / "out.json"), "--processes", "1", "--values", "3",
           "--warmups", "0", "--loops", "1", "--inherit-environ", "PERFGRID_KILLTEST"]
    if variant.startswith("native_"):
        cmd += ["--option", f"binary={native_binary_or_none}"]
    proc = subprocess.Popen(cmd, env={**os.environ, "PERFGRID_KILLTEST": marker},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: len(tagged(marker)) >= started, 20), "the job never started"
        time.sleep(1.0)  # half way through the first pass
        assert proc.poll() is None, "the job ended before it could be killed"
    finally:
        proc.send_signal(sig)
        proc.wait()
    assert wait_for(lambda: not tagged(marker), 5), [p.cmdline()[:3] for p in tagged(marker)]


@pytest.fixture
def native_binary_or_none(request) -> str | None:
    if not HAVE_CC:
        return None
    return request.getfixturevalue("native_binary")


def test_points_take_each_primitives_total_and_reject_bad_ones():
    section = {"primitives": ["asyncio_task", "native_fork"], "chains": [1, 10],
               "bindings": ["none", "single"], "totals": {"asyncio_task": 1000, "native_fork": 50}}
    points = EXP.points(section, {})
    assert len(points) == 8
    assert {p["total"] for p in points if p["variant"] == "native_fork"} == {50}
    with pytest.raises(ValueError, match="spawn.chains"):
        EXP.points({**section, "totals": {"asyncio_task": 1000, "native_fork": 5}}, {})
    with pytest.raises(ValueError, match="vfork"):
        EXP.points({**section, "primitives": ["vfork"]}, {})
    with pytest.raises(ValueError, match="spawn.totals.native_fork"):
        EXP.points({**section, "totals": {"asyncio_task": 1000}}, {})


def test_full_config_holds_the_seeds_million_asyncio_spawns_in_1_10_100_chains():
    points = EXP.points(FULL["spawn"], FULL)
    seed = [p for p in points if p["variant"] == "asyncio_task" and p["total"] == 1_000_000]
    assert {p["chains"] for p in seed} == {1, 10, 100}
    assert {p["binding"] for p in seed} >= {"none", "single"}
    assert {p["variant"] for p in points} == set(spawn_mod.PRIMITIVES)


def test_missing_tools_are_skip_reasons(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    assert "cc" in EXP.unavailable(point("native_fork", "none", 1, 10))
    assert EXP.unavailable(point("fork", "none", 1, 10)) is None


def test_ratio_to_native_pairs_each_python_primitive_with_its_c_twin():
    table = pd.DataFrame([
        {"variant": "native_pthread", "binding": "none", "chains": 1, "rate": 20.0},
        {"variant": "thread", "binding": "none", "chains": 1, "rate": 5.0},
        {"variant": "thread", "binding": "single", "chains": 1, "rate": 5.0},
        {"variant": "native_fork", "binding": "none", "chains": 1, "rate": 10.0},
        {"variant": "mp_fork", "binding": "none", "chains": 1, "rate": 1.0},
        {"variant": "asyncio_task", "binding": "none", "chains": 1, "rate": 100.0},
    ])
    ratio = EXP.ratio_to_native(table).tolist()
    assert ratio[:2] == [1.0, 0.25] and pd.isna(ratio[2]) and ratio[3:5] == [1.0, 0.1]
    assert pd.isna(ratio[5])


BAD = [
    ("spawn.totals", {"fork": 0}, "fork"),
    ("spawn.totals", {"fork": -5}, "fork"),
    ("spawn.totals", {"clone": 5}, "clone"),
    ("spawn.primitives", ["vfork"], "primitives"),
    ("spawn.primitives", [], "primitives"),
    ("spawn.chains", [0], "chains"),
    ("spawn.chains", [1.5], "chains"),
    ("spawn.bindings", ["loose"], "bindings"),
    ("spawn.measure", {"values": 0}, "values"),
]


@pytest.mark.parametrize("key, value, needle", BAD, ids=[f"{k}={v}" for k, v, _ in BAD])
def test_schema_rejects_bad_values_naming_the_key(key, value, needle):
    config = copy.deepcopy(FULL)
    section, leaf = key.split(".")
    config[section][leaf] = value
    with pytest.raises(Exception) as info:
        validate(config, SCHEMA)
    assert needle in str(info.value) + str(info.value.__cause__ or "")


def synthetic_table() -> pd.DataFrame:
    rows = []
    rates = {"asyncio_task": (250e3, "python", 0.0), "thread": (8e3, "python", 0.6),
             "native_pthread": (40e3, "native", 0.9), "fork": (800.0, "python", 0.3)}
    for variant, (rate, runtime, sys_share) in rates.items():
        for bind in ("none", "single"):
            for chains in (1, 10, 100):
                r = rate * (1.5 if bind == "single" and variant != "asyncio_task" else 1.0)
                if variant == "asyncio_task" and chains == 1:
                    r /= 1.6  # one epoll_wait per spawn
                rows.append({"variant": variant, "runtime": runtime, "binding": bind,
                             "chains": chains, "total": 1000, "rate": r,
                             "sys_share": sys_share, "cpu_us_per_spawn": 1e6 / r})
    return pd.DataFrame(rows)


def test_analysis_plots_and_decides_claims_from_a_table(tmp_path):
    table = synthetic_table()
    written = analysis.plot(table[table["binding"] == "none"], tmp_path)
    assert {p.stem for p in written} >= {"rate_by_chains", "cpu_per_spawn"}
    verdicts = [c.verdict for c in analysis.claims(table)]
    # a per-spawn syscall costs; one CPU beats SMP (C, Python); but 0.5 us is out of reach
    assert verdicts == ["reproduced", "reproduced", "reproduced", "not reproduced"]
    assert all(c.verdict == "inconclusive" for c in analysis.claims(table.iloc[0:0]))
    assert len(analysis.notes(table)) == 1
    assert {r["chains"] for r in analysis.SEED_ROWS} == {1, 10, 100}
    assert all("000_" in r["source"] for r in analysis.SEED_ROWS)
