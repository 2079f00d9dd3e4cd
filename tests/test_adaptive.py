"""Adaptive repetition: batches until the interval meets its target or the cap stops them.

The harness's loop (perfgrid.measure.bench.measure_point) runs here on synthetic
batches and a fake clock, so each stopping rule is exercised exactly; the
pipeline test with rounds runs the real thing.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pyperf
import pytest

from perfgrid.analyse import aggregate, stats
from perfgrid.design import planning
from perfgrid.experiments import get
from perfgrid.kit.paths import Layout
from perfgrid.measure import bench
from perfgrid.pipeline import config_errors, configschema, settings


class FakeClock:
    """time.monotonic for the harness: each batch costs ``per_process`` s per process."""

    def __init__(self, per_process: float) -> None:
        self.now = 0.0
        self.per_process = per_process

    def monotonic(self) -> float:
        return self.now


def fake_batches(monkeypatch, clock: FakeClock, between_cv: float, seed: int = 1) -> list[int]:
    """Replace the batch runner: each process gives 3 values around its own mean."""
    rng = np.random.default_rng(seed)
    sizes: list[int] = []

    def run_batch(args, processes, loops, index):
        sizes.append(processes)
        clock.now += clock.per_process * processes
        runs = []
        for _ in range(processes):
            mean = 0.01 * math.exp(rng.normal(0, between_cv))
            values = list(mean * np.exp(rng.normal(0, 0.01, 3)))
            runs.append(pyperf.Run(values, metadata={"name": "p", "loops": 1,
                                                     "perfgrid_work_per_loop": 1.0},
                                   collect_metadata=False))
        return pyperf.Benchmark(runs)

    monkeypatch.setattr(bench, "_run_batch", run_batch)
    monkeypatch.setattr(bench.time, "monotonic", clock.monotonic)
    return sizes


def args(target: float | None, cap: float | None, processes: int = 2) -> argparse.Namespace:
    return argparse.Namespace(target_ci=target, max_seconds=cap, processes=processes, loops=1,
                              values=3, warmups=0)


def test_a_quiet_point_stops_as_soon_as_its_interval_meets_the_target(monkeypatch):
    clock = FakeClock(per_process=1.0)
    sizes = fake_batches(monkeypatch, clock, between_cv=0.01)
    merged, outcome = bench.measure_point(args(target=0.05, cap=60, processes=3))
    assert outcome["perfgrid_converged"] is True
    assert "met the target" in outcome["perfgrid_stop"]
    assert bench.point_interval(merged).ci_rel <= 0.05
    assert sizes == [3]


def test_a_noisy_point_adds_batches_until_it_converges(monkeypatch):
    clock = FakeClock(per_process=1.0)
    sizes = fake_batches(monkeypatch, clock, between_cv=0.05)
    merged, outcome = bench.measure_point(args(target=0.03, cap=1000))
    assert outcome["perfgrid_converged"] is True
    assert len(sizes) > 1 and merged.get_nrun() == sum(sizes)
    assert all(b <= a for a, b in zip(np.cumsum(sizes), sizes[1:], strict=False))  # <= doubling
    assert bench.point_interval(merged).ci_rel <= 0.03


def test_the_cap_stops_a_noisy_point_and_says_so(monkeypatch):
    clock = FakeClock(per_process=2.0)
    sizes = fake_batches(monkeypatch, clock, between_cv=0.3)
    merged, outcome = bench.measure_point(args(target=0.01, cap=20))
    assert outcome["perfgrid_converged"] is False
    assert outcome["perfgrid_stop"].startswith("cap of 20 s")
    assert outcome["perfgrid_measure_seconds"] <= 20  # the next batch would not have fitted
    assert sum(sizes) == merged.get_nrun() == 10


def test_a_single_batch_longer_than_the_cap_is_not_called_converged(monkeypatch):
    clock = FakeClock(per_process=50.0)
    sizes = fake_batches(monkeypatch, clock, between_cv=0.3)
    _, outcome = bench.measure_point(args(target=0.03, cap=30, processes=1))
    assert sizes == [1]
    assert outcome["perfgrid_converged"] is False
    assert "one batch of 1 processes took 50 s, over the cap of 30 s" in outcome["perfgrid_stop"]


def test_without_a_target_one_batch_is_the_whole_point(monkeypatch):
    clock = FakeClock(per_process=1.0)
    sizes = fake_batches(monkeypatch, clock, between_cv=0.3)
    _, outcome = bench.measure_point(args(target=None, cap=None, processes=4))
    assert sizes == [4]
    assert "perfgrid_converged" not in outcome


@pytest.mark.parametrize(("processes", "ci", "target", "expected"), [
    (2, 0.06, 0.03, 2),     # needs 8 in all: at most doubling
    (4, 0.033, 0.03, 1),    # needs 4.84: one more
    (10, 0.04, 0.03, 8),    # needs 17.8: 8 more
    (3, float("nan"), 0.03, 3),  # no interval yet: double
])
def test_next_batch_aims_at_the_target_and_at_most_doubles(processes, ci, target, expected):
    assert bench.next_batch(processes, ci, target) == expected


def test_a_target_without_a_cap_is_refused_naming_the_key():
    cfg = {"experiments": ["syscall"], "measure": {"target_ci": 0.03, "max_seconds": None}}
    with pytest.raises(config_errors.ConfigError,
                       match=r"syscall\.measure\.max_seconds: null while "
                             r"target_ci is 0\.03; allowed: a number"):
        settings.effective(cfg, check_disk=False)


def test_claim_rounds_make_more_jobs_at_claim_points_only():
    cfg = {"experiments": ["syscall"],
           "syscall": {"variants": ["python"], "calls": ["getuid", "getppid"], "workers": [1, 2],
                       "bindings": ["none", "spread"],
                       "measure": {"max_seconds": 30, "rounds": 1,
                                   "claims": {"rounds": 3, "max_seconds": 30}}}}
    cfg = settings.effective(cfg, check_disk=False)
    jobs = planning.jobs(cfg)
    rounds: dict[str, int] = {}
    for job in jobs:
        key = json.dumps(job.point, sort_keys=True)
        rounds[key] = max(rounds.get(key, 0), job.round)
    claimed = {json.dumps(p, sort_keys=True) for p in planning.grid(cfg, "syscall")
               if get("syscall").used_by_claims(p)}
    assert claimed and len(rounds) == 8
    assert {k: r for k, r in rounds.items() if r == 3}.keys() == claimed
    assert len(jobs) == 8 + 2 * len(claimed)
    assert planning.rounds_of(cfg, "syscall") == 3  # the results are folders of rounds
    point = json.loads(next(iter(claimed)))
    words = planning.measure_args(cfg, "syscall", point)
    assert words[words.index("--max-seconds") + 1] == "10"  # the cap shared by 3 rounds
    other = {**point, "call": "getppid"}
    words = planning.measure_args(cfg, "syscall", other)
    assert words[words.index("--max-seconds") + 1] == "30"


def test_rounds_split_the_target_and_the_cap_between_their_jobs():
    cfg = {"syscall": {"measure": {"processes": 2, "target_ci": 0.03, "max_seconds": 60,
                                   "rounds": 4}}}
    words = planning.measure_args(cfg, "syscall", None)
    assert words[words.index("--target-ci") + 1] == "0.06"
    assert words[words.index("--max-seconds") + 1] == "15"


# -- rounds in the table ---------------------------------------------------------------------
EXP = get("syscall")
POINT = {"variant": "python", "call": "getuid", "binding": "none", "workers": 1}


def write_round(root: Path, round_: int, means: list[float], stop: str) -> Path:
    path = root / Layout.for_host("t").raw_result("syscall", POINT, EXP.axes, round=round_)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"name": "x", "loops": 1, "perfgrid_experiment": "syscall",
            "perfgrid_point": json.dumps(POINT, sort_keys=True), "perfgrid_runtime": "python",
            "perfgrid_work_per_loop": 1, "perfgrid_round": round_, "perfgrid_stop": stop,
            "perfgrid_converged": round_ != 2, "perfgrid_measure_seconds": 10.0,
            "perfgrid_started": 100.0 * round_, "perfgrid_finished": 100.0 * round_ + 10,
            **{f"perfgrid_{k}": v for k, v in POINT.items()}}
    runs = [pyperf.Run([m, m * 1.01], metadata=meta, collect_metadata=False) for m in means]
    pyperf.Benchmark(runs).dump(str(path))
    return path


def test_rounds_of_a_point_merge_into_one_row_with_rounds_as_the_outer_level(tmp_path):
    paths = [write_round(tmp_path, r, [1e-6 * r, 1.1e-6 * r], f"stop {r}") for r in (1, 2, 3)]
    table = aggregate.build_table("syscall", paths)
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["n_rounds"], row["n_processes"], row["n_values"]) == (3, 6, 12)
    assert row["process_rounds"] == [1, 1, 2, 2, 3, 3]
    assert row["ci_method"] == stats.METHOD_ROUNDS
    assert not row["converged"]  # round 2 missed its target
    assert (row["started"], row["finished"], row["measure_seconds"]) == (100, 310, 30)
    assert row["job_seconds"] == 30  # the rounds' own jobs, not the 210 s they span
    assert "round 2: stop 2" in row["stop"]
    # rounds, not processes, set the spread: the interval is as wide as 3 round means allow
    rounds = [np.mean([1e-6 * r, 1.1e-6 * r, 1.01e-6 * r, 1.111e-6 * r]) for r in (1, 2, 3)]
    assert row["ci_rel"] > np.std(np.log(rounds), ddof=1) / math.sqrt(3)


def test_a_round_file_at_another_rounds_path_stops_the_table(tmp_path):
    one = write_round(tmp_path, 1, [1e-6], "s")
    two = write_round(tmp_path, 2, [1e-6], "s")
    one.write_bytes(two.read_bytes())
    with pytest.raises(ValueError, match="records round 2, but its path stands for round 1"):
        aggregate.build_table("syscall", [one, two])


# -- through the pipeline: rounds, adaptive batches and the planned order ---------------------
ROUNDS_CONFIG = {
    "host": "rounds",
    "experiments": ["syscall"],
    # plumbing, not a measurement: never wait, and no noise profile
    "noise": {"busy_share": 1.0, "profile": {"blocks": 0}},
    "order": {"shuffle": True, "seed": 5},
    "syscall": {
        "variants": ["python"], "calls": ["getuid"], "workers": [1, 2],
        "bindings": ["none", "spread"],  # spread: the points claims compare
        # caps of 1.2 s a point (0.6 s a round): room for a second batch, where a
        # point's first misses the target, and no more (the loop's rules: the tests above);
        # no counting passes (tests/test_counters.py runs one)
        "measure": {"processes": 2, "values": 2, "warmups": 0, "loops": 200,
                    "target_ci": 0.2, "max_seconds": 1.2, "rounds": 1, "counters": "none",
                    "claims": {"processes": 2, "values": 2, "target_ci": 0.2,
                               "max_seconds": 1.2, "rounds": 2}},
    },
}


@pytest.mark.pipeline
def test_rounds_run_in_the_planned_order_and_merge_in_the_table(tmp_path):
    import pandas as pd
    import yaml

    from perfgrid.design import order
    from perfgrid.design.model import Job
    from perfgrid.experiments import get as get_experiment

    from helpers import REPO, snakemake, write_config

    config = write_config(tmp_path, ROUNDS_CONFIG)
    # up to the table, all this test reads (the tree fixture's run checks plots and report)
    done = snakemake(tmp_path, "--cores", "2", "--until", "table", config=config)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    root = tmp_path / "results" / "rounds"
    table = pd.read_csv(root / "tables" / "syscall.csv")
    assert len(table) == 4
    claimed = table[table["binding"] == "spread"]  # two rounds; the rest one job each
    assert list(claimed["n_rounds"]) == [2, 2] and set(table["n_rounds"]) == {1, 2}
    assert set(claimed["ci_method"]) <= {stats.METHOD_ROUNDS, stats.METHOD_NONE}
    assert claimed["stop"].str.contains("round 1:").all()
    assert (claimed["n_processes"] >= 4).all()  # two rounds of at least 2 processes each
    assert table["converged"].notna().all()
    # the jobs started in the planned order (their Snakemake priorities)
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg.update(ROUNDS_CONFIG)
    configschema.validate(cfg)
    cfg = settings.effective(cfg, check_disk=False)
    plan = order.planned(planning.jobs(cfg), True, 5, block=planning.claim_block(cfg))
    axes = get_experiment("syscall").axes
    started = []
    for path in (root / "raw").rglob("*.json"):
        meta = pyperf.Benchmark.load(str(path)).get_metadata()
        point = json.loads(meta["perfgrid_point"])
        started.append((meta["perfgrid_started"], Job("syscall", point, meta[
            "perfgrid_round"]).key_on(axes)))
    assert [key for _, key in sorted(started)] == [job.key_on(axes) for job in plan]
    assert json.loads((root / "run.json").read_text())["order"] == {"shuffle": True, "seed": 5}
