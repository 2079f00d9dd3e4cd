"""The claims ledger: every claim states what it is about before any data, and the
analysis cannot judge a claim by another rule than its ledger states."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml

from perfgrid import experiments
from perfgrid.analyse import ledger
from perfgrid.analyse.analysis import judged
from perfgrid.analyse.stats import paired
from perfgrid.publish.report.claims import verdict_counts

from helpers import fixed_tau


def test_every_experiment_keeps_a_ledger_and_every_entry_is_complete() -> None:
    for name in experiments.available():
        found = ledger.entries(name)
        assert found, f"{name} has no claims.yaml"
        for entry in found.values():
            assert entry.kind in ledger.KINDS
            if entry.seed_figure.lower() == "none":
                assert entry.why_a_claim.strip(), entry.hypothesis
            else:
                assert entry.seed_where.strip() and entry.seed_quote.strip(), entry.hypothesis
            assert 0 < entry.margin < 1
            if entry.op != "all":
                assert math.isfinite(entry.threshold)


def test_about_claims_are_two_sided_and_take_their_margin_from_the_seed() -> None:
    """An "about" claim's margin is the seed's own reading of "about", or the default
    where its threshold_why says that no seed figure sets one."""
    about = [e for name in experiments.available() for e in ledger.entries(name).values()
             if e.op == "~"]
    assert about, "the seeds' 'about' claims are judged two-sided"
    assert all(e.margin_from == "seed" or (e.margin_from == "default" and "no seed figure"
                                           in e.threshold_why) for e in about)


def _write(tmp_path, monkeypatch, entries: list) -> None:
    """A ledger for the experiment 'file_read' read from ``entries`` instead of its file."""
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(entries))
    monkeypatch.setattr(ledger, "path", lambda experiment: path)
    ledger.entries.cache_clear()


GOOD = {"hypothesis": "h", "kind": "seed", "seed_figure": "3.0x", "seed_quote": "q",
        "seed_where": "000.txt", "op": ">=", "threshold": 1.2, "margin": 0.1,
        "margin_from": "default"}


@pytest.mark.parametrize(("change", "words"), [
    ({"kind": "guess"}, "kind 'guess' is not one of seed, project, sanity"),
    ({"op": "=="}, "op '==' is not one of >=, >, <=, <, ~, all"),
    ({"margin": 1.5}, "margin 1.5; allowed: between 0 and 1"),
    ({"margin": 0.2}, "margin_from default but margin 0.2"),
    ({"seed_figure": "none"}, "why_a_claim must say why"),
    ({"seed_where": ""}, "a seed figure needs seed_where"),
    ({"colour": "red"}, "unknown key(s) colour"),
    ({"threshold": None}, "op >= needs a threshold"),
])
def test_a_malformed_entry_is_refused_naming_the_key(tmp_path, monkeypatch, change: dict,
                                                      words: str) -> None:
    _write(tmp_path, monkeypatch, [{**GOOD, **change}])
    try:
        with pytest.raises(ledger.LedgerError, match="file_read/claims.yaml, entry 1") as err:
            ledger.entries("file_read")
        assert words in str(err.value)
    finally:
        ledger.entries.cache_clear()


def test_a_claim_judged_by_another_rule_than_its_ledger_states_is_refused(
        tmp_path, monkeypatch) -> None:
    _write(tmp_path, monkeypatch, [GOOD])
    quantity = paired(1.5, {1: 0.40, 2: 0.41, 3: 0.42})
    try:
        assert judged("file_read", "h", "c", quantity, ">=", 1.2).kind == ""  # judged alone
        with pytest.raises(ledger.LedgerError, match="states >= 1.2, the analysis judges >= 1.5"):
            judged("file_read", "h", "c", quantity, ">=", 1.5)
        with pytest.raises(ledger.LedgerError, match="no entry for hypothesis 'other'"):
            judged("file_read", "other", "c", quantity, ">=", 1.2)
    finally:
        ledger.entries.cache_clear()


def test_the_ledger_margin_decides_at_the_threshold(tmp_path, monkeypatch) -> None:
    """The same interval reads at the threshold under a wide margin and reproduced under
    a narrow one: the margin comes from the ledger, not from a constant."""
    fixed_tau(monkeypatch, 0.0)
    quantity = paired(1.5, {i: math.log(1.5) + d for i, d in
                            enumerate((-0.01, 0.0, 0.01, 0.0, 0.005), 1)})
    readings = {}
    for margin, source in ((0.1, "default"), (0.4, "seed")):
        _write(tmp_path, monkeypatch, [{**GOOD, "margin": margin, "margin_from": source}])
        readings[margin] = judged("file_read", "h", "c", quantity, ">=", 1.2).verdict
    ledger.entries.cache_clear()
    assert readings == {0.1: "reproduced", 0.4: "at the threshold"}


def test_sanity_checks_are_shown_but_not_counted() -> None:
    claims = pd.DataFrame({"verdict": ["reproduced", "not reproduced", "reproduced",
                                       "inconclusive"],
                           "kind": ["seed", "project", "sanity", "seed"]})
    text = verdict_counts(claims)
    assert text.startswith("1 reproduced, 1 not reproduced, 0 at the threshold, "
                           "1 inconclusive of 3 claims")
    assert "seed claims: 1 reproduced, 0 not reproduced, 0 at the threshold, 1 inconclusive" \
        in text
    assert "sanity checks (not in the total): 1 reproduced" in text
