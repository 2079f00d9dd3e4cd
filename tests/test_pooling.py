"""``perfgrid pool``: several runs of one machine, runs as the unit, one verdict per claim."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, logit
from scipy.stats import f
from test_aa import claims_folder, row, t_row

from perfgrid.pipeline import cli
from perfgrid.publish import pooling


def runs_of(values: list[float], s: float = 0.03) -> list[pd.DataFrame]:
    """One claim (``claim 0``, >= 1.2) measured in one run per value."""
    return [pd.DataFrame([row(0, value=v, s=s, experiment="toy")]) for v in values]


def test_runs_that_agree_pool_into_a_verdict_narrower_than_one_run() -> None:
    pooled = pooling.pool(runs_of([1.50, 1.52, 1.49, 1.51])).iloc[0]
    one = row(0, value=1.5, s=0.03)
    assert pooled["verdict"] == "reproduced" and pooled["runs"] == pooled["draws"] == 4
    assert 0 <= pooled["i2"] < 1 and pooled["tau"] == 0
    assert pooled["ci_high"] / pooled["ci_low"] < one["ci_high"] / one["ci_low"]


def test_runs_that_disagree_beyond_their_intervals_read_as_depending_on_the_run() -> None:
    """The case of the aligned buffers: 1.54x [1.44, 1.64] on one VM, 0.97x on another."""
    pooled = pooling.pool(runs_of([1.54, 0.97, 1.50, 2.01])).iloc[0]
    assert pooled["verdict"] == pooling.DEPENDS
    assert "disagree beyond their within-run spread" in pooled["reason"]
    assert 0 < pooled["i2"] < 1 and pooled["tau"] > 0.1


def test_q_is_summed_on_variances_read_with_t_and_tested_against_f() -> None:
    """Issue 57: Q on t(2) intervals read with z was 4.8x too small, so "depends on the
    run" almost never fired. Four runs (t(2), se 0.02) scattered by 0.06 on the log
    scale: Q 19.7 on 3 df; with the within variance on 2 df a run, Q / 3 is F(3, 8)."""
    y = np.array([0.0, 0.06, -0.06, 0.03])
    runs = [pd.DataFrame([t_row(0, 1.5 * math.exp(v), 0.02, experiment="toy")]) for v in y]
    pooled = pooling.pool(runs).iloc[0]
    assert pooled["verdict"] == pooling.DEPENDS
    q = float(np.sum((y - y.mean()) ** 2) / 0.02**2)
    assert pooled["q"] == pytest.approx(q)
    assert pooled["q_p"] == pytest.approx(f.sf(q / 3, 3, 8)) and pooled["q_p"] < 0.05


def test_a_claim_listed_twice_in_one_run_is_refused_not_counted_as_another_run() -> None:
    """Issue 60: a claim row listed twice counted as another run (a verdict went from
    inconclusive to reproduced)."""
    one, twice = runs_of([1.5, 1.52])
    with pytest.raises(ValueError, match=r"run b: the claim toy \[python\] 'claim 0' "
                                         r"\(ratio >= 1.2\) is listed more than once"):
        pooling.pool([one, pd.concat([twice, twice])], ["a", "b"])


def test_runs_of_one_boot_are_one_host_draw() -> None:
    """Two runs with one boot_id are combined (inverse variance) and count once."""
    runs = [pd.DataFrame([t_row(0, v, s, experiment="toy", boot_id=boot)])
            for v, s, boot in ((1.5, 0.02, "b1"), (1.6, 0.04, "b1"), (1.4, 0.02, "b2"))]
    pooled = pooling.pool(runs).iloc[0]
    w = np.array([1 / 0.02**2, 1 / 0.04**2])
    first = float(np.sum(w * np.log([1.5, 1.6])) / w.sum())
    assert pooled["value"] == pytest.approx(math.exp((first + math.log(1.4)) / 2))
    assert (pooled["runs"], pooled["draws"]) == (3, 2)


def test_a_share_is_pooled_on_the_logit_scale() -> None:
    shares = [0.95, 0.97, 0.93]
    runs = [pd.DataFrame([t_row(0, p, 0.01, share=True, experiment="toy")]) for p in shares]
    pooled = pooling.pool(runs).iloc[0]
    assert pooled["value"] == pytest.approx(float(expit(np.mean(logit(shares)))))
    assert pooled["scale"] == "logit" and pooled["ci_high"] < 1


def test_one_run_given_twice_is_refused_exit_2(tmp_path, capsys) -> None:
    from synthetic import result_folder

    folder = result_folder(tmp_path / "made", "vm", 1.0)
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    with pytest.raises(ValueError, match="are the same run"):
        pooling.main([str(folder), str(copy)], tmp_path / "out")
    with pytest.raises(SystemExit) as exited:
        cli.main(["pool", str(folder), str(copy), "--out", str(tmp_path / "out")])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(
        f"perfgrid pool: refused, nothing written: {folder} and {copy} are the same run")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("level", ["1e-300", "inf", "1e308"])
def test_a_hostile_confidence_level_is_a_clear_error(tmp_path, capsys, level) -> None:
    """Issue 60: a level of 1e-300 raised ZeroDivisionError in pool (a traceback)."""
    runs = [claims_folder(tmp_path / name, [{**row(0, value=v), "level": float(level)}])
            for name, v in (("one", 1.5), ("two", 1.6))]
    with pytest.raises(SystemExit) as exited:
        cli.main(["pool", *map(str, runs), "--out", str(tmp_path / "out")])
    assert exited.value.code == 1
    assert capsys.readouterr().err == (
        f"perfgrid pool: run {runs[0]}: claim file_read [python] 'claim 0' (ratio >= 1.2): "
        f"column level is {float(level)!r}; allowed: a confidence level from 0.5 to "
        f"0.999999 (blank: 0.95)\n")
    assert not (tmp_path / "out").exists()


def test_pooling_needs_two_runs(tmp_path) -> None:
    with pytest.raises(ValueError, match="two or more runs"):
        pooling.main([str(tmp_path)], tmp_path / "out")
    assert math.isfinite(pooling.DISAGREE)


@pytest.mark.simulation
def test_pooled_intervals_cover_the_machine_s_truth_and_narrow_with_runs() -> None:
    """Through pool: each run's truth drawn around the machine's (between-run sd 0.03),
    its estimate with within-run noise (sd 0.03) and a paired t(2) interval widened by tau
    as a run widens it. For k = 2..6 runs the pooled 95 % interval covers the machine's
    truth 93-97 % of the time, and from k = 4 on its median width is below one run's."""
    rng = np.random.default_rng(60)
    claims, sigma, tau, truth = 1500, 0.03, 0.03, math.log(1.5)
    figures = []
    for k in range(2, 7):
        runs = []
        for _ in range(k):
            y = truth + rng.normal(0, tau, claims) + rng.normal(0, sigma, claims)
            s = sigma * np.sqrt(rng.chisquare(2, claims) / 2)
            runs.append(pd.DataFrame([t_row(i, math.exp(y[i]), s[i], tau, experiment="toy")
                                      for i in range(claims)]))
        pooled = pooling.pool(runs)
        cover = float(((pooled["ci_low"] <= 1.5) & (pooled["ci_high"] >= 1.5)).mean())
        width = float(np.median(np.log(pooled["ci_high"] / pooled["ci_low"])))
        one = float(np.median(np.log(runs[0]["ci_high"] / runs[0]["ci_low"])))
        figures.append((k, cover, width, one))
    print("\n".join(f"k {k}: coverage {c:.3f}, median width {w:.3f} (log), one run's "
                    f"{o:.3f}" for k, c, w, o in figures))
    assert all(0.93 <= c <= 0.97 for _, c, _, _ in figures)
    assert all(w < o for k, _, w, o in figures if k >= 4)
