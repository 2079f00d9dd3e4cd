"""The spawn experiment's chains: in this process, or in the lean fork runner.

Each unit starts the next one of its chain and ends; ``run()`` makes one pass
of every chain and returns how many spawns it made (the lean runner: its JSON
report of the pass). Set-up (threads pinned, the runner started) happens before
the clock; ``close()`` stops whatever is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pyperf import perf_counter

from perfgrid.kit import lifetime

TRUE = "/bin/true"
SPAWN_ENV = {"PATH": "/usr/bin:/bin"}
#: the fork and mp_fork chains' script (run by a bare interpreter: :class:`LeanRunner`)
FORK_RUNNER = Path(__file__).with_name("fork_runner.py")


def chain_lengths(total: int, chains: int) -> list[int]:
    """Units per chain: ``total`` split as evenly as possible over ``chains``."""
    if chains < 1 or total < chains:
        raise ValueError(f"spawn: need 1 <= chains <= total, got chains={chains}, total={total}")
    base, extra = divmod(total, chains)
    return [base + (1 if i < extra else 0) for i in range(chains)]


# --- the Python chains: each returns the number of spawns it made ---------------------


class TaskChains:
    """asyncio: each task creates the next task of its chain and returns."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths
        self.loop = asyncio.new_event_loop()

    def run(self, lengths: list[int] | None = None) -> int:
        """One pass of every chain (of ``lengths`` if given, e.g. a short warm-up)."""
        return self.loop.run_until_complete(self._all(lengths or self.lengths))

    async def _all(self, lengths: list[int]) -> int:
        loop = self.loop
        finished = loop.create_future()
        left = [len(lengths)]
        spawned = [0]

        def done(count: int) -> None:
            spawned[0] += count
            left[0] -= 1
            if not left[0]:
                finished.set_result(spawned[0])

        async def unit(remaining: int, count: int) -> None:
            if remaining > 1:
                loop.create_task(unit(remaining - 1, count + 1))
            else:
                done(count)

        for length in lengths:
            loop.create_task(unit(length, 1))
        return await finished

    def close(self) -> None:
        for task in asyncio.all_tasks(self.loop):
            task.cancel()
        self.loop.close()


class ThreadChains:
    """threading: each thread joins its predecessor, starts the next one and ends;
    the last one tells the parent, which joins it. A chain's first thread pins
    itself; the rest inherit its CPUs."""

    def __init__(self, lengths: list[int], cpu_plan: list[list[int]] | None) -> None:
        self.lengths = lengths
        self.plan = cpu_plan
        self.stopping = False
        self.cpus: list[list[int]] = [[] for _ in lengths]
        #: the newest thread of each chain, so close() can stop and join what is left
        self.heads: list[threading.Thread | None] = [None] * len(lengths)

    def run(self, lengths: list[int] | None = None) -> int:
        """One pass of every chain (of ``lengths`` if given, e.g. a short warm-up)."""
        lengths = lengths or self.lengths
        chains = len(lengths)
        lock = threading.Lock()
        all_done = threading.Event()
        lasts: list[threading.Thread] = []
        spawned = [0]
        heads = self.heads

        def unit(prev: threading.Thread | None, chain: int, remaining: int, count: int) -> None:
            if prev is None:
                if self.plan is not None:
                    os.sched_setaffinity(0, self.plan[chain])
                self.cpus[chain] = sorted(os.sched_getaffinity(0))
            else:
                prev.join()
            if remaining > 1 and not self.stopping:
                thread = threading.Thread(target=unit, daemon=True,
                                          args=(threading.current_thread(), chain,
                                                remaining - 1, count + 1))
                heads[chain] = thread
                thread.start()
                return
            with lock:
                lasts.append(threading.current_thread())
                spawned[0] += count
                if len(lasts) == chains:
                    all_done.set()

        for chain, length in enumerate(lengths):
            thread = threading.Thread(target=unit, args=(None, chain, length, 1), daemon=True)
            heads[chain] = thread
            thread.start()
        all_done.wait()
        for thread in lasts:
            thread.join()
        return spawned[0]

    def close(self) -> None:
        """Stop every chain at its next unit and join what is still running."""
        self.stopping = True
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            alive = [t for t in self.heads if t is not None and t.is_alive()]
            if not alive:
                return
            for thread in alive:
                thread.join(max(0.0, deadline - time.monotonic()))


class SpawnChains:
    """posix_spawn: /bin/true cannot start anything, so each chain is a thread
    (pinned per the plan) that spawns /bin/true and waits for it, serially."""

    def __init__(self, lengths: list[int], cpu_plan: list[list[int]] | None) -> None:
        self.lengths = lengths
        self.plan = cpu_plan
        self.stopping = False
        self.cpus: list[list[int]] = [[] for _ in lengths]
        self.threads: list[threading.Thread] = []

    def run(self, lengths: list[int] | None = None) -> int:
        """One pass of every chain (of ``lengths`` if given, e.g. a short warm-up)."""
        lengths = lengths or self.lengths
        chains = len(lengths)
        ready = threading.Barrier(chains + 1)
        counts = [0] * chains
        errors: list[str] = []

        def chain(index: int) -> None:
            if self.plan is not None:
                os.sched_setaffinity(0, self.plan[index])
            self.cpus[index] = sorted(os.sched_getaffinity(0))
            ready.wait()
            spawn, wait, argv, env = os.posix_spawn, os.waitpid, ["true"], SPAWN_ENV
            for _ in range(lengths[index]):
                if self.stopping:
                    return
                _, status = wait(spawn(TRUE, argv, env), 0)
                if status:
                    errors.append(f"/bin/true exited with status {status}")
                    return
                counts[index] += 1

        self.threads = [threading.Thread(target=chain, args=(i,), daemon=True)
                        for i in range(chains)]
        for thread in self.threads:
            thread.start()
        started = perf_counter()
        ready.wait()
        for thread in self.threads:
            thread.join()
        self.elapsed = perf_counter() - started
        if errors:
            raise RuntimeError(errors[0])
        return sum(counts)

    def close(self) -> None:
        self.stopping = True
        for thread in self.threads:
            thread.join(5)



class LeanRunner:
    """The harness side of the fork runner (:mod:`.fork_runner`): start it once, one pass
    per ``run``."""

    def __init__(self, variant: str, lengths: list[int], cpu_plan: list[list[int]] | None,
                 runner_cpus: list[int]) -> None:
        self.proc = subprocess.Popen(
            lifetime.command([sys.executable, "-I", "-S", str(FORK_RUNNER), variant,
                              json.dumps(lengths), json.dumps(cpu_plan),
                              json.dumps(runner_cpus)]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.cpus: list[list[int]] = []

    def run(self) -> dict[str, Any]:
        """One pass: the runner's JSON report."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"spawn runner ended (exit status {code}) before reporting")
        return json.loads(line)

    def close(self) -> None:
        """EOF tells the runner to stop its chains and exit; kill it if it does not."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
