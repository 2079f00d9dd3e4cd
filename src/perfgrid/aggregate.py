"""Raw pyperf JSON files -> one tidy table per experiment.

One row per grid point, with the experiment's axes as columns, pyperf's
statistics of the per-loop time, the rate (work per second) and the ratio
to the native baseline measured in the same run. Every ``perfgrid_*``
metadata key of the result becomes a column without its prefix.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pyperf

from perfgrid import experiments

COMMON_COLUMNS = [
    "experiment", "runtime", "variant", "block_size", "workers", "binding", "cache",
    "n_values", "mean_s", "median_s", "stdev_s", "cv", "rate", "rate_unit", "ratio_to_native",
]


def _common_metadata(bench: pyperf.Benchmark) -> dict[str, Any]:
    """Metadata shared by all runs, plus per-run perfgrid keys (worst value kept)."""
    meta = dict(bench.get_metadata())
    for run in bench.get_runs():
        for key, value in run.get_metadata().items():
            if key.startswith("perfgrid_") and key not in meta:
                meta[key] = value
    return meta


def row_from_result(path: str | Path) -> dict[str, Any]:
    """One table row from one pyperf result file."""
    bench = pyperf.Benchmark.load(str(path))
    meta = _common_metadata(bench)
    point = json.loads(meta["perfgrid_point"])
    experiment = experiments.get(meta["perfgrid_experiment"])
    values = bench.get_values()
    mean = statistics.fmean(values)
    stdev = statistics.stdev(values) if len(values) > 1 else 0.0
    work = float(meta["perfgrid_work_per_loop"])
    row: dict[str, Any] = {
        key[len("perfgrid_"):]: value for key, value in meta.items() if key.startswith("perfgrid_")
    }
    row.update(point)
    row.update({
        "experiment": experiment.name,
        "runtime": meta["perfgrid_runtime"],
        "n_values": len(values),
        "mean_s": mean,
        "median_s": statistics.median(values),
        "stdev_s": stdev,
        "cv": stdev / mean if mean else float("nan"),
        "rate": work / mean if mean else float("nan"),
        "rate_unit": experiment.rate_unit,
        "hostname": meta.get("hostname", ""),
        "result_file": str(path),
    })
    row.pop("point", None)
    return row


def build_table(experiment_name: str, paths: list[str | Path]) -> pd.DataFrame:
    """The experiment's table from its result files, ratios filled in."""
    experiment = experiments.get(experiment_name)
    table = pd.DataFrame([row_from_result(p) for p in paths])
    for column in COMMON_COLUMNS:
        if column not in table:
            table[column] = pd.NA
    table["ratio_to_native"] = experiment.ratio_to_native(table) if len(table) else []
    extra = [c for c in table.columns if c not in COMMON_COLUMNS]
    return table[COMMON_COLUMNS + sorted(extra)].sort_values(
        [a for a in experiment.axes if a in table]).reset_index(drop=True)
