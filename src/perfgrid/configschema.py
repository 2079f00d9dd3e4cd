"""The config schema, assembled: the shared part and each experiment's section.

``workflow/schemas/config.schema.yaml`` holds the keys every run shares and the
definitions (``$defs``) sections share (``measure``, ``workers``, ``runtimes``, ...);
each experiment's package holds its own section's JSON schema (``schema.yaml``, with
definitions of its own). The whole schema is that file with each registered
experiment's section added to its ``properties`` in report order, their definitions
added to its ``$defs``, and the ``experiments`` enum set to the registry's names, so
adding an experiment edits no shared schema.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfgrid import experiments
from perfgrid.experiments.base import SCHEMA_FILE
from perfgrid.paths import REPO

#: the shared part of the schema
SHARED = REPO / "workflow" / "schemas" / "config.schema.yaml"


class SchemaError(RuntimeError):
    """An experiment's schema fragment missing, unreadable, or clashing with another."""


def _load(path: Path) -> Any:
    import yaml

    # libyaml's loader where PyYAML has it: a fifth of the pure-Python one's time, and
    # this runs each time Snakemake parses the workflow
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader)


def fragment_path(name: str) -> Path:
    """Where experiment ``name``'s section schema lies: ``schema.yaml`` in its package."""
    return experiments.get(name).folder() / SCHEMA_FILE


def fragment(name: str) -> dict[str, Any]:
    """Experiment ``name``'s section schema as written (its own ``$defs`` still in it)."""
    import yaml

    path = fragment_path(name)
    try:
        found = _load(path)
    except (OSError, yaml.YAMLError) as err:
        raise SchemaError(f"{path}: the config section of experiment {name} cannot be "
                          f"read ({type(err).__name__}: {err}); every experiment's "
                          f"package holds one (docs/adding-an-experiment.md)") from err
    if not isinstance(found, dict) or found.get("type") != "object":
        raise SchemaError(f"{path}: a {type(found).__name__}; allowed: the JSON schema "
                          f"of the config section {name} (type: object)")
    return found


@functools.cache
def _assembled() -> dict[str, Any]:
    schema = _load(SHARED)
    names = experiments.available()
    schema["properties"]["experiments"]["items"]["enum"] = list(names)
    defs = schema.setdefault("$defs", {})
    for name in names:
        section = fragment(name)
        if name in schema["properties"]:
            raise SchemaError(f"{fragment_path(name)}: experiment {name} takes the name of "
                              f"the shared key {name!r} of {SHARED}; allowed: another name")
        for key, definition in section.pop("$defs", {}).items():
            if key in defs:
                raise SchemaError(f"{fragment_path(name)}: $defs.{key} is defined already "
                                  f"(in {SHARED} or another experiment's schema.yaml); "
                                  f"allowed: a name of its own, e.g. {name}_{key}")
            defs[key] = definition
        schema["properties"][name] = section
    return schema


def schema() -> dict[str, Any]:
    """The whole config schema (a copy: validating with defaults may not change it)."""
    return copy.deepcopy(_assembled())


@contextlib.contextmanager
def schema_file() -> Iterator[str]:
    """The whole schema in a temporary file, removed afterwards: Snakemake's ``validate``
    reads its schema from a path. JSON is YAML, and faster to write and read."""
    handle, path = tempfile.mkstemp(prefix="perfgrid-schema-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(_assembled(), out)
        yield path
    finally:
        os.unlink(path)


def validate(config: dict[str, Any]) -> None:
    """Snakemake's ``validate`` against the whole schema, filling in its defaults."""
    from snakemake.utils import validate as snakemake_validate

    with schema_file() as path:
        snakemake_validate(config, path)
