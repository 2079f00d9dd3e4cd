"""Comparison statistics: Welch's test on process means, Benjamini-Hochberg over points."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyperf
import pytest

from perfgrid import aggregate, cli, compare
from perfgrid.experiments import get
from perfgrid.paths import Layout


def _groups(rng: np.random.Generator, mean: float, processes: int, values: int = 3,
            cv: float = 0.03) -> list[list[float]]:
    return [list(mean * np.exp(rng.normal(0, cv) + rng.normal(0, cv, values)))
            for _ in range(processes)]


def test_welch_uses_process_means_when_both_sides_have_several() -> None:
    rng = np.random.default_rng(1)
    p, what = compare.welch(_groups(rng, 1.0, 4), _groups(rng, 1.3, 4))
    assert p < 0.01 and "process means" in what
    p, what = compare.welch(_groups(rng, 1.0, 4), _groups(rng, 1.0, 4))
    assert p > 0.01


def test_welch_falls_back_to_values_and_says_so() -> None:
    rng = np.random.default_rng(2)
    _, what = compare.welch(_groups(rng, 1.0, 1, 5), _groups(rng, 1.0, 4))
    assert "within-process" in what


@pytest.mark.parametrize("groups", [[[1.0]], [], [[2.0], []]])
def test_one_value_is_not_testable(groups: list) -> None:
    p, what = compare.welch(groups, [[1.0, 1.1], [1.2, 1.0]])
    assert np.isnan(p) and "not testable" in what


def test_benjamini_hochberg_over_all_experiments() -> None:
    tables = {"a": pd.DataFrame({"p": [0.001, 0.04, float("nan")]}),
              "b": pd.DataFrame({"p": [0.03, 0.5]})}
    adjusted = compare.adjust(tables)
    a, b = adjusted["a"], adjusted["b"]
    # four testable p-values: 0.001 -> 0.004; 0.03 and 0.04 -> 0.0533; 0.5 -> 0.5
    assert a.loc[0, "q"] == pytest.approx(0.004)
    assert a.loc[0, "significance"] == "significant"
    assert a.loc[1, "significance"] == "not significant"
    assert b.loc[0, "significance"] == "not significant"
    assert a.loc[2, "significance"] == "not testable" and np.isnan(a.loc[2, "q"])
    assert "p" in tables["a"] and "q" not in tables["a"]  # inputs untouched


def test_a_a_noise_floor_flags_about_q_or_less() -> None:
    """Same truth on both sides, 200 points: at most 5 % flagged after correction."""
    rng = np.random.default_rng(3)
    pvals = [compare.welch(_groups(rng, 1.0, 3), _groups(rng, 1.0, 3))[0] for _ in range(200)]
    flagged = compare.adjust({"x": pd.DataFrame({"p": pvals})})["x"]["significance"]
    assert (flagged == "significant").mean() <= 0.05


# -- compare end to end on two hand-made result folders ---------------------------------
def _result_folder(root: Path, host: str, speed: float) -> Path:
    """results/<host> with a file_read table of two points: ``read`` in 4 processes of 3
    values at ``speed`` times a base rate, ``dd`` measured once (not testable)."""
    layout = Layout.for_host(host, "results")
    rng = np.random.default_rng(len(host))
    paths = []
    for variant, processes, values in (("read", 4, 3), ("dd", 1, 1)):
        pt = {"variant": variant, "cache": "warm", "binding": "none", "workers": 1,
              "block_size": 65536}
        path = root / layout.raw_result("file_read", pt, get("file_read").axes)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"name": "x", "loops": 1, "perfgrid_experiment": "file_read",
                "perfgrid_point": json.dumps(pt, sort_keys=True),
                "perfgrid_runtime": get("file_read").runtime(pt),
                "perfgrid_work_per_loop": 1 << 20,
                **{f"perfgrid_{k}": v for k, v in pt.items()}}
        runs = [pyperf.Run(list(0.01 / speed * np.exp(rng.normal(0, 0.01, values))),
                           metadata=meta, collect_metadata=False) for _ in range(processes)]
        pyperf.Benchmark(runs).dump(str(path))
        paths.append(path)
    folder = root / "results" / host
    (folder / "tables").mkdir(parents=True)
    aggregate.build_table("file_read", paths).to_csv(folder / "tables" / "file_read.csv",
                                                     index=False)
    return folder


def test_compare_marks_a_real_difference_significant_and_one_value_not_testable(tmp_path):
    a = _result_folder(tmp_path, "hosta", 1.0)
    b = _result_folder(tmp_path, "hostb", 2.0)
    out = compare.compare(str(a), str(b), tmp_path / "cmp")
    table = out["tables"]["file_read"].set_index("variant")
    assert table.loc["read", "significance"] == "significant"
    assert table.loc["read", "ratio_b_over_a"] == pytest.approx(2.0, rel=0.05)
    assert table.loc["read", "ratio_ci_low"] < 2.0 < table.loc["read", "ratio_ci_high"]
    assert table.loc["dd", "significance"] == "not testable"
    assert table.loc["dd", "test"] == "not testable (a side has one value)"
    assert (out["significant"], out["testable"], out["points"]) == (1, 1, 2)
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert "1 of 1 testable points differ significantly" in text
    assert "hostb over hosta" in text
    assert len(pd.read_csv(tmp_path / "cmp" / "points.csv")) == 2


def test_a_folder_without_tables_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match=r"nothing: not a result folder \(no tables/ inside\)"):
        compare.resolve(str(tmp_path / "nothing"), tmp_path / "scratch")


@pytest.mark.parametrize("recorded", ["/etc/passwd", "results/h/raw/../../x.json",
                                      "elsewhere/x.json", float("nan")])
def test_a_result_file_outside_raw_is_an_error_naming_it(tmp_path, recorded):
    with pytest.raises(ValueError, match="points outside") as info:
        compare._local(tmp_path, recorded)
    assert repr(recorded) in str(info.value) and str(tmp_path / "raw") in str(info.value)


def test_summary_command_finds_every_host_with_a_table(tmp_path):
    """``perfgrid summary RESULTS`` (rule compare) looks the hosts up itself."""
    for host, speed in (("hosta", 1.0), ("hostb", 2.0)):
        _result_folder(tmp_path, host, speed)
    (tmp_path / "results" / "archive").mkdir()  # no table: not a host
    assert [p.name for p in compare.hosts_with_tables(tmp_path / "results")] == ["hosta", "hostb"]
    cli.main(["summary", str(tmp_path / "results"), "--out-md", str(tmp_path / "s.md"),
              "--out-html", str(tmp_path / "s.html")])
    header = next(line for line in (tmp_path / "s.md").read_text().splitlines()
                  if line.startswith("| variant"))
    assert header.endswith("| runtime | hosta | hostb |")


def test_summary_puts_every_host_side_by_side(tmp_path):
    roots = [str(_result_folder(tmp_path, host, speed))
             for host, speed in (("hosta", 1.0), ("hostb", 2.0))]
    compare.summary(roots, str(tmp_path / "s.md"), str(tmp_path / "s.html"))
    text = (tmp_path / "s.md").read_text()
    assert "## file_read (rate in bytes/s)" in text
    header = next(line for line in text.splitlines() if line.startswith("| variant"))
    assert header.endswith("| runtime | hosta | hostb |")
    rows = [line for line in text.splitlines() if line.startswith("| read |")]
    a, b = (float(cell) for cell in rows[0].strip(" |").split(" | ")[-2:])
    assert b / a == pytest.approx(2.0, rel=0.05)
    assert "<h2>file_read</h2>" in (tmp_path / "s.html").read_text()
