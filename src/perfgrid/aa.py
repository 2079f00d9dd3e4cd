"""Two runs of one commit judged on their estimates, claim by claim (``perfgrid aa``).

Readings flip near a threshold even when the estimates agree, so the runs are compared on
what they measured. Per claim present in both (matched by experiment, runtime, hypothesis
and criterion): the difference of log estimates ``d = ln a - ln b``, its standard error
``sqrt(se_a^2 + se_b^2 + 2 tau^2)``, a two-sided normal p-value, and Benjamini-Hochberg
at ``Q`` over every claim with both estimates. Each run's ``se`` is read off its interval
at its own level, ``(ln hi - ln lo) / (2 z)``, less the between-run part that interval
already holds (its ``tau`` column, :class:`perfgrid.stats.Widened`); ``tau`` is the
claim's between-run standard deviation (:func:`perfgrid.betweenrun.tau`), once for each
run. Beside the estimates, the readings: whether they differ, and whether
they contradict (reproduced in one run, not reproduced in the other), the failure that
matters. Claims in one run only are listed apart; a claim without an interval in a run
has its reading compared and its estimate test "n/a".
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from perfgrid import betweenrun, compare
from perfgrid.atomic import atomic_path
from perfgrid.paths import Layout
from perfgrid.report.claims import read_claims

#: the false-discovery rate controlled over every claim with both estimates
Q = 0.05
#: what makes two runs' claims the same claim
KEY = ["experiment", "runtime", "hypothesis", "criterion"]
#: a pair of readings that contradict each other
CONTRADICTION = frozenset({"reproduced", "not reproduced"})
#: the table's columns, in order
COLUMNS = [*KEY, "present", "verdict_a", "verdict_b", "readings_differ", "contradiction",
           "value_a", "ci_low_a", "ci_high_a", "level_a", "value_b", "ci_low_b", "ci_high_b",
           "level_b", "unit", "d", "se", "tau", "p", "q", "flagged", "estimate_test"]


def within_se(row: pd.Series) -> tuple[float | None, str]:
    """(standard error of ``ln value`` inside the run, "") from the row's interval at its
    own ``level``, less the between-run part it holds (``tau``,
    :func:`perfgrid.betweenrun.within_interval`); (None, why) where the row has no usable
    estimate or interval."""
    value = float(row.get("value", math.nan))
    if not (math.isfinite(value) and value > 0):
        return None, "no estimate"
    level = float(row.get("level", math.nan))
    if not (math.isnan(level) or 0 < level < 1):
        return None, f"interval level {level!r} is not a probability"
    bounds = betweenrun.within_interval(row)
    if bounds is None:
        return None, "no interval"
    z = float(sps.norm.ppf(0.5 + (0.95 if math.isnan(level) else level) / 2))
    return (math.log(bounds[1]) - math.log(bounds[0])) / (2 * z), ""


def _index(claims: pd.DataFrame, label: str) -> dict[tuple[str, ...], pd.Series]:
    missing = [c for c in [*KEY, "verdict", "value", "ci_low", "ci_high"] if c not in claims]
    if missing:
        raise ValueError(f"run {label}: its claims lack column(s) {', '.join(missing)}")
    out: dict[tuple[str, ...], pd.Series] = {}
    for _, row in claims.iterrows():
        key = tuple(str(row[k]) for k in KEY)
        if key in out:
            raise ValueError(f"run {label}: the claim {key[0]} [{key[1]}] {key[2]!r} "
                             f"({key[3]}) is listed more than once")
        out[key] = row
    return out


def _side(row: pd.Series | None, side: str) -> dict[str, Any]:
    if row is None:
        return {f"{k}_{side}": (math.nan if k != "verdict" else "")
                for k in ("verdict", "value", "ci_low", "ci_high", "level")}
    level = float(row.get("level", math.nan))
    return {f"verdict_{side}": str(row["verdict"]),
            **{f"{k}_{side}": float(row[k]) for k in ("value", "ci_low", "ci_high")},
            f"level_{side}": 0.95 if math.isnan(level) else level}


def judge(a: pd.DataFrame, b: pd.DataFrame, q: float = Q) -> pd.DataFrame:
    """The first run's claims against the second's (each a frame of ``claims.csv``'s
    columns): one row per claim (:data:`COLUMNS`), those in both runs first, in A's order,
    then those in A only, then those in B only (``present``)."""
    rows_a, rows_b = _index(a, "A"), _index(b, "B")
    rows = []
    for key in [*rows_a, *(k for k in rows_b if k not in rows_a)]:
        ra, rb = rows_a.get(key), rows_b.get(key)
        unit = (ra if ra is not None else rb).get("unit", "")
        unit = unit if isinstance(unit, str) else ""
        row: dict[str, Any] = {**dict(zip(KEY, key, strict=True)),
                               "present": "both" if ra is not None and rb is not None
                               else "only in A" if ra is not None else "only in B",
                               **_side(ra, "a"), **_side(rb, "b"), "unit": unit,
                               "readings_differ": None, "contradiction": None,
                               "d": math.nan, "se": math.nan, "tau": math.nan, "p": math.nan,
                               "q": math.nan, "flagged": None, "estimate_test": ""}
        if ra is None or rb is None:
            row["estimate_test"] = f"n/a: the claim is {row['present']}"
            rows.append(row)
            continue
        row["readings_differ"] = row["verdict_a"] != row["verdict_b"]
        row["contradiction"] = {row["verdict_a"], row["verdict_b"]} == CONTRADICTION
        (se_a, why_a), (se_b, why_b) = within_se(ra), within_se(rb)
        row["flagged"] = False
        if se_a is None or se_b is None:
            whys = [f"{why} in {side}" for why, side in ((why_a, "A"), (why_b, "B")) if why]
            row["estimate_test"] = f"n/a: {' and '.join(whys)}"
            rows.append(row)
            continue
        tau = float(betweenrun.tau(key[0], key[1], key[2]))
        se = math.sqrt(se_a**2 + se_b**2 + 2 * tau**2)
        d = math.log(row["value_a"]) - math.log(row["value_b"])
        row.update(d=d, se=se, tau=tau)
        if se > 0:
            row["p"] = float(2 * sps.norm.sf(abs(d) / se))
        else:
            row["estimate_test"] = "n/a: no width left in either interval"
        rows.append(row)
    table = pd.DataFrame(rows, columns=COLUMNS)
    tested = table["p"].notna()
    if tested.any():
        table.loc[tested, "q"] = sps.false_discovery_control(table.loc[tested, "p"].to_numpy(),
                                                              method="bh")
        table.loc[tested, "flagged"] = table.loc[tested, "q"] <= q
        table.loc[tested, "estimate_test"] = table.loc[tested, "flagged"].map(
            {True: "flagged", False: "not flagged"})
    return table


def counts(table: pd.DataFrame) -> dict[str, int]:
    """The summary's numbers: claims compared (in both runs), readings that differ,
    contradictions, claims tested on their estimates, flagged by Benjamini-Hochberg, and
    the claims of one run only."""
    both = table[table["present"] == "both"]
    return {"compared": len(both), "differ": int(both["readings_differ"].eq(True).sum()),
            "contradictions": int(both["contradiction"].eq(True).sum()),
            "tested": int(both["p"].notna().sum()),
            "flagged": int(both["flagged"].eq(True).sum()),
            "only_a": int((table["present"] == "only in A").sum()),
            "only_b": int((table["present"] == "only in B").sum())}


def _estimate(row: pd.Series, side: str) -> str:
    value, low, high = (row[f"{k}_{side}"] for k in ("value", "ci_low", "ci_high"))
    if not math.isfinite(value):
        return "no estimate"
    text = f"{value:.3g}{row['unit']}"
    return (f"{text} [{low:.3g}, {high:.3g}]" if math.isfinite(low) and math.isfinite(high)
            else f"{text} [no interval]")


def _yes(value: Any) -> bool:
    """True for a True cell; False for False, None or NaN (a claim of one run only)."""
    return isinstance(value, bool | np.bool_) and bool(value)


def _name(row: pd.Series) -> str:
    return f"{row['experiment']} [{row['runtime']}] {row['hypothesis']}"


def summary(table: pd.DataFrame, q: float = Q) -> str:
    """The summary line, then one line per claim flagged, contradicting, read differently,
    or in one run only."""
    n = counts(table)
    lines = [f"{n['compared']} claims compared: {n['differ']} readings differ, "
             f"{n['contradictions']} contradictions (reproduced against not reproduced), "
             f"{n['flagged']} of {n['tested']} with both estimates flagged by "
             f"Benjamini-Hochberg at q = {q}; {n['only_a']} claims only in A, "
             f"{n['only_b']} only in B"]
    for _, row in table[table["present"] == "both"].iterrows():
        marks = [mark for mark, column in (("flagged", "flagged"),
                                           ("contradiction", "contradiction"),
                                           ("reading differs", "readings_differ"))
                 if _yes(row[column])]
        if marks:
            test = (f"d {row['d']:+.3f}, se {row['se']:.3f}, p {row['p']:.2g}, q {row['q']:.2g}"
                    if math.isfinite(row["p"]) else row["estimate_test"])
            lines.append(f"  {', '.join(marks)}: {_name(row)}: A {row['verdict_a']} "
                         f"{_estimate(row, 'a')}, B {row['verdict_b']} {_estimate(row, 'b')} "
                         f"({test})")
    for _, row in table[table["present"] != "both"].iterrows():
        side = "a" if row["present"] == "only in A" else "b"
        lines.append(f"  {row['present']}: {_name(row)} ({row['criterion']}): "
                     f"{row[f'verdict_{side}']} {_estimate(row, side)}")
    return "\n".join(lines)


def claims_of(source: str, scratch: Path) -> pd.DataFrame:
    """A run's claims (its ``claims.csv``) as a frame: from a result folder
    (``results/<host>``), or an archive, verified and extracted into ``scratch`` as
    ``perfgrid compare`` and ``gallery`` read one. ValueError naming ``source`` where
    there is no claims.csv."""
    path = Path(source)
    if path.is_file() and path.name.endswith(".tar.gz"):
        root = compare.resolve(source, scratch)
        where = f"{source}: its result folder results/{root.name}/ holds no claims.csv"
    elif path.is_dir():
        root = path
        where = f"{source}: no claims.csv in this folder"
    elif path.exists():
        raise ValueError(f"{source}: neither a result folder (results/<host>) nor a .tar.gz "
                         f"archive")
    else:
        raise ValueError(f"{source}: no such result folder or archive")
    table = Layout(root).claims_table
    if not table.is_file():
        raise ValueError(f"{where} (a run writes it with its report; a run from before "
                         f"claims.csv has none)")
    return pd.DataFrame([c.as_row() for c in read_claims(table)])


def label(source: str) -> str:
    """A short name for a run: its folder's name, or its archive's without .tar.gz."""
    path = Path(source)
    return path.name.removesuffix(".tar.gz") if path.is_file() else path.resolve().name


def main(a_src: str, b_src: str, out_dir: Path) -> dict[str, Any]:
    """Read both runs' claims, judge them, write ``out_dir/aa.csv``; the table, its
    :func:`counts`, the :func:`summary` text and the path written."""
    with tempfile.TemporaryDirectory(prefix="perfgrid-aa-") as scratch:
        a = claims_of(a_src, Path(scratch) / "a")
        b = claims_of(b_src, Path(scratch) / "b")
    table = judge(a, b)
    path = Path(out_dir) / "aa.csv"
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False)
    return {"table": table, "counts": counts(table), "text": summary(table), "path": path,
            "claims": (len(a), len(b))}

