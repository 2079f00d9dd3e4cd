"""Comparison statistics: Welch's test on process means, Benjamini-Hochberg over points."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyperf
import pytest

from perfgrid.analyse import aggregate
from perfgrid.experiments import get
from perfgrid.kit import formats
from perfgrid.kit.atomic import write_json
from perfgrid.kit.paths import Layout
from perfgrid.pipeline import cli
from perfgrid.publish import compare

from synthetic import file_read_table, result_folder


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


def test_a_a_noise_floor_flags_no_point_though_raw_p_values_would() -> None:
    """Same truth on both sides, 200 points: Welch's p-values are about uniform (some 5 %
    below 0.05), and Benjamini-Hochberg, which keeps the chance of any false discovery at
    q when nothing differs, flags none of them."""
    rng = np.random.default_rng(3)
    pvals = np.array([compare.welch(_groups(rng, 1.0, 3), _groups(rng, 1.0, 3))[0]
                      for _ in range(200)])
    assert 4 <= (pvals <= compare.Q).sum() <= 20  # a calibrated test: about 10 expected
    flagged = compare.adjust({"x": pd.DataFrame({"p": pvals})})["x"]
    assert (flagged["significance"] == "significant").sum() == 0
    assert (flagged["q"] >= pvals).all() and flagged["q"].min() > compare.Q


# -- compare end to end on two hand-made result folders ---------------------------------
def test_compare_marks_a_real_difference_significant_and_one_value_not_testable(tmp_path):
    a = result_folder(tmp_path, "hosta", 1.0)
    b = result_folder(tmp_path, "hostb", 2.0)
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


def test_a_result_folder_from_before_side_tables_compares_as_one_with_them(tmp_path):
    """An older result folder (or archive) has no side tables: its table's lists are JSON
    text in its cells. Compared, it gives what the same folder with side tables gives."""
    a = result_folder(tmp_path, "hosta", 1.0)
    b = result_folder(tmp_path, "hostb", 2.0)
    new = compare.compare(str(a), str(b), tmp_path / "new")["tables"]["file_read"]
    path = Layout(b).table("file_read")
    table = aggregate.load_table(path)
    for column in aggregate.LIST_COLUMNS:
        table[column] = [json.dumps(c) if c is not None else "" for c in table[column]]
    for side in Layout(b).side_tables("file_read"):
        side.unlink()
    table.to_csv(path, index=False)
    assert "[[" in path.read_text()
    old = compare.compare(str(a), str(b), tmp_path / "old")["tables"]["file_read"]
    pd.testing.assert_frame_equal(old, new)


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
        result_folder(tmp_path, host, speed)
    (tmp_path / "results" / "archive").mkdir()  # no table: not a host
    assert [p.name for p in compare.hosts_with_tables(tmp_path / "results")] == ["hosta", "hostb"]
    cli.main(["summary", str(tmp_path / "results"), "--out-md", str(tmp_path / "s.md"),
              "--out-html", str(tmp_path / "s.html")])
    header = next(line for line in (tmp_path / "s.md").read_text().splitlines()
                  if line.startswith("| variant"))
    assert header.endswith("| runtime | hosta | hostb |")


def test_summary_puts_every_host_side_by_side(tmp_path):
    roots = [str(result_folder(tmp_path, host, speed))
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


# -- hostile labels and tables --------------------------------------------------------
HOSTILE = "<img src=x onerror=alert(1)>"
MATHTEXT = "C$\\frac{$"  # two dollars: mathtext would parse "\frac{" and raise


def test_hostile_folder_names_are_text_in_the_page_and_the_plot(tmp_path):
    a = result_folder(tmp_path, f"<folder named {HOSTILE}>", 1.0)
    b = result_folder(tmp_path, MATHTEXT, 2.0)
    compare.compare(str(a), str(b), tmp_path / "cmp")
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<img" not in page and "<folder" not in page
    assert f"<h1>perfgrid comparison: {MATHTEXT} over &lt;folder named &lt;img" in page
    for ext in ("png", "svg", "pdf"):
        assert (tmp_path / "cmp" / f"file_read_ratio.{ext}").stat().st_size > 0
    compare.summary([a, b], str(tmp_path / "s.md"), str(tmp_path / "s.html"))
    page = (tmp_path / "s.html").read_text()
    assert "&lt;img src=x" in page and "<img" not in page


@pytest.mark.parametrize("label", [MATHTEXT, "$x$", "a\\$b", "100 $ and \\alpha"])
def test_literal_labels_are_drawn_as_written(label):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import cbook

    from perfgrid.analyse.analysis import literal

    assert not cbook.is_math_text(literal(label))
    fig, ax = plt.subplots()
    text = ax.set_xlabel(literal(label))
    fig.canvas.draw()  # mathtext would raise here on MATHTEXT
    assert text._preprocess_math(text.get_text()) == (label, False)
    plt.close(fig)


def _edit(folder: Path, change) -> Path:
    """Rewrite ``folder``'s file_read table through ``change`` (a DataFrame -> DataFrame)."""
    path = Layout(folder).table("file_read")
    aggregate.write_table(change(aggregate.load_table(path)), path)
    return path


def _refused(capsys, a: Path, b: Path, out: Path) -> str:
    """The one line ``perfgrid compare`` prints when it refuses; nothing written."""
    with pytest.raises(SystemExit) as done:
        cli.main(["compare", str(a), str(b), "--out", str(out)])
    assert done.value.code == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("perfgrid compare: "), err
    assert "Traceback" not in err
    assert not (out / "compare.md").exists() and not (out / "compare.html").exists()
    return err


def _scaled(table: pd.DataFrame, factor: float, raw_too: bool) -> pd.DataFrame:
    """The rate times ``factor``; with ``raw_too`` the row's process_values divided to match,
    so the table agrees with itself and only the raw files tell."""
    table["rate"] *= factor
    if raw_too:
        table["process_values"] = [[[v / factor for v in g] for g in r]
                                   for r in table["process_values"]]
    return table


@pytest.mark.parametrize("raw_too", [False, True], ids=["rate", "rate-and-process-values"])
def test_a_table_whose_rate_is_not_its_raw_values_is_refused(tmp_path, capsys, raw_too):
    """The issue's case: rate times 10 gave "ratio 10.23, interval 0.669-1.528"."""
    a = result_folder(tmp_path, "hosta", 1.0)
    b = result_folder(tmp_path, "hostb", 1.0)
    table = _edit(b, lambda t: _scaled(t, 10, raw_too))
    point = "variant=dd, cache=warm, binding=none, workers=1, block_size=65536, runtime="
    with pytest.raises(ValueError, match="not the .* its raw values give") as refused:
        compare.compare(str(a), str(b), tmp_path / "cmp")
    assert str(refused.value).startswith(f"{table}: point {point}")
    assert f"{table}: point {point}" in _refused(capsys, a, b, tmp_path / "cmp")


def test_compare_takes_rate_and_interval_from_the_same_raw_values(tmp_path):
    a = result_folder(tmp_path, "hosta", 1.0)
    b = result_folder(tmp_path, "hostb", 2.0)
    row = compare.compare(str(a), str(b), tmp_path / "cmp")["tables"]["file_read"].iloc[-1]
    assert row["ratio_ci_low"] <= row["ratio_b_over_a"] <= row["ratio_ci_high"]
    assert row["ratio_b_over_a"] == pytest.approx(row["rate_b"] / row["rate_a"])


@pytest.mark.parametrize("dropped", [["result_file"], ["rate", "rate_unit"], ["variant"]])
def test_a_table_missing_columns_is_refused_naming_them(tmp_path, capsys, dropped):
    a = result_folder(tmp_path, "hosta", 1.0)
    b = result_folder(tmp_path, "hostb", 1.0)
    table = _edit(a, lambda t: t.drop(columns=dropped))
    err = _refused(capsys, a, b, tmp_path / "cmp")
    assert f"{table}: missing column(s) {', '.join(dropped)}" in err


def test_a_table_without_cv_is_compared(tmp_path):
    """cv, whose absence raised a KeyError, is not a column compare needs."""
    a = result_folder(tmp_path, "hosta", 1.0)
    b = result_folder(tmp_path, "hostb", 2.0)
    _edit(b, lambda t: t.drop(columns=["cv"]))
    assert compare.compare(str(a), str(b), tmp_path / "cmp")["testable"] == 1


def test_a_point_listed_twice_is_refused_naming_it(tmp_path, capsys):
    a = result_folder(tmp_path, "hosta", 1.0)
    b = result_folder(tmp_path, "hostb", 1.0)
    table = _edit(b, lambda t: pd.concat([t, t.iloc[[1]]]))
    err = _refused(capsys, a, b, tmp_path / "cmp")
    assert (f"{table}: the point variant=read, cache=warm, binding=none, workers=1, "
            f"block_size=65536, runtime=python is listed more than once") in err


# -- perfgrid aa -------------------------------------------------------------------------
def _aa(tmp_path, monkeypatch, points, fail: str = "") -> list[str]:
    """``perfgrid aa`` with Snakemake replaced: each run writes a result set of ``points``
    (:func:`result_folder`), or exits 2 for the side named in ``fail``."""
    import subprocess

    sides = []

    def snakemake(cmd, check):
        host = next(a for a in cmd if a.startswith("host=")).removeprefix("host=")
        sides.append(host)
        if host.endswith(f"-{fail}"):
            return subprocess.CompletedProcess(cmd, 2)
        result_folder(tmp_path, host, 1.0, points)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", snakemake)
    cli.main(["aa", "--label", "t", "--results", str(tmp_path / "results")])
    return sides


def test_aa_reports_the_share_of_testable_points(tmp_path, monkeypatch, capsys):
    _aa(tmp_path, monkeypatch, (("read", 4, 3), ("dd", 1, 1)))
    out = capsys.readouterr().out
    # both sides drew the same values (result_folder seeds by the host name's length)
    assert "A/A: 0 of 1 testable points (0.0%) significant" in out, out
    assert (tmp_path / "results" / "compare" / "aa-t" / "compare.html").exists()


def test_aa_without_a_testable_point_says_so_and_fails(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as done:
        _aa(tmp_path, monkeypatch, (("dd", 1, 1), ("read", 1, 1)))
    message = str(done.value.code)
    assert message.startswith("perfgrid aa: no testable points: each of the 2 points "
                              "compared has a side with one value"), message
    assert "nan" not in message + capsys.readouterr().out


def test_aa_stops_when_a_run_fails(tmp_path, monkeypatch):
    with pytest.raises(SystemExit) as done:
        _aa(tmp_path, monkeypatch, (("read", 4, 3),), fail="b")
    assert done.value.code == "perfgrid aa: run b failed (snakemake exit 2); nothing compared"
    assert not (tmp_path / "results" / "compare").exists()


# -- result sets of an earlier perfgrid, with rounds let go
# (perfgrid.kit.formats.not_measured)
def _write_note(path: Path, why: str, blocks: int) -> None:
    """The note an earlier perfgrid wrote where a round it let go would have its result."""
    write_json(path, {formats.NOT_MEASURED: {"look": "look-2.json", "why": why,
                                             "blocks": blocks}})


def rounds_folder(root: Path, host: str, speed: float, measured: int = 2,
                  let_go: int = 1) -> Path:
    """results/<host> under ``root`` as an earlier perfgrid's looks left it: file_read's ``read``
    point measured in ``measured`` rounds (each 3 processes of 3 values at ``speed``
    times a base rate), then ``let_go`` rounds a look let go, each a note where its
    result would be; the table built from all of them, as rule table builds it."""
    layout = Layout.for_host(host, "results")
    axes = get("file_read").axes
    pt = {"variant": "read", "cache": "warm", "binding": "none", "workers": 1,
          "block_size": 65536}
    rng = np.random.default_rng(len(host))
    paths = []
    for round_ in range(1, measured + let_go + 1):
        path = root / layout.raw_result("file_read", pt, axes, round=round_)
        path.parent.mkdir(parents=True, exist_ok=True)
        if round_ > measured:
            _write_note(path, "every claim comparing this point was decided", measured)
        else:
            meta = {"name": "x", "loops": 1, "perfgrid_experiment": "file_read",
                    "perfgrid_point": json.dumps(pt, sort_keys=True),
                    "perfgrid_runtime": get("file_read").runtime(pt),
                    "perfgrid_work_per_loop": 1 << 20, "perfgrid_round": round_,
                    **{f"perfgrid_{k}": v for k, v in pt.items()}}
            runs = [pyperf.Run(list(0.01 / speed * np.exp(rng.normal(0, 0.01, 3))),
                               metadata=meta, collect_metadata=False) for _ in range(3)]
            pyperf.Benchmark(runs).dump(str(path))
        paths.append(path)
    return file_read_table(root, host, paths)


def test_compare_leaves_out_the_rounds_let_go_and_counts_them(tmp_path):
    """The issue's case: a let-go round's note at a result path was read as a pyperf file
    ("file format version None not supported"); compare of a result set with itself and
    with another now writes its comparison, from the measured rounds only."""
    a = rounds_folder(tmp_path, "hosta", 1.0)
    b = rounds_folder(tmp_path, "hostb", 2.0, measured=3, let_go=2)
    point = a / "raw" / "file_read" / "variant=read" / "cache=warm" / "binding=none"
    assert formats.not_measured(next(point.rglob("round=3.json")))  # a note, as the run left it
    assert pd.read_csv(a / "tables" / "file_read.csv")["n_rounds"].tolist() == [2]
    itself = compare.compare(str(a), str(a), tmp_path / "self")
    row = itself["tables"]["file_read"].iloc[0]
    assert row["ratio_b_over_a"] == pytest.approx(1.0) and row["p"] == 1.0
    assert itself["not_measured"] == {"a": 1, "b": 1}
    out = compare.compare(str(a), str(b), tmp_path / "cmp")
    row = out["tables"]["file_read"].iloc[0]
    assert row["ratio_b_over_a"] == pytest.approx(2.0, rel=0.05)
    assert row["test"] == "Welch t, log process means"  # 6 and 9 processes, notes left out
    assert out["not_measured"] == {"a": 1, "b": 2}
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert ("Rounds an earlier perfgrid let go (not measured) left out: "
            "1 in hosta, 2 in hostb.") in text


def test_compare_through_the_command_line_on_rounds_let_go(tmp_path, capsys):
    a = rounds_folder(tmp_path, "hosta", 1.0)
    cli.main(["compare", str(a), str(a), "--out", str(tmp_path / "cmp")])
    out = capsys.readouterr().out
    assert "file_read: 1 points compared" in out
    assert (tmp_path / "cmp" / "compare.html").exists()


@pytest.mark.parametrize("content, cause", [
    ('{"version": "x"}', "file format version 'x' not supported"),
    ('{"benchmarks": [', "Expecting value"),
    ("", "Expecting value"),
], ids=["wrong-version", "cut-short", "empty"])
def test_an_unreadable_round_is_refused_naming_the_file_and_the_cause(tmp_path, capsys,
                                                                       content, cause):
    a = rounds_folder(tmp_path, "hosta", 1.0)
    bad = next(a.rglob("round=2.json"))
    bad.write_text(content)
    err = _refused(capsys, a, a, tmp_path / "cmp")
    assert err.startswith(f"perfgrid compare: {bad}: not a readable pyperf result ("), err
    assert cause in err, err


def test_a_point_whose_every_round_was_let_go_is_refused_naming_it(tmp_path, capsys):
    """The table says the point was measured; its files say otherwise."""
    a = rounds_folder(tmp_path, "hosta", 1.0)
    for path in a.rglob("round=*.json"):
        _write_note(path, "test", 1)
    err = _refused(capsys, a, a, tmp_path / "cmp")
    assert "every round of this point was let go (not measured)" in err
    assert "variant=read" in err


def test_a_host_named_with_a_pipe_stays_one_column_in_summary(tmp_path):
    """Issue 60: a result folder named ``a|b`` split summary's Markdown header in two."""
    roots = [result_folder(tmp_path, host, speed) for host, speed in (("a|b", 1.0),
                                                                       ("c", 2.0))]
    compare.summary(roots, str(tmp_path / "s.md"), str(tmp_path / "s.html"))
    lines = (tmp_path / "s.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| variant"))
    assert header.endswith("| runtime | a\\|b | c |"), header
    table = lines[lines.index(header):]
    table = table[:next((i for i, line in enumerate(table) if not line.startswith("|")),
                        len(table))]
    cells = {len(line.replace("\\|", "").strip("|").split("|")) for line in table[2:]}
    assert cells == {len(header.replace("\\|", "").strip("|").split("|"))}
