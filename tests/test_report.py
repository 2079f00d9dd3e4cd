"""The report's parts that only the pipeline reached: flags, the seed table, Markdown."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from perfgrid.publish import report
from perfgrid.publish.report import formatting, pages, quality, seeds

CV = 0.05


def flagged(**columns) -> pd.DataFrame:
    """``quality.flags`` of a three-row table with ``columns``."""
    return quality.flags(pd.DataFrame({"variant": ["a", "b", "c"], **columns}), CV)


@pytest.mark.parametrize("columns, rows, reason", [
    ({"cv": [0.01, 0.2, math.nan]}, ["b"], "CV above 5%"),
    ({"noisy": [0, 1, 0]}, ["b"], "other processes busy while measured (left out of claims)"),
    ({"cache_reached": [1, 1, 0]}, ["c"], "cache state not reached"),
], ids=["cv", "busy", "cache"])
def test_each_flag_marks_only_its_rows_with_its_reason(columns, rows, reason):
    out = flagged(**columns)
    assert list(out["variant"]) == rows
    assert list(out["flag"]) == [reason] * len(rows)


def test_a_row_with_every_problem_gets_every_reason_in_order():
    out = flagged(cv=[0.2, 0.0, 0.0], noisy=[1, 0, 0], cache_reached=[0, 1, 1])
    assert out.to_dict("records") == [{
        "variant": "a", "cv": 0.2, "noisy": 1, "cache_reached": 0,
        "flag": "CV above 5%; other processes busy while measured (left out of claims); "
                "cache state not reached"}]


def test_a_point_busy_in_some_of_its_rounds_says_how_many_were_left_out():
    out = flagged(noisy=[1, 1, 0], noisy_rounds=['[2]', '[1, 2, 3]', '[]'], n_rounds=[3, 3, 3])
    assert list(out["flag"]) == [
        "other processes busy while measured in 1 of 3 rounds (those left out of claims)",
        "other processes busy while measured (left out of claims)"]


def test_cv_at_the_threshold_and_nan_cv_are_not_flagged():
    assert flagged(cv=[CV, math.nan, 0.0]).empty


def test_a_table_without_the_flag_columns_flags_nothing():
    out = flagged()
    assert out.empty and "flag" in out


SEED = [{"variant": "read", "block_size": 1024, "runtime": "erlang", "rate": 100.0,
         "erlang_variant": "erlang_read", "native_variant": "dd", "cache": "warm"}]


def table(*rows: tuple[str, str, int, float]) -> pd.DataFrame:
    return pd.DataFrame([{"variant": v, "runtime": r, "block_size": b, "cache": "warm",
                          "rate": rate} for v, r, b, rate in rows])


def test_seed_row_sits_beside_each_runtimes_best_matching_row():
    here = table(("read", "python", 1024, 50.0), ("read", "python", 1024, 70.0),
                 ("dd", "native", 1024, 300.0), ("erlang_read", "erlang", 1024, 150.0),
                 ("erlang_read", "erlang", 4096, 999.0), ("read", "erlang", 1024, 1.0))
    out = seeds.seed_comparison(SEED, here, ("variant", "block_size", "cache"))
    assert out.to_dict("records") == [{
        "variant": "read", "block_size": 1024, "cache": "warm", "seed_runtime": "erlang",
        "seed_rate": 100.0, "python_rate": 70.0, "native_rate": 300.0, "erlang_rate": 150.0,
        "here_over_seed": 1.5}]


def test_without_the_seeds_runtime_the_python_row_is_compared():
    out = seeds.seed_comparison(SEED, table(("read", "python", 1024, 50.0)),
                                 ("variant", "block_size"))
    assert out["here_over_seed"].tolist() == [0.5]
    assert "erlang_rate" not in out and "native_rate" not in out  # all-NaN columns dropped


def test_no_matching_row_leaves_the_ratio_empty():
    out = seeds.seed_comparison(SEED, table(("read", "python", 4096, 50.0)),
                                 ("variant", "block_size"))
    assert out["seed_rate"].tolist() == [100.0] and "here_over_seed" not in out


@pytest.mark.parametrize("value, cell", [
    ("a|b", "a\\|b"),
    ("two\nlines", "two lines"),
    (math.nan, ""),
    (1234567.0, "1.235e+06"),
    (0.5, "0.5"),
    (3, "3"),
], ids=["pipe", "newline", "nan", "big", "float", "int"])
def test_markdown_cells_cannot_break_the_table(value, cell):
    text = formatting.md_table(pd.DataFrame({"x": [value], "y": ["end"]}))
    assert text.splitlines() == ["| x | y |", "|---|---|", f"| {cell} | end |"]


def test_an_empty_markdown_table_says_so():
    assert formatting.md_table(pd.DataFrame()) == "_(no rows)_\n"


# -- hostile result sets ---------------------------------------------------------------
HOSTILE = "<img src=x onerror=alert(1)>"
MACHINE = {"cpu_model": f"<script>alert(2)</script>{HOSTILE}", "cpus_logical": 2,
           "cpus_physical": 1, "memory_bytes": 2**30, "kernel": "6.1", "python": "3.11"}


def _result_set(tmp_path, host: str):
    import json

    from synthetic import result_folder

    root = result_folder(tmp_path, host, 1.0)
    (root / "machine.json").write_text(json.dumps(MACHINE))
    (root / "config.used.yaml").write_text(f"host: '{HOSTILE}'\n")
    return root


def test_the_html_report_shows_hostile_names_as_text(tmp_path):
    root = _result_set(tmp_path, f"<folder named {HOSTILE}>")
    md, page = pages.render(report.build(root, ["file_read"], CV))
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "<script" not in page and "<img src=x" not in page and "<folder" not in page
    assert f"perfgrid report: <folder named {HOSTILE}>" in md  # Markdown keeps the text


def test_the_report_refuses_a_table_whose_rate_is_not_its_raw_values(tmp_path):
    root = _result_set(tmp_path, "h")
    path = root / "tables" / "file_read.csv"
    table = pd.read_csv(path)
    table.loc[1, "rate"] *= 1.001
    table.to_csv(path, index=False)
    with pytest.raises(ValueError, match="not the .* its raw values give") as refused:
        report.build(root, ["file_read"], CV)
    assert str(refused.value).startswith(f"{path}: point variant=read, cache=warm")


def test_the_notes_and_tables_hooks_get_the_registrys_experiment(tmp_path, monkeypatch):
    """As ``claims()`` and ``plot()`` do: the report hands both the registry's Experiment."""
    from perfgrid import experiments
    from perfgrid.analyse.analysis import module

    root = _result_set(tmp_path, "h")
    analysis, seen = module("file_read"), []

    def notes(table, experiment):
        seen.append(experiment)
        return [f"a note on {experiment.name}"]

    def tables(table, experiment):
        seen.append(experiment)
        return [("extra", f"of {experiment.name}", table.head(1))]

    monkeypatch.setattr(analysis, "notes", notes)
    monkeypatch.setattr(analysis, "tables", tables, raising=False)  # file_read has none
    [section] = report.build(root, ["file_read"], CV)["sections"]
    assert len(seen) == 2 and all(e is experiments.get("file_read") for e in seen)
    assert section["notes"][0] == "a note on file_read"
    assert [(title, note) for title, note, _ in section["tables"]] == [
        ("extra", "of file_read")]
