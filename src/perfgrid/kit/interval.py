"""The interval core: a mean (or rate) of values grouped by worker process, its calibrated
log-scale bootstrap deviations, and the interval they give.

It is all of the statistics the harness needs: perfgrid.measure.bench adds worker processes
until a point's interval meets its target, and must compute that interval as the table does
(perfgrid.analyse.stats builds its :class:`~perfgrid.analyse.stats.Estimate` on
:func:`mean`). It lives apart from the claims' statistics because every module a benchmark
job imports is a code input of every benchmark job (perfgrid.design.codeinputs): an edit
there would rerun the whole measurement. Why the bootstrap is hierarchical and calibrated:
perfgrid.analyse.stats.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special as _sp  # not scipy.stats: every harness manager imports this module

LEVEL = 0.95
N_BOOT = 2000
#: the fewest rounds a bootstrap over rounds is taken over (fewer: Student's t over them)
BOOTSTRAP_ROUNDS = 3

METHOD_HIERARCHICAL = "hierarchical bootstrap"
METHOD_VALUES = "bootstrap of values (one process: within-process noise only)"
METHOD_ROUNDS = "hierarchical bootstrap over rounds"
METHOD_NONE = "none"


@dataclass(frozen=True)
class Replicates:
    """A positive quantity measured from raw values: its value, ``dev`` (``log(replicate)
    - log(value)``, scaled to the calibrated variance; None without an interval, ``reason``
    says why), degrees of freedom, method, the log value per round (``blocks``) and, where
    the interval is Student's t about the log value, its standard error ``se``."""

    value: float
    dev: np.ndarray | None = field(default=None, repr=False)
    df: float = float("nan")
    method: str = METHOD_NONE
    reason: str = ""
    blocks: dict[Any, float] | None = field(default=None, repr=False)
    se: float | None = field(default=None, repr=False)

    def interval(self, level: float = LEVEL) -> tuple[float, float] | None:
        return bounds(self.value, self.dev, self.df, self.se, level)

    @property
    def ci_rel(self) -> float:
        """Half-width of the 95 % interval over the value (NaN without one)."""
        found = self.interval()
        return float("nan") if found is None else (found[1] - found[0]) / 2 / self.value


def bounds(value: float, dev: np.ndarray | None, df: float, se: float | None,
           level: float) -> tuple[float, float] | None:
    """The ``level`` interval of a quantity (None without one): Student's t about the log
    value where ``se`` is known, else bootstrap percentiles of ``dev`` widened by t(df)/z."""
    if dev is None or not (np.isfinite(value) and value > 0):
        return None
    alpha = (1 - level) / 2
    centre = float(np.log(value))
    if se is not None and se > 0 and np.isfinite(df):
        half = float(_sp.stdtrit(df, 1 - alpha)) * se
        return float(np.exp(centre - half)), float(np.exp(centre + half))
    lo, hi = np.quantile(dev, [alpha, 1 - alpha])
    widen = float(_sp.stdtrit(df, 1 - alpha)) / float(_sp.ndtri(1 - alpha))
    return float(np.exp(centre + widen * lo)), float(np.exp(centre + widen * hi))


def seed_for(*keys: Any) -> int:
    """A stable seed from what identifies a point, so a table's intervals are repeatable."""
    return zlib.crc32(json.dumps(keys, sort_keys=True, default=str).encode())


def by_round(processes: Sequence[Sequence[float]],
             rounds: Sequence[Any] | None) -> list[list[float]]:
    """Values pooled by round (the outer level when a point was measured in rounds).

    With fewer than two rounds the processes stay the outer level.
    """
    if rounds is None or len(set(rounds)) < 2:
        return [list(g) for g in processes]
    if len(rounds) != len(processes):
        raise ValueError(f"{len(rounds)} round labels for {len(processes)} processes")
    pooled: dict[Any, list[float]] = {}
    for label, group in zip(rounds, processes, strict=True):
        pooled.setdefault(label, []).extend(group)
    return list(pooled.values())


def mean(processes: Sequence[Sequence[float]], seed: int = 0, n_boot: int = N_BOOT,
         rounds: Sequence[Any] | None = None) -> Replicates:
    """The mean of positive values grouped by worker process (per-loop times, CPU shares).

    ``rounds`` labels each process with the job (round) that measured it; with
    two or more rounds, rounds are the outer level of the bootstrap and of the
    variance (Kalibera and Jones: the highest level that varies dominates). A bootstrap
    over two rounds knows three resamples (it covered about 93 %): with fewer than
    :data:`BOOTSTRAP_ROUNDS` rounds the interval is Student's t over the round means
    instead (``rounds - 1`` df; its deviations normal draws, for combining).
    """
    outer = by_round(processes, rounds)
    groups = [np.asarray(g, dtype=float) for g in outer if len(g)]
    pooled_rounds = rounds is not None and len(set(rounds)) >= 2
    values = np.concatenate(groups) if groups else np.array([])
    if values.size == 0:
        return Replicates(float("nan"), reason="no values")
    grand = float(values.mean())
    if not (np.all(values > 0) and np.all(np.isfinite(values))):
        return Replicates(grand, reason="non-positive or non-finite values")
    if values.size == 1:
        return Replicates(grand, reason="one value")
    rng = np.random.default_rng(seed)
    w = len(groups)
    # each process's (round's) mean, once: the variance over them and the rounds' blocks
    means = values if values.size == w else [g.mean() for g in groups]  # one value: itself
    if w >= 2:
        target = float(np.var(np.log(means), ddof=1)) / w
        df, method = w - 1, METHOD_ROUNDS if pooled_rounds else METHOD_HIERARCHICAL
    else:
        target = float(np.var(np.log(values), ddof=1)) / values.size
        df, method = values.size - 1, METHOD_VALUES
    if target <= 0:
        return Replicates(grand, reason="all values identical: spread unknown")
    se = None
    if pooled_rounds and w < BOOTSTRAP_ROUNDS:
        se = float(np.sqrt(target))
        # seeded by the data too: two points of one seed still draw independently
        logs = np.round(np.log(means), 12).tolist()
        dev = np.random.default_rng(seed_for(seed, *logs)).standard_normal(n_boot)
        dev = (dev - dev.mean()) / dev.std() * se
    else:
        reps = _hierarchical_means(groups, rng, n_boot)
        dev = np.log(reps) - np.log(grand)
        spread = float(np.var(dev))
        dev = (dev * np.sqrt(target / spread) if spread > 0
               else rng.normal(0, np.sqrt(target), n_boot))
    blocks = None
    if pooled_rounds:  # the rounds' own means, for a ratio paired round by round
        labels = [label for label, g in zip(dict.fromkeys(rounds or []), outer, strict=True)
                  if g]
        blocks = {label: float(np.log(m)) for label, m in zip(labels, means, strict=True)}
    return Replicates(grand, dev, float(df), method, "", blocks, se)


def _hierarchical_means(groups: list[np.ndarray], rng: np.random.Generator,
                        n_boot: int) -> np.ndarray:
    """Grand means of ``n_boot`` resamples: processes with replacement, then values within.

    All replicates at once. With one value a process (a claim point's rounds) the draw
    within a process can only pick that value: its uniforms are not drawn but stepped over
    (one 64-bit draw each: the bit generator advanced), so the stream and every replicate
    stay what the general path gives, bit for bit (a rate over six such rounds: 163 us,
    not 210 us)."""
    w = len(groups)
    sizes = np.array([g.size for g in groups])
    width = int(sizes.max())
    chosen = rng.integers(0, w, size=(n_boot, w)) if w > 1 else np.zeros((n_boot, 1), int)
    if width == 1:
        rng.bit_generator.advance(chosen.size)
        return np.concatenate(groups)[chosen].sum(axis=1) / chosen.shape[1]
    uniforms = rng.random((n_boot, chosen.shape[1], width))
    padded = np.zeros((w, width))
    for i, g in enumerate(groups):
        padded[i, : g.size] = g
    n = sizes[chosen]                                           # (B, W)
    picks = (uniforms * n[..., None]).astype(int)
    drawn = padded[chosen[..., None], picks]                    # (B, W, width)
    mask = np.arange(width)[None, None, :] < n[..., None]
    return (drawn * mask).sum(axis=(1, 2)) / n.sum(axis=1)


def rate(processes: Sequence[Sequence[float]], work_per_loop: float, seed: int = 0,
         rounds: Sequence[Any] | None = None) -> Replicates:
    """Work per second of one point: ``work_per_loop`` over the mean per-loop time (its
    deviations and rounds' logs negated and shifted; no log of a scale that is not
    positive: no rounds to pair)."""
    per_loop = mean(processes, seed, rounds=rounds)
    shift = float(np.log(work_per_loop)) if work_per_loop > 0 else float("nan")
    blocks = None if per_loop.blocks is None or not np.isfinite(shift) else {
        k: shift - v for k, v in per_loop.blocks.items()}
    dev = None if per_loop.dev is None else -per_loop.dev
    return Replicates(float(work_per_loop) / per_loop.value, dev, per_loop.df, per_loop.method,
                      per_loop.reason, blocks, per_loop.se)
