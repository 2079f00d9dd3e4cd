"""The code a job runs, found by reading its imports: each rule's code inputs.

A job runs a few modules of this package (``python -m perfgrid.pipeline.cli plots`` runs
``perfgrid.pipeline.cli``'s ``_plots``, which imports perfgrid.publish.plots, which imports the
experiment's analysis by name). :func:`code_inputs` follows their ``import`` statements,
those inside functions too (this code imports lazily), through every module of the
package they reach, and lists those modules' files, with the data files they name
(a template, a ``claims.yaml``). Nothing is imported: the source is parsed (:mod:`ast`),
so the files listed are those of the tree the workflow runs, not of the installed
package. Imports of other packages (the standard library, pandas) are not followed, and
imports by name (``importlib.import_module(f"...{name}...")``) are not seen: a job's
roots name such modules (an experiment's analysis, its workload) themselves.

A root is a module (``perfgrid.publish.plots``: its whole file) or a module and one function
(``perfgrid.pipeline.cli:_plots``: the module's top level and that function only, for an entry
point whose other commands import the rest of the package).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

#: what a data file a module names looks like: a bare file name with one of these suffixes
DATA_NAME = re.compile(r"[\w.-]+\.(?:j2|ya?ml|csv|json)")


def code_inputs(src: str | Path, *roots: str) -> list[str]:
    """The files (``src``-prefixed, sorted) of the import closure of ``roots`` within the
    package at ``src`` (``src/perfgrid`` as the workflow sees it): every module reached and
    its parent packages' ``__init__.py``, and the data files those modules name."""
    return list(_listed(str(src), tuple(sorted(set(roots)))))


@functools.cache
def _listed(src: str, roots: tuple[str, ...]) -> tuple[str, ...]:
    """:func:`code_inputs` once per job kind: Snakemake asks for each of ~1,000 jobs."""
    return tuple(f"{src}/{rel}" for rel in _closure(src, roots))


@functools.cache
def _closure(src: str, roots: tuple[str, ...]) -> tuple[str, ...]:
    """The closure's files relative to ``src``, sorted."""
    package = Path(src)
    name = package.name
    seen: set[str] = set()  # modules (and module:function roots) read
    files: dict[str, str] = {}  # file -> module name
    todo: list[tuple[str, str | None]] = []
    for root in roots:
        module, _, function = root.partition(":")
        todo.append((module, function or None))
    while todo:
        module, function = todo.pop()
        for found in _with_parents(module, name):
            rel = _module_file(src, found)
            if rel is None:
                continue
            whole = found != module or function is None
            key = found if whole else f"{found}:{function}"
            if key in seen or found in seen:
                continue
            seen.add(key)
            files[rel] = found
            todo += [(m, None) for m in _imports(src, rel, found, None if whole else function)]
    return tuple(sorted({*files, *_data_files(src, files)}))


def _with_parents(module: str, name: str) -> list[str]:
    """``module`` and the packages above it within package ``name``, outermost first;
    nothing for a module outside it."""
    parts = module.split(".")
    if parts[0] != name:
        return []
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


@functools.cache
def _module_file(src: str, module: str) -> str | None:
    """``module``'s file relative to ``src``, or None where it is no module of the package."""
    parts = module.split(".")[1:]
    base = Path(src).joinpath(*parts)
    if (base / "__init__.py").is_file():
        return Path(*parts, "__init__.py").as_posix()
    if parts and base.with_suffix(".py").is_file():
        return Path(*parts[:-1], f"{parts[-1]}.py").as_posix()
    return None


@functools.cache
def _read(src: str, rel: str, module: str) -> tuple[dict[str | None, tuple[str, ...]],
                                                     frozenset[str]]:
    """What module ``module`` (file ``rel``) imports of any package, by where: at its top
    level (None) and in each of its top-level functions (by name); and the data file
    names it quotes (:data:`DATA_NAME`). Parsed once per file, since several jobs'
    closures share most modules; only statements are visited (an import is one), not
    the expressions in them. Imports for type checkers only (``if TYPE_CHECKING:``) are
    left out."""
    text = Path(src, rel).read_bytes()
    tree = ast.parse(text, filename=rel)
    here = module if rel.endswith("__init__.py") else module.rpartition(".")[0]
    scopes: dict[str | None, list[str]] = {None: []}
    stack: list[tuple[ast.stmt, str | None]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scopes[node.name] = []
            stack.append((node, node.name))
        else:
            stack.append((node, None))
    while stack:
        node, scope = stack.pop()
        if isinstance(node, ast.Import):
            scopes[scope] += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, here)
            if base is not None:
                # ``from pkg import name``: name may be a submodule
                scopes[scope] += [base, *(f"{base}.{alias.name}" for alias in node.names
                                          if alias.name != "*")]
        elif isinstance(node, ast.If) and _type_checking(node.test):
            stack += [(child, scope) for child in node.orelse]
        else:
            stack += [(child, scope) for child in _statements(node)]
    names = frozenset(m.group(1) for m in _QUOTED.finditer(text.decode()))
    return {k: tuple(v) for k, v in scopes.items()}, names


#: a data file's name in quotes, as a module that opens it spells it
_QUOTED = re.compile(rf"""["']({DATA_NAME.pattern})["']""")


def _statements(node: ast.stmt) -> list[ast.stmt]:
    """The statements directly inside ``node`` (a body, an else, a handler, a case)."""
    out: list[ast.stmt] = []
    for field in ("body", "orelse", "finalbody"):
        out += getattr(node, field, ())
    for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
        out += part.body
    return out


def _imports(src: str, rel: str, module: str, function: str | None) -> list[str]:
    """The modules ``module`` (file ``rel``) imports anywhere, or, with ``function``, at
    its top level and in that function."""
    scopes, _ = _read(src, rel, module)
    if function is None:
        return [m for found in scopes.values() for m in found]
    return [*scopes[None], *scopes.get(function, ())]


def _type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _absolute(node: ast.ImportFrom, here: str) -> str | None:
    """The module a ``from ... import`` names, made absolute (``here``: the package the
    importing module sits in)."""
    if node.level == 0:
        return node.module
    parts = here.split(".")
    if node.level - 1 >= len(parts):
        return None
    base = ".".join(parts[:len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def _data_files(src: str, modules: dict[str, str]) -> set[str]:
    """The data files the ``modules`` (file -> module name) name (a string constant that
    is a file name, see :data:`DATA_NAME`), looked for in the modules' own folders and in
    each folder directly under the package (``templates/``, ``data/``)."""
    package = Path(src)
    folders = {Path(rel).parent for rel in modules} | set(_subfolders(src))
    names = {n for rel, module in modules.items() for n in _read(src, rel, module)[1]}
    return {(folder / n).as_posix() for folder in folders for n in names
            if (package / folder / n).is_file()}


@functools.cache
def _subfolders(src: str) -> tuple[Path, ...]:
    package = Path(src)
    return tuple(p.relative_to(package) for p in package.iterdir()
                 if p.is_dir() and p.name != "__pycache__")
