"""ring (seed E5 b): tokens passed around rings of tasks, threads or processes.

Stresses the cost of one wake-up: every message hands the CPU to the next
member. ``asyncio``/``uvloop``: ``rings`` rings of ``size`` tasks in one
event loop (the seed's 1000 rings of 100); ``thread``: one ring of
``workers`` threads; ``process_pipe`` and ``native`` (the same in C): one
ring of ``workers`` OS processes linked by pipes, where the binding decides
whether a wake-up stays on one CPU or crosses to another, and the user/sys
split shows where the time goes. ``erlang``: the seed's own runtime, ``rings``
rings of ``size`` Erlang processes (erlang/pg_ring.erl here) on
``workers`` schedulers, bound per ``binding`` (config/README.md).

This module is the experiment; :mod:`.rings` holds the Python rings and
:mod:`.usage` the CPU accounting of their members.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyperf import perf_counter

from perfgrid.experiments.base import Case, Experiment, Metadata, Point, missing_tool
from perfgrid.experiments.ring.rings import PipeRing, TaskRings, ThreadRing
from perfgrid.experiments.ring.usage import Usage, process_usage, self_usage
from perfgrid.kit import binding, erlang, lifetime
from perfgrid.kit.eventloops import uvloop_missing

if TYPE_CHECKING:
    from perfgrid.kit.paths import Layout

#: rings of Erlang processes; ``workers`` is the VM's scheduler count
ERLANG = ("erlang",)
#: variants whose members are tasks of one event loop (one worker, one CPU at a time)
IN_LOOP = ("asyncio", "uvloop")
#: variants with one ring of ``workers`` threads or processes
OS_RING = ("thread", "process_pipe", "native")
NATIVE = ("native",)
#: most tasks an in-loop ring may hold (rings x size): about 1 KiB each
MAX_TASKS = 2_000_000


def native_command(path: str, workers: int, rounds: int, plan: list[list[int]]) -> list[str]:
    """The C ring's command line."""
    return [path, str(workers), str(rounds), binding.describe(plan)]


@dataclass
class Tally:
    """What the timed passes cost, summed over every pass of one worker process."""

    seconds: float = 0.0
    messages: int = 0
    usage: Usage = field(default_factory=Usage)
    setup_s: list[float] = field(default_factory=list)
    cpus: str = ""

    def add_report(self, report: dict[str, Any], setup_s: float, cpus: str) -> None:
        """Add one pass that another program (the C ring, an Erlang VM) timed itself."""
        self.seconds += report["seconds"]
        self.messages += report["messages"]
        self.usage = self.usage + Usage(report["user_s"], report["sys_s"],
                                        report["ctx_voluntary"], report["ctx_involuntary"])
        self.setup_s.append(setup_s)
        self.cpus = cpus


class Ring(Experiment):
    name = "ring"
    packages = ("uvloop",)  # its uvloop variant (perfgrid.kit.eventloops)
    report_position = 50
    axes = ("variant", "binding", "workers")
    int_axes = frozenset({"workers"})
    #: analysis.py's claims compare bindings, CPU shares and the best ring
    #: over the whole grid: every point
    claim_points = ({},)
    work_unit = "messages"
    rate_unit = "messages/s"
    native_variants = NATIVE
    erlang_variants = ERLANG
    native_program = "ring"
    erlang_module = "pg_ring"
    reference_variants = NATIVE
    reference_axes = ("workers", "binding")
    #: an OS ring needs two members
    min_workers = 2
    #: no fallback: a row is compared with the C ring at its own workers/binding only
    fallback_axes = ("workers", "binding")

    def claim_group(self, point: Point) -> Hashable | None:
        """The points one claim compares run back to back: one ring kind at one size
        across its bindings; the event-loop rings beside the 2-thread ring."""
        if point["variant"] in ("asyncio", "uvloop") or (
                point["variant"] == "thread" and point["workers"] == 2):
            return "in-process"
        return point["variant"], point["workers"]

    def points(self, section: dict[str, Any], config: dict[str, Any]) -> list[Point]:
        """In-loop variants: one worker, bindings none/single (compact and spread
        of one worker are single); OS rings: every workers x binding."""
        tasks = section["rings"] * section["size"]
        if tasks > MAX_TASKS and set(section["variants"]) & set(IN_LOOP):
            raise ValueError(f"ring.rings x ring.size: {tasks:,} tasks is over {MAX_TASKS:,} "
                             f"(about 1 KiB each); lower ring.rings or ring.size")
        out: list[Point] = []
        for variant in section["variants"]:
            if variant in ERLANG:
                lists = {**section, **(section.get("erlang") or {})}
                for b in lists["bindings"]:  # single: one scheduler
                    for w in ([1] if b == "single" else lists["workers"]):
                        point = {"variant": variant, "binding": b, "workers": w}
                        if point not in out:
                            out.append(point)
            elif variant in IN_LOOP:
                one = dict.fromkeys("none" if b == "none" else "single"
                                    for b in section["bindings"])
                out += [{"variant": variant, "binding": b, "workers": 1} for b in one]
            else:
                out += [{"variant": variant, "binding": b, "workers": w}
                        for w in section["workers"] for b in section["bindings"]]
        return self.keep_runtimes(out, section)

    def job_options(self, point: Point, section: dict[str, Any], config: dict[str, Any],
                    layout: Layout) -> dict[str, str]:
        """The ring's sizes: the same for every point."""
        return {key: str(section[key]) for key in ("rings", "size", "rounds", "worker_rounds")}

    def unavailable(self, point: Point) -> str | None:
        if point["variant"] in ERLANG:
            return erlang.missing()
        if point["variant"] == "uvloop":
            return uvloop_missing()
        if point["variant"] == "native":
            return missing_tool("cc", "a C compiler builds the native ring")
        return None

    def prepare(self, point: Point, options: dict[str, str]) -> Case:
        variant, workers = point["variant"], point["workers"]
        plan = binding.plan(point["binding"], workers)
        cpus = len(binding.allowed_cpus())
        tally = Tally()
        meta: Metadata = {"perfgrid_binding_plan": binding.describe(plan),
                          "perfgrid_allowed_cpus": cpus}
        if variant in IN_LOOP or variant in ERLANG:
            rings, size, rounds = (int(options[k]) for k in ("rings", "size", "rounds"))
            meta.update({"perfgrid_rings": rings, "perfgrid_ring_members": size,
                         "perfgrid_rounds": rounds})
            per_loop = rings * size * rounds
        else:
            rounds = int(options["worker_rounds"])
            meta.update({"perfgrid_rings": 1, "perfgrid_ring_members": workers,
                         "perfgrid_rounds": rounds})
            per_loop = workers * rounds

        def observed() -> Metadata:
            return summarize(tally, cpus)

        if variant == "native":
            return Case(time=self._native_timer(options["binary"], plan, rounds, tally),
                        work_per_loop=per_loop, metadata=meta, observed=observed)
        if variant in ERLANG:
            vm = erlang.vm_for(point["binding"], workers)
            cmd = erlang.command("pg_ring", {"rings": rings, "size": size, "rounds": rounds},
                                 erlang.beam_dir(options), vm)
            meta.update({"perfgrid_vm_flags": vm.describe(), "perfgrid_otp": erlang.otp_release(),
                         "perfgrid_schedulers": vm.schedulers})
            timeout = float(options.get("erlang_timeout_s", erlang.DEFAULT_TIMEOUT_S))
            return Case(time=self._erlang_timer(cmd, vm, timeout, per_loop, tally),
                        work_per_loop=per_loop, metadata=meta, observed=observed)

        started = perf_counter()
        saved = sorted(os.sched_getaffinity(0))
        try:
            if variant in IN_LOOP:
                tally.cpus = binding.describe([binding.pin(plan[0])])
                ring: TaskRings | ThreadRing | PipeRing = TaskRings(variant, rings, size)
            else:
                ring = ThreadRing(plan) if variant == "thread" else PipeRing(plan)
                tally.cpus = binding.describe(ring.actual)
        except BaseException:
            os.sched_setaffinity(0, saved)
            raise
        tally.setup_s.append(perf_counter() - started)

        def member_usage() -> Usage:
            own = self_usage()
            return own + process_usage(ring.pids) if isinstance(ring, PipeRing) else own

        def time_loops(loops: int) -> float:
            before = member_usage()
            elapsed = ring.run(rounds * loops)
            tally.usage = tally.usage + (member_usage() - before)
            tally.seconds += elapsed
            tally.messages += per_loop * loops
            return elapsed

        def close() -> None:
            try:
                ring.close()
            finally:
                os.sched_setaffinity(0, saved)

        return Case(time=time_loops, work_per_loop=per_loop, metadata=meta, close=close,
                    observed=observed)

    @staticmethod
    def _native_timer(path: str, plan: list[list[int]], rounds: int,
                      tally: Tally) -> Callable[[int], float]:
        """The C ring as a timed function: one run of ``rounds x loops`` trips."""
        workers = len(plan)

        def time_loops(loops: int) -> float:
            report = lifetime.run_json(native_command(path, workers, rounds * loops, plan))
            if report["messages"] != workers * rounds * loops:
                raise RuntimeError(f"ring: the C ring passed {report['messages']} messages")
            tally.add_report(report, report["setup_seconds"], report["cpus"])
            return report["seconds"]

        return time_loops

    @staticmethod
    def _erlang_timer(cmd: list[str], vm: erlang.Vm, timeout: float, per_loop: int,
                      tally: Tally) -> Callable[[int], float]:
        """The Erlang rings as a timed function: one VM per loop, its own timing."""

        def time_loops(loops: int) -> float:
            total = 0.0
            for _ in range(loops):
                report = erlang.run(cmd, timeout, vm.cpus).report
                if report["messages"] != per_loop:
                    raise RuntimeError(f"ring: the Erlang rings passed {report['messages']} "
                                       f"messages, not {per_loop}")
                tally.add_report(report, report["setup_s"],
                                 binding.describe([vm.cpus]) if vm.cpus
                                 else report["scheduler_bindings"])
                total += report["seconds"]
            return total

        return time_loops


def summarize(tally: Tally, cpus: int) -> Metadata:
    """The seed's user/sys/idle split of the passing, context switches, set-up time."""
    if not tally.seconds:
        return {}
    usage = tally.usage
    busy = usage.user_s + usage.sys_s
    capacity = tally.seconds * cpus
    switches = usage.ctx_voluntary + usage.ctx_involuntary
    return {
        "perfgrid_user_s": usage.user_s,
        "perfgrid_sys_s": usage.sys_s,
        "perfgrid_sys_share": usage.sys_s / busy if busy else float("nan"),
        "perfgrid_user_pct": 100.0 * usage.user_s / capacity,
        "perfgrid_sys_pct": 100.0 * usage.sys_s / capacity,
        "perfgrid_idle_pct": max(0.0, 100.0 - 100.0 * busy / capacity),
        "perfgrid_ctx_voluntary": usage.ctx_voluntary,
        "perfgrid_ctx_involuntary": usage.ctx_involuntary,
        "perfgrid_ctx_per_message": switches / tally.messages if tally.messages else 0.0,
        "perfgrid_us_per_message": 1e6 * tally.seconds / tally.messages,
        "perfgrid_setup_s": sum(tally.setup_s) / len(tally.setup_s),
        "perfgrid_worker_cpus": tally.cpus,
    }


EXPERIMENT = Ring()
