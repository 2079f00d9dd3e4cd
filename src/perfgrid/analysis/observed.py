"""Intervals for per-process observations (CPU shares and the like) of a table row."""

from __future__ import annotations

import json
import math
from typing import Any

from perfgrid.stats import Estimate, mean_estimate, seed_for

NO_PER_PROCESS = "no per-process values"


def _value(row: Any, key: str) -> float:
    try:
        value = row.get(key)
        return float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def observed_estimate(row: Any, key: str) -> Estimate:
    """The row's ``key`` observation (e.g. ``sys_share``) with an interval over its processes.

    Each worker process's own figure comes from the ``process_metadata`` column (a JSON
    list of per-process dicts, keys without the ``perfgrid_`` prefix); the processes are
    the replicates. A row without that column (a hand-made table), or whose processes
    did not record ``key``, has no interval: its claims are inconclusive.
    """
    raw = row.get("process_metadata")
    if isinstance(raw, str) and raw:
        per_process = json.loads(raw)
    elif isinstance(raw, list):
        per_process = raw
    else:
        return Estimate.unknown(_value(row, key), NO_PER_PROCESS)
    values = [float(p[key]) for p in per_process
              if isinstance(p, dict) and p.get(key) is not None
              and math.isfinite(float(p[key]))]
    if not values:
        return Estimate.unknown(_value(row, key), f"{NO_PER_PROCESS} of {key}")
    return mean_estimate([[v] for v in values], seed=seed_for("observed", key, raw))
