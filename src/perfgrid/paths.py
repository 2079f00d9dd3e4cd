"""The one place that knows where perfgrid's files live.

Everything a run writes goes under ``results/<host>/``; ``<host>`` is the
config's ``host`` (default: this machine's hostname), so results of several
machines sit side by side and never clobber each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("src", "workflow", "config", "profiles", "tests", ".ci")


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
    def run_record(self) -> Path:
        """When and how the latest run was started (written by Snakemake's onstart)."""
        return self.root / "run.json"

    @property
    def bench_lock(self) -> Path:
        return self.root / ".bench.lock"

    def native_binary(self, name: str) -> Path:
        return self.root / "bin" / name

    # per-experiment outputs
    def raw_dir(self, experiment: str) -> Path:
        return self.root / "raw" / experiment

    def raw_pattern(self, experiment: str, axes: tuple[str, ...]) -> str:
        """Result path with one ``{axis}`` wildcard per axis, hive-style folders."""
        parts = [f"{axis}={{{axis}}}" for axis in axes]
        return str(self.raw_dir(experiment) / "/".join(parts)) + ".json"

    def log_pattern(self, experiment: str, axes: tuple[str, ...]) -> str:
        """The benchmark job's log, beside its result under ``logs/``."""
        parts = [f"{axis}={{{axis}}}" for axis in axes]
        return str(self.root / "logs" / experiment / "/".join(parts)) + ".log"

    def raw_result(self, experiment: str, point: dict[str, Any]) -> str:
        parts = [f"{axis}={value}" for axis, value in point.items()]
        return str(self.raw_dir(experiment) / "/".join(parts)) + ".json"

    def table(self, experiment: str) -> Path:
        return self.root / "tables" / f"{experiment}.csv"

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
