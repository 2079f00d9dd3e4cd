"""Intervals for rates and for the quantities claims compare.

pyperf gives each grid point W worker processes of V values each. Values
inside one process share its memory layout, CPU placement and moment, so
they are not independent: the process is the unit of replication (Kalibera
and Jones, "Rigorous benchmarking in reasonable time", ISMM 2013).

An :class:`Estimate` carries a point estimate and bootstrap replicates of
it on the log scale. Replicates come from a hierarchical bootstrap
(processes with replacement, then values within each chosen process), so
that any function of several points (a ratio, a best-of, a median of
ratios) gets its own distribution by applying the function replicate by
replicate; the sides of a claim were measured in different jobs, so their
replicates are drawn independently and combine pairwise.

A bootstrap alone is optimistic with few processes (with W = 2 it knows
three resamples). Two corrections keep small samples honest:

- the replicates' spread is scaled to the unbiased variance of the grand
  mean, ``var(log process means) / W`` (with one process, the variance of
  the values over their count: within-process noise only, and said so);
- the interval is widened by ``t(df) / z`` with ``df = W - 1``, carried
  through combinations by the Welch-Satterthwaite formula.

Where both sides of a ratio were measured in the same rounds (blocks: round r of
every claim point runs in phase r of the run, perfgrid.design.order), the ratio is
**paired**: its log is computed per block and its interval is Student's t
over the blocks (``df = blocks - 1``, exactly: ``exp(log value +- t * se)``; so too a
mean over two rounds, where a bootstrap would know three resamples), so drift that both
sides of a block share cancels instead of widening the interval (randomized multiple
interleaved trials, Abedi and Brecht, ICPE 2017).

A **reduction** over rows (the best of K rows, a median of K ratios) is not
bootstrapped replicate by replicate: the maximum of K noisy rows is biased
upward and its bootstrap does not know it (at K = 8 such an interval covered
the truth in about a third of simulated draws). :func:`reduce` returns a
:class:`Bounds` instead, whose interval is taken from the rows' own intervals
at levels that hold for all K at once (Bonferroni): it covers whatever the
rows, at the price of width where K is large. While a claim is judged with a prior for its
within-run spread (its earlier runs: perfgrid.analyse.analysis.judged, :func:`rows_moderated`),
each row's spread is moderated by it before those bounds are taken, so one row's lucky
2-df spread no longer decides them.

The coverage of these intervals is checked by simulation in the tests. The core that
turns raw values into an estimate (the hierarchical bootstrap, the interval of one
quantity) is perfgrid.kit.interval, which the harness imports without this module.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from scipy import special as _sp  # not scipy.stats: slow to import

from perfgrid.kit import interval
from perfgrid.kit.interval import (  # the interval core, named here too
    LEVEL,
    METHOD_HIERARCHICAL,
    METHOD_NONE,
    METHOD_ROUNDS,
    METHOD_VALUES,
    N_BOOT,
    seed_for,
)

METHOD_PAIRED = "paired over rounds (t over blocks)"
METHOD_BOUNDS = "simultaneous bounds (Bonferroni over the rows reduced)"
METHOD_POISSON = "exact Poisson bounds on a count (Garwood)"
METHOD_BINOMIAL = "exact binomial bounds on a count (Clopper-Pearson)"
#: "at the threshold": an undecided interval wholly within this relative margin of it
AT_THRESHOLD = 0.05
#: the words that begin the reason of a row the claims left out (perfgrid.analyse.analysis.quiet):
#: a verdict without an estimate says it
LEFT_OUT = "left out of claims"
#: the reason of a ratio whose divisor is 0 (a share below the CPU clock's tick): no figure
OVER_ZERO = "a ratio to a figure of 0"


@dataclass(frozen=True)
class Estimate:
    """A positive quantity with log-scale bootstrap deviations and degrees of freedom.

    ``dev`` holds ``log(replicate) - log(value)``, already scaled to the
    calibrated variance; None where no interval can be had (``reason`` says why).
    """

    value: float
    dev: np.ndarray | None = field(default=None, repr=False)
    df: float = float("inf")
    method: str = METHOD_NONE
    reason: str = ""
    #: the log of the quantity per block (round label -> log value), where it was measured
    #: in two or more rounds: a ratio of two such estimates is paired block by block
    blocks: dict[Any, float] | None = field(default=None, repr=False, compare=False)
    #: how rows were reduced block by block before pairing (:func:`reduce`), in words
    reduced: str = field(default="", compare=False)
    #: the index of the row a best-of chose (:func:`reduce`), where it chose one
    chosen: int | None = field(default=None, compare=False)
    #: the grid points it was computed from (``Experiment.point_key``): a claim names the
    #: points it compares by its quantity's
    points: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    #: the standard error of the log value where the interval is Student's t about it
    #: (paired over blocks, or a mean over two rounds): :meth:`interval` is then exactly
    #: ``exp(log value +- t(df) * se)``; ``dev`` stays, for combining with others
    se: float | None = field(default=None, repr=False, compare=False)
    #: for a best-of chosen on the first blocks (:func:`_chosen_on_first_blocks`) and what is
    #: computed from it: the simultaneous bounds over all rows that :func:`reduce` gives
    #: without choosing, which hold for the reduced truth itself
    all_rows: Bounds | None = field(default=None, repr=False, compare=False)
    #: the ends of :meth:`interval` (``"low"``, ``"high"``) that bound only the chosen row's
    #: truth, not the reduced one: :func:`decide` reads them with :attr:`all_rows` too
    unsafe: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    # -- construction -------------------------------------------------------
    @classmethod
    def unknown(cls, value: float, reason: str) -> Estimate:
        """A figure without an interval (one value, or spread unknown)."""
        return cls(float(value), None, float("nan"), METHOD_NONE, reason)

    @property
    def var(self) -> float:
        return float(np.var(self.dev)) if self.dev is not None else float("nan")

    @property
    def has_interval(self) -> bool:
        return self.dev is not None and np.isfinite(self.value) and self.value > 0

    def interval(self, level: float | None = None) -> tuple[float, float] | None:
        """The ``level`` interval (95 % by default): Student's t about the log value where
        :attr:`se` is known, else bootstrap percentiles widened by t(df)/z
        (:func:`perfgrid.kit.interval.bounds`)."""
        return interval.bounds(self.value, self.dev, self.df, self.se, level or LEVEL)

    @property
    def ci_rel(self) -> float:
        """Half-width of the 95 % interval over the estimate (NaN without one)."""
        bounds = self.interval()
        if bounds is None:
            return float("nan")
        return (bounds[1] - bounds[0]) / 2 / self.value

    # -- arithmetic: scalars scale, estimates combine replicate by replicate --
    def _map(self, value: float, dev: np.ndarray | None, shift: float = 0.0,
             sign: int = 1) -> Estimate:
        """The same estimate scaled: blocks become ``sign * block + shift`` (log scale); a
        scale that is not positive (no log) leaves no blocks to pair. Its standard error
        stays, and a best-of's bounds over all rows scale with it (``sign`` -1, one over
        it: their ends swap)."""
        blocks = None if self.blocks is None or not np.isfinite(shift) else {
            k: sign * v + shift for k, v in self.blocks.items()}
        rows = self.all_rows
        if rows is not None:
            k = float(np.exp(shift)) if np.isfinite(shift) else float("nan")
            rows = k / rows if sign < 0 else rows * k
        return Estimate(value, dev, self.df, self.method, self.reason, blocks, self.reduced,
                        points=self.points, se=self.se, all_rows=rows,
                        unsafe=self.unsafe if sign > 0 else _swap(self.unsafe))

    def __mul__(self, other: float | Estimate) -> Estimate:
        if isinstance(other, Bounds):
            return NotImplemented
        if isinstance(other, Estimate):
            return _combine(self, other, +1)
        return self._map(self.value * float(other), self.dev, _log(other))

    __rmul__ = __mul__

    def __truediv__(self, other: float | Estimate) -> Estimate:
        if isinstance(other, Bounds):
            return NotImplemented
        if isinstance(other, Estimate):
            return _combine(self, other, -1)
        return self._map(self.value / float(other), self.dev, -_log(other))

    def __rtruediv__(self, other: float) -> Estimate:
        dev = None if self.dev is None else -self.dev
        return self._map(float(other) / self.value, dev, _log(other), -1)

    def __float__(self) -> float:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def show(self, spec: str = ".2f", unit: str = "") -> str:
        """``1.05x [0.98, 1.12]``: the estimate and its 95 % interval."""
        bounds = self.interval()
        text = f"{self.value:{spec}}{unit}"
        if bounds is None:
            return f"{text} [no interval: {self.reason or 'one value'}]"
        return f"{text} [{bounds[0]:{spec}}, {bounds[1]:{spec}}]"


def _swap(sides: frozenset[str]) -> frozenset[str]:
    """The ends of an interval that bound only a chosen row's truth, for one over it."""
    return frozenset({"low": "high", "high": "low"}[s] for s in sides)


def _with_all_rows(found: Estimate, a: Estimate, b: Estimate, sign: int) -> Estimate:
    """``found`` (``a * b`` or ``a / b``) with the bounds over all rows of a best-of among
    its parts carried (:attr:`Estimate.all_rows`): the parts' own simultaneous bounds, or
    the part itself, combined by interval arithmetic."""
    if a.all_rows is None and b.all_rows is None:
        return found
    left = a.all_rows if a.all_rows is not None else a
    right = b.all_rows if b.all_rows is not None else b
    rows = left * right if sign > 0 else left / right
    unsafe = a.unsafe | (b.unsafe if sign > 0 else _swap(b.unsafe))
    return dataclasses.replace(found, all_rows=rows, unsafe=unsafe)


def safe_interval(quantity: Estimate | Bounds, level: float | None = None) -> Interval | None:
    """The interval of ``quantity`` that holds for its reduced truth: its own, but where an
    end bounds only a chosen row's truth (:attr:`Estimate.unsafe`), that end as far out
    as the simultaneous bounds over all rows put it too (no bounds: unbounded)."""
    found = quantity.interval(level)
    rows, unsafe = getattr(quantity, "all_rows", None), getattr(quantity, "unsafe", frozenset())
    if found is None or rows is None or not unsafe:
        return found
    other = rows.interval(level) or (0.0, math.inf)
    lo = min(found[0], other[0]) if "low" in unsafe else found[0]
    hi = max(found[1], other[1]) if "high" in unsafe else found[1]
    return lo, hi


def _log(k: float) -> float:
    """The log of a scale factor; NaN where it has none (zero, negative, NaN)."""
    k = float(k)
    return float(np.log(k)) if k > 0 else float("nan")


def points_of(*parts: Any) -> frozenset[str]:
    """The grid points behind all of ``parts`` (estimates, bounds; others have none)."""
    return frozenset().union(*(getattr(p, "points", frozenset()) for p in parts))


def from_points(quantity: Q, points: frozenset[str]) -> Q:
    """``quantity`` computed from ``points`` (its own kept): provenance, nothing else."""
    points = frozenset(points) | points_of(quantity)
    if isinstance(quantity, Estimate):
        return dataclasses.replace(quantity, points=points)
    quantity.points = points
    return quantity


def _satterthwaite(parts: Sequence[Estimate]) -> float:
    num = sum(p.var for p in parts) ** 2
    den = sum(p.var ** 2 / p.df for p in parts if np.isfinite(p.df))
    return float(num / den) if den > 0 else float("inf")


def _no_interval(parts: Sequence[Estimate]) -> str:
    return "; ".join(sorted({p.reason or "no interval" for p in parts if not p.has_interval}))


def _combine(a: Estimate, b: Estimate, sign: int) -> Estimate:
    """``a * b`` (sign +1) or ``a / b`` (sign -1): paired block by block where both were
    measured in the same two or more blocks, else as independently measured estimates. A
    ratio to a figure of zero (a share below the clock's tick) is NaN, without an interval."""
    if sign < 0 and b.value == 0:
        said = _no_interval([b]) if not b.has_interval else "measured 0"
        return from_points(Estimate.unknown(math.nan, f"{OVER_ZERO} ({said})"),
                           points_of(a, b))
    value = a.value * b.value if sign > 0 else a.value / b.value
    points = points_of(a, b)
    if not (a.has_interval and b.has_interval):
        return from_points(Estimate.unknown(value, _no_interval([a, b])), points)
    reduced = "; ".join(filter(None, (a.reduced, b.reduced)))
    if a.blocks and b.blocks and len(a.blocks) >= 2 and a.blocks.keys() == b.blocks.keys():
        found = from_points(paired(value, {k: a.blocks[k] + sign * b.blocks[k]
                                           for k in a.blocks}, reduced=reduced), points)
    elif common := _shared_blocks(a, b):
        # one side measured in more rounds (the other kept to fewer: Experiment.claim_rounds,
        # or an earlier perfgrid's looks): pair the shared ones
        logs = {k: a.blocks[k] + sign * b.blocks[k] for k in common}
        found = from_points(paired(float(np.exp(np.mean(list(logs.values())))), logs,
                                   reduced=reduced), points)
    else:
        found = Estimate(value, a.dev + sign * b.dev, _satterthwaite([a, b]), _method([a, b]),
                         points=points)
    return _with_all_rows(found, a, b, sign)


def _shared_blocks(a: Estimate, b: Estimate) -> list[Any] | None:
    """The blocks two estimates share where one's are all among the other's, two or more
    (a point kept to fewer rounds than another); else None."""
    if not (a.blocks and b.blocks):
        return None
    small, large = sorted((set(a.blocks), set(b.blocks)), key=len)
    return sorted(small, key=_label_order) if len(small) >= 2 and small <= large else None


def paired(value: float, blocks: dict[Any, float], n_boot: int = N_BOOT,
           reduced: str = "") -> Estimate:
    """A quantity computed per block (its log per round label), centred on ``value``.

    Its interval is Student's t over the blocks, exactly: ``exp(log value +- t * se)``
    with the standard error of the mean log over blocks and ``blocks - 1`` degrees of
    freedom. Its deviations, for combining it with estimates of other blocks, are normal
    draws with that standard error (seeded by the blocks, so a table's intervals repeat).
    """
    logs = np.array([blocks[k] for k in sorted(blocks, key=str)], dtype=float)
    if logs.size < 2 or not np.all(np.isfinite(logs)):
        return Estimate.unknown(value, "fewer than two blocks")
    se = float(np.std(logs, ddof=1)) / np.sqrt(logs.size)
    if se <= 0:
        return Estimate.unknown(value, "all blocks identical: spread unknown")
    rng = np.random.default_rng(seed_for(*np.round(logs, 12).tolist()))
    dev = rng.standard_normal(n_boot)
    dev = (dev - dev.mean()) / dev.std() * se
    return Estimate(float(value), dev, float(logs.size - 1), METHOD_PAIRED, "", dict(blocks),
                    reduced, se=se)


def _method(parts: Sequence[Estimate]) -> str:
    """The method of parts combined as independent (never paired: :func:`paired` is)."""
    for method in (METHOD_VALUES, METHOD_HIERARCHICAL):
        if any(p.method == method for p in parts):
            return method
    return METHOD_ROUNDS


Interval = tuple[float, float]
#: a quantity a claim may compare: an estimate, or bounds (which :func:`from_points` keeps)
Q = TypeVar("Q", "Estimate", "Bounds")


class Bounds:
    """A quantity whose interval at a level comes from its parts' intervals at stricter ones.

    What a reduction over rows (:func:`reduce`) and any product or ratio with one gives:
    interval arithmetic, the error rate split between the parts (Bonferroni), so the
    interval covers whatever the parts' true values are. It offers :class:`Estimate`'s
    reading interface (``value``, ``interval``, ``ci_rel``, ``show``, arithmetic).
    """

    dev = None
    df = float("nan")
    blocks = None
    #: as :attr:`Estimate.all_rows` and :attr:`Estimate.unsafe` (a widened or share of a
    #: chosen best-of carries them on)
    all_rows: Bounds | None = None
    unsafe: frozenset[str] = frozenset()
    #: a best (or least) of rows (:func:`reduce`): the row whose value it is, whose
    #: within-run spread stands for the rows' (a claim's record, its prior; kept through
    #: scaling by a number, a share, a widening)
    row: Estimate | None = None
    #: a best (or least) of rows' simultaneous bounds (:func:`reduce`): its rows and
    #: ``"max"`` or ``"min"``, so a reading can draw the next run's rows
    #: (perfgrid.analyse.readings.Rows); kept through scaling by a number, not otherwise
    rows: tuple[Estimate | Bounds, ...] = ()
    reduction: str = ""

    def __init__(self, value: float, bounds: Callable[[float], Interval | None],
                 method: str = METHOD_BOUNDS, reason: str = "", basis: str = "",
                 points: frozenset[str] = frozenset()) -> None:
        self.value = float(value)
        self._bounds = bounds
        self.method = method
        self.reason = reason
        #: what the interval rests on, in words (:func:`basis`)
        self.basis = basis
        #: the grid points it was computed from (as :attr:`Estimate.points`)
        self.points = frozenset(points)

    def interval(self, level: float | None = None) -> Interval | None:
        if not (np.isfinite(self.value) and self.value > 0):
            return None
        return self._bounds(level or LEVEL)

    @property
    def has_interval(self) -> bool:
        return self.interval() is not None

    ci_rel = Estimate.ci_rel
    show = Estimate.show

    def __float__(self) -> float:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def _with(self, other: float | Estimate | Bounds, sign: int, flip: bool = False) -> Bounds:
        """``self * other`` (sign +1) or ``self / other`` (-1); ``other / self`` with flip."""
        if not isinstance(other, Estimate | Bounds):
            k = float(other)
            if flip:
                scaled = Bounds(k / self.value, lambda lv: _over(k, self.interval(lv)),
                                self.method, self.reason, self.basis, self.points)
            else:
                scaled = Bounds(self.value * k ** sign,
                                lambda lv: _scale(self.interval(lv), k, sign),
                                self.method, self.reason, self.basis, self.points)
            scaled.row = self.row  # a log-scale spread: the same times or over a number
            if self.rows and k > 0:  # its rows alike; one over a best is a least of them
                scaled.rows = tuple(k / r if flip else r * k ** sign for r in self.rows)
                scaled.reduction = ({"max": "min", "min": "max"}[self.reduction] if flip
                                    else self.reduction)
            return scaled
        a, b = (other, self) if flip else (self, other)
        value = a.value * b.value ** sign
        if not (a.has_interval and b.has_interval):
            return Bounds(value, lambda lv: None, METHOD_NONE, _no_interval([a, b]),
                          points=points_of(a, b))

        def bounds(level: float) -> Interval | None:
            split = 1 - (1 - level) / 2
            ia, ib = safe_interval(a, split), safe_interval(b, split)
            if ia is None or ib is None:
                return None
            if sign > 0:
                return ia[0] * ib[0], ia[1] * ib[1]
            return ia[0] / ib[1], ia[1] / ib[0]

        return Bounds(value, bounds, basis="; ".join(basis(q) for q in (a, b)),
                      points=points_of(a, b))

    def __mul__(self, other: float | Estimate | Bounds) -> Bounds:
        return self._with(other, +1)

    __rmul__ = __mul__

    def __truediv__(self, other: float | Estimate | Bounds) -> Bounds:
        return self._with(other, -1)

    def __rtruediv__(self, other: float | Estimate) -> Bounds:
        return self._with(other, -1, flip=True)

    def __repr__(self) -> str:
        return f"Bounds({self.value!r}, {self.interval()!r})"


def _scale(bounds: Interval | None, k: float, sign: int) -> Interval | None:
    """An interval times a positive ``k`` (sign +1) or over it (sign -1)."""
    if bounds is None or not k > 0:
        return None
    lo, hi = bounds
    return (lo * k, hi * k) if sign > 0 else (lo / k, hi / k)


def _over(k: float, bounds: Interval | None) -> Interval | None:
    """A positive ``k`` over an interval of positive values."""
    if bounds is None or not k > 0 or bounds[0] <= 0:
        return None
    return k / bounds[1], k / bounds[0]


#: while a claim is judged: how each row of a reduction is moderated (:func:`rows_moderated`)
_row_moderation: contextvars.ContextVar[Callable[[Estimate], Estimate] | None] = (
    contextvars.ContextVar("row_moderation", default=None))


@contextmanager
def rows_moderated(how: Callable[[Estimate], Estimate] | None) -> Iterator[None]:
    """Inside the block, the bounds of every reduction (:func:`reduce`) take each row as
    ``how`` gives it: a claim's within-run prior moderating the row's spread
    (perfgrid.analyse.analysis.judged). A reduction's bounds are computed when read, from its rows,
    so the claim that judges it moderates them while they are still separate, though the
    experiment reduced them before it knew the claim; None changes nothing."""
    token = _row_moderation.set(how)
    try:
        yield
    finally:
        _row_moderation.reset(token)


def row_now(part: Any) -> Any:
    """A reduction's row as the claim being judged takes it (:func:`rows_moderated`): an
    estimate with an interval on finite df (over rounds), moderated; anything else as it
    is."""
    how = _row_moderation.get()
    if how is None or not isinstance(part, Estimate) or not part.has_interval or not (
            np.isfinite(part.df) and part.df > 0):
        return part
    return how(part)


#: from this many rows on, a best-of over rows measured in four or more common blocks is
#: chosen on the first blocks and estimated on the others (narrower than simultaneous
#: bounds, whose lower end pays for every row: at K = 4 the two are about as wide)
CHOOSE_FROM = 5

#: reductions :func:`reduce` knows, by the one-sided error each end must spend on each row
#: (``1``: one row's own interval bounds this end; ``k``: all K rows at once)
_ONE_ROW = {"max": (False, True), "amax": (False, True), "nanmax": (False, True),
            "min": (True, False), "amin": (True, False), "nanmin": (True, False)}


def reduce(parts: Sequence[Estimate | Bounds],
           how: Callable[[np.ndarray], Any] = np.max) -> Estimate | Bounds:
    """``how`` (np.max, np.min, np.median: monotone in every row) over several rows.

    The interval holds for the reduced true value: if every row's truth lies in its
    interval, a monotone ``how`` of the truths lies between ``how`` of the lower and of the
    upper ends. Each end pays only for the rows that can break it: the upper end of a
    maximum is broken only if the best row's own upper end is, so it takes the rows'
    plain intervals; its lower end is broken if any row's lower end overshoots, so it takes
    every row at ``alpha / K`` (Bonferroni). Minimum the other way round; median both ends
    at ``alpha / K`` (conservative). One row is that row itself.

    A best (or least) of :data:`CHOOSE_FROM` or more rows that were all measured in the
    same four or more blocks is chosen on the first blocks and estimated on the others
    instead (:func:`_chosen_on_first_blocks`): a paired estimate, narrower than bounds that
    pay for every row. It bounds the chosen row's truth, at most the best's, so it carries
    the simultaneous bounds over all rows (:attr:`Estimate.all_rows`) for the end that
    does not bound the best (:func:`decide` reads both, :func:`safe_interval`). (A median
    taken block by block was tried and left: with an even count of rows whose truths are
    unevenly spaced it covered 71 % of simulated draws.)

    The bounds are taken from the rows when read, each row as :func:`row_now` gives it
    (moderated while a claim with a within-run prior judges it); a best or least keeps its
    row (:attr:`Bounds.row`), whose spread a claim's record holds, and all its rows
    (:attr:`Bounds.rows`), which a reading draws anew (perfgrid.analyse.readings.Rows).
    """
    if not parts:
        raise ValueError("reduce: no estimates")
    if len(parts) == 1:
        return parts[0]
    values = np.array([p.value for p in parts])
    value = float(how(values))
    points = points_of(*parts)
    if not all(p.has_interval for p in parts):
        return from_points(Estimate.unknown(value, _no_interval(parts)), points)
    name = getattr(how, "__name__", "reduction").removeprefix("a").removeprefix("nan")
    k = len(parts)
    plain_lo, plain_hi = _ONE_ROW.get(getattr(how, "__name__", ""), (False, False))

    def bounds(level: float) -> Interval | None:
        strict = 1 - (1 - level) / k
        ends = []
        for end, plain in ((0, plain_lo), (1, plain_hi)):
            found = [safe_interval(row_now(p), level if plain else strict) for p in parts]
            if any(f is None for f in found):
                return None
            ends.append(float(how(np.array([f[end] for f in found]))))
        return ends[0], ends[1]

    simultaneous = Bounds(value, bounds, basis=f"{name} of {k} rows, simultaneous bounds "
                                               f"(each row: {basis(parts[0])})", points=points)
    if name in ("max", "min"):
        simultaneous.row = parts[int(np.argmax(values) if name == "max" else np.argmin(values))]
        simultaneous.rows, simultaneous.reduction = tuple(parts), name
    common = _common_blocks(parts)
    if name in ("max", "min") and k >= CHOOSE_FROM and common and len(common) >= 4:
        found = _chosen_on_first_blocks(parts, common, name)
        # the chosen row's truth is at most the best row's (at least the least's): its
        # interval's far end says nothing of the best; the bounds over all rows do
        found = dataclasses.replace(found, all_rows=simultaneous, unsafe=frozenset(
            {"high" if name == "max" else "low"}))
        # the choice is made on blocks all rows have; from there on only the chosen row's
        # blocks count
        return from_points(found, points_of(parts[found.chosen]))
    return simultaneous


def geometric_mean(parts: Sequence[Estimate]) -> Estimate:
    """The geometric mean of several estimates (ratios over a grid's points): the typical
    ratio, with an interval that covers like a single ratio's.

    Its log is linear in the parts' logs, so where every part was measured in the same
    two or more blocks it is computed block by block (the mean log over the parts) and
    paired over the blocks: noise of the single points averages out and the interval
    needs no split of the error rate. Parts without common blocks combine as independent
    estimates (their deviations averaged, Welch-Satterthwaite degrees of freedom). A
    median over the same parts takes simultaneous bounds (:func:`reduce`) and stays wide.
    """
    if not parts:
        raise ValueError("geometric_mean: no estimates")
    if len(parts) == 1:
        return parts[0]
    value = float(np.exp(np.mean([np.log(p.value) if p.value > 0 else np.nan
                                  for p in parts])))
    points = points_of(*parts)
    if not all(p.has_interval for p in parts):
        return from_points(Estimate.unknown(value, _no_interval(parts)), points)
    k = len(parts)
    common = _common_blocks(parts)
    if common:
        blocks = {b: float(np.mean([p.blocks[b] for p in parts])) for b in common}
        centre = float(np.exp(np.mean(list(blocks.values()))))
        return from_points(paired(centre, blocks, reduced=f"geometric mean of {k} ratios"),
                           points)
    dev = np.mean([p.dev for p in parts], axis=0)
    scaled = [dataclasses.replace(p, dev=p.dev / k) for p in parts]
    return Estimate(value, dev, _satterthwaite(scaled), _method(parts), points=points)


def _common_blocks(parts: Sequence[Estimate | Bounds]) -> list[Any] | None:
    """The block labels every part was measured in, where there are two or more and every
    part is an estimate with blocks (rows of claim points, ratios paired round by round);
    else None (the rows are reduced by simultaneous bounds)."""
    if not all(isinstance(p, Estimate) and p.blocks and len(p.blocks) >= 2 for p in parts):
        return None
    common = set.intersection(*(set(p.blocks) for p in parts))
    return sorted(common, key=_label_order) if len(common) >= 2 else None


def _label_order(label: Any) -> tuple[int, Any]:
    """Round labels in their order (2 before 10), other labels after, as text."""
    if isinstance(label, int | float) and not isinstance(label, bool):
        return 0, label
    return 1, str(label)


def _chosen_on_first_blocks(parts: Sequence[Estimate], labels: list[Any],
                            name: str) -> Estimate:
    """The best (``max``) or least (``min``) of rows measured in the same blocks, on data
    the choice did not see: the row is chosen on the first third of the blocks (at least
    one) and its value taken over the others, paired over them like any quantity measured
    block by block, so picking the luckiest row biases nothing and a ratio with another
    point of those blocks stays paired. It covers the truth of the chosen row: never above
    the best truth, and equal to it when the best row is clear or the rows are equally good.
    So its lower end (a maximum's) bounds the best truth and its upper end does not:
    :func:`reduce` carries the simultaneous bounds over all rows with it for that end.
    (Cross-fitting, each block's row chosen on all the others, uses every block but covered
    only 70-88 % of simulated draws: the choices share data.)"""
    sign = 1.0 if name == "max" else -1.0
    first = max(1, len(labels) // 3)
    logs = np.array([[p.blocks[b] for b in labels] for p in parts])  # rows x blocks
    row = int(np.argmax(sign * logs[:, :first].mean(axis=1)))
    chosen_on = set(labels[:first])
    # the chosen row's every other block, those beyond the shared ones too (its point
    # measured in more rounds than the other rows)
    kept = {b: v for b, v in sorted(parts[row].blocks.items(), key=lambda kv: _label_order(
        kv[0])) if b not in chosen_on}
    value = float(np.exp(np.mean(list(kept.values()))))
    found = paired(value, kept, reduced=f"{name} of {len(parts)} rows chosen on the first "
                                        f"{first} of {len(labels)} rounds")
    return dataclasses.replace(found, chosen=row)


#: the chance that :func:`disagreeing_rounds` flags a claim whose rounds all agree
#: (normal rounds: each round against the others' prediction bound, Bonferroni over them)
DISAGREE_ALPHA = 0.01
#: the fewest rounds :func:`disagreeing_rounds` judges (fewer: the others leave no spread)
DISAGREE_FROM = 4


def disagreeing_rounds(quantity: Estimate | Bounds, alpha: float = DISAGREE_ALPHA,
                       earlier: tuple[float, float] | None = None) -> str:
    """A note for a claim's reason where its rounds disagree; "" where they do not, or
    where it cannot tell (no rounds; fewer than :data:`DISAGREE_FROM` without ``earlier``).

    Each round's log (of the quantity, block by block: for a ratio, the log ratio of that
    round) is set against the other rounds' prediction bound, ``mean +- t(n - 2) * sd *
    sqrt(1 + 1 / (n - 1))`` at ``1 - alpha / n`` (Bonferroni over the ``n`` rounds), so
    rounds from one normal spread raise it in at most ``alpha`` of claims. A round beyond
    it (one round in ten three times slower: a bimodal point, a disturbed phase of the
    run) breaks what a t interval over rounds assumes, and a verdict on such rounds may
    depend on the run. A widened quantity or a share is judged by the estimate inside it.

    At three rounds the other two leave a spread on one df: t(1) at ``1 - alpha / 6`` is
    191, and no gap short of 191 of their sds would show (Dixon's and Grubbs' tests at
    n = 3 have their 1 % critical values at the very top of their statistics' range). So
    there the spread comes from the claim's earlier runs, where they tell one
    (``earlier``: ``(s0^2, d0)``, the prior of the variance of the mean over the rounds,
    perfgrid.analyse.betweenrun.smyth_prior, on the log scale): per round ``n s0^2``, on ``d0`` df.
    """
    inner = quantity
    while not isinstance(inner, Estimate) and getattr(inner, "inner", None) is not None:
        inner = inner.inner
    blocks = getattr(inner, "blocks", None)
    if not isinstance(inner, Estimate) or not blocks or len(blocks) < 2:
        return ""
    n = len(blocks)
    own = n >= DISAGREE_FROM
    if not own and not (earlier is not None and earlier[0] > 0 and earlier[1] > 0
                        and n >= 3):
        return ""
    labels = sorted(blocks, key=_label_order)
    logs = np.array([blocks[b] for b in labels], dtype=float)
    if not np.all(np.isfinite(logs)):
        return ""
    df = n - 2 if own else min(float(earlier[1]), 1e6)
    crit = float(_sp.stdtrit(df, 1 - alpha / (2 * n))) * math.sqrt(1 + 1 / (n - 1))
    odd = []
    for i, label in enumerate(labels):
        others = np.delete(logs, i)
        gap = float(logs[i] - others.mean())
        sd = float(np.std(others, ddof=1)) if own else math.sqrt(n * earlier[0])
        if abs(gap) > crit * sd and gap != 0:
            odd.append(f"round {label} {math.exp(gap):.2f}x the others' mean")
    if not odd:
        return ""
    bound = "" if own else " set by the spread its earlier runs show"
    return (f"; rounds disagree ({', '.join(odd)}, beyond their {1 - alpha:.0%} prediction "
            f"bound{bound}): a bimodal or disturbed point, the verdict may depend on the run")


def basis(quantity: Estimate | Bounds) -> str:
    """What a quantity's interval rests on, in words, for the report's claims table:
    ``paired over 3 rounds``, ``max of 8 rows, simultaneous bounds (...)``."""
    if isinstance(quantity, Bounds):
        return quantity.basis or quantity.method
    if not quantity.has_interval:
        return "no interval"
    if quantity.method == METHOD_PAIRED and quantity.blocks:
        n = len(quantity.blocks)
        paired_text = f"paired over {n} rounds (t, {n - 1} df)"
        return f"{quantity.reduced}, {paired_text}" if quantity.reduced else paired_text
    if quantity.method == METHOD_VALUES:
        return "one process: within-process noise only"
    level = "rounds" if quantity.method == METHOD_ROUNDS else "processes"
    return f"over {level}, {quantity.df:.3g} df"



class Share(Bounds):
    """A share (a quantity in [0, 1]) judged on its own scale: the log-scale interval of
    ``inner`` mapped to the logit scale (delta method: a log-scale side ``s`` is a logit
    side ``s / (1 - p)``) and back, so its ends stay within (0, 1), where a log-scale
    interval of a share near 1 passes 100 %. Near 0 the two agree."""

    def __init__(self, inner: Estimate | Bounds) -> None:
        p = inner.value

        def bounds(level: float) -> Interval | None:
            found = inner.interval(level)
            if found is None:
                return None
            if not 0 < p < 1:  # an exact count's share of 0 or 1: its bounds, within [0, 1]
                return max(0.0, found[0]), min(1.0, found[1])
            centre = math.log(p / (1 - p))
            up = (math.log(found[1]) - math.log(p)) / (1 - p)
            low = 0.0 if found[0] <= 0 else float(
                _sp.expit(centre - (math.log(p) - math.log(found[0])) / (1 - p)))
            return low, float(_sp.expit(centre + up))

        super().__init__(p, bounds, inner.method, inner.reason,
                         f"{basis(inner)}; logit scale", inner.points)
        self.inner = inner
        self.row = getattr(inner, "row", None)
        if inner.all_rows is not None:  # a chosen best-of's bounds, on the same scale
            self.all_rows, self.unsafe = Share(inner.all_rows), inner.unsafe

    def interval(self, level: float | None = None) -> Interval | None:
        if not (np.isfinite(self.value) and 0 <= self.value <= 1):
            return None
        return self._bounds(level or LEVEL)


# -- from exact counts -------------------------------------------------------
class Counted(Bounds):
    """A rate or share from an exact count: its interval comes from the count alone.

    Unlike an estimate on the log scale it may be zero, and a count of none still has an
    interval: ``[0, upper]``, a one-sided bound (for a Poisson count of 0, about 3.7
    over the units counted: the "rule of three" family at 97.5 %). ``events`` and
    ``units`` keep the count it came from.
    """

    def __init__(self, events: int, units: float, bounds: Callable[[float], Interval],
                 method: str, reason: str = "") -> None:
        super().__init__(events / units, bounds, method, reason)
        self.events, self.units = events, units

    def interval(self, level: float | None = None) -> Interval | None:
        if not (np.isfinite(self.value) and self.value >= 0):
            return None
        return self._bounds(level or LEVEL)


def poisson_rate(events: int, units: float, allowance: float = 0.0) -> Counted:
    """``events`` per unit over ``units`` units of work, with Garwood's exact interval.

    Each end at ``(1 + level) / 2`` one-sided: the upper ``chi2.ppf(0.975, 2 (k + 1)) / 2``
    over the units, the lower ``chi2.ppf(0.025, 2 k) / 2`` (0 for k = 0). ``allowance``
    events of the count may not be the quantity's own (a program's start-up counted with
    its loops): the lower end is taken that many events lower, never silently subtracted
    from the value.
    """
    k = int(events)
    if k < 0 or not units > 0:
        raise ValueError(f"count {events!r} over {units!r} units; allowed: a count >= 0 "
                         f"over a positive number of units")

    def bounds(level: float) -> Interval:
        tail = (1 - level) / 2
        low = float(_sp.gammaincinv(k, tail)) if k > 0 else 0.0
        high = float(_sp.gammaincinv(k + 1, 1 - tail))
        return max(0.0, low - allowance) / units, high / units

    return Counted(k, units, bounds, METHOD_POISSON)


def binomial_share(hits: int, trials: int, reason: str = "") -> Counted:
    """The share ``hits / trials`` with its exact (Clopper-Pearson) interval: for 0 hits
    ``[0, 1 - (alpha / 2) ** (1 / trials)]``, for all hits the mirror image."""
    k, n = int(hits), int(trials)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"{hits!r} hits of {trials!r} trials; allowed: 0 <= hits <= trials, "
                         f"trials >= 1")

    def bounds(level: float) -> Interval:
        tail = (1 - level) / 2
        low = float(_sp.betaincinv(k, n - k + 1, tail)) if k > 0 else 0.0
        high = float(_sp.betaincinv(k + 1, n - k, 1 - tail)) if k < n else 1.0
        return low, high

    return Counted(k, n, bounds, METHOD_BINOMIAL, reason)


# -- from raw values: the interval core (perfgrid.kit.interval) as an Estimate ---------------
def mean_estimate(processes: Sequence[Sequence[float]], seed: int = 0,
                  n_boot: int = N_BOOT, rounds: Sequence[Any] | None = None) -> Estimate:
    """The mean of positive values grouped by worker process (:func:`perfgrid.kit.interval.mean`:
    ``rounds`` label each process with the round that measured it)."""
    return _estimate(interval.mean(processes, seed, n_boot, rounds))


def rate(processes: Sequence[Sequence[float]], work_per_loop: float, seed: int = 0,
         rounds: Sequence[Any] | None = None) -> Estimate:
    """Work per second of one point: ``work_per_loop`` over the mean per-loop time, as the
    harness computes it (:func:`perfgrid.kit.interval.rate`)."""
    return _estimate(interval.rate(processes, work_per_loop, seed, rounds))


def _estimate(found: interval.Replicates) -> Estimate:
    return Estimate(found.value, found.dev, found.df, found.method, found.reason, found.blocks,
                    se=found.se)


# -- verdicts ----------------------------------------------------------------
_SIDES = {">=": "at or above", ">": "above", "<=": "at or below", "<": "below",
          "~": "about"}


def equivalence_level(level: float) -> float:
    """The level of the interval two one-sided tests judge equivalence by: each side at
    ``(1 - level) / 2``, so 90 % where claims decide at 95 %."""
    return 2 * level - 1


def band(threshold: float, margin: float) -> Interval:
    """The values within ``margin`` of ``threshold``, a factor ``1 + margin`` either way
    (symmetric on the log scale, as every interval here is)."""
    return threshold / (1 + margin), threshold * (1 + margin)


def decide(quantity: Estimate | Bounds, op: str, threshold: float, spec: str = ".2f",
           unit: str = "x", margin: float = AT_THRESHOLD) -> tuple[str, str]:
    """(verdict, reason) of a claim ``quantity op threshold``.

    First equivalence, by two one-sided tests: where the :func:`equivalence_level` interval
    (90 % beside 95 %) lies wholly within ``margin`` of the threshold (:func:`band`), the
    truth is that close to it, and the claim reads "at the threshold" (``op`` ``~``, an
    "about" claim: "reproduced"). This takes precedence over a one-sided decision, so a
    truth near the threshold reads the same run after run instead of flipping with the
    noise. Otherwise the claim is reproduced only when the whole interval lies on its side,
    not reproduced only when it lies wholly on the other (for ``~``: wholly outside the
    band), else inconclusive.

    A best-of chosen on the first rounds (:func:`_chosen_on_first_blocks`), and what is
    computed from it, is judged by :func:`safe_interval`: the end of its interval that
    bounds only the chosen row's truth (the upper end of a maximum, the lower of a minimum)
    decides nothing unless the simultaneous bounds over all rows agree, so such a best-of
    reads "not reproduced" on a ``>=`` claim only where every row's bounds put the best
    below the threshold.
    """
    if op not in _SIDES:
        raise ValueError(f"op: {op!r} is not one of {', '.join(_SIDES)}")
    bounds = safe_interval(quantity)
    if not np.isfinite(quantity.value):
        left_out = [part for part in quantity.reason.split("; ") if part.startswith(LEFT_OUT)]
        if quantity.reason.startswith(OVER_ZERO):
            return "inconclusive", f"no estimate: {quantity.reason}"
        return "inconclusive", "no estimate (missing or NaN rate)" + (
            f": {'; '.join(left_out)}" if left_out else "")
    if bounds is None:
        return "inconclusive", f"no interval: {quantity.reason or 'one value'}"
    lo, hi = bounds
    level = LEVEL
    text = f"{level:.0%} interval {lo:{spec}}-{hi:{spec}}{unit}"
    own = quantity.interval()
    if own is not None and tuple(own) != (lo, hi):
        text += (f" (its {' and '.join(sorted(quantity.unsafe, reverse=True))} end from the "
                 f"simultaneous bounds over all rows; the row chosen on the first rounds: "
                 f"{own[0]:{spec}}-{own[1]:{spec}}{unit}, which bounds only that row's truth)")
    if threshold > 0:
        low, high = band(threshold, margin)
        near = safe_interval(quantity, equivalence_level(level))
        if near is not None and low <= near[0] and near[1] <= high:
            words = (f"{equivalence_level(level):.0%} interval {near[0]:{spec}}-"
                     f"{near[1]:{spec}}{unit} lies within {margin:.0%} of {threshold:g}{unit}")
            return ("reproduced" if op == "~" else "at the threshold"), words
        if op == "~":
            if lo > high or hi < low:
                return "not reproduced", (f"{text} lies wholly outside {low:{spec}}-"
                                          f"{high:{spec}}{unit} (within {margin:.0%} of "
                                          f"{threshold:g}{unit})")
            return "inconclusive", (f"{text} is not wholly within {margin:.0%} of "
                                    f"{threshold:g}{unit}")
    elif op == "~":
        raise ValueError(f"op ~ needs a positive threshold, not {threshold!r}")
    above = op.startswith(">")
    strict = len(op) == 1
    holds = (lo > threshold if strict else lo >= threshold) if above else (
        hi < threshold if strict else hi <= threshold)
    fails = (hi <= threshold if strict else hi < threshold) if above else (
        lo >= threshold if strict else lo > threshold)
    if holds:
        return "reproduced", f"{text} lies wholly {_SIDES[op]} {threshold:g}{unit}"
    if fails:
        return "not reproduced", f"{text} lies wholly on the other side of {threshold:g}{unit}"
    return "inconclusive", f"{text} straddles {threshold:g}{unit}"


class Widened(Bounds):
    """A quantity whose interval also holds the variance between runs: each side of its
    interval, on the log scale, grows to ``sqrt(side^2 + (z tau)^2)``, where ``tau`` is
    the between-run standard deviation (perfgrid.analyse.betweenrun) and ``z`` the level's normal
    quantile. Inside one run the rounds cannot see how the next run, on another host or
    day, would differ; a verdict about the machine must."""

    def __init__(self, quantity: Estimate | Bounds, tau: float) -> None:
        if not tau >= 0:
            raise ValueError(f"tau {tau!r}; allowed: a number >= 0")

        def bounds(level: float) -> Interval | None:
            inner = quantity.interval(level)
            if inner is None:
                return None
            extra = (float(_sp.ndtri(0.5 + level / 2)) * tau) ** 2
            centre = math.log(quantity.value)
            lo = 0.0 if inner[0] <= 0 else math.exp(
                centre - math.sqrt((centre - math.log(inner[0])) ** 2 + extra))
            hi = math.exp(centre + math.sqrt((math.log(inner[1]) - centre) ** 2 + extra))
            return lo, hi

        super().__init__(quantity.value, bounds, quantity.method, quantity.reason,
                         basis(quantity), quantity.points)
        self.inner, self.tau = quantity, float(tau)
        self.row = getattr(quantity, "row", None)
        if quantity.all_rows is not None:  # a chosen best-of's bounds, widened alike
            self.all_rows, self.unsafe = Widened(quantity.all_rows, tau), quantity.unsafe


#: :func:`blocks_needed` gives up (None) beyond this
MAX_BLOCKS = 100_000
#: the most blocks :func:`rounds_to_settle` looks as far as
SETTLE_MAX = 10_000


def blocks_needed(var: float, df_per_block: float, level: float,
                  half_width: float) -> int | None:
    """Least ``n >= 2`` with ``t(df) * sqrt(var / n) <= ln(1 + half_width)``, where
    ``df = df_per_block * (n - 1)``: the blocks whose ``level`` interval on the log scale
    is that narrow, at a per-block variance ``var``; None if ``var`` is unknown or over
    :data:`MAX_BLOCKS`."""
    if not math.isfinite(var) or var < 0:
        return None
    h = math.log1p(half_width)
    q = 0.5 + level / 2
    # the normal quantile is below every t quantile: its n is a lower bound
    n = max(2, math.ceil(float(_sp.ndtri(q)) ** 2 * var / h ** 2))
    while n <= MAX_BLOCKS:
        if float(_sp.stdtrit(df_per_block * (n - 1), q)) * math.sqrt(var / n) <= h:
            return n
        n += 1
    return None


def rounds_to_settle(quantity: Estimate | Bounds, threshold: float,
                     margin: float = AT_THRESHOLD, level: float | None = None) -> int | None:
    """About how many blocks (rounds) would settle an undecided claim, decided either way
    or read at the threshold, if its estimate and per-block spread stayed as they are.

    Each side of the interval (log scale) gives the per-block variance behind it (the
    side is ``t(b - 1) * sd / sqrt(b)`` over the ``b`` blocks it rests on), and
    :func:`blocks_needed` the blocks at which that side would fit, so the figure
    is a projection, as rough as a spread estimated from ``b`` blocks. It tells a reader
    whether more time would help. None where the quantity is not an interval over rounds
    (one process, a best-of's simultaneous bounds, an exact count); ``SETTLE_MAX + 1``
    where more than :data:`SETTLE_MAX` would be needed.
    """
    if not isinstance(quantity, Estimate) or not quantity.has_interval or not threshold > 0:
        return None
    if quantity.method == METHOD_PAIRED and quantity.blocks:
        blocks = len(quantity.blocks)
    elif quantity.method == METHOD_ROUNDS and np.isfinite(quantity.df):
        blocks = int(round(quantity.df)) + 1
    else:
        return None
    level = level or LEVEL
    eq_level = equivalence_level(level)
    bounds, near = quantity.interval(level), quantity.interval(eq_level)
    if blocks < 2 or bounds is None or near is None:
        return None
    df = quantity.df if quantity.method == METHOD_PAIRED else blocks - 1

    def fits(side: float, room: float, at_level: float) -> float:
        """Blocks at which a side of the ``at_level`` interval now ``side`` wide is at most
        ``room`` (inf where it never is by MAX_BLOCKS, or has no room)."""
        if room <= 0:
            return math.inf
        t_now = float(_sp.stdtrit(df, 0.5 + at_level / 2))
        var = (side * math.sqrt(blocks) / t_now) ** 2
        return blocks_needed(var, 1.0, at_level, math.expm1(room)) or math.inf

    centre, line = np.log(quantity.value), np.log(threshold)
    # a bootstrap interval need not be symmetric: decided once the side facing the
    # threshold clears it; at the threshold once both sides of the equivalence interval
    # lie within ``margin`` of it (stats.band)
    up, down = np.log(bounds[1]) - centre, centre - np.log(bounds[0])
    decided = fits(up if line > centre else down, abs(line - centre), level)
    near_up, near_down = np.log(near[1]) - centre, centre - np.log(near[0])
    at = max(fits(near_up, line + np.log1p(margin) - centre, eq_level),
             fits(near_down, centre - line + np.log1p(margin), eq_level))
    rounds = max(blocks, min(decided, at))
    return SETTLE_MAX + 1 if rounds > SETTLE_MAX else int(rounds)
