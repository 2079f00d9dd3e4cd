"""The config schema, assembled: the shared part, each fixture's section and each
experiment's.

``workflow/schemas/config.schema.yaml`` holds the keys every run shares and the
definitions (``$defs``) sections share (``measure``, ``workers``, ``runtimes``, ...);
each fixture (perfgrid.measure.fixtures) holds its own section's JSON schema in a file beside its
module (``Fixture.schema_file``), and each experiment's package its own
(``schema.yaml``, with definitions of its own). The whole schema is that file with each
fixture's section, then each registered experiment's in report order, added to its
``properties``, their definitions added to its ``$defs``, and the ``experiments`` enum
set to the registry's names, so adding an experiment or a fixture edits no shared schema.
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
from perfgrid.kit.paths import REPO
from perfgrid.measure import fixtures

#: the shared part of the schema
SHARED = REPO / "workflow" / "schemas" / "config.schema.yaml"


class SchemaError(RuntimeError):
    """A section's schema fragment missing, unreadable, or clashing with another."""


def _load(path: Path) -> Any:
    import yaml

    # libyaml's loader where PyYAML has it: a fifth of the pure-Python one's time, and
    # this runs each time Snakemake parses the workflow
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader)


def _sources() -> list[tuple[str, str, Path]]:
    """(whose, section name, schema file) of every section with a file of its own, in the
    schema's order: each fixture's (``fixture testfile``), then each experiment's."""
    return [*((f"fixture {f.name}", f.name, f.schema_file) for f in fixtures.all_kinds()),
            *((f"experiment {name}", name, experiments.get(name).folder() / SCHEMA_FILE)
              for name in experiments.available())]


def sections() -> list[str]:
    """The config sections with a schema file of their own, in the schema's order: each
    fixture's, then each experiment's in report order."""
    return [name for _, name, _ in _sources()]


def _source(name: str) -> tuple[str, str, Path]:
    for whose, section, path in _sources():
        if section == name:
            return whose, section, path
    raise KeyError(f"no config section {name!r} with a schema file; known: {sections()}")


def fragment_path(name: str) -> Path:
    """Where section ``name``'s schema lies: a fixture's ``schema_file``, an experiment's
    ``schema.yaml`` in its package."""
    return _source(name)[2]


def _read(whose: str, name: str, path: Path) -> dict[str, Any]:
    import yaml

    try:
        found = _load(path)
    except (OSError, yaml.YAMLError) as err:
        holder = ("every experiment's package holds one (docs/adding-an-experiment.md)"
                  if whose.startswith("experiment")
                  else "its schema_file (perfgrid.measure.fixtures)")
        raise SchemaError(f"{path}: the config section of {whose} cannot be read "
                          f"({type(err).__name__}: {err}); {holder}") from err
    if not isinstance(found, dict) or found.get("type") != "object":
        raise SchemaError(f"{path}: a {type(found).__name__}; allowed: the JSON schema "
                          f"of the config section {name} (type: object)")
    return found


@functools.cache
def _assembled() -> dict[str, Any]:
    schema = _load(SHARED)
    schema["properties"]["experiments"]["items"]["enum"] = list(experiments.available())
    defs = schema.setdefault("$defs", {})
    taken = {key: f"the shared key {key!r} of {SHARED}" for key in schema["properties"]}
    # fixtures' sections before the experiments': validation meets them in this order,
    # and the first error it meets is the one reported
    for whose, name, path in _sources():
        section = _read(whose, name, path)
        if name in taken:
            raise SchemaError(f"{path}: {whose} takes the name of {taken[name]}; allowed: "
                              f"another name")
        for key, definition in section.pop("$defs", {}).items():
            if key in defs:
                raise SchemaError(f"{path}: $defs.{key} is defined already (in {SHARED} or "
                                  f"another section's schema file); allowed: a name of its "
                                  f"own, e.g. {name}_{key}")
            defs[key] = definition
        schema["properties"][name] = section
        taken[name] = f"{whose} ({path})"
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
