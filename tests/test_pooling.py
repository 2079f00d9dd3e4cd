"""``perfgrid pool``: several runs of one machine, runs as the unit, one verdict per claim."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pandas as pd
import pytest
from test_aa import row

from perfgrid import pooling


def runs_of(values: list[float], s: float = 0.03) -> list[pd.DataFrame]:
    """One claim (``claim 0``, >= 1.2) measured in one run per value."""
    return [pd.DataFrame([row(0, value=v, s=s, experiment="toy")]) for v in values]


def test_runs_that_agree_pool_into_a_verdict_narrower_than_one_run() -> None:
    pooled = pooling.pool(runs_of([1.50, 1.52, 1.49, 1.51])).iloc[0]
    one = row(0, value=1.5, s=0.03)
    assert pooled["verdict"] == "reproduced" and pooled["runs"] == 4
    assert 0 <= pooled["i2"] < 1 and pooled["tau"] == 0
    assert pooled["ci_high"] / pooled["ci_low"] < one["ci_high"] / one["ci_low"]


def test_runs_that_disagree_beyond_their_intervals_read_as_depending_on_the_run() -> None:
    """The case of the aligned buffers: 1.54x [1.44, 1.64] on one VM, 0.97x on another."""
    pooled = pooling.pool(runs_of([1.54, 0.97, 1.50, 2.01])).iloc[0]
    assert pooled["verdict"] == pooling.DEPENDS
    assert "disagree beyond their intervals" in pooled["reason"]
    assert 0 < pooled["i2"] < 1 and pooled["tau"] > 0.1


@pytest.mark.simulation
def test_a_pooled_interval_covers_the_machines_truth_with_a_between_run_spread() -> None:
    """Runs drawn around a machine's truth with a between-run sd of 0.08, each with a
    within-run se of 0.02: the pooled t interval over five runs covers the truth about
    95 % of the time (DerSimonian-Laird with t(runs - 1))."""
    rng = np.random.default_rng(41)
    truth, hits, draws = 1.4, 0, 400
    for _ in range(draws):
        runs = runs_of(list(truth * np.exp(rng.normal(0, 0.08, 5) + rng.normal(0, 0.02, 5))),
                       s=0.02)
        pooled = pooling.pool(runs).iloc[0]
        hits += pooled["ci_low"] <= truth <= pooled["ci_high"]
    assert 0.92 <= hits / draws <= 0.99


def test_one_run_given_twice_is_refused(tmp_path) -> None:
    from synthetic import result_folder

    folder = result_folder(tmp_path / "made", "vm", 1.0)
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    with pytest.raises(ValueError, match="are the same run"):
        pooling.main([str(folder), str(copy)], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_pooling_needs_two_runs(tmp_path) -> None:
    with pytest.raises(ValueError, match="two or more runs"):
        pooling.main([str(tmp_path)], tmp_path / "out")
    assert math.isfinite(pooling.DISAGREE)
