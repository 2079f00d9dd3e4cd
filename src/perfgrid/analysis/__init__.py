"""Per-experiment analysis: the seed's published rows, plots, and claims.

Each experiment ``<name>`` has a module ``perfgrid.analysis.<name>`` with:

- ``SEED_ROWS``: the seed's published figures as table rows (quoted, with
  their source), in the same columns as this machine's table;
- ``plot(table, out_dir) -> list[Path]``: seaborn figures (PNG and SVG);
- ``claims(table) -> list[Claim]``: each seed claim as a hypothesis, the
  criterion, the figure measured here and a verdict computed from the data.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass
from types import ModuleType

VERDICTS = ("reproduced", "not reproduced", "inconclusive")


@dataclass(frozen=True)
class Claim:
    """One seed claim restated as a hypothesis and checked against the data."""

    experiment: str
    hypothesis: str
    criterion: str
    measured: str
    verdict: str
    runtime: str = "python"
    reason: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict: {self.verdict!r} is not one of {', '.join(VERDICTS)}")

    def as_row(self) -> dict[str, str]:
        return asdict(self)


def inconclusive(experiment: str, hypothesis: str, criterion: str, reason: str,
                 runtime: str = "python") -> Claim:
    """A claim that the data at hand cannot decide, with the reason."""
    return Claim(experiment, hypothesis, criterion, "n/a", "inconclusive", runtime, reason)


def module(name: str) -> ModuleType:
    """The analysis module of experiment ``name``."""
    return importlib.import_module(f"perfgrid.analysis.{name}")


def save(fig, out_dir, name: str) -> list:
    """Write one matplotlib figure as PNG, SVG and PDF; close it; return the paths."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    out = []
    for ext in ("png", "svg", "pdf"):
        path = Path(out_dir) / f"{name}.{ext}"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        out.append(path)
    plt.close(fig)
    return out


def by_runtime(table, runtime: str):
    """The rows of ``runtime`` (all rows if the table has no runtime column and
    ``runtime`` is python: hand-made tables in tests)."""
    if "runtime" not in table:
        return table if runtime == "python" else table.iloc[0:0]
    return table[table["runtime"] == runtime]


def without_erlang(table):
    """The Python and native rows: the claims about the ports leave the Erlang rows out."""
    if "runtime" not in table:
        return table
    return table[table["runtime"] != "erlang"]


def rate_at(table, **where) -> float | None:
    """The rate of the single row matching ``where`` (None if absent)."""
    rows = table
    for key, value in where.items():
        rows = rows[rows[key] == value]
    if rows.empty:
        return None
    return float(rows["rate"].max())
