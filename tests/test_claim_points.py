"""The points each experiment declares for its claims are the ones its claims compare."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from perfgrid import experiments
from perfgrid.analyse import analysis
from perfgrid.design import planning
from perfgrid.kit.paths import REPO
from perfgrid.pipeline import configschema, settings

from synthetic import per_process, row, single


def _full_config() -> dict:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    configschema.validate(cfg)
    return settings.effective(cfg, check_disk=False)


#: claims whose points are measured once on purpose, by experiment; none since the
#: seed-scale timers claims are decided at the seed's event rate, in rounds
ONE_VALUE_BY_DESIGN: dict[str, list[str]] = {}


def _observations(point: dict, processes: int, seed: int) -> dict:
    """A timers row's per-process observations, so its claims read them (others: none)."""
    if "tasks" not in point:
        return {}
    ideal = 10.0 * point["rounds"] * float(point["max_sleep"]) / 2
    means = {"wall_s": ideal * 1.1, "overhead_s": ideal * 0.1, "cpu_pct": 50.0}
    return {"ideal_s": ideal, **means, "process_metadata": json.dumps(
        per_process(processes, seed=seed, **means))}


@pytest.mark.parametrize("name", [n for n in experiments.available()
                                  if experiments.get(n).claim_points])
def test_claims_use_only_declared_claim_points(name: str) -> None:
    """On the full grid, only declared claim points get an interval: no claim may then
    lack one for a rate it compares (it would have compared an undeclared point), except
    those measured once by design."""
    experiment = experiments.get(name)
    rows = []
    for i, point in enumerate(planning.grid(_full_config(), name)):
        extra = {**point, "experiment": name, "runtime": experiment.runtime(point)}
        if experiment.used_by_claims(point):
            extra.update(_observations(point, 3, i))
            rows.append(row(1e6 * (1 + i % 7), processes=3, values=2, seed=i, **extra))
        else:
            extra.update(_observations(point, 1, i))
            rows.append(single(1e6 * (1 + i % 7), seed=i, **extra))
    claims = analysis.module(name).claims(pd.DataFrame(rows), experiment)
    assert claims
    lacking = [c.hypothesis for c in claims if "one value" in c.reason]
    expected = ONE_VALUE_BY_DESIGN.get(name, [])
    assert len(lacking) == len(expected), lacking
    assert all(h.startswith(e) for h, e in zip(lacking, expected, strict=True)), lacking


def test_a_point_matches_a_pattern_axis_by_axis() -> None:
    file_read = experiments.get("file_read")
    assert file_read.used_by_claims({"variant": "dd", "block_size": 1 << 20, "cache": "warm",
                                     "workers": 1, "binding": "none"})
    assert not file_read.used_by_claims({"variant": "dd", "block_size": 1 << 20,
                                         "cache": "cold", "workers": 1, "binding": "none"})
    assert not file_read.used_by_claims({"variant": "dd", "block_size": 4096, "cache": "warm",
                                         "workers": 1, "binding": "none"})


def test_claim_points_get_the_claims_repetitions() -> None:
    cfg = _full_config()
    point = {"variant": "read", "cache": "warm", "binding": "none", "workers": 1,
             "block_size": 1024}
    claimed = planning.measure_of(cfg, "file_read", point)
    other = planning.measure_of(cfg, "file_read", {**point, "block_size": 4096})
    # the design's rounds (blocks) of one process each, spread over the run, the same every
    # run (no looks); the rest: one job of 2 values
    design = cfg["file_read"]["measure"]["claims"]["rounds"]
    assert design >= 3
    assert (claimed["rounds"], claimed["processes"], claimed["values"]) == (design, 1, 1)
    assert (other["rounds"], other["processes"], other["values"]) == (1, 1, 2)
    assert planning.rounds_of(cfg, "file_read", point) == design
    assert planning.rounds_of(cfg, "file_read", {**point, "block_size": 4096}) == 1
    # Erlang's pinned 1 KiB reads (~18 s a round) keep to at most 3 rounds; its unbound
    # ones (2.4-35 s a round, by placement) no claim reads: the sweep's one job
    erlang = {**point, "variant": "erlang_read", "binding": "single"}
    assert planning.rounds_of(cfg, "file_read", erlang) == min(3, design)
    assert planning.rounds_of(cfg, "file_read", {**erlang, "binding": "none"}) == 1
    assert planning.rounds_of(cfg, "file_read", {**erlang, "binding": "none",
                                                 "block_size": 1 << 20}) == design
    assert "claims" not in planning.measure_of(cfg, "file_read", point)
