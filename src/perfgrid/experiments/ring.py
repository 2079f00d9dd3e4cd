"""ring (seed E5 b): tokens passed around rings of tasks, threads or processes.

Stresses the cost of one wake-up: every message hands the CPU to the next
member. ``asyncio``/``uvloop``: ``rings`` rings of ``size`` tasks in one
event loop (the seed's 1000 rings of 100); ``thread``: one ring of
``workers`` threads; ``process_pipe`` and ``native`` (the same in C): one
ring of ``workers`` OS processes linked by pipes, where the binding decides
whether a wake-up stays on one CPU or crosses to another, and the user/sys
split shows where the time goes. ``erlang``: the seed's own runtime, ``rings``
rings of ``size`` Erlang processes (src/perfgrid/erlang/pg_ring.erl) on
``workers`` schedulers, bound per ``binding`` (config/README.md).
"""

from __future__ import annotations

import asyncio
import os
import queue
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil
from pyperf import perf_counter

from perfgrid import binding, erlang, lifetime
from perfgrid.eventloops import loop_factory, uvloop_missing
from perfgrid.experiments.base import Case, Experiment, Metadata, Point, missing_tool

if TYPE_CHECKING:
    from perfgrid.paths import Layout

VARIANTS = ("asyncio", "uvloop", "thread", "process_pipe", "native", "erlang")
#: rings of Erlang processes; ``workers`` is the VM's scheduler count
ERLANG = ("erlang",)
#: variants whose members are tasks of one event loop (one worker, one CPU at a time)
IN_LOOP = ("asyncio", "uvloop")
#: variants with one ring of ``workers`` threads or processes
OS_RING = ("thread", "process_pipe", "native")
NATIVE = ("native",)
#: most tasks an in-loop ring may hold (rings x size): about 1 KiB each
MAX_TASKS = 2_000_000
TOKEN = b"x"
#: seconds a member process gets to exit after its ring is closed
EXIT_GRACE_S = 5.0


@dataclass
class Usage:
    """CPU time and context switches spent by the ring's members."""

    user_s: float = 0.0
    sys_s: float = 0.0
    ctx_voluntary: int = 0
    ctx_involuntary: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.user_s + other.user_s, self.sys_s + other.sys_s,
                     self.ctx_voluntary + other.ctx_voluntary,
                     self.ctx_involuntary + other.ctx_involuntary)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.user_s - other.user_s, self.sys_s - other.sys_s,
                     self.ctx_voluntary - other.ctx_voluntary,
                     self.ctx_involuntary - other.ctx_involuntary)


def self_usage() -> Usage:
    """This process, all its threads."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return Usage(ru.ru_utime, ru.ru_stime, ru.ru_nvcsw, ru.ru_nivcsw)


def process_usage(pids: list[int]) -> Usage:
    """Live single-threaded processes, read with psutil."""
    total = Usage()
    for pid in pids:
        proc = psutil.Process(pid)
        cpu, ctx = proc.cpu_times(), proc.num_ctx_switches()
        total = total + Usage(cpu.user, cpu.system, ctx.voluntary, ctx.involuntary)
    return total


class TaskRings:
    """``rings`` rings of ``size`` tasks in one event loop, linked by asyncio queues.

    Member 0 of each ring is a driver started for each pass: it sends the
    token and waits for it ``rounds`` times; members 1..size-1 live as long
    as the loop and forward whatever arrives.
    """

    def __init__(self, variant: str, rings: int, size: int) -> None:
        if size < 2 or rings < 1:
            raise ValueError(f"ring: need rings >= 1 and size >= 2, got {rings} x {size}")
        self.rings, self.size = rings, size
        self.runner = asyncio.Runner(loop_factory=loop_factory(variant))
        self.inboxes: list[list[asyncio.Queue]] = []
        self.members: list[asyncio.Task] = []
        try:
            self.runner.run(self._build())
        except BaseException:
            self.close()
            raise

    async def _build(self) -> None:
        self.inboxes = [[asyncio.Queue() for _ in range(self.size)] for _ in range(self.rings)]
        for inboxes in self.inboxes:
            for j in range(1, self.size):
                nxt = inboxes[(j + 1) % self.size]
                self.members.append(asyncio.create_task(_member(inboxes[j], nxt)))
        await asyncio.sleep(0)  # every member now waits on its inbox
        await self._pass(1)  # and has passed a token once

    async def _pass(self, rounds: int) -> None:
        await asyncio.gather(*(_drive(inboxes[0], inboxes[1], rounds)
                               for inboxes in self.inboxes))

    def run(self, rounds: int) -> float:
        """Seconds to pass every ring's token ``rounds`` times around."""
        started = perf_counter()
        self.runner.run(self._pass(rounds))
        return perf_counter() - started

    def alive(self) -> int:
        """Members still running (0 once closed)."""
        return sum(not t.done() for t in self.members)

    def close(self) -> None:
        """Cancel every member and close the loop."""
        self.runner.close()


async def _member(inbox: asyncio.Queue, nxt: asyncio.Queue) -> None:
    get, put = inbox.get, nxt.put_nowait
    while True:
        put(await get())


async def _drive(inbox: asyncio.Queue, nxt: asyncio.Queue, rounds: int) -> None:
    get, put = inbox.get, nxt.put_nowait
    for _ in range(rounds):
        put(1)
        if await get() != 1:
            raise RuntimeError("ring: the token came back changed")


class ThreadRing:
    """One ring of threads linked by ``queue.Queue``; the calling thread is member 0."""

    def __init__(self, plan: list[list[int]]) -> None:
        if len(plan) < 2:
            raise ValueError(f"ring: a ring needs at least 2 members, got {len(plan)}")
        self.queues: list[queue.Queue] = [queue.Queue() for _ in plan]
        self.actual: list[list[int]] = [[] for _ in plan]
        self.saved = sorted(os.sched_getaffinity(0))
        self.actual[0] = binding.pin(plan[0])
        self.threads = [
            threading.Thread(target=self._member, args=(i, plan[i]), daemon=True,
                             name=f"ring-{i}")
            for i in range(1, len(plan))
        ]
        for thread in self.threads:
            thread.start()
        self.run(1)  # every member is pinned and waiting

    def _member(self, index: int, cpus: list[int]) -> None:
        self.actual[index] = binding.pin(cpus)
        inbox, nxt = self.queues[index], self.queues[(index + 1) % len(self.queues)]
        while True:
            token = inbox.get()
            nxt.put(token)
            if token is None:
                return

    def run(self, rounds: int) -> float:
        first, inbox = self.queues[1], self.queues[0]
        started = perf_counter()
        for _ in range(rounds):
            first.put(1)
            inbox.get()
        return perf_counter() - started

    def alive(self) -> int:
        return sum(t.is_alive() for t in self.threads)

    def close(self) -> None:
        """Send the stop token around, join every thread, restore this thread's CPUs."""
        self.queues[1].put(None)
        for thread in self.threads:
            thread.join(EXIT_GRACE_S)
        os.sched_setaffinity(0, self.saved)
        if self.alive():
            raise RuntimeError(f"ring: {self.alive()} thread members did not stop")


def _member_process(inbox: int, out: int, cpus: list[int]) -> None:
    """A forked member: keep only its two pipe ends (and stdio), pin itself, then
    pass each byte on until end of file, and exit without Python's clean-up."""
    try:
        low, high = sorted((inbox, out))
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, os.sysconf("SC_OPEN_MAX"))
        os.sched_setaffinity(0, cpus)
        read, write = os.read, os.write
        while token := read(inbox, 1):
            write(out, token)
        os._exit(0)
    finally:
        os._exit(3)


class PipeRing:
    """One ring of OS processes linked by ``os.pipe``; this process is member 0.

    Members are forked (set-up, untimed) and pin themselves. Closing this
    process's ends ends the ring: each member reads end of file and exits,
    closing the next pipe; stragglers are killed.
    """

    def __init__(self, plan: list[list[int]]) -> None:
        workers = len(plan)
        if workers < 2:
            raise ValueError(f"ring: a ring needs at least 2 members, got {workers}")
        self.saved = sorted(os.sched_getaffinity(0))
        self.pids: list[int] = []
        pipes = [os.pipe() for _ in range(workers)]  # pipes[i]: into member i
        self.inbox, self.out = pipes[0][0], pipes[1][1]
        try:
            for i in range(1, workers):
                pid = os.fork()
                if pid == 0:  # pragma: no cover - runs in the child
                    _member_process(pipes[i][0], pipes[(i + 1) % workers][1], plan[i])
                self.pids.append(pid)
        except BaseException:
            self.close()
            raise
        finally:
            for j, (r, w) in enumerate(pipes):
                if j != 0:
                    os.close(r)
                if j != 1:
                    os.close(w)
        try:
            self.actual = [binding.pin(plan[0])]
            self.run(1)  # every member is pinned and waiting
            self.actual += [sorted(os.sched_getaffinity(pid)) for pid in self.pids]
        except BaseException:
            self.close()
            raise

    def run(self, rounds: int) -> float:
        read, write, inbox, out = os.read, os.write, self.inbox, self.out
        started = perf_counter()
        for _ in range(rounds):
            write(out, TOKEN)
            if not read(inbox, 1):
                raise RuntimeError("ring: a member process left the ring")
        return perf_counter() - started

    def alive(self) -> int:
        return sum(psutil.pid_exists(pid) for pid in self.pids)

    def close(self) -> None:
        """Close the ring, reap every member (killing stragglers), restore CPUs."""
        for fd in (self.out, self.inbox):
            if fd >= 0:
                os.close(fd)
        self.out = self.inbox = -1
        deadline = time.monotonic() + EXIT_GRACE_S
        left = list(self.pids)
        while left:
            for pid in list(left):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    left.remove(pid)
            if left and time.monotonic() > deadline:
                for pid in left:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                left = []
            elif left:
                time.sleep(0.005)
        self.pids = []
        os.sched_setaffinity(0, self.saved)


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


class Ring(Experiment):
    name = "ring"
    axes = ("variant", "binding", "workers")
    int_axes = frozenset({"workers"})
    #: perfgrid.analysis.ring's claims compare bindings, CPU shares and the best ring
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
    #: no fallback: a row is compared with the C ring at its own workers/binding only
    fallback_axes = ("workers", "binding")

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
            tally.seconds += report["seconds"]
            tally.messages += report["messages"]
            tally.usage = tally.usage + Usage(report["user_s"], report["sys_s"],
                                              report["ctx_voluntary"],
                                              report["ctx_involuntary"])
            tally.setup_s.append(report["setup_seconds"])
            tally.cpus = report["cpus"]
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
                tally.seconds += report["seconds"]
                tally.messages += report["messages"]
                tally.usage = tally.usage + Usage(report["user_s"], report["sys_s"],
                                                  report["ctx_voluntary"],
                                                  report["ctx_involuntary"])
                tally.setup_s.append(report["setup_s"])
                tally.cpus = (binding.describe([vm.cpus]) if vm.cpus
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
