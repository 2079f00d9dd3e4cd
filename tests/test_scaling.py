"""Scaling models: Amdahl and USL fits recover known parameters from noisy samples."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfgrid.analysis import scaling

from synthetic import row, single

COUNTS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]


def _table(rates: np.ndarray, counts: list[int], **columns) -> pd.DataFrame:
    return pd.DataFrame([row(float(r), cv=0.01, seed=i, workers=w, experiment="t",
                             runtime="python", variant="x", **columns)
                         for i, (w, r) in enumerate(zip(counts, rates, strict=True))])


def test_usl_parameters_are_recovered_within_ten_percent_from_noisy_samples():
    """USL with contention 0.05 and coherency 0.001, 1 % multiplicative noise per point."""
    truth = scaling.usl(np.array(COUNTS), 1000.0, 0.05, 0.001)
    noisy = truth * np.exp(np.random.default_rng(20261130).normal(0, 0.01, len(COUNTS)))
    fitted = scaling.fits(_table(noisy, COUNTS), ("variant", "workers"))
    assert len(fitted) == 1
    f = fitted.iloc[0]
    print(f"sigma {f.usl_sigma:.4f} [{f.usl_sigma_ci_low:.4f}, {f.usl_sigma_ci_high:.4f}], "
          f"kappa {f.usl_kappa:.5f} [{f.usl_kappa_ci_low:.5f}, {f.usl_kappa_ci_high:.5f}], "
          f"peak {f.usl_peak_workers:.1f}, better {f.better_model} ({f.better_by})")
    assert abs(f.usl_sigma / 0.05 - 1) <= 0.10
    assert abs(f.usl_kappa / 0.001 - 1) <= 0.10
    assert f.usl_sigma_ci_low <= f.usl_sigma <= f.usl_sigma_ci_high
    assert f.usl_kappa_ci_low <= f.usl_kappa <= f.usl_kappa_ci_high
    assert abs(f.usl_peak_workers / math.sqrt(0.95 / 0.001) - 1) <= 0.10
    assert f.better_model == "usl"
    assert f.measured_peak_workers in (24, 32, 48)


def test_amdahl_data_prefers_amdahl_and_has_no_peak():
    truth = scaling.amdahl(np.array(COUNTS), 500.0, 0.1)
    fitted = scaling.fits(_table(truth, COUNTS), ("variant", "workers")).iloc[0]
    assert abs(fitted.amdahl_s / 0.1 - 1) <= 0.05
    assert fitted.better_model == "amdahl"
    assert fitted.usl_kappa < 1e-4
    assert fitted.efficiency_at_max < 0.2  # 64 workers at s = 0.1: about 0.14 of linear


def test_three_counts_fit_but_the_better_model_is_undecided_and_said_why():
    counts = [1, 2, 4]
    fitted = scaling.fits(_table(scaling.usl(np.array(counts), 100.0, 0.2, 0.05), counts),
                          ("variant", "workers")).iloc[0]
    assert fitted.better_model == "undecided"
    assert "AICc needs at least 5" in fitted.better_by


def test_groups_need_three_counts_and_a_row_without_interval_gives_no_parameter_interval():
    rows = [single(100.0 * w, workers=w, variant="a", experiment="t", runtime="python")
            for w in (1, 2, 4)]
    rows += [row(50.0, workers=w, variant="b", experiment="t", runtime="python")
             for w in (1, 2)]
    fitted = scaling.fits(pd.DataFrame(rows), ("variant", "workers"))
    assert list(fitted["variant"]) == ["a"]
    assert "no interval" in fitted.iloc[0]["ci_reason"]
    assert "usl_sigma_ci_low" not in fitted


def test_table_and_figure_are_written(tmp_path):
    counts = [1, 2, 4, 8, 16]
    table = pd.concat([_table(scaling.usl(np.array(counts), 100.0, s, 0.01), counts,
                              binding=b) for s, b in ((0.1, "none"), (0.3, "spread"))])
    written = scaling.write(table, ("variant", "binding", "workers"), tmp_path, "t")
    assert {p.name for p in written} >= {"scaling.csv", "scaling.png", "scaling.svg"}
    shown = scaling.summary(pd.read_csv(tmp_path / "scaling.csv"), ("variant", "binding",
                                                                    "workers"))
    assert list(shown["binding"]) == ["none", "spread"]
    assert shown["USL σ (contention)"].str.match(r"0\.\d+ \[0\.\d+, 0\.\d+\]").all()
    assert scaling.write(table, ("variant", "binding"), tmp_path / "none", "t") == []
