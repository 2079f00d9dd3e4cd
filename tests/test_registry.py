"""Every list of experiment names, and config/README.md's defaults, held to one source.

The registry (perfgrid.experiments) is the source of the experiments and what their jobs
need; config/config.yaml is the source of the defaults that config/README.md states.
"""

from __future__ import annotations

import inspect
import re
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from perfgrid import experiments
from perfgrid.analyse import analysis
from perfgrid.design import jobs, planning
from perfgrid.kit import testfile
from perfgrid.kit.paths import PACKAGE, Layout
from perfgrid.measure import fixtures
from perfgrid.pipeline import config_errors, configschema, settings

from helpers import snakemake, write_config

REPO = Path(__file__).resolve().parents[1]
WORDS = {w: i for i, w in enumerate(("zero", "one", "two", "three", "four", "five", "six",
                                     "seven", "eight", "nine", "ten", "eleven", "twelve"))}


def test_schema_knows_exactly_the_registered_experiments():
    """The assembled schema: the shared file names none; each section is its package's."""
    props = configschema.schema()["properties"]
    assert props["experiments"]["items"]["enum"] == list(experiments.available())
    shared = yaml.safe_load(configschema.SHARED.read_text())
    assert shared["properties"]["experiments"]["items"]["enum"] == []
    assert not set(experiments.available()) & {*shared["properties"], *shared["$defs"]}
    for name in experiments.available():
        section = yaml.safe_load((PACKAGE / "experiments" / name / "schema.yaml").read_text())
        section.pop("$defs", None)
        assert props[name] == section
        runtimes = props[name]["properties"].get("runtimes")  # optional (base.RUNTIMES)
        assert runtimes is None or runtimes["$ref"] == "#/$defs/runtimes", name


def test_an_experiment_is_one_package_of_the_same_files():
    """Every experiment's package holds its workload, analysis and config section, and the
    sources of exactly the programs it declares; no shared folder holds any of them."""
    for name in experiments.available():
        exp = experiments.get(name)
        folder = PACKAGE / "experiments" / name
        assert exp.folder() == folder
        assert {"__init__.py", "analysis.py", "schema.yaml"} <= {p.name for p in folder.iterdir()}
        assert analysis.module(name).__file__ == str(folder / "analysis.py")
        assert sorted(p.relative_to(PACKAGE).as_posix() for p in folder.glob("native/*")) == (
            [f"experiments/{name}/native/{exp.native_program}.c"] if exp.native_program else [])
        assert sorted(p.relative_to(PACKAGE).as_posix() for p in folder.glob("erlang/*")) == (
            [f"experiments/{name}/erlang/{exp.erlang_module}.erl"] if exp.erlang_module else [])
    assert [p.name for p in (PACKAGE / "native").iterdir()] == ["perfgrid.h"]
    assert [p.name for p in (PACKAGE / "erlang_src").iterdir()] == ["pg_util.erl"]
    assert not [p for p in (PACKAGE / "analyse" / "analysis").glob("*.py")
                if p.stem in experiments.available()]


def test_every_erlang_source_is_pg_util_or_a_registered_experiments_module():
    declared = {experiments.get(e).erlang_module for e in experiments.available()} - {None}
    sources = jobs.erlang_sources()
    assert set(sources) == {jobs.ERLANG_UTIL, *declared}
    assert all((PACKAGE / path).is_file() for path in sources.values())


def test_every_native_program_has_its_source_and_every_source_an_experiment():
    declared = {experiments.get(e).native_program for e in experiments.available()} - {None}
    sources = jobs.native_sources()
    assert set(sources) == declared
    assert all((PACKAGE / path).is_file() for path in sources.values())
    assert {p.stem for p in PACKAGE.glob("experiments/*/native/*.c")} == declared


def test_the_registry_finds_every_experiment_in_report_order():
    """Every package of ``perfgrid/experiments/`` is an experiment, in report order; the seed's
    six among them (a seventh needs no edit here)."""
    packages = {p.parent.name for p in (PACKAGE / "experiments").glob("*/__init__.py")}
    assert set(experiments.available()) == packages
    assert {"spawn", "file_read", "syscall", "timers", "ring", "http"} <= packages
    positions = [experiments.get(e).report_position for e in experiments.available()]
    assert positions == sorted(set(positions))


def _free_position() -> int:
    """A report position no registered experiment holds, between the first and the last
    where there is room: a test's experiment lands among the others, not at an end."""
    taken = sorted(experiments.get(e).report_position for e in experiments.available())
    return next(p for p in range(taken[0] + 1, taken[-1] + 2) if p not in taken)


#: the registered experiments, and a free report position, read before any test adds one
KNOWN = experiments.available()
FREE = _free_position()


@pytest.fixture
def more_modules(tmp_path, monkeypatch):
    """A second folder of ``perfgrid.experiments`` for modules a test writes; the registry
    looks again with it, and once more without it afterwards."""
    caches = (experiments._modules, experiments._load, experiments._available,
              configschema._assembled)
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, str(tmp_path)])
    for cache in caches:
        cache.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    for path in tmp_path.iterdir():
        sys.modules.pop(f"perfgrid.experiments.{path.stem}", None)
    for cache in caches:
        cache.cache_clear()


def _experiment_module(name: str, position: int | None) -> str:
    declared = "" if position is None else f"    report_position = {position}\n"
    return (f"from perfgrid.experiments.base import Experiment\n\n\n"
            f"class Extra(Experiment):\n    name = {name!r}\n{declared}\n\n"
            f"EXPERIMENT = Extra()\n")


def _package(folder: Path, name: str, source: str) -> None:
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text(source)


def test_a_package_that_defines_experiment_is_one_in_its_place_and_a_helper_is_not(
        more_modules):
    _package(more_modules, "pg_extra", _experiment_module("pg_extra", FREE))
    (more_modules / "pg_helper.py").write_text("HELPED = True\n")
    before = [e for e in KNOWN if experiments.get(e).report_position < FREE]
    assert experiments.available() == [*before, "pg_extra", *KNOWN[len(before):]]
    assert before and len(before) < len(KNOWN)  # among the others, not at an end
    assert experiments.get("pg_extra").report_position == FREE
    with pytest.raises(KeyError, match=f"'pg_helper' is not one of {KNOWN[0]}, "):
        experiments.get("pg_helper")


#: file_read's report position, which another experiment may not take
HELD = experiments.get("file_read").report_position


@pytest.mark.parametrize(("source", "message"), [
    ("import no_such_package_here\n",
     r"perfgrid\.experiments\.pg_extra cannot be imported \(ModuleNotFoundError: No module"),
    (_experiment_module("pg_extra", None), r"Extra\.report_position .* is None; allowed: a whole"),
    (_experiment_module("pg_extra", HELD), f"file_read and pg_extra both have {HELD}|"
                                           f"pg_extra and file_read both have {HELD}"),
    (_experiment_module("extra", FREE),
     r"EXPERIMENT\.name is 'extra'; allowed: 'pg_extra'"),
    ("EXPERIMENT = object()\n", "EXPERIMENT is a object; allowed: an instance"),
])
def test_a_broken_experiment_module_stops_the_registry_naming_it(more_modules, source,
                                                                  message):
    _package(more_modules, "pg_extra", source)
    with pytest.raises(experiments.RegistryError, match=message):
        experiments.available()
    assert experiments.get("ring").name == "ring"  # a job of another experiment still runs


def test_an_experiment_in_a_lone_module_stops_the_registry_asking_for_a_package(more_modules):
    """An experiment is its package (analysis.py, schema.yaml beside it): a module that
    defines one is refused, not left out of the grid unnoticed."""
    (more_modules / "pg_extra.py").write_text(_experiment_module("pg_extra", FREE))
    with pytest.raises(experiments.RegistryError,
                       match=r"perfgrid\.experiments\.pg_extra defines EXPERIMENT in a "
                             r"module; allowed: a package, .*/pg_extra/"):
        experiments.available()


#: a new experiment's config section, with a definition of its own
EXTRA_SECTION = """\
type: object
additionalProperties: false
default: {}
properties:
  size: {$ref: "#/$defs/pg_extra_size", default: 3}
  runtimes: {$ref: "#/$defs/runtimes", default: [python]}
$defs:
  pg_extra_size: {type: integer, minimum: 1, description: members of the extra}
"""


def test_an_experiments_schema_yaml_is_its_section_of_the_assembled_schema(
        more_modules, tmp_path, monkeypatch):
    """A new package's schema.yaml joins the schema by itself: its section in report order,
    its name in the enum, its definitions beside the shared ones; the schema file Snakemake
    validates against is gone afterwards."""
    _package(more_modules, "pg_extra", _experiment_module("pg_extra", FREE))
    (more_modules / "pg_extra" / "schema.yaml").write_text(EXTRA_SECTION)
    schema = configschema.schema()
    assert schema["properties"]["experiments"]["items"]["enum"] == experiments.available()
    assert "pg_extra" in experiments.available()
    assert list(schema["properties"])[-len(experiments.available()):] == experiments.available()
    assert schema["$defs"]["pg_extra_size"]["minimum"] == 1
    assert "$defs" not in schema["properties"]["pg_extra"]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    config = {"experiments": ["pg_extra"], "pg_extra": {}}
    configschema.validate(config)
    assert config["pg_extra"] == {"size": 3, "runtimes": ["python"]}
    with pytest.raises(config_errors.ConfigError) as err:
        settings.validated({"pg_extra": {"size": 0}}, check_disk=False)
    assert str(err.value) == ("pg_extra.size: 0 is less than the minimum of 1; allowed: a whole "
                              "number without a decimal point >= 1 (members of the extra)")
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize(("section", "message"), [
    (None, r"pg_extra/schema\.yaml: the config section of experiment pg_extra cannot be read "
           r"\(FileNotFoundError"),
    ("- type: object\n", r"pg_extra/schema\.yaml: a list; allowed: the JSON schema of the "
                         r"config section pg_extra \(type: object\)"),
    ("type: object\n$defs:\n  bindings: {type: string}\n",
     r"pg_extra/schema\.yaml: \$defs\.bindings is defined already .*; allowed: a name of its "
     r"own, e\.g\. pg_extra_bindings"),
    ("type: object\nproperties: {size: [\n", r"pg_extra/schema\.yaml: the config section of "
                                              r"experiment pg_extra cannot be read \(Parser"),
])
def test_a_missing_or_clashing_schema_yaml_stops_the_schema_naming_its_file(
        more_modules, section, message):
    _package(more_modules, "pg_extra", _experiment_module("pg_extra", FREE))
    if section is not None:
        (more_modules / "pg_extra" / "schema.yaml").write_text(section)
    with pytest.raises(configschema.SchemaError, match=message):
        configschema.schema()


def test_a_fixtures_schema_file_is_its_section_after_the_shared_keys():
    """A fixture's config section comes from its own schema file, not the shared one, and
    stands after the shared keys and before the experiments' sections."""
    schema = configschema.schema()
    shared = yaml.safe_load(configschema.SHARED.read_text())
    names = [f.name for f in fixtures.all_kinds()]
    assert names == ["testfile"]
    assert not set(names) & set(shared["properties"])
    assert configschema.sections() == [*names, *experiments.available()]
    assert list(schema["properties"]) == [*shared["properties"], *names,
                                          *experiments.available()]
    for kind in fixtures.all_kinds():
        assert configschema.fragment_path(kind.name) == kind.schema_file
        assert kind.schema_file.parent == Path(inspect.getfile(type(kind))).parent  # beside it
        section = yaml.safe_load(kind.schema_file.read_text())
        section.pop("$defs", None)
        assert schema["properties"][kind.name] == section


def test_a_fixture_named_like_a_shared_key_or_an_experiment_stops_the_schema(
        more_modules, monkeypatch, tmp_path):
    class Clashing:
        name = "noise"
        schema_file = tmp_path / "noise.schema.yaml"

    Clashing.schema_file.write_text("type: object\n")
    monkeypatch.setattr(fixtures, "all_kinds", lambda: [Clashing()])
    configschema._assembled.cache_clear()
    with pytest.raises(configschema.SchemaError,
                       match=r"noise\.schema\.yaml: fixture noise takes the name of the "
                             r"shared key 'noise' of .*config\.schema\.yaml"):
        configschema.schema()
    Clashing.name = "ring"
    configschema._assembled.cache_clear()
    with pytest.raises(configschema.SchemaError,
                       match=r"ring/schema\.yaml: experiment ring takes the name of fixture "
                             r"ring \(.*noise\.schema\.yaml\)"):
        configschema.schema()


def _dry_run_jobs(output: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, resources and threads) of each job a dry run lists."""
    jobs: list[tuple[str, dict[str, str]]] = []
    for line in output.splitlines():
        if rule := re.fullmatch(r"(?:local)?rule (\w+):", line):
            jobs.append((rule[1], {}))
        elif jobs and (item := re.fullmatch(r"    (threads|resources): (.*)", line)):
            if item[1] == "threads":
                jobs[-1][1]["threads"] = item[2]
            else:
                jobs[-1][1].update(kv.split("=", 1) for kv in item[2].split(", "))
    return jobs


@pytest.mark.pipeline
def test_every_benchmark_rule_asks_slurm_for_a_whole_node_and_its_memory(tmp_path):
    """The benchmark rule declares a job's cluster resources, the profile names no experiment:
    a whole node, its threads as CPUs, and the memory its experiment asks for (file_read:
    the test file twice, plus 1000 MiB) or else the profile's default. The noise profile
    measures too: a whole node, and the most its pairs' experiments ask for."""
    profile_text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    assert not [e for e in experiments.available() if e in profile_text]
    default_mb = yaml.safe_load(profile_text)["default-resources"]["mem_mb"]
    quick = yaml.safe_load((REPO / "config" / "quick.yaml").read_text())
    config = write_config(tmp_path, {**quick, "results": str(tmp_path / "results")})
    work = tmp_path / "work"
    work.mkdir()
    # --cores: a dry run would count one core and cap every job's threads at it
    result = snakemake(work, "-n", "--cores", "3", "--profile", str(REPO / "profiles" / "slurm"),
                       config=config, timeout=120)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    size_mib = testfile.parse_size(quick["testfile"]["size"]) // 2**20
    seen = set()
    for rule, res in _dry_run_jobs(result.stdout):
        if rule not in [*experiments.available(), "noise_profile"]:
            assert "slurm_extra" not in res, rule
            continue
        seen.add(rule)
        assert res["slurm_extra"] == "'--exclusive'", (rule, res)
        assert res["cpus_per_task"] == res["threads"] == "3", (rule, res)
        # quick.yaml runs every experiment: the noise profile's pairs include file_read's
        wanted = (1000 + 2 * size_mib if rule in ("file_read", "noise_profile")
                  else default_mb)
        assert int(res["mem_mb"]) == wanted, (rule, res)
    assert seen == {*experiments.available(), "noise_profile"}


def test_every_experiment_declares_code_that_exists():
    src = REPO / "src" / "perfgrid"
    for name in experiments.available():
        for path in experiments.get(name).sources():
            assert (src / path).is_file(), (name, path)


@pytest.mark.parametrize("name", experiments.available())
def test_an_experiments_jobs_take_every_module_of_its_package_but_its_analysis(name):
    """Editing any module of ``experiments/<name>/`` but ``analysis.py`` reruns that
    experiment's jobs; editing its analysis reruns its plots and the report only."""
    package = REPO / "src" / "perfgrid" / "experiments" / name
    modules = {f"experiments/{name}/{p.name}" for p in package.glob("*.py")}
    analysis_file = f"experiments/{name}/analysis.py"
    assert {f"experiments/{name}/__init__.py", analysis_file} <= modules
    sources = set(experiments.get(name).sources())
    assert sources >= modules - {analysis_file}
    assert analysis_file not in sources


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
    points = planning.grid(config, name)
    assert {exp.runtime(p) for p in points} >= {"python"}
    for point in points:
        runtime = exp.runtime(point)
        options = jobs.options(exp, point, config, layout)
        inputs = jobs.inputs(exp, point, config, layout, "src/perfgrid")
        native = runtime == "native" and exp.native_program is not None
        beams = runtime == "erlang" and exp.erlang_module is not None
        assert ("binary" in options) == native == bool(inputs["binary"])
        assert ("beams" in options) == beams == bool(inputs["beams"])


def test_snakemake_reads_a_job_functions_parameters_once_not_per_call(monkeypatch):
    """Snakemake asks an input or params function's parameters on every call (some 7,500
    times in the full config's dry run); ``signature_once`` answers from the function."""
    import inspect

    from snakemake.common import get_function_params

    @jobs.signature_once
    def options(wildcards, attempt):
        return ""

    monkeypatch.setattr(inspect, "signature",
                        lambda *a, **k: pytest.fail("the signature was looked up again"))
    assert list(get_function_params(options)) == ["wildcards", "attempt"]
