"""The between-run component per claim and machine kind (perfgrid.analyse.betweenrun) and the
records it is estimated from (perfgrid.publish.recording)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from perfgrid.analyse import betweenrun
from perfgrid.publish import recording

pytestmark = pytest.mark.between_run


def _records(tau: float, sigma: float, runs: int, claims: int, rng: np.random.Generator,
             kind: str = "AMD EPYC x2", design: str = "d1", unit_quantity: str = "ratio",
             df: float = 2.0) -> pd.DataFrame:
    """Record rows: each claim's run estimates off its truth by tau, each with a t(df)
    within-run standard error of true ``sigma``."""
    rows = []
    for c in range(claims):
        truth = float(rng.normal(0, 0.5))
        for r in range(runs):
            se = sigma * math.sqrt(rng.chisquare(df) / df)
            y = truth + rng.normal(0, tau) + rng.normal(0, sigma)
            rows.append({"run_id": f"run{r}", "started": 1000.0 + r, "date": "2026-12-06",
                         "commit": "c", "machine_kind": kind, "boot_id": f"b{r}",
                         "design": design, "ledger": "l", "config": "config.yaml",
                         "experiment": "toy", "runtime": "python", "hypothesis": f"c{c}",
                         "quantity": unit_quantity, "scale": "log", "value": math.exp(y),
                         "se": se, "df": df, "method": "paired", "verdict": ""})
    return pd.DataFrame(rows, columns=betweenrun.COLUMNS)


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Use ``frame`` as the shipped records (and no legacy record)."""
    def use(frame: pd.DataFrame) -> Path:
        path = tmp_path / "shipped.csv"
        frame.to_csv(path, index=False)
        monkeypatch.setattr(betweenrun, "shipped_path", lambda: path)
        betweenrun.clear()
        return path

    monkeypatch.setattr(betweenrun, "legacy", lambda kind: pd.DataFrame())
    yield use
    betweenrun.clear()


def _tau(run: betweenrun.Judging, claim: str = "c0") -> betweenrun.Component:
    with betweenrun.judging(run):
        return betweenrun.component("toy", "python", claim)


def test_the_moment_estimator_reads_t2_intervals_without_bias() -> None:
    """tau 0.03 over 10 runs of t(2) errors: the unweighted moment estimate of tau^2 is
    unbiased (its mean within 15 % of 0.0009), and it is zero far less often than the old
    z-read DerSimonian-Laird's 53 %."""
    rng = np.random.default_rng(1)
    found = [betweenrun.moments(_records(0.03, 0.02, 10, 1, rng)).tau2 for _ in range(3000)]
    mean = float(np.mean(found))
    print(f"mean tau^2 {mean:.5f} (truth 0.00090), share <= 0: {np.mean(np.array(found) <= 0):.3f}")
    assert abs(mean - 0.0009) <= 0.15 * 0.0009
    assert np.mean(np.array(found) <= 0) < 0.3


def test_tau_comes_from_records_of_the_run_s_kind_and_design_only(shipped) -> None:
    rng = np.random.default_rng(2)
    shipped(pd.concat([_records(0.10, 0.01, 6, 8, rng),
                       _records(0.0, 0.01, 6, 8, rng, kind="Intel Xeon x2"),
                       _records(0.5, 0.01, 6, 8, rng, design="other")]))
    amd = _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1", started=5000.0))
    assert amd.source == "claim" and 0.05 < amd.tau < 0.16 and "AMD EPYC x2" in amd.words
    intel = _tau(betweenrun.Judging(kind="Intel Xeon x2", design="d1", started=5000.0))
    assert intel.tau < 0.03
    none = _tau(betweenrun.Judging(kind="AMD EPYC 9654 x16", design="d1", started=5000.0))
    assert none.source == "none" and none.tau == 0.0
    assert "NO record of this machine kind and design" in none.words


def test_records_all_from_one_guest_say_so_and_the_report_repeats_it(shipped) -> None:
    """Runs on one guest (one boot id) are one draw of a host: their spread is that of
    runs on that guest, and the words, and so claims.csv and the report, say so."""
    rng = np.random.default_rng(4)
    frame = _records(0.05, 0.01, 3, 6, rng)
    shipped(frame.assign(boot_id="df7aaa11-6040"))
    one = _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1", started=5000.0))
    assert "all on one guest (boot id df7aaa11)" in one.words
    claims = pd.DataFrame({"tau_from": [one.words], "machine_kind": ["AMD EPYC x2"],
                           "design": ["d1"]})
    with betweenrun.judging(betweenrun.Judging(kind="AMD EPYC x2", design="d1")):
        assert "the spread between guests is not in it" in betweenrun.describe(claims)
    shipped(frame)  # a boot id per run: guests differ
    assert "guest" not in _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1",
                                                  started=5000.0)).words
    shipped(frame.assign(boot_id=""))  # unknown boots: nothing said either way
    assert "guest" not in _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1",
                                                  started=5000.0)).words


def test_runs_after_the_run_judged_or_the_run_itself_never_count(shipped) -> None:
    rng = np.random.default_rng(3)
    shipped(_records(0.2, 0.01, 4, 6, rng))
    early = _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1", started=1000.5))
    assert early.source == "none"  # one run before it: no spread between runs yet
    later = _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1", started=1003.5))
    assert later.source == "claim" and later.tau > 0
    alone = _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1", started=1003.5,
                                    run_id="run2"))
    assert alone.runs == later.runs - 1


def test_a_claim_with_few_runs_takes_its_like_claims_not_unlike_ones(shipped) -> None:
    rng = np.random.default_rng(4)
    costs = _records(0.3, 0.01, 6, 6, rng, unit_quantity="cost")
    costs["hypothesis"] = "cost " + costs["hypothesis"]
    shipped(pd.concat([_records(0.02, 0.01, 6, 6, rng), costs]))
    found = _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1", started=5000.0), "new")
    assert found.source == "like claims" and found.tau < 0.08
    with betweenrun.judging(betweenrun.Judging(kind="AMD EPYC x2", design="d1",
                                               started=5000.0)):
        cost = betweenrun.component("toy", "python", "new cost", "cost")
    assert cost.tau > 0.15


def test_smyth_prior_recovers_the_within_run_variance_and_its_spread() -> None:
    rng = np.random.default_rng(6)
    same = [0.02 * math.sqrt(rng.chisquare(2) / 2) for _ in range(400)]
    s0, d0 = betweenrun.smyth_prior(np.array(same), 2.0)
    assert 0.85 < math.sqrt(s0) / 0.02 < 1.15 and d0 > 20
    varied = [0.02 * math.exp(0.5 * rng.normal()) * math.sqrt(rng.chisquare(2) / 2)
              for _ in range(400)]
    assert betweenrun.smyth_prior(np.array(varied), 2.0)[1] < 10
    assert betweenrun.smyth_prior(np.array(same[:2]), 2.0) is None


def test_the_legacy_record_is_a_labelled_fallback_of_the_same_kind(monkeypatch) -> None:
    monkeypatch.setattr(betweenrun, "shipped_path", lambda: Path("/nonexistent.csv"))
    betweenrun.clear()
    """Its like claims are the claim's experiment's (the legacy record keeps no units): an
    experiment it never measured gets none."""
    run = betweenrun.Judging(kind="AMD EPYC x2", design="d9", started=2e9)
    with betweenrun.judging(run):
        found = betweenrun.component("syscall", "native", "a claim the record lacks")
    assert found.source == "legacy" and "NO record of this machine kind and design" in found.words
    assert found.tau < 0.1  # syscall's own, not the spread of absolute costs elsewhere
    assert _tau(run).source == "none"  # experiment toy: no legacy rows
    assert betweenrun.legacy("Intel Xeon x2")["host"].str.contains("Intel").all()


def test_the_machine_kind_is_read_from_machine_json() -> None:
    assert betweenrun.machine_kind({"cpu_model": "Intel(R) Xeon(R) Processor",
                                    "cpus_logical": 2}) == "Intel Xeon x2"
    assert betweenrun.machine_kind({"cpu_model": "AMD EPYC", "cpus_logical": 2}) == "AMD EPYC x2"
    assert betweenrun.machine_kind({"cpu_model": "Intel(R) Core(TM) i7-9700 CPU @ 3.00GHz",
                                    "cpus_logical": 8}) == "Intel Core i7-9700 x8"


def test_the_shipped_records_are_read_only_package_data() -> None:
    frame = pd.read_csv(betweenrun.shipped_path())
    assert list(frame.columns) == betweenrun.COLUMNS


def _result_set(root: Path, claims_rows: list[dict], started: float = 1.8e9) -> Path:
    """A minimal result folder with what a record needs."""
    from perfgrid.publish.report.claims import CLAIM_FIELDS

    (root / "raw" / "toy").mkdir(parents=True)
    (root / "raw" / "toy" / "r.json").write_text(json.dumps({"started": started}))
    (root / "machine.json").write_text(json.dumps({"cpu_model": "AMD EPYC",
                                                  "cpus_logical": 2, "boot_id": "boot-1"}))
    (root / "run.json").write_text(json.dumps({"started": started, "argv": ["snakemake"],
                                               "commit": "abc", "ledger": "led"}))
    (root / "plan.json").write_text(json.dumps({"jobs": [{"experiment": "toy", "key": "a=1",
                                                          "round": 1}]}))
    full = [{**{f: "" for f in CLAIM_FIELDS}, **row} for row in claims_rows]
    pd.DataFrame(full, columns=CLAIM_FIELDS).to_csv(root / "claims.csv", index=False)
    return root


ROW = {"experiment": "spawn", "runtime": "python", "hypothesis": "h", "criterion": "c",
       "measured": "m", "verdict": "reproduced", "value": 1.5, "ci_low": 1.2, "ci_high": 1.8,
       "level": 0.95, "unit": "x", "op": ">=", "threshold": 1.1, "scale": "log", "se": 0.05,
       "df": 2.0, "basis": "paired over 3 rounds (t, 2 df)"}


def test_record_writes_under_results_and_refuses_the_same_run_again(tmp_path: Path) -> None:
    """A run recorded once is refused again, from a copied folder too; records go beside
    the result folder, never into the installed package."""
    run = _result_set(tmp_path / "results" / "host", [ROW])
    path, rows = recording.record(str(run))
    assert Path(path) == tmp_path / "results" / "records.csv" and rows == 1
    written = pd.read_csv(path)
    assert written.loc[0, "machine_kind"] == "AMD EPYC x2" and written.loc[0, "se"] == 0.05
    assert written.loc[0, "config"] == "config.yaml" and written.loc[0, "boot_id"] == "boot-1"
    copy = tmp_path / "results" / "copy"
    shutil.copytree(run, copy)
    with pytest.raises(ValueError, match="already recorded"):
        recording.record(str(copy))
    with pytest.raises(ValueError, match="read-only"):
        recording.record(str(run), to=str(betweenrun.shipped_path()))
    assert len(pd.read_csv(path)) == 1


def test_perfgrid_record_on_the_command_line_refuses_a_second_time(tmp_path: Path) -> None:
    run = _result_set(tmp_path / "results" / "host", [ROW])
    command = [str(Path(sys.executable).with_name("perfgrid")), "record", str(run)]
    first = subprocess.run(command, capture_output=True, text=True)
    second = subprocess.run(command, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert second.returncode != 0 and "already recorded" in second.stderr
    print(second.stderr.strip())


def test_a_record_of_an_older_claims_table_is_refused(tmp_path: Path) -> None:
    old = {k: v for k, v in ROW.items() if k not in ("se", "df", "scale")}
    run = _result_set(tmp_path / "results" / "host", [old])
    frame = pd.read_csv(run / "claims.csv").drop(columns=["se", "df", "scale"])
    frame.to_csv(run / "claims.csv", index=False)
    with pytest.raises(ValueError, match="older perfgrid"):
        recording.rows_of(run, frame)


def test_t_quantile_not_z() -> None:
    """A 95 % t(2) interval's half-width is 4.30 se, not 1.96: read with z its variance
    comes out (4.30 / 1.96)^2 = 4.8 times too large (the old record's fault)."""
    assert (sps.t.ppf(0.975, 2) / sps.norm.ppf(0.975)) ** 2 == pytest.approx(4.81, abs=0.01)


def test_a_prior_comes_from_spreads_on_finite_df_only(shipped) -> None:
    """An older best-of's record holds its bounds read with z (df inf, a spread wider than
    any row's): the prior is told by the claim's other runs, each on its df, and that row
    is not among them; with fewer than three such runs there is none."""
    rng = np.random.default_rng(6)
    rows = _records(0.0, 0.02, 4, 1, rng)
    bounds = rows.iloc[[0]].assign(run_id="old", started=999.0, se=0.5, df=math.inf)
    shipped(pd.concat([bounds, rows]))
    found = _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1", started=5000.0))
    assert found.prior_s2 is not None and math.sqrt(found.prior_s2) < 0.05
    shipped(pd.concat([bounds, rows.iloc[:2]]))
    few = _tau(betweenrun.Judging(kind="AMD EPYC x2", design="d1", started=5000.0))
    assert few.prior_s2 is None
