"""The table takes a raw result only at its own point's path, and each point once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyperf
import pytest

from perfgrid.analyse import aggregate
from perfgrid.experiments import get
from perfgrid.kit.paths import Layout, side_tables_of

EXP = get("file_read")
LAYOUT = Layout.for_host("tiny", "results")


def point(variant: str = "read", block_size: int = 65536) -> dict:
    return {"variant": variant, "cache": "warm", "binding": "none", "workers": 1,
            "block_size": block_size}


def write_result(root: Path, pt: dict, at: dict | None = None, experiment: str = "file_read",
                 runtime: str | None = None) -> Path:
    """A pyperf result recording ``pt``, written at ``at``'s path (default its own)."""
    path = root / LAYOUT.raw_result(experiment, at or pt, get(experiment).axes)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"name": "x", "loops": 1, "perfgrid_experiment": "file_read",
            "perfgrid_point": json.dumps(pt, sort_keys=True),
            "perfgrid_runtime": runtime or EXP.runtime(pt), "perfgrid_work_per_loop": 1 << 20,
            **{f"perfgrid_{k}": v for k, v in pt.items()}}
    run = pyperf.Run([0.01, 0.011], metadata=meta, collect_metadata=False)
    pyperf.Benchmark([run]).dump(str(path))
    return path


def test_results_at_their_own_paths_make_the_table(tmp_path):
    paths = [write_result(tmp_path, point("read")), write_result(tmp_path, point("dd"))]
    table = aggregate.build_table("file_read", paths)
    assert sorted(table["variant"]) == ["dd", "read"]


def test_a_result_copied_to_another_points_path_stops_the_table(tmp_path):
    a = write_result(tmp_path, point("read"))
    b = write_result(tmp_path, point("dd"))
    shutil.copy(a, b)  # b now records read's point: two read rows, dd silently missing
    with pytest.raises(ValueError) as info:
        aggregate.build_table("file_read", [a, b])
    text = str(info.value)
    assert str(b) in text and "variant=read" in text and "variant=dd" in text
    assert LAYOUT.raw_result("file_read", point("read"), EXP.axes).split("/raw/")[1] in text


@pytest.mark.parametrize("case", ["block_size", "experiment_folder", "runtime", "not_raw",
                                  "point_not_json"])
def test_a_result_that_does_not_match_its_path_is_refused(tmp_path, case):
    if case == "block_size":
        path = write_result(tmp_path, point(block_size=4096), at=point(block_size=65536))
    elif case == "experiment_folder":
        path = write_result(tmp_path, point())
        moved = Path(str(path).replace("/raw/file_read/", "/raw/syscall/"))
        moved.parent.mkdir(parents=True)
        path = Path(shutil.move(path, moved))
    elif case == "runtime":
        path = write_result(tmp_path, point("dd"), runtime="python")
    elif case == "not_raw":
        path = Path(shutil.move(write_result(tmp_path, point()), tmp_path / "loose.json"))
    else:
        path = write_result(tmp_path, point())
        data = json.loads(path.read_text())
        data["metadata"]["perfgrid_point"] = "not json"
        path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=str(path).replace(".", r"\.")):
        aggregate.build_table("file_read", [path])


def test_the_same_point_twice_stops_the_table(tmp_path):
    a = write_result(tmp_path, point())
    other = tmp_path / "copy"
    b = write_result(other, point())
    with pytest.raises(ValueError, match="both record the point"):
        aggregate.build_table("file_read", [a, b])


def test_one_off_reading_takes_any_path(tmp_path):
    """row_from_results without check_path reads a file wherever it is (e.g. a test's)."""
    loose = Path(shutil.move(write_result(tmp_path, point()), tmp_path / "loose.json"))
    assert aggregate.row_from_results([loose])["variant"] == "read"
    with pytest.raises(ValueError, match="not a raw result path"):
        aggregate.row_from_results([loose], check_path=True)


def test_result_point_is_the_inverse_of_raw_result():
    pt = point("pread_parallel", 1 << 20)
    path = LAYOUT.raw_result("file_read", pt, EXP.axes)
    assert Layout.result_point(path, EXP.axes) == ("file_read",
                                                   {k: str(v) for k, v in pt.items()})
    with pytest.raises(ValueError, match="not exactly the axes"):
        LAYOUT.raw_result("file_read", {**pt, "extra": 1}, EXP.axes)


def test_a_rows_figures_are_the_arithmetic_of_its_values(tmp_path):
    """mean, median, stdev and CV over every value; rate = work per loop / mean time; the
    values kept per process; the interval over processes around the rate."""
    pt = point("read")
    path = tmp_path / LAYOUT.raw_result("file_read", pt, EXP.axes)
    path.parent.mkdir(parents=True)
    meta = {"name": "x", "loops": 1, "perfgrid_experiment": "file_read",
            "perfgrid_point": json.dumps(pt, sort_keys=True), "perfgrid_runtime": "python",
            "perfgrid_work_per_loop": 1000, "perfgrid_noisy": 0}
    groups = [[0.1, 0.3], [0.2, 0.2], [0.3, 0.5]]
    pyperf.Benchmark([pyperf.Run(g, metadata=meta, collect_metadata=False)
                      for g in groups]).dump(str(path))
    row = aggregate.build_table("file_read", [path]).iloc[0]
    assert (row["n_values"], row["n_processes"]) == (6, 3)
    assert row["mean_s"] == pytest.approx(1.6 / 6) and row["median_s"] == pytest.approx(0.25)
    assert row["stdev_s"] == pytest.approx(0.136626, rel=1e-5)  # sample stdev of the 6 values
    assert row["cv"] == pytest.approx(0.136626 / (1.6 / 6), rel=1e-5)
    assert row["rate"] == pytest.approx(1000 / (1.6 / 6))
    assert row["process_values"] == groups
    assert row["ci_method"] == "hierarchical bootstrap"
    assert row["rate_ci_low"] < row["rate"] < row["rate_ci_high"]
    assert row["ci_rel"] == pytest.approx(
        (row["rate_ci_high"] - row["rate_ci_low"]) / 2 / row["rate"])
    assert row["noisy"] == 0 and row["runtime"] == "python"


def test_identical_values_give_no_interval_and_say_why(tmp_path):
    path = write_result(tmp_path, point("read"))
    run = pyperf.Run([0.01, 0.01], metadata=pyperf.Benchmark.load(str(path)).get_metadata()
                     | {"loops": 1}, collect_metadata=False)
    pyperf.Benchmark([run]).dump(str(path), replace=True)
    row = aggregate.build_table("file_read", [path]).iloc[0]
    assert row["ci_method"] == "none" and row["ci_reason"] == "all values identical: spread unknown"
    assert pd.isna(row["rate_ci_low"]) and row["cv"] == 0


def test_a_table_rebuilt_elsewhere_names_its_results_as_the_run_did(tmp_path, monkeypatch):
    """Rebuilt from a copy (an extracted archive), with ``recorded_as`` the table is the
    run's own, result_file and the intervals seeded by it alike; without, both follow the
    copy's path."""
    pt = point("read")
    path = tmp_path / LAYOUT.raw_result("file_read", pt, EXP.axes)
    path.parent.mkdir(parents=True)
    meta = {"name": "x", "loops": 1, "perfgrid_experiment": "file_read",
            "perfgrid_point": json.dumps(pt, sort_keys=True), "perfgrid_runtime": "python",
            "perfgrid_work_per_loop": 1000}
    pyperf.Benchmark([pyperf.Run(g, metadata=meta, collect_metadata=False) for g in
                      ([0.1, 0.3], [0.2, 0.25], [0.3, 0.5])]).dump(str(path))
    monkeypatch.chdir(tmp_path)
    ran = aggregate.build_table("file_read", [LAYOUT.raw_result("file_read", pt, EXP.axes)])
    copy = tmp_path / "elsewhere" / "tiny"
    shutil.copytree(tmp_path / "results" / "tiny", copy)
    moved = copy / "raw/file_read" / path.relative_to(tmp_path / "results/tiny/raw/file_read")
    rebuilt = aggregate.build_table(
        "file_read", [moved], recorded_as=lambda p: str(Path("results/tiny") /
                                                         Path(p).relative_to(copy)))
    pd.testing.assert_frame_equal(rebuilt, ran)
    plain = aggregate.build_table("file_read", [moved])
    assert plain.loc[0, "result_file"] == str(moved) != ran.loc[0, "result_file"]
    assert plain.loc[0, "rate_ci_low"] != ran.loc[0, "rate_ci_low"]


# -- on disk: one value a cell, the lists in side tables ---------------------------------
SYSCALL_POINT = {"variant": "native", "call": "getuid", "binding": "spread", "workers": 1}
STEPS = [{"offered_rate": 100.0, "sent": 200, "p99_ms": 1.5, "saturated": False, "hdr": "HIST"},
         {"offered_rate": 200.0, "sent": 400, "p99_ms": float("nan"), "saturated": True,
          "hdr": ""}]


def rounds_table(root: Path) -> pd.DataFrame:
    """A syscall table of two points: one measured in three rounds (round 2 noisy, each
    process with its own facts), one in a single job; the first carries a column of
    records (as http's ``openloop_steps``)."""
    paths = []
    for pt, rounds in ((SYSCALL_POINT, (1, 2, 3)), ({**SYSCALL_POINT, "workers": 2}, (None,))):
        for r in rounds:
            path = root / LAYOUT.raw_result("syscall", pt, get("syscall").axes, round=r)
            path.parent.mkdir(parents=True, exist_ok=True)
            meta = {"name": "x", "loops": 1, "perfgrid_experiment": "syscall",
                    "perfgrid_point": json.dumps(pt, sort_keys=True),
                    "perfgrid_runtime": "native", "perfgrid_work_per_loop": 1,
                    "perfgrid_noisy": int(r == 2), **({"perfgrid_round": r} if r else {}),
                    **{f"perfgrid_{k}": v for k, v in pt.items()}}
            runs = [pyperf.Run([0.1 * f, 0.11 * f, 0.1 * f + 1e-17],
                               metadata={**meta, "perfgrid_sys_s": 0.5 * f,
                                         "perfgrid_user_s": 1 / 3},
                               collect_metadata=False) for f in (0.99, 1.01)]
            pyperf.Benchmark(runs).dump(str(path))
            paths.append(path)
    table = aggregate.build_table("syscall", paths)
    table["openloop_steps"] = [STEPS, None]
    common = aggregate.common_columns()  # in its place, as build_table puts its columns
    return table[[*common, *sorted(c for c in table if c not in common)]]


def test_a_written_table_and_its_side_tables_hold_one_value_a_cell(tmp_path):
    table = rounds_table(tmp_path)
    path = LAYOUT.table("syscall")
    aggregate.write_table(table, tmp_path / path)
    written = sorted((tmp_path / path.parent).glob("*.csv"))
    assert [p.name for p in written] == sorted(
        p.name for p in LAYOUT.table_files("syscall"))
    for file in written:
        cells = pd.read_csv(file, dtype=str, keep_default_na=False).to_numpy().ravel()
        assert not [c for c in cells if c.startswith(("[", "{"))], file.name
    on_disk = pd.read_csv(tmp_path / path)
    assert not set(aggregate.LIST_COLUMNS) & set(on_disk.columns)
    assert "openloop_steps" not in on_disk
    values = pd.read_csv(tmp_path / side_tables_of(LAYOUT.table("syscall"))["values"])
    assert list(values.columns) == ["row", "process", "round", "value_index", "value"]
    assert len(values) == 3 * 2 * 3 + 2 * 3  # rounds x processes x values, and one job's
    assert values[values["row"] == 1]["round"].isna().all()  # one job: no round
    noisy = pd.read_csv(tmp_path / side_tables_of(LAYOUT.table("syscall"))["noisy_rounds"])
    assert noisy.to_dict("records") == [{"row": 0, "round": 2}]
    facts = pd.read_csv(tmp_path / side_tables_of(LAYOUT.table("syscall"))["process_facts"])
    assert {"sys_s", "user_s"} <= set(facts["key"])
    records = pd.read_csv(tmp_path / side_tables_of(LAYOUT.table("syscall"))["records"])
    assert records[["row", "column", "item"]].values.tolist() == [
        [0, "openloop_steps", 0], [0, "openloop_steps", 1]]


def test_a_table_loads_back_as_it_was_built(tmp_path):
    """Written and loaded, the table is the one built: lists in their cells, every value
    to the last bit, the columns in their order."""
    table = rounds_table(tmp_path)
    path = tmp_path / LAYOUT.table("syscall")
    aggregate.write_table(table, path)
    loaded = aggregate.load_table(path)
    assert list(loaded.columns) == list(table.columns)
    for column in (*aggregate.LIST_COLUMNS, "openloop_steps"):
        assert loaded[column].tolist()[0] == table[column].tolist()[0] or column == \
            "openloop_steps", column
    assert loaded["process_values"].tolist() == table["process_values"].tolist()
    assert loaded["process_rounds"].tolist() == [[1, 1, 2, 2, 3, 3], None]
    assert loaded["noisy_rounds"].tolist() == [[2], []]
    assert loaded["process_metadata"].tolist() == table["process_metadata"].tolist()
    steps = loaded["openloop_steps"].tolist()
    assert steps[1] is None and [s["p99_ms"] for s in steps[0]][0] == 1.5
    assert pd.isna(steps[0][1]["p99_ms"]) and steps[0][1]["hdr"] == ""
    assert [{k: v for k, v in s.items() if k != "p99_ms"} for s in steps[0]] == [
        {k: v for k, v in s.items() if k != "p99_ms"} for s in STEPS]
    scalar = [c for c in table.columns if c not in (*aggregate.LIST_COLUMNS, "openloop_steps")]
    pd.testing.assert_frame_equal(loaded[scalar], pd.read_csv(path), check_exact=True)

    def missing(v: object) -> bool:  # a CSV reads "" and <NA> back as NaN
        return v == "" if isinstance(v, str) else bool(pd.isna(v))

    def cells(frame: pd.DataFrame) -> list[list]:
        return [[None if missing(v) else v for v in frame[c]] for c in frame]

    assert cells(loaded[scalar]) == cells(table[scalar])
    # and what the table's figures come from is the same: the same intervals again
    again = aggregate.rate_estimate(loaded.iloc[0])
    assert again.interval() == aggregate.rate_estimate(table.iloc[0]).interval()
    aggregate.check_table(loaded, path, get("syscall").axes)


def test_a_table_from_before_side_tables_reads_as_one_with_them(tmp_path):
    """An older table (an older archive's) holds its lists as JSON text in its cells: read,
    they are the lists a table with side tables gives."""
    table = rounds_table(tmp_path)
    new = tmp_path / "new" / "syscall.csv"
    aggregate.write_table(table, new)
    old = tmp_path / "old" / "syscall.csv"
    old.parent.mkdir()
    legacy = table.copy()
    for column in aggregate.LIST_COLUMNS:
        legacy[column] = [json.dumps(c) if c is not None else "" for c in legacy[column]]
    legacy["openloop_steps"] = [json.dumps(STEPS, separators=(",", ":")), None]
    legacy.to_csv(old, index=False)
    assert not any(p.exists() for p in aggregate.side_tables_of(old).values())
    read_old = aggregate.read_table(old, get("syscall").axes)
    read_new = aggregate.read_table(new, get("syscall").axes)
    for column in ("process_values", "process_rounds", "process_metadata", "noisy_rounds"):
        assert read_old[column].tolist() == read_new[column].tolist(), column
    assert read_old["openloop_steps"].tolist()[0][0] == STEPS[0]
    assert aggregate.rate_estimate(read_old.iloc[0]).interval() == aggregate.rate_estimate(
        read_new.iloc[0]).interval()


def test_every_table_leaves_the_side_tables_out(tmp_path):
    from perfgrid.kit.paths import every_table

    aggregate.write_table(rounds_table(tmp_path), tmp_path / LAYOUT.table("syscall"))
    assert every_table(tmp_path / "results") == [tmp_path / LAYOUT.table("syscall")]
    assert Layout(tmp_path / LAYOUT.root).tables() == [tmp_path / LAYOUT.table("syscall")]


def test_a_side_table_that_does_not_fit_its_table_is_refused_naming_it(tmp_path):
    path = tmp_path / LAYOUT.table("syscall")
    aggregate.write_table(rounds_table(tmp_path), path)
    values = side_tables_of(LAYOUT.table("syscall"))["values"]
    table = pd.read_csv(path)
    table.iloc[:1].to_csv(path, index=False)  # one row left: the values name row 1 too
    with pytest.raises(ValueError, match="names a row its table .1 rows. has not") as refused:
        aggregate.read_table(path, get("syscall").axes)
    assert str(refused.value).startswith(str(tmp_path / values))
    table.to_csv(path, index=False)
    (tmp_path / values).write_text("row,value\n0,1.0\n")
    with pytest.raises(ValueError, match="not a values side table"):
        aggregate.read_table(path, get("syscall").axes)
