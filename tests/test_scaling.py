"""Scaling models: Amdahl and USL fits recover known parameters from noisy samples, and fit
only the worker counts up to the CPUs the run could use."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfgrid.analyse import scaling

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
    fitted = scaling.fits(_table(noisy, COUNTS), ("variant", "workers"), cpus=64)
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
    fitted = scaling.fits(_table(truth, COUNTS), ("variant", "workers"), cpus=None).iloc[0]
    assert abs(fitted.amdahl_s / 0.1 - 1) <= 0.05
    assert fitted.better_model == "amdahl"
    assert fitted.usl_kappa < 1e-4
    assert fitted.efficiency_at_max < 0.2  # 64 workers at s = 0.1: about 0.14 of linear
    assert fitted.fit_note == scaling.UNKNOWN_CPUS and fitted.not_fitted_workers == ""


def test_three_counts_fit_but_the_better_model_is_undecided_and_said_why():
    counts = [1, 2, 4]
    fitted = scaling.fits(_table(scaling.usl(np.array(counts), 100.0, 0.2, 0.05), counts),
                          ("variant", "workers"), cpus=4).iloc[0]
    assert fitted.better_model == "undecided"
    assert "AICc needs at least 5" in fitted.better_by


def test_groups_need_three_counts_and_a_row_without_interval_gives_no_parameter_interval():
    rows = [single(100.0 * w, workers=w, variant="a", experiment="t", runtime="python")
            for w in (1, 2, 4)]
    rows += [row(50.0, workers=w, variant="b", experiment="t", runtime="python")
             for w in (1, 2)]
    fitted = scaling.fits(pd.DataFrame(rows), ("variant", "workers"), cpus=4)
    assert list(fitted["variant"]) == ["a"]
    assert "no interval" in fitted.iloc[0]["ci_reason"]
    assert "usl_sigma_ci_low" not in fitted


def test_table_and_figure_are_written(tmp_path):
    counts = [1, 2, 4, 8, 16]
    table = pd.concat([_table(scaling.usl(np.array(counts), 100.0, s, 0.01), counts,
                              binding=b) for s, b in ((0.1, "none"), (0.3, "spread"))])
    written = scaling.write(table, ("variant", "binding", "workers"), tmp_path, "t", cpus=16)
    assert {p.name for p in written} >= {"scaling.csv", "scaling.png", "scaling.svg"}
    shown = scaling.summary(pd.read_csv(tmp_path / "scaling.csv"), ("variant", "binding",
                                                                    "workers"))
    assert list(shown["binding"]) == ["none", "spread"]
    assert shown["USL σ (contention)"].str.match(r"0\.\d+ \[0\.\d+, 0\.\d+\]").all()
    assert scaling.write(table, ("variant", "binding"), tmp_path / "none", "t", cpus=16) == []


# -- only the counts up to the run's CPUs are fitted -------------------------------
POWERS = [1, 2, 4, 8, 16]


def _written(tmp_path, cpus: int) -> tuple[list, pd.DataFrame, pd.DataFrame]:
    """scaling.write on one USL group at 1 to 16 workers: (written, scaling.csv, summary)."""
    table = _table(scaling.usl(np.array(POWERS), 100.0, 0.1, 0.01), POWERS)
    written = scaling.write(table, ("variant", "workers"), tmp_path, "t", cpus=cpus)
    csv = pd.read_csv(tmp_path / "scaling.csv", keep_default_na=False, na_values=[""])
    return written, csv, scaling.summary(csv, ("variant", "workers"))


def test_two_cpus_leave_too_few_counts_no_fit_and_the_row_and_figure_say_why(tmp_path):
    written, csv, shown = _written(tmp_path, cpus=2)
    assert {p.name for p in written} >= {"scaling.csv", "scaling.png"}
    row = csv.iloc[0]
    assert row.fitted_workers == "1,2" and row.not_fitted_workers == "4,8,16"
    assert row.fit_note == "too few worker counts up to the 2 CPUs: 1, 2 (3 needed)"
    assert "usl_sigma" not in csv and "amdahl_s" not in csv
    line = shown.iloc[0]
    assert line["CPU limit"] == "2" and line["not fitted (above the CPUs)"] == "4, 8, 16"
    assert line["better model"].startswith("no fit: too few worker counts up to the 2 CPUs")
    assert line["USL σ (contention)"] == "" and line["measured peak N"] == ""


def test_sixteen_cpus_fit_every_count(tmp_path):
    _, csv, shown = _written(tmp_path, cpus=16)
    row = csv.iloc[0]
    assert row.fitted_workers == "1,2,4,8,16" and pd.isna(row.not_fitted_workers)
    assert row.counts == 5 and pd.isna(row.fit_note)
    assert abs(row.usl_sigma / 0.1 - 1) <= 0.1
    assert shown.iloc[0]["CPU limit"] == "16"
    assert shown.iloc[0]["not fitted (above the CPUs)"] == "none"


def test_four_cpus_fit_one_two_four_and_mark_eight_and_sixteen_not_fitted(tmp_path):
    written, csv, shown = _written(tmp_path, cpus=4)
    assert "scaling.png" in {p.name for p in written}
    row = csv.iloc[0]
    assert row.fitted_workers == "1,2,4" and row.not_fitted_workers == "8,16"
    assert row.counts == 3 and row.workers == "1,2,4,8,16"
    assert math.isfinite(row.usl_sigma) and row.measured_peak_workers == 4
    # efficiency against linear at the largest fitted count (4), not at 16
    assert abs(row.efficiency_at_max - scaling.usl(4, 1.0, 0.1, 0.01) / 4) <= 0.02
    line = shown.iloc[0]
    assert line["workers fitted"] == "1, 2, 4" and line["not fitted (above the CPUs)"] == "8, 16"
    assert line["better model"].startswith("undecided")


def test_the_cpu_count_comes_from_the_rows_binding_plans():
    table = pd.DataFrame({"binding_plan": ["0|0", "0,1|0,1|0,1", "1|0|1|0", "+S 2:2 +sbt db",
                                           None]})
    assert scaling.recorded_cpus(table) == 2
    assert scaling.recorded_cpus(table.iloc[[0]]) == 1  # all on one CPU: binding single
    assert scaling.recorded_cpus(table.iloc[[3, 4]]) is None  # an Erlang VM's flags only
    assert scaling.recorded_cpus(pd.DataFrame({"rate": [1.0]})) is None
