"""The effective configuration: the validated config plus what follows from it.

The JSON schema (``workflow/schemas/``) checks types, ranges and names; this
module checks what a schema cannot (sizes in strings, free disk space, a
test file inside the source tree) and fills in derived values. Every error
names the config key and what is allowed, and is raised before any job runs.
"""

from __future__ import annotations

import copy
import os
import socket
from pathlib import Path
from typing import Any

from perfgrid import experiments, testfile
from perfgrid.paths import REPO, SOURCE_DIRS, Layout

MEASURE_KEYS = ("processes", "values", "warmups", "loops")


class ConfigError(ValueError):
    """A config value perfgrid cannot use; the message names the key."""


def effective(config: dict[str, Any], check_disk: bool = True) -> dict[str, Any]:
    """The config with derived values filled in; raises ConfigError."""
    cfg = copy.deepcopy(config)
    cfg["host"] = cfg.get("host") or socket.gethostname().split(".")[0]
    known = experiments.available()
    chosen = cfg.get("experiments") or known
    unknown = [e for e in chosen if e not in known]
    if unknown:
        raise ConfigError(f"experiments: {unknown} not among the experiments here: {known}")
    cfg["experiments"] = [e for e in known if e in chosen]

    layout = Layout.for_host(cfg["host"], cfg.get("results", "results"))
    tf = cfg.setdefault("testfile", {})
    try:
        tf["size_bytes"] = testfile.parse_size(tf.get("size", "1GiB"), "testfile.size")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    tf["path"] = tf.get("path") or str(layout.root / "data" / "testfile.bin")
    _outside_sources(tf["path"], "testfile.path")
    if "file_read" in cfg["experiments"] and check_disk:
        try:
            testfile.check_free_space(tf["path"], tf["size_bytes"])
        except ValueError as err:
            raise ConfigError(str(err)) from None

    for name in cfg["experiments"]:
        section = cfg.setdefault(name, {})
        section["measure"] = {**cfg.get("measure", {}), **(section.get("measure") or {})}
    if check_disk:
        _writable(layout.root, "results")
    return cfg


def _writable(folder: Path, key: str) -> None:
    """Raise unless files can be created in ``folder`` (made if missing)."""
    probe = folder / f".perfgrid-write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"{key}: cannot write results to {folder}: {err.strerror}") from None


def _outside_sources(path: str, key: str) -> None:
    resolved = Path(path).resolve()
    for folder in SOURCE_DIRS:
        if resolved.is_relative_to(REPO / folder):
            raise ConfigError(
                f"{key}: {path} lies inside the source folder {folder}/; "
                f"put generated data under results/ or outside the repository"
            )


def measure_of(cfg: dict[str, Any], experiment: str,
               point: dict[str, Any] | None = None) -> dict[str, Any]:
    """The repetitions of one point: ``measure``, with ``measure.claims`` over it where a
    claim compares the point."""
    measure = dict(cfg[experiment]["measure"])
    claims = measure.pop("claims", None) or {}
    if point is not None and experiments.get(experiment).used_by_claims(point):
        measure.update(claims)
    return measure


def measure_args(cfg: dict[str, Any], experiment: str,
                 point: dict[str, Any] | None = None) -> list[str]:
    """pyperf command-line options for one point's repetitions."""
    measure = measure_of(cfg, experiment, point)
    args = []
    for key in MEASURE_KEYS:
        value = measure.get(key)
        if value is not None:
            args += [f"--{key}", str(value)]
    return args


def grid(cfg: dict[str, Any], experiment: str) -> list[dict[str, Any]]:
    """Every grid point of an enabled experiment."""
    return experiments.get(experiment).points(cfg[experiment], cfg)


def split_grid(cfg: dict[str, Any], experiment: str) -> tuple[list[dict], list[dict]]:
    """(points this machine can run, skipped points each with a ``reason``)."""
    exp = experiments.get(experiment)
    runnable, skipped = [], []
    for point in grid(cfg, experiment):
        reason = exp.unavailable(point)
        if reason:
            skipped.append({"experiment": experiment, **point, "reason": reason})
        else:
            runnable.append(point)
    return runnable, skipped
