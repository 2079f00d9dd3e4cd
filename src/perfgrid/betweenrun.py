"""The variance between runs: what one run's interval cannot see.

An interval over the rounds of one run covers the noise inside that run. Two runs of one
commit on two VMs of one kind differ by more (the host, the day, the neighbours), so a
verdict about the machine adds a between-run component ``tau`` (a standard deviation on
the log scale), estimated from the recorded full runs shipped in
``perfgrid/data/recorded_runs.csv`` by DerSimonian-Laird's moment equation.

The component is a claim's own where the record holds :data:`OWN_RUNS` or more runs of
that claim: runs differ by claim, far more for an absolute cost (which follows the host's
speed) than for a ratio of two figures measured side by side in one run. A claim recorded
fewer times takes its experiment's estimate, in which every claim of the experiment
measured twice or more adds its equation (a common between-run variance), and an
experiment that cannot tell it takes the estimate pooled over every experiment. Only the
runs of this project's machine kind (:data:`MACHINE_KIND` in their host) count: the record
also holds runs on an earlier host, whose spread is not this one's.

The record's claims tables hold intervals over the noise inside each run: a run of this
perfgrid adds its own with ``perfgrid record`` (:func:`perfgrid.aa.record`,
:func:`record_rows`), which takes the between-run part its intervals hold back out
(:func:`within_interval`).
"""

from __future__ import annotations

import functools
import math
from importlib import resources

DATA = "recorded_runs.csv"
#: the recorded runs whose host names this are of the machine kind the project runs on
MACHINE_KIND = "AMD EPYC"
#: a claim recorded in this many runs or more has a between-run component of its own;
#: below it, a variance from so few runs is too unsteady to stand alone
OWN_RUNS = 5
#: what makes two recorded rows the same claim
CLAIM = ["experiment", "runtime", "hypothesis"]
#: the record's columns, in order
COLUMNS = ["run_label", "date", "session_note", "host", "config", "experiment", "runtime",
           "hypothesis", "value", "ci_low", "ci_high", "level", "verdict", "quoted"]


@functools.cache
def recorded():
    """The recorded runs' claim figures of this machine kind (one row per run and claim),
    each run named by its label and date (``run``: letters were reused)."""
    import pandas as pd

    path = resources.files("perfgrid.data").joinpath(DATA)
    frame = pd.read_csv(path) if path.is_file() else pd.DataFrame()
    if frame.empty:
        return frame
    frame = frame[frame["host"].fillna("").str.contains(MACHINE_KIND, regex=False)].copy()
    for column in ("value", "ci_low", "ci_high", "level"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame["run"] = frame["run_label"].astype(str) + " " + frame["date"].astype(str)
    return frame


def _usable(frame):
    return frame[(frame["value"] > 0) & (frame["ci_low"] > 0)
                 & (frame["ci_high"] > frame["ci_low"])]


def moments(frame) -> tuple[float, float, float]:
    """(Q - df, C, claims) summed over the claims of ``frame`` measured in two or more runs:
    DerSimonian-Laird's moment equation ``E[Q] = df + C tau^2`` per claim, each run's
    within-run variance read from its interval (``((ln hi - ln lo) / 2 z)^2``)."""
    from scipy.stats import norm

    excess, c_sum, claims = 0.0, 0.0, 0
    for _, runs in _usable(frame).groupby(CLAIM):
        runs = runs.drop_duplicates("run")
        if len(runs) < 2:
            continue
        z = norm.ppf(0.5 + runs["level"].fillna(0.95) / 2)
        var = ((runs["ci_high"].map(math.log) - runs["ci_low"].map(math.log)) / (2 * z)) ** 2
        w = 1 / var
        y = runs["value"].map(math.log)
        mean = float((w * y).sum() / w.sum())
        q = float((w * (y - mean) ** 2).sum())
        excess += q - (len(runs) - 1)
        c_sum += float(w.sum() - (w ** 2).sum() / w.sum())
        claims += 1
    return excess, c_sum, claims


def _tau(frame) -> float | None:
    excess, c_sum, claims = moments(frame)
    if not claims or not c_sum > 0:
        return None
    return math.sqrt(max(0.0, excess / c_sum))


def _own(frame, experiment: str, runtime: str | None, hypothesis: str | None):
    """The recorded rows of one claim, where it is recorded in :data:`OWN_RUNS` runs or
    more; None otherwise."""
    if runtime is None or hypothesis is None:
        return None
    rows = _usable(frame)
    rows = rows[(rows["experiment"] == experiment) & (rows["runtime"] == runtime)
                & (rows["hypothesis"] == hypothesis)]
    return rows if rows["run"].nunique() >= OWN_RUNS else None


@functools.cache
def estimate(experiment: str, runtime: str | None = None,
             hypothesis: str | None = None) -> tuple[float, str]:
    """(tau, where from) for a claim: ``claim`` (its own recorded runs), ``experiment``,
    ``pooled`` (every experiment's) or ``none`` (no recorded runs tell it: 0.0)."""
    frame = recorded()
    if frame.empty:
        return 0.0, "none"
    own = _own(frame, experiment, runtime, hypothesis)
    if own is not None and (value := _tau(own)) is not None:
        return value, "claim"
    if (value := _tau(frame[frame["experiment"] == experiment])) is not None:
        return value, "experiment"
    if (value := _tau(frame)) is not None:
        return value, "pooled"
    return 0.0, "none"


def tau(experiment: str, runtime: str | None = None, hypothesis: str | None = None) -> float:
    """The between-run standard deviation of a claim (of an experiment, without
    ``runtime`` and ``hypothesis``), on the log scale (:func:`estimate`)."""
    return estimate(experiment, runtime, hypothesis)[0]


def describe(claims) -> str:
    """One paragraph for the report: the between-run components this run's claims hold,
    where each came from, and the recorded runs they were estimated from."""
    frame = recorded()
    if frame.empty or "experiment" not in claims or claims.empty:
        return ("No recorded runs ship with this perfgrid, so the intervals hold the noise "
                "inside this run only: a second run may differ by more.")
    parts = []
    for name in dict.fromkeys(claims["experiment"]):
        mine = claims[claims["experiment"] == name]
        found = [estimate(name, r, h) for r, h in zip(mine.get("runtime", [None] * len(mine)),
                                                     mine.get("hypothesis", [None] * len(mine)),
                                                     strict=True)] or [estimate(name)]
        low, high = min(t for t, _ in found), max(t for t, _ in found)
        own = sum(where == "claim" for _, where in found)
        span = f"{low:.1%}" if math.isclose(low, high) else f"{low:.1%} to {high:.1%}"
        parts.append(f"{name} {span} ({own} of {len(found)} claims their own)")
    runs = frame.drop_duplicates("run")
    dates = sorted(str(d) for d in runs["date"].dropna().unique())
    span = f"{dates[0]} to {dates[-1]}" if len(dates) > 1 else (dates[0] if dates else "")
    return (f"Each interval also holds a between-run standard deviation (log scale): a "
            f"claim's own where {OWN_RUNS} or more recorded runs measured it, else its "
            f"experiment's; {'; '.join(parts)}. Estimated from {len(runs)} recorded full "
            f"runs of this project's machine kind ({span}; perfgrid/data/{DATA}), each "
            f"claim's column tau gives its own. So a verdict speaks of the machine, not of "
            f"one run's hour.")


def within_interval(row) -> tuple[float, float] | None:
    """A claims table row's interval (at its own ``level``) less the between-run part it
    holds (its ``tau`` column, :class:`perfgrid.stats.Widened`): each side on the log
    scale shrinks to ``sqrt(side^2 - (z tau)^2)``. None where the row has no estimate or
    no interval around it."""
    from scipy.stats import norm

    value, low, high = (float(row.get(k, math.nan)) for k in ("value", "ci_low", "ci_high"))
    level = float(row.get("level", math.nan))
    level = 0.95 if math.isnan(level) else level
    if not (math.isfinite(value) and value > 0 and math.isfinite(low) and math.isfinite(high)
            and 0 < low <= value <= high and low < high and 0 < level < 1):
        return None
    held = float(row.get("tau", math.nan))
    extra = (float(norm.ppf(0.5 + level / 2)) * held) ** 2 if held > 0 else 0.0
    below = math.sqrt(max(0.0, math.log(value / low) ** 2 - extra))
    above = math.sqrt(max(0.0, math.log(high / value) ** 2 - extra))
    return value * math.exp(-below), value * math.exp(above)


def record_rows(claims, label: str, date: str, host: str, note: str, config: str = "full"):
    """A run's claims table as rows of the record (:data:`COLUMNS`): each claim's estimate
    with its within-run interval (:func:`within_interval`); a claim without one keeps an
    empty interval, so it counts for nothing."""
    import pandas as pd

    rows = []
    for _, row in claims.iterrows():
        bounds = within_interval(row)
        rows.append({"run_label": label, "date": date, "session_note": note, "host": host,
                     "config": config, "experiment": row["experiment"],
                     "runtime": row["runtime"], "hypothesis": row["hypothesis"],
                     "value": row["value"], "ci_low": bounds[0] if bounds else math.nan,
                     "ci_high": bounds[1] if bounds else math.nan,
                     "level": row.get("level", 0.95), "verdict": row["verdict"],
                     "quoted": row.get("measured", "")})
    return pd.DataFrame(rows, columns=COLUMNS)



def pair_tau(row_a, row_b) -> float:
    """PROVISIONAL: the between-run sd ``perfgrid aa`` adds once for each run of a pair,
    on the claim's scale: the smaller of the two rows' ``tau`` columns (each on its row's
    own scale, perfgrid.claimrow.tau_on_scale; 0 where missing). The lead replaces it
    with a tau estimated from the runs recorded before the pair, excluding the pair: the
    rows' own tau may already hold the pair (once ``perfgrid record`` added it)."""
    from perfgrid.claimrow import tau_on_scale

    return min(tau_on_scale(row_a), tau_on_scale(row_b))
