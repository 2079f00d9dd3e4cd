"""``perfgrid aa RUN_A RUN_B``: two runs of one commit judged claim by claim on their
estimates. Claims tables are made up: each claim's interval is ``value * exp(+-z s)`` at
its level, so its standard error on the log scale is ``s`` and every p-value is known."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, logit, ndtri
from scipy.stats import norm, t

from perfgrid.analyse import betweenrun, claimrow
from perfgrid.analyse.analysis import Claim
from perfgrid.pipeline import cli
from perfgrid.publish import aa, archive
from perfgrid.publish.report.claims import write_claims

from helpers import fixed_tau
from synthetic import result_folder

S = 0.05  # each claim's standard error on the log scale, unless a test says otherwise


PAIR_TAU = betweenrun.pair_tau  # rows without a machine kind: the smaller own tau


@pytest.fixture(autouse=True)
def no_between_run(monkeypatch):
    """No between-run component unless a test sets one (recorded runs may ship one)."""
    monkeypatch.setattr(betweenrun, "pair_tau", lambda *rows: 0.0)


def row(n: int, value: float = 1.5, verdict: str = "reproduced", s: float = S,
        level: float = 0.95, experiment: str = "file_read", **fields) -> dict:
    """Claim ``n``'s row: ``value`` with its interval at ``level`` of standard error ``s``.
    Simulations make tens of thousands: z by ``ndtri`` (norm.ppf without its ~50 us of
    checks), the fields as ``Claim.as_row`` gives them without asdict's deep copy (every
    field is a scalar)."""
    z = ndtri(0.5 + level / 2)
    low, high = (value * math.exp(-z * s), value * math.exp(z * s)) if s else (math.nan,) * 2
    claim = Claim(experiment, f"claim {n}", "ratio >= 1.2", f"{value:.2f}x", verdict,
                  "python", "made up", value, low, high, ">=", 1.2, "x", level=level)
    return {**vars(claim), **fields}


T2, Z = t.ppf(0.975, 2), norm.ppf(0.975)


def t_row(n: int, value: float, s: float, tau: float = 0.0, share: bool = False,
          **fields) -> dict:
    """Claim ``n`` as an older claims.csv holds it: a paired t(2) interval of within-run
    standard error ``s`` (log scale), widened by ``tau`` (stats.Widened), mapped to the
    logit scale for a ``share`` (stats.Share: a log side ``w`` is a logit side
    ``w / (1 - p)``); its basis says so."""
    side = math.sqrt((T2 * s) ** 2 + (Z * tau) ** 2)
    basis = "paired over 3 rounds (t, 2 df)" + ("; logit scale" if share else "")
    if share:
        low, high = (float(expit(logit(value) + k * side / (1 - value))) for k in (-1, 1))
    else:
        low, high = value * math.exp(-side), value * math.exp(side)
    # an older table has no scale column (read as empty)
    return {**row(n, value=value, s=0), "ci_low": low, "ci_high": high, "tau": tau,
            "basis": basis, "kind": "seed", "scale": "", **fields}


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def run_of(n: int, **changed: dict) -> pd.DataFrame:
    """``n`` claims, all 1.5x reproduced; ``changed`` maps claim index -> row fields."""
    return frame(*(row(i, **changed.get(str(i), {})) for i in range(n)))


def test_a_run_against_itself_flags_nothing_and_reads_the_same():
    a = run_of(38)
    table = aa.judge(a, a.copy())
    assert aa.counts(table) == {"compared": 38, "differ": 0, "contradictions": 0,
                                "neighbours": 0, "tested": 38, "flagged": 0, "only_a": 0,
                                "only_b": 0, "sanity": 0, "sanity_differ": 0}
    assert (table["d"] == 0).all() and (table["p"] == 1).all()
    assert set(table["estimate_test"]) == {"not flagged"} and set(table["flip"]) == {""}
    assert aa.summary(table).splitlines() == [
        "38 counted claims compared: 0 readings differ (0 contradictions: reproduced against "
        "not reproduced; 0 neighbour flips), 0 of 38 with both estimates flagged by Welch's t "
        "and Benjamini-Hochberg at q = 0.05; 0 claims only in A, 0 only in B; 0 sanity checks "
        "apart, 0 read differently"]


def test_a_claim_shifted_far_beyond_both_intervals_is_flagged():
    a = run_of(10)
    b = run_of(10, **{"3": {"value": 1.5 * 1.4}})  # intervals of about +-10 %: 40 % apart
    table = aa.judge(a, b)
    flagged = table[table["flagged"].eq(True)]
    assert flagged["hypothesis"].tolist() == ["claim 3"]
    got = flagged.iloc[0]
    assert got["d"] == pytest.approx(-math.log(1.4))
    assert got["se"] == pytest.approx(math.sqrt(2) * S)
    assert got["p"] == pytest.approx(2 * norm.sf(math.log(1.4) / (math.sqrt(2) * S)))
    assert not got["readings_differ"] and aa.counts(table)["flagged"] == 1
    assert "flagged: file_read [python] claim 3: A reproduced 1.5x [" in aa.summary(table)


def test_contradictions_are_counted_apart_from_readings_that_differ():
    a = run_of(4)
    b = run_of(4, **{"0": {"value": 0.9, "verdict": "not reproduced"},
                     "1": {"value": 1.25, "verdict": "inconclusive"},
                     "2": {"verdict": "at the threshold"}})
    table = aa.judge(a, b).set_index("hypothesis")
    assert table["contradiction"].tolist() == [True, False, False, False]
    assert table["readings_differ"].tolist() == [True, True, True, False]
    assert table["flip"].tolist() == ["contradiction", "neighbour", "neighbour", ""]
    counts = aa.counts(table.reset_index())
    assert (counts["differ"], counts["contradictions"], counts["neighbours"]) == (3, 1, 2)
    text = aa.summary(table.reset_index())
    assert "3 readings differ (1 contradictions: reproduced against not reproduced; " \
           "2 neighbour flips)" in text
    assert "  flagged, contradiction flip: file_read [python] claim 0: A reproduced" in text
    assert "  neighbour flip: file_read [python] claim 2: A reproduced" in text


def test_benjamini_hochberg_is_applied_over_every_claim_with_both_estimates():
    """One claim at p = 0.03 alone is flagged; among ten claims, nine of them equal, its
    adjusted p is 0.03 * 10 = 0.3: not flagged."""
    d = math.sqrt(2) * S * norm.isf(0.015)  # p = 0.03 exactly
    shifted = {"0": {"value": 1.5 * math.exp(d)}}
    alone = aa.judge(run_of(1), run_of(1, **shifted))
    assert alone["p"].iloc[0] == pytest.approx(0.03) and bool(alone["flagged"].iloc[0])
    among = aa.judge(run_of(10), run_of(10, **shifted))
    first = among.iloc[0]
    assert first["p"] == pytest.approx(0.03) and first["p"] < 0.05
    assert first["q"] == pytest.approx(0.3) and not first["flagged"]
    assert first["estimate_test"] == "not flagged" and aa.counts(among)["flagged"] == 0


def test_a_between_run_component_widens_the_test_and_flags_less(monkeypatch):
    a = run_of(6, **{str(i): {"s": 0.03} for i in range(6)})
    b = run_of(6, **{str(i): {"s": 0.03, "value": 1.5 * math.exp(0.2)} for i in range(3)},
               **{str(i): {"s": 0.03} for i in range(3, 6)})
    assert aa.counts(aa.judge(a, b))["flagged"] == 3
    asked = []
    monkeypatch.setattr(betweenrun, "pair_tau", lambda *rows: asked.append(rows) or 0.2)
    table = aa.judge(a, b)
    assert aa.counts(table)["flagged"] == 0
    assert [(ra["hypothesis"], rb["hypothesis"]) for ra, rb in asked] == [
        (f"claim {i}", f"claim {i}") for i in range(6)]
    assert table["se"].iloc[0] == pytest.approx(math.sqrt(2 * 0.03**2 + 2 * 0.2**2))
    assert (table["tau"] == 0.2).all()


def test_the_between_run_part_an_interval_already_holds_is_counted_once(monkeypatch):
    """A claim's interval widened by tau (its tau column, stats.Widened) gives back its
    inner standard error, and tau is then added once per run: not twice."""
    tau, inner, z = 0.04, 0.03, norm.ppf(0.975)
    side = math.sqrt((z * inner) ** 2 + (z * tau) ** 2)
    held = {"ci_low": 1.5 * math.exp(-side), "ci_high": 1.5 * math.exp(side), "tau": tau}
    assert claimrow.within_se(pd.Series(row(0, **held))).se == pytest.approx(inner)
    monkeypatch.setattr(betweenrun, "pair_tau", PAIR_TAU)  # the rows' own tau: 0.04
    table = aa.judge(frame(row(0, **held)), frame(row(0, value=1.6, **{
        **held, "ci_low": 1.6 * math.exp(-side), "ci_high": 1.6 * math.exp(side)})))
    assert table["se"].iloc[0] == pytest.approx(math.sqrt(2 * inner**2 + 2 * tau**2))


def test_each_run_s_interval_is_read_at_its_own_level():
    a = frame(row(0, level=0.99))
    b = frame(row(0, value=1.6, level=0.95))
    got = aa.judge(a, b).iloc[0]
    assert got["se"] == pytest.approx(math.sqrt(2) * S)
    assert (got["level_a"], got["level_b"]) == (0.99, 0.95)


def test_claims_without_an_interval_have_their_reading_compared_and_no_test():
    a = frame(row(0), row(1, s=0), row(2, value=math.nan, verdict="inconclusive", s=0))
    b = frame(row(0), row(1, verdict="not reproduced", value=1.0), row(2, s=0))
    table = aa.judge(a, b).set_index("hypothesis")
    assert table.loc["claim 0", "estimate_test"] == "not flagged"
    assert table.loc["claim 1", "estimate_test"] == "n/a: no interval in A"
    assert table.loc["claim 2", "estimate_test"] == "n/a: no estimate in A and no interval in B"
    assert bool(table.loc["claim 1", "contradiction"]) and math.isnan(table.loc["claim 1", "p"])
    counts = aa.counts(table.reset_index())
    assert (counts["compared"], counts["tested"], counts["contradictions"]) == (3, 1, 1)


def test_claims_of_one_run_only_are_listed_apart():
    a = frame(row(0), row(1), row(2))
    b = frame(row(0), row(2), row(3, value=2.0), row(1, criterion="ratio >= 1.5"))
    table = aa.judge(a, b)
    assert table["present"].tolist() == ["both", "only in A", "both", "only in B",
                                         "only in B"]
    assert aa.counts(table) == {"compared": 2, "differ": 0, "contradictions": 0,
                                "neighbours": 0, "tested": 2, "flagged": 0, "only_a": 1,
                                "only_b": 2, "sanity": 0, "sanity_differ": 0}
    text = aa.summary(table)
    assert "1 claims only in A, 2 only in B" in text
    assert "  only in A: file_read [python] claim 1 (ratio >= 1.2): reproduced 1.5x [" in text
    assert "  only in B: file_read [python] claim 1 (ratio >= 1.5): reproduced" in text
    assert "  only in B: file_read [python] claim 3 (ratio >= 1.2): reproduced 2x [" in text


def test_a_claim_listed_twice_in_a_run_is_refused():
    with pytest.raises(ValueError, match="run B: the claim file_read .python. 'claim 0'"):
        aa.judge(frame(row(0)), frame(row(0), row(0)))


def test_t2_intervals_are_read_with_t_and_judged_by_welch_t():
    """Issue 57: the z test read t(2) intervals with z (each variance 4.8x too large)."""
    a, b = t_row(0, 1.5, 0.02), t_row(0, 1.5 * math.exp(0.05), 0.03)
    got = aa.judge(frame(a), frame(b)).iloc[0]
    se = math.sqrt(0.02**2 + 0.03**2)
    df = se**4 / (0.02**4 / 2 + 0.03**4 / 2)  # Welch-Satterthwaite
    assert got["se"] == pytest.approx(se) and got["df"] == pytest.approx(df)
    assert got["p"] == pytest.approx(2 * t.sf(0.05 / se, df))
    assert claimrow.within_se(pd.Series(a)).how == "read off the interval with t(2) (log scale)"


def test_a_share_s_log_scale_tau_is_stripped_on_the_logit_scale(monkeypatch):
    """Issue 57: a share's interval is on the logit scale, its older tau on the log scale
    (tau / (1 - p) there); stripping tau as it stood took most of a share's width away
    near 1. The pair's tau is the smaller of the two rows' (betweenrun.pair_tau, for now)."""
    monkeypatch.setattr(betweenrun, "pair_tau", PAIR_TAU)
    a, b = t_row(0, 0.86, 0.02, 0.15, share=True), t_row(0, 0.80, 0.03, 0.1, share=True)
    got = aa.judge(frame(a), frame(b)).iloc[0]
    tau = min(0.15 / 0.14, 0.1 / 0.2)
    assert got["d"] == pytest.approx(logit(0.86) - logit(0.80))
    assert got["se"] == pytest.approx(math.sqrt((0.02 / 0.14) ** 2 + (0.03 / 0.2) ** 2
                                                + 2 * tau**2))
    assert got["scale"] == "logit" and got["tau"] == pytest.approx(tau)
    within = claimrow.within_se(pd.Series(a))
    assert (within.scale, within.se) == ("logit", pytest.approx(0.02 / 0.14))


@pytest.mark.parametrize("share", [False, True])
def test_rows_the_report_writes_give_back_their_within_run_error(monkeypatch, share):
    """Rows made by the production path (analysis.judged, a between-run sd of 0.15, a
    paired t(2) estimate; a share mapped to the logit scale by stats.Share): aa reads each
    run's within-run standard error back exactly, on the claim's scale."""
    from perfgrid.analyse import analysis, stats

    fixed_tau(monkeypatch, 0.15)
    rows, errors = [], []
    for n, logs in enumerate(([0.80, 0.86, 0.90], [0.82, 0.83, 0.88])):
        est = stats.paired(0.85 - n / 100, dict(enumerate(np.log(logs))))
        se = float(np.std(np.log(logs), ddof=1) / math.sqrt(3))
        errors.append(se / (1 - est.value) if share else se)
        quantity = stats.Share(est) if share else est
        rows.append(analysis.judged("toy", "made up", "c", quantity, ">=", 0.5).as_row())
    got = aa.judge(frame(rows[0]), frame(rows[1])).iloc[0]
    assert got["se"] == pytest.approx(math.hypot(*errors))
    assert got["df"] == pytest.approx(got["se"] ** 4 / sum(e**4 / 2 for e in errors))


def test_sanity_checks_are_listed_apart_never_flagged_nor_counted():
    """Issue 57: aa counted sanity claims. One counted claim at p = 0.03 beside a sanity
    check: Benjamini-Hochberg runs over the counted one alone (q 0.03, flagged); the sanity
    check, far off and contradicting, is listed apart and flags nothing."""
    d = math.sqrt(2) * S * norm.isf(0.015)
    a = frame(row(0, kind="seed"), row(1, kind="sanity"))
    b = frame(row(0, value=1.5 * math.exp(d), kind="seed"),
              row(1, value=0.5, verdict="not reproduced", kind="sanity"))
    table = aa.judge(a, b)
    assert table["q"].iloc[0] == pytest.approx(0.03) and table["flagged"].iloc[0]
    sanity = table.iloc[1]
    assert sanity["p"] < 1e-6 and math.isnan(sanity["q"]) and sanity["flagged"] is None
    assert sanity["estimate_test"] == "not counted: a sanity check"
    counts = aa.counts(table)
    assert (counts["compared"], counts["flagged"], counts["contradictions"]) == (1, 1, 0)
    assert (counts["sanity"], counts["sanity_differ"]) == (1, 1)
    assert "  sanity check, not counted, contradiction flip: file_read [python] claim 1: " \
           "A reproduced" in aa.summary(table)


@pytest.mark.parametrize("level", ["1e-300", "inf", "1e308", "0.3"])
def test_a_hostile_confidence_level_is_a_clear_error(tmp_path, capsys, level):
    """Issue 60: a level of 1e-300 in claims.csv raised ZeroDivisionError (a traceback);
    inf was passed over in silence. Now: the column, its value and what is allowed."""
    a = claims_folder(tmp_path / "one", [{**row(0), "level": float(level)}])
    b = claims_folder(tmp_path / "two", [row(0, value=1.6)])
    with pytest.raises(SystemExit) as exited:
        cli.main(["aa", str(a), str(b), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err == (
        f"perfgrid aa: run A: claim file_read [python] 'claim 0' (ratio >= 1.2): column "
        f"level is {float(level)!r}; allowed: a confidence level from 0.5 to 0.999999 "
        f"(blank: 0.95)\n")
    assert not (tmp_path / "out").exists()


def simulated_pair(rng, claims: int, sigma: float, tau: float, shift: float):
    """Two runs' claims tables: each claim's truth is 1.5x in A and ``shift`` (log) more in
    B; each run's estimate is off its truth by a between-run draw (sd ``tau``) and
    within-run noise (sd ``sigma``), its interval paired t(2) over 3 rounds (a standard
    error of ``sigma`` sqrt(chi2_2 / 2)), widened by ``tau`` as a run widens it."""
    def run(centre: float) -> pd.DataFrame:
        y = centre + rng.normal(0, tau, claims) + rng.normal(0, sigma, claims)
        s = sigma * np.sqrt(rng.chisquare(2, claims) / 2)
        return frame(*(t_row(i, math.exp(y[i]), s[i], tau) for i in range(claims)))

    return run(math.log(1.5)), run(math.log(1.5) + shift)


@pytest.mark.simulation
def test_welch_t_is_sized_right_and_has_power_against_a_10_percent_shift(monkeypatch):
    """Through aa.judge: 3,000 claims with t(2) within-run errors (sd 0.03) and a
    between-run sd of 0.02 (each row's tau, betweenrun.pair_tau): per-claim size at alpha
    0.05 in 0.035-0.065 where the truths are equal (the z test on these rows: 0.013), and
    the power against a 10 % shift printed."""
    monkeypatch.setattr(betweenrun, "pair_tau", PAIR_TAU)
    rng = np.random.default_rng(57)
    found = {}
    for name, tau, shift in (("size", 0.02, 0.0), ("power", 0.02, math.log(1.1)),
                             ("size, tau 0", 0.0, 0.0)):
        p = aa.judge(*simulated_pair(rng, 3000, 0.03, tau, shift))["p"]
        found[name] = float((p < 0.05).mean())
    print(f"Welch t, sigma 0.03: size {found['size']:.3f}, power against 10 % "
          f"{found['power']:.3f} (tau 0.02); size {found['size, tau 0']:.3f} with tau 0")
    assert 0.035 <= found["size"] <= 0.065
    assert 0.03 <= found["size, tau 0"] <= 0.065  # Welch-Satterthwaite on 2 + 2 df: ~0.036
    assert found["power"] > 0.3


# -- the command ------------------------------------------------------------------------
def claims_folder(root: Path, rows: list[dict]) -> Path:
    folder = root / "vm"
    folder.mkdir(parents=True)
    write_claims(pd.DataFrame(rows), folder / "claims.csv")
    return folder


def test_the_command_writes_the_table_prints_the_summary_and_exits_0(
        tmp_path, monkeypatch, capsys):
    a = claims_folder(tmp_path / "one", [row(i) for i in range(5)])
    b = claims_folder(tmp_path / "two", [row(0, value=3.0), *(row(i) for i in range(1, 5))])
    monkeypatch.chdir(tmp_path)
    cli.main(["aa", str(a), str(b)])  # returns: exit status 0
    out = capsys.readouterr().out
    assert f"perfgrid aa: A = {a} (5 claims), B = {b} (5 claims)" in out
    assert ("5 counted claims compared: 0 readings differ (0 contradictions: reproduced "
            "against not reproduced; 0 neighbour flips), 1 of 5 with both estimates flagged "
            "by Welch's t") in out
    written = tmp_path / "results" / "compare" / "aa-vm-vm" / "aa.csv"
    assert f"table written to {Path('results/compare/aa-vm-vm/aa.csv')}" in out
    table = pd.read_csv(written)
    assert list(table.columns) == aa.COLUMNS and len(table) == 5
    assert table["flagged"].tolist() == [True, False, False, False, False]
    assert not list(written.parent.glob(".*"))  # no temporary file left beside it


def test_a_folder_without_claims_csv_is_named_and_the_command_fails(tmp_path, capsys):
    good = claims_folder(tmp_path / "one", [row(0)])
    empty = tmp_path / "two" / "vm"
    empty.mkdir(parents=True)
    for args, named in (([str(good), str(empty)], f"{empty}: no claims.csv in this folder"),
                        ([str(tmp_path / "nowhere"), str(good)],
                         f"{tmp_path / 'nowhere'}: no such result folder or archive")):
        with pytest.raises(SystemExit) as exited:
            cli.main(["aa", *args, "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert exited.value.code == 1 and err.startswith(f"perfgrid aa: {named}"), err
    assert not (tmp_path / "out").exists()


def test_an_archive_is_read_as_compare_reads_one(tmp_path, capsys):
    folder = result_folder(tmp_path / "made", "vm", 1.0)
    write_claims(pd.DataFrame([row(i) for i in range(3)]), folder / "claims.csv")
    packed = archive.create(folder, tmp_path / "perfgrid-vm-test.tar.gz")
    other = result_folder(tmp_path / "other", "vm", 2.0)
    write_claims(pd.DataFrame([row(i, value=1.55) for i in range(3)]), other / "claims.csv")
    cli.main(["aa", str(packed), str(other), "--out", str(tmp_path / "out")])
    assert "3 counted claims compared: 0 readings differ" in capsys.readouterr().out
    (folder / "claims.csv").unlink()
    bare = archive.create(folder, tmp_path / "perfgrid-bare.tar.gz")
    with pytest.raises(ValueError, match=f"{bare}: its result folder results/vm/ holds no "
                                         f"claims.csv"):
        aa.main(str(bare), str(other), tmp_path / "out2")


def test_a_run_against_itself_its_copy_or_its_archive_is_refused_exit_2(tmp_path, capsys):
    """Issue 60: "0 of 37 flagged" for a run judged against its copy; pool refused it."""
    folder = result_folder(tmp_path / "made", "vm", 1.0)
    write_claims(pd.DataFrame([row(i) for i in range(3)]), folder / "claims.csv")
    packed = archive.create(folder, tmp_path / "perfgrid-vm-test.tar.gz")
    copy = shutil.copytree(folder, tmp_path / "copy" / "vm")
    for pair in ((folder, folder), (packed, copy), (folder, copy)):
        with pytest.raises(SystemExit) as exited:
            cli.main(["aa", *map(str, pair), "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert exited.value.code == 2, err
        assert err.startswith(f"perfgrid aa: refused, nothing written: {pair[0]} and {pair[1]} "
                              f"are the same run: the same raw result files (sha256 "), err
    assert not (tmp_path / "out").exists()


def test_options_of_the_run_form_keep_two_arguments_for_snakemake(monkeypatch):
    """``aa --label x A B`` is the run form with A B for snakemake; ``aa A B`` judges."""
    called = []
    monkeypatch.setattr(cli, "_aa", lambda args: called.append(("run", args.snakemake_args)))
    monkeypatch.setattr(cli, "_aa_judge", lambda args: called.append(("judge", 0)))
    cli.main(["aa", "--label", "x", "--", "all", "report"])
    cli.main(["aa", "--", "--until", "table"])
    cli.main(["aa", "results/a", "results/b"])
    assert called == [("run", ["all", "report"]), ("run", ["--until", "table"]),
                      ("judge", 0)]
