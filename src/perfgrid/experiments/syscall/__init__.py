"""syscall (seed E3): how the rate of a cheap system call scales with pinned workers.

Each worker process calls one function in a tight loop: ``getuid`` and
``getppid`` enter the kernel, ``clock_gettime`` is served from the vDSO
without a syscall. Bound workers should scale linearly with the CPUs they
own; workers beyond the CPUs can only share them.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import time
from collections.abc import Callable, Hashable
from typing import Any

import psutil
from pyperf import perf_counter

from perfgrid.experiments.base import Case, Experiment, Metadata, NoisePair, Point, missing_tool
from perfgrid.kit import binding, lifetime

VARIANTS = ("python", "native", "erlang")
#: why the erlang points are skipped: the seed patched its VM to expose getuid
ERLANG_NO_GETUID = ("Erlang has no BIF that makes a bare system call such as getuid() (the "
                    "seed patched R13B02 to add one); perfgrid builds no NIF for it")
CALLS = ("getuid", "getppid", "clock_gettime")
#: calls per worker in one pyperf inner loop: the Python loop body is this many
#: calls written out, so the loop's own cost is spread over them
UNROLL = 100
#: rounds of an untimed first pass in prepare(), so no pyperf warm-up value is needed
WARM_ROUNDS = 200
_DONE = struct.Struct("<qqd")  # worker index, rounds done, seconds of its own loop
_START = struct.Struct("<q")  # rounds to run; 0 tells the worker to exit


def python_function(call: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The Python function that makes ``call``, and its arguments."""
    if call == "getuid":
        return os.getuid, ()
    if call == "getppid":
        return os.getppid, ()
    if call == "clock_gettime":
        return time.clock_gettime, (time.CLOCK_MONOTONIC,)
    raise ValueError(f"call: {call!r} is not one of {', '.join(CALLS)}")


def unrolled_loop(call: str, unroll: int = UNROLL) -> Callable[[int], None]:
    """``run(rounds)``: ``rounds`` times, ``unroll`` calls written out one after another.

    The body is generated (as ``timeit`` does) so that the loop costs one
    iteration per ``unroll`` calls, not one per call.
    """
    fn, args = python_function(call)
    arg_names = ", ".join(f"a{i}" for i in range(len(args)))
    body = "\n".join([f"        f({arg_names})"] * unroll)
    params = ", ".join(["f", *[f"a{i}" for i in range(len(args))]])
    source = f"def run(rounds, {params}):\n    for _ in range(rounds):\n{body}\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<unrolled {call}>", "exec"), namespace)
    inner = namespace["run"]

    def run(rounds: int) -> None:
        inner(rounds, fn, *args)

    return run


class Workers:
    """Worker processes forked and pinned once, released together for each pass.

    Each worker owns a start pipe; the parent writes the number of rounds to
    every one, and each worker reports (rounds, its own loop seconds) on a
    shared done pipe. A pass lasts from the first write to the last report.
    """

    def __init__(self, call: str, cpu_plan: list[list[int]], pin: bool) -> None:
        self.run = unrolled_loop(call)
        self.pids: list[int] = []
        self.starts: list[int] = []
        self.rounds = [0] * len(cpu_plan)
        self.busy_s = [0.0] * len(cpu_plan)
        self.done_r, done_w = os.pipe()
        parent = os.getpid()
        try:
            for index, cpus in enumerate(cpu_plan):
                start_r, start_w = os.pipe()
                pid = os.fork()
                if pid == 0:  # the worker: never returns
                    os.close(start_w)
                    for fd in self.starts:
                        os.close(fd)
                    os.close(self.done_r)
                    self._worker(index, cpus if pin else None, parent, start_r, done_w)
                os.close(start_r)
                self.pids.append(pid)
                self.starts.append(start_w)
        except BaseException:
            os.close(done_w)
            self.close()
            raise
        os.close(done_w)
        self._buffer = b""
        try:
            self._collect(len(self.pids))  # each worker reports once it is pinned
        except BaseException:
            self.close()
            raise
        self.cpus = [sorted(os.sched_getaffinity(pid)) for pid in self.pids]
        self.processes = [psutil.Process(pid) for pid in self.pids]

    def _worker(self, index: int, cpus: list[int] | None, parent: int, start_r: int,
                done_w: int) -> None:
        code = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            lifetime.die_with_parent(parent)
            if cpus is not None:
                binding.pin(cpus)
            os.write(done_w, _DONE.pack(index, 0, 0.0))
            run = self.run
            while True:
                data = _read_exact(start_r, _START.size)
                if not data:
                    break
                (rounds,) = _START.unpack(data)
                if rounds <= 0:
                    break
                started = perf_counter()
                run(rounds)
                elapsed = perf_counter() - started
                os.write(done_w, _DONE.pack(index, rounds, elapsed))
        except BaseException:
            code = 1
        finally:
            os._exit(code)

    def pass_seconds(self, rounds: int) -> float:
        """Release every worker for ``rounds`` rounds; seconds until the last one is done."""
        message = _START.pack(rounds)
        started = perf_counter()
        try:
            for fd in self.starts:
                os.write(fd, message)
        except BrokenPipeError:
            self._check_alive()
            raise RuntimeError("a syscall worker ended before its pass") from None
        self._collect(len(self.pids))
        return perf_counter() - started

    def _collect(self, count: int) -> None:
        """Read ``count`` reports from the done pipe, adding each worker's rounds and time."""
        while count:
            ready, _, _ = select.select([self.done_r], [], [], 1.0)
            if not ready:
                self._check_alive()
                continue
            chunk = os.read(self.done_r, 65536)
            if not chunk:
                raise RuntimeError("syscall workers all ended before reporting")
            self._buffer += chunk
            while count and len(self._buffer) >= _DONE.size:
                index, done, busy = _DONE.unpack_from(self._buffer)
                self._buffer = self._buffer[_DONE.size:]
                self.rounds[index] += done
                self.busy_s[index] += busy
                count -= 1

    def _check_alive(self) -> None:
        for pid in self.pids:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got:
                self.pids.remove(pid)
                raise RuntimeError(f"syscall worker {pid} died (status {status})")

    def cpu_times(self) -> tuple[float, float]:
        """(user, sys) seconds the workers have received so far."""
        user = system = 0.0
        for proc in self.processes:
            times = proc.cpu_times()
            user += times.user
            system += times.system
        return user, system

    def close(self) -> None:
        """Tell every worker to exit, then reap it (killing any that lingers)."""
        for fd in self.starts:
            with contextlib.suppress(OSError):
                os.close(fd)  # EOF: the worker exits
        self.starts = []
        _reap(self.pids, grace_s=2.0)
        self.pids = []
        with contextlib.suppress(OSError):
            os.close(self.done_r)


def _read_exact(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def _reap(pids: list[int], grace_s: float) -> None:
    """Wait for ``pids`` to exit; SIGKILL those still running after ``grace_s``."""
    deadline = time.monotonic() + grace_s
    waiting = list(pids)
    while waiting:
        for pid in list(waiting):
            try:
                got, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                got = pid
            if got:
                waiting.remove(pid)
        if not waiting:
            return
        if time.monotonic() > deadline:
            for pid in waiting:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for pid in waiting:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            return
        time.sleep(0.01)


def native_command(binary: str, call: str, calls_per_worker: int,
                   cpu_plan: list[list[int]]) -> list[str]:
    """The native program's command line for one pass."""
    return [binary, call, str(calls_per_worker), binding.describe(cpu_plan)]


class Tally:
    """What the passes observed, summed: calls, CPU time, each worker's own loop time."""

    def __init__(self, workers: int) -> None:
        self.calls = [0] * workers
        self.busy_s = [0.0] * workers
        self.user_s = 0.0
        self.sys_s = 0.0
        self.cpus = ""

    def metadata(self) -> Metadata:
        total = sum(self.calls)
        cpu = self.user_s + self.sys_s
        rates = [c / b for c, b in zip(self.calls, self.busy_s, strict=True) if b > 0]
        meta: Metadata = {
            "perfgrid_calls": total,
            "perfgrid_user_s": round(self.user_s, 6),
            "perfgrid_sys_s": round(self.sys_s, 6),
            "perfgrid_worker_cpus": self.cpus,
        }
        if cpu > 0:
            meta["perfgrid_sys_share"] = round(self.sys_s / cpu, 4)
            meta["perfgrid_calls_per_cpu_s"] = total / cpu
        if rates:
            meta["perfgrid_rate_per_worker"] = sum(rates) / len(rates)
            meta["perfgrid_rate_per_worker_min"] = min(rates)
            meta["perfgrid_rate_per_worker_max"] = max(rates)
        return meta


class Syscall(Experiment):
    name = "syscall"
    report_position = 30
    axes = ("variant", "call", "binding", "workers")
    int_axes = frozenset({"workers"})
    #: analysis.py's claims: bound getuid workers (scaling, contention), and
    #: one native worker per call (the vDSO)
    claim_points = ({"call": "getuid", "binding": ["spread", "compact"]},
                    {"variant": "native", "workers": 1})
    #: counted (perfgrid.measure.counters): the claim points, and unbound getuid beside the bound
    counter_points = (*claim_points, {"call": "getuid", "binding": "none"})
    #: the noise profile's pair: one Python and one C worker calling getuid on one CPU,
    #: 5000 loops of 100 calls a value (as config/config.yaml measures them)
    noise_pair = NoisePair(
        "syscall getuid", "Python vs C getuid, 1 worker, binding single",
        {"variant": "python", "call": "getuid", "binding": "single", "workers": 1},
        {"variant": "native", "call": "getuid", "binding": "single", "workers": 1}, 5000)
    work_unit = "calls"
    rate_unit = "calls/s"
    native_variants = ("native",)
    erlang_variants = ("erlang",)
    native_program = "syscall"
    reference_variants = ("native",)
    reference_axes = ("call", "binding", "workers")
    fallback_axes = ("call",)

    def claim_group(self, point: Point) -> Hashable | None:
        """One variant's worker counts at one binding run back to back: its scaling
        claims compare them."""
        return point["variant"], point["call"], point["binding"]

    def points(self, section: dict[str, Any], config: dict[str, Any]) -> list[Point]:
        for key, known in (("variants", VARIANTS), ("calls", CALLS)):
            unknown = [v for v in section[key] if v not in known]
            if unknown:
                raise ValueError(f"syscall.{key}: {unknown} not among {', '.join(known)}")
        bad = [w for w in section["workers"] if w < 1]
        if bad:
            raise ValueError(f"syscall.workers: {bad}: each must be at least 1")
        out = [{"variant": v, "call": c, "binding": b, "workers": w}
               for v in section["variants"] if v != "erlang" for c in section["calls"]
               for b in section["bindings"] for w in section["workers"]]
        if "erlang" in section["variants"]:  # always skipped: one point records why
            bind = "compact" if "compact" in section["bindings"] else section["bindings"][0]
            out.append({"variant": "erlang", "call": "getuid", "binding": bind,
                        "workers": max(section["workers"])})
        return self.keep_runtimes(out, section)

    def unavailable(self, point: Point) -> str | None:
        if point["variant"] == "erlang":
            return ERLANG_NO_GETUID
        if point["variant"] == "native":
            return missing_tool("cc", "a C compiler builds the native syscall program")
        return None

    def prepare(self, point: Point, options: dict[str, str]) -> Case:
        call, workers, bind = point["call"], point["workers"], point["binding"]
        if call not in CALLS:
            raise ValueError(f"call: {call!r} is not one of {', '.join(CALLS)}")
        if point["variant"] == "erlang":
            raise RuntimeError(f"syscall: {ERLANG_NO_GETUID}")
        plan = binding.plan(bind, workers)
        meta: Metadata = {"perfgrid_binding_plan": binding.describe(plan),
                          "perfgrid_unroll": UNROLL}
        tally = Tally(workers)

        if point["variant"] == "native":
            binary = options.get("binary")
            if not binary or not os.access(binary, os.X_OK):
                raise FileNotFoundError(
                    f"syscall native: --option binary=PATH needed, got {binary!r}")
            meta["perfgrid_command"] = " ".join(native_command(binary, call, UNROLL, plan))

            def time_loops(loops: int) -> float:
                report = lifetime.run_json(native_command(binary, call, loops * UNROLL, plan))
                for i, busy in enumerate(report["worker_elapsed_s"]):
                    tally.calls[i] += report["calls_per_worker"]
                    tally.busy_s[i] += busy
                tally.user_s += report["user_s"]
                tally.sys_s += report["sys_s"]
                tally.cpus = report["worker_cpus"]
                return float(report["elapsed_s"])

            return Case(time=time_loops, work_per_loop=workers, metadata=meta,
                        observed=tally.metadata, inner_loops=UNROLL)

        pool = Workers(call, plan, pin=bind != "none")
        try:
            pool.pass_seconds(WARM_ROUNDS)  # untimed: fault in the loop's code and pages
        except BaseException:
            pool.close()
            raise
        tally.cpus = binding.describe(pool.cpus)

        def time_python(loops: int) -> float:
            return pool.pass_seconds(loops)

        def observed() -> Metadata:
            tally.calls = [r * UNROLL for r in pool.rounds]
            tally.busy_s = list(pool.busy_s)
            tally.user_s, tally.sys_s = pool.cpu_times()
            return tally.metadata()

        return Case(time=time_python, work_per_loop=workers, metadata=meta, close=pool.close,
                    observed=observed, inner_loops=UNROLL)


EXPERIMENT = Syscall()
