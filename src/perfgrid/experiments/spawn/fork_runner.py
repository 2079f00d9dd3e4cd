"""The spawn experiment's fork and mp_fork chains, a script run in a fresh interpreter.

It runs as ``python -I -S fork_runner.py ...`` and imports only the standard
library (nothing from perfgrid), because fork's cost grows with the size of the
process it copies: the pyperf worker holds pandas (~70 MB), a bare interpreter
~10 MB. :class:`perfgrid.experiments.spawn.chains.LeanRunner` is its harness side.

argv: variant (fork | mp_fork), chain lengths (JSON), each chain's CPU list
or null (JSON), this runner's CPU list (JSON). Each line ``run`` on stdin
runs one pass and answers one JSON line; EOF ends the runner.

fork: each unit forks the next one of its chain and exits at once. The
runner is a child subreaper, so every unit, orphaned or not, is reaped
here; a pass ends when all of them are. A unit goes on only while the
shared stop flag is clear and its parent is its predecessor or the
runner, so no unit outlives a runner that died.

mp_fork: a multiprocessing child continues inside its parent's
``Process.start()``, so a chain of units that start each other nests a
dozen Python frames per generation and grows with the chain (a 3,000-unit
chain ran at a third of the rate of a 300-unit one). Instead each chain
has a driver process (forked and pinned before the clock starts, released
together) that starts a unit, which ends at once, and joins it: the
create+teardown that multiprocessing users pay, serial per chain. Drivers
are single-threaded processes, not threads, because forking from a
threaded process can deadlock the child on a lock another thread held.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import multiprocessing
import os
import resource
import signal
import sys
import time


def main() -> None:
    """Run the chains of ``sys.argv``: one pass per ``run`` line on stdin, until EOF."""
    libc = ctypes.CDLL(None, use_errno=True)  # it dies with the harness: lifetime.command
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    variant = sys.argv[1]
    lengths = json.loads(sys.argv[2])
    plan = json.loads(sys.argv[3])
    os.sched_setaffinity(0, json.loads(sys.argv[4]))
    runner = os.getpid()
    flag = mmap.mmap(-1, mmap.PAGESIZE)  # shared with every unit: nonzero = stop
    context = multiprocessing.get_context("fork")

    def fork_chain(length: int, cpus: list[int] | None) -> None:
        """Run by a chain's first unit: fork the next unit, exit. Never returns."""
        code = 0
        try:
            if cpus is not None:
                os.sched_setaffinity(0, cpus)
            pred = runner
            while length > 1:
                if flag[0] or os.getppid() not in (pred, runner):
                    break
                pred = os.getpid()
                if os.fork():
                    break
                length -= 1
        except BaseException:
            code = 2
        finally:
            os._exit(code)

    def mp_driver(length: int, cpus: list[int] | None, ready_w: int, start_r: int) -> None:
        """A chain's driver process: start a multiprocessing unit that ends at once,
        join it, repeat. Never returns; exit status 0 when all ``length`` ran."""
        code = 0
        try:
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # die with the runner
            if cpus is not None:
                os.sched_setaffinity(0, cpus)
            os.write(ready_w, b"r")
            os.read(start_r, 1)  # EOF: the runner released every chain
            for _ in range(length):
                if flag[0] or os.getppid() != runner:
                    code = 3
                    break
                proc = context.Process(target=int)
                proc.start()
                proc.join()
                if proc.exitcode:
                    code = 2
                    break
                proc.close()
        except BaseException:
            code = 2
        finally:
            os._exit(code)

    def reap(total: int) -> int:
        """Reap ``total`` units; return how many failed or never started."""
        bad = 0
        for reaped in range(total):
            try:
                _, status = os.waitpid(-1, 0)
            except ChildProcessError:
                return bad + total - reaped  # a chain broke: fewer units than planned
            bad += status != 0
        return bad

    def peak_rss_kb() -> int:
        """VmHWM: unlike ru_maxrss it starts afresh at exec, not at the fork before it."""
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def one_pass(lengths: list[int]) -> dict:
        total = sum(lengths)
        bad = 0
        before = os.times()
        if variant == "mp_fork":
            ready_r, ready_w = os.pipe()
            start_r, start_w = os.pipe()
            drivers = {}
            for chain, length in enumerate(lengths):
                pid = os.fork()
                if pid == 0:
                    os.close(ready_r)
                    os.close(start_w)
                    mp_driver(length, plan[chain] if plan is not None else None, ready_w,
                              start_r)
                drivers[pid] = length
            os.close(ready_w)
            os.close(start_r)
            got = 0
            while got < len(lengths) and (chunk := os.read(ready_r, 4096)):
                got += len(chunk)
            os.close(ready_r)
            started = time.perf_counter()
            os.close(start_w)  # release
            for pid, length in drivers.items():
                bad += length if os.waitpid(pid, 0)[1] else 0
        else:
            started = time.perf_counter()
            for chain, length in enumerate(lengths):
                if os.fork() == 0:
                    fork_chain(length, plan[chain] if plan is not None else None)
            bad = reap(total)
        elapsed = time.perf_counter() - started
        after = os.times()
        return {
            "spawns": total - bad, "elapsed_s": elapsed,
            "user_s": after.user - before.user + after.children_user - before.children_user,
            "sys_s": after.system - before.system + after.children_system
            - before.children_system,
            "maxrss_kb": peak_rss_kb(),
            "children_maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        }

    try:
        # warm up (untimed) with a tenth of the spawns: page tables, allocator, and
        # multiprocessing's lazy imports, which every forked driver would pay again
        warm = max(len(lengths), sum(lengths) // 10)
        one_pass([warm // len(lengths) + (i < warm % len(lengths)) for i in range(len(lengths))])
        for line in sys.stdin:
            if line.strip() != "run":
                break
            print(json.dumps(one_pass(lengths)), flush=True)
    finally:
        flag[0] = 1
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if not os.waitpid(-1, os.WNOHANG)[0]:
                    time.sleep(0.005)
            except ChildProcessError:
                break
        else:  # units still running after 5 s: kill them
            for task in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{task}/children") as handle:
                    for pid in handle.read().split():
                        os.kill(int(pid), signal.SIGKILL)
            try:
                while os.waitpid(-1, 0)[0]:
                    pass
            except ChildProcessError:
                pass


if __name__ == "__main__":
    main()
