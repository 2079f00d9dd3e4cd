"""Two runs of one commit judged on their estimates, claim by claim (``perfgrid aa``).

Readings flip near a threshold even when the estimates agree, so the runs are compared on
what they measured. Per claim present in both (matched by experiment, runtime, hypothesis
and criterion), on the claim's own scale (log, or logit for shares): the difference of
the estimates ``d = y_a - y_b``, its standard error ``sqrt(se_a^2 + se_b^2 + 2 tau^2)``
and Welch's t test: degrees of freedom by Welch-Satterthwaite from each run's (tau taken
as known), a two-sided p-value from t. Each run's ``se`` is its within-run standard error
(perfgrid.analyse.claimrow.within_se: recorded, or read off its interval with the quantile it was
built with, less the between-run part it holds); ``tau`` is the pair's between-run
standard deviation (:func:`_pair_tau`), once for each run. Benjamini-Hochberg at ``Q``
runs over the counted claims (perfgrid.analyse.ledger.COUNTED: seed and project) with both
estimates; sanity checks are listed apart, never flagged nor in the totals. Beside the
estimates, the readings: a ``flip`` is a contradiction (reproduced in one run, not
reproduced in the other, the failure that matters) or a neighbour (any other pair of
readings that differ). Claims in one run only are listed apart; a claim without an
interval in a run has its reading compared and its estimate test "n/a". A run is never
judged against itself or its copy (:func:`check_distinct`).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import special as _sp
from scipy import stats as sps

from perfgrid.analyse import betweenrun, claimrow
from perfgrid.kit.atomic import atomic_path
from perfgrid.kit.paths import Layout
from perfgrid.publish import compare
from perfgrid.publish.gallery import check_distinct
from perfgrid.publish.report.claims import read_claims

#: the false-discovery rate controlled over the counted claims with both estimates
Q = 0.05
#: what makes two runs' claims the same claim
KEY = ["experiment", "runtime", "hypothesis", "criterion"]
#: a pair of readings that contradict each other
CONTRADICTION = frozenset({"reproduced", "not reproduced"})
#: the table's columns, in order
COLUMNS = [*KEY, "kind", "counted", "present", "verdict_a", "verdict_b", "readings_differ",
           "contradiction", "flip", "value_a", "ci_low_a", "ci_high_a", "level_a",
           "value_b", "ci_low_b", "ci_high_b", "level_b", "unit", "scale", "d", "se", "df",
           "tau", "p", "q", "flagged", "estimate_test"]


def _pair_tau(ra: dict[str, Any], rb: dict[str, Any]) -> float:
    """The pair's between-run standard deviation on the claim's scale
    (perfgrid.analyse.betweenrun.pair_tau)."""
    return float(betweenrun.pair_tau(ra, rb))


def index(claims: pd.DataFrame, label: str) -> dict[tuple[str, ...], dict[str, Any]]:
    """A run's claims by :data:`KEY`, each row a plain dict (a Series' lookups cost ~5 us
    each, dozens a claim: most of judging or pooling thousands); ValueError naming the run
    where a column is missing or a claim is listed twice (counted twice, one run would
    weigh as two)."""
    missing = [c for c in [*KEY, "verdict", "value", "ci_low", "ci_high"] if c not in claims]
    if missing:
        raise ValueError(f"run {label}: its claims lack column(s) {', '.join(missing)}")
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for row in claims.to_dict("records"):
        key = tuple(str(row[k]) for k in KEY)
        if key in out:
            raise ValueError(f"run {label}: the claim {key[0]} [{key[1]}] {key[2]!r} "
                             f"({key[3]}) is listed more than once")
        out[key] = row
    return out


def within(row: dict[str, Any], label: str) -> claimrow.WithinSe:
    """perfgrid.analyse.claimrow.within_se, its errors naming the run."""
    try:
        return claimrow.within_se(row)
    except ValueError as err:
        raise ValueError(f"run {label}: {err}") from None


def welch(a: claimrow.WithinSe, b: claimrow.WithinSe, tau: float) -> tuple[float, float]:
    """(se, df) of ``a.y - b.y``: ``sqrt(se_a^2 + se_b^2 + 2 tau^2)`` and its degrees of
    freedom by Welch-Satterthwaite (tau known: no term of its own)."""
    va, vb = a.se**2, b.se**2
    var = va + vb + 2 * tau**2
    den = sum(v**2 / df for v, df in ((va, a.df), (vb, b.df)) if math.isfinite(df))
    return math.sqrt(var), (var**2 / den if den > 0 else math.inf)


def _side(row: dict[str, Any] | None, side: str) -> dict[str, Any]:
    if row is None:
        return {f"{k}_{side}": (math.nan if k != "verdict" else "")
                for k in ("verdict", "value", "ci_low", "ci_high", "level")}
    level = float(row.get("level", math.nan))
    return {f"verdict_{side}": str(row["verdict"]),
            **{f"{k}_{side}": float(row[k]) for k in ("value", "ci_low", "ci_high")},
            f"level_{side}": 0.95 if math.isnan(level) else level}


def _flip(verdict_a: str, verdict_b: str) -> str:
    """"" (the same reading), "contradiction" or "neighbour" (any other pair that differs)."""
    if verdict_a == verdict_b:
        return ""
    return "contradiction" if {verdict_a, verdict_b} == CONTRADICTION else "neighbour"


def judge(a: pd.DataFrame, b: pd.DataFrame, q: float = Q) -> pd.DataFrame:
    """The first run's claims against the second's (each a frame of ``claims.csv``'s
    columns): one row per claim (:data:`COLUMNS`), those in both runs first, in A's order,
    then those in A only, then those in B only (``present``)."""
    rows_a, rows_b = index(a, "A"), index(b, "B")
    rows = []
    for key in [*rows_a, *(k for k in rows_b if k not in rows_a)]:
        ra, rb = rows_a.get(key), rows_b.get(key)
        either = ra if ra is not None else rb
        unit = either.get("unit", "")
        kinds = [str(r.get("kind", "") or "") for r in (ra, rb) if r is not None]
        kind = next((k for k in kinds if k and k != "nan"), "")
        row: dict[str, Any] = {**dict(zip(KEY, key, strict=True)), "kind": kind,
                               "counted": claimrow.counted({"kind": kind}),
                               "present": "both" if ra is not None and rb is not None
                               else "only in A" if ra is not None else "only in B",
                               **_side(ra, "a"), **_side(rb, "b"),
                               "unit": unit if isinstance(unit, str) else "",
                               "readings_differ": None, "contradiction": None, "flip": "",
                               "scale": "", "d": math.nan, "se": math.nan, "df": math.nan,
                               "tau": math.nan, "p": math.nan, "q": math.nan,
                               "flagged": None, "estimate_test": ""}
        rows.append(row)
        if ra is None or rb is None:
            row["estimate_test"] = f"n/a: the claim is {row['present']}"
            continue
        row["flip"] = _flip(row["verdict_a"], row["verdict_b"])
        row["readings_differ"] = bool(row["flip"])
        row["contradiction"] = row["flip"] == "contradiction"
        wa, wb = within(ra, "A"), within(rb, "B")
        row["flagged"] = False if row["counted"] else None
        whys = [f"{w.how} in {side}" for w, side in ((wa, "A"), (wb, "B")) if w.se is None]
        if not whys and wa.scale != wb.scale:
            whys = [f"judged on the {wa.scale} scale in A, the {wb.scale} scale in B"]
        if whys:
            row["estimate_test"] = f"n/a: {' and '.join(whys)}"
            continue
        tau = _pair_tau(ra, rb)
        se, df = welch(wa, wb, tau)
        d = wa.y - wb.y
        # t.sf and norm.sf without scipy.stats' ~50 us of checks a call: stdtr and ndtr
        p = float(2 * (_sp.stdtr(df, -abs(d) / se) if math.isfinite(df)
                       else _sp.ndtr(-abs(d) / se)))
        row.update(scale=wa.scale, d=d, se=se, df=df, tau=tau, p=p,
                   estimate_test="" if row["counted"] else "not counted: a sanity check")
    table = pd.DataFrame(rows, columns=COLUMNS)
    tested = table["p"].notna() & table["counted"]
    if tested.any():
        table.loc[tested, "q"] = sps.false_discovery_control(table.loc[tested, "p"].to_numpy(),
                                                              method="bh")
        table.loc[tested, "flagged"] = table.loc[tested, "q"] <= q
        table.loc[tested, "estimate_test"] = table.loc[tested, "flagged"].map(
            {True: "flagged", False: "not flagged"})
    return table


def counts(table: pd.DataFrame) -> dict[str, int]:
    """The summary's numbers over the counted claims in both runs: claims compared,
    readings that differ, contradictions and neighbour flips, claims tested on their
    estimates, flagged by Benjamini-Hochberg; the claims of one run only; and the sanity
    checks compared (``sanity``) and read differently (``sanity_differ``), apart."""
    both = table[table["present"] == "both"]
    counted, sanity = both[both["counted"].astype(bool)], both[~both["counted"].astype(bool)]
    return {"compared": len(counted), "differ": int(counted["readings_differ"].eq(True).sum()),
            "contradictions": int((counted["flip"] == "contradiction").sum()),
            "neighbours": int((counted["flip"] == "neighbour").sum()),
            "tested": int(counted["p"].notna().sum()),
            "flagged": int(counted["flagged"].eq(True).sum()),
            "only_a": int((table["present"] == "only in A").sum()),
            "only_b": int((table["present"] == "only in B").sum()),
            "sanity": len(sanity), "sanity_differ": int(sanity["readings_differ"].eq(True).sum())}


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


def _test(row: pd.Series) -> str:
    if not math.isfinite(row["p"]):
        return row["estimate_test"]
    adjusted = f", q {row['q']:.2g}" if math.isfinite(row["q"]) else ""
    return f"d {row['d']:+.3f}, se {row['se']:.3f}, df {row['df']:.3g}, p {row['p']:.2g}{adjusted}"


def summary(table: pd.DataFrame, q: float = Q) -> str:
    """The summary line over the counted claims, then one line per counted claim flagged
    or whose reading flipped (a contradiction, or a neighbour), the claims of one run only,
    and the sanity checks apart."""
    n = counts(table)
    lines = [f"{n['compared']} counted claims compared: {n['differ']} readings differ "
             f"({n['contradictions']} contradictions: reproduced against not reproduced; "
             f"{n['neighbours']} neighbour flips), {n['flagged']} of {n['tested']} with both "
             f"estimates flagged by Welch's t and Benjamini-Hochberg at q = {q}; "
             f"{n['only_a']} claims only in A, {n['only_b']} only in B; {n['sanity']} sanity "
             f"checks apart, {n['sanity_differ']} read differently"]
    both = table[table["present"] == "both"]
    for _, row in both[both["counted"].astype(bool)].iterrows():
        marks = [mark for mark, on in (("flagged", _yes(row["flagged"])),
                                       (f"{row['flip']} flip", bool(row["flip"]))) if on]
        if marks:
            lines.append(f"  {', '.join(marks)}: {_name(row)}: A {row['verdict_a']} "
                         f"{_estimate(row, 'a')}, B {row['verdict_b']} {_estimate(row, 'b')} "
                         f"({_test(row)})")
    for _, row in table[table["present"] != "both"].iterrows():
        side = "a" if row["present"] == "only in A" else "b"
        lines.append(f"  {row['present']}: {_name(row)} ({row['criterion']}): "
                     f"{row[f'verdict_{side}']} {_estimate(row, side)}")
    for _, row in both[~both["counted"].astype(bool)].iterrows():
        if row["flip"]:
            lines.append(f"  sanity check, not counted, {row['flip']} flip: {_name(row)}: "
                         f"A {row['verdict_a']} {_estimate(row, 'a')}, B {row['verdict_b']} "
                         f"{_estimate(row, 'b')} ({_test(row)})")
    return "\n".join(lines)


def root_of(source: str, scratch: Path) -> Path:
    """A run's result folder: ``source`` itself (``results/<host>``), or an archive,
    verified and extracted into ``scratch`` as ``perfgrid compare`` reads one. ValueError
    naming ``source`` where it is neither."""
    path = Path(source)
    if path.is_file() and path.name.endswith(".tar.gz"):
        return compare.resolve(source, scratch)
    if path.is_dir():
        return path
    if path.exists():
        raise ValueError(f"{source}: neither a result folder (results/<host>) nor a .tar.gz "
                         f"archive")
    raise ValueError(f"{source}: no such result folder or archive")


def _claims_at(root: Path, source: str) -> pd.DataFrame:
    table = Layout(root).claims_table
    if not table.is_file():
        where = (f"{source}: its result folder results/{root.name}/ holds no claims.csv"
                 if Path(source).is_file() else f"{source}: no claims.csv in this folder")
        raise ValueError(f"{where} (a run writes it with its report; a run from before "
                         f"claims.csv has none)")
    return pd.DataFrame([c.as_row() for c in read_claims(table)])


def claims_of(source: str, scratch: Path) -> pd.DataFrame:
    """A run's claims (its ``claims.csv``) as a frame, from a result folder or an archive
    (:func:`root_of`); ValueError naming ``source`` where there is no claims.csv."""
    return _claims_at(root_of(source, scratch), source)


def runs_of(sources: list[str], scratch: Path) -> list[pd.DataFrame]:
    """Each source's claims, once every source is known to be a run of its own
    (:func:`check_distinct`, SameRun otherwise)."""
    roots = [root_of(source, scratch / str(i)) for i, source in enumerate(sources)]
    check_distinct(roots, sources)
    return [_claims_at(root, source) for root, source in zip(roots, sources, strict=True)]


def label(source: str) -> str:
    """A short name for a run: its folder's name, or its archive's without .tar.gz."""
    path = Path(source)
    return path.name.removesuffix(".tar.gz") if path.is_file() else path.resolve().name


def main(a_src: str, b_src: str, out_dir: Path) -> dict[str, Any]:
    """Read both runs' claims, judge them, write ``out_dir/aa.csv``; the table, its
    :func:`counts`, the :func:`summary` text and the path written."""
    with tempfile.TemporaryDirectory(prefix="perfgrid-aa-") as scratch:
        a, b = runs_of([a_src, b_src], Path(scratch))
    # the user's records beside each result folder count for tau, with the shipped ones
    mine = tuple(dict.fromkeys(str(Path(s).resolve().parent / betweenrun.USER_RECORDS)
                               for s in (a_src, b_src)))
    with betweenrun.judging(betweenrun.Judging(records=mine)):
        table = judge(a, b)
    path = Path(out_dir) / "aa.csv"
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False)
    return {"table": table, "counts": counts(table), "text": summary(table), "path": path,
            "claims": (len(a), len(b))}

