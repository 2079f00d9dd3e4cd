"""spawn (seed E1): how fast a runtime creates and tears down its units of concurrency.

The seed's serial chain: ``total`` spawns split into ``chains`` chains that
run at once; each unit starts the next one of its chain and ends, and the
last one tells the parent. Stresses the fixed cost of one create+destroy:
asyncio tasks, threads, forked processes, multiprocessing, posix_spawn, the
same primitives in C, and Erlang processes (the seed's own runtime,
erlang/pg_spawn.erl here).

This module is the experiment; :mod:`.chains` holds the chains run in this
process (asyncio, threads, posix_spawn) and the harness side of
:mod:`.fork_runner`, the script that runs the fork and mp_fork chains in a bare
interpreter.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from pyperf import perf_counter

from perfgrid.experiments.base import Case, Experiment, Metadata, Point, missing_tool
from perfgrid.experiments.spawn.chains import (
    TRUE,
    LeanRunner,
    SpawnChains,
    TaskChains,
    ThreadChains,
    chain_lengths,
)
from perfgrid.kit import binding, erlang, lifetime

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
    report_position = 10
    axes = ("variant", "binding", "chains", "total")
    int_axes = frozenset({"chains", "total"})
    #: analysis.py's claims: every 1-chain point (bindings, ports, Erlang),
    #: and asyncio tasks in 100 chains against 1, unbound
    claim_points = ({"chains": 1}, {"variant": "asyncio_task", "binding": "none", "chains": 100})
    work_unit = "spawns"
    rate_unit = "spawns/s"
    native_variants = NATIVE
    erlang_variants = ERLANG
    native_program = "spawn"
    erlang_module = "pg_spawn"
    reference_variants = NATIVE

    def claim_group(self, point: Point) -> Hashable | None:
        """A primitive's claim points run back to back: its claims compare its bindings
        (and asyncio's chains)."""
        return point["variant"]

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
