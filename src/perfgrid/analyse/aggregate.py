"""Raw pyperf JSON files -> one tidy table per experiment.

One row per grid point, with the experiment's axes as columns, pyperf's
statistics of the per-loop time, the rate (work per second) and the ratio
to the native baseline measured in the same run. Every ``perfgrid_*``
metadata key of the result becomes a column without its prefix; every table has
the kernel counters' columns (:data:`perfgrid.measure.counters.COLUMNS`), NaN where a
point was not counted and ``counters`` saying why. ``noisy_rounds`` lists the rounds
(round labels) measured while other processes were busy even after measuring
them again (perfgrid.measure.bench.measure_quietly): the claims leave them out
(:func:`perfgrid.analyse.analysis.quiet`).

On disk a table holds one value a cell: its list-valued columns (:data:`LIST_COLUMNS`,
and any column of records such as http's ``openloop_steps``) live in side tables beside
it (``paths.SIDE_TABLES``), written by :func:`write_table` and joined back by
:func:`load_table`, so that in memory each such cell is the list it stands for.

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

from perfgrid import experiments
from perfgrid.analyse import stats
from perfgrid.kit import formats
from perfgrid.kit.atomic import atomic_path
from perfgrid.kit.paths import Layout, side_tables_of
from perfgrid.measure import counters

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


#: the list-valued columns of a table, each kept in a side table (``paths.SIDE_TABLES``):
#: ``process_values`` (with ``process_rounds``) in ``values``, ``process_metadata`` in
#: ``process_facts``, ``noisy_rounds`` in ``noisy_rounds``; any other column of records
#: (lists of dicts: http's ``openloop_steps``) goes to ``records``
LIST_COLUMNS = ("process_values", "process_rounds", "process_metadata", "noisy_rounds")
#: the side tables' own columns (``records`` adds one column per field of its records)
SIDE_COLUMNS = {
    "values": ["row", "process", "round", "value_index", "value"],
    "process_facts": ["row", "process", "key", "value"],
    "noisy_rounds": ["row", "round"],
    "records": ["row", "column", "item"],
}


def listed(cell: Any) -> Any:
    """A list-valued cell as its list (or dict): as it is in memory, or parsed from the
    JSON text a hand-made table or an older table (one before side tables) holds; None
    for an empty or missing cell."""
    if isinstance(cell, list | dict):
        return cell
    if isinstance(cell, str) and cell.strip():
        return json.loads(cell)
    return None


def _records(cell: Any) -> list[dict[str, Any]] | None:
    """``cell`` as a list of records (dicts) if it is one, or JSON text of one; else None."""
    if isinstance(cell, str) and cell.startswith("[{"):
        try:
            cell = json.loads(cell)
        except ValueError:
            return None
    if isinstance(cell, list) and cell and all(isinstance(item, dict) for item in cell):
        return cell
    return None


def _label(value: Any) -> Any:
    """A round label as written (an int where it is a whole number)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value.item() if hasattr(value, "item") else value


def split_table(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """``table`` as one value a cell: its scalar columns, and its list-valued columns as
    side tables (by side, ``paths.SIDE_TABLES``), each keyed by ``row``, the table row's
    position (0 for the first).

    - ``values``: one row per per-loop time: ``process`` (the worker process, 0 first),
      ``round`` (the round that measured it; empty for a point measured in one job),
      ``value_index`` (its place in the process's values), ``value`` (seconds per loop);
    - ``process_facts``: one row per numeric observation of a process (``key``: its name
      without ``perfgrid_``, ``value``);
    - ``noisy_rounds``: one row per round measured while other processes were busy;
    - ``records``: one row per record of any other list-valued column (``column`` names
      it, ``item`` is the record's place), one column per field.
    """
    table = table.reset_index(drop=True)
    values, facts, noisy, records = [], [], [], []
    record_columns = [c for c in table.columns if c not in LIST_COLUMNS
                      and not pd.api.types.is_numeric_dtype(table[c])
                      and table[c].map(_records).notna().any()]
    for row, (_, cells) in enumerate(table.iterrows()):
        groups = listed(cells.get("process_values")) or []
        rounds = listed(cells.get("process_rounds"))
        for process, group in enumerate(groups):
            label = rounds[process] if rounds is not None else None
            values += [(row, process, label, i, v) for i, v in enumerate(group)]
        for process, observed in enumerate(listed(cells.get("process_metadata")) or []):
            facts += [(row, process, key, v) for key, v in observed.items()]
        noisy += [(row, label) for label in listed(cells.get("noisy_rounds")) or []]
        for column in record_columns:
            for item, record in enumerate(_records(cells[column]) or []):
                records.append({"row": row, "column": column, "item": item, **record})
    sides = {
        "values": pd.DataFrame(values, columns=SIDE_COLUMNS["values"]),
        "process_facts": pd.DataFrame(facts, columns=SIDE_COLUMNS["process_facts"]),
        "noisy_rounds": pd.DataFrame(noisy, columns=SIDE_COLUMNS["noisy_rounds"]),
        "records": pd.DataFrame(records).reindex(columns=list(dict.fromkeys(
            [*SIDE_COLUMNS["records"], *(k for r in records for k in r)]))),
    }
    for side in ("values", "noisy_rounds"):
        sides[side]["round"] = sides[side]["round"].astype("Int64")
    scalar = table.drop(columns=[c for c in [*LIST_COLUMNS, *record_columns] if c in table])
    return scalar, sides


def write_table(table: pd.DataFrame, path: str | Path) -> None:
    """Write ``table`` at ``path`` and its side tables beside it (:func:`split_table`),
    each file atomically (perfgrid.kit.atomic), the table itself last."""
    scalar, sides = split_table(table)
    for side, where in side_tables_of(path).items():
        with atomic_path(where) as tmp:
            sides[side].to_csv(tmp, index=False, na_rep="NaN" if side == "records" else "")
    with atomic_path(path) as tmp:
        scalar.to_csv(tmp, index=False)


def _read_csv(path: str | Path, **options: Any) -> pd.DataFrame:
    try:
        return pd.read_csv(path, **options)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a readable table ({err})") from None


def _read_side(path: Path, side: str, rows: int, **options: Any) -> pd.DataFrame:
    """A side table of a table of ``rows`` rows; ValueError naming it if it has not its
    columns (:data:`SIDE_COLUMNS`) or names a row the table has not."""
    frame = _read_csv(path, **options)
    own = SIDE_COLUMNS[side]
    if list(frame.columns[:len(own)]) != own or (side != "records" and len(frame.columns)
                                                  != len(own)):
        raise ValueError(f"{path}: not a {side} side table (its columns: "
                         f"{', '.join(own)}{', ...' if side == 'records' else ''})")
    if len(frame):
        row = pd.to_numeric(frame["row"], errors="coerce")
        if row.isna().any() or (row % 1 != 0).any() or row.min() < 0 or row.max() >= rows:
            raise ValueError(f"{path}: names a row its table ({rows} rows) has not (a side "
                             f"table of another table? rebuild it with the table job)")
    return frame


def _insert(table: pd.DataFrame, column: str, cells: list[Any]) -> None:
    """Put ``column`` back where :func:`build_table` has it: after the last of the columns
    that come before it there (:func:`common_columns`, then the others sorted)."""
    common = common_columns()
    order = [*common, *sorted({*table.columns, column} - set(common))]
    before = [table.columns.get_loc(c) for c in order[:order.index(column)] if c in table]
    table.insert(max(before) + 1 if before else 0, column,
                 pd.Series(cells, index=table.index, dtype=object))


def _joined_values(path: Path, n: int) -> tuple[list[Any], list[Any]]:
    """``process_values`` and ``process_rounds`` of ``n`` rows from a ``values`` side
    table: a row's values by process (in order), the round of each process (None for a
    row measured in one job), None for a row without values."""
    values = _read_side(path, "values", n, dtype={"round": "Int64"}).sort_values(
        ["row", "process", "value_index"], kind="stable")
    groups: list[Any] = [None] * n
    rounds: list[Any] = [None] * n
    labels: list[list[Any]] = [[] for _ in range(n)]
    for row, process, label, _, value in values.itertuples(index=False):
        row, process = int(row), int(process)
        if groups[row] is None:
            groups[row] = []
        if process == len(groups[row]):
            groups[row].append([])
            labels[row].append(label)
        groups[row][process].append(float(value))
    for row, found in enumerate(labels):
        if found and not any(pd.isna(label) for label in found):
            rounds[row] = [_label(label) for label in found]
    return groups, rounds


def load_table(path: str | Path) -> pd.DataFrame:
    """The table at ``path`` with its list-valued columns joined back from its side
    tables (:func:`split_table`): each such cell the list it stands for, None where a
    row has none. A table without side tables (one written before them: an older
    archive) has those columns as JSON text in its cells: they are parsed alike."""
    table = _read_csv(path)
    sides = {side: where for side, where in side_tables_of(path).items() if where.is_file()}
    n = len(table)
    groups: list[Any] = [None] * n
    if "values" in sides:
        groups, rounds = _joined_values(sides["values"], n)
        _insert(table, "process_values", groups)
        _insert(table, "process_rounds", rounds)
    if "process_facts" in sides:  # a row's processes: those of its values, facts or not
        processes: list[Any] = [[{} for _ in g] if g else None for g in groups]
        facts = _read_side(sides["process_facts"], "process_facts", n, keep_default_na=False,
                           na_values=[""])
        for row, process, key, value in facts.itertuples(index=False):
            found = processes[int(row)] = processes[int(row)] or []
            found += [{} for _ in range(int(process) + 1 - len(found))]
            found[int(process)][str(key)] = float(value)
        _insert(table, "process_metadata", processes)
    if "noisy_rounds" in sides:
        noisy: list[Any] = [[] for _ in range(n)]
        for row, label in _read_side(sides["noisy_rounds"], "noisy_rounds", n,
                                     dtype={"round": "Int64"}).itertuples(index=False):
            noisy[int(row)].append(_label(label))
        _insert(table, "noisy_rounds", noisy)
    if "records" in sides:
        records = _read_side(sides["records"], "records", n, keep_default_na=False,
                             na_values=["NaN"])
        several = records["column"].nunique() > 1
        for column, part in records.groupby("column", sort=False):
            fields = [c for c in part.columns if c not in SIDE_COLUMNS["records"]
                      and (not several or part[c].notna().any())]
            cells: list[Any] = [None] * n
            for row, items in part.sort_values(["row", "item"]).groupby("row", sort=False):
                cells[int(row)] = items[fields].to_dict("records")
            _insert(table, str(column), cells)
    held = {c for side, columns in _HELD.items() if side in sides for c in columns}
    for column in table.columns:  # an older table's JSON text, parsed
        if column in held or pd.api.types.is_numeric_dtype(table[column]):
            continue
        if column in LIST_COLUMNS:
            table[column] = table[column].map(_legacy_cell).astype(object)
        elif table[column].map(_records).notna().any():
            table[column] = table[column].map(
                lambda cell: _records(cell) or cell if isinstance(cell, str) else cell
            ).astype(object)
    return table


#: the list-valued columns each side table holds (``records``: those it names)
_HELD = {"values": ("process_values", "process_rounds"),
         "process_facts": ("process_metadata",), "noisy_rounds": ("noisy_rounds",)}


def _legacy_cell(cell: Any) -> Any:
    """A list-valued cell of an older table: its JSON text parsed; None where empty."""
    try:
        return listed(cell)
    except ValueError:
        return cell


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
    groups = listed(row.get("process_values"))
    if not groups:
        return stats.Estimate.unknown(rate, "no raw values")
    rounds = listed(row.get("process_rounds"))
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
    """A table from its CSV file and side tables (:func:`load_table`), checked by
    :func:`check_table`; ValueError naming it."""
    return check_table(load_table(path), path, axes, required)


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
            if not isinstance(raw, str | list) or not raw or pd.isna(row["work_per_loop"]):
                continue
            where = f"{path}: point {point_name(row, key)}"
            try:  # a list of lists of per-loop times, and a number of work units per loop
                groups, work = listed(raw), float(row["work_per_loop"])
                raw_rate(groups, work)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{where}: process_values or work_per_loop malformed "
                                 f"({err})") from None
            check_rate(row["rate"], groups, work, where)
    return table


def _row_seed(row: Any) -> int:
    """The bootstrap seed of a row: fixed by what the row measured, so reruns agree (the
    raw values as the JSON text tables once held, so seeds are those of older tables)."""
    raw = row.get("process_values")
    return stats.seed_for(row.get("experiment"), row.get("runtime"), row.get("result_file"),
                          json.dumps(raw) if isinstance(raw, list) else raw)


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


def _read(path: str | Path, check_path: bool) -> tuple[dict[str, Any], pyperf.Benchmark]:
    bench = pyperf.Benchmark.load(str(path))
    meta = _common_metadata(bench)
    if check_path:
        check_result_path(path, meta)
    return meta, bench


def row_from_results(paths: list[str | Path], check_path: bool = False,
                     recorded_as: Callable[[str | Path], str] | None = None) -> dict[str, Any]:
    """One table row from the result files of one point: one file, or one per round.

    With ``check_path`` (as the table does) each result must sit at its own point's path;
    without, any file is read at face value (one-off reading).

    Rounds are merged: their processes side by side (``process_rounds`` says
    which round measured each), the columns that differ combined by
    :data:`ROUND_MERGE`. ``recorded_as`` gives the path a file had in the run, for
    ``result_file`` (and so the bootstrap seeds): a table rebuilt from an extracted
    archive comes out as the run's own (perfgrid.pipeline.rerender).
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
        "process_values": groups,
        "process_rounds": rounds if len(paths) > 1 else None,
        "process_metadata": per_process,
        "noisy_rounds": noisy,
    })
    for key in ("point", "round"):
        row.pop(key, None)
    for key, value in row.items():  # metadata holding records (http's openloop_steps)
        if key not in LIST_COLUMNS and _records(value) is not None:
            row[key] = _records(value)
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
    Rounds a format-1 run let go (perfgrid.kit.formats.not_measured) are left out.
    ``recorded_as``: see :func:`row_from_results`.
    """
    experiment = experiments.get(experiment_name)
    by_point: dict[str, list[str | Path]] = {}
    for path in formats.measured(paths):  # the rounds of one point: a folder, a file each
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
