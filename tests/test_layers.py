"""perfgrid's modules import in layers: no import runs in a circle, and shared code reaches
an experiment's own modules only through the registry (perfgrid.experiments).

The imports are read from the source (``ast``), those inside functions too: a lazy import
still ties two modules together.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import perfgrid
from perfgrid import experiments

SRC = Path(perfgrid.__file__).resolve().parent


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
    assert set(order) == set(graph) and "perfgrid.bench" in order


def test_shared_modules_reach_experiments_only_through_the_registry():
    names = experiments.available()
    own = {name: (f"perfgrid.experiments.{name}", f"perfgrid.analysis.{name}") for name in names}

    def owner(module: str) -> str | None:
        return next((name for name, roots in own.items()
                     if any(module == r or module.startswith(f"{r}.") for r in roots)), None)

    wrong = sorted(f"{module} imports {target}" for module, targets in import_graph().items()
                   for target in targets
                   if owner(target) is not None and owner(target) != owner(module))
    assert wrong == []
    assert owner("perfgrid.experiments.http.load") == "http" and owner("perfgrid.bench") is None


def test_machine_json_names_the_tools_an_experiment_declares():
    """machine.json's tools, ab among them, as before perfgrid.machine asked the registry."""
    from perfgrid import machine

    assert list(machine.tools()) == [*machine.TOOL_VERSION, "erl", "ab"]
    assert list(experiments.get("http").tools()) == ["ab"]
    assert experiments.get("syscall").tools() == {}
