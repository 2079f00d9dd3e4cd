"""How far each point's figure can be trusted: flags, precision, missed targets, and the
points whose counting pass did not run."""

from __future__ import annotations

from typing import Any

import pandas as pd

from perfgrid.analyse.aggregate import listed
from perfgrid.measure import counters


def _rounds(cell: Any) -> int:
    """How many rounds a ``noisy_rounds`` cell (a list, or an older table's JSON) names."""
    try:
        return len(listed(cell) or [])
    except (TypeError, ValueError):
        return 0


def flags(table: pd.DataFrame, cv_threshold: float) -> pd.DataFrame:
    """Rows whose figure should not be taken as clean, with the reason."""
    reasons = pd.Series("", index=table.index)
    if "cv" in table:
        reasons = reasons.where(~(table["cv"] > cv_threshold),
                                reasons + f"CV above {cv_threshold:.0%}; ")
    if "noisy" in table:
        left = table["noisy_rounds"].map(_rounds) if "noisy_rounds" in table else None
        text = pd.Series("other processes busy while measured (left out of claims); ",
                         index=table.index)
        if left is not None and "n_rounds" in table:
            some = (left > 0) & (left < table["n_rounds"].fillna(1))
            text = text.where(~some, "other processes busy while measured in "
                              + left.astype(str) + " of " + table["n_rounds"].astype(
                                  "Int64").astype(str) + " rounds (those left out of claims); ")
        reasons = reasons.where(~(table["noisy"] == 1), reasons + text)
    if "stolen" in table:
        reasons = reasons.where(~(table["stolen"] == 1),
                                reasons + "hypervisor steal time above the limit; ")
    if "cache_reached" in table:
        reasons = reasons.where(~(table["cache_reached"] == 0),
                                reasons + "cache state not reached; ")
    flagged = table[reasons != ""].copy()
    flagged["flag"] = reasons[reasons != ""].str.rstrip("; ")
    return flagged


def precision(table: pd.DataFrame) -> dict[str, Any]:
    """How precise an experiment's points came out, and what that cost.

    Points with an interval, those at most 3 % wide (half-width over rate),
    and where measured adaptively, how many met their target and how many the
    cap stopped first.
    """
    with_ci = table["ci_rel"].notna() if "ci_rel" in table else pd.Series(False, table.index)
    adaptive = table["converged"].notna() if "converged" in table else with_ci & False
    converged = table["converged"].astype("boolean") if "converged" in table else None
    seconds = table.get("measure_seconds")
    return {
        "points": len(table),
        "with_interval": int(with_ci.sum()),
        "within_3pct": int((table.loc[with_ci, "ci_rel"] <= 0.03).sum()) if with_ci.any() else 0,
        "median_ci_rel": float(table.loc[with_ci, "ci_rel"].median()) if with_ci.any()
        else float("nan"),
        "adaptive": int(adaptive.sum()),
        "converged": int(converged[adaptive].sum()) if converged is not None else 0,
        "unconverged": int((~converged[adaptive]).sum()) if converged is not None else 0,
        "seconds": float(seconds.sum()) if seconds is not None else float("nan"),
    }


def unconverged(table: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """The adaptively measured points whose interval missed its target, and why they stopped."""
    if "converged" not in table:
        return table.iloc[0:0]
    rows = table[table["converged"].notna() & ~table["converged"].astype("boolean")]
    return rows[[c for c in ["runtime", *axes, "n_processes", "ci_rel", "measure_seconds",
                             "stop"] if c in rows]]


def uncounted_points(table: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """Points chosen for counting whose pass could not run (perf missing, forbidden, failed)."""
    if "counters" not in table:
        return pd.DataFrame()
    status = table["counters"].fillna(counters.NOT_COUNTED).astype(str)
    rows = table[(status != counters.OK) & ~status.str.startswith("not counted")]
    return rows[["runtime", *[a for a in axes if a in rows], "counters"]]


def precision_frame(sections: list[dict[str, Any]]) -> pd.DataFrame:
    """One line per experiment of :func:`precision`."""
    rows = [{"experiment": sec["name"], **sec["precision"]} for sec in sections]
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["median_ci_rel"] = frame["median_ci_rel"].map(
            lambda v: f"{v:.1%}" if pd.notna(v) else "")
        frame["seconds"] = frame["seconds"].round(0)
    return frame
