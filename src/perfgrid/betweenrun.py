"""The variance between runs: what one run's interval cannot see.

An interval over the rounds of one run covers the noise inside that run. Two runs of one
commit on two VMs of one kind differ by more (the host, the day, the neighbours), so a
verdict about the machine adds a between-run component ``tau`` (a standard deviation on
the log scale) per experiment, estimated from the recorded full runs shipped in
``perfgrid/data/recorded_runs.csv``: each claim's runs give a DerSimonian-Laird moment
equation, and an experiment's claims share one ``tau^2`` (their equations summed, as for a
common between-study variance). An experiment whose recorded claims cannot tell it (fewer
than two runs of any claim) takes the estimate pooled over every experiment. Only the runs
of this project's machine kind (:data:`MACHINE_KIND` in their host) count: the record also
holds runs on an earlier host, whose spread is not this one's.
"""

from __future__ import annotations

import functools
import math
from importlib import resources

DATA = "recorded_runs.csv"
#: the recorded runs whose host names this are of the machine kind the project runs on
MACHINE_KIND = "AMD EPYC"


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


def moments(frame) -> tuple[float, float, float]:
    """(Q - df, C, claims) summed over the claims of ``frame`` measured in two or more runs:
    DerSimonian-Laird's moment equation ``E[Q] = df + C tau^2`` per claim, each run's
    within-run variance read from its interval (``((ln hi - ln lo) / 2 z)^2``)."""
    from scipy.stats import norm

    usable = frame[(frame["value"] > 0) & (frame["ci_low"] > 0)
                   & (frame["ci_high"] > frame["ci_low"])]
    excess, c_sum, claims = 0.0, 0.0, 0
    for _, runs in usable.groupby(["experiment", "runtime", "hypothesis"]):
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


@functools.cache
def tau(experiment: str) -> float:
    """The between-run standard deviation of experiment ``experiment``'s claims, on the
    log scale: from its own recorded claims, else pooled over every experiment's; 0.0
    where no recorded runs tell it."""
    frame = recorded()
    if frame.empty:
        return 0.0
    own = _tau(frame[frame["experiment"] == experiment])
    if own is not None:
        return own
    pooled = _tau(frame)
    return pooled if pooled is not None else 0.0


def source(experiment: str) -> str:
    """Where :func:`tau` of ``experiment`` comes from: ``own``, ``pooled`` or ``none``."""
    frame = recorded()
    if frame.empty:
        return "none"
    return "own" if _tau(frame[frame["experiment"] == experiment]) is not None else (
        "pooled" if _tau(frame) is not None else "none")


def describe(claims) -> str:
    """One sentence for the report: the between-run component each experiment's claims
    hold, and the recorded runs it was estimated from."""
    frame = recorded()
    if frame.empty or "experiment" not in claims or claims.empty:
        return ("No recorded runs ship with this perfgrid, so the intervals hold the noise "
                "inside this run only: a second run may differ by more.")
    parts = []
    for name in dict.fromkeys(claims["experiment"]):
        where = source(name)
        parts.append(f"{name} {tau(name):.1%}" + (" (pooled)" if where == "pooled" else ""))
    runs = frame.drop_duplicates("run")
    dates = sorted(str(d) for d in runs["date"].dropna().unique())
    span = f"{dates[0]} to {dates[-1]}" if len(dates) > 1 else (dates[0] if dates else "")
    return (f"Each interval also holds a between-run standard deviation (log scale) per "
            f"experiment, {', '.join(parts)}, estimated from {len(runs)} recorded full runs "
            f"of this project's machine kind ({span}; perfgrid/data/{DATA}); \"pooled\": "
            f"that experiment's own recorded claims could not tell it. So a verdict speaks "
            f"of the machine, not of one run's hour.")
