"""syscall (seed E3): workers make every call, pin where told, and leave nothing behind."""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pandas as pd
import psutil
import pytest
import yaml
from snakemake.utils import validate

from perfgrid import binding
from perfgrid.analysis import syscall as analysis
from perfgrid.experiments import get
from perfgrid.experiments import syscall as syscall_mod

from conftest import REPO

EXP = get("syscall")
HAVE_CC = shutil.which("cc") is not None
CPUS = len(os.sched_getaffinity(0))
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
FULL = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.fixture(scope="module")
def native_binary(tmp_path_factory) -> str:
    if not HAVE_CC:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("bin") / "syscall"
    subprocess.run(["cc", "-O2", "-Wall", "-o", str(out),
                    str(REPO / "src" / "perfgrid" / "native" / "syscall.c")], check=True)
    return str(out)


def point(variant: str, call: str, bind: str, workers: int) -> dict:
    return {"variant": variant, "call": call, "binding": bind, "workers": workers}


def children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE]


def test_unrolled_loop_makes_rounds_times_unroll_calls(monkeypatch):
    made = []
    monkeypatch.setattr(os, "getppid", lambda: made.append(1))
    syscall_mod.unrolled_loop("getppid", unroll=7)(3)
    assert len(made) == 21
    seen = []
    monkeypatch.setattr(time, "clock_gettime", lambda clock: seen.append(clock))
    syscall_mod.unrolled_loop("clock_gettime", unroll=4)(2)
    assert seen == [time.CLOCK_MONOTONIC] * 8


@pytest.mark.parametrize("call", syscall_mod.CALLS)
@pytest.mark.parametrize("bind, workers", [("single", 2), ("spread", 2), ("none", 3)])
def test_python_workers_count_pin_and_are_reaped(call, bind, workers):
    case = EXP.prepare(point("python", call, bind, workers), {})
    try:
        pids = [p.pid for p in children()]
        assert len(pids) == workers
        assert case.time(10) > 0
        assert case.time(5) > 0
        meta = case.observed()
    finally:
        case.close()
    warm = syscall_mod.WARM_ROUNDS
    assert meta["perfgrid_calls"] == workers * (15 + warm) * syscall_mod.UNROLL
    plan = binding.plan(bind, workers)
    assert meta["perfgrid_worker_cpus"] == binding.describe(plan)  # read back from the kernel
    assert case.inner_loops == syscall_mod.UNROLL and case.work_per_loop == workers
    assert meta["perfgrid_user_s"] + meta["perfgrid_sys_s"] >= 0
    assert not children()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in pids)


def test_a_worker_that_dies_fails_the_pass_instead_of_hanging():
    case = EXP.prepare(point("python", "getuid", "none", 2), {})
    try:
        os.kill(children()[0].pid, signal.SIGKILL)
        time.sleep(0.1)
        with pytest.raises(RuntimeError, match="died|ended"):
            case.time(100000)
    finally:
        case.close()
    assert not children()


def test_python_harness_adds_under_5_percent_over_a_hand_written_loop():
    """Per call, the released, unrolled worker is no slower than a plain loop of calls."""
    getuid, n = os.getuid, 40_000

    def hand_written() -> float:
        started = time.perf_counter()
        for _ in range(n):
            getuid()
        return (time.perf_counter() - started) / n

    saved = sorted(os.sched_getaffinity(0))
    case = EXP.prepare(point("python", "getuid", "single", 1), {})
    try:
        os.sched_setaffinity(0, binding.plan("single", 1)[0])  # the same CPU as the worker
        ours, plain = [], []
        for _ in range(7):
            ours.append(case.time(n // syscall_mod.UNROLL) / n)
            plain.append(hand_written())
    finally:
        os.sched_setaffinity(0, saved)
        case.close()
    assert min(ours) <= 1.05 * min(plain), (min(ours), min(plain))


@pytest.mark.parametrize("call", syscall_mod.CALLS)
def test_native_program_counts_and_reports(native_binary, call):
    plan = binding.plan("spread", 2)
    cmd = syscall_mod.native_command(native_binary, call, 1000, plan)
    report = syscall_mod.run_native(cmd)
    assert report["workers"] == 2 and report["calls_per_worker"] == 1000
    assert report["worker_cpus"] == binding.describe(plan)
    assert len(report["worker_elapsed_s"]) == 2 and report["elapsed_s"] > 0


@pytest.mark.parametrize("args, needle", [
    (["getpid", "10", "0"], "unknown call"),
    (["getuid", "0", "0"], "bad"),
    (["getuid", "10", "x"], "bad"),
])
def test_native_program_refuses_bad_arguments(native_binary, args, needle):
    proc = subprocess.run([native_binary, *args], capture_output=True, text=True)
    assert proc.returncode != 0 and needle in proc.stderr


def test_native_case_tallies_calls_and_cpu(native_binary):
    case = EXP.prepare(point("native", "getuid", "single", 2), {"binary": native_binary})
    assert case.time(3000) > 0  # 300,000 calls each: enough for the kernel's CPU accounting
    meta = case.observed()
    case.close()
    assert meta["perfgrid_calls"] == 2 * 3000 * syscall_mod.UNROLL
    assert meta["perfgrid_worker_cpus"] == binding.describe(binding.plan("single", 2))
    assert meta["perfgrid_sys_s"] > 0  # getuid enters the kernel
    assert not children()


def test_killed_job_leaves_no_worker(tmp_path):
    """SIGKILL the harness half way: every process it started goes with it."""
    marker = f"perfgrid-test-{uuid.uuid4()}"
    cmd = [sys.executable, "-m", "perfgrid.bench", "syscall", "--point", "variant=python",
           "--point", "call=getuid", "--point", "binding=none", "--point", "workers=3",
           "--result", str(tmp_path / "out.json"), "--processes", "1", "--values", "50",
           "--warmups", "0", "--loops", "20000", "--inherit-environ", "PERFGRID_KILLTEST"]
    proc = subprocess.Popen(cmd, env={**os.environ, "PERFGRID_KILLTEST": marker},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: len(tagged(marker)) >= 5, 20), "workers never started"
        time.sleep(0.3)
    finally:
        proc.kill()
        proc.wait()
    assert wait_for(lambda: not tagged(marker), 5), [p.cmdline()[:4] for p in tagged(marker)]


def tagged(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``marker``."""
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


def test_points_cross_every_list_and_reject_unknown_names():
    section = {"variants": ["python", "native"], "calls": ["getuid", "clock_gettime"],
               "workers": [1, 4], "bindings": ["none", "spread"]}
    points = EXP.points(section, {})
    assert len(points) == 16
    assert {tuple(p) for p in points} == {EXP.axes}
    with pytest.raises(ValueError, match="syscall.calls"):
        EXP.points({**section, "calls": ["getpid"]}, {})
    with pytest.raises(ValueError, match="syscall.workers"):
        EXP.points({**section, "workers": [0]}, {})


def test_full_config_holds_every_call_binding_and_worker_count():
    cfg = FULL["syscall"]
    points = EXP.points(cfg, FULL)
    assert len(points) == 2 * 3 * 4 * 5 + 1  # + the erlang point, skipped with its reason
    assert {"variant": "native", "call": "getuid", "binding": "spread", "workers": 8} in points
    assert "getuid" in EXP.unavailable(next(p for p in points if p["variant"] == "erlang"))


def test_native_points_are_skipped_without_a_compiler(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    assert "cc" in EXP.unavailable(point("native", "getuid", "none", 1))
    assert EXP.unavailable(point("python", "getuid", "none", 1)) is None


def test_ratio_to_native_at_the_same_call_binding_and_workers():
    table = pd.DataFrame([
        {"variant": "native", "call": "getuid", "binding": "spread", "workers": 2, "rate": 10.0},
        {"variant": "python", "call": "getuid", "binding": "spread", "workers": 2, "rate": 6.0},
        {"variant": "native", "call": "getuid", "binding": "spread", "workers": 1, "rate": 5.0},
        {"variant": "python", "call": "getuid", "binding": "spread", "workers": 1, "rate": 4.0},
    ])
    assert EXP.ratio_to_native(table).tolist() == [1.0, 0.6, 1.0, 0.8]


BAD = [
    ("syscall.workers", [0], "workers"),
    ("syscall.workers", [-2], "workers"),
    ("syscall.workers", [], "workers"),
    ("syscall.calls", ["getpid"], "calls"),
    ("syscall.calls", [], "calls"),
    ("syscall.variants", ["java"], "variants"),
    ("syscall.bindings", ["loose"], "bindings"),
    ("syscall.measure", {"loops": 0}, "loops"),
    ("syscall.colour", "blue", "colour"),
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
    for runtime, per_cpu in (("native", 7e6), ("python", 4.5e6)):
        for bind in ("none", "single", "spread"):
            for workers in (1, 2, 4, 8):
                cpus = 1 if bind == "single" else min(workers, 2)
                for call, speed, sys_share in (("getuid", 1.0, 0.6), ("clock_gettime", 5.0, 0.0)):
                    rows.append({
                        "runtime": runtime, "variant": runtime, "call": call, "binding": bind,
                        "workers": workers, "rate": per_cpu * speed * cpus,
                        "calls_per_cpu_s": per_cpu * speed, "sys_share": sys_share,
                        "binding_plan": binding.describe(binding.plan(
                            bind, workers, [binding.Cpu(0, c, c) for c in range(2)]))})
    return pd.DataFrame(rows)


def test_analysis_plots_and_decides_claims_from_a_table(tmp_path):
    table = synthetic_table()
    written = analysis.plot(table[table["binding"] != "none"], tmp_path)
    assert {p.stem for p in written} >= {"rate_by_workers", "calls_per_cpu_second"}
    claims = analysis.claims(table)
    assert [c.verdict for c in claims] == ["reproduced"] * len(claims) and len(claims) == 6
    worse = table.copy()
    worse.loc[(worse["binding"] == "spread") & (worse["workers"] == 2), "rate"] /= 1.5
    assert analysis.claims(worse)[0].verdict == "not reproduced"
    assert all(c.verdict == "inconclusive" for c in analysis.claims(table.iloc[0:0]))
    assert len(analysis.notes(table)) == 2
    assert analysis.SEED_ROWS[0]["rate"] == 30_000_000.0 and "002_" in analysis.SEED_ROWS[0][
        "source"]
