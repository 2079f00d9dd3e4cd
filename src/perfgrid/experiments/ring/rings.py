"""The ring experiment's Python rings: tasks of one event loop, threads, or processes.

Each ring is built (and every member pinned and waiting) before the clock starts;
``run(rounds)`` passes the token ``rounds`` times around and returns the seconds it
took; ``close()`` stops every member and restores this thread's CPUs.
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import threading
import time

import psutil
from pyperf import perf_counter

from perfgrid.kit import binding
from perfgrid.kit.eventloops import loop_factory

TOKEN = b"x"
#: seconds a member process gets to exit after its ring is closed
EXIT_GRACE_S = 5.0


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
