"""The effective configuration: the validated config plus what follows from it.

The JSON schema (perfgrid.configschema) checks types, ranges and names; this
module checks what a schema cannot (whole floats where integers belong, NaN
and infinities, patterns that must match the whole string, sizes in
strings, paths that would clobber the repository or collide with the
pipeline's own folders, a file already at the test file's or the http
database's path that perfgrid did not create, free disk space) and fills
in derived values. Every error names the config key and what is allowed,
is raised before any job runs, and writes nothing: not even a folder, so a
dry run leaves the disk as it found it.
"""

from __future__ import annotations

import copy
import math
import os
import re
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from functools import cache
from pathlib import Path
from typing import Any

from perfgrid import binding, configschema, experiments, order, testfile, topology
from perfgrid.paths import REPO, RESERVED_NAMES, SOURCE_DIRS, Layout

#: pyperf's own options among the measure keys
MEASURE_KEYS = ("processes", "values", "warmups", "loops")
#: a real config has a few hundred values; more is a mistake or a YAML alias bomb
MAX_VALUES = 20_000
MAX_DEPTH = 24
#: error messages longer than this are cut (a value's repr can be megabytes)
MAX_MESSAGE = 2_000
#: the CPU count ``workers: auto`` is built for, where set (see :func:`auto_cpu_limit`)
AUTO_CPUS_ENV = "PERFGRID_AUTO_CPUS"
#: what set that count (the affinity mask, a cgroup CPU quota, the variable), for the report
AUTO_CPUS_SOURCE_ENV = "PERFGRID_AUTO_CPUS_SOURCE"
MAX_AUTO_CPUS = 2048


class ConfigError(ValueError):
    """A config value perfgrid cannot use; the message names the key."""


def brief(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters left out)"


def key_of(path: Iterable[Any]) -> str:
    """``file_read.block_sizes[0]`` from a path of keys and list indexes."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "config"


def check_shape(config: Any) -> None:
    """Refuse a config too large or deep to be real before anything walks it.

    A ~300-byte YAML alias bomb expands to millions of values, and the schema
    check (and its error message) would take minutes and print megabytes.
    Counting stops at the limit, so this is fast whatever the input.
    """
    stack: list[tuple[Any, tuple, int]] = [(config, (), 0)]
    count = 0
    while stack:
        node, path, depth = stack.pop()
        count += 1
        if count > MAX_VALUES or depth > MAX_DEPTH:
            what = (f"more than {MAX_VALUES:,} values" if count > MAX_VALUES
                    else f"nesting deeper than {MAX_DEPTH} levels")
            raise ConfigError(f"{key_of(path)}: the config has {what} (YAML aliases "
                              f"expanding?); a perfgrid config has a few hundred values")
        if isinstance(node, dict):
            stack += [(v, (*path, k), depth + 1) for k, v in node.items()]
        elif isinstance(node, list | tuple):
            stack += [(v, (*path, i), depth + 1) for i, v in enumerate(node)]


def _number_range(schema: dict[str, Any]) -> str:
    bounds = []
    if "minimum" in schema:
        bounds.append(f">= {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        bounds.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema:
        bounds.append(f"<= {schema['maximum']}")
    if "exclusiveMaximum" in schema:
        bounds.append(f"< {schema['exclusiveMaximum']}")
    return f" {' and '.join(bounds)}" if bounds else ""


def allowed(schema: Any) -> str:
    """What a schema node allows, in words."""
    if not isinstance(schema, dict):
        return ""
    if "enum" in schema:
        return f"one of {schema['enum']}"
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    words = []
    if "integer" in kinds:
        words.append(f"a whole number without a decimal point{_number_range(schema)}")
    elif "number" in kinds:
        words.append(f"a finite number{_number_range(schema)}")
    if "string" in kinds:
        pattern = schema.get("pattern")
        words.append(f"a string matching {pattern}" if pattern else "a string")
    if "array" in kinds:
        item = allowed(schema.get("items"))
        item = f"({item})" if " or " in item else item
        words.append(f"a list of {item}" if item else "a list")
    if "object" in kinds:
        words.append(f"a mapping of {sorted(schema.get('properties', {}))}"
                     if schema.get("properties") else "a mapping")
    if "null" in kinds:
        words.append("null")
    if not words and "oneOf" in schema:
        words = [allowed(s) for s in schema["oneOf"]]
    text = " or ".join(w for w in words if w)
    description = " ".join(str(schema.get("description", "")).split())
    return f"{text} ({description})" if text and description else text or description


def _deepest(error: Any) -> Any:
    """Inside a ``oneOf`` (``workers: auto`` or a list), the error deepest in the value:
    ``[1, 2.0]`` is wrong at item 1, not as a whole; where no alternative reaches deeper,
    the ``oneOf`` error itself, which names every alternative."""
    while error.validator in ("oneOf", "anyOf") and error.context:
        depth = len(error.absolute_path)
        deeper = [e for e in error.context if len(e.absolute_path) > depth]
        if not deeper:
            break
        error = max(deeper, key=lambda e: len(e.absolute_path))
    return error


def schema_message(error: Any) -> str:
    """``key: what is wrong; allowed: ...`` from a jsonschema ValidationError."""
    error = _deepest(error)
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        return brief(f"{key_of(path)}: {error.message}; allowed keys: {known}")
    instance = error.instance
    if isinstance(instance, float) and not math.isfinite(instance):
        what = f"{instance} is not a finite number"
    elif isinstance(instance, float) and instance.is_integer() and error.validator in (
            "type", "oneOf"):
        what = f"{instance!r} is a float; write a whole number ({int(instance)})"
    elif error.validator in ("oneOf", "anyOf"):
        # the one alternative of the value's own kind says why (a list: "non-unique")
        said = [e.message for e in error.context or ()
                if e.validator not in ("type", "enum", "const")]
        what = said[0] if len(said) == 1 else f"{brief(repr(instance), 200)} is not allowed"
    else:
        what = error.message
    return brief(f"{key_of(path)}: {brief(what, 300)}; allowed: {allowed(error.schema)}")


def _finite_number(checker: Any, instance: Any) -> bool:
    if isinstance(instance, bool) or not isinstance(instance, int | float):
        return False
    return isinstance(instance, int) or math.isfinite(instance)


def _whole_integer(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _full_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema import ValidationError

    if isinstance(instance, str) and not re.fullmatch(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern} as a whole")


@cache
def _strict_validator() -> Any:
    """The schema, with integers that are ints, numbers that are finite, whole-string patterns.

    JSON schema counts 2.0 as an integer and lets NaN past every bound, and
    Python's ``$`` matches before a final newline; perfgrid wants none of it.
    """
    from jsonschema import Draft202012Validator, validators

    checker = Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _whole_integer, "number": _finite_number})
    strict = validators.extend(Draft202012Validator, {"pattern": _full_pattern},
                               type_checker=checker)
    return strict(configschema.schema())


def check_strict(config: dict[str, Any]) -> None:
    """Raise ConfigError for the first value the schema lets through but perfgrid cannot use."""
    errors = sorted(_strict_validator().iter_errors(config),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise ConfigError(schema_message(errors[0]))


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
    """The CPU count ``workers: auto`` is built for, and what set it.

    ``PERFGRID_AUTO_CPUS`` where set: a cluster run builds its grid on the login node,
    not where the jobs run, and the workflow sets it (and ``PERFGRID_AUTO_CPUS_SOURCE``)
    for its jobs. Else the smaller of the CPUs this process may use (the affinity mask,
    so taskset, a cpuset cgroup or a SLURM allocation count, never ``os.cpu_count()``)
    and a cgroup CPU quota rounded up (:func:`topology.cgroup_cpu_quota`). ``allowed``,
    ``proc`` and ``cgroup_root`` stand in for the mask and the cgroup files in tests.
    """
    environ = os.environ if environ is None else environ
    text = environ.get(AUTO_CPUS_ENV, "").strip(" \t\r\n")
    if text:
        # ASCII digits only: str.isdigit() also takes '²' (int() refuses it) and '٣' (3)
        if not re.fullmatch(r"[0-9]+", text) or not 1 <= int(text) <= MAX_AUTO_CPUS:
            raise ConfigError(brief(f"{AUTO_CPUS_ENV}={text!r} (the CPU count of workers: "
                                    f"auto); allowed: a whole number from 1 to "
                                    f"{MAX_AUTO_CPUS} in the digits 0-9, or unset", 300))
        return int(text), brief(environ.get(AUTO_CPUS_SOURCE_ENV, "").strip()
                                or f"the {AUTO_CPUS_ENV} variable", 300)
    cpus = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    count, source = len(cpus), f"the affinity mask (CPUs {topology.format_cpu_list(cpus)})"
    quota = topology.cgroup_cpu_quota(proc, cgroup_root)
    if quota is not None and quota[0] < count:
        count, source = quota[0], f"the cgroup CPU quota ({quota[1]})"
    return count, source


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

    ``check_disk`` also looks at the disk: the file already at the test file's path (and
    at any other path a job writes, ``Experiment.check_files``), free space, a writable
    results folder. A job that works the grid out again (rule
    skipped, while the testfile job may be writing the file) passes False.
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
    tf = cfg.setdefault("testfile", {})
    try:
        tf["size_bytes"] = testfile.parse_size(tf.get("size", "1GiB"), "testfile.size")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if tf["size_bytes"] < testfile.MIN_SIZE:
        raise ConfigError(f"testfile.size: {tf.get('size')!r} is {tf['size_bytes']:,} bytes; "
                          f"allowed: at least {testfile.MIN_SIZE:,} bytes (4KiB)")
    tf["path"] = tf.get("path") or str(layout.testfile_default)
    _not_an_option(tf["path"], "testfile.path")
    _outside_sources(tf["path"], "testfile.path")
    for name in known:  # files an experiment's jobs write (http.database)
        for key in experiments.get(name).path_keys:
            path = (cfg.get(name) or {}).get(key)
            if path:
                _not_an_option(path, f"{name}.{key}")
                _outside_sources(path, f"{name}.{key}")
    if check_disk and uses_testfile(cfg):
        try:
            testfile.check_existing(tf["path"], tf["size_bytes"], tf.get("seed"))
            testfile.check_free_space(tf["path"], tf["size_bytes"])
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


def uses_testfile(cfg: dict[str, Any]) -> bool:
    """Whether an enabled experiment reads the test file (:attr:`Experiment.uses_testfile`)."""
    return any(experiments.get(name).uses_testfile for name in cfg["experiments"])


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


def measure_of(cfg: dict[str, Any], experiment: str,
               point: dict[str, Any] | None = None) -> dict[str, Any]:
    """The repetitions of one point: ``measure``, with ``measure.claims`` over it where a
    claim compares the point."""
    measure = dict(cfg[experiment]["measure"])
    claims = measure.pop("claims", None) or {}
    if point is not None and experiments.get(experiment).used_by_claims(point):
        measure.update(claims)
    return measure


def rounds_of(cfg: dict[str, Any], experiment: str,
              point: dict[str, Any] | None = None) -> int:
    """How many jobs (rounds) measure ``point``; without a point, the most any point of
    ``experiment`` may have (whether its results are folders of rounds)."""
    if point is not None:
        return int(measure_of(cfg, experiment, point).get("rounds") or 1)
    measure = cfg[experiment]["measure"]
    claims = measure.get("claims") or {}
    return max(int(measure.get("rounds") or 1), int(claims.get("rounds") or 1))


def measure_args(cfg: dict[str, Any], experiment: str,
                 point: dict[str, Any] | None = None) -> list[str]:
    """Harness options for one job's repetitions: pyperf's, when to stop adding batches,
    and ``--counters`` where ``measure.counters`` counts the point.

    With R rounds each round is one of R independent jobs: it gets 1/R of the
    point's ``max_seconds`` and a target sqrt(R) wider, so that the R rounds
    together meet ``target_ci``.
    """
    measure = measure_of(cfg, experiment, point)
    args = []
    for key in MEASURE_KEYS:
        value = measure.get(key)
        if value is not None:
            args += [f"--{key}", str(value)]
    mode = measure.get("counters") or "claims"
    if point is not None and (mode == "all" or (
            mode == "claims" and experiments.get(experiment).counted_by_default(point))):
        args.append("--counters")
    rounds = int(measure.get("rounds") or 1)  # rounds_of(cfg, experiment, point)
    if measure.get("target_ci") is not None:
        args += ["--target-ci", f"{measure['target_ci'] * math.sqrt(rounds):.6g}"]
    if measure.get("max_seconds") is not None:
        args += ["--max-seconds", f"{measure['max_seconds'] / rounds:.6g}"]
    return args


def jobs(cfg: dict[str, Any]) -> list[order.Job]:
    """Every benchmark job this machine can run, in sorted order (grid order, then round)."""
    out = []
    for experiment in cfg["experiments"]:
        points, _ = split_grid(cfg, experiment)
        rounds = [rounds_of(cfg, experiment, p) for p in points]
        out += [order.Job(experiment, p, r) for r in range(1, max(rounds, default=1) + 1)
                for p, n in zip(points, rounds, strict=True) if r <= n]
    return out


def claim_block(cfg: dict[str, Any]) -> Callable[[order.Job], tuple[str, int] | None]:
    """The run order's blocks (perfgrid.order): the jobs of one experiment's claim points
    measured in rounds, one block per round, so a claim's sides run back to back."""
    def block(job: order.Job) -> tuple[str, int] | None:
        if rounds_of(cfg, job.experiment, job.point) < 2:
            return None
        return job.experiment, job.round

    return block


def grid(cfg: dict[str, Any], experiment: str) -> list[dict[str, Any]]:
    """Every grid point of an enabled experiment."""
    return experiments.get(experiment).points(cfg[experiment], cfg)


def skipped(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Every grid point this machine cannot run, each with its experiment and ``reason``."""
    return [s for name in cfg["experiments"] for s in split_grid(cfg, name)[1]]


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
