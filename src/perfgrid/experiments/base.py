"""The small interface every experiment module implements.

An experiment declares its grid axes, expands its config section into grid
points, says which points this machine cannot run (and why), and prepares a
:class:`Case` for one point: the timed function the pyperf harness calls,
and how much work one loop does.
"""

from __future__ import annotations

import functools
import shutil
import sys
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from perfgrid.kit.paths import PACKAGE

if TYPE_CHECKING:  # pandas stays out of the pyperf workers: it costs ~70 MB per fork
    import pandas as pd

    from perfgrid.kit.paths import Layout

Point = dict[str, Any]
Metadata = dict[str, str | int | float]
#: what runs a point: the Python port, the native baseline, or the seeds' own runtime
RUNTIMES = ("python", "native", "erlang")
#: in an experiment's package: its analysis module (perfgrid.analyse.analysis.module), the folders
#: of its C and Erlang sources, and its config section's JSON-schema fragment
ANALYSIS_FILE = "analysis.py"
NATIVE_FOLDER = "native"
ERLANG_FOLDER = "erlang"
SCHEMA_FILE = "schema.yaml"


@dataclass(frozen=True)
class NoisePair:
    """Two points a claim compares as the ratio ``A / B`` of their rates, measured by the
    noise profile (perfgrid.pipeline.noiseprofile) in fresh processes of ``loops`` loops a value."""

    name: str
    claim: str
    a: Point
    b: Point
    loops: int


@dataclass(frozen=True)
class Tool:
    """An installed program an experiment's jobs run (besides the C compiler, perf and erl):
    machine.json records its version (perfgrid.measure.machine.tools) and the archive's crate
    describes it (perfgrid.publish.crate)."""

    #: why it cannot run here (a skip reason), or None
    missing: Callable[[], str | None]
    #: its version, as machine.json records it
    version: Callable[[], str]
    #: the crate's name for it, what it does in perfgrid, and its home page
    title: str
    role: str
    url: str
    #: the table column that recorded its version before machine.json did, or None
    table_column: str | None = None


@dataclass
class Case:
    """One prepared grid point.

    ``time(loops)`` runs the workload ``loops`` times and returns the elapsed
    seconds of the timed part only: per-loop set-up (cache eviction, warming)
    happens inside it but outside the clock. ``work_per_loop`` is what one
    loop does, in the experiment's ``work_unit`` (bytes, calls, spawns...).
    ``observed()`` returns metadata known only after the loops ran (the
    worst cache residency seen, CPU times, peak RSS); the harness records it
    with each pyperf run.
    """

    time: Callable[[int], float]
    work_per_loop: float
    metadata: Metadata = field(default_factory=dict)
    close: Callable[[], None] = lambda: None
    observed: Callable[[], Metadata] = dict
    inner_loops: int | None = None


class Experiment:
    """Base class: subclasses set the class attributes and override the methods."""

    name: ClassVar[str]
    #: where it comes in the report and in every list of experiments, lowest first: the
    #: registry (perfgrid.experiments) finds experiments by looking, not by a list, so
    #: this is their order. Tens leave room between: spawn 10, file_read 20, syscall 30,
    #: timers 40, ring 50, http 60; no two experiments may share one.
    report_position: ClassVar[int]
    #: grid axes in result-path order; the same names are config keys
    #: (plural in config), wildcards, table columns and plot axes.
    axes: ClassVar[tuple[str, ...]]
    #: axes whose values are integers (the rest are strings)
    int_axes: ClassVar[frozenset[str]] = frozenset()
    work_unit: ClassVar[str]
    rate_unit: ClassVar[str]
    #: rows (by variant) that stand for the machine's own limit, the axes a
    #: row must share with one to be compared, and the coarser axes to fall
    #: back on (taking the best reference rate) when no exact match exists
    reference_variants: ClassVar[tuple[str, ...]] = ()
    reference_axes: ClassVar[tuple[str, ...]] = ()
    fallback_axes: ClassVar[tuple[str, ...]] = ()

    #: regular expressions its axes' values must match as Snakemake wildcards (a closed
    #: set, as file_read's ``cache``); an axis left out takes ``\d+`` if it is an integer
    #: axis, else ``[^/]+`` (perfgrid.pipeline.glue.axis_constraints)
    axis_patterns: ClassVar[dict[str, str]] = {}
    #: its axes that every experiment's table has as a column, empty where the table's
    #: experiment has no such axis, each -> the common column it comes after
    #: (perfgrid.analyse.aggregate.common_columns; file_read: block_size after variant)
    common_columns: ClassVar[dict[str, str]] = {}
    #: Python packages its jobs import beyond perfgrid's own requirements, which may be
    #: missing: machine.json records their versions (perfgrid.measure.machine)
    packages: ClassVar[tuple[str, ...]] = ()

    #: the fewest workers one of its points may have: ``workers: auto`` starts there
    min_workers: ClassVar[int] = 1
    #: the fixtures its jobs read (perfgrid.measure.fixtures, by name; file_read: ``testfile``):
    #: each is made (or the file already at its path checked) before its jobs, and the
    #: report states its facts
    fixtures: ClassVar[tuple[str, ...]] = ()
    #: keys of its config section that name a file perfgrid writes: refused where the path
    #: would read as an option or lies in the repository's sources
    path_keys: ClassVar[tuple[str, ...]] = ()

    #: the points the claims compare, as partial points (an axis -> a value or a list
    #: of values): they get the ``measure.claims`` repetitions, enough for an interval
    claim_points: ClassVar[tuple[dict[str, Any], ...]] = ()
    #: two points a claim compares, cheap to measure, whose ratio's noise the profile
    #: measures before the benchmarks (perfgrid.pipeline.noiseprofile); None: no pair
    noise_pair: ClassVar[NoisePair | None] = None

    def points(self, section: dict[str, Any], config: dict[str, Any]) -> list[Point]:
        """The grid points of this experiment for its (validated) config section."""
        raise NotImplementedError

    #: the points ``measure.counters: claims`` counts (perfgrid.measure.counters), as partial
    #: points; None: the claim points
    counter_points: ClassVar[tuple[dict[str, Any], ...] | None] = None

    def used_by_claims(self, point: Point) -> bool:
        """Whether a claim compares ``point`` (so it needs an interval). Remembered per
        point: parsing the workflow asks it about 20,000 times for a thousand jobs."""
        key = tuple(point.items())
        memo = self.__dict__.setdefault("_used_by_claims", {})
        try:
            if key not in memo:
                memo[key] = matches_any(point, self.claim_points)
            return memo[key]
        except TypeError:  # a value that cannot be a key: ask every time
            return matches_any(point, self.claim_points)

    def claim_rounds(self, point: Point, rounds: int) -> int:
        """The rounds of claim point ``point``, given ``measure.claims.rounds``: fewer
        where one job lasts minutes and a few rounds already decide its claims."""
        return rounds

    def claim_group(self, point: Point) -> Hashable | None:
        """Which claim points of one round run back to back inside the experiment's block
        (perfgrid.design.order): the points one claim compares, so its sides are measured
        seconds apart and a paired ratio cancels more of the noise they share; None: a
        point shuffled alone through the block."""
        return None

    def counted_by_default(self, point: Point) -> bool:
        """Whether ``measure.counters: claims`` counts ``point``."""
        chosen = self.claim_points if self.counter_points is None else self.counter_points
        return matches_any(point, chosen)

    def uncountable(self, point: Point) -> str | None:
        """Why a counting pass of ``point`` would mean nothing per unit of work, or None."""
        return None

    def counting_options(self, point: Point, options: dict[str, str]) -> dict[str, str]:
        """The options of the counting pass: the job's, or a smaller load where one loop
        is too long to run twice (counts are per unit of work, so they compare)."""
        return options

    #: variants run by a native program or by the Erlang VM; the rest are Python
    native_variants: ClassVar[tuple[str, ...]] = ()
    erlang_variants: ClassVar[tuple[str, ...]] = ()

    #: the C program (``native/<name>.c`` in its package, built by rule native_program)
    #: that runs the native variants; None where they run an installed tool (dd, fio) or
    #: there are none
    native_program: ClassVar[str | None] = None
    #: the Erlang module (``erlang/<module>.erl`` in its package) of the erlang variants,
    #: or None
    erlang_module: ClassVar[str | None] = None

    def sources(self) -> list[str]:
        """The job's code, under ``src/perfgrid/``: every module of its package but
        ``analysis.py`` (editing the plots or claims reruns no job); what they import is
        found by reading them (perfgrid.design.codeinputs)."""
        return list(_module_files(type(self).__module__))

    def tools(self) -> dict[str, Tool]:
        """Installed programs its jobs run beyond perfgrid.measure.machine's ``TOOL_VERSION`` and
        erl, by name (:class:`Tool`): machine.json records their versions
        (perfgrid.measure.machine.tools) and the crate describes them (perfgrid.publish.crate),
        neither of
        which names an experiment."""
        return {}

    def folder(self) -> Path:
        """Its package's folder, ``src/perfgrid/experiments/<name>/``: its modules, its
        config section's schema (``schema.yaml``) and its programs' sources."""
        return Path(sys.modules[type(self).__module__].__file__ or "").resolve().parent

    def native_source(self) -> str | None:
        """Its C program's source under ``src/perfgrid/`` (``native/<native_program>.c`` in
        its package), or None without one."""
        if not self.native_program:
            return None
        path = self.folder() / NATIVE_FOLDER / f"{self.native_program}.c"
        return path.relative_to(PACKAGE).as_posix()

    def erlang_source(self) -> str | None:
        """Its Erlang module's source under ``src/perfgrid/`` (``erlang/<erlang_module>.erl``
        in its package), or None without one."""
        if not self.erlang_module:
            return None
        path = self.folder() / ERLANG_FOLDER / f"{self.erlang_module}.erl"
        return path.relative_to(PACKAGE).as_posix()

    def job_mem_mb(self, config: dict[str, Any]) -> int | None:
        """The memory each of its jobs asks a cluster for, as ``mem_mb`` (passed on as SLURM's
        ``--mem``, which counts MiB), or None for the profile's ``default-resources``."""
        return None

    def extra_inputs(self, point: Point, config: dict[str, Any],
                     layout: Layout) -> dict[str, str]:
        """Files a job needs besides its code, program and modules (name -> path)."""
        return {}

    def job_options(self, point: Point, section: dict[str, Any], config: dict[str, Any],
                    layout: Layout) -> dict[str, str]:
        """The job's ``--option`` values from its config: everything but the axes.

        The pipeline adds ``binary`` (native points with a :attr:`native_program`) and
        ``beams`` (erlang points with an :attr:`erlang_module`) itself.
        """
        return {}

    def check_files(self, section: dict[str, Any], layout: Layout) -> None:
        """Raise ValueError, naming the key, for anything already at a path its jobs would
        write that perfgrid did not create (http's database). Runs before any job, dry
        runs included, so it must be cheap and write nothing."""

    def runtime(self, point: Point) -> str:
        """``python``, ``native`` or ``erlang``: what runs the point."""
        if point["variant"] in self.erlang_variants:
            return "erlang"
        return "native" if point["variant"] in self.native_variants else "python"

    def unavailable(self, point: Point) -> str | None:
        """Why this machine cannot run ``point`` (a missing tool), or None."""
        return None

    def keep_runtimes(self, points: list[Point], section: dict[str, Any]) -> list[Point]:
        """The points whose runtime is in the section's ``runtimes`` (default: all)."""
        chosen = section.get("runtimes") or RUNTIMES
        return [p for p in points if self.runtime(p) in chosen]

    def prepare(self, point: Point, options: dict[str, str]) -> Case:
        """Set up ``point`` (outside any timing) and return its :class:`Case`."""
        raise NotImplementedError

    def ratio_to_native(self, table: pd.DataFrame) -> pd.Series:
        """Each row's rate over the matching native reference rate (NaN if none)."""
        import pandas as pd

        ratio = pd.Series(float("nan"), index=table.index)
        ref = table[table["variant"].isin(self.reference_variants)]
        if ref.empty:
            return ratio
        for axes in (self.reference_axes, self.fallback_axes):
            best = ref.groupby(list(axes))["rate"].max() if axes else None
            for idx, row in table.iterrows():
                if pd.notna(ratio[idx]):
                    continue
                if best is None:
                    ratio[idx] = row["rate"] / ref["rate"].max()
                    continue
                key = tuple(row[a] for a in axes)
                key = key[0] if len(axes) == 1 else key
                if key in best.index:
                    ratio[idx] = row["rate"] / best[key]
        return ratio

    def point_key(self, point: Mapping[str, Any]) -> str:
        """The name of a grid point, the same from a job's point and from its table row
        (``variant=dd/cache=warm/...``): what a claim's quantity lists as its points."""
        return "/".join(f"{a}={_axis_text(point.get(a))}" for a in self.axes)

    def parse_point(self, raw: dict[str, str]) -> Point:
        """Typed point from the strings of wildcards or the command line."""
        missing = [a for a in self.axes if a not in raw]
        if missing:
            raise ValueError(f"{self.name}: point lacks axes {missing}")
        return {a: int(raw[a]) if a in self.int_axes else str(raw[a]) for a in self.axes}


def _axis_text(value: Any) -> str:
    """An axis value as text: 1 whether it was read as an int, a float or the text of
    either (a job's wildcard "1.0", a table's 1.0, the config's 1)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def matches_any(point: Point, patterns: tuple[dict[str, Any], ...]) -> bool:
    """Whether ``point`` matches one of ``patterns`` (an axis -> a value or a list of them)."""
    def matches(pattern: dict[str, Any]) -> bool:
        for axis, wanted in pattern.items():
            allowed = wanted if isinstance(wanted, list | tuple) else [wanted]
            if point.get(axis) not in allowed:
                return False
        return True

    return any(matches(p) for p in patterns)


@functools.cache
def _module_files(module: str) -> tuple[str, ...]:
    """``module``'s source under ``src/perfgrid/``: its file, or every module of its package
    (``__init__.py`` first) but its analysis, so that editing any of them reruns the
    experiment's jobs."""
    path = Path(sys.modules[module].__file__ or "").resolve()
    files = ([f for f in sorted(path.parent.glob("*.py")) if f.name != ANALYSIS_FILE]
             if path.name == "__init__.py" else [path])
    return tuple(f.relative_to(PACKAGE).as_posix() for f in files)


def version_line(program: str, args: tuple[str, ...] = ("--version",)) -> str:
    """The first line ``program args`` prints (stdout, else stderr), "unknown" if none."""
    import subprocess

    from perfgrid.kit import lifetime

    proc = subprocess.run(lifetime.command([program, *args]), capture_output=True, text=True,
                          timeout=60, check=False)
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0].strip() if lines else "unknown"


def missing_tool(tool: str, why: str = "") -> str | None:
    """A skip reason if ``tool`` is not on PATH, else None."""
    if shutil.which(tool):
        return None
    return f"{tool} not found on PATH" + (f" ({why})" if why else "")
