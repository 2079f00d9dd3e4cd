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

The rounds after a look are measured per claim, not per experiment: a look lists the
grid points of the claims it left open (each claim's quantity names the points it was
computed from, ``stats.Estimate.points``), and a later round of a point measures only
if one of those claims compares it. A claim decided at the first look stops costing
time at once, whatever its neighbours still need.

Looking more than once would make a false decision more likely if each look used the
usual 95 % interval (about 15 % of claims whose truth sits exactly at the threshold were
decided either way over three looks in simulation). So the 5 % error rate is spent
over the looks (Bonferroni with unequal shares, in the spirit of Haybittle and Peto's
strict interim boundary): every look before the last spends :data:`EARLY` of it, split
evenly, the last look the rest. With two looks the first decides at 99 % and the last at
96 %: a claim far from its threshold is decided early, and one that needs every round is
judged at nearly the usual level. The chance of any false decision over all looks stays
under 5 % whatever the looks' correlation (tests/test_looks.py simulates it). A claim
whose points were all measured by the first look is judged once, at 95 %. Stopping
because a claim cannot be decided only ever withholds a decision, so it costs no error
rate ("non-binding futility").

This module plans the looks and carries their decisions; perfgrid.analysis.sequential
judges at a look.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgrid import experiments

#: the error rate shared by every look of a claim
ALPHA = 0.05
#: the share of :data:`ALPHA` the looks before the last spend, together
EARLY = 0.2
#: the key of a result file written for a round that was not measured
NOT_MEASURED = "perfgrid_not_measured"


def level(looks: int, at: int | None = None) -> float:
    """The interval level look ``at`` (1-based; None: the last) of ``looks`` planned ones
    decides at: the looks before the last share :data:`EARLY` of the error rate, the last
    takes the rest, so the levels' errors add up to :data:`ALPHA`."""
    looks = max(1, int(looks))
    if looks == 1:
        return 1 - ALPHA
    if at is not None and int(at) < looks:
        return 1 - ALPHA * EARLY / (looks - 1)
    return 1 - ALPHA * (1 - EARLY)


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
    if not experiments.get(experiment).used_by_claims(point):
        return None
    earlier = [n for n in schedule(cfg, experiment)[:-1] if n < round_]
    return max(earlier) if earlier else None


def looks_of(cfg: dict[str, Any], experiment: str, rounds: int | None = None) -> int:
    """How many looks ``experiment``'s claims have (1: judged once, at the end); with
    ``rounds``, those a point measured in that many rounds passes (a point whose rounds
    all come before the first look is judged once)."""
    planned = schedule(cfg, experiment)
    if rounds is None:
        return len(planned)
    return max(1, sum(n <= int(rounds) for n in planned))


def measures(record: dict[str, Any], point_key: str) -> bool:
    """Whether a round after the look ``record`` measures the point ``point_key``: the
    look stopped nothing, and a claim it left open compares the point (or names no
    points: then every point of the experiment's claims goes on)."""
    if record.get("stop"):
        return False
    open_points = record.get("open_points")
    if open_points is None or record.get("open_unnamed"):
        return True  # a look from before claims named their points, or one that cannot
    return point_key in set(open_points)


# -- the rounds a look stopped ------------------------------------------------------------
#: a note's ``look`` where the run's time budget, not a look, let the round go (perfgrid.block)
BUDGET = "budget"


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
