"""Coverage of every way a claim's interval is computed, by simulation (1,000 draws each).

Each draw makes synthetic rows with a known truth, measured in ``BLOCKS`` rounds (one
process and one value a round, as claim points are measured), computes the claim's
quantity as the analysis does, and counts how often its 95 % interval holds the truth.
Noise on the log scale: a part every point of a round shares (drift, ``SHARED``) and a
part of each point's own process (``OWN``), about this VM's 0.3 correlation.
"""

from __future__ import annotations

import numpy as np
import pytest

from perfgrid import stats

DRAWS = 1000
BLOCKS = 6
SHARED, OWN = 0.06, 0.09


def _row(truth: float, shared: np.ndarray, rng: np.random.Generator, own: float = OWN,
         noise=None) -> stats.Estimate:
    """One point's rate over ``len(shared)`` rounds (each one process, one value)."""
    draw = noise(rng, len(shared)) if noise is not None else rng.normal(0, own, len(shared))
    times = np.exp(shared + draw) / truth
    labels = list(range(1, len(shared) + 1))
    return stats.rate([[t] for t in times], 1.0, seed=int(rng.integers(1 << 30)),
                      rounds=labels)


def _covers(quantity, truth: float) -> bool:
    lo, hi = quantity.interval()
    return lo <= truth <= hi


def _coverage(make, truth: float, draws: int = DRAWS, seed: int = 1) -> float:
    rng = np.random.default_rng(seed)
    return sum(_covers(make(rng), truth) for _ in range(draws)) / draws


def _shared(rng: np.random.Generator, blocks: int = BLOCKS) -> np.ndarray:
    return rng.normal(0, SHARED, blocks)


def test_a_paired_ratio_covers_and_is_narrower_than_an_unpaired_one() -> None:
    """Both sides in the same rounds: the per-round log ratio is the unit (t, blocks - 1)."""
    def paired(rng):
        shared = _shared(rng)
        return _row(1.3, shared, rng) / _row(1.0, shared, rng)

    coverage = _coverage(paired, 1.3)
    rng = np.random.default_rng(2)
    shared = _shared(rng)
    a, b = _row(1.3, shared, rng), _row(1.0, shared, rng)
    ratio = a / b
    assert ratio.method == stats.METHOD_PAIRED and ratio.df == BLOCKS - 1
    independent = stats.Estimate(a.value, a.dev, a.df, a.method) / stats.Estimate(
        b.value, b.dev, b.df, b.method)
    print(f"paired ratio: coverage {coverage:.3f}")
    assert 0.93 <= coverage <= 0.97
    assert ratio.ci_rel < independent.ci_rel


def test_a_paired_ratio_of_ratios_stays_paired() -> None:
    """(a / b) / (c / d), all four in the same rounds: still one t over the blocks."""
    def double(rng):
        shared = _shared(rng)
        a, b, c, d = (_row(t, shared, rng) for t in (2.0, 1.0, 1.0, 1.25))
        return (a / b) / (c / d)

    coverage = _coverage(double, 2.0 / 0.8)
    print(f"paired ratio of ratios: coverage {coverage:.3f}")
    assert 0.93 <= coverage <= 0.97


def _old_best_of(parts: list[stats.Estimate]) -> stats.Estimate:
    """The best-of that perfgrid used before: the maximum replicate by replicate, widened
    by t. Kept here as the negative control."""
    values = np.array([p.value for p in parts])
    reps = np.log(values)[:, None] + np.stack([p.dev for p in parts])
    dev = np.log(np.exp(reps).max(axis=0)) - np.log(values.max())
    return stats.Estimate(float(values.max()), dev, float(min(p.df for p in parts)),
                          stats.METHOD_HIERARCHICAL)


def _equal_rows(k: int, rng: np.random.Generator) -> list[stats.Estimate]:
    """K rows of the same true rate 1, measured at different moments (no shared block)."""
    return [_row(1.0, _shared(rng), rng) for _ in range(k)]


@pytest.mark.parametrize("k", [2, 4, 8, 32])
def test_a_best_of_k_rows_covers_the_best_truth(k: int) -> None:
    """Equal rows are the worst case for a maximum: its estimate is biased upward by the
    most. Up to four rows: the simultaneous lower end (Bonferroni over K) and the plain
    upper end, 95-99 % (conservative by design: the upper end almost never misses when K
    rows all have the best truth). From five rows on, measured in the same six blocks: the
    row chosen on the first two blocks, estimated on the other four (paired, t with 3 df)."""
    def best(rng):
        found = stats.reduce(_equal_rows(k, rng), np.max)
        assert (found.method == stats.METHOD_PAIRED) == (k >= stats.CHOOSE_FROM)
        return found

    coverage = _coverage(best, 1.0, seed=10 + k)
    print(f"best of {k}: coverage {coverage:.3f}")
    assert 0.93 <= coverage <= 0.99


@pytest.mark.parametrize("k", [32])
def test_a_best_chosen_on_the_same_blocks_it_is_estimated_on_would_not_cover(k: int) -> None:
    """The negative control of the choice: the best row chosen on all six blocks and its
    mean over the same six reported (what choosing without holding blocks back gives)
    covers under 80 % at K = 32 (0.62 here; 0.86 at K = 8), where the held-back estimate
    above covers 93-99 %."""
    from scipy.stats import t as student

    def naive_covers(rng) -> bool:
        rows = _equal_rows(k, rng)
        logs = np.array([[r.blocks[b] for b in sorted(r.blocks)] for r in rows])
        best = logs[int(np.argmax(logs.mean(axis=1)))]
        half = student.ppf(0.975, best.size - 1) * best.std(ddof=1) / np.sqrt(best.size)
        return abs(best.mean()) <= half

    rng = np.random.default_rng(30 + k)
    coverage = sum(naive_covers(rng) for _ in range(DRAWS)) / DRAWS
    print(f"best of {k} chosen and estimated on the same blocks: coverage {coverage:.3f}")
    assert coverage < 0.80


def test_a_chosen_best_of_unequal_rows_never_claims_more_than_the_best_truth() -> None:
    """Eight rows of truths 1.0-1.35 in the same six blocks: the chosen row is at worst a
    near-best one, so the lower end stays at or below the best truth (a "reproduced" for a
    best-of claim is never wrongly granted) in at least 97.5 % of draws, and the interval
    holds the chosen row's own truth in 93-97 %."""
    truths = np.linspace(1.0, 1.35, 8)
    rng = np.random.default_rng(8)
    below, holds = 0, 0
    for _ in range(DRAWS):
        shared = _shared(rng)
        rows = [_row(t, shared, rng) for t in truths]
        found = stats.reduce(rows, np.max)
        lo, hi = found.interval()
        below += lo <= truths.max()
        holds += lo <= truths[found.chosen] <= hi
    print(f"chosen of 8 unequal: lower end <= best truth {below / DRAWS:.3f}, "
          f"covers the chosen row {holds / DRAWS:.3f}")
    assert below / DRAWS >= 0.975
    assert 0.93 <= holds / DRAWS <= 0.97


def test_a_best_of_one_clear_winner_is_still_covered() -> None:
    """One row well ahead of seven others: the maximum's interval covers the winner."""
    def best(rng):
        return stats.reduce([_row(1.5, _shared(rng), rng),
                             *(_row(1.0, _shared(rng), rng) for _ in range(7))], np.max)

    coverage = _coverage(best, 1.5, seed=3)
    print(f"best of 8, one winner: coverage {coverage:.3f}")
    assert 0.93 <= coverage <= 0.99


@pytest.mark.parametrize("k", [8, 32])
def test_negative_control_the_old_best_of_does_not_cover(k: int) -> None:
    """The bootstrap of the maximum does not know the selection: under 80 % at K = 8."""
    coverage = _coverage(lambda rng: _old_best_of(_equal_rows(k, rng)), 1.0, seed=20 + k)
    print(f"old best of {k}: coverage {coverage:.3f}")
    assert coverage < 0.80


def test_a_median_of_ratios_covers_the_median_truth() -> None:
    """A median of five paired ratios (truths 0.9-1.3). Conservative: both ends take every
    row at alpha / K (Bonferroni), and with rows this far apart the median's interval is
    the middle row's at that stricter level, so it covers nearly always."""
    truths = [0.9, 1.0, 1.1, 1.2, 1.3]

    def median(rng):
        ratios = []
        for truth in truths:
            shared = _shared(rng)
            ratios.append(_row(truth, shared, rng) / _row(1.0, shared, rng))
        return stats.reduce(ratios, np.median)

    coverage = _coverage(median, 1.1, seed=4)
    print(f"median of 5 ratios: coverage {coverage:.3f}")
    assert 0.93 <= coverage <= 1.0


def test_a_geometric_mean_of_ratios_covers_and_is_narrower_than_their_median() -> None:
    """The typical ratio over five points measured in the same rounds (truths 0.9-1.3):
    the mean log ratio is taken block by block and paired, so it covers like one ratio,
    and the single points' noise averages out instead of paying Bonferroni's split."""
    truths = [0.9, 1.0, 1.1, 1.2, 1.3]
    typical = float(np.exp(np.mean(np.log(truths))))

    def ratios(rng):
        shared = _shared(rng)
        return [_row(t, shared, rng) / _row(1.0, shared, rng) for t in truths]

    coverage = _coverage(lambda rng: stats.geometric_mean(ratios(rng)), typical, seed=7)
    rng = np.random.default_rng(8)
    found = ratios(rng)
    mean, median = stats.geometric_mean(found), stats.reduce(found, np.median)
    print(f"geometric mean of 5 ratios: coverage {coverage:.3f}")
    assert 0.93 <= coverage <= 0.97
    assert mean.method == stats.METHOD_PAIRED and mean.df == BLOCKS - 1
    low, high = median.interval()
    assert mean.ci_rel < (high - low) / 2 / median.value / 2


def test_a_geometric_mean_of_heavy_tailed_ratios_still_covers() -> None:
    """The same over three points with t(3) noise on the log scale."""
    truths = [0.8, 1.0, 1.5]
    typical = float(np.exp(np.mean(np.log(truths))))

    def heavy(rng, n):
        return OWN * rng.standard_t(3, n) / np.sqrt(3.0)

    def mean(rng):
        shared = _shared(rng)
        return stats.geometric_mean([_row(t, shared, rng, noise=heavy)
                                     / _row(1.0, shared, rng, noise=heavy) for t in truths])

    coverage = _coverage(mean, typical, seed=9)
    print(f"geometric mean, heavy tails: coverage {coverage:.3f}")
    assert 0.93 <= coverage <= 0.98


def test_heavy_tails_a_paired_ratio_still_covers() -> None:
    """Noise from Student's t with 3 degrees of freedom on the log scale."""
    def heavy(rng, n):
        return OWN * rng.standard_t(3, n) / np.sqrt(3.0)

    def ratio(rng):
        shared = _shared(rng)
        return _row(1.3, shared, rng, noise=heavy) / _row(1.0, shared, rng, noise=heavy)

    coverage = _coverage(ratio, 1.3, seed=5)
    print(f"heavy tails: coverage {coverage:.3f}")
    assert 0.93 <= coverage <= 0.98


@pytest.mark.xfail(strict=True, reason="issue #25: a bimodal point (one round in ten 3x "
                   "slower) needs pinning, stratifying by placement or many more blocks; "
                   "a t interval over six blocks covers its mean about a fifth of the time")
def test_bimodal_rounds_are_covered() -> None:
    """One round in ten three times slower on one side, the mean ratio as the truth."""
    def bimodal(rng, n):
        return rng.normal(0, OWN, n) + np.where(rng.random(n) < 0.1, np.log(3.0), 0.0)

    mean_slow = 0.9 + 0.1 * 3.0  # the true mean time of the bimodal side, relative

    def ratio(rng):
        shared = _shared(rng)
        return _row(1.0, shared, rng) / _row(1.0, shared, rng, noise=bimodal)

    coverage = _coverage(ratio, 1.0 / mean_slow, seed=6)
    print(f"bimodal: coverage {coverage:.3f}")
    assert coverage >= 0.93


def _experiment_of_paired_claims(rng: np.random.Generator, claims: int, blocks: int,
                                 spread: float, noise=None) -> tuple[list, list, list]:
    """One experiment's paired claims (ratios measured in the same ``blocks`` rounds), each
    with its own noise level (``OWN`` times a log-normal factor of sd ``spread``), judged
    as stats.moderated judges them: the prior fitted from all of them. Returns the
    quantities as measured, as moderated, and each claim's (truth, noise level)."""
    truths = np.exp(rng.normal(0, 0.3, claims))
    levels = OWN * np.exp(spread * rng.standard_normal(claims))
    found = []
    for truth, level in zip(truths, levels, strict=True):
        draw = noise(rng, blocks) if noise is not None else rng.standard_normal(blocks)
        logs = np.log(truth) + level * draw
        found.append(stats.paired(float(np.exp(logs.mean())), dict(enumerate(logs, 1))))
    prior = stats.fit_variance_prior([stats.block_spread(q) for q in found])
    return found, [stats.moderated(q, prior) for q in found], list(zip(truths, levels,
                                                                       strict=True))


@pytest.mark.parametrize(("blocks", "spread"), [(3, 0.0), (3, 0.5), (6, 0.5)])
def test_moderated_paired_claims_cover_over_an_experiment(blocks: int, spread: float) -> None:
    """Six paired claims of one experiment, their spreads moderated by one another
    (Smyth's moderated t): over all claims the intervals cover 93-97 %, also where the
    claims' noise levels differ (log-normal, sd 0.5: the noisiest is about 2.5 times the
    quietest), and the noisiest claim of each experiment still at least 88 % (it borrows
    a smaller spread than its own unless it lies past the prior's 75th percentile). At
    three rounds the intervals are much narrower than t with two degrees of freedom."""
    rng = np.random.default_rng(11 + blocks)
    covered = noisiest = 0
    total, width, plain = 0, [], []
    for _ in range(DRAWS):
        measured, found, truths = _experiment_of_paired_claims(rng, 6, blocks, spread)
        hits = [_covers(q, truth) for q, (truth, _) in zip(found, truths, strict=True)]
        covered += sum(hits)
        total += len(hits)
        noisiest += hits[int(np.argmax([level for _, level in truths]))]
        width.append(np.median([q.ci_rel for q in found]))
        plain.append(np.median([q.ci_rel for q in measured]))
    coverage = covered / total
    print(f"moderated, {blocks} blocks, spread {spread}: coverage {coverage:.3f}, "
          f"noisiest {noisiest / DRAWS:.3f}")
    assert 0.93 <= coverage <= 0.97
    assert noisiest / DRAWS >= 0.88
    if blocks == 3:
        assert np.median(width) < 0.8 * np.median(plain)


def test_moderated_paired_claims_with_heavy_tails_still_cover() -> None:
    """The same with t(3) noise on the log scale, three rounds, unequal noise levels."""
    def heavy(rng, n):
        return rng.standard_t(3, n) / np.sqrt(3.0)

    rng = np.random.default_rng(17)
    covered = total = 0
    for _ in range(DRAWS):
        _, found, truths = _experiment_of_paired_claims(rng, 6, 3, 0.5, noise=heavy)
        covered += sum(_covers(q, truth) for q, (truth, _) in zip(found, truths, strict=True))
        total += len(found)
    print(f"moderated, heavy tails: coverage {covered / total:.3f}")
    assert 0.93 <= covered / total <= 0.98
