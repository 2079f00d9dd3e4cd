"""The pyperf harness every benchmark job runs: one grid point, one JSON file.

    python -m perfgrid.bench EXPERIMENT --point AXIS=VALUE ... \
        --option KEY=VALUE ... --result PATH [pyperf options]

pyperf re-executes this module for each worker process; our own options
travel to the workers through ``add_cmdline_args``. The manager process holds
an exclusive lock for the whole run, so no two benchmark jobs ever measure at
the same time, and writes the result atomically (temporary name, rename).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyperf

from perfgrid import binding, experiments, lifetime, noise
from perfgrid.atomic import atomic_path
from perfgrid.experiments.base import Case


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag}: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


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


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--hook" not in argv:
        argv += ["--hook", _HookEntry.name]
    runner = pyperf.Runner(
        program_args=("-m", "perfgrid.bench"),
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
                        help="flag the point if other processes use more than this CPU share")
    parser.add_argument("--parent", type=int, default=None,
                        help="(workers) the manager's pid, to die with; default the parent")
    args = runner.parse_args(argv)
    if args.worker:  # first: a manager killed before this leaves no worker measuring
        lifetime.die_with_parent(args.parent if args.parent is not None else os.getppid())

    experiment = experiments.get(args.experiment)
    point = experiment.parse_point(_pairs(args.point, "--point"))
    options = _pairs(args.option, "--option")
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

    if not args.result:
        raise SystemExit("--result PATH is required")
    lifetime.watch_snakemake()
    with exclusive(args.lock):
        started = time.time()
        busy = noise.wait_until_quiet(args.busy_share)
        print(f"perfgrid: measuring {name}", file=sys.stderr, flush=True)
        bench = runner.bench_time_func(name, lambda loops: 0.0)
        finished = time.time()
    if bench is None:
        raise SystemExit(f"{name}: pyperf produced no benchmark")
    bench.update_metadata({**busy, "perfgrid_started": started, "perfgrid_finished": finished,
                           **_slurm_metadata()})
    with atomic_path(args.result) as tmp:
        bench.dump(str(tmp))
    print(f"perfgrid: wrote {args.result} ({time.time() - started:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
