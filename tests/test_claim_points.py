"""The points each experiment declares for its claims are the ones its claims compare."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from snakemake.utils import validate

from perfgrid import analysis, experiments, settings
from perfgrid.paths import REPO

from synthetic import row, single


def _full_config() -> dict:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return settings.effective(cfg, check_disk=False)


@pytest.mark.parametrize("name", [n for n in experiments.available()
                                  if experiments.get(n).claim_points])
def test_claims_use_only_declared_claim_points(name: str) -> None:
    """On the full grid, only declared claim points get an interval: no claim may then
    lack one for a rate it compares (it would have compared an undeclared point)."""
    experiment = experiments.get(name)
    rows = []
    for i, point in enumerate(settings.grid(_full_config(), name)):
        extra = {**point, "experiment": name, "runtime": experiment.runtime(point)}
        if experiment.used_by_claims(point):
            rows.append(row(1e6 * (1 + i % 7), processes=3, values=2, seed=i, **extra))
        else:
            rows.append(single(1e6 * (1 + i % 7), seed=i, **extra))
    claims = analysis.module(name).claims(pd.DataFrame(rows))
    assert claims
    lacking = [c.hypothesis for c in claims if "one value" in c.reason]
    assert not lacking, lacking


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
    claimed = settings.measure_of(cfg, "file_read", point)
    other = settings.measure_of(cfg, "file_read", {**point, "block_size": 4096})
    # three rounds of one process each, spread over the run; the rest: one job of 3 values
    assert (claimed["rounds"], claimed["processes"], claimed["values"]) == (3, 1, 1)
    assert (other["rounds"], other["processes"], other["values"]) == (1, 1, 3)
    assert settings.rounds_of(cfg, "file_read", point) == 3
    assert settings.rounds_of(cfg, "file_read", {**point, "block_size": 4096}) == 1
    assert "claims" not in settings.measure_of(cfg, "file_read", point)
