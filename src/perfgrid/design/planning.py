"""The jobs of a run, planned from the effective config (perfgrid.pipeline.settings).

Each experiment's grid points, the ones this machine skips and why, each point's
repetitions (``measure``, with ``measure.claims`` over it at the points a claim compares)
and rounds, and the harness options that carry them; the run order's blocks
(perfgrid.design.order) too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any

from perfgrid import experiments
from perfgrid.design.model import Job

#: pyperf's own options among the measure keys
MEASURE_KEYS = ("processes", "values", "warmups", "loops")


def measure_of(cfg: dict[str, Any], experiment: str,
               point: dict[str, Any] | None = None) -> dict[str, Any]:
    """The repetitions of one point: ``measure``, with ``measure.claims`` over it where a
    claim compares the point."""
    measure = dict(cfg[experiment]["measure"])
    claims = measure.pop("claims", None) or {}
    exp = experiments.get(experiment)
    if point is not None and exp.used_by_claims(point):
        measure.update(claims)
        if claims.get("rounds"):
            measure["rounds"] = exp.claim_rounds(point, int(claims["rounds"]))
    return measure


def rounds_of(cfg: dict[str, Any], experiment: str,
              point: dict[str, Any] | None = None) -> int:
    """How many jobs (rounds) measure ``point``; without a point, the most any point of
    ``experiment`` may have (whether its results are folders of rounds)."""
    if point is not None:
        return int(measure_of(cfg, experiment, point).get("rounds") or 1)
    measure = cfg[experiment]["measure"]
    claims = measure.get("claims") or {}
    return max(int(measure.get("rounds") or 1), int(claims.get("rounds") or 1))


def measure_args(cfg: dict[str, Any], experiment: str,
                 point: dict[str, Any] | None = None) -> list[str]:
    """Harness options for one job's repetitions: pyperf's, when to stop adding batches,
    and ``--counters`` where ``measure.counters`` counts the point.

    With R rounds each round is one of R independent jobs: it gets 1/R of the
    point's ``max_seconds`` and a target sqrt(R) wider, so that the R rounds
    together meet ``target_ci``.
    """
    measure = measure_of(cfg, experiment, point)
    args = []
    for key in MEASURE_KEYS:
        value = measure.get(key)
        if value is not None:
            args += [f"--{key}", str(value)]
    mode = measure.get("counters") or "claims"
    if point is not None and (mode == "all" or (
            mode == "claims" and experiments.get(experiment).counted_by_default(point))):
        args.append("--counters")
    rounds = int(measure.get("rounds") or 1)  # rounds_of(cfg, experiment, point)
    if measure.get("target_ci") is not None:
        args += ["--target-ci", f"{measure['target_ci'] * math.sqrt(rounds):.6g}"]
    if measure.get("max_seconds") is not None:
        args += ["--max-seconds", f"{measure['max_seconds'] / rounds:.6g}"]
    return args


def jobs(cfg: dict[str, Any]) -> list[Job]:
    """Every benchmark job this machine can run, in sorted order (grid order, then round)."""
    out = []
    for experiment in cfg["experiments"]:
        points, _ = split_grid(cfg, experiment)
        rounds = [rounds_of(cfg, experiment, p) for p in points]
        out += [Job(experiment, p, r) for r in range(1, max(rounds, default=1) + 1)
                for p, n in zip(points, rounds, strict=True) if r <= n]
    return out


def claim_block(cfg: dict[str, Any]) -> Callable[[Job], tuple[str, int] | None]:
    """The run order's blocks (perfgrid.design.order): the jobs of one experiment's claim points
    measured in rounds, one block per round, so a claim's sides run back to back."""
    def block(job: Job) -> tuple[str, int] | None:
        if rounds_of(cfg, job.experiment, job.point) < 2:
            return None
        return job.experiment, job.round

    return block


def claim_group(job: Job) -> Hashable | None:
    """Inside a block, the points that run back to back again: the experiment's
    ``claim_group`` (perfgrid.design.order)."""
    return experiments.get(job.experiment).claim_group(job.point)


def grid(cfg: dict[str, Any], experiment: str) -> list[dict[str, Any]]:
    """Every grid point of an enabled experiment."""
    return experiments.get(experiment).points(cfg[experiment], cfg)


def skipped(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Every grid point this machine cannot run, each with its experiment and ``reason``."""
    return [s for name in cfg["experiments"] for s in split_grid(cfg, name)[1]]


def split_grid(cfg: dict[str, Any], experiment: str) -> tuple[list[dict], list[dict]]:
    """(points this machine can run, skipped points each with a ``reason``)."""
    exp = experiments.get(experiment)
    runnable, skipped = [], []
    for point in grid(cfg, experiment):
        reason = exp.unavailable(point)
        if reason:
            skipped.append({"experiment": experiment, **point, "reason": reason})
        else:
            runnable.append(point)
    return runnable, skipped
