"""timers (seed E4): the draws, the storm's counts and clean-up, the grid, bad config."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from perfgrid.design import planning
from perfgrid.experiments import get
from perfgrid.experiments import timers as timers_mod
from perfgrid.experiments.timers import EXPERIMENT, SEED_SCALE, analysis
from perfgrid.pipeline import configschema, settings

from helpers import FULL, full_config
from synthetic import LEVELS, expected_verdict, named_claims, row, single

EXP = get("timers")
LOOPS = ["asyncio", "uvloop"]  # uvloop is a hard dependency: no skip


def point(variant="asyncio", seeding="independent", gc_mode="on", tasks=200, rounds=3,
          max_sleep=0.02):
    return {"variant": variant, "seeding": seeding, "gc": gc_mode, "tasks": tasks,
            "rounds": rounds, "max_sleep": max_sleep}


def test_draws_are_seeded_in_range_and_identical_means_one_row():
    a = timers_mod.draws(50, 4, 2.0, "independent", seed=1)
    b = timers_mod.draws(50, 4, 2.0, "independent", seed=1)
    assert a.shape == (50, 4) and np.array_equal(a, b)
    # uniform over [0, 2]: 200 seeded draws reach near both ends, none past them
    assert 0 <= a.min() < 0.1 and 1.9 < a.max() <= 2.0
    assert len({tuple(row) for row in a}) == 50
    same = timers_mod.draws(50, 4, 2.0, "identical", seed=1)
    assert same.shape == (1, 4)
    assert timers_mod.ideal_seconds(same) == pytest.approx(same.sum())
    assert timers_mod.ideal_seconds(a) == pytest.approx(a.sum(axis=1).max())
    with pytest.raises(ValueError, match="seeding"):
        timers_mod.draws(5, 1, 1.0, "shared", seed=1)


#: what a never-seeded Erlang process's random:uniform(10000) draws first, by release:
#: before R15 (stdlib 1.16's random.erl takes the float from the state before the step)
#: and from R15 on (after it; Erlang/OTP 25's random:uniform gives exactly these)
PRE_R15_DRAWS = [924, 4436, 7231, 9459, 5015, 3114, 5975, 9157, 6670, 4772]
R15_DRAWS = [4436, 7231, 9459, 5015, 3114, 5975, 9157, 6670, 4772, 5966]


def test_the_seeds_ideal_is_the_sum_of_old_erlang_randoms_ten_default_draws():
    from fractions import Fraction

    # AS183's first float from the default seed, exactly: pre-R15 it is the seed itself
    first = Fraction(3172, 30269) + Fraction(9814, 30307) + Fraction(20125, 30323)
    first -= int(first)
    assert int(first * 10000) + 1 == PRE_R15_DRAWS[0] == 924
    # one step on: (3172*171) rem 30269 = 27839, and so on
    stepped = Fraction(27839, 30269) + Fraction(21123, 30307) + Fraction(25074, 30323)
    assert float(stepped - int(stepped)) == pytest.approx(0.4435846174457203, abs=1e-15)
    assert analysis.erlang_random_draws(10, 10000) == PRE_R15_DRAWS
    assert analysis.erlang_random_draws(10, 10000, pre_r15=False) == R15_DRAWS
    assert analysis.SEED_SLEEPS_MS == PRE_R15_DRAWS
    assert pytest.approx(56.753) == analysis.SEED_IDEAL_S
    walls = [r["wall_s"] / analysis.SEED_IDEAL_S for r in analysis.SEED_ROWS]
    assert walls == pytest.approx([1.1136, 1.0780], abs=1e-4)
    # R15's sequence (61.795 s) would put the Core2's 61.181 s wall under its own sleeps
    assert sum(R15_DRAWS) / 1000 > analysis.SEED_ROWS[1]["wall_s"] > analysis.SEED_IDEAL_S
    # the wall claim's threshold is the seed's own wall over its ideal
    assert pytest.approx(1.114) == 1 + analysis.NEAR_IDEAL
    assert "56.753 s" in analysis.notes(pd.DataFrame(), EXP)[1]


@pytest.mark.skipif(shutil.which("erl") is None, reason="no erl to cross-check with")
def test_the_draws_match_erlangs_own_random_module_where_it_still_ships():
    script = ('case code:which(random) of non_existing -> io:format("none"); _ -> '
              'io:format("~w", [[random:uniform(10000) || _ <- lists:seq(1, 10)]]) end, '
              'halt().')
    out = subprocess.run(["erl", "-noshell", "-eval", script], capture_output=True,
                         text=True, timeout=60, check=True).stdout.strip()
    if out == "none":
        pytest.skip("this Erlang ships no random module")
    release = subprocess.run(["erl", "-noshell", "-eval", 'io:format("~s", '
                              '[erlang:system_info(otp_release)]), halt().'],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    old = re.match(r"R(\d+)", release)  # R9B .. R16B; from 17 on the bare number
    pre_r15 = old is not None and int(old.group(1)) < 15
    assert json.loads(out) == analysis.erlang_random_draws(10, 10000, pre_r15=pre_r15)


@pytest.mark.parametrize("variant", LOOPS)
@pytest.mark.parametrize("seeding", ["independent", "identical"])
def test_storm_fires_every_timer_no_earlier_than_due_and_leaves_no_task(variant, seeding):
    sleeps = timers_mod.draws(300, 3, 0.03, seeding, seed=2)
    result = timers_mod.storm(sleeps, 300, variant, gc_on=True)
    assert result.lateness.shape == (900,)
    assert not np.isnan(result.lateness).any()
    # uvloop keeps whole milliseconds, so a wake-up may look up to ~1 ms early
    assert result.lateness.min() > -0.0015
    assert result.wall_s >= timers_mod.ideal_seconds(sleeps) - 0.0015
    assert result.spawn_s < result.wall_s
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # the storm's loop is closed, nothing runs


def test_gc_off_disables_collection_during_the_storm_and_restores_it():
    assert gc.isenabled()
    sleeps = timers_mod.draws(2000, 2, 0.01, "independent", seed=3)
    off = timers_mod.storm(sleeps, 2000, "asyncio", gc_on=False)
    assert off.gc_collections == 0
    assert gc.isenabled()
    on = timers_mod.storm(sleeps, 2000, "asyncio", gc_on=True)
    assert on.gc_collections > 0
    gc.disable()
    try:
        timers_mod.storm(sleeps, 2000, "asyncio", gc_on=True)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_failing_task_fails_the_storm_and_cancels_the_others(monkeypatch):
    started = []

    async def failing(sleeps, first, rounds, late, slot, done):
        started.append(slot)
        if slot == 0:
            raise ValueError("boom")
        await asyncio.sleep(30)

    monkeypatch.setattr(timers_mod, "_sleeper", failing)
    sleeps = timers_mod.draws(20, 1, 0.01, "independent", seed=4)
    with pytest.raises(ValueError, match="boom"):
        timers_mod.storm(sleeps, 20, "asyncio", gc_on=False)
    assert len(started) == 20  # every task ran, none is left sleeping its 30 s
    assert gc.isenabled()


@pytest.mark.parametrize("variant", LOOPS)
def test_case_counts_events_and_reports_overhead_lateness_memory(variant):
    case = EXP.prepare(point(variant), {"seed": "5", "progress": "0.01"})
    try:
        seconds = case.time(2)
        seen = case.observed()
    finally:
        case.close()
    assert case.work_per_loop == 600
    assert case.metadata["perfgrid_timer_events"] == 600
    ideal = case.metadata["perfgrid_ideal_s"]
    assert seconds >= 2 * ideal - 0.003
    assert seen["perfgrid_wall_s"] == pytest.approx(seconds / 2)
    assert seen["perfgrid_overhead_s"] == pytest.approx(seen["perfgrid_wall_s"] - ideal)
    assert seen["perfgrid_late_p99_ms"] >= seen["perfgrid_late_mean_ms"] - 1.0
    assert 0 < seen["perfgrid_cpu_pct"] <= 200
    assert seen["perfgrid_peak_rss_mib"] > 10
    assert all(isinstance(v, str | int | float) for v in seen.values())


def test_progress_lines_go_to_stderr(capfd):
    case = EXP.prepare(point(tasks=50, rounds=2, max_sleep=0.2), {"progress": "0.05"})
    try:
        case.time(1)
    finally:
        case.close()
    assert "timer events after" in capfd.readouterr().err


def test_points_cross_product_then_extra_grids_without_duplicates():
    section = {"variants": ["asyncio", "uvloop"], "seeding": ["independent"],
               "gc": [True, "off"], "tasks": [10, 20], "rounds": [2], "max_sleep": [1],
               "extra_grids": [{"variants": ["asyncio"], "tasks": [20, 500]},
                               {"max_sleep": [0.5], "gc": [False]}]}
    points = EXP.points(section, {})
    assert len(points) == 8 + 2 + 4  # (asyncio, 20) is already in the main grid
    assert len({tuple(p.items()) for p in points}) == len(points)
    assert {p["gc"] for p in points} == {"on", "off"}
    assert all(isinstance(p["max_sleep"], float) for p in points)
    assert EXP.parse_point({k: str(v) for k, v in points[0].items()}) == points[0]


def test_full_grid_holds_the_seed_points_at_the_seed_scale():
    config = copy.deepcopy(FULL)
    configschema.validate(config)
    cfg = settings.effective(config, check_disk=False)
    points = planning.grid(cfg, "timers")
    for seeding in ("independent", "identical"):  # the seed's own runtime, and the
        assert point("erlang", seeding, "on", 500_000, 10, 10.0) in points  # fastest loop
        assert point("uvloop", seeding, "off", 500_000, 10, 10.0) in points
    assert planning.measure_of(cfg, "timers", points[0]) == {
        "processes": 1, "values": 1, "warmups": 0, "loops": 1, "target_ci": None,
        "max_seconds": None, "rounds": 1, "counters": "claims"}


def test_uvloop_missing_is_a_skip_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now fails
    assert "uvloop" in EXP.unavailable(point("uvloop"))
    assert EXP.unavailable(point("asyncio")) is None


# -- claims, decided by intervals -------------------------------------------------------
#: each claim of analysis.claims, in order: (its threshold, the side it claims)
TIMER_CLAIMS = {
    "python_near_ideal": (1 + analysis.NEAR_IDEAL, "below"),
    "python_costly": (analysis.COSTLY, "above"),
    "gc_half": (1 - analysis.GC_HALF, "below"),  # gc-off CPU over gc-on CPU
    "uvloop_helps": (analysis.UVLOOP_HELPS, "below"),
    "erlang_near_ideal": (1 + analysis.NEAR_IDEAL, "below"),
    "erlang_costly": (analysis.COSTLY, "above"),
}
CLAIM_NAMES = list(TIMER_CLAIMS)
SEED = {"tasks": 500_000, "rounds": 10, "max_sleep": 10.0}
#: the gc and uvloop pairs: the claim points' tasks, a shorter storm (not the seed's scale)
PAIRS = {"tasks": 100_000, "rounds": 3, "max_sleep": 1.0}


def noise(seed: int, processes: int = 4, cv: float = 0.01) -> np.ndarray:
    n = np.exp(np.random.default_rng(seed).normal(0, cv, processes))
    return n / n.mean()


def storm_row(variant: str, seeding: str, gc_mode: str, scale: dict, *, ideal: float,
              wall: float | None = None, share: float | None = None,
              overhead: float | None = None, cpu: float = 100.0, runtime: str = "python",
              seed: int = 0, processes: int = 4) -> dict:
    """A timers row whose processes observed ``wall`` (or the overhead ``share`` of the
    wall, or the ``overhead`` beyond the ideal) with 1 % noise, means exact."""
    n = noise(seed, processes)
    if share is not None:
        walls = ideal / (1 - share * n)
    elif overhead is not None:
        walls = ideal + overhead * n
    else:
        walls = wall * n
    cpus = cpu * noise(seed + 1000, processes)
    meta = [{"wall_s": float(w), "ideal_s": ideal, "overhead_s": float(w - ideal),
             "overhead_share": float((w - ideal) / w), "cpu_pct": float(c)}
            for w, c in zip(walls, cpus, strict=True)]
    events = scale["tasks"] * scale["rounds"]
    mean = float(walls.mean())
    return row(events / mean, seed=seed, processes=processes, variant=variant,
               seeding=seeding, gc=gc_mode, runtime=runtime, **scale, ideal_s=ideal,
               wall_s=mean, overhead_s=mean - ideal, cpu_pct=cpu, late_mean_ms=5.0,
               late_p99_ms=50.0, peak_rss_mib=900.0, gc_collections=10,
               process_metadata=json.dumps(meta))


def timer_rows(**q: float) -> list[dict]:
    """Rows whose compared quantities are ``q`` (claim name -> value), reproduced by default."""
    q = {"python_near_ideal": 1.02, "python_costly": 0.3, "gc_half": 0.3, "uvloop_helps": 0.5,
         "erlang_near_ideal": 1.02, "erlang_costly": 0.3, **q}
    specs = [
        ("asyncio", "identical", "on", SEED, {"wall": 60.0 * q["python_near_ideal"]}),
        ("asyncio", "independent", "on", SEED, {"share": q["python_costly"]}),
        ("asyncio", "independent", "on", PAIRS, {"overhead": 1.0}),
        ("asyncio", "independent", "off", PAIRS, {"overhead": 1.0, "cpu": 100 * q["gc_half"]}),
        ("uvloop", "independent", "off", PAIRS, {"overhead": q["uvloop_helps"]}),
        ("erlang", "identical", "on", SEED, {"wall": 60.0 * q["erlang_near_ideal"],
                                             "runtime": "erlang"}),
        ("erlang", "independent", "on", SEED, {"share": q["erlang_costly"],
                                               "runtime": "erlang"}),
    ]
    return [storm_row(variant, seeding, gc_mode, scale, ideal=60.0 if scale is SEED else 5.0,
                      seed=i, **kw)
            for i, (variant, seeding, gc_mode, scale, kw) in enumerate(specs)]


def timer_claims(rows: list[dict]) -> dict:
    return named_claims(analysis, rows, CLAIM_NAMES)


#: for each claim, the row it reads beside its baseline: (runtime, variant, seeding, gc)
OWN_ROW = {
    "python_near_ideal": ("python", "asyncio", "identical", "on"),
    "python_costly": ("python", "asyncio", "independent", "on", 10),
    "gc_half": ("python", "asyncio", "independent", "off"),
    "uvloop_helps": ("python", "uvloop", "independent", "off"),
    "erlang_near_ideal": ("erlang", "erlang", "identical", "on"),
    "erlang_costly": ("erlang", "erlang", "independent", "on"),
}


def is_own(r: dict, claim: str) -> bool:
    key = OWN_ROW[claim]
    return (r["runtime"], r["variant"], r["seeding"], r["gc"]) == key[:4] and (
        len(key) == 4 or r["rounds"] == key[4])


def test_default_timers_table_reproduces_every_claim():
    claims = timer_claims(timer_rows())
    assert {c.verdict for c in claims.values()} == {"reproduced"}, [
        c.reason for c in claims.values()]
    assert claims["erlang_near_ideal"].runtime == "erlang"


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("claim", CLAIM_NAMES)
def test_each_timers_claim_is_decided_by_its_interval(claim, level):
    threshold, wants = TIMER_CLAIMS[claim]
    claims = timer_claims(timer_rows(**{claim: threshold * LEVELS[level]}))
    got = claims[claim]
    assert got.verdict == expected_verdict(wants, level)[0], (got.measured, got.reason)
    assert "[" in got.measured and "]" in got.measured
    assert got.ci_low < got.value < got.ci_high
    assert got.threshold == pytest.approx(threshold)
    assert ("lies within" if level == "at" else "wholly") in got.reason
    assert {c.verdict for name, c in claims.items() if name != claim} == {"reproduced"}


MISSING = {
    "python_near_ideal": (lambda r: is_own(r, "python_near_ideal"),
                          "no identical-seeding point at the seed's scale"),
    "python_costly": (lambda r: is_own(r, "python_costly"),
                      "no independent-seeding point at the seed's scale"),
    "gc_half": (lambda r: r["gc"] == "off" and r["variant"] == "asyncio",
                "no gc on/off pair at 100,000 tasks"),
    "uvloop_helps": (lambda r: r["variant"] == "uvloop", "no uvloop/asyncio pair"),
    "erlang_near_ideal": (lambda r: is_own(r, "erlang_near_ideal"),
                          "no identical-seeding point at the seed's scale"),
    "erlang_costly": (lambda r: is_own(r, "erlang_costly"),
                      "no independent-seeding point at the seed's scale"),
}


@pytest.mark.parametrize("claim", CLAIM_NAMES)
def test_each_timers_claim_without_its_rows_is_inconclusive(claim):
    drop, reason = MISSING[claim]
    got = timer_claims([r for r in timer_rows() if not drop(r)])[claim]
    assert got.verdict == "inconclusive" and reason in got.reason, got.reason


@pytest.mark.parametrize("claim", CLAIM_NAMES)
def test_a_nan_rate_makes_its_timers_claim_inconclusive(claim):
    rows = timer_rows()
    for r in rows:
        if is_own(r, claim):
            r["rate"] = float("nan")
    got = timer_claims(rows)[claim]
    assert got.verdict == "inconclusive" and "NaN" in got.reason, got.reason


@pytest.mark.parametrize("claim", CLAIM_NAMES)
def test_a_one_process_row_gives_its_timers_claim_no_interval(claim):
    """The seed-scale points run one process of one value: no interval, no verdict."""
    rows = timer_rows()
    for i, r in enumerate(rows):
        if is_own(r, claim):
            one = json.loads(r["process_metadata"])[:1]
            rows[i] = {**single(r["rate"]), **{k: v for k, v in r.items() if k not in (
                "rate", "work_per_loop", "process_values", "n_processes", "n_values")},
                "process_metadata": json.dumps(one)}
    got = timer_claims(rows)[claim]
    assert got.verdict == "inconclusive"
    assert "no interval" in got.reason and "no interval" in got.measured


def test_hand_made_rows_without_per_process_values_are_inconclusive():
    rows = [{k: v for k, v in r.items() if k != "process_metadata"} for r in timer_rows()]
    claims = timer_claims(rows)
    assert {c.verdict for c in claims.values()} == {"inconclusive"}
    assert all("no per-process values" in c.reason for c in claims.values())
    assert claims["python_near_ideal"].measured.startswith("1.020x [no interval")


def test_best_loop_is_the_one_nearest_its_ideal_and_named():
    rows = timer_rows(python_near_ideal=1.3)
    rows.append(storm_row("asyncio", "identical", "off", SEED, ideal=60.0, wall=60.6, seed=50))
    got = timer_claims(rows)["python_near_ideal"]
    assert got.verdict == "reproduced" and got.value == pytest.approx(1.01)
    assert "asyncio, gc off" in got.measured


def test_uvloop_ratio_is_the_geometric_mean_over_the_pairs():
    rows = timer_rows()
    base = {"ideal": 5.0, "cpu": 100.0}
    for i, (seeding, uv) in enumerate((("identical", 0.1), ("shared", 0.95))):
        rows.append(storm_row("asyncio", seeding, "off", PAIRS, overhead=1.0, seed=60 + i,
                              **base))
        rows.append(storm_row("uvloop", seeding, "off", PAIRS, overhead=uv, seed=70 + i, **base))
    got = timer_claims(rows)["uvloop_helps"]  # pairs at 0.1, 0.5 and 0.95
    assert got.value == pytest.approx((0.1 * 0.5 * 0.95) ** (1 / 3), rel=1e-3)
    assert got.verdict == "reproduced"
    assert "over 3 pair(s)" in got.measured


def test_analysis_plots_and_every_claim_is_inconclusive_without_rows(tmp_path):
    table = pd.DataFrame(timer_rows())
    written = analysis.plot(table, tmp_path, get("timers"))
    assert {p.stem for p in written} >= {"overhead_by_tasks", "lateness_by_tasks",
                                         "seed_scale_wall_vs_ideal"}
    assert all(c.verdict == "inconclusive" for c in analysis.claims(table.iloc[0:0], get("timers")))
    assert len(analysis.claims(table[table["runtime"] != "erlang"], get("timers"))) == 4
    assert analysis.notes(table, EXPERIMENT)


def test_seed_scale_claims_read_the_storms_measured_in_rounds():
    """At the seed's scale uvloop and Erlang are claim points (3 rounds each); a plain
    asyncio storm run once there is shown in the notes, not compared."""
    assert EXPERIMENT.used_by_claims({**SEED_SCALE, "variant": "uvloop", "gc": "off",
                                      "seeding": "independent"})
    assert not EXPERIMENT.used_by_claims({**SEED_SCALE, "variant": "asyncio", "gc": "on",
                                          "seeding": "identical"})
    rows = timer_rows(python_near_ideal=1.3, python_costly=0.02)  # asyncio: both fail
    rows.append(storm_row("uvloop", "identical", "off", SEED, ideal=60.0, wall=61.2, seed=80))
    rows.append(storm_row("uvloop", "independent", "off", SEED, ideal=60.0, share=0.2,
                          seed=81))
    claims = timer_claims(rows)
    near, costly = claims["python_near_ideal"], claims["python_costly"]
    assert near.verdict == "reproduced" and near.value == pytest.approx(1.02, rel=1e-3)
    assert costly.verdict == "reproduced" and costly.value == pytest.approx(0.2, rel=1e-2)
    assert "best loop/GC of uvloop gc off:" in near.criterion


def test_a_seed_scale_storm_gets_no_more_rounds_than_the_design_and_fewer_the_longer_it_lasts():
    """Properties of the full config, not its numbers: the 100,000-task claim points get
    the design's claims.rounds; no seed-scale storm more; a storm with independent seeding
    (90-140 s) never more than one with identical seeding (~65 s) of the same loop."""
    cfg = full_config()
    design = cfg["timers"]["measure"]["claims"]["rounds"]

    def rounds(variant: str, seeding: str, **point) -> int:
        return planning.rounds_of(cfg, "timers", {"gc": "on", **(point or SEED_SCALE),
                                                  "variant": variant, "seeding": seeding})

    assert rounds("asyncio", "independent", tasks=100_000, rounds=3, max_sleep=1.0) == design
    for variant in ("erlang", "uvloop"):
        assert 2 <= rounds(variant, "independent") <= rounds(variant, "identical") <= design
