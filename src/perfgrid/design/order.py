"""The order benchmark jobs run in: drawn from a recorded seed, so time lines up with no axis.

Measured in axis order, slow drift (page-cache reclaim, another tenant,
thermal state) looks like an effect of the axis. Every benchmark job gets a
place in one plan; the Snakefile turns the place into the job's Snakemake
``priority`` (higher runs first), so among ready jobs the earliest place
runs next, and benchmark jobs still run one at a time.

A plain random order still lines up with some axis by chance now and then
(with 8 jobs on an axis, |rho| > 0.5 in one draw of ten). So the order is
re-randomised (Morgan and Rubin, "Rerandomization to improve covariate
balance", 2012): of ``DRAWS`` permutations drawn from the seed, the one
whose largest rank correlation with any numeric axis (in units of its chance
spread, 1/sqrt(n - 1) for n jobs) is smallest is used.
It is still a random order, so drift in time and any axis stay unrelated.

With ``measure.rounds: R`` each point is R jobs (asv's interleaved rounds):
round 1 of every point comes first, in its own shuffled order, then round 2
in another, and so on, so each point's rounds are spread over the run. With
``measure.claims.rounds`` only the points claims compare get rounds; the
points measured once are spread evenly over the same phases.
``order.shuffle: false`` keeps the grid's sorted order (experiment by
experiment, each grid in its axes' order, round by round).

Jobs that share a block (``block``: the points one experiment's claims compare, in one
round) run back to back inside their phase, in a shuffled order, the block itself at a
shuffled place among the other jobs: the sides of a claim are then measured minutes
apart at most rather than anywhere in a third of the run, so a ratio paired round by
round (perfgrid.analyse.stats) cancels the drift both sides share. Inside a block, the points an
experiment groups (``Experiment.claim_group``: the points of one claim) run back to back
again, the groups in a shuffled order, so a claim's sides are seconds apart.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

import numpy as np

from perfgrid.design.model import Job, JobKey

#: permutations drawn per round, of which the best balanced is used
DRAWS = 64

def planned(jobs: list[Job], shuffle: bool, seed: int, draws: int = DRAWS,
            block: Callable[[Job], Hashable | None] | None = None,
            group: Callable[[Job], Hashable | None] | None = None) -> list[Job]:
    """``jobs`` (in sorted order) in the order they should run.

    The run is cut into as many phases as the most rounds any point has.
    Round r of every such point runs in phase r; a point measured once (where
    only the points claims compare get rounds) is assigned to one phase by the
    seed (sorted: the first), so that every phase carries an even share of the
    grid; a point of fewer rounds (another experiment's claims) has them spread
    evenly over the phases, first to last (:func:`_phase`), as its claim group's most
    rounds where it has a group, so a point kept to fewer rounds stays beside its group.
    Inside each phase the jobs are permuted with a generator seeded by
    ``(seed, phase)`` (the best balanced of ``draws`` permutations), or kept
    sorted. Jobs for which ``block`` gives the same key (not None) stay together
    inside their phase, as one unit of the permutation, shuffled among themselves; inside
    a block, jobs for which ``group`` gives the same key (not None) stay together too, the
    groups in a shuffled order, so the points of one claim run within seconds.
    """
    rounds_of: dict[tuple[str, str], int] = {}
    for job in jobs:
        point = _point_key(job)
        rounds_of[point] = max(rounds_of.get(point, 0), job.round)
    phases = max(rounds_of.values(), default=1)
    start_of = {point: 1 for point in rounds_of}
    once = [point for point, rounds in rounds_of.items() if rounds == 1 < phases]
    if once and shuffle:  # sorted: they all stay in the first phase
        rng = np.random.default_rng([seed, 0])
        for phase, share in enumerate(np.array_split(rng.permutation(len(once)), phases), 1):
            for i in share:
                start_of[once[i]] = phase
    spread = _spread_over(jobs, rounds_of, block, group)
    phase_of = {id(job): _phase(start_of[_point_key(job)], job.round,
                                spread[_point_key(job)], phases) for job in jobs}
    out = []
    for phase in range(1, phases + 1):
        in_phase = [job for job in jobs if phase_of[id(job)] == phase]
        if shuffle and len(in_phase) > 1:
            rng = np.random.default_rng([seed, phase])
            perms = _draws(_units(in_phase, block, group), len(in_phase), draws, rng)
            best = perms[int(np.argmin(imbalances(perms, numeric_axes(in_phase))))]
            in_phase = [in_phase[i] for i in best]
        out.extend(in_phase)
    return out


def _spread_over(jobs: list[Job], rounds_of: dict[tuple[str, str], int],
                 block: Callable[[Job], Hashable | None] | None,
                 group: Callable[[Job], Hashable | None] | None) -> dict[tuple[str, str], int]:
    """The rounds a point's rounds are spread as: its own, or in a claim group, the most
    any point of the group has, so that a point kept to fewer rounds (a costly one) runs
    its round r beside its group's round r, not apart from it."""
    spread = dict(rounds_of)
    if block is None or group is None:
        return spread
    keyed = [(job, (job.experiment, group(job))) for job in jobs if block(job) is not None]
    keyed = [(job, key) for job, key in keyed if key[1] is not None]
    most: dict[tuple[str, Hashable], int] = {}
    for job, key in keyed:
        most[key] = max(most.get(key, 0), rounds_of[_point_key(job)])
    for job, key in keyed:
        spread[_point_key(job)] = most[key]
    return spread


def _phase(start: int, round_: int, rounds: int, phases: int) -> int:
    """The phase of a point's round: a point measured once, its drawn ``start``; a point
    of R rounds, ``2 <= R < phases``, has them spread evenly over the whole run (the first
    in phase 1, the last in the last), the same phases for every point of R rounds, so
    the points one claim compares share their blocks' phases (and so their moments)."""
    if rounds < 2 or rounds >= phases:
        return start + round_ - 1
    return 1 + round((round_ - 1) * (phases - 1) / (rounds - 1))


#: a unit of a permutation: its groups, each a list of job indexes
Unit = list[list[int]]


def _units(jobs: list[Job], block: Callable[[Job], Hashable | None] | None,
           group: Callable[[Job], Hashable | None] | None = None) -> list[Unit]:
    """The indexes of ``jobs`` as units of a permutation: each block's jobs together, in
    their sorted order, at the place of its first job; every other job alone. A block is
    one group, or where ``group`` names any, its jobs by group (a job of no group alone)."""
    blocks = _together(range(len(jobs)), [block(j) if block else None for j in jobs])
    units = []
    for members in blocks:
        keys = [group(jobs[i]) if group and len(members) > 1 else None for i in members]
        units.append(_together(members, keys) if any(k is not None for k in keys)
                     else [members])
    return units


def _together(indexes: Iterable[int], keys: list[Hashable | None]) -> list[list[int]]:
    """``indexes`` in lists of the same key (not None), each at the place of its first
    member; an index whose key is None alone."""
    out: list[list[int]] = []
    where: dict[Hashable, list[int]] = {}
    for index, key in zip(indexes, keys, strict=True):
        if key is None:
            out.append([index])
        elif key in where:
            where[key].append(index)
        else:
            where[key] = [index]
            out.append(where[key])
    return out


def _draws(units: list[Unit], jobs: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` permutations of the jobs (one a row): the units in a random order, each
    shuffled inside (its groups in a random order, each shuffled inside).

    All rows at once, as sorts on random keys (a unit's, its group's, the job's own): the
    parse of a thousand-job plan draws 64 per phase, which one shuffle call a unit and
    group made about a tenth of an up-to-date dry run."""
    unit_of = np.empty(jobs, dtype=np.intp)
    group_of = np.empty(jobs, dtype=np.intp)
    groups = 0
    for u, unit in enumerate(units):
        for members in unit:
            unit_of[members] = u
            group_of[members] = groups
            groups += 1
    unit_key = rng.random((draws, len(units)))[:, unit_of]
    group_key = rng.random((draws, groups))[:, group_of]
    job_key = rng.random((draws, jobs))
    return np.lexsort((job_key, group_key, unit_key), axis=-1)


def _point_key(job: Job) -> tuple[str, str]:
    return job.experiment, repr(sorted(job.point.items()))


def numeric_axes(jobs: list[Job]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Numeric axis -> (indexes of the jobs that have it, their values' average ranks).

    Axes with fewer than three jobs or a single value cannot line up with time.
    """
    values: dict[str, list[tuple[int, float]]] = {}
    for index, job in enumerate(jobs):
        for axis, value in job.point.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                values.setdefault(axis, []).append((index, float(value)))
    out = {}
    for axis, pairs in values.items():
        index = np.array([i for i, _ in pairs])
        vals = np.array([v for _, v in pairs])
        if len(pairs) >= 3 and len(np.unique(vals)) >= 2:
            out[axis] = (index, _ranks(vals))
    return out


def imbalances(perms: np.ndarray, axes: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """For each permutation (a row of ``perms``; job ``perm[k]`` runs k-th), the largest
    |Spearman rho| * sqrt(n - 1) of place and a numeric axis: each axis's correlation on
    the scale of its own chance spread. All rows at once: a plan of a thousand jobs draws
    64 per phase while Snakemake parses the workflow."""
    place = np.argsort(perms, axis=1)  # place[job]: where it runs
    worst = np.zeros(len(perms))
    for index, ranks in axes.values():
        # places are distinct, so their ranks are plain ordinals (no ties to average)
        place_ranks = np.argsort(np.argsort(place[:, index], axis=1), axis=1) + 1.0
        x = place_ranks - place_ranks.mean(axis=1, keepdims=True)
        y = ranks - ranks.mean()
        den = np.sqrt((x * x).sum(axis=1) * (y * y).sum())
        rho = np.divide((x * y).sum(axis=1), den, out=np.zeros(len(perms)), where=den > 0)
        worst = np.maximum(worst, np.abs(rho) * np.sqrt(len(index) - 1))
    return worst


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their places), as Spearman's rho uses."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    return ((upper - counts + 1 + upper) / 2.0)[inverse]


def priorities(jobs: list[Job], axes_of: dict[str, tuple[str, ...]]) -> dict[JobKey, int]:
    """Snakemake priorities of planned jobs: the first job gets the highest.

    All are negative, so the set-up jobs (priority 0: the test file, native
    builds) run before any measurement.
    """
    return {job.key_on(axes_of[job.experiment]): -1 - place for place, job in enumerate(jobs)}

