"""The experiments perfgrid knows, one module each, found by name."""

from __future__ import annotations

import functools
import importlib
import pkgutil

from perfgrid.experiments.base import Case, Experiment, Point

__all__ = ["Case", "Experiment", "Point", "ALL", "get"]

#: experiment names in report order; a module of that name defines EXPERIMENT
ALL = ("spawn", "file_read", "syscall", "timers", "ring", "http")


def available() -> list[str]:
    """The experiments whose module exists in this checkout, in report order."""
    return list(_available())


@functools.cache
def _available() -> tuple[str, ...]:
    """Looked up once: the workflow asks for every job's experiment several times."""
    present = {m.name for m in pkgutil.iter_modules(__path__)}
    return tuple(name for name in ALL if name in present)


def get(name: str) -> Experiment:
    """The experiment object of module ``perfgrid.experiments.<name>``."""
    if name not in _available():
        raise KeyError(f"experiment: {name!r} is not one of {', '.join(available())}")
    return importlib.import_module(f"perfgrid.experiments.{name}").EXPERIMENT
