"""tests/verdicts.py, the check the quick run's claims.csv is held to, on claims the
production path judges from synthetic tables: it agrees with every verdict the analysis
reaches, and refuses a copy with one verdict flipped or a threshold moved by 10 %.
Also: a claim left undecided for missing rows carries its ledger rule."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd
import pytest
from test_file_read import CLAIM_NAMES, FILE_READ_CLAIMS, file_read_rows

from perfgrid.analyse import analysis, ledger
from perfgrid.publish.report.claims import write_claims

from synthetic import LEVELS
from verdicts import judged, problems, verdict_from


def production_claims() -> list[analysis.Claim]:
    """file_read's claims, through claims_of (ledger fields and all), with each claim's
    quantity below, at and above its threshold: every verdict."""
    out = []
    for name in CLAIM_NAMES:
        threshold = FILE_READ_CLAIMS[name][0]
        for level, factor in LEVELS.items():
            table = pd.DataFrame(file_read_rows(**{name: threshold * factor}))
            out += [dataclasses.replace(c, runtime=f"{c.runtime} {name} {level}")
                    for c in analysis.claims_of("file_read", table)]
    return out


@pytest.fixture(scope="module")
def claims() -> list[analysis.Claim]:
    return production_claims()


def written(claims: list[analysis.Claim], path: Path) -> Path:
    write_claims(pd.DataFrame([c.as_row() for c in claims]), path)
    return path


def test_the_check_agrees_with_every_verdict_the_analysis_reaches(claims, tmp_path):
    assert {c.verdict for c in claims if judged(c)} >= {"reproduced", "not reproduced",
                                                        "at the threshold"}
    assert problems(written(claims, tmp_path / "claims.csv")) == []


def test_the_check_refuses_one_flipped_verdict(claims, tmp_path):
    # a row of each verdict, flipped to each other verdict in turn
    first = {}
    for i, c in enumerate(claims):
        if judged(c):
            first.setdefault(c.verdict, i)
    for i in first.values():
        for other in set(analysis.VERDICTS) - {claims[i].verdict}:
            flipped = [*claims[:i], dataclasses.replace(claims[i], verdict=other),
                       *claims[i + 1:]]
            found = problems(written(flipped, tmp_path / "claims.csv"))
            assert len(found) == 1 and f"{other!r}, but" in found[0], found


def test_the_check_refuses_a_threshold_moved_by_ten_percent(claims, tmp_path):
    i = next(i for i, c in enumerate(claims) if judged(c))
    moved = dataclasses.replace(claims[i], threshold=claims[i].threshold * 1.1)
    found = problems(written([*claims[:i], moved, *claims[i + 1:]], tmp_path / "claims.csv"))
    assert len(found) == 1 and "the ledger states" in found[0], found


@pytest.mark.parametrize("op, lo, hi, near, want", [
    (">=", 1.1, 1.3, (1.15, 1.25), "reproduced"),
    (">=", 1.0, 1.3, (1.05, 1.25), "reproduced"),  # >= holds on the threshold itself
    (">", 1.0, 1.3, (1.05, 1.25), "inconclusive"),  # > does not
    (">=", 0.5, 0.8, (0.55, 0.75), "not reproduced"),
    ("<=", 0.5, 0.8, (0.55, 0.75), "reproduced"),
    (">=", 0.95, 1.08, (0.97, 1.06), "at the threshold"),  # within 10 %: first
    ("~", 0.95, 1.08, (0.97, 1.06), "reproduced"),
    ("~", 1.2, 1.5, (1.25, 1.45), "not reproduced"),
    ("~", 1.0, 1.5, (1.05, 1.45), "inconclusive"),
    (">=", math.nan, math.nan, (math.nan, math.nan), "inconclusive"),
])
def test_the_rule_as_the_readme_states_it(op, lo, hi, near, want):
    assert verdict_from(op, 1.0, 0.10, (lo + hi) / 2, (lo, hi), near) == want


def test_a_claim_undecided_for_missing_rows_carries_its_ledger_rule():
    """spawn on a table without the claims' points: every claim inconclusive, each with
    its ledger entry's op and threshold (an empty op read as no rule at all)."""
    table = pd.DataFrame([{"variant": "thread", "binding": "none", "chains": 3, "total": 30,
                           "runtime": "python", "rate": 1000.0}])
    claims = analysis.claims_of("spawn", table)
    assert claims and all(c.verdict == "inconclusive" for c in claims)
    for c in claims:
        entry = ledger.entry("spawn", c.hypothesis)
        assert c.op == entry.op, c.hypothesis
        assert c.threshold == entry.threshold or (math.isnan(c.threshold)
                                                  and math.isnan(entry.threshold))
