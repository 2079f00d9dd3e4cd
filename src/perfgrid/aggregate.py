"""Raw pyperf JSON files -> one tidy table per experiment.

One row per grid point, with the experiment's axes as columns, pyperf's
statistics of the per-loop time, the rate (work per second) and the ratio
to the native baseline measured in the same run. Every ``perfgrid_*``
metadata key of the result becomes a column without its prefix; every table has
the kernel counters' columns (:data:`perfgrid.counters.COLUMNS`), NaN where a
point was not counted and ``counters`` saying why. ``noisy_rounds`` lists the rounds
(round labels, JSON) measured while other processes were busy even after measuring
them again (perfgrid.bench.measure_quietly): the claims leave them out
(:func:`perfgrid.analysis.quiet`).

A result is taken only at its own path: the point, experiment and runtime it
records must be the ones its path stands for (``paths.Layout.raw_result``),
so a file copied over another point's result stops the table, naming both.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyperf

from perfgrid import counters, experiments, looks, stats
from perfgrid.paths import Layout

#: the columns every table has first: its point's shared axes (the axes experiments declare
#: in ``common_columns`` join them: :func:`common_columns`), then the statistics
POINT_COLUMNS = ["experiment", "runtime", "variant", "workers", "binding"]
STAT_COLUMNS = [
    "n_values", "n_processes", "n_rounds", "mean_s", "median_s", "stdev_s", "cv", "rate",
    "rate_ci_low", "rate_ci_high", "ci_rel", "ci_method", "ci_reason", "converged", "stop",
    "measure_seconds", "rate_unit", "ratio_to_native", "process_values", "process_rounds",
    "process_metadata", "noisy_rounds",
]
#: how the rounds of one point combine, for the columns that differ between rounds
#: (the rest are the same in every round, or the first round's)
ROUND_MERGE = {"started": min, "finished": max, "measure_seconds": sum, "batches": sum,
               "converged": all, "noisy": max, "stolen": max, "busy_share": max,
               "steal_share": max, "load_before": max, "load_after": max,
               "busy_before": max, "busy_during": max, "own_share": min,
               "steal_during": max, "measurements": sum}


def common_columns() -> list[str]:
    """Every table's first columns, :data:`POINT_COLUMNS` with each axis an experiment
    declares in ``Experiment.common_columns`` after the column it names (empty in the
    tables of experiments without that axis), then :data:`STAT_COLUMNS`."""
    columns = list(POINT_COLUMNS)
    for name in experiments.available():
        for axis, after in experiments.get(name).common_columns.items():
            if axis not in columns:
                columns.insert(columns.index(after) + 1, axis)
    return [*columns, *STAT_COLUMNS]


def process_values(bench: pyperf.Benchmark) -> list[list[float]]:
    """The per-loop times grouped by the pyperf worker process that measured them."""
    return [list(run.values) for run in bench.get_runs() if run.values]


def process_metadata(bench: pyperf.Benchmark) -> list[dict[str, float]]:
    """Each worker process's own numeric ``perfgrid_*`` observations (CPU shares, GC time).

    Beside the values, so a claim on such a share gets an interval over processes.
    """
    out = []
    for run in bench.get_runs():
        if not run.values:
            continue
        meta = run.get_metadata()
        out.append({k[len("perfgrid_"):]: float(v) for k, v in meta.items()
                    if k.startswith("perfgrid_") and isinstance(v, int | float)
                    and not isinstance(v, bool)})
    return out


def rate_estimate(row: Any) -> stats.Estimate:
    """The rate of a table row with its interval, from its ``process_values`` column.

    A row without raw values (a hand-made table) has no interval; a row the claims left
    out (``left_out``: every round measured while the machine was busy) has no rate.
    """
    left_out = row.get("left_out")
    if isinstance(left_out, str) and left_out:
        return stats.Estimate.unknown(float("nan"), left_out)
    rate = float(row["rate"]) if row.get("rate") is not None else float("nan")
    raw = row.get("process_values")
    if not isinstance(raw, str | list) or not raw:
        return stats.Estimate.unknown(rate, "no raw values")
    groups = json.loads(raw) if isinstance(raw, str) else raw
    rounds = row.get("process_rounds")
    rounds = json.loads(rounds) if isinstance(rounds, str) and rounds else None
    work = float(row["work_per_loop"])
    return stats.from_points(stats.rate(groups, work, seed=_row_seed(row), rounds=rounds),
                             point_of(row))


def point_of(row: Any) -> frozenset[str]:
    """The grid point a table row measured (``Experiment.point_key``), as a quantity's
    provenance; none for a row that names no experiment of the registry (hand-made)."""
    try:
        experiment = experiments.get(str(row.get("experiment")))
        return frozenset({experiment.point_key(row)})
    except (KeyError, ValueError, AttributeError):
        return frozenset()


#: how far a table's ``rate`` may be from the one its raw values give (CSV round trips)
RATE_TOLERANCE = 1e-9


def raw_rate(groups: list[list[float]], work_per_loop: float) -> float:
    """The rate that raw per-loop times give: work per loop over their mean (NaN: none)."""
    values = [v for g in groups for v in g]
    mean = statistics.fmean(values) if values else 0.0
    return work_per_loop / mean if mean else float("nan")


def check_rate(recorded: Any, groups: list[list[float]], work_per_loop: float,
               where: str) -> float:
    """The rate of ``groups``; ValueError naming ``where`` if a table recorded another.

    A table is derived data: a rate that its own raw values do not give (an edited
    table) would be shown beside an interval and a p-value computed from those values.
    """
    rate = raw_rate(groups, work_per_loop)
    try:
        shown = float(recorded)
    except (TypeError, ValueError):
        shown = float("nan")
    same = (math.isnan(rate) and math.isnan(shown)) or math.isclose(
        shown, rate, rel_tol=RATE_TOLERANCE)
    if not same:
        raise ValueError(f"{where}: the table's rate {recorded!r} is not the {rate!r} its raw "
                         f"values give (an edited table? rebuild it from raw/)")
    return rate


def point_name(row: Any, columns: list[str]) -> str:
    """``variant=read, cache=warm, runtime=python``: a table row's point, for messages."""
    return ", ".join(f"{c}={row[c]}" for c in columns)


def read_table(path: str | Path, axes: list[str] | tuple[str, ...],
               required: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """A table from its CSV file, checked by :func:`check_table`; ValueError naming it."""
    try:
        table = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a readable table ({err})") from None
    return check_table(table, path, axes, required)


def check_table(table: pd.DataFrame, path: str | Path, axes: list[str] | tuple[str, ...],
                required: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """``table`` (read from ``path``) if it is fit to compare or report; ValueError if not.

    Refused: a missing ``required`` column, a point (axes and runtime) listed twice (it
    would count twice), and a row whose ``rate`` is not the one its ``process_values``
    and ``work_per_loop`` give. A row without raw values has nothing to check against.
    """
    missing = [c for c in required if c not in table]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (a perfgrid table "
                         f"has them; rebuild it with the table job)")
    key = [c for c in [*axes, "runtime"] if c in table]
    twice = table[table.duplicated(key, keep="first")] if key and len(table) else table[:0]
    if len(twice):
        raise ValueError(f"{path}: the point {point_name(twice.iloc[0], key)} is listed "
                         f"more than once")
    if {"rate", "process_values", "work_per_loop"} <= set(table.columns):
        for _, row in table.iterrows():
            raw = row["process_values"]
            if not isinstance(raw, str) or not raw or pd.isna(row["work_per_loop"]):
                continue
            where = f"{path}: point {point_name(row, key)}"
            try:  # a list of lists of per-loop times, and a number of work units per loop
                groups, work = json.loads(raw), float(row["work_per_loop"])
                raw_rate(groups, work)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{where}: process_values or work_per_loop malformed "
                                 f"({err})") from None
            check_rate(row["rate"], groups, work, where)
    return table


def _row_seed(row: Any) -> int:
    """The bootstrap seed of a row: fixed by what the row measured, so reruns agree."""
    return stats.seed_for(row.get("experiment"), row.get("runtime"), row.get("result_file"),
                          row.get("process_values"))


def _common_metadata(bench: pyperf.Benchmark) -> dict[str, Any]:
    """Metadata shared by all runs, plus per-run perfgrid keys (worst value kept)."""
    meta = dict(bench.get_metadata())
    for run in bench.get_runs():
        for key, value in run.get_metadata().items():
            if key.startswith("perfgrid_") and key not in meta:
                meta[key] = value
    return meta


def check_result_path(path: str | Path, meta: dict[str, Any]) -> None:
    """Raise ValueError unless the result's recorded point is the one its path names."""
    name = meta.get("perfgrid_experiment")
    if name not in experiments.available():
        raise ValueError(f"{path}: records experiment {name!r}, not one of "
                         f"{', '.join(experiments.available())}")
    experiment = experiments.get(name)
    try:
        recorded = json.loads(meta["perfgrid_point"])
        at_path, from_path = Layout.result_point(path, experiment.axes)
    except (KeyError, ValueError) as err:
        raise ValueError(f"{path}: {err}") from None
    want = {axis: str(value) for axis, value in recorded.items()} if isinstance(
        recorded, dict) else {"point": repr(recorded)}
    if at_path != name or want != from_path:
        shown = ", ".join(f"{a}={v}" for a, v in want.items())
        home = (f"; it belongs at {Layout(Path()).raw_result(name, want, experiment.axes)}"
                if set(want) == set(experiment.axes) else "")
        raise ValueError(
            f"{path}: the result records {name} point {shown}, but its path stands for "
            f"{at_path} point {', '.join(f'{a}={v}' for a, v in from_path.items())}{home} "
            f"(a copied or moved file?)")
    round_at_path = Layout.result_round(path)
    if round_at_path is not None and meta.get("perfgrid_round") != round_at_path:
        raise ValueError(f"{path}: records round {meta.get('perfgrid_round')!r}, but its path "
                         f"stands for round {round_at_path} (a copied or moved file?)")
    runtime = experiment.runtime(experiment.parse_point(from_path))
    if meta.get("perfgrid_runtime") != runtime:
        raise ValueError(f"{path}: records runtime {meta.get('perfgrid_runtime')!r}, but "
                         f"variant {from_path.get('variant')} runs on {runtime!r}")


def row_from_result(path: str | Path, check_path: bool = False) -> dict[str, Any]:
    """One table row from one pyperf result file.

    With ``check_path`` (as the table does) the result must sit at its own
    point's path; without, any file is read at face value (one-off reading).
    """
    return row_from_results([path], check_path)


def _read(path: str | Path, check_path: bool) -> tuple[dict[str, Any], pyperf.Benchmark]:
    bench = pyperf.Benchmark.load(str(path))
    meta = _common_metadata(bench)
    if check_path:
        check_result_path(path, meta)
    return meta, bench


def row_from_results(paths: list[str | Path], check_path: bool = False,
                     recorded_as: Callable[[str | Path], str] | None = None) -> dict[str, Any]:
    """One table row from the result files of one point: one file, or one per round.

    Rounds are merged: their processes side by side (``process_rounds`` says
    which round measured each), the columns that differ combined by
    :data:`ROUND_MERGE`. ``recorded_as`` gives the path a file had in the run, for
    ``result_file`` (and so the bootstrap seeds): a table rebuilt from an extracted
    archive comes out as the run's own (perfgrid.rerender).
    """
    read = [_read(path, check_path) for path in paths]
    first = recorded_as(paths[0]) if recorded_as is not None else paths[0]
    metas = [meta for meta, _ in read]
    meta = dict(metas[0])
    for key, how in ROUND_MERGE.items():
        values = [m[f"perfgrid_{key}"] for m in metas if f"perfgrid_{key}" in m]
        if values:
            meta[f"perfgrid_{key}"] = how(values)
    # the rounds' own job times: started..finished of merged rounds spans the whole run
    spans = [m["perfgrid_finished"] - m["perfgrid_started"] for m in metas
             if "perfgrid_started" in m and "perfgrid_finished" in m]
    if spans:
        meta["perfgrid_job_seconds"] = sum(spans)
    point = json.loads(meta["perfgrid_point"])
    experiment = experiments.get(meta["perfgrid_experiment"])
    groups, rounds, per_process, noisy = [], [], [], []
    for (m, bench), path in zip(read, paths, strict=True):
        groups += process_values(bench)
        per_process += process_metadata(bench)
        label = m.get("perfgrid_round", Layout.result_round(path) or 1)
        rounds += [label] * len(process_values(bench))
        if m.get("perfgrid_noisy") == 1:  # still disturbed after measuring it again
            noisy.append(label)
    values = [v for g in groups for v in g]
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
        "n_processes": len(groups),
        "n_rounds": len(paths),
        "mean_s": mean,
        "median_s": statistics.median(values),
        "stdev_s": stdev,
        "cv": stdev / mean if mean else float("nan"),
        "rate": raw_rate(groups, work),
        "rate_unit": experiment.rate_unit,
        "hostname": meta.get("hostname", ""),
        "result_file": str(first) if len(paths) == 1 else str(Path(first).parent),
        "process_values": json.dumps(groups),
        "process_rounds": json.dumps(rounds) if len(paths) > 1 else "",
        "process_metadata": json.dumps(per_process),
        "noisy_rounds": json.dumps(noisy),
    })
    for key in ("point", "round"):
        row.pop(key, None)
    if len(paths) > 1:
        row["stop"] = "; ".join(f"round {m.get('perfgrid_round', i + 1)}: {m['perfgrid_stop']}"
                                for i, m in enumerate(metas) if "perfgrid_stop" in m)
    estimate = rate_estimate(row)
    bounds = estimate.interval()
    row.update({
        "rate_ci_low": bounds[0] if bounds else float("nan"),
        "rate_ci_high": bounds[1] if bounds else float("nan"),
        "ci_rel": estimate.ci_rel,
        "ci_method": estimate.method,
        "ci_reason": estimate.reason,
    })
    return row


def build_table(experiment_name: str, paths: list[str | Path],
                recorded_as: Callable[[str | Path], str] | None = None) -> pd.DataFrame:
    """The experiment's table from its result files, ratios filled in.

    Every result must be of this experiment and at its own point's path, and
    no point may come twice: a wrong file stops the table, naming the files.
    Rounds a look did not measure (perfgrid.looks) are left out.
    ``recorded_as``: see :func:`row_from_results`.
    """
    experiment = experiments.get(experiment_name)
    by_point: dict[str, list[str | Path]] = {}
    for path in looks.measured(paths):  # the rounds of one point: a folder, a file each
        folder = Path(path).parent if Layout.result_round(path) is not None else Path(path)
        by_point.setdefault(str(folder), []).append(path)
    rows, seen = [], {}
    for files in by_point.values():
        rounds = [Layout.result_round(f) for f in files]
        if len(set(rounds)) != len(rounds):
            raise ValueError(f"{files[0]}: the same round listed twice")
        row = row_from_results(sorted(files, key=lambda f: Layout.result_round(f) or 0),
                               check_path=True, recorded_as=recorded_as)
        path = files[0]
        if row["experiment"] != experiment_name:
            raise ValueError(f"{path}: a {row['experiment']} result among the "
                             f"{experiment_name} results")
        key = tuple(str(row[a]) for a in experiment.axes)
        if key in seen:
            raise ValueError(f"{path} and {seen[key]} both record the point "
                             f"{dict(zip(experiment.axes, key, strict=True))}")
        seen[key] = path
        rows.append(row)
    table = pd.DataFrame(rows)
    common = common_columns()
    for column in (*common, *counters.COLUMNS):
        if column not in table:
            table[column] = pd.NA
    table["counters"] = table["counters"].astype(object).where(table["counters"].notna(),
                                                               counters.NOT_COUNTED)
    table["ratio_to_native"] = experiment.ratio_to_native(table) if len(table) else []
    extra = [c for c in table.columns if c not in common]
    return table[common + sorted(extra)].sort_values(
        [a for a in experiment.axes if a in table]).reset_index(drop=True)
