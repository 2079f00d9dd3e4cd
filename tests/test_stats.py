"""Intervals: coverage by simulation, small samples, verdicts at the threshold."""

from __future__ import annotations

import numpy as np
import pytest

from perfgrid.analyse import stats

TRUE_RATIO = 1.10


def _side(rng: np.random.Generator, rate: float, processes: int, values: int,
          within: float = 0.10, between: float = 0.05) -> list[list[float]]:
    """Per-loop times: a lognormal process effect, then lognormal values inside it."""
    return [list(np.exp(rng.normal(0, between) + rng.normal(0, within, values)) / rate)
            for _ in range(processes)]


def _coverage(processes: int, values: int, draws: int = 1000) -> tuple[float, float, float, float]:
    rng = np.random.default_rng(20260214 + processes * 100 + values)
    row_hits = ratio_hits = 0
    row_widths, ratio_widths = [], []
    for i in range(draws):
        a = stats.rate(_side(rng, 1.0, processes, values), 1.0, seed=2 * i)
        b = stats.rate(_side(rng, TRUE_RATIO, processes, values), 1.0, seed=2 * i + 1)
        lo, hi = a.interval()
        row_hits += lo <= 1.0 <= hi
        row_widths.append(a.ci_rel)
        ratio = b / a
        lo, hi = ratio.interval()
        ratio_hits += lo <= TRUE_RATIO <= hi
        ratio_widths.append(ratio.ci_rel)
    return (row_hits / draws, ratio_hits / draws, float(np.median(row_widths)),
            float(np.median(ratio_widths)))


@pytest.mark.simulation
@pytest.mark.parametrize(("processes", "values"), [(2, 3), (4, 10)])
def test_intervals_cover_the_truth_95_percent(processes: int, values: int) -> None:
    """Within 10 %, between processes 5 %: rows and ratios cover the truth 93-97 % of draws."""
    row_cov, ratio_cov, row_width, ratio_width = _coverage(processes, values)
    print(f"{processes}x{values}: row coverage {row_cov:.3f} (median ci_rel {row_width:.3f}), "
          f"ratio coverage {ratio_cov:.3f} (median ci_rel {ratio_width:.3f})")
    assert 0.93 <= row_cov <= 0.97
    # A ratio's degrees of freedom come from Welch-Satterthwaite, which is conservative when
    # each side has a single degree of freedom (2 processes): 97-98 % there, never optimistic.
    assert 0.93 <= ratio_cov <= (0.98 if processes == 2 else 0.97)


def test_small_samples_get_wide_intervals() -> None:
    rng = np.random.default_rng(5)
    small = stats.rate(_side(rng, 1.0, 2, 3), 1.0, seed=1)
    large = stats.rate(_side(rng, 1.0, 8, 10), 1.0, seed=2)
    assert small.ci_rel > 2 * large.ci_rel


@pytest.mark.parametrize(("groups", "reason"), [
    ([[1.0]], "one value"),
    ([[1.0, 1.0], [1.0, 1.0]], "identical"),
    ([], "no values"),
    ([[1.0, -1.0]], "non-positive"),
    ([[1.0, float("nan")]], "non-finite"),
])
def test_no_interval_says_why_never_zero_width(groups: list, reason: str) -> None:
    estimate = stats.mean_estimate(groups)
    assert estimate.interval() is None
    assert estimate.method == stats.METHOD_NONE
    assert reason in estimate.reason
    assert "no interval" in estimate.show()


def test_one_process_says_within_process_only() -> None:
    estimate = stats.mean_estimate([[1.0, 1.1, 0.9, 1.05]])
    assert estimate.method == stats.METHOD_VALUES
    lo, hi = estimate.interval()
    assert lo < estimate.value < hi


def test_intervals_are_repeatable_for_a_seed() -> None:
    groups = [[1.0, 1.1, 0.95], [1.2, 1.15, 1.1]]
    assert stats.mean_estimate(groups, seed=3).interval() == \
        stats.mean_estimate(groups, seed=3).interval()


def _exact(value: float, half: float) -> stats.Estimate:
    """An estimate whose interval is value*exp(+-half) (normal-ish deviations, large df)."""
    dev = np.random.default_rng(0).normal(0, half / 1.96, 20000)
    return stats.Estimate(value, dev, float("inf"), stats.METHOD_HIERARCHICAL)


@pytest.mark.parametrize(("value", "op", "verdict", "word"), [
    (1.20, ">=", "reproduced", "wholly"),
    (1.00, ">=", "inconclusive", "straddles"),
    (0.80, ">=", "not reproduced", "other side"),
    (0.80, "<=", "reproduced", "wholly"),
    (1.00, "<", "inconclusive", "straddles"),
    (1.20, "<", "not reproduced", "other side"),
])
def test_decide_by_interval(value: float, op: str, verdict: str, word: str) -> None:
    """One-sided decisions, with a margin too narrow for the interval to fit in."""
    got, reason = stats.decide(_exact(value, 0.05), op, 1.0, margin=0.01)
    assert got == verdict
    assert word in reason


def test_an_interval_near_the_threshold_reads_at_the_threshold_before_one_side() -> None:
    """Two one-sided tests come first: a 90 % interval within the margin reads "at the
    threshold" even where the 95 % interval lies wholly on the claim's side, so a truth
    near the threshold does not flip between reproduced and inconclusive run to run."""
    just_above = _exact(1.06, 0.03)
    assert just_above.interval()[0] > 1.0
    assert stats.decide(just_above, ">=", 1.0, margin=0.01)[0] == "reproduced"
    verdict, reason = stats.decide(just_above, ">=", 1.0, margin=0.10)
    assert verdict == "at the threshold" and "90% interval" in reason
    # the band is a factor 1 + margin either way: 1.06 x e^0.03 is past 1.05, not past 1.10
    assert stats.decide(just_above, ">=", 1.0, margin=0.05)[0] == "reproduced"


@pytest.mark.parametrize(("value", "half", "verdict"), [
    (0.50, 0.05, "reproduced"),       # 90 % interval within 10 % of 0.5
    (0.50, 0.30, "inconclusive"),     # centred, but too wide to say "about"
    (0.30, 0.05, "not reproduced"),   # wholly below 0.5 / 1.1
    (0.75, 0.05, "not reproduced"),   # wholly above 0.5 x 1.1: "about" is two-sided
])
def test_an_about_claim_is_two_sided(value: float, half: float, verdict: str) -> None:
    assert stats.decide(_exact(value, half), "~", 0.5, margin=0.10)[0] == verdict


def test_nan_and_no_interval_are_inconclusive() -> None:
    assert stats.decide(stats.Estimate.unknown(float("nan"), "x"), ">=", 1)[0] == "inconclusive"
    verdict, reason = stats.decide(stats.Estimate.unknown(5.0, "one value"), ">=", 1)
    assert verdict == "inconclusive" and "one value" in reason


def test_a_ratio_to_a_figure_of_zero_is_no_figure_and_says_so() -> None:
    """A share below the CPU clock's tick is 0 (a ring's sys share in a short run): a ratio
    to it is NaN and inconclusive with that reason, where it raised ZeroDivisionError and
    stopped the report."""
    zero = stats.mean_estimate([[0.0], [0.0], [0.0]])
    assert zero.value == 0 and not zero.has_interval
    for ratio in (_exact(0.06, 0.05) / zero, stats.Estimate.unknown(0.06, "one value") / zero):
        assert np.isnan(ratio.value) and ratio.reason.startswith(stats.OVER_ZERO)
        verdict, reason = stats.decide(ratio, "<=", 0.5)
        assert verdict == "inconclusive" and reason.startswith(f"no estimate: {stats.OVER_ZERO}")
    assert (zero / _exact(0.5, 0.05)).value == 0  # a zero over a figure is still zero


def test_ratio_of_estimates_combines_both_spreads() -> None:
    a, b = _exact(2.0, 0.05), _exact(1.0, 0.05)
    b = stats.Estimate(b.value, np.random.default_rng(1).normal(0, 0.05 / 1.96, 20000), b.df,
                       b.method)
    ratio = a / b
    assert ratio.value == pytest.approx(2.0)
    lo, hi = ratio.interval()
    assert np.log(hi / lo) / 2 == pytest.approx(0.05 * np.sqrt(2), rel=0.05)
    assert (1 / a).interval() == pytest.approx((1 / a.interval()[1], 1 / a.interval()[0]))


def _in_rounds(rate: float, shared: list[float], own: list[float],
               seed: int, first: int = 1) -> stats.Estimate:
    """A rate measured in len(shared) rounds (numbered from ``first``), one value a round."""
    times = np.exp(np.add(shared, own)) / rate
    return stats.rate([[t] for t in times], 1.0, seed=seed,
                      rounds=list(range(first, first + len(times))))


def test_a_scale_keeps_the_pairing_and_a_ratio_pairs_round_by_round() -> None:
    shared = [0.0, 0.3, -0.2, 0.1]
    a = _in_rounds(2.0, shared, [0.01, -0.01, 0.02, 0.0], seed=1)
    b = _in_rounds(1.0, shared, [0.0, 0.01, 0.0, -0.01], seed=2)
    ratio = (a * 1e6) / (b * 1e6)
    assert ratio.method == stats.METHOD_PAIRED and ratio.df == 3
    # the drift both share (up to 30 %) cancels: the paired interval is a few percent wide
    assert ratio.ci_rel < 0.05 < (a / stats.Estimate(b.value, b.dev, b.df, b.method)).ci_rel
    assert (1e6 / b).blocks.keys() == b.blocks.keys()
    assert (b * -1.0).blocks is None  # no log of a negative scale: nothing left to pair


def test_bounds_arithmetic_splits_the_error_rate() -> None:
    a, b = _exact(2.0, 0.1), _exact(4.0, 0.1)
    best = stats.reduce([a, b], np.max)
    assert isinstance(best, stats.Bounds) and best.value == 4.0
    lo, hi = best.interval()
    # the lower end takes both rows at alpha / 2, the upper end the best row's own interval
    assert lo == pytest.approx(b.interval(0.975)[0]) and hi == pytest.approx(b.interval()[1])
    inverse = 1.0 / best
    assert inverse.value == 0.25 and inverse.interval() == pytest.approx((1 / hi, 1 / lo))
    ratio = best / a
    rlo, rhi = ratio.interval()
    assert rlo == pytest.approx(best.interval(0.975)[0] / a.interval(0.975)[1])
    assert rhi == pytest.approx(best.interval(0.975)[1] / a.interval(0.975)[0])
    assert stats.reduce([a], np.max) is a  # one row is that row


@pytest.mark.parametrize("events, units", [(0, 1e6), (1, 10), (29, 1000), (500_944, 500_000)])
def test_a_count_gets_garwoods_exact_poisson_interval(events: int, units: float) -> None:
    from scipy.stats import chi2

    got = stats.poisson_rate(events, units)
    low = chi2.ppf(0.025, 2 * events) / 2 / units if events else 0.0
    high = chi2.ppf(0.975, 2 * (events + 1)) / 2 / units
    assert got.value == events / units
    assert got.interval() == pytest.approx((low, high), rel=1e-9)
    assert got.events == events and got.units == units


def test_a_count_of_none_is_a_one_sided_bound_never_no_interval() -> None:
    got = stats.poisson_rate(0, 1_000_000)
    assert got.interval()[0] == 0 and got.interval()[1] == pytest.approx(3.689e-6, rel=1e-3)
    assert stats.decide(got, "<", 1e-5, ".3g", "") == (
        "reproduced", "95% interval 0-3.69e-06 lies wholly below 1e-05")
    assert "no interval" not in got.show(".3g")


def test_an_allowance_lowers_only_the_lower_end() -> None:
    plain, allowed = stats.poisson_rate(10_000, 1000), stats.poisson_rate(10_000, 1000, 2000)
    assert allowed.value == plain.value and allowed.interval()[1] == plain.interval()[1]
    assert allowed.interval()[0] == pytest.approx(plain.interval()[0] - 2.0)
    assert stats.poisson_rate(100, 1000, 2000).interval()[0] == 0.0  # never below zero


@pytest.mark.parametrize("hits, trials", [(0, 500), (500, 500), (3, 10)])
def test_a_share_of_a_count_gets_the_clopper_pearson_interval(hits: int, trials: int) -> None:
    from scipy.stats import beta

    low = beta.ppf(0.025, hits, trials - hits + 1) if hits else 0.0
    high = beta.ppf(0.975, hits + 1, trials - hits) if hits < trials else 1.0
    got = stats.binomial_share(hits, trials)
    assert got.interval() == pytest.approx((low, high), rel=1e-9)


@pytest.mark.parametrize("call", [lambda: stats.poisson_rate(-1, 10),
                                  lambda: stats.poisson_rate(1, 0),
                                  lambda: stats.binomial_share(3, 2)])
def test_an_impossible_count_is_refused(call) -> None:
    with pytest.raises(ValueError, match="allowed"):
        call()


def test_paired_estimates_in_different_rounds_combine_as_independent() -> None:
    """Two paired ratios whose rounds differ (neither's among the other's) cannot pair:
    the product says so."""
    shared = [0.0, 0.3, -0.2, 0.1]
    a = _in_rounds(2.0, shared, [0.01, -0.01, 0.02, 0.0], seed=1)
    b = _in_rounds(1.0, shared, [0.0, 0.01, 0.0, -0.01], seed=2)
    c = _in_rounds(1.0, shared[:3], [0.0, 0.02, 0.01], seed=3, first=3)
    d = _in_rounds(1.0, shared[:3], [0.01, 0.0, -0.01], seed=4, first=3)
    assert (a / b).method == (c / d).method == stats.METHOD_PAIRED
    assert ((a / b) / (c / d)).method == stats.METHOD_ROUNDS


def test_a_point_measured_in_more_rounds_pairs_over_the_rounds_both_have() -> None:
    """A look let one side stop after 4 rounds while the other went on to 8: the ratio
    pairs over the 4 rounds both have, centred on their mean log ratio."""
    drift = [0.0, 0.3, -0.2, 0.1, 0.2, -0.1, 0.0, 0.25]
    longer = _in_rounds(2.0, drift, [0.01, -0.01, 0.02, 0.0, 0.3, 0.3, 0.3, 0.3], seed=1)
    shorter = _in_rounds(1.0, drift[:4], [0.0, 0.01, 0.0, -0.01], seed=2)
    for ratio, sign in ((longer / shorter, 1), (shorter / longer, -1)):
        assert ratio.method == stats.METHOD_PAIRED and sorted(ratio.blocks) == [1, 2, 3, 4]
        logs = [sign * (longer.blocks[k] - shorter.blocks[k]) for k in range(1, 5)]
        assert ratio.value == pytest.approx(float(np.exp(np.mean(logs))))
    # the later rounds of the longer side (30 % apart) do not enter the ratio
    assert (longer / shorter).value == pytest.approx(2.0, rel=0.02)


def test_a_quantity_names_the_points_it_was_computed_from() -> None:
    """Provenance: every way a claim combines rows keeps the points of all its parts."""
    shared = [0.0, 0.3, -0.2, 0.1]
    a, b, c = (stats.from_points(_in_rounds(r, shared, [0.01 * i, 0.0, -0.01, 0.02], seed=i),
                                 frozenset({f"variant={n}"}))
               for i, (r, n) in enumerate(((2.0, "a"), (1.0, "b"), (1.5, "c")), 1))
    assert (a / b).points == {"variant=a", "variant=b"}
    assert (a * 3).points == (2.0 / a).points == {"variant=a"}
    everything = {"variant=a", "variant=b", "variant=c"}
    assert stats.reduce([a / b, c / b], np.max).points == everything
    assert stats.reduce([a / b, c / b], np.median).points == everything
    assert stats.geometric_mean([a / b, c / b]).points == everything
    assert (stats.reduce([a, c], np.max) / b).points == everything
    count = stats.from_points(stats.poisson_rate(3, 100.0), frozenset({"variant=d"}))
    assert (count / a).points == {"variant=a", "variant=d"}


def _blocks(ratio: float, spread: float, n: int = 5) -> stats.Estimate:
    """A ratio paired over ``n`` rounds (the production design), its per-round logs
    ``log(ratio) +- spread`` so that their mean is exactly ``log(ratio)``."""
    offsets = np.linspace(-spread, spread, n)
    return stats.paired(ratio, dict(enumerate((np.log(ratio) + offsets).tolist(), 1)))


def test_claims_on_paired_rounds_read_as_their_interval_says() -> None:
    """With intervals of the production design (a ratio paired over five rounds, t with
    4 df): the estimate on the claim's side but the interval across the threshold is
    inconclusive; an interval wholly within 5 % of the threshold reads at the threshold;
    a strict threshold at the interval's very end is not met where a loose one is."""
    wide = _blocks(1.1, 0.20)
    assert wide.value > 1.0 and wide.interval()[0] < 1.0
    assert stats.decide(wide, ">=", 1.0)[0] == "inconclusive"
    close = _blocks(1.0, 0.02)
    low, high = close.interval()
    assert 0.95 < low < 1.0 < high < 1.05
    assert stats.decide(close, ">=", 1.0)[0] == "at the threshold"
    edge = _blocks(1.3, 0.05)
    low, high = edge.interval()
    assert stats.decide(edge, ">=", low)[0] == "reproduced"
    assert stats.decide(edge, ">", low)[0] != "reproduced"
    assert stats.decide(edge, "<=", high)[0] == "reproduced"
    assert stats.decide(edge, "<", high)[0] != "reproduced"
    assert stats.decide(edge, ">", high)[0] == "not reproduced"
    assert stats.decide(edge, ">=", high)[0] != "not reproduced"


def _same_spread(ratio: float, sd: float, n: int) -> stats.Estimate:
    """A ratio paired over ``n`` rounds whose per-round logs have mean ``log(ratio)`` and
    standard deviation ``sd`` exactly, whatever ``n``: the same claim, measured longer."""
    z = np.linspace(-1.0, 1.0, n)
    z = z / z.std(ddof=1)
    return stats.paired(ratio, dict(enumerate((np.log(ratio) + sd * z).tolist(), 1)))


@pytest.mark.parametrize(("ratio", "sd", "op", "settles_as"), [
    (1.08, 0.15, ">=", "reproduced"),
    (0.93, 0.10, ">=", "not reproduced"),
    (0.96, 0.12, "<=", "reproduced"),
    (1.01, 0.06, ">=", "at the threshold"),
])
def test_rounds_to_settle_is_where_the_same_spread_settles_the_claim(
        ratio: float, sd: float, op: str, settles_as: str) -> None:
    """An undecided claim after 5 rounds: measured with the same per-round spread for 10 %
    more rounds than :func:`stats.rounds_to_settle` names, it is settled; 10 % fewer, it
    is not yet (the slack: the bootstrap's quantiles move the interval's ends by ~1 %)."""
    now = _same_spread(ratio, sd, 5)
    assert stats.decide(now, op, 1.0)[0] == "inconclusive"
    rounds = stats.rounds_to_settle(now, 1.0)
    assert rounds is not None and 5 < rounds < 1000
    more, fewer = int(rounds * 1.1) + 1, int(rounds * 0.9) - 1
    assert stats.decide(_same_spread(ratio, sd, more), op, 1.0)[0] == settles_as
    assert stats.decide(_same_spread(ratio, sd, fewer), op, 1.0)[0] == "inconclusive"


def test_rounds_to_settle_says_when_it_cannot_tell() -> None:
    """No figure without an interval over rounds (one value, an exact count); more than
    the most it looks for where the spread is far too wide for its distance."""
    assert stats.rounds_to_settle(stats.Estimate.unknown(1.1, "one value"), 1.0) is None
    assert stats.rounds_to_settle(stats.poisson_rate(3, 100.0), 0.05) is None
    hopeless = _same_spread(1.0, 3.0, 5)
    assert stats.rounds_to_settle(hopeless, 1.0) == stats.SETTLE_MAX + 1


def test_the_harness_computes_a_points_interval_as_the_table_does() -> None:
    """perfgrid.measure.bench stops a point on perfgrid.kit.interval's rate, without this
    module: the same value, interval, method and rounds as stats.rate's, with rounds or
    without."""
    from perfgrid.kit import interval

    processes = [[1.0, 1.02, 0.99], [0.97, 1.01, 1.0], [1.03, 1.05, 1.0], [0.95, 1.0, 0.98]]
    for rounds in (None, [1, 1, 2, 2], [1, 2, 3, 4]):
        core = interval.rate(processes, 3.0, seed=5, rounds=rounds)
        table = stats.rate(processes, 3.0, seed=5, rounds=rounds)
        by_scale = 3.0 / stats.mean_estimate(processes, seed=5, rounds=rounds)
        assert core.interval() == table.interval() == by_scale.interval()
        assert core.ci_rel == table.ci_rel and core.blocks == by_scale.blocks
        assert (core.value, core.method, core.df, core.se) == (table.value, table.method,
                                                              table.df, table.se)
        assert (core.blocks is None) == (rounds is None)
    lone = interval.rate([[1.0]], 3.0)
    assert lone.interval() is None and lone.reason == "one value"


def test_a_geometric_mean_of_estimates_without_common_blocks_combines_them_as_independent():
    """Parts measured in different processes, not rounds: the mean of their logs, with
    their deviations averaged and Welch-Satterthwaite degrees of freedom (not paired)."""
    parts = [stats.rate([[1.0, 1.02], [0.98, 1.01], [1.01, 0.99]], 1.0, seed=s) / k
             for s, k in ((1, 1.0), (2, 4.0))]
    mean = stats.geometric_mean(parts)
    assert mean.value == pytest.approx(np.sqrt(parts[0].value * parts[1].value))
    assert mean.method != stats.METHOD_PAIRED and mean.blocks is None
    low, high = mean.interval()
    assert low < mean.value < high
    assert mean.ci_rel < max(p.ci_rel for p in parts)


def test_a_best_of_chosen_on_first_blocks_names_only_the_chosen_row() -> None:
    """The choice is made on the blocks every row has; after it only the chosen row's
    blocks count, those a look let it have beyond the others' too, so it alone is named
    for more rounds."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(6):
        rounds = 10 if i == 3 else 5  # row 3 is best and was kept on by a look
        logs = np.log(2.0 if i == 3 else 1.0) + rng.normal(0, 0.02, rounds)
        rows.append(stats.from_points(stats.paired(float(np.exp(logs.mean())),
                                                   dict(enumerate(logs.tolist(), 1))),
                                      frozenset({f"row={i}"})))
    best = stats.reduce(rows, np.max)
    assert best.chosen == 3 and best.points == {"row=3"}
    # chosen on the first of the 5 shared rounds, estimated on its other 9
    assert sorted(best.blocks) == list(range(2, 11))
    assert best.value == pytest.approx(2.0, rel=0.03)


def test_an_undecided_claim_says_how_many_rounds_would_settle_it() -> None:
    """The report's reason of an inconclusive claim names the rounds that would settle it
    at its spread; a decided claim's does not."""
    from perfgrid.analyse.analysis import judged

    quantity = _same_spread(1.08, 0.15, 5)
    undecided = judged("toy", "hypothesis", "criterion", quantity, ">=", 1.0)
    assert undecided.verdict == "inconclusive"
    rounds = stats.rounds_to_settle(quantity, 1.0)
    assert undecided.reason.endswith(f"; at this spread about {rounds:,} rounds would settle it")
    decided = judged("toy", "hypothesis", "criterion", _same_spread(1.3, 0.05, 5), ">=", 1.0)
    assert decided.verdict == "reproduced" and "settle" not in decided.reason


def _paired(logs: list[float]) -> stats.Estimate:
    return stats.paired(float(np.exp(np.mean(logs))), dict(enumerate(logs, 1)))




def test_a_share_keeps_its_interval_within_zero_and_one() -> None:
    """A share near 1 with a wide spread: on the log scale its interval passes 100 %, on
    the logit scale (stats.Share) it stays inside (0, 1) and still holds the estimate;
    near 0 the two scales agree."""
    near_one = _exact(0.864, 0.5)
    assert near_one.interval()[1] > 1.0
    lo, hi = stats.Share(near_one).interval()
    assert 0 < lo < 0.864 < hi < 1
    near_zero = _exact(0.01, 0.2)
    assert stats.Share(near_zero).interval() == pytest.approx(near_zero.interval(), rel=0.02)
    assert stats.Share(stats.binomial_share(0, 50)).interval()[0] == 0.0


def test_a_paired_interval_is_exactly_the_t_interval_over_its_blocks() -> None:
    """A quantity paired over rounds: ``exp(log value +- t(blocks - 1) * se)`` with the
    standard error of the blocks' mean log, at every level, to 1e-9 (not the quantiles of
    normal draws); a scale keeps it, and a ratio paired with another over the same rounds
    is the t interval over the per-round log ratios."""
    from scipy.stats import t as student

    logs = [0.10, 0.02, 0.15, -0.03, 0.08]
    quantity = _paired(logs)
    se = float(np.std(logs, ddof=1)) / np.sqrt(len(logs))

    def analytic(value: float, se: float, df: int, level: float) -> tuple[float, float]:
        half = student.ppf(0.5 + level / 2, df) * se
        return float(np.exp(np.log(value) - half)), float(np.exp(np.log(value) + half))

    for level in (0.95, 0.90, 1 - 0.05 / 3):
        assert quantity.interval(level) == pytest.approx(
            analytic(quantity.value, se, 4, level), rel=1e-9, abs=0)
    scaled = quantity * 2.5
    assert scaled.interval() == pytest.approx(analytic(scaled.value, se, 4, 0.95),
                                              rel=1e-9, abs=0)
    other = [0.01, -0.02, 0.05, 0.00, 0.03]
    ratio = quantity / _paired(other)
    diffs = np.subtract(logs, other)
    assert ratio.method == stats.METHOD_PAIRED
    assert ratio.interval() == pytest.approx(
        analytic(ratio.value, float(np.std(diffs, ddof=1)) / np.sqrt(5), 4, 0.95),
        rel=1e-9, abs=0)
    # combined with an estimate of no common rounds: replicate by replicate, as before
    apart = quantity / stats.rate([[1.0, 1.02], [0.98, 1.01], [1.01, 0.99]], 1.0, seed=3)
    assert apart.method != stats.METHOD_PAIRED and apart.has_interval


def _rows_of(logs: list[list[float]]) -> list[stats.Estimate]:
    return [_paired(row) for row in logs]


#: six rows in the same six rounds: row 0 looks best in the first two (where the choice is
#: made) and is below 1 after; row 1 is steadily at about 1.22, above 1 in every round
_MISLED = [[0.30, 0.30, -0.10, -0.12, -0.08, -0.10],
           [0.20, 0.18, 0.20, 0.22, 0.18, 0.21],
           *([0.00 + d, -0.01, 0.01, 0.00, -0.02, 0.01] for d in (0.0, 0.01, -0.01, 0.02))]


def test_a_chosen_best_of_reads_not_reproduced_only_with_the_bounds_over_all_rows() -> None:
    """A best-of chosen on the first rounds (row 0, whose later rounds are below 1) bounds
    the chosen row's truth, which is at most the best row's: its interval lies wholly below
    1 while row 1's truth (about 1.22) clears it. "Not reproduced" for ``max >= 1`` needs
    the simultaneous bounds over all rows below 1 too, so it reads inconclusive, and says
    why; "reproduced" stays with the chosen row's lower end. Kept through a scale, a ratio
    and the between-run widening; the least of rows mirrors it for ``<=``."""
    rows = _rows_of(_MISLED)
    best = stats.reduce(rows, np.max)
    assert best.chosen == 0 and best.interval()[1] < 1.0
    verdict, reason = stats.decide(best, ">=", 1.0)
    assert verdict == "inconclusive", reason
    assert "simultaneous bounds over all rows" in reason
    assert stats.decide(best, ">=", 0.5)[0] == "reproduced"
    assert stats.decide(best / 2.0, ">=", 0.5)[0] == "inconclusive"
    assert stats.decide(stats.Widened(best, 0.01), ">=", 1.0)[0] == "inconclusive"
    den = _paired([0.0, 0.01, -0.01, 0.0, 0.01, -0.01])
    assert stats.decide(best / den, ">=", 1.0)[0] == "inconclusive"
    # the other way round: one over a best-of bounds its truth from above only
    assert stats.decide(1.0 / best, "<=", 1.0)[0] == "inconclusive"
    least = stats.reduce(_rows_of([[-v for v in row] for row in _MISLED]), np.min)
    assert least.chosen == 0 and least.interval()[0] > 1.0
    assert stats.decide(least, "<=", 1.0)[0] == "inconclusive"
    assert stats.decide(least, "<=", 2.0)[0] == "reproduced"


def test_a_chosen_best_of_below_the_threshold_on_every_row_is_not_reproduced() -> None:
    """Where every row's interval lies below the threshold, so does the simultaneous bound:
    the chosen best-of still reads not reproduced."""
    rows = _rows_of([[v - 0.5 for v in row] for row in _MISLED])
    best = stats.reduce(rows, np.max)
    assert best.chosen == 0
    assert stats.decide(best, ">=", 1.0)[0] == "not reproduced"


@pytest.mark.simulation
def test_two_rounds_get_the_analytic_t_interval_and_cover_95_percent() -> None:
    """A mean over two rounds (one process of one value each, as claim points are
    measured): the bootstrap over two rounds knows three resamples and covered about 93 %
    (a ratio of two such, 86 %); the t interval over the two round means (1 df) covers
    93-97 %, for the mean and for the rate made from it; a ratio of two measured in other
    rounds (combined as independent, Welch-Satterthwaite df) 95-99 %, conservative."""
    rng = np.random.default_rng(20261205)
    draws, hits, rate_hits, ratio_hits = 3000, 0, 0, 0
    for i in range(draws):
        processes = [[float(np.exp(rng.normal(0, 0.05)))] for _ in range(2)]
        mean = stats.mean_estimate(processes, seed=i, rounds=[1, 2])
        assert mean.method == stats.METHOD_ROUNDS and mean.df == 1
        lo, hi = mean.interval()
        hits += lo <= 1.0 <= hi
        lo, hi = stats.rate(processes, 1.0, seed=i, rounds=[1, 2]).interval()
        rate_hits += lo <= 1.0 <= hi
        other = [[float(np.exp(rng.normal(0, 0.05)))] for _ in range(2)]
        lo, hi = (mean / stats.mean_estimate(other, seed=i, rounds=[3, 4])).interval()
        ratio_hits += lo <= 1.0 <= hi
    print(f"two rounds: coverage {hits / draws:.3f}, of the rate {rate_hits / draws:.3f}, "
          f"of a ratio of two {ratio_hits / draws:.3f}")
    assert 0.93 <= hits / draws <= 0.97
    assert 0.93 <= rate_hits / draws <= 0.97
    assert 0.95 <= ratio_hits / draws <= 0.99


def test_two_rounds_interval_is_the_t_interval_over_the_round_means() -> None:
    """Exactly ``exp(log mean +- t(1) * sd(log round means) / sqrt(2))``."""
    from scipy.stats import t as student

    processes = [[1.0, 1.1, 0.9], [1.3, 1.2, 1.25]]
    mean = stats.mean_estimate(processes, seed=1, rounds=["a", "b"])
    logs = np.log([np.mean(p) for p in processes])
    half = student.ppf(0.975, 1) * np.std(logs, ddof=1) / np.sqrt(2)
    centre = np.log(np.mean(np.concatenate(processes)))
    assert mean.interval() == pytest.approx((np.exp(centre - half), np.exp(centre + half)),
                                            rel=1e-9, abs=0)


def test_rounds_that_disagree_are_flagged() -> None:
    """A round whose log lies beyond the others' prediction bound (one round three times
    slower) gets a note naming it; rounds that agree, a quantity without rounds, and a
    best-of's bounds get none."""
    calm = _paired([0.10, 0.05, 0.12, 0.08, 0.02, 0.09])
    assert stats.disagreeing_rounds(calm) == ""
    odd = _paired([0.10, 0.05, 0.12, 0.08 - np.log(3.0), 0.02, 0.09])
    note = stats.disagreeing_rounds(odd)
    assert note.startswith("; ") and "round 4" in note
    assert stats.disagreeing_rounds(stats.Widened(odd, 0.02)) == note
    assert stats.disagreeing_rounds(stats.Share(odd / 4.0)) == note
    assert stats.disagreeing_rounds(stats.Estimate.unknown(1.0, "one value")) == ""
    assert stats.disagreeing_rounds(_paired([0.1, 0.2, 0.15])) == ""  # too few to tell


@pytest.mark.simulation
def test_rounds_that_agree_are_rarely_flagged() -> None:
    """Normal rounds, 4 to 12 of them: flagged in at most 2 % of draws (1 % by design)."""
    rng = np.random.default_rng(5)
    flagged = 0
    draws = 2000
    for i in range(draws):
        n = 4 + i % 9
        flagged += bool(stats.disagreeing_rounds(_paired(rng.normal(0, 0.1, n).tolist())))
    print(f"normal rounds flagged: {flagged / draws:.3f}")
    assert flagged / draws <= 0.02
