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
        betweenrun.estimate.cache_clear()
        monkeypatch.setattr(betweenrun, "recorded", lambda: frame)

    yield use
    betweenrun.estimate.cache_clear()


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
    assert betweenrun.estimate("lonely")[1] == "pooled"
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


def test_a_claim_recorded_often_enough_has_its_own_component(recorded) -> None:
    """An absolute cost that follows the host spreads between runs; a ratio measured side
    by side in one run does not. Each recorded in eight runs, each gets its own tau; a
    claim recorded fewer than OWN_RUNS times takes the experiment's, between the two."""
    rng = np.random.default_rng(11)
    recorded(_runs({"cost": list(np.exp(rng.normal(0, 0.3, 8))),
                    "ratio": list(np.exp(rng.normal(0, 0.003, 8))),
                    "rare": list(np.exp(rng.normal(0, 0.003, betweenrun.OWN_RUNS - 1)))},
                   half=0.02))
    cost, where_cost = betweenrun.estimate("toy", "python", "cost")
    ratio, where_ratio = betweenrun.estimate("toy", "python", "ratio")
    rare, where_rare = betweenrun.estimate("toy", "python", "rare")
    assert where_cost == where_ratio == "claim" and where_rare == "experiment"
    assert 0.15 < cost < 0.5 and ratio < 0.01
    assert ratio < rare == betweenrun.tau("toy") < cost
    text = betweenrun.describe(pd.DataFrame({"experiment": ["toy"] * 3,
                                             "runtime": ["python"] * 3,
                                             "hypothesis": ["cost", "ratio", "rare"]}))
    assert "2 of 3 claims their own" in text


def test_a_run_s_claims_are_recorded_with_their_within_run_intervals(recorded) -> None:
    """perfgrid record takes the between-run part a claims table's intervals hold back out
    (stats.Widened), so the record holds what one run saw, and its tau reads it again."""
    from perfgrid import stats

    inner = stats.Bounds(2.0, lambda level: (1.8, 2.2), "t", "", "over rounds")
    widened = stats.Widened(inner, 0.1)
    low, high = widened.interval(0.95)
    claims = pd.DataFrame([{"experiment": "toy", "runtime": "python", "hypothesis": "h",
                            "value": 2.0, "ci_low": low, "ci_high": high, "level": 0.95,
                            "tau": 0.1, "verdict": "reproduced", "measured": "2.00x"},
                           {"experiment": "toy", "runtime": "python", "hypothesis": "none",
                            "value": float("nan"), "ci_low": float("nan"),
                            "ci_high": float("nan"), "level": 0.95, "tau": 0.1,
                            "verdict": "inconclusive", "measured": "n/a"}])
    rows = betweenrun.record_rows(claims, "T", "2026-12-05", "AMD EPYC guest", "a test")
    assert list(rows.columns) == betweenrun.COLUMNS and len(rows) == 2
    assert rows["ci_low"].iloc[0] == pytest.approx(1.8)
    assert rows["ci_high"].iloc[0] == pytest.approx(2.2)
    assert rows[["ci_low", "ci_high"]].iloc[1].isna().all()


def test_perfgrid_record_adds_a_run_once(tmp_path) -> None:
    """``perfgrid record RUN`` appends the run's claims under its label and start date,
    its host from machine.json, and refuses the same run a second time, the record
    unchanged."""
    import json

    from perfgrid import cli
    from perfgrid.analysis import Claim
    from perfgrid.report.claims import write_claims

    run = tmp_path / "results" / "vm"
    run.mkdir(parents=True)
    claim = Claim("toy", "h", "ratio >= 1.2", "1.50x", "reproduced", "python", "made up",
                  1.5, 1.4, 1.6, ">=", 1.2, "x", tau=0.0)
    write_claims(pd.DataFrame([claim.as_row()]), run / "claims.csv")
    (run / "machine.json").write_text(json.dumps({"cpus_logical": 2, "cpu_model": "AMD EPYC",
                                                  "hostname": "vm", "memory_bytes": 2**34}))
    (run / "run.json").write_text(json.dumps({"started": 1796461741.2}))
    record = tmp_path / "recorded.csv"
    cli.main(["record", str(run), "--label", "T1", "--note", "a test", "--to", str(record)])
    first = pd.read_csv(record)
    assert list(first.columns) == betweenrun.COLUMNS and len(first) == 1
    assert first.loc[0, "host"].startswith("2-CPU AMD EPYC")
    assert first.loc[0, "date"] == "2026-12-05"
    assert (first.loc[0, "ci_low"], first.loc[0, "ci_high"]) == (1.4, 1.6)
    with pytest.raises(SystemExit, match="already recorded"):
        cli.main(["record", str(run), "--label", "T1", "--note", "again", "--to", str(record)])
    assert pd.read_csv(record).equals(first)
