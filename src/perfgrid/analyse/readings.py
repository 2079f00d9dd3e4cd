"""How sure a reading is: the chance that another run reads a claim differently, and how
many runs pooled would decide it.

A claim's reading (reproduced, not reproduced, at the threshold, inconclusive) is a
function of its estimate and its interval's sides (perfgrid.analyse.stats.decide): the threshold
and the edges of the equivalence band are its boundaries. Near one, an honest rerun can
read differently; that is no defect, but an unannounced flip is. So each reading carries:

- ``p_differ``: the predicted chance that another run on this machine kind reads
  differently. The run's true within-run variance is drawn as uncertain as its df leave
  it (``se^2 df / chi2(df)``), the next run's estimate about this one's with variance
  ``2 (sigma^2 + tau^2)`` (its truth unknown, flat prior: with tau 0 the gap is
  ``se sqrt(2)`` times Student's t), its own within-run variance ``sigma^2 chi2(df) / df``,
  its interval sides built as this run's were, and its reading
  taken by :func:`reading` (the same rule as stats.decide, every boundary, the TOST band
  edges included). Monte Carlo, seeded by the claim, so a table repeats. A best (or
  least) of rows with simultaneous bounds is not one estimate: the next run's best row
  can change, and the end that pays for every row moves with every row's spread, each
  moderated or kept by the guard on its own. So its next run draws each row
  (:class:`Rows`: about this run's row, its spread as the prior and its rounds tell it)
  and takes the bounds as stats.reduce does. Where truths are unevenly spread about a
  boundary the flat prior is a guide, not a law (docs/methods.md has the figures).
- ``runs_needed``: the fewest runs which, pooled with random effects (a Hartung-Knapp
  interval, t with runs - 1 df), decide the claim or read it at the threshold with 90 %
  power, were its truth this run's estimate; None past :data:`MAX_RUNS` (it sits on a
  boundary).

All on the claim's own scale: log, or logit for a share.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

# scipy.special's quantiles, not scipy.stats': the same figures, without the argument
# checks that cost more than the quantile itself (a claim calls them thousands of times)
from scipy import special

#: a reading whose p_differ is at least this is marked "near a boundary"
NEAR = 0.2
#: draws per claim for p_differ
DRAWS = 8_000
#: runs_needed looks this far; beyond it the claim is said to sit on a boundary
MAX_RUNS = 100
#: the power runs_needed is sized for
POWER = 0.90
READINGS = ("not reproduced", "inconclusive", "at the threshold", "reproduced")


@dataclass(frozen=True)
class Boundaries:
    """A claim's rule on its scale: ``line`` the threshold, ``band`` the equivalence band's
    edges (None where the threshold is not positive), ``op`` as stats.decide takes it."""

    op: str
    line: float
    band: tuple[float, float] | None


def boundaries(op: str, threshold: float, margin: float, scale: str = "log") -> Boundaries:
    """The rule of ``op threshold`` within ``margin`` (stats.band) on ``scale``."""
    to = to_scale(scale)
    if not threshold > 0:
        return Boundaries(op, to(threshold) if threshold > 0 else -math.inf, None)
    low, high = threshold / (1 + margin), threshold * (1 + margin)
    return Boundaries(op, to(threshold), (to(low), to(high)))


def to_scale(scale: str):
    """The map from a claim's value to its scale (log, or logit for a share): the ends of
    the range go to -inf and inf."""
    if scale == "logit":
        return lambda p: (math.log(p / (1 - p)) if 0 < p < 1
                          else (math.inf if p >= 1 else -math.inf))
    return lambda v: math.log(v) if v > 0 else -math.inf


def reading(y: np.ndarray, lo95: np.ndarray, hi95: np.ndarray, lo90: np.ndarray,
            hi90: np.ndarray, rule: Boundaries) -> np.ndarray:
    """The reading (an index into :data:`READINGS`) of estimates ``y`` whose 95 % interval
    reaches ``lo95`` below and ``hi95`` above them, their 90 % ``lo90`` and ``hi90``: the
    rule of stats.decide, vectorised."""
    out = np.full(np.shape(y), READINGS.index("inconclusive"))
    low, high = y - lo95, y + hi95
    strict = len(rule.op) == 1
    if rule.op == "~":
        assert rule.band is not None
        fails = (low > rule.band[1]) | (high < rule.band[0])
        out = np.where(fails, READINGS.index("not reproduced"), out)
    elif rule.op.startswith(">"):
        holds = low > rule.line if strict else low >= rule.line
        fails = high <= rule.line if strict else high < rule.line
        out = np.where(holds, READINGS.index("reproduced"), out)
        out = np.where(fails, READINGS.index("not reproduced"), out)
    else:
        holds = high < rule.line if strict else high <= rule.line
        fails = low >= rule.line if strict else low > rule.line
        out = np.where(holds, READINGS.index("reproduced"), out)
        out = np.where(fails, READINGS.index("not reproduced"), out)
    if rule.band is not None:
        near = (y - lo90 >= rule.band[0]) & (y + hi90 <= rule.band[1])
        at = READINGS.index("reproduced" if rule.op == "~" else "at the threshold")
        out = np.where(near, at, out)
    return out


@dataclass(frozen=True)
class Sides:
    """An interval's sides about its estimate on the claim's scale: the within-run part
    (each side at 95 % and 90 %) and the between-run ``tau`` added to them."""

    lo95: float
    hi95: float
    lo90: float
    hi90: float
    se: float
    df: float
    tau: float


def _widen(side: np.ndarray, tau: float, level: float) -> np.ndarray:
    z = float(special.ndtri(0.5 + level / 2))
    return np.sqrt(side**2 + (z * tau) ** 2)


@dataclass(frozen=True)
class Prior:
    """A within-run variance prior (perfgrid.analyse.betweenrun.smyth_prior) as a claim's runs use
    it, on the claim's scale: ``s0_2`` and ``d0`` (at most 1e6: inf is the prior alone),
    each run's own ``df``, and the quantile of F(df, d0) past which a run's variance ratio
    keeps its own spread (the guard: a disturbed run is not made sure)."""

    s0_2: float
    d0: float
    df: float
    f_crit: float

    @classmethod
    def of(cls, s0_2: float, d0: float, df: float, guard: float) -> Prior:
        d0 = min(d0, 1e6)
        # scipy.special's quantile, as scipy.stats' f.ppf computes it, without its argument checks
        # (a claim's rows make this call tens of thousands of times)
        return cls(s0_2, d0, df, float(special.fdtri(df, d0, guard)))

    def moderated(self, s2: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(variance, df, kept) of runs whose own variance is ``s2``: Smyth's
        ``(d0 s0^2 + df s^2) / (d0 + df)`` on ``d0 + df`` df, or, past the guard (kept),
        their own on ``df``."""
        s2 = np.asarray(s2, dtype=float)
        kept = s2 / self.s0_2 > self.f_crit
        pooled, pooled_df = self.pooled(s2)
        return np.where(kept, s2, pooled), np.where(kept, self.df, pooled_df), kept

    def pooled(self, s2: np.ndarray | float) -> tuple[np.ndarray | float, float]:
        """(variance, df): Smyth's ``(d0 s0^2 + df s^2) / (d0 + df)`` on ``d0 + df`` df,
        the guard aside (what prior and run tell together)."""
        return (self.d0 * self.s0_2 + self.df * s2) / (self.d0 + self.df), self.d0 + self.df


def _next_sides_moderated(sigma2: np.ndarray, prior: Prior, rng: np.random.Generator
                          ) -> tuple[np.ndarray, ...]:
    """The next run's within-run sides (95 % and 90 %, symmetric t) when its spread is
    moderated as this run's was, the guard included."""
    var, _, kept = prior.moderated(sigma2 * rng.chisquare(prior.df, sigma2.size) / prior.df)
    se = np.sqrt(var)
    moderated_df = prior.d0 + prior.df
    q95 = np.where(kept, special.stdtrit(prior.df, 0.975), special.stdtrit(moderated_df, 0.975))
    q90 = np.where(kept, special.stdtrit(prior.df, 0.95), special.stdtrit(moderated_df, 0.95))
    return q95 * se, q95 * se, q90 * se, q90 * se


@dataclass(frozen=True)
class Rows:
    """A best (``reduction`` "max") or least ("min") of rows with simultaneous bounds
    (perfgrid.analyse.stats.reduce), as its reading takes it: each row's estimate on the
    claim's scale, its within-run se and df as its prior and its rounds tell them together
    (Smyth's moderated variance, the guard aside: perfgrid.analyse.analysis.rows_of), and
    the prior that moderates the row (analysis.prior_of: its raw df), or None.

    Its next run is not one estimate about this one: which row is best can change, and the
    end that pays for every row (the near end of a best-of, at ``alpha / K``) moves with
    every row's spread, each moderated or kept by the guard on its own."""

    values: tuple[float, ...]
    se: tuple[float, ...]
    df: tuple[float, ...]
    priors: tuple[Prior | None, ...]
    reduction: str


def _next_rows_reading(rows: Rows, tau: float, rule: Boundaries, draws: int,
                       rng: np.random.Generator) -> np.ndarray:
    """The next run's readings of a best or least of ``rows``: each row's truth unknown
    (flat prior) and its true within-run variance as uncertain as its df leave it, the
    next run's row about this run's with variance ``2 sigma^2``, all rows moved by one
    between-run draw (``2 tau^2``), each row's spread drawn and moderated as this run's
    was (the guard included), and the bounds taken as stats.reduce takes them."""
    k = len(rows.values)
    y, sd, df = (np.empty((k, draws)) for _ in range(3))
    for i, (value, se, dfi, prior) in enumerate(
            zip(rows.values, rows.se, rows.df, rows.priors, strict=True)):
        finite = math.isfinite(dfi) and dfi > 0
        sigma2 = se**2 * dfi / rng.chisquare(dfi, draws) if finite else np.full(draws, se**2)
        y[i] = value + np.sqrt(2 * sigma2) * rng.standard_normal(draws)
        if prior is not None:
            var, df[i], _ = prior.moderated(sigma2 * rng.chisquare(prior.df, draws) / prior.df)
        elif finite:
            var, df[i] = sigma2 * rng.chisquare(dfi, draws) / dfi, dfi
        else:
            var, df[i] = sigma2, math.inf
        sd[i] = np.sqrt(var)
    y = y + math.sqrt(2) * tau * rng.standard_normal(draws)
    best = rows.reduction == "max"
    pick = np.max if best else np.min
    value = pick(y, axis=0)
    dfs, at = np.unique(df, return_inverse=True)  # a few df: moderated, kept, a row's own
    at = at.reshape(df.shape)
    sides = []
    for level in (0.95, 0.90):
        plain = special.stdtrit(dfs, 0.5 + level / 2)[at] * sd  # scipy.stats' t.ppf, unchecked
        strict = special.stdtrit(dfs, 1 - (1 - level) / (2 * k))[at] * sd
        low = pick(y - (strict if best else plain), axis=0)
        high = pick(y + (plain if best else strict), axis=0)
        sides += [_widen(value - low, tau, level), _widen(high - value, tau, level)]
    lo95, hi95, lo90, hi90 = sides
    return reading(value, lo95, hi95, lo90, hi90, rule)


def p_differ(estimate: float, sides: Sides, rule: Boundaries, now: str,
             key: str = "", draws: int = DRAWS, prior: Prior | None = None,
             rows: Rows | None = None) -> float:
    """The chance that another run reads differently from ``now`` (module docstring). With
    a ``prior`` (the claim's spread moderated by its earlier runs), the run's true spread
    is as uncertain as the moderated df leave it, and the next run's is moderated too. A
    best or least of ``rows`` draws the next run's rows instead (:class:`Rows`)."""
    if not (math.isfinite(estimate) and sides.se > 0 and math.isfinite(sides.se)):
        return math.nan
    rng = np.random.default_rng(zlib.crc32(f"{key}|{estimate!r}".encode()))
    if rows is not None:
        found = _next_rows_reading(rows, sides.tau, rule, draws, rng)
        return float(np.mean(found != READINGS.index(now)))
    if prior is not None:
        sigma2 = sides.se**2 * sides.df / rng.chisquare(sides.df, draws)
        y = estimate + np.sqrt(2 * (sigma2 + sides.tau**2)) * rng.standard_normal(draws)
        lo95, hi95, lo90, hi90 = (
            _widen(side, sides.tau, level) for side, level in zip(
                _next_sides_moderated(sigma2, prior, rng), (0.95, 0.95, 0.90, 0.90),
                strict=True))
        return float(np.mean(reading(y, lo95, hi95, lo90, hi90, rule) != READINGS.index(now)))
    if math.isfinite(sides.df) and sides.df > 0:
        # the run's true within-run sd, as uncertain as its df leave it (Jeffreys), and
        # the next run's own estimate of it
        sigma = sides.se * np.sqrt(sides.df / rng.chisquare(sides.df, draws))
        scale = sigma / sides.se * np.sqrt(rng.chisquare(sides.df, draws) / sides.df)
    else:
        sigma, scale = np.full(draws, sides.se), np.ones(draws)
    y = estimate + np.sqrt(2 * (sigma**2 + sides.tau**2)) * rng.standard_normal(draws)
    lo95, hi95, lo90, hi90 = (_widen(np.asarray(s) * scale, sides.tau, level) for s, level in (
        (sides.lo95, 0.95), (sides.hi95, 0.95), (sides.lo90, 0.90), (sides.hi90, 0.90)))
    found = reading(y, lo95, hi95, lo90, hi90, rule)
    return float(np.mean(found != READINGS.index(now)))


def runs_needed(estimate: float, se: float, tau: float, rule: Boundaries,
                power: float = POWER) -> int | None:
    """The fewest runs (two or more) that, pooled with random effects and a Hartung-Knapp
    interval, decide the claim or read it at the threshold with ``power``, its truth this
    estimate; None beyond :data:`MAX_RUNS` or without a spread."""
    if not (math.isfinite(estimate) and se > 0):
        return None
    v = se**2 + tau**2
    z = float(special.ndtri(power))
    gaps: list[tuple[float, float]] = []  # (distance to the edge to clear, one-sided level)
    if rule.op == "~":
        assert rule.band is not None
        inside = min(estimate - rule.band[0], rule.band[1] - estimate)
        gaps.append((inside, 0.95))  # reproduced: the 90 % interval inside the band
        gaps.append((-inside, 0.975))  # not reproduced: the 95 % interval outside it
    else:
        gaps.append((abs(estimate - rule.line), 0.975))
        if rule.band is not None:
            inside = min(estimate - rule.band[0], rule.band[1] - estimate)
            gaps.append((inside, 0.95))
    for k in range(2, MAX_RUNS + 1):
        se_k = math.sqrt(v / k)
        for gap, level in gaps:
            if gap > 0 and gap >= (float(special.stdtrit(k - 1, level)) + z) * se_k:
                return k
    return None


def sides_of(estimate: float, ci: tuple[float, float], eq: tuple[float, float],
             se: float, df: float, tau: float, scale: str = "log") -> Sides:
    """The within-run sides of an interval ``ci`` (95 %) and ``eq`` (90 %) that holds a
    between-run ``tau``, on ``scale``: each side's tau part taken back out."""
    to = to_scale(scale)

    def inner(side: float, level: float) -> float:
        z = float(special.ndtri(0.5 + level / 2))
        return math.sqrt(max(0.0, side**2 - (z * tau) ** 2))

    sides = [inner(abs(estimate - to(ci[0])), 0.95), inner(abs(to(ci[1]) - estimate), 0.95),
             inner(abs(estimate - to(eq[0])), 0.90), inner(abs(to(eq[1]) - estimate), 0.90)]
    return Sides(*(s if math.isfinite(s) else 1e6 for s in sides), se=se, df=df, tau=tau)
