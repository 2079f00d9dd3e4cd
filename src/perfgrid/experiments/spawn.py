"""spawn (seed E1): how fast a runtime creates and tears down its units of concurrency.

The seed's serial chain: ``total`` spawns split into ``chains`` chains that
run at once; each unit starts the next one of its chain and ends, and the
last one tells the parent. Stresses the fixed cost of one create+destroy:
asyncio tasks, threads, forked processes, multiprocessing, posix_spawn, the
same primitives in C, and Erlang processes (the seed's own runtime,
src/perfgrid/erlang/pg_spawn.erl).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import resource
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyperf import perf_counter

from perfgrid import binding, erlang, lifetime
from perfgrid.experiments.base import Case, Experiment, Metadata, Point, missing_tool

if TYPE_CHECKING:  # pandas stays out of the workers that fork
    import pandas as pd

PYTHON = ("asyncio_task", "thread", "fork", "mp_fork", "posix_spawn")
NATIVE = ("native_pthread", "native_fork", "native_posix_spawn")
#: Erlang processes; single is one scheduler (+S 1), the others one scheduler per CPU
ERLANG = ("erlang",)
PRIMITIVES = PYTHON + NATIVE + ERLANG
#: the native primitive each Python one is compared with (ratio_to_native)
NATIVE_OF = {"thread": "native_pthread", "fork": "native_fork", "mp_fork": "native_fork",
             "posix_spawn": "native_posix_spawn"}
TRUE = "/bin/true"
SPAWN_ENV = {"PATH": "/usr/bin:/bin"}


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


def lean_runner_main() -> None:
    """The fork and mp_fork chains, run in a fresh interpreter that loads only the
    standard library (``python -I -S -c`` with this function's source), because
    fork's cost grows with the size of the process it copies: the pyperf worker
    holds pandas (~70 MB), a bare interpreter ~10 MB.

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
    # the runner's source is this function alone: it imports what it uses itself
    import ctypes
    import json
    import mmap
    import multiprocessing
    import os
    import resource
    import signal
    import sys
    import time

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


class LeanRunner:
    """The harness side of :func:`lean_runner_main`: start it once, one pass per ``run``."""

    def __init__(self, variant: str, lengths: list[int], cpu_plan: list[list[int]] | None,
                 runner_cpus: list[int]) -> None:
        source = textwrap.dedent(inspect.getsource(lean_runner_main)) + "\nlean_runner_main()\n"
        self.proc = subprocess.Popen(
            lifetime.command([sys.executable, "-I", "-S", "-c", source, variant,
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


# --- the experiment ---------------------------------------------------------------------


class Tally:
    """What the passes observed, summed: spawns, CPU time of this process and its
    reaped children during the passes, peak RSS."""

    def __init__(self) -> None:
        self.spawns = 0
        self.user_s = 0.0
        self.sys_s = 0.0
        self.peak_rss = 0
        self.children_peak_rss = 0
        self.cpus = ""

    def metadata(self) -> Metadata:
        cpu = self.user_s + self.sys_s
        meta: Metadata = {
            "perfgrid_spawns": self.spawns,
            "perfgrid_user_s": round(self.user_s, 6),
            "perfgrid_sys_s": round(self.sys_s, 6),
            "perfgrid_peak_rss_bytes": self.peak_rss,
            "perfgrid_children_peak_rss_bytes": self.children_peak_rss,
        }
        if self.cpus:
            meta["perfgrid_chain_cpus"] = self.cpus
        if cpu > 0:
            meta["perfgrid_sys_share"] = round(self.sys_s / cpu, 4)
        if self.spawns:
            meta["perfgrid_cpu_us_per_spawn"] = cpu / self.spawns * 1e6
        return meta


class Spawn(Experiment):
    name = "spawn"
    axes = ("variant", "binding", "chains", "total")
    int_axes = frozenset({"chains", "total"})
    #: perfgrid.analysis.spawn's claims: every 1-chain point (bindings, ports, Erlang),
    #: and asyncio tasks in 100 chains against 1, unbound
    claim_points = ({"chains": 1}, {"variant": "asyncio_task", "binding": "none", "chains": 100})
    work_unit = "spawns"
    rate_unit = "spawns/s"
    native_variants = NATIVE
    erlang_variants = ERLANG
    native_program = "spawn"
    erlang_module = "pg_spawn"
    reference_variants = NATIVE

    def points(self, section: dict[str, Any], config: dict[str, Any]) -> list[Point]:
        primitives, totals = section["primitives"], section["totals"]
        unknown = [p for p in [*primitives, *totals] if p not in PRIMITIVES]
        if unknown:
            raise ValueError(
                f"spawn.primitives/totals: {unknown} not among {', '.join(PRIMITIVES)}")
        out = []
        for primitive in primitives:
            total = totals.get(primitive)
            if total is None or total < 1:
                raise ValueError(f"spawn.totals.{primitive}: needs a count of at least 1")
            lists = {**section, **(section.get("erlang") or {})} if primitive in ERLANG else section
            for chains in lists["chains"]:
                if chains < 1 or chains > total:
                    raise ValueError(f"spawn.chains: {chains} must lie in 1..spawn.totals."
                                     f"{primitive} ({total})")
                out += [{"variant": primitive, "binding": b, "chains": chains, "total": total}
                        for b in lists["bindings"]]
        return self.keep_runtimes(out, section)

    def unavailable(self, point: Point) -> str | None:
        variant = point["variant"]
        if variant in ERLANG:
            return erlang.missing()
        if variant in NATIVE:
            missing = missing_tool("cc", "a C compiler builds the native spawn program")
            if missing:
                return missing
        if variant.endswith("posix_spawn") and not os.access(TRUE, os.X_OK):
            return f"{TRUE} not found (coreutils)"
        return None

    def ratio_to_native(self, table: pd.DataFrame) -> pd.Series:
        """A Python row over the native row of the same primitive, binding and chains."""
        import pandas as pd

        ratio = pd.Series(float("nan"), index=table.index)
        for idx, row in table.iterrows():
            native = row["variant"] if row["variant"] in NATIVE else NATIVE_OF.get(row["variant"])
            if native is None:
                continue
            ref = table[(table["variant"] == native) & (table["binding"] == row["binding"])
                        & (table["chains"] == row["chains"])]
            if not ref.empty:
                ratio[idx] = row["rate"] / ref["rate"].max()
        return ratio

    def prepare(self, point: Point, options: dict[str, str]) -> Case:
        variant, chains, total = point["variant"], point["chains"], point["total"]
        if variant not in PRIMITIVES:
            raise ValueError(f"variant: {variant!r} is not one of {', '.join(PRIMITIVES)}")
        lengths = chain_lengths(total, chains)
        plan = binding.plan(point["binding"], chains)
        runner_cpus = sorted({c for cpus in plan for c in cpus})
        chain_plan = None if point["binding"] == "none" else plan
        meta: Metadata = {"perfgrid_binding_plan": _short_plan(plan),
                          "perfgrid_runner_cpus": ",".join(map(str, runner_cpus))}
        tally = Tally()
        binary = options.get("binary")
        if variant in NATIVE and (not binary or not os.access(binary, os.X_OK)):
            raise FileNotFoundError(f"spawn native: --option binary=PATH needed, got {binary!r}")

        original = sorted(os.sched_getaffinity(0))
        closers: list[Callable[[], None]] = [lambda: os.sched_setaffinity(0, original)]

        def close() -> None:
            for closer in reversed(closers):
                closer()

        try:
            if variant in ERLANG:
                vm = erlang.vm_for(point["binding"])
                cmd = erlang.command("pg_spawn", {"total": total, "chains": chains},
                                     erlang.beam_dir(options), vm)
                meta.update({"perfgrid_binding_plan": vm.describe(),
                             "perfgrid_runner_cpus": ",".join(
                                 map(str, vm.cpus or binding.allowed_cpus())),
                             "perfgrid_vm_flags": vm.describe(),
                             "perfgrid_otp": erlang.otp_release(),
                             "perfgrid_schedulers": vm.schedulers})
                time_loops = _report_timer(lambda: _run_erlang(cmd, vm, tally), total, tally)
            elif variant in NATIVE:
                cmd = [str(binary), variant.removeprefix("native_"), str(chains), str(total),
                       binding.describe(plan), ",".join(map(str, runner_cpus))]
                meta["perfgrid_command"] = " ".join([*cmd[:4], "PLAN", cmd[5]])
                time_loops = _report_timer(lambda: lifetime.run_json(cmd), total, tally)
            elif variant in ("fork", "mp_fork"):
                runner = LeanRunner(variant, lengths, chain_plan, runner_cpus)
                closers.append(runner.close)
                time_loops = _report_timer(runner.run, total, tally)
            else:
                os.sched_setaffinity(0, runner_cpus)
                if variant == "asyncio_task":
                    if chain_plan is not None:  # one thread runs every chain: pin it as one worker
                        os.sched_setaffinity(0, plan[0])
                    chains_obj: Any = TaskChains(lengths)
                elif variant == "thread":
                    chains_obj = ThreadChains(lengths, chain_plan)
                else:
                    chains_obj = SpawnChains(lengths, chain_plan)
                closers.append(chains_obj.close)
                # warm allocators, stack caches and the loop with a tenth of the spawns, so
                # that no pyperf warm-up value (a whole pass) is needed
                chains_obj.run(chain_lengths(max(chains, total // 10), chains))
                time_loops = _in_process_timer(chains_obj, total, tally)
        except BaseException:
            close()
            raise

        def observed() -> Metadata:
            if variant in PYTHON and variant not in ("fork", "mp_fork"):
                tally.peak_rss = _peak_rss_bytes()
                tally.children_peak_rss = resource.getrusage(
                    resource.RUSAGE_CHILDREN).ru_maxrss * 1024
                cpus = getattr(chains_obj, "cpus", None)
                tally.cpus = _short_plan(cpus) if cpus and all(cpus) else ",".join(
                    map(str, sorted(os.sched_getaffinity(0))))
            return tally.metadata()

        return Case(time=time_loops, work_per_loop=total, metadata=meta, close=close,
                    observed=observed)


def _in_process_timer(chains_obj: Any, total: int, tally: Tally) -> Callable[[int], float]:
    """``time(loops)`` for chains run in this process (asyncio, threads, posix_spawn)."""

    def time_loops(loops: int) -> float:
        elapsed = 0.0
        for _ in range(loops):
            before = os.times()
            started = perf_counter()
            done = chains_obj.run()
            seconds = perf_counter() - started
            after = os.times()
            # posix_spawn: from the release of its ready chain threads
            seconds = getattr(chains_obj, "elapsed", seconds)
            if done != total:
                raise RuntimeError(f"spawn: {done} of {total} spawns happened")
            tally.spawns += done
            tally.user_s += after.user - before.user + after.children_user - before.children_user
            tally.sys_s += (after.system - before.system + after.children_system
                            - before.children_system)
            elapsed += seconds
        return elapsed

    return time_loops


def _report_timer(one_pass: Callable[[], dict[str, Any]], total: int,
                  tally: Tally) -> Callable[[int], float]:
    """``time(loops)`` for chains run by another program that reports each pass in JSON
    (the lean Python runner, the native program): its own measured seconds."""

    def time_loops(loops: int) -> float:
        elapsed = 0.0
        for _ in range(loops):
            report = one_pass()
            if report["spawns"] != total:
                raise RuntimeError(f"spawn: {report['spawns']} of {total} spawns happened")
            tally.spawns += report["spawns"]
            tally.user_s += report["user_s"]
            tally.sys_s += report["sys_s"]
            tally.peak_rss = max(tally.peak_rss, report["maxrss_kb"] * 1024)
            tally.children_peak_rss = max(tally.children_peak_rss,
                                          report["children_maxrss_kb"] * 1024)
            elapsed += float(report["elapsed_s"])
        return elapsed

    return time_loops


def _run_erlang(cmd: list[str], vm: erlang.Vm, tally: Tally) -> dict[str, Any]:
    """Run the Erlang chains once (a fresh VM); their report in the shape of the others'.

    CPU time is the VM's own over the timed pass (its threads, from /proc);
    peak RSS the VM process's (wait4).
    """
    result = erlang.run(cmd, cpus=vm.cpus)
    report = result.report
    tally.cpus = (binding.describe([vm.cpus]) if vm.cpus
                  else f"schedulers {report['scheduler_bindings']}")
    return {"spawns": report["spawns"], "elapsed_s": report["seconds"],
            "user_s": report["user_s"], "sys_s": report["sys_s"],
            "maxrss_kb": int(result.maxrss_mib * 1024), "children_maxrss_kb": 0}


def _peak_rss_bytes() -> int:
    """This process's VmHWM: unlike ru_maxrss it starts afresh at exec."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _short_plan(cpu_lists: list[list[int]]) -> str:
    """A plan's text form, shortened when it repeats (100 chains on 2 CPUs)."""
    text = binding.describe(cpu_lists)
    if len(text) <= 120:
        return text
    return f"{binding.describe(cpu_lists[:8])}|... ({len(cpu_lists)} chains)"


EXPERIMENT = Spawn()
