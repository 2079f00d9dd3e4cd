"""Kernel counters: perf's CSV parsed, counts per unit of work, skips, one real pass, "why"."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfgrid.analyse import aggregate
from perfgrid.analyse.analysis import why
from perfgrid.design import planning
from perfgrid.kit.paths import REPO
from perfgrid.measure import bench, counters
from perfgrid.pipeline import configschema, settings

from helpers import FULL, need

#: perf stat -x, as perf 6.1 prints it on a VM without hardware counters
PERF_CSV = """# started on Mon Nov 30 21:00:00 2026

12.50,msec,task-clock,12500000,100.00,0.987,CPUs utilized
40,,context-switches,12500000,100.00,3.200,K/sec
3,,cpu-migrations,12500000,100.00,240.000,/sec
1000,,page-faults:u,12500000,100.00,80.000,K/sec
<not supported>,,cycles,0,100.00,,
<not supported>,,instructions,0,100.00,,
<not counted>,,cache-misses,0,0.00,,
<not supported>,,branch-misses,0,100.00,,
2090,,raw_syscalls:sys_enter,12500000,100.00,167.200,K/sec
"""


def test_perf_csv_is_parsed_and_uncountable_events_are_named_not_zeroed():
    parsed = counters.parse(PERF_CSV)
    assert parsed.values == {"task-clock": 12.5, "context-switches": 40.0,
                             "cpu-migrations": 3.0, "page-faults": 1000.0,
                             "raw_syscalls:sys_enter": 2090.0}
    assert parsed.missing == {"cycles": "not supported", "instructions": "not supported",
                              "cache-misses": "not counted", "branch-misses": "not supported"}


def test_counts_are_divided_by_the_units_of_work():
    out = counters.per_unit(counters.parse(PERF_CSV), 100)
    assert out["task_clock_ns_per_unit"] == pytest.approx(12.5e6 / 100)  # msec -> ns
    assert out["ctx_switches_per_unit"] == pytest.approx(0.4)
    assert out["migrations_per_unit"] == pytest.approx(0.03)
    assert out["page_faults_per_unit"] == pytest.approx(10.0)
    assert out["syscalls_per_unit"] == pytest.approx(20.9)
    assert "cycles_per_unit" not in out  # never a zero for an event not counted
    assert out["counters_unsupported"].startswith("cycles: not supported")
    assert "cache-misses: not counted" in out["counters_unsupported"]
    with pytest.raises(ValueError, match="units of work"):
        counters.per_unit(counters.parse(PERF_CSV), 0)


@pytest.mark.parametrize("name, event", [
    ("raw_syscalls:sys_enter", "raw_syscalls:sys_enter"),  # a tracepoint stays whole
    ("raw_syscalls:sys_enter:u", "raw_syscalls:sys_enter"),  # ... less its modifier
    ("sched:sched_switch", "sched:sched_switch"),
    ("cycles:u", "cycles"), ("page-faults:ukG", "page-faults"), ("task-clock", "task-clock"),
])
def test_a_modifier_is_dropped_but_a_tracepoint_name_kept(name, event):
    assert counters.parse(f"7,,{name},100,100.00,,\n").values == {event: 7.0}


def test_a_tracepoint_not_counted_is_named_with_its_reason_never_zero():
    parsed = counters.parse(PERF_CSV.replace("2090,,raw_syscalls:sys_enter",
                                             "<not supported>,,raw_syscalls:sys_enter"))
    out = counters.per_unit(parsed, 100)
    assert "syscalls_per_unit" not in out
    assert "raw_syscalls:sys_enter: not supported" in out["counters_unsupported"]


def test_the_counted_pass_is_its_own_module_not_the_librarys():
    """perf runs ``python -m perfgrid.measure.counting_pass``, which looks the experiment up in the
    registry; perfgrid.measure.counters, which shared code imports, has no entry point."""
    assert not hasattr(counters, "main")
    assert counters.PASS_MODULE == "perfgrid.measure.counting_pass"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-m", "perfgrid.measure.counting_pass", "--help"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "python -m perfgrid.measure.counting_pass" in done.stdout and "--loops" in done.stdout


def test_perf_missing_is_a_reason_not_a_failure(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert counters.unavailable().startswith("perf missing")
    meta = counters.count_point("syscall", [], [], 1, "python")
    assert meta == {"perfgrid_counters": counters.unavailable()}


def test_a_paranoid_kernel_is_a_reason(monkeypatch, tmp_path):
    level = tmp_path / "perf_event_paranoid"
    level.write_text("3\n")
    monkeypatch.setattr(counters, "PARANOID", level)
    monkeypatch.setattr(counters.os, "geteuid", lambda: 1000)
    assert counters.unavailable("/usr/bin/perf").startswith("not permitted: kernel.perf_event")
    level.write_text("2\n")
    assert counters.unavailable("/usr/bin/perf") is None


def test_perf_refusing_the_events_is_a_reason(monkeypatch, tmp_path):
    fake = tmp_path / "perf"
    fake.write_text("#!/bin/sh\necho 'Error: Access to performance monitoring and "
                    "observability operations is limited.' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    meta = counters.count_point("syscall", ["variant=python"], [], 1, "python")
    assert meta["perfgrid_counters"].startswith("not permitted: perf stat exited 1")


def _fake_perf(folder: Path, refusal: str) -> None:
    """A ``perf`` on PATH that refuses any command naming the syscall tracepoint (as a
    kernel without ftrace, or a paranoid one, does) and runs every other as the real one."""
    real = shutil.which("perf")
    fake = folder / "perf"
    fake.write_text(f"""#!/bin/sh
case "$*" in *raw_syscalls:sys_enter*) printf '%s\\n' "{refusal}" >&2; exit 129;; esac
exec {real} "$@"
""")
    fake.chmod(0o755)


@pytest.mark.parametrize("refusal, word", [
    ("event syntax error: 'raw_syscalls:sys_enter' unknown tracepoint", "not counted"),
    ("No permission to enable raw_syscalls:sys_enter event.", "not permitted"),
])
def test_a_refused_tracepoint_leaves_the_other_counters_intact(monkeypatch, tmp_path,
                                                               refusal, word):
    """perf refuses a whole stat that names a tracepoint it cannot open: it is tried alone
    first, and left out with perf's reason; the pass counts everything else."""
    need("perf")
    _fake_perf(tmp_path, refusal)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))
    meta = counters.count_point("syscall", ["variant=python", "call=getuid", "binding=none",
                                            "workers=1"], [], 50, "python")
    assert meta["perfgrid_counters"] == "ok", meta
    assert meta["perfgrid_task_clock_ns_per_unit"] > 0
    assert "perfgrid_syscalls_per_unit" not in meta
    named = [part for part in meta["perfgrid_counters_unsupported"].split("; ")
             if part.startswith("raw_syscalls:sys_enter:")]
    assert named and named[0].startswith(f"raw_syscalls:sys_enter: {word} (perf stat -e")
    assert refusal.split()[0] in named[0]


def test_why_renders_the_counters_of_the_compared_points():
    base = {"experiment": "ring", "variant": "native", "workers": 2, "counters": "ok",
            "migrations_per_unit": 0.0, "task_clock_ns_per_unit": 2500.0}
    table = pd.DataFrame([
        {**base, "binding": "single", "ctx_switches_per_unit": 1.0},
        {**base, "binding": "none", "ctx_switches_per_unit": 2.0,
         "migrations_per_unit": 0.25, "task_clock_ns_per_unit": 7e3},
        {**base, "binding": "spread", "counters": "perf missing: perf not found on PATH",
         "ctx_switches_per_unit": float("nan")},
    ])
    sides = {b: {"variant": "native", "workers": 2, "binding": b} for b in ("single", "none")}
    line = why(table, ("ctx_switches_per_unit", "migrations_per_unit", "task_clock_ns_per_unit"),
               sides)
    assert line == ("per message: context switches 1 (single) vs 2 (none); migrations 0 "
                    "(single) vs 0.25 (none); CPU time 2.5 us (single) vs 7 us (none)")
    line = why(table, ("ctx_switches_per_unit",),
               {**sides, "spread": {"binding": "spread"}})
    assert line.endswith("vs n/a (spread) [spread: perf missing: perf not found on PATH]")
    # nothing counted: no row of n/a; why not where a pass could not run, else nothing
    assert why(table, ("ctx_switches_per_unit",), {"spread": {"binding": "spread"}}) == (
        "no counters: perf missing: perf not found on PATH")
    chosen = table.assign(counters=counters.NOT_COUNTED)
    assert why(chosen, ("ctx_switches_per_unit",), {"spread": {"binding": "spread"}}) == ""
    assert why(table, ("ctx_switches_per_unit",), {"compact": {"binding": "compact"}}) == ""


def test_bytes_are_counted_per_gib():
    table = pd.DataFrame([{"experiment": "file_read", "variant": "whole", "counters": "ok",
                           "page_faults_per_unit": 1 / 4096}])
    assert why(table, ("page_faults_per_unit",), {"whole": {"variant": "whole"}}) == (
        "per GiB: page faults 2.62e+05 (whole)")


def test_measure_counters_chooses_the_points():
    cfg = copy.deepcopy(FULL)
    configschema.validate(cfg)
    cfg = settings.effective(cfg, check_disk=False)
    timers = [p for p in planning.grid(cfg, "timers")
              if "--counters" in planning.measure_args(cfg, "timers", p)]
    assert timers and {p["tasks"] for p in timers} == {100_000}
    ring = planning.grid(cfg, "ring")[0]
    assert "--counters" in planning.measure_args(cfg, "ring", ring)
    cfg["ring"]["measure"]["counters"] = "none"
    assert "--counters" not in planning.measure_args(cfg, "ring", ring)
    http = [p for p in planning.grid(cfg, "http") if p["client"] == "builtin"][0]
    assert "--counters" not in planning.measure_args(cfg, "http", http)
    cfg["http"]["measure"]["counters"] = "all"
    assert "--counters" in planning.measure_args(cfg, "http", http)


@pytest.mark.serial  # its context switches per call are bounded: a busy machine adds some
def test_a_real_counting_pass_through_the_harness(tmp_path):
    """One tiny syscall point measured and counted: the row gets counts per call."""
    need("perf")
    out = tmp_path / "syscall.json"
    cmd = [sys.executable, "-m", "perfgrid.measure.bench", "syscall", "--point", "variant=python",
           "--point", "call=getuid", "--point", "binding=none", "--point", "workers=1",
           "--counters", "--result", str(out), "--processes", "1", "--values", "1",
           "--warmups", "0", "--loops", "200"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = aggregate.row_from_results([out])
    assert row["counters"] == "ok", row["counters"]
    assert row["counters_units"] == 200 * 100  # loops x the unrolled calls x one worker
    # each count is over the units of work: times them it gives back the pass's own count,
    # which for this one-threaded loop is CPU time within the counted loops' wall time (were
    # start-up and set-up counted, or the count not divided, it would be many times that)
    counted_s = row["task_clock_ns_per_unit"] * row["counters_units"] / 1e9
    assert counted_s / row["counters_loops_s"] == pytest.approx(row["cpus_utilized"], rel=0.01)
    assert 0 < row["cpus_utilized"] <= 1.5
    # a few switches and faults over 20,000 calls, per call (undivided: whole counts)
    assert 0 <= row["ctx_switches_per_unit"] < 0.01 and 0 <= row["page_faults_per_unit"] < 0.01
    for event, (column, _) in counters.EVENTS.items():  # counted, or named as not counted
        assert column in row or event in row["counters_unsupported"]
    # as root (CI) perf counts the syscall tracepoint: each os.getuid() enters the kernel
    # once; the pass's own pipe writes and reads to release the worker add a few
    assert 1.0 <= row["syscalls_per_unit"] < 1.01
    assert "the timed loops" in row["counters_scope"]


def test_a_batch_gets_neither_the_counting_flag_nor_loses_the_word_after_it():
    argv = ["syscall", "--counters", "--point", "variant=python", "--result", "x.json"]
    out = bench.batch_argv(argv, 2, None, Path("b.json"))
    assert "--counters" not in out and out[4:6] == ["--point", "variant=python"]
