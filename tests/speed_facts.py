"""Speed facts of the harness, measured side by side in one run (``make bench``).

These were assertions in the unit tests (a harness within 1.05x of a plain loop,
10,000 Erlang spawns/s, a load stopping within 3 s of its deadline); the dry run of
the full config (under 3 s) is timed beside a one-rule workflow's. How fast
something runs depends on the machine and its load, so a unit test asserting it
fails for the wrong reason; here each fact is measured and printed beside its
target, and ``--strict`` turns a missed target into exit status 1.

    python tests/speed_facts.py [--strict] [--runs N]

``--runs`` sets how many dry runs the median is of (5); tests/test_end_to_end.py runs
this with one, as a smoke test that every fact can be measured (it asserts no speed).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: (name, what is measured, unit, target, whether the measured value must be below it)
Fact = tuple[str, str, str, float, bool]


def syscall_harness_overhead() -> float:
    """Per-call time of the unrolled Python worker over a hand-written getuid loop, one CPU."""
    from perfgrid.experiments import get
    from perfgrid.experiments import syscall as syscall_mod
    from perfgrid.kit import binding

    exp, n = get("syscall"), 40_000
    getuid = os.getuid

    def hand_written() -> float:
        started = time.perf_counter()
        for _ in range(n):
            getuid()
        return (time.perf_counter() - started) / n

    saved = sorted(os.sched_getaffinity(0))
    case = exp.prepare({"variant": "python", "call": "getuid", "binding": "single",
                        "workers": 1}, {})
    try:
        os.sched_setaffinity(0, binding.plan("single", 1)[0])  # the worker's CPU
        ours, plain = [], []
        for _ in range(7):
            ours.append(case.time(n // syscall_mod.UNROLL) / n)
            plain.append(hand_written())
    finally:
        os.sched_setaffinity(0, saved)
        case.close()
    return min(ours) / min(plain)


def erlang_spawn_rate() -> float:
    """Spawns per second of the Erlang spawn program, 2,000 spawns in 3 chains."""
    from perfgrid.kit import erlang

    from helpers import compile_erlang

    if erlang.missing():
        raise RuntimeError(erlang.missing())
    with tempfile.TemporaryDirectory() as folder:
        beams = str(compile_erlang(Path(folder)))
        vm = erlang.vm_for("none", 2)
        report = erlang.run(erlang.command("pg_spawn", {"total": 2000, "chains": 3}, beams,
                                           vm), cpus=vm.cpus).report
    return 2000 / report["seconds"]


def http_deadline_overrun() -> float:
    """Seconds a builtin-client load with a 0.3 s deadline takes to return."""
    from perfgrid.experiments.http import load
    from perfgrid.experiments.http.counter import init_database
    from perfgrid.experiments.http.supervisor import ServerGroup
    from perfgrid.kit import binding

    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "c.sqlite"
        init_database(db)
        with ServerGroup("asyncio", db, binding.plan("none", 1)) as group:
            started = time.monotonic()
            load.run_builtin(group.port, 10_000_000, 4, True, deadline_s=0.3)
            return time.monotonic() - started


def dry_run_seconds(runs: int = 5) -> tuple[float, str]:
    """Median seconds of ``snakemake -n`` on the full config in this checkout, ``runs``
    runs, each beside a one-rule workflow's (Snakemake's own start-up: the floor)."""
    import statistics
    import subprocess

    from perfgrid.kit.paths import REPO

    command = [sys.executable, "-m", "snakemake", "-n", "--cores", "16", "--quiet"]

    def timed(cwd: Path) -> tuple[float, str]:
        started = time.perf_counter()
        proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True)
        return time.perf_counter() - started, proc.stdout + proc.stderr

    with tempfile.TemporaryDirectory() as folder:
        floor_dir = Path(folder)
        (floor_dir / "Snakefile").write_text('rule one:\n    output: "x"\n    shell: "touch x"\n')
        (floor_dir / "x").touch()
        full, floor, said = [], [], ""
        for _ in range(runs):
            seconds, said = timed(REPO)
            full.append(seconds)
            floor.append(timed(floor_dir)[0])
    state = ("up to date" if "Nothing to be done" in said
             else "from scratch: no finished run here (make reproduce first)")
    return statistics.median(full), (f"{state}; a one-rule workflow took "
                                     f"{statistics.median(floor):.2f} s beside it")


FACTS: list[tuple[Fact, Callable[[], float | tuple[float, str]]]] = [
    (("syscall harness", "Python worker per call / hand-written loop", "x", 1.05, True),
     syscall_harness_overhead),
    (("erlang spawn", "pg_spawn spawns per second", "/s", 10_000, False), erlang_spawn_rate),
    (("http deadline", "return of a 0.3 s-deadline load", "s", 3.0, True),
     http_deadline_overrun),
    (("dry run", "snakemake -n of the full config, median of the runs", "s", 3.0, True),
     dry_run_seconds),
]


def main(argv: list[str] | None = None) -> int:
    """Measure every fact, print it beside its target; with --strict, fail on a miss."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--runs", type=int, default=5,
                        help="dry runs the median is of (default 5; at least 1)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}; allowed: a whole number >= 1")
    missed = 0
    print(f"{'fact':<16} {'measured':>12} {'target':>12} {'of target':>10}  what")
    for (name, what, unit, target, below), measure in FACTS:
        try:
            value, note = (measure(args.runs) if measure is dry_run_seconds
                           else measure()), ""
            if isinstance(value, tuple):
                value, note = value
        except Exception as err:  # a missing tool: say so, count it as missed
            print(f"{name:<16} {'error':>12} {target:>11g}{unit} {'':>10}  {what}: {err}")
            missed += 1
            continue
        ok = value <= target if below else value >= target
        missed += not ok
        print(f"{name:<16} {value:>11.3g}{unit} {('<= ' if below else '>= ') + f'{target:g}':>11}"
              f"{unit} {value / target:>9.2f}x  {what}{f' ({note})' if note else ''}"
              f"{'' if ok else '  (MISSED)'}")
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
