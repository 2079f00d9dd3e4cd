"""The effective configuration: the validated config plus what follows from it.

The JSON schema (perfgrid.pipeline.configschema) checks types, ranges and names, its errors
worded by perfgrid.pipeline.config_errors; this module checks what a schema cannot (sizes in
strings, paths that would clobber the repository or collide with the pipeline's own
folders, a file already at a fixture's (perfgrid.measure.fixtures) or the http database's path
that perfgrid did not create, free disk space, what only the grid shows) and fills in derived values
(``workers: auto``'s counts among them); perfgrid.design.planning makes the jobs of the result.
Every error names the config key and what is allowed, is raised before any job runs,
and writes nothing: not even a folder, so a dry run leaves the disk as it found it.
"""

from __future__ import annotations

import copy
import os
import re
import socket
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from perfgrid import experiments
from perfgrid.design.planning import grid
from perfgrid.kit import binding, topology
from perfgrid.kit.paths import REPO, RESERVED_NAMES, SOURCE_DIRS, Layout
from perfgrid.measure import fixtures
from perfgrid.pipeline import configschema
from perfgrid.pipeline.config_errors import (
    ConfigError,
    brief,
    check_shape,
    check_strict,
    schema_message,
)

#: the CPU limit of ``workers: auto`` lives beside the topology (perfgrid.kit.topology)
AUTO_CPUS_ENV = topology.AUTO_CPUS_ENV
AUTO_CPUS_SOURCE_ENV = topology.AUTO_CPUS_SOURCE_ENV
MAX_AUTO_CPUS = topology.MAX_AUTO_CPUS


def validated(config: dict[str, Any], check_disk: bool = True) -> dict[str, Any]:
    """The whole check, as the workflow runs it: size, schema (filling in defaults), rest.

    Raises ConfigError with one short message naming the key and what is
    allowed; ``config`` gets the schema's defaults, as Snakemake's validate does.
    """
    from snakemake.exceptions import WorkflowError

    check_shape(config)  # first: an alias bomb must not reach the schema check
    try:
        configschema.validate(config)
    except WorkflowError as err:
        cause = err.__cause__ or err.__context__  # the jsonschema ValidationError
        if hasattr(cause, "absolute_path"):
            raise ConfigError(schema_message(cause)) from None
        raise ConfigError(brief(str(err))) from None
    # the config as used (config.used.yaml) names the counts auto stood for on this machine
    resolve_auto(config)
    return effective(config, check_disk)


def auto_cpu_limit(environ: Mapping[str, str] | None = None,
                   allowed: Iterable[int] | None = None,
                   proc: Path = Path("/proc/self/cgroup"),
                   cgroup_root: Path = Path("/sys/fs/cgroup")) -> tuple[int, str]:
    """The CPU count ``workers: auto`` is built for, and what set it
    (:func:`topology.cpu_limit`); raises ConfigError for a bad ``PERFGRID_AUTO_CPUS``."""
    try:
        return topology.cpu_limit(environ, allowed, proc, cgroup_root)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def auto_cpus() -> int:
    """The CPU count ``workers: auto`` is built for (:func:`auto_cpu_limit`)."""
    return auto_cpu_limit()[0]


def export_auto_cpus(environ: MutableMapping[str, str] | None = None) -> int:
    """Put the CPU count of ``workers: auto`` and what set it into ``environ``: a job that
    parses the workflow again (on a cluster node) builds the same grid, and machine.json
    says what set the count. Returns the count; raises ConfigError for a bad variable."""
    environ = os.environ if environ is None else environ
    cpus, source = auto_cpu_limit(environ)
    environ[AUTO_CPUS_ENV], environ[AUTO_CPUS_SOURCE_ENV] = str(cpus), source
    return cpus


def resolve_auto(config: dict[str, Any]) -> dict[str, list[int]]:
    """Replace every ``auto`` of a worker axis in ``config`` by its counts, in place.

    Worker axes: each experiment's ``workers``, its ``erlang.workers`` and each
    ``extra_grids[i].workers``; auto starts at the experiment's ``min_workers`` (a ring
    needs two members), an Erlang VM's at one scheduler. Returns the resolved keys and
    their counts.
    """
    done: dict[str, list[int]] = {}
    cpus: int | None = None
    for name in experiments.available():
        section = config.get(name)
        if not isinstance(section, dict):
            continue
        least = experiments.get(name).min_workers
        holders = [(name, section, least)]
        if isinstance(section.get("erlang"), dict):
            holders.append((f"{name}.erlang", section["erlang"], 1))
        holders += [(f"{name}.extra_grids[{i}]", grid, least)
                    for i, grid in enumerate(section.get("extra_grids") or [])
                    if isinstance(grid, dict)]
        for key, holder, minimum in holders:
            value = holder.get("workers")
            items = value if isinstance(value, list) else [value]
            if "auto" not in items:
                continue
            cpus = auto_cpus() if cpus is None else cpus
            counts = {c for item in items
                      for c in (binding.auto_workers(cpus, minimum) if item == "auto"
                                else [item])}
            holder["workers"] = done[f"{key}.workers"] = sorted(counts)
    return done


def effective(config: dict[str, Any], check_disk: bool = True) -> dict[str, Any]:
    """The config with derived values filled in; raises ConfigError, writes nothing.

    ``check_disk`` also looks at the disk: the file already at the path of a fixture the
    enabled experiments need (and at any other path a job writes,
    ``Experiment.check_files``), free space, a writable
    results folder. A job that works the grid out again (rule
    skipped, while a fixture's job may be writing its file) passes False.
    """
    check_shape(config)
    check_strict(config)
    cfg = copy.deepcopy(config)
    resolve_auto(cfg)
    cfg["host"] = cfg.get("host") or socket.gethostname().split(".")[0]
    _check_host(cfg["host"])
    known = experiments.available()
    chosen = cfg.get("experiments") or known
    unknown = [e for e in chosen if e not in known]
    if unknown:
        raise ConfigError(f"experiments: {unknown} not among the experiments here: {known}")
    cfg["experiments"] = [e for e in known if e in chosen]

    results = str(cfg.get("results", "results"))
    _not_an_option(results, "results")
    layout = Layout.for_host(cfg["host"], results)
    _outside_sources(str(layout.root), "results")
    for fixture in fixtures.all_kinds():  # derived values, and the path where unset
        section = cfg.setdefault(fixture.name, {})
        try:
            fixture.settle(section, layout.fixture_default(fixture.file_name))
        except ValueError as err:
            raise ConfigError(str(err)) from None
        _not_an_option(section["path"], f"{fixture.name}.path")
        _outside_sources(section["path"], f"{fixture.name}.path")
    for name in known:  # files an experiment's jobs write (http.database)
        for key in experiments.get(name).path_keys:
            path = (cfg.get(name) or {}).get(key)
            if path:
                _not_an_option(path, f"{name}.{key}")
                _outside_sources(path, f"{name}.{key}")
    for fixture in fixtures.needed(cfg) if check_disk else ():
        try:  # the file already at its path, and free space for it
            fixture.check(cfg[fixture.name])
        except ValueError as err:
            raise ConfigError(str(err)) from None
    for name in cfg["experiments"] if check_disk else ():
        try:  # a file at a path its jobs write that perfgrid did not create (http.database)
            experiments.get(name).check_files(cfg.get(name) or {}, layout)
        except ValueError as err:
            raise ConfigError(brief(str(err))) from None

    for name in cfg["experiments"]:
        section = cfg.setdefault(name, {})
        common, own = cfg.get("measure", {}), section.get("measure") or {}
        section["measure"] = {**common, **own}
        if "claims" in common or "claims" in own:  # claims too, key by key
            section["measure"]["claims"] = {**(common.get("claims") or {}),
                                            **(own.get("claims") or {})}
        _check_cap(section["measure"], f"{name}.measure")
    for name in cfg["experiments"]:
        try:  # what only the grid shows (http concurrency above requests, ...)
            grid(cfg, name)
        except (ValueError, KeyError, TypeError) as err:
            message = err.args[0] if isinstance(err, KeyError) and err.args else err
            raise ConfigError(brief(str(message))) from None
    if check_disk:
        _writable(layout.root, "results")
    return cfg


def _check_cap(measure: dict[str, Any], key: str) -> None:
    """Adaptive repetition needs a visible hard cap: target_ci without max_seconds is refused."""
    claims = {**measure, **(measure.get("claims") or {})}
    for where, m in ((key, measure), (f"{key}.claims", claims)):
        if m.get("target_ci") is not None and m.get("max_seconds") is None:
            raise ConfigError(f"{where}.max_seconds: null while target_ci is "
                              f"{m['target_ci']}; allowed: a number of seconds from 1 to "
                              f"86400 (the hard cap on one point's measuring time)")


def _check_host(host: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", host):
        raise ConfigError(f"host: {host!r} cannot name a folder; allowed: 1 to 63 letters, "
                          f"digits, '.', '_' or '-', starting with a letter or digit")
    if host in RESERVED_NAMES:
        raise ConfigError(f"host: {host!r} is a folder the pipeline itself uses under "
                          f"results/ ({', '.join(RESERVED_NAMES)}); choose another name")


def _not_an_option(path: str, key: str) -> None:
    if path.startswith("-"):
        raise ConfigError(f"{key}: {path!r} begins with '-' and would read as an option on a "
                          f"command line; allowed: a path not beginning with '-' "
                          f"(write ./{path} if you mean it)")


def _writable(folder: Path, key: str) -> None:
    """Raise unless files can be created in ``folder``; creates nothing.

    The nearest existing folder on the way must be a writable, searchable
    directory; the jobs make the rest.
    """
    probe = Path(folder).absolute()
    while not os.path.lexists(probe):
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{key}: cannot write results to {folder}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}: cannot write results to {folder}: {probe} is not writable")


def _outside_sources(path: str, key: str) -> None:
    """Raise if ``path`` lies in (or would hold) one of the repository's source folders."""
    resolved = Path(path).resolve()
    for folder in SOURCE_DIRS:
        source = REPO / folder
        if resolved.is_relative_to(source) or source.is_relative_to(resolved):
            raise ConfigError(
                f"{key}: {path} lies inside the source folder {folder}/ or holds it; "
                f"put generated data under results/ or outside the repository"
            )
