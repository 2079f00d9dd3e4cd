"""The table takes a raw result only at its own point's path, and each point once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyperf
import pytest

from perfgrid import aggregate
from perfgrid.experiments import get
from perfgrid.paths import Layout

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
    """row_from_result without check_path reads a file wherever it is (e.g. a test's)."""
    loose = Path(shutil.move(write_result(tmp_path, point()), tmp_path / "loose.json"))
    assert aggregate.row_from_result(loose)["variant"] == "read"
    with pytest.raises(ValueError, match="not a raw result path"):
        aggregate.row_from_result(loose, check_path=True)


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
    assert json.loads(row["process_values"]) == groups
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
