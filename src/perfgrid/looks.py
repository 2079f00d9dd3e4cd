"""Sequential claims: judge an experiment's claims after some of its rounds, and measure
the rounds after a look only while a claim is still undecided and can still be decided.

An experiment whose ``measure.claims.looks`` lists block counts (``[4, 8]`` with
``rounds: 12``) has its claims judged after 4 and after 8 rounds of its claim points,
and at 12 (the cap): a look job (rule ``look``) reads the rounds measured so far, builds
the experiment's table from them and runs its claims. If every claim is decided
(reproduced, not reproduced, or at the threshold) or cannot be decided by the cap, the
later rounds are not measured: their jobs write a note saying so instead of a result
(:func:`write_not_measured`), and the table leaves them out. Otherwise they run, and
the next look judges again.

Looking more than once would make a false decision more likely if each look used the
usual 95 % interval (about 15 % of claims whose truth sits exactly at the threshold were
decided either way over three looks in simulation). So every look, and the final
verdict, uses intervals at ``1 - 0.05 / L`` for L planned looks (Bonferroni over the
looks): the chance of any false decision over all looks stays under 5 % whatever the
looks' correlation, at the price of intervals a little wider than Pocock's constant
boundary, which assumes normal increments of known variance (tests/test_looks.py
simulates both). Stopping because a claim cannot be decided only ever withholds a
decision, so it costs no error rate ("non-binding futility").

A claim cannot be decided by the cap when, taking its estimate and its per-block spread
as they stand, the chance that the interval at the cap lies wholly on one side of the
threshold is under :data:`FUTILE` (conditional power).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgrid import experiments

#: the error rate shared by every look of a claim
ALPHA = 0.05
#: a claim whose chance of being decided by the cap is below this no longer holds the run
FUTILE = 0.2
#: readings that end a claim: more blocks would not change what a reader should believe
DECIDED = ("reproduced", "not reproduced", "at the threshold")
#: the key of a result file written for a round that was not measured
NOT_MEASURED = "perfgrid_not_measured"


def level(looks: int) -> float:
    """The interval level every look of ``looks`` planned ones decides at."""
    return 1 - ALPHA / max(1, int(looks))


def schedule(cfg: dict[str, Any], experiment: str) -> list[int]:
    """The block counts at which ``experiment``'s claims are judged: its ``looks`` below
    the claim points' rounds, then the rounds themselves (the cap)."""
    claims = cfg[experiment]["measure"].get("claims") or {}
    cap = int(claims.get("rounds") or 1)
    return sorted({int(n) for n in claims.get("looks") or [] if int(n) < cap} | {cap})


def look_before(cfg: dict[str, Any], experiment: str, point: dict[str, Any],
                round_: int) -> int | None:
    """The look a job of ``point``'s round ``round_`` waits for: the last one before it
    (None for rounds up to the first look, and for points no claim compares)."""
    from perfgrid import planning  # numpy: kept out of the harness, which imports this module

    if not experiments.get(experiment).used_by_claims(point):
        return None
    if planning.rounds_of(cfg, experiment, point) < 2:
        return None
    earlier = [n for n in schedule(cfg, experiment)[:-1] if n < round_]
    return max(earlier) if earlier else None


def looks_of(cfg: dict[str, Any], experiment: str) -> int:
    """How many looks ``experiment``'s claims have (1: judged once, at the end)."""
    return len(schedule(cfg, experiment))


# -- the rounds a look stopped ------------------------------------------------------------
def write_not_measured(result: str | Path, look: str | Path, record: dict[str, Any]) -> None:
    """In place of a result: the note that this round was not measured, and why."""
    from perfgrid.atomic import write_json

    write_json(result, {NOT_MEASURED: {"look": str(look), "why": record.get("why", ""),
                                       "blocks": record.get("blocks")}})


def not_measured(path: str | Path) -> dict[str, Any] | None:
    """The note of a round a look stopped (None for a measured result)."""
    with open(path, "rb") as handle:
        head = handle.read(len(NOT_MEASURED) + 8)
    if NOT_MEASURED.encode() not in head:
        return None
    with open(path) as handle:
        data = json.load(handle)
    return data.get(NOT_MEASURED) if isinstance(data, dict) else None


def measured(paths: Sequence[str | Path]) -> list[str | Path]:
    """``paths`` less the rounds a look stopped."""
    return [p for p in paths if not_measured(p) is None]


def read(path: str | Path) -> dict[str, Any]:
    """A look's record (what :func:`judge` wrote)."""
    with open(path) as handle:
        return json.load(handle)


# -- judging ------------------------------------------------------------------------------
def conditional_power(claim: Any, blocks: int, cap: int) -> float:
    """The chance that ``claim``'s interval at ``cap`` blocks lies wholly on one side of its
    threshold, if its estimate and per-block spread stay as they are now at ``blocks``.

    On the log scale the half-width shrinks as ``t(cap - 1) / t(blocks - 1) *
    sqrt(blocks / cap)``; NaN where the claim has no interval or no positive threshold.
    """
    from scipy import stats as scipy_stats

    value, low, high, threshold = (float(getattr(claim, k, math.nan))
                                   for k in ("value", "ci_low", "ci_high", "threshold"))
    if not all(math.isfinite(x) and x > 0 for x in (value, low, high, threshold)) \
            or blocks < 2 or cap <= blocks:
        return math.nan
    tail = (1 - level_of(claim)) / 2
    t_now = float(scipy_stats.t.ppf(1 - tail, blocks - 1))
    t_cap = float(scipy_stats.t.ppf(1 - tail, cap - 1))
    half_now = (math.log(high) - math.log(low)) / 2
    half_cap = half_now * t_cap / t_now * math.sqrt(blocks / cap)
    if half_cap <= 0:
        return 1.0
    distance = abs(math.log(value) - math.log(threshold))
    return float(scipy_stats.norm.cdf((distance - half_cap) / (half_cap / t_cap)))


def level_of(claim: Any) -> float:
    """The level a claim was judged at (recorded on it; 95 % where it is not)."""
    found = getattr(claim, "level", None)
    return float(found) if found and math.isfinite(float(found)) else 1 - ALPHA


def judge(experiment: str, results: Sequence[str | Path], blocks: int, looks: int,
          cap: int, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The record of one look: each claim's reading on the rounds measured so far, and
    whether the rounds after this look are measured (``stop``) and why."""
    base = {"experiment": experiment, "blocks": blocks, "looks": looks, "cap": cap,
            "level": level(looks)}
    if previous is not None and previous.get("stop"):
        return {**base, "stop": True, "stopped_at": previous["stopped_at"],
                "why": previous["why"], "claims": previous.get("claims", [])}
    from perfgrid import aggregate, analysis

    table = aggregate.build_table(experiment, measured(results))
    claims = analysis.claims_of(experiment, table)
    rows = []
    for claim in claims:
        power = conditional_power(claim, blocks, cap)
        rows.append({"hypothesis": claim.hypothesis, "runtime": claim.runtime,
                     "verdict": claim.verdict, "measured": claim.measured,
                     "conditional_power": None if math.isnan(power) else round(power, 4),
                     "holds": claim.verdict not in DECIDED and not (
                         math.isnan(power) or power < FUTILE)})
    holding = [r for r in rows if r["holds"]]
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
