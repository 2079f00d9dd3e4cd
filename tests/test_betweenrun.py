"""The between-run component: estimated from recorded runs, held by every verdict."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from perfgrid import betweenrun

pytestmark = pytest.mark.between_run

def _runs(values: dict[str, list[float]], half: float = 0.02, experiment: str = "toy"):
    """A recorded-runs table: per claim, its estimate in each run, each with an interval
    ``half`` wide on the log scale at 95 %."""
    rows = []
    for claim, estimates in values.items():
        for run, value in enumerate(estimates):
            rows.append({"run": f"r{run}", "date": f"2026-12-0{run + 1}",
                         "experiment": experiment, "runtime": "python", "hypothesis": claim,
                         "value": value, "ci_low": value * math.exp(-half),
                         "ci_high": value * math.exp(half), "level": 0.95})
    return pd.DataFrame(rows)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch):
    def use(frame: pd.DataFrame) -> None:
        betweenrun.tau.cache_clear()
        monkeypatch.setattr(betweenrun, "recorded", lambda: frame)

    yield use
    betweenrun.tau.cache_clear()


def test_runs_that_agree_within_their_intervals_give_no_between_run_component(recorded) -> None:
    recorded(_runs({"a": [1.00, 1.005, 0.998], "b": [2.0, 2.01, 1.995]}))
    assert betweenrun.tau("toy") == 0.0


def test_runs_that_differ_beyond_their_intervals_give_about_their_spread(recorded) -> None:
    """Ten claims, eight runs each, each run off the truth by a normal draw of sd 0.10 on
    the log scale, each interval far narrower: tau comes out near 0.10."""
    rng = np.random.default_rng(3)
    recorded(_runs({f"c{i}": list(np.exp(rng.normal(0, 0.10, 8))) for i in range(10)},
                   half=0.01))
    assert 0.08 < betweenrun.tau("toy") < 0.12


def test_an_experiment_without_two_runs_of_a_claim_takes_the_pooled_estimate(recorded) -> None:
    rng = np.random.default_rng(5)
    frame = pd.concat([_runs({f"c{i}": list(np.exp(rng.normal(0, 0.1, 6))) for i in range(6)},
                             half=0.01),
                       _runs({"once": [1.0]}, experiment="lonely")])
    recorded(frame)
    assert betweenrun.source("lonely") == "pooled"
    assert betweenrun.tau("lonely") == betweenrun.tau("toy") > 0
    assert "lonely" in betweenrun.describe(pd.DataFrame({"experiment": ["lonely"]}))


def test_the_shipped_recorded_runs_load_and_give_each_experiment_a_component() -> None:
    """The recorded runs ship as package data, and every experiment gets a finite, sane
    between-run standard deviation from them (its own, or the pooled one)."""
    from perfgrid import experiments

    frame = betweenrun.recorded()
    assert not frame.empty and frame["run"].nunique() >= 2
    assert frame["host"].str.contains(betweenrun.MACHINE_KIND).all()
    assert set(frame["experiment"]) <= set(experiments.available())
    for name in experiments.available():
        assert 0.0 <= betweenrun.tau(name) < 1.0
