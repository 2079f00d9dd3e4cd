"""timers (seed E4): a storm of timers in one event loop.

``tasks`` tasks each sleep ``rounds`` random times in [0, ``max_sleep``]
seconds, so the loop keeps ``tasks`` timers pending and fires ``tasks`` x
``rounds`` of them. Stresses the event loop's timer heap and task switching
(and Python's cyclic GC walking the many live tasks) against the ideal wall
time: the longest task's sum of sleeps, drawn up front from the same streams.
The ``erlang`` variants run the storm as Erlang processes (the seed's own
runtime, erlang/pg_timers.erl here) sleeping the very same draws,
rounded to Erlang's whole milliseconds: ``erlang`` on one scheduler (as the
seed ran), ``erlang_smp`` on one per CPU.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import resource
import sys
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pyperf import perf_counter

from perfgrid.experiments.base import Case, Experiment, Metadata, Point, matches_any
from perfgrid.kit import binding, erlang
from perfgrid.kit.eventloops import loop_factory, uvloop_missing

if TYPE_CHECKING:
    from perfgrid.kit.paths import Layout

#: Erlang variant -> its scheduler count (None: one per allowed CPU)
ERLANG = {"erlang": 1, "erlang_smp": None}
SEEDINGS = ("independent", "identical")
GC_MODES = ("on", "off")
#: the seed run's date (2009-09-16): the default stream seed
DEFAULT_SEED = 20090916
#: seconds between progress lines on stderr (they land in the job log)
PROGRESS_S = 5.0


def gc_mode(value: Any) -> str:
    """``on``/``off`` from a config value; YAML 1.1 reads a bare on/off as a boolean."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value not in GC_MODES:
        raise ValueError(f"timers.gc: {value!r} is not one of on, off")
    return str(value)


def draws(tasks: int, rounds: int, max_sleep: float, seeding: str, seed: int) -> np.ndarray:
    """Every task's sleeps in seconds, uniform in [0, max_sleep], drawn up front.

    ``independent``: one row per task (``tasks`` x ``rounds``). ``identical``:
    a single row shared by every task (1 x ``rounds``), as old Erlang's
    ``random`` module gave every process the same default seed.
    """
    if seeding not in SEEDINGS:
        raise ValueError(f"seeding: {seeding!r} is not one of {', '.join(SEEDINGS)}")
    rng = np.random.default_rng(seed)
    rows = tasks if seeding == "independent" else 1
    return rng.uniform(0.0, max_sleep, size=(rows, rounds))


def ideal_seconds(sleeps: np.ndarray) -> float:
    """The lower bound on the wall time: the largest per-task sum of sleeps."""
    return float(sleeps.sum(axis=1).max())


@dataclass
class Storm:
    """What one storm did: its wall time and what it cost."""

    wall_s: float
    spawn_s: float
    cpu_s: float
    lateness: np.ndarray
    gc_collections: int


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _gc_collections() -> int:
    return sum(gen["collections"] for gen in gc.get_stats())


async def _sleeper(sleeps: memoryview, first: int, rounds: int, late: memoryview,
                   slot: int, done: list[int]) -> None:
    """One task: sleep ``rounds`` times; record how late each wake-up was.

    The due time is taken on ``time.monotonic`` (asyncio's own clock); uvloop
    keeps whole milliseconds, so its wake-ups may look early by up to ~1 ms.
    """
    monotonic = time.monotonic
    sleep = asyncio.sleep
    for r in range(rounds):
        delay = sleeps[first + r]
        due = monotonic() + delay
        await sleep(delay)
        late[slot + r] = monotonic() - due
        done[0] += 1


async def _progress(done: list[int], events: int, started: float, every: float) -> None:
    """Print the events fired so far every ``every`` seconds (to the job log)."""
    while True:
        await asyncio.sleep(every)
        print(f"timers: {done[0]:,}/{events:,} timer events after "
              f"{perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


async def _storm(sleeps: memoryview, tasks: int, rounds: int, shared: bool,
                 late: memoryview, progress_s: float) -> tuple[float, float]:
    """Spawn the tasks and wait for all; (wall seconds, spawn seconds)."""
    done = [0]
    started = perf_counter()
    coros = (_sleeper(sleeps, 0 if shared else i * rounds, rounds, late, i * rounds, done)
             for i in range(tasks))
    running = [asyncio.create_task(c) for c in coros]
    spawned = perf_counter()
    reporter = asyncio.create_task(_progress(done, tasks * rounds, started, progress_s))
    try:
        await asyncio.gather(*running)
    finally:
        reporter.cancel()
    elapsed = perf_counter() - started
    if done[0] != tasks * rounds:
        raise RuntimeError(f"fired {done[0]:,} of {tasks * rounds:,} timer events")
    return elapsed, spawned - started


def storm(sleeps: np.ndarray, tasks: int, variant: str, gc_on: bool,
          progress_s: float = PROGRESS_S) -> Storm:
    """Run one storm in a fresh event loop, closed (every task gone) on return.

    ``sleeps`` has one row per task, or one row for all (identical seeding).
    """
    rounds = sleeps.shape[1]
    flat = np.ascontiguousarray(sleeps, dtype=np.float64).ravel()
    lateness = np.full(tasks * rounds, np.nan)
    was_enabled = gc.isenabled()
    gc.collect()
    with asyncio.Runner(loop_factory=loop_factory(variant)) as runner:
        cpu0, coll0 = _cpu_seconds(), _gc_collections()
        (gc.enable if gc_on else gc.disable)()
        try:
            wall, spawn = runner.run(_storm(memoryview(flat), tasks, rounds,
                                            sleeps.shape[0] == 1, memoryview(lateness),
                                            progress_s))
            cpu, collections = _cpu_seconds() - cpu0, _gc_collections() - coll0
        finally:
            (gc.enable if was_enabled else gc.disable)()
    return Storm(wall, spawn, cpu, lateness, collections)


#: the tasks of the sweep points the gc and uvloop claims compare (analysis.py)
CLAIM_TASKS = 100_000
#: the seed's scale: 500,000 processes x 10 waits of up to 10 s (5,000,000 timer events)
SEED_SCALE = {"tasks": 500_000, "rounds": 10, "max_sleep": 10.0}
#: the storms the seed-scale claims compare (analysis.py): the fastest Python setting
#: and Erlang itself
SEED_SCALE_CLAIMED = {**SEED_SCALE, "variant": ["uvloop", "erlang"]}
#: rounds of a seed-scale claim point at most, by (variant, seeding), and no more than
#: ``measure.claims.rounds`` (3 in the full run, so Erlang's identical storm gets 3 there):
#: three of uvloop's storm with identical seeding (~65 s), four of Erlang's, which decide
#: their wall-time claims (four gave intervals of +/- 0.4 %
#: (uvloop, at the threshold of 1.10x) and +/- 1.5 % (Erlang, 1.18-1.21x) in two full
#: runs; with three, Erlang's storms each read 1.17-1.25x in two other runs, and one
#: interval at 2 df reached down to 1.09x); two of one with independent seeding
#: (100-140 s), which give its claims an interval: over three full runs the overhead share
#: spread 7 points a storm (uvloop, mean 25 %: four rounds would decide it, ~4 min more)
#: and 6 (Erlang, mean 12 %: not eight); three of Erlang's (~95 s each): two full runs
#: read 7.2 % [2.2, 20.5] and 5.9 % [0.3, 54.3] of a 10 % threshold from two, with 1 df
SEED_SCALE_ROUNDS = {("uvloop", "identical"): 3, ("erlang", "identical"): 4,
                     ("uvloop", "independent"): 2, ("erlang", "independent"): 3}


class Timers(Experiment):
    name = "timers"
    packages = ("uvloop",)  # its uvloop variant (perfgrid.kit.eventloops)
    report_position = 40
    axes = ("variant", "seeding", "gc", "tasks", "rounds", "max_sleep")
    int_axes = frozenset({"tasks", "rounds"})
    #: the sweep's storms of CLAIM_TASKS tasks at 1 s sleeps (about 9 s each here), which
    #: the gc on/off and uvloop/asyncio claims compare, in ``measure.claims.rounds`` rounds
    #: (their ratios paired round by round); and the seed-scale storms of uvloop and Erlang,
    #: which the seed-scale claims read, in SEED_SCALE_ROUNDS rounds (:meth:`claim_rounds`).
    #: Other storms (plain asyncio at the seed's scale, where a config adds it) stay at one
    #: value
    claim_points = ({"tasks": CLAIM_TASKS, "max_sleep": 1.0}, SEED_SCALE_CLAIMED)
    #: counted (perfgrid.measure.counters): the 100,000-task sweep points, where a storm lasts
    #: seconds; its claims compare gc on/off and uvloop/asyncio there
    counter_points = ({"tasks": CLAIM_TASKS, "rounds": 3, "max_sleep": 1.0},)
    work_unit = "timer events"
    rate_unit = "timer events/s"
    erlang_variants = tuple(ERLANG)
    erlang_module = "pg_timers"

    def claim_rounds(self, point: Point, rounds: int) -> int:
        """A seed-scale storm lasts minutes: at most SEED_SCALE_ROUNDS of its variant and
        seeding (a claim point's; 2 for any other a config makes one)."""
        if matches_any(point, (SEED_SCALE,)):
            return min(rounds, SEED_SCALE_ROUNDS.get((point["variant"], point["seeding"]), 2))
        return rounds

    def job_options(self, point: Point, section: dict[str, Any], config: dict[str, Any],
                    layout: Layout) -> dict[str, str]:
        """The storms' seed and how often a storm logs its progress."""
        return {"seed": str(section["seed"]), "progress": str(section["progress_s"])}

    def claim_group(self, point: Point) -> Hashable | None:
        """The 100,000-task storms of one seeding run back to back (the gc on/off and
        uvloop/asyncio pairs); a seed-scale storm is shuffled alone."""
        return point["seeding"] if point["tasks"] == CLAIM_TASKS else None

    def points(self, section: dict[str, Any], config: dict[str, Any]) -> list[Point]:
        """The cross product of the lists, then of each extra grid (a key left out
        takes the section's value); a point in several grids runs once."""
        out: list[Point] = []
        grids = [section] + [{**section, **extra} for extra in section.get("extra_grids", [])]
        for grid in grids:
            for variant, seeding, gc_value, tasks, rounds, max_sleep in itertools.product(
                    grid["variants"], grid["seeding"], grid["gc"], grid["tasks"],
                    grid["rounds"], grid["max_sleep"]):
                if variant in ERLANG:
                    gc_value = "on"  # Erlang collects each process's heap; it cannot be off
                point = self._point(variant, seeding, gc_value, tasks, rounds, max_sleep)
                if point not in out:
                    out.append(point)
        return self.keep_runtimes(out, section)

    @staticmethod
    def _point(variant: str, seeding: str, gc_value: Any, tasks: int, rounds: int,
               max_sleep: float) -> Point:
        return {"variant": variant, "seeding": seeding, "gc": gc_mode(gc_value),
                "tasks": int(tasks), "rounds": int(rounds), "max_sleep": float(max_sleep)}

    def parse_point(self, raw: dict[str, str]) -> Point:
        point = super().parse_point(raw)
        point["max_sleep"] = float(point["max_sleep"])
        return point

    def unavailable(self, point: Point) -> str | None:
        if point["variant"] == "uvloop":
            return uvloop_missing()
        if point["variant"] in ERLANG:
            return erlang.missing()
        return None

    def prepare(self, point: Point, options: dict[str, str]) -> Case:
        tasks, rounds = point["tasks"], point["rounds"]
        seed = int(options.get("seed", DEFAULT_SEED))
        progress_s = float(options.get("progress", PROGRESS_S))
        sleeps = draws(tasks, rounds, point["max_sleep"], point["seeding"], seed)
        if point["variant"] in ERLANG:
            return self._erlang_case(point, options, sleeps, seed, progress_s)
        ideal = ideal_seconds(sleeps)
        gc_on = point["gc"] == "on"
        storms: list[Storm] = []
        meta: Metadata = {
            "perfgrid_seed": seed,
            "perfgrid_timer_events": tasks * rounds,
            "perfgrid_ideal_s": ideal,
            "perfgrid_sleep_mean_s": float(sleeps.mean()),
        }
        if point["variant"] == "uvloop":
            import uvloop

            meta["perfgrid_uvloop_version"] = uvloop.__version__

        def time_loops(loops: int) -> float:
            total = 0.0
            for _ in range(loops):
                result = storm(sleeps, tasks, point["variant"], gc_on, progress_s)
                storms.append(result)
                total += result.wall_s
            return total

        def observed() -> Metadata:
            return summarize(storms, ideal)

        return Case(time=time_loops, work_per_loop=tasks * rounds, metadata=meta,
                    observed=observed)

    @staticmethod
    def _erlang_case(point: Point, options: dict[str, str], sleeps: np.ndarray, seed: int,
                     progress_s: float) -> Case:
        """The storm in Erlang: the draws in whole milliseconds go to the VM in a file."""
        tasks, rounds = point["tasks"], point["rounds"]
        millis = np.rint(sleeps * 1000.0).astype(np.uint32)
        ideal = float(millis.sum(axis=1).max()) / 1000.0
        beams = erlang.beam_dir(options)
        path = erlang.draws_file(millis)  # removed by close()
        schedulers = ERLANG[point["variant"]] or len(binding.allowed_cpus())
        # room for every sleeper beside the VM's own processes
        vm = erlang.Vm(["+S", f"{schedulers}:{schedulers}", "+P", str(max(262144, 2 * tasks))],
                       None, schedulers)
        args = {"draws": path, "tasks": tasks, "rounds": rounds,
                "shared": int(point["seeding"] == "identical"),
                "progress_ms": int(progress_s * 1000)}
        cmd = erlang.command("pg_timers", args, beams, vm)
        # the storm lasts its ideal at least: the deadline grows with it
        timeout = float(options.get("erlang_timeout_s",
                                    max(erlang.DEFAULT_TIMEOUT_S, 2 * ideal + 120)))
        runs: list[erlang.Result] = []
        meta: Metadata = {
            "perfgrid_seed": seed,
            "perfgrid_timer_events": tasks * rounds,
            "perfgrid_ideal_s": ideal,
            "perfgrid_sleep_mean_s": float(millis.mean()) / 1000.0,
            "perfgrid_vm_flags": vm.describe(),
            "perfgrid_otp": erlang.otp_release(),
        }

        def time_loops(loops: int) -> float:
            total = 0.0
            for _ in range(loops):
                result = erlang.run(cmd, timeout)
                report = result.report
                if abs(float(report["ideal_s"]) - ideal) > 1e-6:
                    raise RuntimeError(f"timers: Erlang's ideal {report['ideal_s']} s is not "
                                       f"the draws' {ideal} s")
                runs.append(result)
                total += float(report["seconds"])
            return total

        def observed() -> Metadata:
            return summarize_erlang(runs, ideal)

        def close() -> None:
            os.unlink(path)

        return Case(time=time_loops, work_per_loop=tasks * rounds, metadata=meta,
                    observed=observed, close=close)


def summarize_erlang(runs: list[erlang.Result], ideal: float) -> Metadata:
    """The same keys as :func:`summarize`, from the Erlang program's own reports.

    Its lateness percentile comes from a histogram (10 us buckets below 10 ms,
    1 ms above), its CPU from the VM's runtime statistics, and gc_collections
    counts Erlang's per-process collections.
    """
    if not runs:
        return {}
    reports = [r.report for r in runs]
    wall = float(np.mean([r["seconds"] for r in reports]))
    events = sum(int(r["events"]) for r in reports)
    return {
        "perfgrid_wall_s": wall,
        "perfgrid_overhead_s": wall - ideal,
        "perfgrid_overhead_share": (wall - ideal) / wall if wall else float("nan"),
        "perfgrid_spawn_s": float(np.mean([r["spawn_s"] for r in reports])),
        "perfgrid_late_mean_ms": sum(r["late_mean_ms"] * r["events"] for r in reports) / events,
        "perfgrid_late_p99_ms": max(float(r["late_p99_ms"]) for r in reports),
        "perfgrid_late_max_ms": max(float(r["late_max_ms"]) for r in reports),
        "perfgrid_early_wakeups": sum(int(r["early"]) for r in reports),
        "perfgrid_cpu_pct": 100.0 * sum(r["cpu_s"] for r in reports)
        / sum(r["seconds"] for r in reports),
        "perfgrid_gc_collections": int(sum(r["gc_collections"] for r in reports)),
        "perfgrid_peak_rss_mib": max(r.maxrss_mib for r in runs),
        "perfgrid_schedulers": int(reports[-1]["schedulers"]),
    }


def summarize(storms: list[Storm], ideal: float) -> Metadata:
    """Per-run metadata over the storms run so far: overhead, lateness, CPU, memory."""
    if not storms:
        return {}
    wall = float(np.mean([s.wall_s for s in storms]))
    late = np.concatenate([s.lateness for s in storms])
    cpu = sum(s.cpu_s for s in storms)
    return {
        "perfgrid_wall_s": wall,
        "perfgrid_overhead_s": wall - ideal,
        "perfgrid_overhead_share": (wall - ideal) / wall if wall else float("nan"),
        "perfgrid_spawn_s": float(np.mean([s.spawn_s for s in storms])),
        "perfgrid_late_mean_ms": float(np.mean(late) * 1e3),
        "perfgrid_late_p99_ms": float(np.percentile(late, 99) * 1e3),
        "perfgrid_late_max_ms": float(np.max(late) * 1e3),
        "perfgrid_cpu_pct": 100.0 * cpu / sum(s.wall_s for s in storms),
        "perfgrid_gc_collections": int(sum(s.gc_collections for s in storms)),
        "perfgrid_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


EXPERIMENT = Timers()
