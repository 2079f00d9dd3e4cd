"""The claims as a table: the report's columns, and ``claims.csv`` written and read back,
so that other machines' claims can be set beside these (perfgrid.publish.gallery)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

from perfgrid.analyse.analysis import VERDICTS, Claim
from perfgrid.analyse.ledger import COUNTED
from perfgrid.kit.atomic import atomic_path


def _counts(claims: pd.DataFrame) -> str:
    counts = claims["verdict"].value_counts() if len(claims) else pd.Series(dtype=int)
    return ", ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS)


def verdict_counts(claims: pd.DataFrame) -> str:
    """``12 reproduced, 3 not reproduced, 0 at the threshold, 9 inconclusive`` over the
    counted claims (seed and project claims, perfgrid.analyse.ledger.COUNTED), then each kind's
    own counts; the sanity checks are counted apart, never in the total. A table without
    kinds (an older claims.csv) counts every claim."""
    if "kind" not in claims or not claims["kind"].fillna("").astype(bool).any():
        return _counts(claims)
    kinds = claims["kind"].fillna("")
    counted = claims[kinds.isin(COUNTED)]
    parts = [f"{_counts(counted)} of {len(counted)} claims"]
    parts += [f"{kind} claims: {_counts(claims[kinds == kind])}" for kind in COUNTED]
    sanity = claims[kinds == "sanity"]
    parts.append(f"sanity checks (not in the total): {_counts(sanity)}")
    return "; ".join(parts)


CLAIM_COLUMNS = ["experiment", "kind", "hypothesis", "seed_figure", "criterion", "measured",
                 "verdict", "runtime", "reason", "basis", "threshold_why", "why"]
#: the columns of ``claims.csv``: every field of :class:`Claim`, in its order
CLAIM_FIELDS = [f.name for f in dataclasses.fields(Claim)]
#: columns a ``claims.csv`` of an older perfgrid may lack (read as empty)
OPTIONAL_CLAIM_FIELDS = ("basis", "level", "points", "eq_low", "eq_high", "tau", "kind",
                         "seed_figure", "seed_quote", "seed_where", "threshold_why",
                         "why_a_claim", "margin", "margin_from", "scale", "se", "df",
                         "tau_from", "p_differ", "near_boundary", "runs_needed",
                         "machine_kind", "design", "boot_id", "run_started")


def _claims_frame(claims: list[Claim]) -> pd.DataFrame:
    return pd.DataFrame([c.as_row() for c in claims], columns=CLAIM_FIELDS)


def write_claims(claims: pd.DataFrame, path: Path) -> None:
    """``claims.csv``: every claim with its compared value, interval and threshold, so
    that other machines' claims can be set beside these (``perfgrid gallery``)."""
    with atomic_path(path) as tmp:
        claims[CLAIM_FIELDS].to_csv(tmp, index=False)


def read_claims(path: Path) -> list[Claim]:
    """The claims of a ``claims.csv`` (:func:`write_claims`); ValueError naming the file
    and the row where a column is missing or a verdict or number is not one.

    A UTF-8 byte order mark (a spreadsheet's save) is read past. A row with fewer or
    more fields than the header (a file cut short, a stray comma) is refused, naming its
    line: a claim missing its last fields would otherwise be read with them empty."""
    import csv

    rows: list[tuple[int, dict[str, str]]] = []
    reader = None
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle, strict=True)
            header = reader.fieldnames or []
            missing = [c for c in CLAIM_FIELDS if c not in header
                       and c not in OPTIONAL_CLAIM_FIELDS]
            if missing:
                raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
            start = reader.line_num + 1  # a row's first line: a quoted field may span more
            for row in reader:
                extra, short = row.pop(None, []), sum(v is None for v in row.values())
                if extra or short:
                    given = len(header) + len(extra) - short
                    raise ValueError(f"{path} line {start}: {given} fields where the header "
                                     f"has {len(header)} (a row cut short or run on: the "
                                     f"file truncated or edited?)")
                rows.append((start, row))
                start = reader.line_num + 1
    except (UnicodeDecodeError, csv.Error) as err:
        where = f" line {reader.line_num}" if reader is not None and reader.line_num else ""
        raise ValueError(f"{path}{where}: not a readable claims table ({err})") from None
    numbers = ("value", "ci_low", "ci_high", "threshold", "level", "eq_low", "eq_high", "tau",
               "margin", "se", "df", "p_differ", "runs_needed", "run_started")
    claims = []
    for number, row in rows:
        try:
            fields = {k: (float(row[k]) if row.get(k) else float("nan")) if k in numbers
                      else row.get(k) or "" for k in CLAIM_FIELDS}
            if math.isnan(fields["level"]):  # a table from before the looks: 95 %
                fields["level"] = 0.95
            fields["scale"] = fields["scale"] or "log"
            claims.append(Claim(**fields))
        except ValueError as err:
            raise ValueError(f"{path} line {number}: {err}") from None
    return claims
