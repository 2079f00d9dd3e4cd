"""syscall (seed E3): workers make every call, pin where told, and leave nothing behind."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import psutil
import pytest

from perfgrid.analyse.aggregate import rate_estimate
from perfgrid.design import planning
from perfgrid.experiments import get
from perfgrid.experiments import syscall as syscall_mod
from perfgrid.experiments.syscall import analysis
from perfgrid.kit import binding, lifetime
from perfgrid.measure import counters
from perfgrid.pipeline import settings

from helpers import FULL, compile_native, cpu_seconds, full_config, need, tagged, wait_for
from synthetic import LEVELS, expected_verdict, per_process, row, single

EXP = get("syscall")
CPUS = len(os.sched_getaffinity(0))


@pytest.fixture(scope="module")
def native_binary(tmp_path_factory) -> str:
    return compile_native("syscall", tmp_path_factory.mktemp("bin"))


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
    started = time.monotonic()
    case = EXP.prepare(point("python", call, bind, workers), {})
    try:
        pids = [p.pid for p in children()]
        assert len(pids) == workers
        assert case.time(10) > 0
        assert case.time(5) > 0
        meta = case.observed()
        ran = time.monotonic() - started
    finally:
        case.close()
    warm = syscall_mod.WARM_ROUNDS
    assert meta["perfgrid_calls"] == workers * (15 + warm) * syscall_mod.UNROLL
    plan = binding.plan(bind, workers)
    assert meta["perfgrid_worker_cpus"] == binding.describe(plan)  # read back from the kernel
    assert case.inner_loops == syscall_mod.UNROLL and case.work_per_loop == workers
    # the workers' own CPU time: none can run longer than the case lived (one clock tick
    # of rounding each), so the parent's, or a total in ticks, would not fit
    assert 0 <= meta["perfgrid_user_s"] + meta["perfgrid_sys_s"] <= workers * (ran + 0.02), (
        meta, ran)
    assert not children()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in pids)


def test_python_workers_cpu_time_is_the_time_they_spent_calling():
    """Half a second of getuid calls: the worker's user and sys seconds both grow (getuid
    enters the kernel) and together are about the time it ran, never more."""
    started = time.monotonic()
    case = EXP.prepare(point("python", "getuid", "none", 1), {})
    try:
        seconds = 0.0
        while seconds < 0.5:
            seconds += case.time(2000)
        meta = case.observed()
        ran = time.monotonic() - started
    finally:
        case.close()
    user, system = meta["perfgrid_user_s"], meta["perfgrid_sys_s"]
    assert user > 0 and system > 0, meta
    # at least a fifth of the timed seconds, even on a machine busy with other work
    assert 0.2 * seconds <= user + system <= ran + 0.02, (meta, seconds, ran)
    assert meta["perfgrid_sys_share"] == pytest.approx(system / (user + system), abs=1e-4)


def test_a_worker_that_dies_fails_the_pass_instead_of_hanging():
    case = EXP.prepare(point("python", "getuid", "none", 2), {})
    try:
        dead = children()[0]
        os.kill(dead.pid, signal.SIGKILL)
        assert wait_for(lambda: dead.status() == psutil.STATUS_ZOMBIE, 5), "not killed"
        with pytest.raises(RuntimeError, match="died|ended"):
            case.time(100000)
    finally:
        case.close()
    assert not children()


@pytest.mark.parametrize("call", syscall_mod.CALLS)
def test_native_program_counts_and_reports(native_binary, call):
    plan = binding.plan("spread", 2)
    cmd = syscall_mod.native_command(native_binary, call, 1000, plan)
    report = lifetime.run_json(cmd)
    assert report["workers"] == 2 and report["calls_per_worker"] == 1000
    assert report["worker_cpus"] == binding.describe(plan)
    # the pass spans every worker's own loop, each of which took some time
    assert len(report["worker_elapsed_s"]) == 2 and min(report["worker_elapsed_s"]) > 0
    assert report["elapsed_s"] >= max(report["worker_elapsed_s"]), report


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
    cmd = [sys.executable, "-m", "perfgrid.measure.bench", "syscall", "--point", "variant=python",
           "--point", "call=getuid", "--point", "binding=none", "--point", "workers=3",
           "--result", str(tmp_path / "out.json"), "--processes", "1", "--values", "50",
           "--warmups", "0", "--loops", "20000", "--inherit-environ", "PERFGRID_KILLTEST"]
    proc = subprocess.Popen(cmd, env={**os.environ, "PERFGRID_KILLTEST": marker},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: len(tagged(marker)) >= 5, 20), "workers never started"
        # the workers in their loops: their CPU time past what starting takes
        assert wait_for(lambda: cpu_seconds(tagged(marker)) >= 1.0, 60), "no worker ran"
    finally:
        proc.kill()
        proc.wait()
    assert wait_for(lambda: not tagged(marker), 5), [p.cmdline()[:4] for p in tagged(marker)]


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


def test_full_config_holds_every_call_binding_and_worker_count(monkeypatch):
    monkeypatch.setenv(settings.AUTO_CPUS_ENV, "2")  # workers: [auto, 8, 16] on 2 CPUs
    full = full_config()
    points = EXP.points(full["syscall"], full)
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


# -- claims, decided by intervals -------------------------------------------------------
#: each claim of analysis.claims, in order: (its threshold, the side it claims); the vDSO
#: claim is two-sided, each side a quantity of its own
SYSCALL_CLAIMS = {
    "native_linear": (analysis.LINEAR, "above"),
    "native_no_further": (analysis.NO_FURTHER, "below"),
    "python_linear": (analysis.LINEAR, "above"),
    "python_no_further": (analysis.NO_FURTHER, "below"),
    "no_contention": (analysis.NO_CONTENTION, "about"),
    "vdso_clock_sys": (analysis.VDSO_SYS, "below"),
    "vdso_getuid_sys": (analysis.VDSO_SYS, "above"),
}
QUANTITIES = list(SYSCALL_CLAIMS)
#: the claim (its place in the list) each quantity decides
CLAIM_OF = {"native_linear": 0, "native_no_further": 1, "python_linear": 2,
            "python_no_further": 3, "no_contention": 4, "vdso_clock_sys": 5,
            "vdso_getuid_sys": 5}
TWO_CPUS = [binding.Cpu(0, c, c) for c in range(2)]


def syscall_rows(cv: float = 0.01, **q: float) -> list[dict]:
    """Bound (spread) rows on 2 CPUs at 1, 2, 4, 8 workers per runtime, with per-process
    CPU observations (spread ``cv``); the compared quantities are ``q``, reproduced by
    default."""
    q = {"native_linear": 1.9, "native_no_further": 1.0, "python_linear": 1.9,
         "python_no_further": 1.0, "no_contention": 1.0, "vdso_clock_sys": 0.001,
         "vdso_getuid_sys": 0.6, **q}
    out = []
    for runtime, one in (("native", 7e6), ("python", 4.5e6)):
        two = one * q[f"{runtime}_linear"]
        rates = {1: one, 2: two, 4: two, 8: two * q[f"{runtime}_no_further"]}
        for workers, rate in rates.items():
            per_cpu = one * (q["no_contention"] if workers == 8 and runtime == "native" else 1)
            for call, sys_share, speed in (("getuid", q["vdso_getuid_sys"], 1.0),
                                           ("clock_gettime", q["vdso_clock_sys"], 5.0)):
                seed = len(out)
                meta = per_process(seed=seed, cv=cv, sys_share=sys_share,
                                   calls_per_cpu_s=per_cpu * speed)
                out.append(row(rate * speed, seed=seed, runtime=runtime, variant=runtime,
                               call=call, binding="spread", workers=workers,
                               calls_per_cpu_s=per_cpu * speed, sys_share=sys_share,
                               process_metadata=json.dumps(meta),
                               binding_plan=binding.describe(
                                   binding.plan("spread", workers, TWO_CPUS))))
    return out


def syscall_claims(rows: list[dict]) -> list:
    claims = analysis.claims(pd.DataFrame(rows), get("syscall"))
    assert len(claims) == 6
    return claims


#: for each quantity, the row (runtime, call, workers) it reads beside its baseline
OWN_ROW = {
    "native_linear": ("native", "getuid", 2),
    "native_no_further": ("native", "getuid", 8),
    "python_linear": ("python", "getuid", 2),
    "python_no_further": ("python", "getuid", 8),
    "no_contention": ("native", "getuid", 8),
    "vdso_clock_sys": ("native", "clock_gettime", 1),
    "vdso_getuid_sys": ("native", "getuid", 1),
}


def is_own(r: dict, quantity: str) -> bool:
    return (r["runtime"], r["call"], r["workers"]) == OWN_ROW[quantity]


def test_default_syscall_table_reproduces_every_claim():
    claims = syscall_claims(syscall_rows())
    assert [c.verdict for c in claims] == ["reproduced"] * 6, [c.reason for c in claims]


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("quantity", QUANTITIES)
def test_each_syscall_claim_is_decided_by_its_interval(quantity, level):
    threshold, wants = SYSCALL_CLAIMS[quantity]
    claims = syscall_claims(syscall_rows(**{quantity: threshold * LEVELS[level]}))
    got = claims[CLAIM_OF[quantity]]
    assert got.verdict == expected_verdict(wants, level)[0], (got.measured, got.reason)
    assert "[" in got.measured and "]" in got.measured
    assert expected_verdict(wants, level)[1].split()[0] in got.reason
    others = [c for i, c in enumerate(claims) if i != CLAIM_OF[quantity]]
    assert {c.verdict for c in others} == {"reproduced"}


def test_vdso_claim_is_judged_on_each_side():
    got = syscall_claims(syscall_rows())[5]
    assert got.reason.startswith("clock_gettime: 95% interval") and "; getuid: 95% interval" \
        in got.reason
    assert got.reason.count("wholly") == 2
    # one side wrong and the other undecided: not reproduced
    got = syscall_claims(syscall_rows(vdso_clock_sys=0.05, vdso_getuid_sys=0.04))[5]
    assert got.verdict == "not reproduced" and got.threshold == analysis.VDSO_SYS
    # both sides undecided, each interval within 5 % of its threshold: at the threshold
    got = syscall_claims(syscall_rows(vdso_clock_sys=0.05, vdso_getuid_sys=0.05))[5]
    assert got.verdict == "at the threshold" and got.reason.count("lies within") == 2
    # one side at its threshold, the other straddling widely: inconclusive
    got = syscall_claims(syscall_rows(vdso_clock_sys=0.05, vdso_getuid_sys=0.05,
                                      cv=0.3))[5]
    assert got.verdict == "inconclusive" and "straddles" in got.reason


def test_a_vdso_call_with_no_sys_time_at_all_gets_a_one_sided_bound():
    """Every process at exactly 0 % sys: no spread, but a count of clock ticks, none of them
    in the kernel, bounds the share from one side (Clopper-Pearson)."""
    rows = syscall_rows()
    for r in rows:
        if is_own(r, "vdso_clock_sys"):
            r["process_metadata"] = json.dumps([{"sys_share": 0.0, "user_s": 0.3,
                                                 "sys_s": 0.0}] * 4)
    got = syscall_claims(rows)[5]
    assert got.verdict == "reproduced", got.reason
    assert "user_share exactly 1 in every process, over >= 120 clock ticks (1.2 CPU-s at >= " \
           "100 Hz): a one-sided bound" in got.reason
    # 1.2 CPU-s at >= 100 Hz: 0 of 120 ticks puts the user share at or above 97 %
    assert got.measured.startswith("clock_gettime user share 100.0% [97.0%, 100.0%]")
    # too few ticks to bound it below 5 %: undecided, never "no interval"
    for r in rows:
        if is_own(r, "vdso_clock_sys"):
            r["process_metadata"] = json.dumps([{"sys_share": 0.0, "user_s": 0.1,
                                                 "sys_s": 0.0}] * 4)
    got = syscall_claims(rows)[5]
    assert got.verdict == "inconclusive" and "straddles" in got.reason
    assert "no interval" not in got.measured


def test_a_share_without_spread_or_cpu_seconds_says_what_would_decide_it():
    rows = syscall_rows()
    for r in rows:
        if is_own(r, "vdso_clock_sys"):
            r["process_metadata"] = json.dumps([{"sys_share": 0.0}] * 4)
    got = syscall_claims(rows)[5]
    assert got.verdict == "inconclusive" and "spread unknown" in got.reason
    assert "a syscall count (perf raw_syscalls:sys_enter) would decide it" in got.reason


#: a native counting pass's start-up syscalls (the Python launcher and the C program)
START_UP = 950


def counted(rows: list[dict], clock: float = 0.0, getuid: float = 1.0,
            calls: int = 500_000, start_up: int = START_UP) -> list[dict]:
    """``rows`` with the native 1-worker points counted: ``clock`` and ``getuid`` syscalls
    per call in their loops of ``calls`` calls, plus ``start_up`` syscalls a pass."""
    out = []
    for r in rows:
        r = dict(r)
        if r["runtime"] == "native" and r["workers"] == 1:
            per_call = clock if r["call"] == "clock_gettime" else getuid
            r.update(counters="ok", counters_units=calls, counters_unsupported="none",
                     syscalls_per_unit=(round(per_call * calls) + start_up) / calls)
        out.append(r)
    return out


def test_the_vdso_claim_is_decided_by_counting_syscalls():
    got = syscall_claims(counted(syscall_rows()))[5]
    assert got.verdict == "reproduced", got.reason
    assert got.criterion.startswith("native, 1 worker: clock_gettime enters the kernel < 0.05 "
                                    "times per call, getuid >= 0.95 times")
    assert "raw_syscalls:sys_enter" in got.criterion and "start-up included" in got.criterion
    assert "950 syscalls over 500,000 calls" in got.measured
    assert "500,950 syscalls over 500,000 calls" in got.measured
    assert "CPU in the kernel: clock_gettime 0.1%, getuid 60.0%" in got.measured
    assert "start-up" in got.reason and "CPU-time shares" not in got.reason
    # the shares would say otherwise: the count decides, not them
    got = syscall_claims(counted(syscall_rows(vdso_clock_sys=0.5, vdso_getuid_sys=0.01)))[5]
    assert got.verdict == "reproduced", got.reason


@pytest.mark.parametrize("clock, getuid, verdict", [
    (1.0, 1.0, "not reproduced"),   # no vDSO clock here: every call a syscall
    (0.0, 0.0, "not reproduced"),   # getuid served without entering the kernel
    (0.049, 1.0, "inconclusive"),  # too close to the threshold to tell
])
def test_counted_syscalls_decide_each_side(clock, getuid, verdict):
    got = syscall_claims(counted(syscall_rows(), clock=clock, getuid=getuid))[5]
    assert got.verdict == verdict, got.reason


def test_start_up_syscalls_cannot_decide_the_vdso_claim_wrongly():
    """A short count is mostly start-up: 950 syscalls over 10,000 calls is 0.095 per call,
    yet the lower end allows for start-up, so it is not read as clock_gettime's own."""
    got = syscall_claims(counted(syscall_rows(), calls=10_000))[5]
    assert got.verdict == "inconclusive" and "straddles" in got.reason, got.reason
    # getuid at 0.85 per call topped up by start-up to 0.945: not taken as >= 0.95
    got = syscall_claims(counted(syscall_rows(), getuid=0.85, calls=10_000))[5]
    assert got.verdict != "reproduced"


def test_without_a_count_the_vdso_claim_falls_back_to_shares_and_says_why():
    rows = counted(syscall_rows())
    for r in rows:
        if r.get("counters") == "ok" and r["call"] == "getuid":
            del r["syscalls_per_unit"]
            r["counters_unsupported"] = ("cycles: not supported; raw_syscalls:sys_enter: not "
                                         "permitted (perf stat -e raw_syscalls:sys_enter true: "
                                         "No permission)")
    got = syscall_claims(rows)[5]
    assert got.verdict == "reproduced" and "of its CPU in the kernel" in got.criterion
    assert "judged by CPU-time shares: no syscall count (getuid: raw_syscalls:sys_enter: not " \
           "permitted" in got.reason
    assert "clock_gettime:" not in got.reason.split("no syscall count")[1]
    rows = [{**r, "counters": "perf missing: perf not found on PATH"} for r in syscall_rows()]
    got = syscall_claims(rows)[5]
    assert "no syscall count (clock_gettime: perf missing: perf not found on PATH; getuid: " \
           "perf missing" in got.reason


def test_the_full_config_counts_native_clock_gettime_and_getuid_at_one_worker():
    cfg = copy.deepcopy(FULL)
    cfg = settings.effective(cfg, check_disk=False)
    counted_points = [p for p in planning.grid(cfg, "syscall")
                      if "--counters" in planning.measure_args(cfg, "syscall", p)]
    for call in ("clock_gettime", "getuid"):
        assert any(p["variant"] == "native" and p["call"] == call and p["workers"] == 1
                   for p in counted_points), call


#: clock sources whose time the vDSO reads without entering the kernel
VDSO_CLOCKS = {"tsc", "kvm-clock", "hyperv_clocksource_tsc_page", "arch_sys_counter"}


def test_a_real_count_of_native_clock_gettime_and_getuid_decides_the_claim(native_binary):
    """One counting pass each, under perf (as root in CI): getuid enters the kernel once a
    call; clock_gettime does not where the clock source has a vDSO reader."""
    need("perf")
    got = {}
    for call in ("clock_gettime", "getuid"):
        meta = counters.count_point("syscall", ["variant=native", f"call={call}",
                                                "binding=single", "workers=1"],
                                    [f"binary={native_binary}"], 5000, "native")
        assert meta["perfgrid_counters"] == "ok", meta
        got[call] = {k.removeprefix("perfgrid_"): v for k, v in meta.items()}
    calls = 5000 * syscall_mod.UNROLL
    uid, clock = got["getuid"]["syscalls_per_unit"], got["clock_gettime"]["syscalls_per_unit"]
    assert got["getuid"]["counters_units"] == calls
    allowance = analysis.STARTUP_SYSCALLS / calls  # start-up, counted with the loops
    assert 1.0 <= uid <= 1.0 + allowance
    source = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    vdso = source.read_text().strip() in VDSO_CLOCKS if source.exists() else None
    if vdso or clock < 0.5:
        assert clock <= allowance, clock
    else:  # a clock source the vDSO cannot read: every call falls back to the syscall
        assert 1.0 <= clock <= 1.0 + allowance
    rows = counted(syscall_rows(), clock=0, getuid=0, calls=calls, start_up=0)
    for r in rows:
        if r.get("counters") == "ok":
            r.update(got[r["call"]])
    claim = syscall_claims(rows)[5]
    assert claim.verdict == ("reproduced" if clock < 0.5 else "not reproduced"), claim.reason


MISSING = {
    "native_linear": (lambda r: is_own(r, "native_linear"), "at 1 and 2 workers"),
    "native_no_further": (lambda r: r["runtime"] == "native" and r["workers"] > 2,
                          "at the CPU count and beyond"),
    "python_linear": (lambda r: is_own(r, "python_linear"), "at 1 and 2 workers"),
    "python_no_further": (lambda r: r["runtime"] == "python" and r["workers"] > 2,
                          "at the CPU count and beyond"),
    "no_contention": (lambda r: r["runtime"] == "native" and r["call"] == "getuid"
                      and r["workers"] == 1, "no native bound getuid rows at 1 and more"),
    "vdso_clock_sys": (lambda r: r["call"] == "clock_gettime",
                       "no native 1-worker clock_gettime and getuid rows"),
    "vdso_getuid_sys": (lambda r: r["call"] == "getuid" and r["workers"] == 1,
                        "no native 1-worker clock_gettime and getuid rows"),
}


@pytest.mark.parametrize("quantity", QUANTITIES)
def test_each_syscall_claim_without_its_rows_is_inconclusive(quantity):
    drop, reason = MISSING[quantity]
    got = syscall_claims([r for r in syscall_rows() if not drop(r)])[CLAIM_OF[quantity]]
    assert got.verdict == "inconclusive" and reason in got.reason, got.reason


def test_cpu_time_claims_need_per_process_observations():
    rows = [{k: v for k, v in r.items() if k != "process_metadata"} for r in syscall_rows()]
    claims = syscall_claims(rows)
    assert [c.verdict for c in claims[:4]] == ["reproduced"] * 4
    for got in claims[4:]:
        assert got.verdict == "inconclusive" and "no per-process values" in got.reason
    rows = [{k: v for k, v in r.items() if k != "calls_per_cpu_s"} for r in syscall_rows()]
    got = syscall_claims(rows)[4]
    assert got.verdict == "inconclusive" and "with CPU times" in got.reason


@pytest.mark.parametrize("quantity", QUANTITIES)
def test_a_nan_rate_makes_its_syscall_claim_inconclusive(quantity):
    rows = syscall_rows()
    for r in rows:
        if is_own(r, quantity):
            r.update(rate=float("nan"), process_values=json.dumps([[float("nan")] * 5] * 4))
    got = syscall_claims(rows)[CLAIM_OF[quantity]]
    assert got.verdict == "inconclusive"
    # the vDSO claim names the side that has no estimate; the others have one side only
    side = {"vdso_clock_sys": "clock_gettime: ", "vdso_getuid_sys": "getuid: "}.get(quantity, "")
    assert f"{side}no estimate (missing or NaN rate)" in got.reason, got.reason
    assert got.reason.count("no estimate") == 1, got.reason


NOT_AXES = {"rate", "work_per_loop", "process_values", "n_processes", "n_values",
            "process_metadata"}


@pytest.mark.parametrize("quantity", QUANTITIES)
def test_a_one_value_row_gives_its_syscall_claim_no_interval(quantity):
    rows = syscall_rows()
    for i, r in enumerate(rows):
        if is_own(r, quantity):
            one = json.loads(r["process_metadata"])[:1]
            rows[i] = single(r["rate"], process_metadata=json.dumps(one),
                             **{k: v for k, v in r.items() if k not in NOT_AXES})
    got = syscall_claims(rows)[CLAIM_OF[quantity]]
    assert got.verdict == "inconclusive"
    assert "no interval" in got.reason and "no interval" in got.measured


def test_analysis_plots_and_every_claim_is_inconclusive_without_rows(tmp_path):
    table = pd.DataFrame(syscall_rows())
    written = analysis.plot(table, tmp_path, get("syscall"))
    assert {p.stem for p in written} >= {"rate_by_workers", "calls_per_cpu_second"}
    assert all(c.verdict == "inconclusive"
               for c in analysis.claims(table.iloc[0:0], get("syscall")))
    assert analysis.SEED_ROWS[0]["rate"] == 30_000_000.0 and "002_" in analysis.SEED_ROWS[0][
        "source"]


def test_rate_plot_draws_each_rows_interval(tmp_path, monkeypatch):
    import matplotlib.container

    bars = []
    real = analysis.save

    def keep(fig, out_dir, name):
        bars.extend((name, c) for ax in fig.axes for c in ax.containers
                    if isinstance(c, matplotlib.container.ErrorbarContainer))
        return real(fig, out_dir, name)

    monkeypatch.setattr(analysis, "save", keep)
    table = pd.DataFrame(syscall_rows())
    bounds = [rate_estimate(r).interval() for _, r in table.iterrows()]
    table = table.assign(rate_ci_low=[b[0] for b in bounds], rate_ci_high=[b[1] for b in bounds])
    analysis.plot(table, tmp_path, get("syscall"))
    assert {name for name, _ in bars} == {"rate_by_workers"}
    assert sum(len(c.lines[2][0].get_segments()) for _, c in bars) == len(table)


def test_notes_compare_python_with_c():
    rows = [{**r, "binding": "single"} for r in syscall_rows() if r["workers"] == 1]
    assert len(analysis.notes(pd.DataFrame(rows), get("syscall"))) == 2


def test_claims_of_judges_each_paired_claim_on_its_own_spread() -> None:
    """Each point measured in four rounds: every claim paired over them rests on its own
    t with 3 degrees of freedom, as the analysis alone judges it (no spread borrowed from
    the experiment's other claims), and carries its ledger entry."""
    from perfgrid.analyse.analysis import claims_of

    rows = syscall_rows(cv=0.01)
    for r in rows:
        r.update(process_rounds=json.dumps([1, 2, 3, 4]), noisy=0, noisy_rounds="[]")
    judged = claims_of("syscall", pd.DataFrame(rows))
    plain = analysis.claims(pd.DataFrame(rows), get("syscall"))
    paired = [i for i, c in enumerate(judged) if c.basis == "paired over 4 rounds (t, 3 df)"]
    assert len(paired) >= 3
    for i in paired:
        assert (judged[i].ci_low, judged[i].ci_high) == (plain[i].ci_low, plain[i].ci_high)
    assert all(c.kind in ("seed", "project", "sanity") for c in judged)
    assert not any(c.kind for c in plain)
