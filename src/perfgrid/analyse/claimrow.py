"""One claims.csv row's within-run standard error, on the scale its claim is judged on.

``perfgrid aa`` and ``perfgrid pool`` weigh runs by how sure each run was of itself, so
both need a row's within-run standard error without the between-run part its interval
holds. A row of this perfgrid records it (``se``, ``df``, ``scale``); an older row holds
only its interval, widened by ``tau`` (perfgrid.analyse.stats.Widened: each side
``sqrt(side^2 + (z tau)^2)``), so the error is read back from it:

- on the row's own scale: ``log`` for ratios and costs, ``logit`` for shares (an older
  row says ``logit scale`` in its ``basis``). An older share's ``tau`` is on the log
  scale: its interval was widened there and then mapped to the logit scale (a log side
  ``s`` is a logit side ``s / (1 - p)``), so ``tau`` is read as ``tau / (1 - p)`` there.
  (perfgrid.analyse.betweenrun.within_interval stripped the log-scale ``tau`` from the logit
  interval: a share near 1 lost most of its width, twin-1's ring share by far.)
- with the quantile it was built with: Student's t where ``basis`` names its degrees of
  freedom (``(t, 2 df)``, ``over rounds, 2 df``), the normal quantile otherwise (said in
  ``how``). Read with z, a t(2) interval gave every variance 4.8 times too large. A
  best-of's simultaneous bounds (``max of K rows, ...``) take t at ``alpha / K`` on the
  ends Bonferroni paid for (perfgrid.analyse.stats.reduce); read so, the error is approximate,
  and ``how`` says it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# scipy.stats' norm.ppf and t.ppf are ndtri and stdtrit behind argument checks that cost
# ~50 us a call, twice a row: too dear for thousands of rows (perfgrid pool, perfgrid aa)
from scipy import special as sp

from perfgrid.analyse.ledger import COUNTED

#: the scales a claim is judged on
SCALES = ("log", "logit")
#: the confidence levels a row's interval may be read at (blank: 0.95, an older table)
LEVELS = (0.5, 0.999999)
_T_DF = re.compile(r"\(t, ([0-9.]+(?:e[+-]?\d+)?) df\)|over (?:rounds|processes), "
                   r"([0-9.]+(?:e[+-]?\d+)?) df")
_BEST_OF = re.compile(r"^(max|min|median) of (\d+) rows, simultaneous bounds")


@dataclass(frozen=True)
class WithinSe:
    """A row's estimate and within-run standard error on ``scale``: ``y`` (ln or logit of
    its value), ``se`` and its degrees of freedom ``df`` (inf: normal); ``se`` None where
    the row has none, ``how`` then says why (else how it was read)."""

    se: float | None
    df: float
    scale: str
    how: str
    y: float = math.nan


def _float(row: Any, key: str) -> float:
    try:
        value = row.get(key, math.nan)
        return math.nan if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return math.nan


def _text(row: Any, key: str) -> str:
    value = row.get(key, "")
    return value if isinstance(value, str) else ""


def name(row: Any) -> str:
    """``experiment [runtime] hypothesis (criterion)``: a claim named in errors."""
    return (f"{_text(row, 'experiment')} [{_text(row, 'runtime')}] "
            f"{_text(row, 'hypothesis')!r} ({_text(row, 'criterion')})")


def counted(row: Any) -> bool:
    """Whether a claim counts in totals (perfgrid.analyse.ledger.COUNTED, or a row of a table
    without kinds); sanity checks do not."""
    kind = _text(row, "kind")
    return not kind or kind in COUNTED


def level(row: Any) -> float:
    """The row's interval level (blank: 0.95); ValueError naming the column and the
    allowed values otherwise (a level of 1e-300 has a quantile of 0, one of 1 none)."""
    found = _float(row, "level")
    if math.isnan(found) and str(row.get("level", "")).strip().lower() in ("", "nan", "none"):
        return 0.95
    if not LEVELS[0] <= found <= LEVELS[1]:
        raise ValueError(f"claim {name(row)}: column level is {row.get('level')!r}; "
                         f"allowed: a confidence level from {LEVELS[0]} to {LEVELS[1]} "
                         f"(blank: 0.95)")
    return found


def scale(row: Any) -> str:
    """The row's scale: its ``scale`` column, else ``logit`` where its ``basis`` says
    ``logit scale`` (an older row), else ``log``; ValueError for another value."""
    given = _text(row, "scale").strip()
    if given:
        if given not in SCALES:
            raise ValueError(f"claim {name(row)}: column scale is {given!r}; allowed: "
                             f"{', '.join(SCALES)}")
        return given
    return "logit" if "logit scale" in _text(row, "basis") else "log"


def to_scale(value: float, on: str) -> float:
    """``value`` on scale ``on`` (NaN outside its domain)."""
    if on == "logit":
        return float(sp.logit(value)) if 0 < value < 1 else math.nan
    return math.log(value) if value > 0 else math.nan


def from_scale(y: float, on: str) -> float:
    """Back from scale ``on``: never overflows (inf or 0 at the far ends)."""
    if on == "logit":
        return float(sp.expit(y))
    return math.exp(y) if y < 709 else math.inf


def tau_on_scale(row: Any) -> float:
    """The row's ``tau`` column on its own scale (0 where missing): an older share row's
    log-scale tau read on the logit scale (``tau / (1 - p)``)."""
    tau = _float(row, "tau")
    if not (math.isfinite(tau) and tau > 0):
        return 0.0
    value = _float(row, "value")
    if scale(row) == "logit" and not _text(row, "scale").strip() and 0 < value < 1:
        return tau / (1 - value)
    return tau


def _basis_df(basis: str) -> float | None:
    found = _T_DF.search(basis)
    if found is None:
        return None
    df = float(found.group(1) or found.group(2))
    return df if df > 0 else None


def within_se(row: Any) -> WithinSe:
    """The row's within-run standard error on its scale (:class:`WithinSe`): the recorded
    ``se`` and ``df`` where the row has them, else read off its interval (module doc)."""
    on = scale(row)
    y = to_scale(_float(row, "value"), on)
    if not math.isfinite(y):
        return WithinSe(None, math.nan, on, "no estimate", y)
    se, df = _float(row, "se"), _float(row, "df")
    if not math.isnan(se):
        if not (math.isfinite(se) and se >= 0):
            return WithinSe(None, math.nan, on, f"se {se!r} is not a standard error", y)
        if not (df > 0):
            return WithinSe(se, math.inf, on, "recorded se, no df: normal", y) if se > 0 \
                else WithinSe(None, math.nan, on, "no width", y)
        if se == 0:
            return WithinSe(None, math.nan, on, "no width", y)
        return WithinSe(se, df, on, f"recorded se ({df:g} df)", y)
    at = level(row)
    low, high = (to_scale(_float(row, k), on) for k in ("ci_low", "ci_high"))
    if not (math.isfinite(low) and math.isfinite(high) and low <= y <= high and low < high):
        return WithinSe(None, math.nan, on, "no interval", y)
    held = tau_on_scale(row)
    extra = (float(sp.ndtri(0.5 + at / 2)) * held) ** 2
    below = math.sqrt(max(0.0, (y - low) ** 2 - extra))
    above = math.sqrt(max(0.0, (high - y) ** 2 - extra))
    if below + above == 0:
        return WithinSe(None, math.nan, on, "no width left once the between-run part is out",
                        y)
    basis = _text(row, "basis")
    df = _basis_df(basis)
    plain = float(sp.stdtrit(df, 0.5 + at / 2) if df else sp.ndtri(0.5 + at / 2))
    ends, how = (plain, plain), (f"read off the interval with t({df:g})" if df else
                                 "read off the interval with z (its basis names no df)")
    best = _BEST_OF.search(basis)
    if best and df:
        k = int(best.group(2))
        strict = float(sp.stdtrit(df, 1 - (1 - at) / (2 * k)))
        ends = {"max": (strict, plain), "min": (plain, strict)}.get(best.group(1),
                                                                   (strict, strict))
        how += f", t at alpha/{k} on a best-of's Bonferroni ends: approximate"
    if held:
        how += f", less tau {held:.3g}"
    return WithinSe((below + above) / (ends[0] + ends[1]), df or math.inf, on,
                    f"{how} ({on} scale)", y)
