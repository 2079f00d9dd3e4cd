"""Every list of experiment names, and config/README.md's defaults, held to one source.

The registry (perfgrid.experiments) is the source of the experiments and what their jobs
need; config/config.yaml is the source of the defaults that config/README.md states.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from perfgrid import erlang, experiments, jobs, settings
from perfgrid.paths import Layout

REPO = Path(__file__).resolve().parents[1]
NATIVE = REPO / "src" / "perfgrid" / "native"
WORDS = {w: i for i, w in enumerate(("zero", "one", "two", "three", "four", "five", "six",
                                     "seven", "eight", "nine", "ten", "eleven", "twelve"))}


def schema() -> dict:
    return yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())


def test_schema_knows_exactly_the_registered_experiments():
    props = schema()["properties"]
    assert props["experiments"]["items"]["enum"] == list(experiments.available())
    assert set(experiments.available()) <= set(props)


def test_erlang_modules_are_the_registered_ones_and_their_sources():
    declared = {experiments.get(e).erlang_module for e in experiments.available()} - {None}
    assert set(erlang.MODULES) == {jobs.ERLANG_UTIL, *declared}
    assert {p.stem for p in erlang.SOURCE_DIR.glob("*.erl")} == set(erlang.MODULES)


def test_every_native_program_has_its_source_and_every_source_an_experiment():
    declared = {experiments.get(e).native_program for e in experiments.available()} - {None}
    assert {p.stem for p in NATIVE.glob("*.c")} == declared


def test_the_slurm_profile_gives_every_benchmark_rule_a_whole_node():
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert set(profile["set-resources"]) == set(experiments.available())


def test_every_experiment_declares_code_that_exists():
    src = REPO / "src" / "perfgrid"
    for name in experiments.available():
        for path in experiments.get(name).sources():
            assert (src / path).is_file(), (name, path)


@pytest.mark.parametrize("name", ["spawn", "ring", "http"])
def test_a_package_experiments_jobs_take_every_module_of_its_package(name):
    """Editing any module of ``experiments/<name>/`` reruns that experiment's jobs."""
    package = REPO / "src" / "perfgrid" / "experiments" / name
    modules = {f"experiments/{name}/{p.name}" for p in package.glob("*.py")}
    assert len(modules) > 1
    assert set(experiments.get(name).sources()) >= modules


def test_generic_code_names_no_experiment():
    """The rule files and the generic modules ask the registry; none names an experiment,
    so adding one touches none of them."""
    generic = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk")),
               *sorted((REPO / "src" / "perfgrid").glob("*.py"))]
    names = "|".join(experiments.available())
    named = re.compile(rf"""["']({names})["']""")
    found = [f"{path.relative_to(REPO)}:{number}" for path in generic
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if named.search(line)]
    assert found == []


def _readme_defaults() -> dict[str, dict[str, str]]:
    """``{experiment: {key: default cell}}`` of config/README.md's per-experiment tables."""
    out: dict[str, dict[str, str]] = {}
    section = None
    for line in (REPO / "config" / "README.md").read_text().splitlines():
        if line.startswith("## "):
            word = line[3:].split()[0]
            section = word if word in experiments.available() else None
        elif section and (row := re.match(r"\| `(\w+)` \| ([^|]*) \|", line)):
            out.setdefault(section, {})[row[1]] = row[2].strip()
    return out


def _stated(cell: str) -> str:
    """The cell without its parenthesised remarks and quotes."""
    return re.sub(r"\s*\([^)]*\)", "", cell).replace('"', "").strip()


def test_readme_states_the_defaults_of_config_yaml():
    """A list default is spelled out or counted (``all nine``); a number is written out."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    stated = _readme_defaults()
    assert set(stated) == set(experiments.available())
    checked = 0
    for name, cells in stated.items():
        for key, cell in cells.items():
            value = config[name].get(key)
            text = _stated(cell)
            if isinstance(value, list) and all(isinstance(v, str | int) for v in value):
                words = text.split()
                if len(words) == 2 and words[0] == "all" and words[1] in WORDS:
                    assert WORDS[words[1]] == len(value), (name, key, cell, value)
                else:
                    assert text == ", ".join(map(str, value)), (name, key, cell, value)
                checked += 1
            elif isinstance(value, int | float) and not isinstance(value, bool):
                number = f"{value:g}" if isinstance(value, float) else str(value)
                assert text == number, (name, key, cell, value)
                checked += 1
    assert checked >= 30


@pytest.mark.parametrize("name", experiments.available())
def test_a_job_gets_its_program_and_modules_only_where_its_runtime_needs_them(name):
    exp = experiments.get(name)
    config = settings.validated(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    layout = Layout(Path("results/x"))
    points = settings.grid(config, name)
    assert {exp.runtime(p) for p in points} >= {"python"}
    for point in points:
        runtime = exp.runtime(point)
        options = jobs.options(exp, point, config, layout)
        inputs = jobs.inputs(exp, point, config, layout, "src/perfgrid")
        native = runtime == "native" and exp.native_program is not None
        beams = runtime == "erlang" and exp.erlang_module is not None
        assert ("binary" in options) == native == bool(inputs["binary"])
        assert ("beams" in options) == beams == bool(inputs["beams"])
