"""The order benchmark jobs run in: no numeric axis lines up with time, and drift averages out.

The plan (perfgrid.design.order) is what Snakemake follows: every benchmark job's
priority is its place in it (the pipeline test checks the recorded start
order against the plan). Here the plan itself is checked on the whole
config/quick.yaml grid, and a drifting machine is simulated on a toy
experiment of one axis with 8 equal levels.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from scipy.special import ndtri
from scipy.stats import spearmanr

from perfgrid import experiments
from perfgrid.design import order, planning
from perfgrid.design.model import Job
from perfgrid.kit.paths import REPO
from perfgrid.pipeline import configschema, settings

#: the numeric axes of the grids (the issue names workers, block size, chains, concurrency)
NUMERIC_AXES = ("workers", "block_size", "chains", "concurrency", "tasks", "total")
SEEDS = range(1, 11)


def quick_config(**order_keys) -> dict:

    cfg = yaml.safe_load((REPO / "config" / "quick.yaml").read_text())
    cfg["order"] = order_keys
    configschema.validate(cfg)
    return settings.effective(cfg, check_disk=False)


def correlations(plan: list[Job]) -> dict[str, tuple[float, int]]:
    """Axis -> (Spearman's rho between place in the plan and the axis value, jobs with it)."""
    out = {}
    for axis in NUMERIC_AXES:
        pairs = [(place, float(job.point[axis])) for place, job in enumerate(plan)
                 if axis in job.point]
        if len(pairs) >= 3 and len({v for _, v in pairs}) >= 2:  # quick's chains: one value
            places, values = zip(*pairs, strict=True)
            out[axis] = (float(spearmanr(places, values).statistic), len(pairs))
    return out


def unrelated_bound(n: int, level: float) -> float:
    """Two-sided ``level`` bound of Spearman's rho of ``n`` unrelated pairs: about normal,
    with variance 1/(n - 1)."""
    return float(ndtri(0.5 + level / 2) / np.sqrt(max(n - 1, 1)))


#: how often :func:`test_shuffled_order_is_unrelated_to_every_numeric_axis` may fail by
#: chance, over all its checks: the grid (a new experiment's jobs) changes the shuffle
FAMILY_LEVEL = 0.01


def test_shuffled_order_is_unrelated_to_every_numeric_axis():
    """Each seed's rank correlation, and its mean over the seeds, within the bounds of an
    unrelated order (variance 1/(n - 1), its mean's 1/(seeds (n - 1))), at a level shared
    out over every check: a grid with other jobs (a seventh experiment's) fails by chance
    at most 1 % of the time, where a fixed bound of 0.1 on the mean was under one standard
    deviation for an axis of nine jobs."""
    jobs = planning.jobs(quick_config())
    assert len(jobs) > 50
    checks = (len(SEEDS) + 1) * len(NUMERIC_AXES)
    level = 1 - FAMILY_LEVEL / checks
    per_axis: dict[str, list[tuple[float, int]]] = {}
    for seed in SEEDS:
        for axis, (rho, n) in correlations(order.planned(jobs, True, seed)).items():
            bound = unrelated_bound(n, level)
            assert abs(rho) <= bound, f"seed {seed}: {axis} rho {rho:.3f} beyond {bound:.3f}"
            per_axis.setdefault(axis, []).append((rho, n))
    assert {"workers", "block_size", "concurrency"} <= set(per_axis)
    for axis, pairs in per_axis.items():
        mean, n = float(np.mean([rho for rho, _ in pairs])), pairs[0][1]
        bound = unrelated_bound(n, level) / np.sqrt(len(pairs))
        print(f"shuffled: {axis}: mean rho over {len(pairs)} seeds {mean:+.3f} "
              f"(bound {bound:.3f})")
        assert abs(mean) <= bound, f"{axis}: mean rho {mean:.3f} beyond {bound:.3f}"


def test_sorted_order_is_the_grid_order():
    cfg = quick_config(shuffle=False)
    jobs = planning.jobs(cfg)
    plan = order.planned(jobs, False, 0)
    assert plan == jobs  # experiment by experiment, each grid in its own order
    for axis, (rho, n) in correlations(plan).items():
        print(f"sorted: {axis}: rho {rho:+.3f} over {n} jobs")


def test_the_seed_decides_the_order_and_is_repeatable():
    jobs = planning.jobs(quick_config())
    assert order.planned(jobs, True, 7) == order.planned(jobs, True, 7)
    assert order.planned(jobs, True, 7) != order.planned(jobs, True, 8)
    assert sorted(map(repr, order.planned(jobs, True, 7))) == sorted(map(repr, jobs))


def test_priorities_put_the_first_job_first_and_all_below_setup_jobs():
    cfg = quick_config()
    plan = order.planned(planning.jobs(cfg), True, 3)
    axes = {e: experiments.get(e).axes for e in cfg["experiments"]}
    prio = order.priorities(plan, axes)
    ranked = sorted(prio, key=prio.get, reverse=True)
    assert ranked == [job.key_on(axes[job.experiment]) for job in plan]
    assert max(prio.values()) < 0  # rules without a priority (builds, test file) have 0


# -- drift: a toy experiment, one axis of 8 equal levels, +10 % over the run ----------------
LEVELS = 8
DRIFT = 0.10


def measured_effect(shuffle: bool, seed: int, rounds: int = 1) -> float:
    """Last level over first, minus one, when each job measures 1 + DRIFT * (its time)."""
    jobs = [Job("toy", {"level": level}, r) for r in range(1, rounds + 1)
            for level in range(LEVELS)]
    plan = order.planned(jobs, shuffle, seed)
    span = len(plan) - 1
    by_level: dict[int, list[float]] = {}
    for place, job in enumerate(plan):
        by_level.setdefault(job.point["level"], []).append(1 + DRIFT * place / span)
    return float(np.mean(by_level[LEVELS - 1]) / np.mean(by_level[0]) - 1)


def test_sorted_order_turns_drift_into_an_axis_effect():
    effect = measured_effect(shuffle=False, seed=0)
    print(f"sorted: effect {effect:+.1%}")
    assert effect == pytest.approx(DRIFT, abs=0.01)


def test_shuffled_order_averages_drift_out_over_seeds():
    effects = [measured_effect(shuffle=True, seed=s) for s in range(1, 21)]
    print(f"shuffled: mean effect over 20 seeds {np.mean(effects):+.2%}, "
          f"each within {min(effects):+.1%}..{max(effects):+.1%}")
    assert abs(np.mean(effects)) <= 0.02


def test_interleaved_rounds_keep_each_seeds_drift_effect_small():
    effects = [measured_effect(shuffle=True, seed=s, rounds=4) for s in range(1, 21)]
    print(f"4 rounds: effects {min(effects):+.2%}..{max(effects):+.2%}")
    assert max(abs(e) for e in effects) <= 0.03


# -- rounds at some points only (measure.claims.rounds) ------------------------------------------
def mixed_jobs(points: int = 60, with_rounds: int = 12, rounds: int = 3) -> list[Job]:
    """``points`` points of one axis; the first ``with_rounds`` measured in ``rounds`` jobs."""
    return [Job("toy", {"level": p}, r) for r in range(1, rounds + 1)
            for p in range(points) if r == 1 or p < with_rounds]


@pytest.mark.parametrize("seed", range(1, 6))
def test_rounds_of_some_points_lie_a_phase_apart_and_the_rest_spread_evenly(seed):
    jobs = mixed_jobs()
    plan = order.planned(jobs, True, seed)
    assert sorted(map(repr, plan)) == sorted(map(repr, jobs))
    third = len(plan) / 3
    place = {(job.point["level"], job.round): i for i, job in enumerate(plan)}
    for p in range(12):  # round r of a point with rounds runs in the r-th third of the run
        for r in (1, 2, 3):
            assert (r - 1) * third - 1 <= place[(p, r)] < r * third + 1, (p, r, place[(p, r)])
    # the points measured once share the thirds evenly (16 each, the 48 spread by the seed)
    once = [place[(p, 1)] for p in range(12, 60)]
    counts = np.histogram(once, bins=[0, third, 2 * third, len(plan)])[0]
    assert list(counts) == [16, 16, 16]


def test_sorted_order_keeps_points_measured_once_in_the_first_phase():
    plan = order.planned(mixed_jobs(), False, 0)
    assert [job.round for job in plan] == [1] * 60 + [2] * 12 + [3] * 12
    assert plan == sorted(plan, key=lambda job: (job.round, job.point["level"]))


def test_imbalances_of_many_draws_match_spearmans_rho_of_each_draw():
    """The vectorised measure equals scipy's Spearman rho, axis by axis (ties included)."""
    rng = np.random.default_rng(7)
    jobs = [Job("x", {"block": int(b), "workers": int(w), "name": "a"}, 1)
            for b, w in zip(rng.choice([1, 4, 16, 64], 40), rng.integers(1, 9, 40), strict=True)]
    jobs.append(Job("x", {"other": 3}, 1))  # an axis only some jobs have: too few
    axes = order.numeric_axes(jobs)
    assert set(axes) == {"block", "workers"}
    perms = np.array([rng.permutation(len(jobs)) for _ in range(16)])
    expected = []
    for perm in perms:
        place = np.argsort(perm)
        expected.append(max(
            abs(spearmanr(place[index], [jobs[i].point[axis] for i in index]).statistic)
            * np.sqrt(len(index) - 1) for axis, (index, _) in axes.items()))
    assert order.imbalances(perms, axes) == pytest.approx(expected, rel=1e-12)


def test_a_block_runs_back_to_back_inside_its_phase() -> None:
    """The claim points of one experiment in one round run consecutively, shuffled among
    themselves, the block at a shuffled place among the other jobs of its phase."""
    points = [{"workers": w, "binding": b} for w in (1, 2, 4, 8) for b in ("none", "single")]
    jobs = [Job("x", p, r) for r in (1, 2, 3) for p in points if p["workers"] <= 2]
    jobs += [Job("x", p, 1) for p in points if p["workers"] > 2]

    def block(job: Job):
        return ("x", job.round) if job.point["workers"] <= 2 else None

    plan = order.planned(jobs, True, 7, block=block)
    assert sorted(map(repr, plan)) == sorted(map(repr, jobs))
    assert plan == order.planned(jobs, True, 7, block=block)
    for r in (1, 2, 3):
        places = [i for i, job in enumerate(plan) if block(job) == ("x", r)]
        assert len(places) == 4 and places == list(range(places[0], places[0] + 4)), places
    firsts = [[job.point for job in plan if block(job) == ("x", r)] for r in (1, 2, 3)]
    assert len({repr(f) for f in firsts}) > 1  # shuffled inside, differently each round
    assert plan != order.planned(jobs, True, 7)  # the blocks changed the plan


def test_experiments_of_fewer_rounds_keep_their_blocks_and_span_the_run() -> None:
    """One experiment's claim points in 8 rounds, another's in 3: the run has 8 phases, and
    the 3-round experiment's round r runs in one block (all its points back to back) in
    phases 1, 5 and 8, so its claims still pair within seconds and sample the whole run.
    (Before, each of its points started in a phase of its own: a block fell apart.)"""
    jobs = [Job("a", {"workers": w}, r) for r in range(1, 9) for w in (1, 2)]
    jobs += [Job("b", {"level": v}, r) for r in (1, 2, 3) for v in range(4)]
    jobs += [Job("c", {"size": s}, 1) for s in range(40)]

    def block(job: Job):
        return None if job.experiment == "c" else (job.experiment, job.round)

    plan = order.planned(jobs, True, 11, block=block)
    assert sorted(map(repr, plan)) == sorted(map(repr, jobs))
    a_rounds = [job.round for job in plan if job.experiment == "a"]
    assert a_rounds == sorted(a_rounds)  # phase r holds round r of the 8-round points
    for r in (1, 2, 3):
        places = [i for i, job in enumerate(plan) if block(job) == ("b", r)]
        assert places == list(range(places[0], places[0] + 4)), (r, places)
    phase_of_place = {}
    for i, job in enumerate(plan):  # an 8-round job's round is the phase it runs in
        if job.experiment == "a":
            phase_of_place[i] = job.round
    b_phases = []
    for r in (1, 2, 3):
        first = next(i for i, job in enumerate(plan) if block(job) == ("b", r))
        before = [p for i, p in phase_of_place.items() if i < first]
        after = [p for i, p in phase_of_place.items() if i > first]
        b_phases.append((max(before, default=1), min(after, default=8)))
    assert b_phases[0][0] <= 1 <= b_phases[0][1]
    assert b_phases[1][0] <= 5 <= b_phases[1][1]
    assert b_phases[2][0] <= 8 <= b_phases[2][1]


def test_a_blocks_groups_run_back_to_back_inside_it() -> None:
    """Inside a block, the jobs of one group (the points one claim compares) run
    consecutively, the groups in a shuffled order; without groups the plan is as before."""
    points = [{"variant": v, "workers": w} for v in ("a", "b", "c") for w in (1, 2, 4)]
    jobs = [Job("x", p, r) for r in (1, 2, 3) for p in points]
    jobs += [Job("y", {"size": s}, 1) for s in range(12)]

    def block(job: Job):
        return ("x", job.round) if job.experiment == "x" else None

    def group(job: Job):
        return job.point["variant"] if job.point["variant"] != "c" else None

    plan = order.planned(jobs, True, 5, block=block, group=group)
    assert sorted(map(repr, plan)) == sorted(map(repr, jobs))
    for r in (1, 2, 3):
        places = [i for i, job in enumerate(plan) if block(job) == ("x", r)]
        assert places == list(range(places[0], places[0] + 9))
        for variant in ("a", "b"):
            inside = [i for i in places if plan[i].point["variant"] == variant]
            assert inside == list(range(inside[0], inside[0] + 3)), (r, variant, inside)
    firsts = {tuple(plan[i].point["variant"] for i, job in enumerate(plan)
                    if block(job) == ("x", r)) for r in (1, 2, 3)}
    assert len(firsts) > 1  # the groups' order is drawn again each round
    assert order.planned(jobs, True, 5, block=block, group=lambda job: None) == \
        order.planned(jobs, True, 5, block=block)


def test_the_full_runs_claim_groups_put_a_claims_sides_seconds_apart() -> None:
    """In the full config's plan, each experiment's claim groups are contiguous in every
    round: the jobs between dd and readinto at 1 MiB, or a spawn primitive's bindings,
    are those of their own group only."""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    configschema.validate(cfg)
    cfg = settings.effective(cfg, check_disk=False)
    plan = order.planned(planning.jobs(cfg), True, cfg["order"]["seed"],
                         block=planning.claim_block(cfg), group=planning.claim_group)
    blocks = planning.claim_block(cfg)
    seen: dict = {}
    for place, job in enumerate(plan):
        key = blocks(job)
        if key is None:
            continue
        group = planning.claim_group(job)
        if group is not None:
            seen.setdefault((key, group), []).append(place)
    assert seen
    for (key, group), places in seen.items():
        assert places == list(range(places[0], places[0] + len(places))), (key, group)
    groups = {(key[0], group) for key, group in seen}
    assert ("file_read", "1 MiB") in groups and ("spawn", "asyncio_task") in groups


def test_draws_order_units_groups_and_jobs_uniformly() -> None:
    """Each drawn row keeps a unit's jobs, and a group's inside it, together, and every
    unit, group and job is equally likely to come first: the draws are sorts on random
    keys (perfgrid.design.order._draws), and a key mixed up between levels would show here."""
    units = [[[0, 1, 2]], [[3]], [[4], [5, 6]]]  # a block, a job alone, a block of 2 groups
    rows = order._draws(units, 7, 6000, np.random.default_rng(3))
    assert rows.shape == (6000, 7)
    assert (np.sort(rows, axis=1) == np.arange(7)).all()
    for row in rows:
        place = {job: k for k, job in enumerate(row)}
        for members in ([0, 1, 2], [4, 5, 6], [5, 6]):
            spots = sorted(place[m] for m in members)
            assert spots == list(range(spots[0], spots[0] + len(members))), row
    firsts = np.bincount([{0: 0, 1: 0, 2: 0, 3: 1}.get(row[0], 2) for row in rows],
                         minlength=3) / len(rows)
    assert np.allclose(firsts, 1 / 3, atol=0.03), firsts  # the units' order
    block = rows[np.isin(rows, [0, 1, 2])].reshape(-1, 3)[:, 0]
    assert np.allclose(np.bincount(block, minlength=3) / len(rows), 1 / 3, atol=0.03)
    second = rows[np.isin(rows, [4, 5, 6])].reshape(-1, 3)[:, 0]
    assert np.isclose(np.mean(second == 4), 1 / 2, atol=0.03)  # the groups' order
