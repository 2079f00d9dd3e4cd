"""The plan of a run: which benchmark jobs run, in what order, for how many rounds, and with
which command line. One pure function (:func:`build`) of the effective config
(perfgrid.pipeline.settings) and the experiment registry (perfgrid.experiments). The rounds are
fixed before the run and every job runs: nothing in the data or the clock changes them.

Snakemake builds it once while it parses the workflow (workflow/rules/common.smk), rule
``plan`` writes it as ``results/<host>/plan.json`` (:meth:`Plan.to_json`), and the rest
reads it: the rules' input and params functions (perfgrid.pipeline.glue), the claim blocks' command
lines (perfgrid.measure.block), the noise profile's pairs (:func:`noise_pairs`, measured by
perfgrid.measure.noiseprofile), the progress line (perfgrid.pipeline.progress) and the
report's note on the time budget. Its types, and plan.json's one reader, are
perfgrid.design.model's.

The words, used in this sense in code and names:

point
    One combination of an experiment's axis values, as its result path spells it
    (``variant=read/block_size=4096``). Points this machine cannot run are skipped
    (skipped.json) and never planned.
claim point, sweep point
    A claim point is one that a claim of its experiment compares
    (``Experiment.used_by_claims``): it is measured with ``measure.claims`` over
    ``measure``. Every other point is a sweep point: the grid the plots draw.
round
    One independent measurement of a point, with its own result file
    (``.../round=2.json`` where the experiment's points have more than one). A claim point
    has ``measure.claims.rounds`` (or fewer, where its experiment keeps a costly point
    short), any point at least ``measure.rounds``. Round r of every point runs in phase r
    of the run (perfgrid.design.order).
job
    One round of one point: the harness's command words, the result and log it writes,
    and its priority, its place in the run's order (the first job highest; Snakemake
    runs the ready job of highest priority first).
block
    One round of an experiment's points that have more than one round (its claim
    points), run back to back by one Snakemake job (perfgrid.measure.block), so a claim's sides
    are seconds apart: rule ``<experiment>_round_<r>`` (``_part_<p>`` for a later part of
    the same round). A point measured once is a job of its experiment's own rule, the
    sweep rule, named after the experiment.
budget
    The time the design is sized to take on a slow day (``budget.minutes``). It cuts
    nothing: every run measures every job of its plan, so the rounds, and the verdicts'
    intervals, never depend on the day. The progress line counts down to it and the
    report says when a run took longer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfgrid import experiments
from perfgrid.design import jobs, order, planning
from perfgrid.design.model import (
    DESIGN_FIELDS,
    Block,
    Job,
    JobKey,
    NoisePair,
    NoiseSide,
    Plan,
    design_digest,
    short_digest,
)
from perfgrid.experiments.base import Point
from perfgrid.kit.paths import Layout
from perfgrid.measure import jobargs

#: the model's names, where the plan's builder is asked for them (perfgrid.design.model)
__all__ = ["DESIGN_FIELDS", "Block", "Job", "JobKey", "NoisePair", "NoiseSide", "Plan", "build",
           "design_digest", "short_digest", "write"]


def bench_words(cfg: dict[str, Any], layout: Layout, experiment: str, point: dict[str, Any],
                round_: int | str | None = None,
                text: dict[str, str] | None = None) -> list[str]:
    """The harness's own words for one point (and round): its axes (``text``: as a job's
    wildcards spell them; else as its result path does), its repetitions, the lock and
    the noise limits (perfgrid.measure.bench)."""
    words = []
    for axis in experiments.get(experiment).axes:
        words += ["--point", f"{axis}={(text or point)[axis]}"]
    words += planning.measure_args(cfg, experiment, point)
    words += ["--lock", str(layout.bench_lock)]
    words += ["--busy-share", str(cfg["noise"]["busy_share"])]
    words += ["--steal-share", str(cfg["noise"]["steal_share"]), "--verbose"]
    if round_ is not None:
        words += ["--round", str(round_)]
    return words


def option_words(cfg: dict[str, Any], layout: Layout, experiment: str,
                 point: dict[str, Any]) -> list[str]:
    """``point``'s ``--option KEY=VALUE`` words, asked of its experiment (perfgrid.design.jobs)."""
    exp = experiments.get(experiment)
    return jobargs.option_words(jobs.options(exp, point, cfg, layout))


def build(cfg: dict[str, Any], layout: Layout) -> Plan:
    """The plan of a run of the effective config ``cfg`` (``settings.validated``) into
    ``layout``: every job this machine can run, in the order perfgrid.design.order draws, and its
    claim blocks."""
    names = list(cfg["experiments"])
    axes = {e: experiments.get(e).axes for e in names}
    listed = planning.jobs(cfg)
    block_of = planning.claim_block(cfg)
    ordered = order.planned(listed, cfg["order"]["shuffle"], cfg["order"]["seed"],
                            block=block_of, group=planning.claim_group)
    priority = order.priorities(ordered, axes)
    runs = _block_runs(block_of, ordered)
    rule_of = {id(job): name for name, *_, members in runs for job in members}
    rounds = {e: planning.rounds_of(cfg, e) for e in names}
    planned = []
    for job in listed:
        exp = experiments.get(job.experiment)
        round_ = job.round if rounds[job.experiment] > 1 else None
        planned.append(dataclasses.replace(
            job, rounds=planning.rounds_of(cfg, job.experiment, job.point),
            claim=exp.used_by_claims(job.point),
            priority=priority[job.key_on(axes[job.experiment])],
            rule=rule_of.get(id(job), job.experiment),
            bench=tuple(bench_words(cfg, layout, job.experiment, job.point, round_)),
            options=tuple(option_words(cfg, layout, job.experiment, job.point)),
            result=layout.raw_result(job.experiment, job.point, round=round_),
            log=layout.point_log(job.experiment, job.point, round_)))
    full = {id(job): p for job, p in zip(listed, planned, strict=True)}
    blocks = {name: Block(name=name, experiment=experiment, round=round_, part=part,
                          priority=priority[members[0].key_on(axes[experiment])],
                          jobs=tuple(full[id(job)] for job in members))
              for name, experiment, round_, part, members in runs}
    noise, skipped = noise_pairs(cfg, layout)
    return Plan(root=str(layout.root), jobs=tuple(planned), blocks=blocks, rounds=rounds,
                budget={"minutes": cfg["budget"]["minutes"]}, noise=noise,
                noise_skipped=skipped)


def noise_pairs(cfg: dict[str, Any], layout: Layout,
                ) -> tuple[dict[str, NoisePair], dict[str, str]]:
    """The noise profile's pairs (each experiment's ``noise_pair``, in report order) of this
    run's experiments whose points this machine can run, each side with a benchmark job's
    words for its point and options; and why each other pair is not measured."""
    pairs, skipped = {}, {}
    for name in experiments.available():
        exp = experiments.get(name)
        spec = exp.noise_pair
        if spec is None:
            continue
        why = (f"{name} is not among this run's experiments" if name not in cfg["experiments"]
               else exp.unavailable(spec.a) or exp.unavailable(spec.b))
        if why:
            skipped[spec.name] = why
            continue
        pairs[spec.name] = NoisePair(spec.name, spec.claim,
                                     _noise_side(cfg, layout, name, spec.loops, spec.a, spec.b),
                                     _noise_side(cfg, layout, name, spec.loops, spec.b, spec.a))
    return pairs, skipped


def _noise_side(cfg: dict[str, Any], layout: Layout, experiment: str, loops: int, point: Point,
                other: Point) -> NoiseSide:
    """One side of a noise pair: labelled by the axis values that set ``point`` apart from
    ``other``, with its point's words and a benchmark job's options."""
    label = ",".join(str(value) for axis, value in point.items() if other.get(axis) != value)
    words = [w for axis, value in point.items() for w in ("--point", f"{axis}={value}")]
    return NoiseSide(label, experiment, dict(point), loops,
                     (*words, *option_words(cfg, layout, experiment, point)))


def _block_runs(key_of: Callable[[Job], tuple[str, int] | None],
                ordered: list[Job]) -> list[tuple[str, str, int, int, list[Job]]]:
    """The claim blocks as they run: (name, experiment, round, part, jobs) for each stretch
    of ``ordered`` (``order.planned``'s plan) whose jobs share one block key (``key_of``:
    experiment and round) once the jobs outside any block are left out. A later stretch of
    the same key is its next part: ``spawn_round_3``, then ``spawn_round_3_part_2``."""
    stretches: list[tuple[tuple[str, int], list[Job]]] = []
    for job in ordered:
        key = key_of(job)
        if key is None:
            continue
        if stretches and stretches[-1][0] == key:
            stretches[-1][1].append(job)
        else:
            stretches.append((key, [job]))
    parts: dict[tuple[str, int], int] = {}
    out = []
    for (experiment, round_), members in stretches:
        part = parts[experiment, round_] = parts.get((experiment, round_), 0) + 1
        name = f"{experiment}_round_{round_}" + (f"_part_{part}" if part > 1 else "")
        out.append((name, experiment, round_, part, members))
    return out


def write(plan: Plan, path: str | Path, log: str | Path | None = None) -> None:
    """Write ``plan`` as JSON to ``path`` (plan.json) at once (perfgrid.kit.atomic); a line
    to ``log`` counts what it holds."""
    from perfgrid.kit.atomic import write_json

    write_json(path, plan.to_json())
    if log is not None:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        Path(log).write_text(f"plan: {len(plan.jobs)} benchmark jobs, {len(plan.blocks)} "
                             f"claim blocks, digest {plan.digest()}\n")

