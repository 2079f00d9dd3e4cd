"""config/README.md's key tables are the fixtures' and experiments' schema descriptions,
in step.

Each section's keys are described once, in its schema file; the tables between the
``<!-- keys:<name> begin/end -->`` markers are written from them by
``python -m perfgrid.pipeline.configdoc`` (``make config-doc``).
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest

from perfgrid import experiments
from perfgrid.pipeline import configdoc, configschema


def test_the_committed_key_tables_are_the_generated_ones():
    committed = configdoc.README.read_text()
    assert configdoc.render(committed) == committed, (
        "config/README.md's key tables are out of step with the sections' schema files "
        "(or config/config.yaml); run `python -m perfgrid.pipeline.configdoc` (or `make "
        "config-doc`) and commit config/README.md")


def test_every_fixture_and_experiment_has_one_table_and_every_key_a_row():
    text = configdoc.README.read_text()
    assert configschema.sections()[0] == "testfile"
    for name in configschema.sections():
        assert text.count(f"<!-- keys:{name} begin") == 1, name
        assert text.count(configdoc.end_marker(name)) == 1, name
        rows = configdoc.table(name).splitlines()[2:]
        keys = [row.split("`")[1] for row in rows]
        assert keys == list(configschema.schema()["properties"][name]["properties"]), name


def test_a_key_without_description_stops_the_table():
    schema = configschema.schema()
    name = experiments.available()[0]
    broken = copy.deepcopy(schema)
    key, node = next(iter(broken["properties"][name]["properties"].items()))
    node.pop("description", None)
    if "$ref" in node:
        broken["$defs"][node["$ref"].rsplit("/", 1)[-1]].pop("description", None)
    with pytest.raises(configdoc.DocError, match=rf"\['{key}'\] have no description"):
        configdoc.table(name, broken)


def test_missing_markers_say_what_to_add():
    with pytest.raises(configdoc.DocError, match="needs its key table's markers"):
        configdoc.render("# Configuration\n")


def test_check_mode_writes_nothing_and_says_what_to_run(tmp_path, capsys):
    readme = tmp_path / "README.md"
    text = configdoc.README.read_text()
    stale = text.replace(configdoc.end_marker(experiments.available()[0]),
                         "| stale |\n" + configdoc.end_marker(experiments.available()[0]))
    readme.write_text(stale)
    assert configdoc.main(["--check", "--readme", str(readme)]) == 1
    assert readme.read_text() == stale
    assert "python -m perfgrid.pipeline.configdoc" in capsys.readouterr().err
    assert configdoc.main(["--readme", str(readme)]) == 0
    assert readme.read_text() == text
    assert configdoc.main(["--check", "--readme", str(readme)]) == 0


def test_values_read_as_yaml_writes_them():
    assert configdoc.value_cell(["on", "off"]) == '"on", "off"'
    assert configdoc.value_cell([1, 10]) == "1, 10"
    assert configdoc.value_cell({"a": [1], "b": None}) == "`{a: [1], b: null}`"
    assert configdoc.value_cell(0.25) == "0.25"


def test_a_pipe_in_a_cell_is_escaped_so_each_row_keeps_four_cells():
    """A pattern's alternatives (testfile.size's units) would end a cell, code span or not."""
    for name in configschema.sections():
        for row in configdoc.table(name).splitlines():
            assert len(re.findall(r"(?<!\\)\|", row)) == 5, row
    assert r"(B\|KiB\|" in configdoc.table("testfile")


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The guide's toy experiment (docs/adding-an-experiment.md) in a second folder of
    ``perfgrid.experiments``; the registry looks again with it, and without it afterwards."""
    from test_adding_an_experiment import guide_files

    for name, text in guide_files().items():
        path = tmp_path / Path(name).relative_to("src/perfgrid/experiments")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    caches = (experiments._modules, experiments._load, experiments._available,
              configschema._assembled)
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, str(tmp_path)])
    for cache in caches:
        cache.cache_clear()
    yield tmp_path / "toy"
    monkeypatch.undo()
    sys.modules.pop("perfgrid.experiments.toy", None)
    for cache in caches:
        cache.cache_clear()


def test_a_new_experiment_gets_its_section_after_the_last_experiments(toy):
    """No README edit by hand: its heading, its schema's description and its table, once,
    after the last experiment's section (http's, or a seventh's); written again, only the
    table is."""
    committed = configdoc.README.read_text()
    rendered = configdoc.render(committed)
    section = (f"## toy\n\ntoy, the worked example of docs/adding-an-experiment.md.\n\n"
               f"{configdoc.begin_marker('toy')}\n\n{configdoc.table('toy')}\n"
               f"{configdoc.end_marker('toy')}\n\n")
    assert rendered.count(section) == 1
    assert rendered.replace(section, "") == committed
    after_last = max(committed.index(configdoc.end_marker(name))
                     for name in experiments.available() if name != "toy")
    next_heading = committed[committed.index("\n## ", after_last) + 1:].split("\n")[0]
    assert rendered.index(section) > after_last
    assert f"{section}{next_heading}\n" in rendered  # the last section ends at the next heading
    assert configdoc.render(rendered) == rendered
    keys = [row.split("`")[1] for row in configdoc.table("toy").splitlines()[2:]]
    assert keys == ["variants", "list_sizes", "start", "measure"]
    edited = rendered.replace("toy, the worked example", "Sums, the worked example")
    assert configdoc.render(edited) == edited  # the prose is the README's once written


def test_a_new_experiment_without_a_description_stops_its_section(toy):
    schema_file = toy / "schema.yaml"
    schema_file.write_text(schema_file.read_text().replace("description: toy,", "# toy,"))
    configschema._assembled.cache_clear()
    with pytest.raises(configdoc.DocError, match=r"toy/schema\.yaml: no top-level description"):
        configdoc.render(configdoc.README.read_text())


def test_one_marker_alone_is_an_error_not_a_new_section():
    text = configdoc.README.read_text()
    broken = text.replace(configdoc.end_marker("http"), "")
    with pytest.raises(configdoc.DocError, match="section http needs its key table's markers"):
        configdoc.render(broken)
