"""timers (seed E4): the draws, the storm's counts and clean-up, the grid, bad config."""

from __future__ import annotations

import asyncio
import copy
import gc
import sys

import numpy as np
import pandas as pd
import pytest
import yaml
from snakemake.utils import validate

from perfgrid import settings
from perfgrid.analysis import timers as analysis
from perfgrid.experiments import get
from perfgrid.experiments import timers as timers_mod

from conftest import REPO

EXP = get("timers")
HAVE_UVLOOP = timers_mod.uvloop_missing() is None
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
FULL = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
LOOPS = ["asyncio", pytest.param("uvloop", marks=pytest.mark.skipif(
    not HAVE_UVLOOP, reason="uvloop not installed"))]


def point(variant="asyncio", seeding="independent", gc_mode="on", tasks=200, rounds=3,
          max_sleep=0.02):
    return {"variant": variant, "seeding": seeding, "gc": gc_mode, "tasks": tasks,
            "rounds": rounds, "max_sleep": max_sleep}


def test_draws_are_seeded_in_range_and_identical_means_one_row():
    a = timers_mod.draws(50, 4, 2.0, "independent", seed=1)
    b = timers_mod.draws(50, 4, 2.0, "independent", seed=1)
    assert a.shape == (50, 4) and np.array_equal(a, b)
    assert a.min() >= 0 and a.max() <= 2.0
    assert len({tuple(row) for row in a}) == 50
    same = timers_mod.draws(50, 4, 2.0, "identical", seed=1)
    assert same.shape == (1, 4)
    assert timers_mod.ideal_seconds(same) == pytest.approx(same.sum())
    assert timers_mod.ideal_seconds(a) == pytest.approx(a.sum(axis=1).max())
    with pytest.raises(ValueError, match="seeding"):
        timers_mod.draws(5, 1, 1.0, "shared", seed=1)


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
    validate(config, SCHEMA)
    cfg = settings.effective(config, check_disk=False)
    points = settings.grid(cfg, "timers")
    for seeding in ("independent", "identical"):
        assert point("asyncio", seeding, "on", 500_000, 10, 10.0) in points
    assert cfg["timers"]["measure"] == {"processes": 1, "values": 1, "warmups": 0, "loops": 1}


def test_uvloop_missing_is_a_skip_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now fails
    assert "uvloop" in EXP.unavailable(point("uvloop"))
    assert EXP.unavailable(point("asyncio")) is None


BAD = [
    ("timers.gc", ["maybe"], "gc"),
    ("timers.variants", ["trio"], "variants"),
    ("timers.variants", [], "variants"),
    ("timers.seeding", ["shared"], "seeding"),
    ("timers.tasks", [0], "tasks"),
    ("timers.tasks", [5_000_000], "tasks"),
    ("timers.rounds", [1.5], "rounds"),
    ("timers.max_sleep", [0], "max_sleep"),
    ("timers.max_sleep", ["10s"], "max_sleep"),
    ("timers.extra_grids", [{}], "extra_grids"),
    ("timers.extra_grids", [{"colour": ["blue"]}], "colour"),
    ("timers.extra_grids", [{"tasks": [-1]}], "tasks"),
    ("timers.measure", {"values": 0}, "values"),
    ("timers.progress_s", 0, "progress_s"),
    ("timers.loops", ["asyncio"], "loops"),
]


@pytest.mark.parametrize("key, value, needle", BAD, ids=[f"{k}={v}" for k, v, _ in BAD])
def test_schema_rejects_bad_values_naming_the_key(key, value, needle):
    config = copy.deepcopy(FULL)
    section, leaf = key.split(".")
    config[section][leaf] = value
    with pytest.raises(Exception) as info:
        validate(config, SCHEMA)
    text = str(info.value) + str(info.value.__cause__ or "")
    assert needle in text


def test_analysis_plots_and_decides_claims_from_a_table(tmp_path):
    rows = []
    for seeding, ideal, wall in (("identical", 60.0, 63.0), ("independent", 90.0, 150.0)):
        for variant, gc_mode, cpu in (("asyncio", "on", 100.0), ("asyncio", "off", 40.0),
                                      ("uvloop", "off", 30.0)):
            for tasks in (10_000, 500_000):
                rows.append({
                    "variant": variant, "seeding": seeding, "gc": gc_mode, "tasks": tasks,
                    "rounds": 10, "max_sleep": 10.0, "runtime": "python", "ideal_s": ideal,
                    "wall_s": wall, "overhead_s": wall - ideal, "rate": 5e6 / wall,
                    "late_mean_ms": 5.0, "late_p99_ms": 50.0, "cpu_pct": cpu,
                    "peak_rss_mib": tasks / 500, "gc_collections": 10})
    table = pd.DataFrame(rows)
    written = analysis.plot(table, tmp_path)
    assert {p.stem for p in written} >= {"overhead_by_tasks", "lateness_by_tasks",
                                         "seed_scale_wall_vs_ideal"}
    verdicts = [c.verdict for c in analysis.claims(table)]
    assert verdicts == ["reproduced", "reproduced", "reproduced", "not reproduced"]
    assert all(c.verdict == "inconclusive" for c in analysis.claims(table.iloc[0:0]))
    assert analysis.notes(table)
