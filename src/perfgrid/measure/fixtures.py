"""Fixtures: input data files made before the jobs of the experiments that declare them.

An experiment names the fixtures its jobs read (:attr:`Experiment.fixtures`), as a
benchopt solver names its datasets; shared code asks :func:`needed` which ones the
enabled experiments need and handles each alike: its config section (the top-level key
of its name; its JSON schema, :attr:`Fixture.schema_file`, joins the config schema as an
experiment's ``schema.yaml`` does), its file (by default in the result set's data
folder), the rule of its name that makes the file or checks the one there and writes a
ready note the jobs wait for, its sidecar facts (``<path>.json``) that the report
states, and its file system that machine.json records. One kind exists today: the
random test file (:mod:`perfgrid.kit.testfile`).

The data file is no declared output of its rule: Snakemake deletes the outputs of a failed
job and temp() outputs once used, and the file at ``<fixture>.path`` may be a file perfgrid
did not create. The job generates it where nothing is (linked into place, never
replacing), or checks the one perfgrid generated there before (sidecar and SHA-256), and
then writes the ready note (a temp() output, made again in seconds whenever a benchmark
needs the file). It runs alone on the machine, like a benchmark: its generation speed is
recorded.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, ClassVar, Protocol


class Fixture(Protocol):
    """A kind of input file; its name is its config section, rule, command and file stem."""

    name: ClassVar[str]
    #: what it is, in words ("test file")
    title: ClassVar[str]
    #: its file in the result set's data folder when ``<name>.path`` is not set
    file_name: ClassVar[str]
    #: the report's provenance key for the line on its facts
    provenance_key: ClassVar[str]
    #: what ``perfgrid <name>`` does (its command-line help)
    help: ClassVar[str]
    #: its config section's JSON schema (YAML), the one place its keys are described
    schema_file: ClassVar[Path]

    def settle(self, section: dict[str, Any], default_path: Path) -> None:
        """Fill in its section's derived values, ``path`` among them; raise ValueError."""
        ...

    def check(self, section: dict[str, Any]) -> None:
        """Before any job: the file already at its path, and free space; raise ValueError."""
        ...

    def make_args(self, section: dict[str, Any]) -> str:
        """Its command's options (besides ``--record``, the path and the ready note)."""
        ...

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its command's arguments: ``path``, ``ready``, ``--record`` and its own."""
        ...

    def make(self, args: argparse.Namespace) -> None:
        """Make the file at ``args.path`` (or check the one there) and write ``args.ready``."""
        ...

    def remove_generated(self, record: Path, since: float) -> bool:
        """Remove the file generated in this run at its default path, if still that file."""
        ...

    def provenance(self, facts: dict[str, Any]) -> str:
        """The report's line on the file, from its sidecar facts."""
        ...


def all_kinds() -> list[Fixture]:
    """Every kind of fixture: its section is settled whether or not a job reads it."""
    from perfgrid.kit import testfile

    return [testfile.FIXTURE]


def get(name: str) -> Fixture:
    """The fixture named ``name``; KeyError names the known ones."""
    found = {f.name: f for f in all_kinds()}
    if name not in found:
        raise KeyError(f"no fixture {name!r}; known: {sorted(found)}")
    return found[name]


def needed(cfg: dict[str, Any]) -> list[Fixture]:
    """The fixtures the enabled experiments declare, in :func:`all_kinds` order."""
    from perfgrid import experiments

    names = {n for e in cfg["experiments"] for n in experiments.get(e).fixtures}
    return [f for f in all_kinds() if f.name in names]


def facts_file(cfg: dict[str, Any], fixture: Fixture) -> str:
    """Its sidecar facts beside the file at its path: ``<path>.json``."""
    return cfg[fixture.name]["path"] + ".json"
