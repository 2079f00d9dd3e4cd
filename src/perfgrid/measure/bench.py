"""The pyperf harness every benchmark job runs: one grid point, one JSON file.

    python -m perfgrid.measure.bench EXPERIMENT --point AXIS=VALUE ... \
        --option KEY=VALUE ... --result PATH [--target-ci 0.03 --max-seconds 60]
        [--counters] [pyperf options]

The job's process (the point manager) holds an exclusive lock for the whole
point, so no two benchmark jobs ever measure at the same time, and measures
in batches: each batch is one pyperf run (this module again, with
``--batch``) of a few worker processes, merged into one benchmark, until the
95 % interval of the rate meets ``--target-ci`` or the next batch would pass
``--max-seconds`` (pyperf's Runner measures once per process, so batches are
separate pyperf runs; later batches reuse the first one's calibrated loops).
Without a target, one batch of ``--processes`` is the whole point. With
``--counters``, one untimed counting pass under ``perf stat`` follows, still
under the lock (perfgrid.measure.counters). A measurement whose own window saw other
processes use more than ``--busy-share`` of the CPUs is made again, at most
twice (:func:`measure_quietly`). pyperf
re-executes this module for each worker process; our own options travel to
the workers through ``add_cmdline_args``. The result is written atomically
(temporary name, rename), with how the point stopped and what drifted.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyperf

from perfgrid import experiments
from perfgrid.experiments.base import Case
from perfgrid.kit import binding, lifetime
from perfgrid.kit.atomic import atomic_path
from perfgrid.measure import counters, noise
from perfgrid.measure.jobargs import pairs

if TYPE_CHECKING:  # numpy and scipy stay out of the workers and fixed-repetition points
    from perfgrid.kit.interval import Replicates


def _forward(cmd: list[str], args: argparse.Namespace) -> None:
    """Pass our own options on to pyperf's worker processes, and the pid they die with."""
    cmd.append(args.experiment)
    cmd.extend(["--parent", str(os.getpid())])
    for item in args.point:
        cmd.extend(["--point", item])
    for item in args.option:
        cmd.extend(["--option", item])


@contextmanager
def exclusive(lock_path: str | None):
    """Hold an exclusive lock on ``lock_path`` (no-op without one)."""
    if not lock_path:
        yield
        return
    Path(lock_path).parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def standard_metadata(name: str, point: dict, runtime: str) -> dict[str, str | int | float]:
    """Metadata every result carries: what was measured, on which axes."""
    meta: dict[str, str | int | float] = {
        "perfgrid_experiment": name,
        "perfgrid_runtime": runtime,
        "perfgrid_point": json.dumps(point, sort_keys=True),
    }
    for axis, value in point.items():
        meta[f"perfgrid_{axis}"] = value
    return meta


class _ObservationHook:
    """pyperf hook: after each series of loops, record what the case observed."""

    case: Case | None = None

    def __enter__(self) -> _ObservationHook:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def teardown(self, metadata: dict) -> None:
        if _ObservationHook.case is not None:
            metadata.update(_ObservationHook.case.observed())
            # the read-back affinities must match the plan (else the point fails), and
            # say whether the workers shared a core, an L3 group, a NUMA node
            metadata.update({f"perfgrid_{k}": v
                             for k, v in binding.checked_placement(metadata).items()})


@dataclass(frozen=True)
class _HookEntry:
    """What pyperf expects of an entry point: a name and a ``load()``."""

    name: str = "perfgrid"

    def load(self) -> type[_ObservationHook]:
        return _ObservationHook


def _slurm_metadata() -> dict[str, str]:
    """The SLURM job and node this result was measured in, when run by SLURM."""
    names = {"SLURM_JOB_ID": "perfgrid_slurm_job_id", "SLURMD_NODENAME": "perfgrid_node"}
    return {key: os.environ[var] for var, key in names.items() if os.environ.get(var)}


#: the point manager's own options, not passed on to a batch (which gets its own)
MANAGER_OPTIONS = ("--result", "--lock", "--busy-share", "--steal-share", "--target-ci",
                   "--max-seconds", "--round", "--processes", "--loops", "-p", "-l")
#: ... and its own flags, which take no value
MANAGER_FLAGS = ("--counters",)


def batch_argv(argv: list[str], processes: int, loops: int | None, output: Path) -> list[str]:
    """One batch's command line: the job's own (pyperf's options such as
    ``--inherit-environ`` included) less the manager's, for ``processes`` workers."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if word in MANAGER_FLAGS:
            continue
        if name in MANAGER_OPTIONS:
            skip = "=" not in word
            continue
        out.append(word)
    out += ["--processes", str(processes)] + (["--loops", str(loops)] if loops else [])
    return [sys.executable, "-m", "perfgrid.measure.bench", *out, "--batch", "--output",
            str(output)]


def _run_batch(args: argparse.Namespace, processes: int, loops: int | None,
               index: int) -> pyperf.Benchmark:
    """Batch ``index`` of a point as a pyperf run of its own (every batch but the one
    pyperf's Runner runs in this process): its JSON in a folder removed once read, so a
    job killed by SIGKILL, which skips the removal, leaves one behind only while such a
    batch runs (a folder held for the whole point was left by every killed job)."""
    with tempfile.TemporaryDirectory(prefix="perfgrid-batch-") as folder:
        output = Path(folder) / f"batch-{index}.json"
        cmd = batch_argv(args.argv, processes, loops, output)
        done = subprocess.run(lifetime.command(cmd), check=False)
        if done.returncode != 0 or not output.exists():
            raise SystemExit(f"batch {index} ({processes} processes) failed "
                             f"(exit status {done.returncode})")
        return pyperf.Benchmark.load(str(output))


def point_interval(bench: pyperf.Benchmark, seed: int = 0) -> Replicates:
    """The rate of a (partly) measured point with its 95 % interval, as the table computes it
    (perfgrid.kit.interval: not perfgrid.analyse.stats, which would make the claims'
    statistics a code input of every benchmark job)."""
    runs = [run for run in bench.get_runs() if run.values]
    groups = [list(run.values) for run in runs]  # aggregate.process_values, without pandas
    work = float(runs[0].get_metadata()["perfgrid_work_per_loop"]) if runs else float("nan")
    from perfgrid.kit import interval  # numpy and scipy: only where a target is set

    return interval.rate(groups, work, seed=seed)


def next_batch(processes: int, ci_rel: float, target: float) -> int:
    """Worker processes to add so the interval may meet ``target``: at most doubling.

    A half-width shrinks about as 1/sqrt(processes), so ``processes * (ci/target)^2``
    processes in all would meet it; without an interval yet, double.
    """
    if not math.isfinite(ci_rel):
        return processes
    wanted = math.ceil(processes * (ci_rel / target) ** 2) - processes
    return max(1, min(processes, wanted))


def _first_batch(runner: pyperf.Runner, name: str) -> pyperf.Benchmark:
    bench = runner.bench_time_func(name, lambda loops: 0.0)
    if bench is None:
        raise SystemExit(f"{name}: pyperf produced no benchmark")
    return bench


def measure_point(args: argparse.Namespace, first: Callable[[], pyperf.Benchmark] | None = None,
                  ) -> tuple[pyperf.Benchmark, dict[str, object]]:
    """Batches until the interval meets ``--target-ci`` or the cap stops it; how it ended.

    ``first`` runs the first batch in this process (pyperf's Runner, once): a point
    that needs no second batch costs no extra process. Later batches are separate runs.
    """
    target, cap = args.target_ci, args.max_seconds
    start = time.monotonic()
    processes, loops = args.processes, args.loops
    merged: pyperf.Benchmark | None = None
    per_process = 0.0
    for index in range(1, 10_000):
        began = time.monotonic()
        batch = (first() if first is not None and index == 1
                 else _run_batch(args, processes, loops, index))
        # the slowest batch so far, per process (its start-up included): no overshoot
        per_process = max(per_process, (time.monotonic() - began) / processes)
        if merged is None:
            merged, loops = batch, loops or batch.get_loops()
        else:
            merged.add_runs(batch)
        spent = time.monotonic() - start
        if target is None:
            return merged, {"perfgrid_batches": index,
                            "perfgrid_measure_seconds": round(spent, 3)}
        from perfgrid.kit import interval  # numpy and scipy: only where a target is set

        estimate = point_interval(merged)
        ci, total = estimate.ci_rel, merged.get_nrun()
        outcome = {"perfgrid_batches": index, "perfgrid_measure_seconds": round(spent, 3),
                   "perfgrid_target_ci": target, "perfgrid_max_seconds": cap,
                   "perfgrid_converged": False}
        # one process's interval knows only its own noise: it never decides convergence
        if math.isfinite(ci) and ci <= target and estimate.method != interval.METHOD_VALUES:
            outcome.update(perfgrid_converged=True, perfgrid_stop=(
                f"interval +/-{ci:.1%} met the target +/-{target:.1%} "
                f"after {total} processes"))
            return merged, outcome
        if estimate.reason.startswith("all values identical"):
            outcome["perfgrid_stop"] = f"no interval: {estimate.reason}"
            return merged, outcome
        if index == 1 and spent > cap:
            outcome["perfgrid_stop"] = (
                f"one batch of {processes} processes took {spent:.0f} s, over the cap "
                f"of {cap:g} s: no repetition fits")
            return merged, outcome
        fits = math.floor((cap - spent) / per_process)
        if fits < 1:
            shown = f"+/-{ci:.1%}" if math.isfinite(ci) else "no interval"
            outcome["perfgrid_stop"] = (
                f"cap of {cap:g} s: {shown} after {total} processes ({spent:.0f} s); "
                f"target +/-{target:.1%}")
            return merged, outcome
        processes = min(next_batch(total, ci, target), fits)
    raise AssertionError("unreachable: the cap ends every point")


def measure_quietly(args: argparse.Namespace, name: str,
                    first: Callable[[], pyperf.Benchmark] | None = None,
                    measure: Callable[..., tuple[pyperf.Benchmark, dict[str, object]]]
                    = measure_point) -> tuple[pyperf.Benchmark, dict[str, object],
                                              dict[str, object]]:
    """Measure the point (:func:`measure_point`), again while other work disturbed it.

    Each measurement waits for a quiet machine first (:func:`noise.wait_until_quiet`),
    then watches its own window (:func:`noise.during`): where other processes used more
    than ``--busy-share`` of the CPUs over it, the measurement is thrown away and made
    again, at most :data:`noise.MAX_REMEASURES` times; the last one is kept, flagged
    ``perfgrid_noisy`` if it too was disturbed. Returns it, how it ended, and the noise
    metadata: the kept window's, with every measurement's share of other work.
    """
    shares: list[float] = []
    for attempt in range(1, noise.MAX_REMEASURES + 2):
        quiet: dict[str, object] = dict(noise.wait_until_quiet(args.busy_share))
        before, start = noise.snapshot(), noise.window()
        print(f"perfgrid: measuring {name}" + (f" (again: {attempt})" if attempt > 1 else ""),
              file=sys.stderr, flush=True)
        # pyperf's Runner measures once per process: a measurement made again is a batch
        bench, outcome = measure(args, first=first if attempt == 1 else None)
        seen = noise.during(start, noise.window(), args.busy_share)
        quiet.update(noise.drift(before, noise.snapshot(), args.steal_share))
        quiet.update(seen)
        shares.append(float(seen["perfgrid_busy_during"]))
        if not seen["perfgrid_noisy"] or attempt > noise.MAX_REMEASURES:
            break
        print(f"perfgrid: other processes used {shares[-1]:.0%} of the CPUs while it was "
              f"measured (noise.busy_share {args.busy_share:g}): measuring again",
              file=sys.stderr, flush=True)
        args.loops = args.loops or bench.get_loops()  # calibrated once is enough
    quiet.update(perfgrid_measurements=len(shares),
                 perfgrid_busy_during_each=" ".join(f"{s:.4f}" for s in shares))
    return bench, outcome, quiet


def count(experiment: experiments.Experiment, point: dict, args: argparse.Namespace,
          bench: pyperf.Benchmark) -> dict[str, object]:
    """The point's counting pass (one value's loops, untimed), or why it has none."""
    why = experiment.uncountable(point)
    if why:
        return {"perfgrid_counters": why}
    value_s = bench.mean() * bench.get_total_loops()
    print(f"perfgrid: counting {bench.get_loops()} loops under perf stat", file=sys.stderr,
          flush=True)
    return counters.count_point(experiment.name, args.point, args.option, bench.get_loops(),
                                experiment.runtime(point), timeout=120 + 10 * value_s)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--hook" not in argv:
        argv += ["--hook", _HookEntry.name]
    runner = pyperf.Runner(
        program_args=("-m", "perfgrid.measure.bench"),
        add_cmdline_args=_forward,
        hooks=[_HookEntry()],
    )
    parser = runner.argparser
    parser.add_argument("experiment", help="experiment name, e.g. file_read")
    parser.add_argument("--point", action="append", default=[], metavar="AXIS=VALUE")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--result", help="where the manager writes the pyperf JSON")
    parser.add_argument("--lock", help="lock file serialising benchmark jobs")
    parser.add_argument("--busy-share", type=float, default=None,
                        help="wait, measure again (at most twice), and flag the point while "
                             "other processes use more than this CPU share")
    parser.add_argument("--parent", type=int, default=None,
                        help="(workers) the manager's pid, to die with; default the parent")
    parser.add_argument("--target-ci", type=float, default=None,
                        help="add batches of processes until the interval's relative "
                             "half-width is at most this")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="hard cap on the point's measuring time (with --target-ci)")
    parser.add_argument("--steal-share", type=float, default=None,
                        help="flag the point if steal time exceeds this share of CPU time")
    parser.add_argument("--round", type=int, default=None,
                        help="which of the point's rounds this job measures")
    parser.add_argument("--counters", action="store_true",
                        help="after measuring, one untimed counting pass under perf stat "
                             "(perfgrid.measure.counters)")
    parser.add_argument("--batch", action="store_true",
                        help="(internal) one batch: a plain pyperf run written to --output")
    args = runner.parse_args(argv)
    args.argv = argv
    if args.worker:  # first: a manager killed before this leaves no worker measuring
        lifetime.die_with_parent(args.parent if args.parent is not None else os.getppid())

    experiment = experiments.get(args.experiment)
    point = experiment.parse_point(pairs(args.point, "--point"))
    options = pairs(args.option, "--option")
    name = f"{experiment.name}[{','.join(f'{k}={v}' for k, v in point.items())}]"
    runner.metadata.update(standard_metadata(experiment.name, point, experiment.runtime(point)))

    if args.worker:
        case = experiment.prepare(point, options)
        _ObservationHook.case = case
        try:
            runner.metadata.update(case.metadata)
            runner.metadata["perfgrid_work_per_loop"] = case.work_per_loop
            runner.metadata["perfgrid_work_unit"] = experiment.work_unit
            runner.bench_time_func(name, case.time, inner_loops=case.inner_loops)
        finally:
            case.close()
        return

    if args.batch:  # pyperf's manager: starts the workers, writes --output
        runner.bench_time_func(name, lambda loops: 0.0)
        return
    if not args.result:
        raise SystemExit("--result PATH is required")
    if args.target_ci is not None and args.max_seconds is None:
        raise SystemExit("--target-ci needs --max-seconds (a hard cap)")
    lifetime.watch_snakemake()
    with exclusive(args.lock):
        started = time.time()
        bench, outcome, quiet = measure_quietly(
            args, name, first=lambda: _first_batch(runner, name))
        if args.counters and (args.round or 1) == 1:  # still under the lock; once a point
            outcome.update(count(experiment, point, args, bench))
        finished = time.time()
    if args.round is not None:
        outcome["perfgrid_round"] = args.round
    bench.update_metadata({**quiet, **outcome, "perfgrid_started": started,
                           "perfgrid_finished": finished, **_slurm_metadata()})
    print(f"perfgrid: {outcome.get('perfgrid_stop', 'fixed repetitions')}", file=sys.stderr)
    with atomic_path(args.result) as tmp:
        bench.dump(str(tmp))
    print(f"perfgrid: wrote {args.result} ({time.time() - started:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
