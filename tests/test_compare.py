"""Comparison statistics: Welch's test on process means, Benjamini-Hochberg over points."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfgrid import compare


def _groups(rng: np.random.Generator, mean: float, processes: int, values: int = 3,
            cv: float = 0.03) -> list[list[float]]:
    return [list(mean * np.exp(rng.normal(0, cv) + rng.normal(0, cv, values)))
            for _ in range(processes)]


def test_welch_uses_process_means_when_both_sides_have_several() -> None:
    rng = np.random.default_rng(1)
    p, what = compare.welch(_groups(rng, 1.0, 4), _groups(rng, 1.3, 4))
    assert p < 0.01 and "process means" in what
    p, what = compare.welch(_groups(rng, 1.0, 4), _groups(rng, 1.0, 4))
    assert p > 0.01


def test_welch_falls_back_to_values_and_says_so() -> None:
    rng = np.random.default_rng(2)
    _, what = compare.welch(_groups(rng, 1.0, 1, 5), _groups(rng, 1.0, 4))
    assert "within-process" in what


@pytest.mark.parametrize("groups", [[[1.0]], [], [[2.0], []]])
def test_one_value_is_not_testable(groups: list) -> None:
    p, what = compare.welch(groups, [[1.0, 1.1], [1.2, 1.0]])
    assert np.isnan(p) and "not testable" in what


def test_benjamini_hochberg_over_all_experiments() -> None:
    tables = {"a": pd.DataFrame({"p": [0.001, 0.04, float("nan")]}),
              "b": pd.DataFrame({"p": [0.03, 0.5]})}
    adjusted = compare.adjust(tables)
    a, b = adjusted["a"], adjusted["b"]
    # four testable p-values: 0.001 -> 0.004; 0.03 and 0.04 -> 0.0533; 0.5 -> 0.5
    assert a.loc[0, "q"] == pytest.approx(0.004)
    assert a.loc[0, "significance"] == "significant"
    assert a.loc[1, "significance"] == "not significant"
    assert b.loc[0, "significance"] == "not significant"
    assert a.loc[2, "significance"] == "not testable" and np.isnan(a.loc[2, "q"])
    assert "p" in tables["a"] and "q" not in tables["a"]  # inputs untouched


def test_a_a_noise_floor_flags_about_q_or_less() -> None:
    """Same truth on both sides, 200 points: at most 5 % flagged after correction."""
    rng = np.random.default_rng(3)
    pvals = [compare.welch(_groups(rng, 1.0, 3), _groups(rng, 1.0, 3))[0] for _ in range(200)]
    flagged = compare.adjust({"x": pd.DataFrame({"p": pvals})})["x"]["significance"]
    assert (flagged == "significant").mean() <= 0.05
