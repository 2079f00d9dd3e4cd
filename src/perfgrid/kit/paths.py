"""The one place that knows where perfgrid's files live.

Everything a run writes goes under ``results/<host>/``; ``<host>`` is the
config's ``host`` (default: this machine's hostname), so results of several
machines sit side by side and never clobber each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
#: the perfgrid package (src/perfgrid): the code jobs run, and the sources of their programs
PACKAGE = Path(__file__).resolve().parents[1]
#: what every C program includes (``perfgrid.h``), under :data:`PACKAGE`; each program's
#: own source is in its experiment's package (``experiments/<name>/native/``)
NATIVE_SOURCES = "native"
#: the Erlang module every experiment's module uses (``pg_util.erl``), under
#: :data:`PACKAGE`; each experiment's own is in its package (``experiments/<name>/erlang/``)
ERLANG_SOURCES = "erlang_src"
#: the repository's own folders: no result or test file may land in (or contain) one
SOURCE_DIRS = ("src", "workflow", "config", "profiles", "tests", ".ci", ".git")
#: names the pipeline itself uses under results/, so no host may take them
RESERVED_NAMES = ("archive", "compare")
#: the side tables beside each experiment's table (``tables/<experiment>.<side>.csv``):
#: its list-valued columns, one value a cell (perfgrid.analyse.aggregate.write_table)
SIDE_TABLES = ("values", "process_facts", "noisy_rounds", "records")


def is_side_table(path: str | Path) -> bool:
    """Whether ``path`` is a side table (``<experiment>.<side>.csv``), not a table."""
    return any(Path(path).name.endswith(f".{side}.csv") for side in SIDE_TABLES)


def every_table(results: str | Path) -> list[Path]:
    """Every host's tables under the results folder (``<results>/<host>/tables/*.csv``),
    their side tables not counted (:func:`side_tables_of` gives them)."""
    return sorted(p for p in Path(results).glob("*/tables/*.csv") if not is_side_table(p))


def side_tables_of(table: str | Path) -> dict[str, Path]:
    """The side tables of the table at ``table`` (``x/<experiment>.csv``), by side:
    ``x/<experiment>.values.csv`` and the rest of :data:`SIDE_TABLES`."""
    path = Path(table)
    return {side: path.with_name(f"{path.stem}.{side}.csv") for side in SIDE_TABLES}


@dataclass(frozen=True)
class Layout:
    """Paths of one result set, relative to the working directory."""

    root: Path

    @classmethod
    def for_host(cls, host: str, results: str | Path = "results") -> Layout:
        return cls(Path(results) / host)

    # inputs made by the pipeline
    @property
    def machine(self) -> Path:
        return self.root / "machine.json"

    @property
    def skipped(self) -> Path:
        return self.root / "skipped.json"

    @property
    def used_config(self) -> Path:
        """The config as validated (defaults filled in), for provenance and archives."""
        return self.root / "config.used.yaml"

    @property
    def plan(self) -> Path:
        """The run's plan (perfgrid.design.plan): every benchmark job, its order and rounds."""
        return self.root / "plan.json"

    @property
    def run_record(self) -> Path:
        """When and how the latest run was started (written by Snakemake's onstart)."""
        return self.root / "run.json"

    @property
    def bench_lock(self) -> Path:
        """Serialises the benchmark jobs of one run (perfgrid.measure.bench)."""
        return self.root / ".bench.lock"

    @property
    def run_lock(self) -> Path:
        """Held by the one run writing this result set (perfgrid.measure.runlock; hidden: not
        archived)."""
        return self.root / ".perfgrid.lock"

    @property
    def noise_profile(self) -> Path:
        """The machine's noise level by level (perfgrid.pipeline.noiseprofile), measured first."""
        return self.root / "noise.json"

    def native_binary(self, name: str) -> Path:
        return self.root / "bin" / name

    @property
    def erlang_beams(self) -> Path:
        """The folder of compiled Erlang modules (rule erlang_beam)."""
        return self.native_binary("erlang")

    # per-experiment outputs
    def raw_dir(self, experiment: str) -> Path:
        return self.root / "raw" / experiment

    def raw_pattern(self, experiment: str, axes: tuple[str, ...], rounds: int = 1) -> str:
        """Result path with one ``{axis}`` wildcard per axis, hive-style folders.

        Measured in ``rounds`` > 1 jobs, a point is a folder of ``round={round}`` files.
        """
        parts = [f"{axis}={{{axis}}}" for axis in axes] + (["round={round}"] if rounds > 1 else [])
        return str(self.raw_dir(experiment) / "/".join(parts)) + ".json"

    def log_pattern(self, experiment: str, axes: tuple[str, ...], rounds: int = 1) -> str:
        """The benchmark job's log, beside its result under ``logs/``."""
        parts = [f"{axis}={{{axis}}}" for axis in axes] + (["round={round}"] if rounds > 1 else [])
        return str(self.root / "logs" / experiment / "/".join(parts)) + ".log"

    def raw_result(self, experiment: str, point: dict[str, Any],
                   axes: Sequence[str] | None = None, round: int | None = None) -> str:
        """Where ``point``'s result goes; with ``axes``, in that order and no other keys.

        ``round`` (of a point measured in several rounds) names the round's file.
        """
        if axes is not None:
            if set(point) != set(axes):
                raise ValueError(f"{experiment}: point {point} has not exactly the axes "
                                 f"{list(axes)}")
            point = {axis: point[axis] for axis in axes}
        return self._point_path("raw", experiment, point, round) + ".json"

    def point_log(self, experiment: str, point: dict[str, Any], round: int | None = None) -> str:
        """The log of one point's measurement (of one round), beside its result under
        ``logs/``: :meth:`log_pattern` filled in."""
        return self._point_path("logs", experiment, point, round) + ".log"

    def _point_path(self, top: str, experiment: str, point: dict[str, Any],
                    round: int | None) -> str:
        """``<root>/<top>/<experiment>/<axis>=<value>/...[/round=<r>]``, no suffix: joined
        as text (the plan asks for some 10,000 paths while Snakemake parses the workflow,
        and pathlib's joins made a tenth of a second of them)."""
        parts = [f"{axis}={value}" for axis, value in point.items()]
        if round is not None:
            parts.append(f"round={round}")
        return "/".join([str(self.root), top, experiment, *parts])

    @staticmethod
    def result_point(path: str | Path, axes: Sequence[str]) -> tuple[str, dict[str, str]]:
        """(experiment, {axis: value as text}) that a raw result's path stands for.

        The inverse of :meth:`raw_result`: ``.../raw/<experiment>/a=1/b=x.json``
        (or ``.../b=x/round=2.json``). Raises ValueError for a path not of that form.
        """
        parts = Path(path).parts
        if Layout.result_round(path) is not None:
            parts = (*parts[:-2], parts[-2] + ".json")
        n = len(axes)
        if len(parts) < n + 2 or parts[-(n + 2)] != "raw" or not parts[-1].endswith(".json"):
            raise ValueError(f"{path}: not a raw result path (raw/<experiment>/"
                             f"{'/'.join(f'{a}=...' for a in axes)}.json)")
        point = {}
        for axis, part in zip(axes, [*parts[-n:-1], parts[-1].removesuffix(".json")],
                              strict=True):
            name, sep, value = part.partition("=")
            if name != axis or not sep:
                raise ValueError(f"{path}: expected {axis}=... where it has {part!r}")
            point[axis] = value
        return parts[-(n + 1)], point

    @staticmethod
    def result_round(path: str | Path) -> int | None:
        """The round a raw result's path names (``.../round=2.json``), or None."""
        name, sep, value = Path(path).name.removesuffix(".json").partition("=")
        if name == "round" and sep and value.isdigit():
            return int(value)
        return None

    # fixtures (perfgrid.measure.fixtures): their default place and perfgrid's own notes on them
    def fixture_default(self, file_name: str) -> Path:
        """A fixture's file when its ``path`` is not set: the only one perfgrid may remove."""
        return self.root / "data" / file_name

    def fixture_ready(self, name: str) -> Path:
        """Written once the fixture's file is generated or checked; its jobs wait for it."""
        return self.root / "data" / f"{name}.ready.json"

    def fixture_record(self, name: str) -> Path:
        """Identity of the fixture's file generated at its default path (hidden: not
        archived)."""
        return self.root / "data" / f".{name}.generated.json"

    def data_file(self, name: str) -> Path:
        """A file an experiment's jobs keep in the result set's data folder (http's SQLite
        counter where ``http.database`` is not set)."""
        return self.root / "data" / name

    def table(self, experiment: str) -> Path:
        """An experiment's table: one row per grid point, one value a cell."""
        return self.root / "tables" / f"{experiment}.csv"

    def side_tables(self, experiment: str) -> list[Path]:
        """Every side table of an experiment's table, in :data:`SIDE_TABLES` order."""
        return list(side_tables_of(self.table(experiment)).values())

    def table_files(self, experiment: str) -> list[Path]:
        """An experiment's table and its side tables: what the table job writes."""
        return [self.table(experiment), *self.side_tables(experiment)]

    def tables(self) -> list[Path]:
        """The tables of this result set (``tables/*.csv``, side tables not counted)."""
        return sorted(p for p in (self.root / "tables").glob("*.csv") if not is_side_table(p))

    def plot_dir(self, experiment: str) -> Path:
        return self.root / "plots" / experiment

    def log(self, *parts: str) -> Path:
        return self.root / "logs" / Path(*parts)

    # the report
    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def claims_figure(self) -> Path:
        """Every claim's interval against its threshold (PNG; an SVG beside it)."""
        return self.root / "claims.png"

    @property
    def report_md(self) -> Path:
        return self.root / "report.md"

    @property
    def claims_table(self) -> Path:
        """Every claim as a row (``Claim.as_row``): what ``perfgrid gallery`` reads."""
        return self.root / "claims.csv"
