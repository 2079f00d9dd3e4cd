"""The formats of what a run writes, by number, and the one reader of older ones' shapes.

plan.json and run.json say their format (``format``: :data:`FORMAT`); one without it is
format 1. Format 1 is an earlier perfgrid's: its plan.json has no noise pairs, and its run
could let a claim point's round go (by a look at the claims or by the clock), writing a
note where the result would be (:func:`not_measured`). Format 2 measures every round of
its plan, so its raw results hold no note. A result set's format is the oldest that wrote
into it (:func:`for_run`): a format-1 set resumed by this perfgrid keeps its notes, and
says so. Result sets and archives of format 1 are still read (compare, gallery, report),
their notes through this module only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: the format this perfgrid writes (plan.json's and run.json's ``format``)
FORMAT = 2
#: a result set whose plan.json and run.json name no format: an earlier perfgrid's
UNNAMED = 1
#: the key of the note a format-1 run wrote where a round it let go would have its result
NOT_MEASURED = "perfgrid_not_measured"


def of(data: dict[str, Any]) -> int:
    """The format of plan.json's or run.json's ``data``: its ``format``, else 1."""
    found = data.get("format", UNNAMED)
    if not isinstance(found, int) or isinstance(found, bool) or not UNNAMED <= found <= FORMAT:
        raise ValueError(f"format: {found!r} is not a result format this perfgrid reads; "
                         f"allowed: {UNNAMED} to {FORMAT}")
    return found


def of_set(run_record: str | Path) -> int:
    """The format of the result set whose run.json is ``run_record`` (1 where it has none:
    an earlier perfgrid's, or a run that never started)."""
    path = Path(run_record)
    return of(json.loads(path.read_text())) if path.is_file() else UNNAMED


def for_run(run_record: str | Path, raw_dir: str | Path) -> int:
    """The format a starting run records in run.json (``run_record``): this perfgrid's,
    unless the result set already holds an earlier format's files (its run.json says an
    earlier format or none; or it has results in ``raw_dir`` and no run.json)."""
    if Path(run_record).is_file():
        return min(of_set(run_record), FORMAT)
    held = Path(raw_dir).is_dir() and any(Path(raw_dir).iterdir())
    return UNNAMED if held else FORMAT


def may_hold_notes(run_record: str | Path) -> bool:
    """Whether the result set of run.json ``run_record`` may hold notes of rounds let go:
    only format 1 wrote them."""
    return of_set(run_record) == UNNAMED


def not_measured(path: str | Path) -> dict[str, Any] | None:
    """The note at ``path`` of a round a format-1 run let go (None for a result)."""
    with open(path, "rb") as handle:
        head = handle.read(len(NOT_MEASURED) + 8)
    if NOT_MEASURED.encode() not in head:
        return None
    with open(path) as handle:
        data = json.load(handle)
    return data.get(NOT_MEASURED) if isinstance(data, dict) else None


def measured(paths: Iterable[str | Path]) -> list[str | Path]:
    """``paths`` less the notes of rounds let go (:func:`not_measured`)."""
    return [p for p in paths if not_measured(p) is None]
