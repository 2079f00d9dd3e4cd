"""The experiments perfgrid knows, found by looking rather than listed.

Every package here whose ``__init__.py`` defines ``EXPERIMENT`` (an :class:`Experiment`)
is one, named after its package; the rest (``base``, helpers) are not. An experiment is
the whole package: its workload (``__init__.py`` and the modules its jobs run), its
``analysis.py`` (perfgrid.analyse.analysis.module), its config section's ``schema.yaml``
(perfgrid.pipeline.configschema) and its programs' sources (``native/``, ``erlang/``). Their
order, in the report and every list, is their ``report_position``. Adding an experiment
is adding its package: no list here to edit.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from itertools import pairwise

from perfgrid.experiments.base import Case, Experiment, Point, Tool

__all__ = ["Case", "Experiment", "Point", "RegistryError", "available", "get", "packages",
           "tools"]


class RegistryError(RuntimeError):
    """A module here that cannot be imported, or an experiment that declares itself wrongly."""


def available() -> list[str]:
    """The experiments in this checkout, in report order."""
    return list(_available())


def get(name: str) -> Experiment:
    """The experiment object of module ``perfgrid.experiments.<name>``.

    Imports that module alone (a pyperf worker of one experiment loads no other), so a
    broken module elsewhere does not stop it; :func:`available` imports them all.
    """
    found = _load(name) if name in _modules() else None
    if found is None:
        raise KeyError(f"experiment: {name!r} is not one of {', '.join(available())}")
    return found


def tools() -> dict[str, Tool]:
    """The installed programs the experiments' jobs run (``Experiment.tools``), by name,
    in report order: machine.json records their versions, the archive's crate names them."""
    return {key: tool for name in available() for key, tool in get(name).tools().items()}


def packages() -> tuple[str, ...]:
    """The Python packages the experiments' jobs import that may be missing
    (``Experiment.packages``), each once, in report order: machine.json records their
    versions."""
    return tuple(dict.fromkeys(p for name in available() for p in get(name).packages))


@functools.cache
def _modules() -> frozenset[str]:
    """The modules and packages directly in this package (none imported)."""
    return frozenset(m.name for m in pkgutil.iter_modules(__path__))


@functools.cache
def _load(name: str) -> Experiment | None:
    """Module ``name``'s ``EXPERIMENT``, checked, or None for a module that defines none."""
    module_name = f"{__name__}.{name}"
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # an experiment must not vanish from the grid unnoticed
        raise RegistryError(f"{module_name} cannot be imported ({type(err).__name__}: {err}); "
                            f"every module in {__path__[0]} is looked at for an experiment"
                            ) from err
    experiment = getattr(module, "EXPERIMENT", None)
    if experiment is None:
        return None
    if not hasattr(module, "__path__"):
        raise RegistryError(f"{module_name} defines EXPERIMENT in a module; allowed: a "
                            f"package, {__path__[0]}/{name}/ (its __init__.py, analysis.py "
                            f"and schema.yaml; docs/adding-an-experiment.md)")
    if not isinstance(experiment, Experiment):
        raise RegistryError(f"{module_name}.EXPERIMENT is a {type(experiment).__name__}; "
                            f"allowed: an instance of perfgrid.experiments.Experiment")
    if getattr(experiment, "name", None) != name:
        raise RegistryError(f"{module_name}.EXPERIMENT.name is "
                            f"{getattr(experiment, 'name', None)!r}; allowed: {name!r}, "
                            f"its module's name (jobs find it by that name)")
    position = getattr(experiment, "report_position", None)
    if not isinstance(position, int) or isinstance(position, bool):
        raise RegistryError(f"{type(experiment).__qualname__}.report_position "
                            f"({module_name}) is {position!r}; allowed: a whole number, "
                            f"its place in the report (Experiment.report_position)")
    return experiment


@functools.cache
def _available() -> tuple[str, ...]:
    """Looked up once: the workflow asks for the experiments several times per job."""
    found = {name: exp for name in _modules() if (exp := _load(name)) is not None}
    order = sorted(found, key=lambda name: found[name].report_position)
    for first, second in pairwise(order):
        if found[first].report_position == found[second].report_position:
            raise RegistryError(f"report_position: {first} and {second} both have "
                                f"{found[first].report_position}; allowed: a different "
                                f"whole number each")
    return tuple(order)
