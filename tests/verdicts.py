"""A claims table judged again, apart from production: each row's rule against its ledger
entry, and its verdict worked out anew from the row's own figures by the decision rule as
README.md ("How to read a verdict") and ``perfgrid.analyse.stats.decide`` state it.

Nothing of perfgrid's judging code is called here (no ``decide``, ``band`` or
``all_of``): a slip in either place shows as a disagreement.
"""

from __future__ import annotations

import math
from pathlib import Path

from perfgrid.analyse import ledger
from perfgrid.publish.report.claims import read_claims

#: the one-sided operators: (the side the claim holds on, strict)
ONE_SIDED = {">=": (">", False), ">": (">", True), "<=": ("<", False), "<": ("<", True)}


def verdict_from(op: str, threshold: float, margin: float, value: float,
                     interval: tuple[float, float], near: tuple[float, float]) -> str:
    """The verdict of ``value`` with its ``interval`` (at the claim's level) and ``near``
    (the equivalence interval, 90 % beside 95 %) against ``op threshold``, ``margin``
    being the relative equivalence margin:

    - no estimate or no interval: inconclusive;
    - the equivalence interval wholly within a factor ``1 + margin`` of the threshold:
      at the threshold (an "about" claim, ``~``: reproduced); this comes first;
    - ``~``: not reproduced when the interval lies wholly outside that band, else
      inconclusive;
    - otherwise reproduced when the interval lies wholly on the claim's side (a strict
      operator excludes the threshold itself), not reproduced when wholly on the other
      side, else inconclusive.
    """
    lo, hi = interval
    if math.isnan(value) or math.isnan(lo) or math.isnan(hi):
        return "inconclusive"
    if threshold > 0:
        low, high = threshold / (1 + margin), threshold * (1 + margin)
        if not (math.isnan(near[0]) or math.isnan(near[1])) and low <= near[0] <= near[1] <= high:
            return "reproduced" if op == "~" else "at the threshold"
        if op == "~":
            return "not reproduced" if hi < low or lo > high else "inconclusive"
    side, strict = ONE_SIDED[op]
    if side == ">":
        holds = lo > threshold if strict else lo >= threshold
        fails = hi <= threshold if strict else hi < threshold
    else:
        holds = hi < threshold if strict else hi <= threshold
        fails = lo >= threshold if strict else lo > threshold
    return "reproduced" if holds else "not reproduced" if fails else "inconclusive"


def judged(claim) -> bool:
    """A row with a rule and a finite interval: a verdict its figures decide."""
    return bool(claim.op) and math.isfinite(claim.ci_low) and math.isfinite(claim.ci_high)


def problems(path: Path) -> list[str]:
    """Every disagreement of ``path`` (a claims.csv) with its ledgers and with the decision
    rule; empty where each row holds. A compound claim (ledger ``op: all``) shows the part
    that decided it, its weakest: its row's rule is that part's, and the part's verdict is
    the claim's (every part reproduced: reproduced; any not reproduced: not reproduced; ...)."""
    out = []
    for c in read_claims(path):
        what = f"{c.experiment} [{c.runtime}] {c.hypothesis[:60]!r}"
        entry = ledger.entries(c.experiment).get(c.hypothesis)
        if entry is None:
            out.append(f"{what}: no ledger entry")
            continue
        if c.kind != entry.kind or c.margin != entry.margin:
            out.append(f"{what}: kind {c.kind!r}, margin {c.margin} where the ledger states "
                       f"{entry.kind!r}, {entry.margin}")
        if entry.op == "all":
            if c.op not in (*ONE_SIDED, "~", "all"):
                out.append(f"{what}: a compound claim judged by {c.op!r}")
                continue
        elif c.op != entry.op or not math.isclose(c.threshold, entry.threshold, rel_tol=1e-9):
            out.append(f"{what}: rule {c.op!r} {c.threshold:g}; the ledger states "
                       f"{entry.op} {entry.threshold:g}")
            continue
        if c.op == "all":  # a compound claim none of whose parts could be judged
            if c.verdict != "inconclusive" or judged(c):
                out.append(f"{what}: {c.verdict} with no part's rule")
            continue
        if not c.op:
            out.append(f"{what}: no rule")
            continue
        if judged(c) and not (math.isnan(c.eq_low) or math.isnan(c.eq_high)) and not (
                c.ci_low <= c.eq_low * (1 + 1e-9) and c.eq_high <= c.ci_high * (1 + 1e-9)):
            out.append(f"{what}: equivalence interval {c.eq_low:g}-{c.eq_high:g} outside "
                       f"the claim's {c.ci_low:g}-{c.ci_high:g}")
        want = verdict_from(c.op, c.threshold, c.margin, c.value, (c.ci_low, c.ci_high),
                                (c.eq_low, c.eq_high))
        if c.verdict != want:
            out.append(f"{what}: {c.verdict!r}, but {c.value:g} [{c.ci_low:g}, {c.ci_high:g}] "
                       f"(equivalence [{c.eq_low:g}, {c.eq_high:g}]) {c.op} {c.threshold:g} "
                       f"with margin {c.margin:g} reads {want!r}")
    return out
