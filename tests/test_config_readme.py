"""config/README.md's key tables are the experiments' schema descriptions, in step.

Each experiment's keys are described once, in its schema.yaml; the tables between the
``<!-- keys:<name> begin/end -->`` markers are written from them by
``python -m perfgrid.configdoc`` (``make config-doc``).
"""

from __future__ import annotations

import copy

import pytest

from perfgrid import configdoc, configschema, experiments


def test_the_committed_key_tables_are_the_generated_ones():
    committed = configdoc.README.read_text()
    assert configdoc.render(committed) == committed, (
        "config/README.md's key tables are out of step with the experiments' schema.yaml "
        "(or config/config.yaml); run `python -m perfgrid.configdoc` (or `make "
        "config-doc`) and commit config/README.md")


def test_every_experiment_has_one_table_and_every_key_a_row():
    text = configdoc.README.read_text()
    for name in experiments.available():
        assert text.count(f"<!-- keys:{name} begin") == 1, name
        assert text.count(configdoc.end_marker(name)) == 1, name
        rows = configdoc.table(name).splitlines()[2:]
        keys = [row.split("`")[1] for row in rows]
        assert keys == list(configschema.fragment(name)["properties"]), name


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
    assert "python -m perfgrid.configdoc" in capsys.readouterr().err
    assert configdoc.main(["--readme", str(readme)]) == 0
    assert readme.read_text() == text
    assert configdoc.main(["--check", "--readme", str(readme)]) == 0


def test_values_read_as_yaml_writes_them():
    assert configdoc.value_cell(["on", "off"]) == '"on", "off"'
    assert configdoc.value_cell([1, 10]) == "1, 10"
    assert configdoc.value_cell({"a": [1], "b": None}) == "`{a: [1], b: null}`"
    assert configdoc.value_cell(0.25) == "0.25"
