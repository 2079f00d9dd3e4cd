"""The claims as a table: the report's columns, and ``claims.csv`` written and read back,
so that other machines' claims can be set beside these (perfgrid.gallery)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

from perfgrid.analysis import VERDICTS, Claim
from perfgrid.atomic import atomic_path


def verdict_counts(claims: pd.DataFrame) -> str:
    """``12 reproduced, 3 not reproduced, 9 inconclusive``."""
    counts = claims["verdict"].value_counts() if len(claims) else pd.Series(dtype=int)
    return ", ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS)


CLAIM_COLUMNS = ["experiment", "hypothesis", "criterion", "measured", "verdict", "runtime",
                 "reason", "basis", "why"]
#: the columns of ``claims.csv``: every field of :class:`Claim`, in its order
CLAIM_FIELDS = [f.name for f in dataclasses.fields(Claim)]
#: columns a ``claims.csv`` of an older perfgrid may lack (read as empty)
OPTIONAL_CLAIM_FIELDS = ("basis", "level", "points")


def _claims_frame(claims: list[Claim]) -> pd.DataFrame:
    return pd.DataFrame([c.as_row() for c in claims], columns=CLAIM_FIELDS)


def write_claims(claims: pd.DataFrame, path: Path) -> None:
    """``claims.csv``: every claim with its compared value, interval and threshold, so
    that other machines' claims can be set beside these (``perfgrid gallery``)."""
    with atomic_path(path) as tmp:
        claims[CLAIM_FIELDS].to_csv(tmp, index=False)


def read_claims(path: Path) -> list[Claim]:
    """The claims of a ``claims.csv`` (:func:`write_claims`); ValueError naming the file
    and the row where a column is missing or a verdict or number is not one."""
    import csv

    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in CLAIM_FIELDS if c not in (reader.fieldnames or [])
                       and c not in OPTIONAL_CLAIM_FIELDS]
            if missing:
                raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
            rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as err:
        raise ValueError(f"{path}: not a readable claims table ({err})") from None
    numbers = ("value", "ci_low", "ci_high", "threshold", "level")
    claims = []
    for number, row in enumerate(rows, 2):
        try:
            fields = {k: (float(row[k]) if row.get(k) else float("nan")) if k in numbers
                      else row.get(k) or "" for k in CLAIM_FIELDS}
            if math.isnan(fields["level"]):  # a table from before the looks: 95 %
                fields["level"] = 0.95
            claims.append(Claim(**fields))
        except ValueError as err:
            raise ValueError(f"{path} line {number}: {err}") from None
    return claims
