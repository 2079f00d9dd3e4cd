"""Synthetic table rows with raw values, for claim and interval tests.

A row's ``process_values`` hold per-loop times whose mean gives ``rate``
(``work_per_loop`` 1), with a chosen spread inside and between processes, so
claims see the same columns as in a real table and get real intervals.
:func:`result_folder` writes a whole result set: raw pyperf files and their table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyperf

from perfgrid.analyse import aggregate
from perfgrid.experiments import get
from perfgrid.kit.paths import Layout

#: a claim's compared value as a multiple of its threshold: below it, on it, above it
LEVELS = {"below": 0.8, "at": 1.0, "above": 1.25}


def expected_verdict(wants: str, level: str) -> tuple[str, str]:
    """(verdict, words of its reason) of a claim that wants its value ``wants`` ("above",
    "below", or "about": within its margin) its threshold, measured at ``level`` (LEVELS)
    with a narrow interval: on the threshold the interval straddles it, within 5 % of it."""
    if wants == "about":  # an equivalence: within the margin reads reproduced
        return ("reproduced", "lies within") if level == "at" else (
            "not reproduced", "wholly outside")
    if level == "at":
        return "at the threshold", "lies within"
    if wants == level:
        return "reproduced", "wholly"
    return "not reproduced", "wholly on the other side"


def named_claims(analysis: Any, rows: list[dict], names: list[str]) -> dict[str, Any]:
    """An analysis module's claims on ``rows``, by name: exactly one claim per name. The
    module's experiment is the package it lies in."""
    claims = analysis.claims(pd.DataFrame(rows), get(analysis.__name__.split(".")[-2]))
    assert len(claims) == len(names)
    return dict(zip(names, claims, strict=True))


def row(rate: float, *, cv: float = 0.01, processes: int = 4, values: int = 5,
        seed: int = 0, **columns: Any) -> dict[str, Any]:
    """One table row measuring ``rate`` exactly on average, with noise ``cv``."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(processes):
        times = np.exp(rng.normal(0, cv, values)) * np.exp(rng.normal(0, cv))
        groups.append(times)
    scale = np.concatenate(groups).mean() * rate  # make the mean exactly 1/rate
    groups = [list(g / scale) for g in groups]
    return {"rate": rate, "work_per_loop": 1.0, "process_values": json.dumps(groups),
            "n_processes": processes, "n_values": processes * values, **columns}


def single(rate: float, **columns: Any) -> dict[str, Any]:
    """A row measured once: no interval."""
    return row(rate, processes=1, values=1, **columns)


def per_process(processes: int = 4, cv: float = 0.01, seed: int = 0,
                **means: float) -> list[dict[str, float]]:
    """Per-process observations (a ``process_metadata`` list): each key of ``means`` seen
    by every process with noise ``cv``, its mean over the processes exactly the given value.
    ``json.dumps`` it into a row's ``process_metadata`` column."""
    rng = np.random.default_rng(seed + 7919)
    out: list[dict[str, float]] = [{} for _ in range(processes)]
    for key, mean in means.items():
        noise = np.exp(rng.normal(0, cv, processes))
        for process, value in zip(out, noise / noise.mean() * mean, strict=True):
            process[key] = float(value)
    return out


#: the points of :func:`result_folder`: (file_read variant, processes, values per process)
TWO_POINTS = (("read", 4, 3), ("dd", 1, 1))


def result_folder(root: Path, host: str, speed: float,
                  points: tuple[tuple[str, int, int], ...] = TWO_POINTS,
                  workers: tuple[int, ...] = (1,)) -> Path:
    """results/<host> under ``root`` with raw pyperf files and the file_read table built
    from them, as the pipeline writes them: by default two points, ``read`` in 4
    processes of 3 values at ``speed`` times a base rate, ``dd`` measured once (not
    testable in a comparison); each at every worker count of ``workers`` (as ``workers: auto``
    gives on machines of different CPU counts), the rate growing as ``count ** 0.8``."""
    layout = Layout.for_host(host, "results")
    rng = np.random.default_rng(len(host))
    paths = []
    for (variant, processes, values), count in [(p, w) for p in points for w in workers]:
        pt = {"variant": variant, "cache": "warm", "binding": "none", "workers": count,
              "block_size": 65536}
        path = root / layout.raw_result("file_read", pt, get("file_read").axes)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"name": "x", "loops": 1, "perfgrid_experiment": "file_read",
                "perfgrid_point": json.dumps(pt, sort_keys=True),
                "perfgrid_runtime": get("file_read").runtime(pt),
                "perfgrid_work_per_loop": 1 << 20,
                **{f"perfgrid_{k}": v for k, v in pt.items()}}
        runs = [pyperf.Run(list(0.01 / (speed * count**0.8) * np.exp(rng.normal(0, 0.01, values))),
                           metadata=meta, collect_metadata=False) for _ in range(processes)]
        pyperf.Benchmark(runs).dump(str(path))
        paths.append(path)
    return file_read_table(root, host, paths)


def file_read_table(root: Path, host: str, paths: list[Path]) -> Path:
    """results/<host> under ``root`` with the file_read table built from ``paths`` (raw
    pyperf files), as the table rule writes it."""
    folder = root / "results" / host
    (folder / "tables").mkdir(parents=True)
    aggregate.write_table(aggregate.build_table("file_read", paths),
                          Layout(folder).table("file_read"))
    return folder
