"""perfgrid's modules import in layers: no import runs in a circle, the harness never runs
the analysis, and shared code reaches an experiment's own modules only through the registry
(perfgrid.experiments); nor does shared code name an experiment, or a word only some
experiments own.

The imports are read from the source (``ast``), those inside functions too: a lazy import
still ties two modules together.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import yaml

import perfgrid
from perfgrid import experiments
from perfgrid.design import jobs
from perfgrid.design.codeinputs import code_inputs
from perfgrid.experiments.base import SCHEMA_FILE
from perfgrid.pipeline import configschema

SRC = Path(perfgrid.__file__).resolve().parent
REPO = SRC.parents[1]


def module_names() -> dict[str, Path]:
    """Every module of perfgrid by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = ("perfgrid", *path.relative_to(SRC).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(name: str, source: str, modules: set[str], package: bool = False) -> set[str]:
    """The perfgrid modules that module ``name`` (a package where ``package``) imports
    anywhere in ``source``, each with the packages above it that the import runs first
    (not those that hold ``name`` itself: they are running already)."""
    home = name if package else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per dot after the first
                above = home.split(".")[:len(home.split(".")) - node.level + 1]
                base = ".".join([*above, *([base] if base else [])])
            for alias in node.names:  # a submodule where one has that name, else the module
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else base)
    out = set()
    for target in targets & modules:
        parts = target.split(".")
        out |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)}
    return {t for t in out if t != name and not name.startswith(f"{t}.")}


def import_graph() -> dict[str, set[str]]:
    """Each perfgrid module -> the perfgrid modules it imports (:func:`imported`)."""
    modules = module_names()
    return {name: imported(name, path.read_text(), set(modules), path.name == "__init__.py")
            for name, path in modules.items()}


def test_the_graph_sees_imports_in_functions_relative_ones_and_the_packages_they_run():
    modules = {"perfgrid.a", "perfgrid.pkg", "perfgrid.pkg.b", "perfgrid.pkg.c"}
    lazy = "def f():\n    from perfgrid.pkg import b\nimport perfgrid.a\nimport os\n"
    assert imported("perfgrid.x", lazy, modules) == {"perfgrid.a", "perfgrid.pkg",
                                                     "perfgrid.pkg.b"}
    sibling = "from . import b\nfrom .b import name\nfrom perfgrid.pkg import c\n"
    assert imported("perfgrid.pkg.c", sibling, modules) == {"perfgrid.pkg.b"}
    assert imported("perfgrid.pkg", "from .b import name\n", modules, package=True) == {
        "perfgrid.pkg.b"}
    assert imported("perfgrid.a", "from perfgrid.pkg import name\n", modules) == {
        "perfgrid.pkg"}


def test_no_import_runs_in_a_circle():
    graph = import_graph()
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as err:
        raise AssertionError(f"import cycle: {' -> '.join(reversed(err.args[1]))}") from None
    assert set(order) == set(graph) and "perfgrid.measure.bench" in order


def reaches(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every perfgrid module that importing ``module`` may run, by way of any other."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_libraries_below_the_registry_stay_below_it():
    """The counters' library (its worker entry point is perfgrid.measure.counting_pass), the Erlang
    runner (its compile helper is the tests'), the topology (with the CPU limit of
    ``workers: auto``) and machine.json's snapshot import neither the config's settings nor,
    but for machine's lazy tool and package lists, the registry."""
    from perfgrid.kit import erlang

    graph = import_graph()
    for module in ("perfgrid.measure.counters", "perfgrid.kit.erlang", "perfgrid.kit.topology"):
        assert not reaches(graph, module) & {"perfgrid.experiments", "perfgrid.pipeline.settings",
                                             "perfgrid.design.jobs"}, module
    assert "perfgrid.pipeline.settings" not in reaches(graph, "perfgrid.measure.machine")
    assert reaches(graph, "perfgrid.kit.topology") == set()  # the floor: sysfs and /proc only
    assert "perfgrid.experiments" in graph["perfgrid.measure.counting_pass"]
    assert not hasattr(erlang, "compile_modules")


#: the folders of src/perfgrid, lowest first: each says when its code runs. A module imports
#: modules of its own folder and of those below it, but for :data:`BACK_ARROWS`.
LAYERS = ("kit", "experiments", "measure", "design", "analyse", "publish", "pipeline")
#: what a benchmark job may run: the kit, the workloads and the harness. Each module a
#: benchmark job imports is a code input of every benchmark job (perfgrid.design.codeinputs),
#: so an edit to any other (a docstring in the statistics) would rerun the whole measurement.
MEASUREMENT = ("kit", "experiments", "measure")
#: imports that point from a folder up to a higher one, each listed with its reason
BACK_ARROWS = {
    # a claim block runs its jobs as the plan's model has them (plan.json's one reader)
    ("perfgrid.measure.block", "perfgrid.design.model"),
    # the noise profile measures the plan's pairs as the model has them (plan.json's noise)
    ("perfgrid.measure.noiseprofile", "perfgrid.design.model"),
}
#: the design's model types, which measurement may read (a claim block reads its part of the
#: plan through them, perfgrid.measure.block): they run nothing else of the design
DESIGN_MODEL = frozenset({"perfgrid.design.model"})
#: the folders' own packages (their __init__ runs no module)
FOLDERS = {f"perfgrid.{folder}" for folder in LAYERS if folder != "experiments"}
#: the most lines of Python file_read's benchmark jobs may run (4,330 with the statistics)
FILE_READ_LINES = 3500


def layer(module: str) -> str | None:
    """The folder (:data:`LAYERS`) module ``module`` sits in; an experiment's analysis module
    is the analysis's. None for the package itself and its shipped records (``data``)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] == "data":
        return None
    if parts[1] == "experiments":
        return "analyse" if len(parts) > 3 and parts[3] == "analysis" else "experiments"
    return parts[1]


def back_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Each import (importer, imported) from a folder to a module above it in :data:`LAYERS`
    (a folder's own ``__init__``, which runs nothing, is no arrow)."""
    return {(module, target) for module, targets in graph.items() for target in targets
            if layer(module) and layer(target) and target.count(".") > 1
            and LAYERS.index(layer(target)) > LAYERS.index(layer(module))}


def test_every_module_sits_in_a_folder_that_says_when_it_runs():
    graph = import_graph()
    assert sorted(p.name for p in SRC.glob("*.py")) == ["__init__.py"]
    assert {layer(m) for m in graph} == {*LAYERS, None}
    assert layer("perfgrid.experiments.spawn.analysis") == "analyse"
    assert layer("perfgrid.experiments.spawn.chains") == "experiments"
    for folder in FOLDERS:  # a folder's __init__ runs no module
        assert graph[folder] == set(), folder


def test_the_import_drawing_runs_up_the_layers_with_at_most_4_arrows_back():
    graph = import_graph()
    assert back_arrows(graph) == BACK_ARROWS and len(BACK_ARROWS) <= 4
    drawn = {"perfgrid.kit.a": {"perfgrid.measure.b"}, "perfgrid.measure.b": set(),
             "perfgrid.pipeline.c": {"perfgrid.kit.a"}}
    assert back_arrows(drawn) == {("perfgrid.kit.a", "perfgrid.measure.b")}


def test_measurement_never_imports_the_analysis_what_publishes_it_the_config_or_the_pipeline():
    """The kit reaches only the kit; a workload only the kit and the registry; the harness
    none of analyse/, publish/ or pipeline/ (the config's settings among them), by way of no
    module, and the design only through :data:`DESIGN_MODEL`."""
    graph = import_graph()
    for module in graph:
        where = layer(module)
        if where not in MEASUREMENT:
            continue
        reached = reaches(graph, module) - FOLDERS  # a folder's __init__ runs nothing
        ran = {layer(t) for t in reached - DESIGN_MODEL} - {None}
        assert ran <= set(MEASUREMENT[:MEASUREMENT.index(where) + 1]), (module, ran)
        design = {t for t in reached if layer(t) == "design"}
        assert design <= (DESIGN_MODEL if where == "measure" else set()), (module, design)
    for model in DESIGN_MODEL:  # the model's own imports: the registry and the kit
        ran = {layer(t) for t in reaches(graph, model) - FOLDERS} - {None}
        assert ran <= {"kit", "experiments"}, (model, ran)
    assert "perfgrid.design.model" in graph["perfgrid.measure.block"]
    assert "perfgrid.design.model" in graph["perfgrid.measure.noiseprofile"]


def benchmark_code(name: str) -> dict[str, list[str]]:
    """The code of experiment ``name``'s benchmark jobs, as the workflow lists it
    (package-relative): a sweep job's (jobs.workload) and a claim block's (glue.block_inputs,
    which runs each point's sweep job's command in turn)."""
    def relative(paths: list[str]) -> list[str]:
        return [Path(p).relative_to(SRC).as_posix() for p in paths]

    return {"sweep": relative(jobs.workload(experiments.get(name), str(SRC))),
            "block": relative(code_inputs(str(SRC), "perfgrid.measure.block"))}


def test_no_benchmark_job_runs_the_statistics_the_analysis_or_the_pipeline():
    allowed = {"__init__.py", *(f"{f.split('.')[1]}/__init__.py" for f in FOLDERS),
               *(module_names()[m].relative_to(SRC).as_posix() for m in DESIGN_MODEL)}
    for name in experiments.available():
        code = benchmark_code(name)
        assert "measure/bench.py" in code["sweep"] and "measure/block.py" in code["block"]
        for job, files in code.items():
            other = [f for f in files if f.endswith(".py") and f not in allowed
                     and (f.split("/")[0] not in MEASUREMENT or f.endswith("/analysis.py"))]
            assert other == [], (name, job, other)
    assert "kit/interval.py" in benchmark_code("file_read")["sweep"]  # the interval core alone


def test_file_reads_benchmark_jobs_run_little_code():
    files = benchmark_code("file_read")["sweep"]
    lines = sum(len((SRC / f).read_text().splitlines()) for f in files if f.endswith(".py"))
    print(f"file_read's benchmark closure: {lines} lines of Python in {len(files)} files")
    assert lines <= FILE_READ_LINES


def test_shared_modules_reach_experiments_only_through_the_registry():
    names = experiments.available()
    own = {name: (f"perfgrid.experiments.{name}", f"perfgrid.analyse.analysis.{name}")
           for name in names}

    def owner(module: str) -> str | None:
        return next((name for name, roots in own.items()
                     if any(module == r or module.startswith(f"{r}.") for r in roots)), None)

    wrong = sorted(f"{module} imports {target}" for module, targets in import_graph().items()
                   for target in targets
                   if owner(target) is not None and owner(target) != owner(module))
    assert wrong == []
    assert owner("perfgrid.experiments.http.load") == "http"
    assert owner("perfgrid.measure.bench") is None


def test_what_the_snakefile_imports_leaves_scipy_out():
    """Every dry run parses the Snakefile: scipy (perfgrid.analyse.stats) there was ~0.1 s of the
    up-to-date dry run's ~2.2 s."""
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    code = "".join(f"import perfgrid{folder}.{name.strip()}\n"
                   for folder, names in re.findall(r"^from perfgrid(\.\w+)? import (.*)$",
                                                   common, re.M)
                   for name in names.split(",") if name.strip())
    code += ("import sys\nfrom perfgrid import experiments\n"
             "[experiments.get(name) for name in experiments.available()]\n"
             "assert 'perfgrid.design.plan' in sys.modules\n"
             "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'scipy'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert "glue" in code and done.stdout.strip() == "[]"


def test_machine_json_names_the_tools_an_experiment_declares():
    """machine.json's tools: cc and perf, erl, then those experiments declare (file_read's
    dd and fio, http's ab, ...), in report order."""
    from perfgrid.measure import machine

    declared = [key for name in experiments.available() for key in experiments.get(name).tools()]
    assert list(machine.tools()) == [*machine.TOOL_VERSION, "erl", *declared]
    assert {"dd", "fio", "ab"} <= set(declared)
    assert list(experiments.get("http").tools()) == ["ab"]
    assert list(experiments.get("file_read").tools()) == ["dd", "fio"]
    assert experiments.get("syscall").tools() == {}


def test_machine_json_names_the_packages_experiments_declare_each_once():
    """machine.json's packages: perfgrid's own, then those experiments declare (uvloop, by
    timers, ring and http), from the registry's one list."""
    from perfgrid.measure import machine

    users = [n for n in experiments.available() if "uvloop" in experiments.get(n).packages]
    assert {"timers", "ring", "http"} <= set(users)
    assert experiments.packages().count("uvloop") == 1
    assert machine.packages() == tuple(dict.fromkeys([*machine.PACKAGES,
                                                      *experiments.packages()]))


# --- shared code names no experiment ----------------------------------------------------

#: words of an experiment's vocabulary that shared code may still use, each for its reason
ALLOWED = {
    "python": "a runtime (base.RUNTIMES), shared by all; syscall's variants are named after them",
    "native": "a runtime (base.RUNTIMES), shared by all",
    "erlang": "a runtime (base.RUNTIMES), shared by all",
    "on": "YAML's boolean spelled out (http keepalive, timers gc) and plain English",
    "off": "YAML's boolean spelled out (http keepalive, timers gc) and plain English",
    "auto": "the shared value of workers (workers: auto)",
    "read": "plain English and Python's (os.read, a file's read); file_read's variant too",
    "whole": "plain English; file_read's variant too",
    "thread": "plain English and Python's (threading); a variant of spawn and ring too",
    "total": "plain English, a sum's usual name; spawn's axis too",
    "rounds": "the measure's rounds (measure.claims.rounds, planning.rounds_of), shared; "
              "timers' axis has the same word",
}
#: shared files that may use some such words, each for its reason
EXEMPT = {
    ("src/perfgrid/kit/eventloops.py", "asyncio"): "the event loops module: one helper for the "
    "loops that timers, ring and http offer as variants, named after the loops it makes",
    ("src/perfgrid/kit/eventloops.py", "uvloop"): "as asyncio",
    ("src/perfgrid/kit/pagecache.py", "cache"): "the page-cache helper (file_read's cache axis is "
    "its states): a helper any workload may use, kept outside file_read's package",
    ("src/perfgrid/kit/pagecache.py", "warm"): "as cache",
    ("src/perfgrid/kit/pagecache.py", "cold"): "as cache",
    ("src/perfgrid/kit/topology.py", "cache"): "sysfs's cpu*/cache folder (the L3 groups)",
    ("workflow/rules/common.smk", "gc"): "Python's gc module (gc.freeze), not timers' gc axis",
}
#: a word's characters: a word is found only where neither side continues it
WORD = r"[\w-]"
URL = re.compile(r"[a-z]+://\S*")


def enums(node: object) -> Iterator[str]:
    """Every string of every ``enum`` in a (part of a) JSON schema."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from (v for v in value if isinstance(v, str)) if key == "enum" else enums(value)
    elif isinstance(node, list):
        for item in node:
            yield from enums(item)


def vocabulary() -> dict[str, set[str]]:
    """Each word only some experiments own -> those experiments, from the registry: their
    names, their variants (declared, and every enum of their schema.yaml: the values of
    their axes) and their axes but those every experiment has or the shared schema defines
    (variant; workers, binding); less :data:`ALLOWED`."""
    names = experiments.available()
    shared = set(yaml.safe_load(configschema.SHARED.read_text())["$defs"])
    owners: dict[str, set[str]] = {}
    for name in names:
        exp = experiments.get(name)
        axes = {a for a in exp.axes if {a, f"{a}s"}.isdisjoint(shared)
                and not all(a in experiments.get(n).axes for n in names)}
        values = {*exp.native_variants, *exp.erlang_variants, *exp.reference_variants,
                  *enums(yaml.safe_load((exp.folder() / SCHEMA_FILE).read_text()))}
        for word in {name, *axes, *values}:
            owners.setdefault(word, set()).add(name)
    return {w: o for w, o in owners.items() if w not in ALLOWED}


def shared_files() -> list[Path]:
    """Every file of shared code: perfgrid's modules outside the experiments' packages, the
    Snakefile and rule files, and the report's templates."""
    packages = [experiments.get(n).folder() for n in experiments.available()]
    modules = [p for p in sorted(SRC.rglob("*.py"))
               if not any(p.is_relative_to(folder) for folder in packages)]
    return [*modules, REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk")),
            *sorted((SRC / "templates").iterdir())]


def named(source: str, words: set[str]) -> Iterator[tuple[int, str]]:
    """(line, word) for each of ``words`` that ``source`` (Python, a rule file's, or a
    template's block) names: as a name (not an attribute of another's object, as
    ``functools.cache``), or in a string without spaces ("dd", "warm|cold"). Comments and
    prose (a string with spaces: messages, docstrings) are words for a reader, not names."""
    pattern = re.compile(rf"(?<!{WORD})({'|'.join(map(re.escape, sorted(words)))})(?!{WORD})")
    strings = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    previous = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in words and not (
                previous is not None and previous.string == "."):
            yield token.start[0], token.string
        elif token.type in strings and not re.search(r"\s", text := URL.sub("", token.string)):
            yield from ((token.start[0], m.group(1)) for m in pattern.finditer(text))
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token


def template_code(text: str) -> Iterator[tuple[int, str]]:
    """(line, code) of each ``{{ }}`` and ``{% %}`` block of a Jinja2 template."""
    for match in re.finditer(r"\{([{%])-?(.*?)-?[}%]\}", text, re.S):
        yield text.count("\n", 0, match.start()) + 1, " ".join(match.group(2).split())


def names_in(path: Path, words: set[str]) -> list[tuple[int, str]]:
    """(line, word) for each of ``words`` that the shared file at ``path`` names."""
    text = path.read_text()
    if path.parent.name != "templates":
        return list(named(text, words))
    return [(line, word) for line, code in template_code(text)
            for _, word in named(code, words)]


def test_the_guard_reads_names_and_strings_not_prose():
    words = {"dd", "cache", "uvloop", "http"}
    source = ('import uvloop\nimport functools\n@functools.cache\ndef f(cache):\n'
              '    """Reads with dd, in prose."""\n'
              '    return {"x": "warm|dd", "u": "http://example.org", "m": "no cache here"}'
              '  # dd\n')
    assert list(named(source, words)) == [(1, "uvloop"), (4, "cache"), (6, "dd")]
    template = "<p>dd reads</p>\n{% if row.variant == 'dd' %}\n{{ cache | e }}{% endif %}"
    assert list(template_code(template)) == [(2, "if row.variant == 'dd'"), (3, "cache | e"),
                                             (3, "endif")]
    vocab = vocabulary()
    assert {"file_read", "http", "dd", "fio", "ab", "uvloop", "readinto", "block_size",
            "cache", "concurrency", "tasks", "warm"} <= set(vocab)
    assert not {"variant", "workers", "binding", "python", "native", "erlang"} & set(vocab)
    assert vocab["uvloop"] >= {"http", "ring", "timers"}


def test_shared_code_names_no_experiment_nor_a_word_only_some_experiments_own():
    """Shared code asks the registry: an experiment's name, its variants and values and its
    own axes are spelled in its package only (docs/adding-an-experiment.md), but for the
    words of :data:`ALLOWED` and the files of :data:`EXEMPT`, each with its reason."""
    vocab = vocabulary()
    found = []
    for path in shared_files():
        where = path.relative_to(REPO).as_posix()
        for line, word in names_in(path, set(vocab)):
            if (where, word) not in EXEMPT:
                found.append(f"{where}:{line}: {word!r} (of {', '.join(sorted(vocab[word]))})")
    assert not found, ("shared code names what an experiment should declare (an attribute "
                       "of its Experiment, asked through the registry):\n" + "\n".join(found))
    unused = [key for key in EXEMPT
              if key[1] not in {w for _, w in names_in(REPO / key[0], set(vocab))}]
    assert not unused, f"exemptions no longer needed: {unused}"


# --- README's Layout names every module ---------------------------------------------------


def readme_layout() -> str:
    """The code block of README.md's Layout section."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def test_readmes_layout_names_every_module_and_no_missing_one():
    """Each folder of src/perfgrid has its line in README's Layout, ``src/perfgrid/FOLDER/``,
    and each module and package in it a line below that (``  NAME``) or a mention beside
    one; each path the Layout names exists."""
    layout = readme_layout()
    sections = re.split(r"^(src/perfgrid/\w+/)", layout, flags=re.M)
    under = dict(zip(sections[1::2], sections[2::2], strict=True))
    missing = []
    for folder in set(LAYERS) - {"experiments"}:
        text = under.get(f"src/perfgrid/{folder}/", "")
        names = [p.name for p in (SRC / folder).glob("*.py") if p.name != "__init__.py"]
        names += [f"{p.name}/" for p in (SRC / folder).iterdir() if (p / "__init__.py").is_file()]
        missing += [f"{folder}/{n}" for n in names
                    if not re.search(rf"(?<![\w.]){re.escape(n)}", text)]
        listed = re.findall(r"^  (\S+)", text, re.M)
        missing += [f"{folder}/{n} (listed, not there)" for n in listed
                    if not (SRC / folder / n).exists()]
    assert "interval.py" in under["src/perfgrid/kit/"] and len(under) == len(LAYERS) + 1
    assert not missing, f"README.md's Layout is wrong on: {missing}"
    listed = re.findall(r"^(src/perfgrid/\S+|workflow/\S+)", layout, re.M)
    assert [p for p in listed if not (REPO / p).exists()] == []
