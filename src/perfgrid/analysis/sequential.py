"""Judging an experiment's claims at a look (perfgrid.looks): is each claim decided, or
can it still be decided by the last round?

A claim cannot be decided by the cap when, taking its estimate and its per-block spread
as they stand, the chance that the interval at the cap lies wholly on one side of the
threshold is under :data:`FUTILE` (conditional power).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgrid import aggregate, looks
from perfgrid.analysis import claims_of, looks_by_point

#: a claim whose chance of being decided by the cap is below this no longer holds the run
FUTILE = 0.2
#: readings that end a claim: more blocks would not change what a reader should believe
DECIDED = ("reproduced", "not reproduced", "at the threshold")


def conditional_power(claim: Any, blocks: int, cap: int,
                      final: float | None = None) -> float:
    """The chance that ``claim``'s interval at ``cap`` blocks lies wholly on one side of its
    threshold, if its estimate and per-block spread stay as they are now at ``blocks``.

    On the log scale the half-width shrinks as ``t(cap - 1) / t(blocks - 1) *
    sqrt(blocks / cap)``, the t at the cap taken at the ``final`` look's level (default:
    the claim's own); NaN where the claim has no interval or no positive threshold.
    """
    from scipy import stats as scipy_stats

    value, low, high, threshold = (float(getattr(claim, k, math.nan))
                                   for k in ("value", "ci_low", "ci_high", "threshold"))
    if not all(math.isfinite(x) and x > 0 for x in (value, low, high, threshold)) \
            or blocks < 2 or cap <= blocks:
        return math.nan
    tail = (1 - level_of(claim)) / 2
    tail_cap = (1 - final) / 2 if final else tail
    t_now = float(scipy_stats.t.ppf(1 - tail, blocks - 1))
    t_cap = float(scipy_stats.t.ppf(1 - tail_cap, cap - 1))
    half_now = (math.log(high) - math.log(low)) / 2
    half_cap = half_now * t_cap / t_now * math.sqrt(blocks / cap)
    if half_cap <= 0:
        return 1.0
    distance = abs(math.log(value) - math.log(threshold))
    return float(scipy_stats.norm.cdf((distance - half_cap) / (half_cap / t_cap)))


def level_of(claim: Any) -> float:
    """The level a claim was judged at (recorded on it; 95 % where it is not)."""
    found = getattr(claim, "level", None)
    return float(found) if found and math.isfinite(float(found)) else 1 - looks.ALPHA


def _growing(table: Any, at: int | None) -> set[str]:
    """The points measured in rounds after look ``at``: those that pass more looks; a
    claim on none of them has all its data already."""
    if at is None:
        return set()
    return {key for key, count in looks_by_point(table).items() if count > at}


def judge(experiment: str, results: Sequence[str | Path], blocks: int, planned: int,
          cap: int, previous: dict[str, Any] | None = None,
          at: int | None = None) -> dict[str, Any]:
    """The record of one look (look ``at`` of ``planned``, 1-based): each claim's reading
    on the rounds measured so far; whether the rounds after this look are measured
    (``stop``) and why; and the points of the claims it leaves open (``open_points``),
    the only ones the later rounds measure (perfgrid.looks.measures)."""
    base = {"experiment": experiment, "blocks": blocks, "looks": planned, "cap": cap,
            "at": at, "level": looks.level(planned, at)}
    if previous is not None and previous.get("stop"):
        return {**base, "stop": True, "stopped_at": previous["stopped_at"],
                "why": previous["why"], "claims": previous.get("claims", []),
                "open_points": []}
    table = aggregate.build_table(experiment, looks.measured(results))
    claims = claims_of(experiment, table, at)
    final = looks.level(planned)
    growing = _growing(table, at)
    rows = []
    for claim in claims:
        power = conditional_power(claim, blocks, cap, final)
        named = list(claim.point_keys)
        rows.append({"hypothesis": claim.hypothesis, "runtime": claim.runtime,
                     "verdict": claim.verdict, "measured": claim.measured,
                     "level": claim.level, "points": named,
                     "conditional_power": None if math.isnan(power) else round(power, 4),
                     "holds": claim.verdict not in DECIDED and not (
                         math.isnan(power) or power < FUTILE)
                     and (not named or bool(growing & set(named)))})
    holding = [r for r in rows if r["holds"]]
    # a claim that cannot name its points holds every point of the experiment's claims
    base["open_unnamed"] = any(not r["points"] for r in holding)
    opened = {p for r in holding for p in r["points"]}
    if previous is not None and previous.get("open_points") is not None \
            and not previous.get("open_unnamed"):  # a point a look let go stays let go
        opened &= set(previous["open_points"])
    base["open_points"] = sorted(opened)
    stop = not holding
    if stop:
        decided = sum(r["verdict"] in DECIDED for r in rows)
        why = (f"after {blocks} of {cap} rounds: {decided} of {len(rows)} claims decided, "
               f"the other {len(rows) - decided} could not be decided by round {cap} "
               f"(chance under {FUTILE:.0%}, or no interval)")
    else:
        why = (f"after {blocks} of {cap} rounds: {len(holding)} of {len(rows)} claims still "
               f"undecided and decidable by round {cap}")
    return {**base, "stop": stop, "stopped_at": blocks if stop else None, "why": why,
            "claims": rows}
