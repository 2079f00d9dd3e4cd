"""Several runs of one machine pooled into one verdict per claim, runs as the unit
(``perfgrid pool``).

One run's interval holds a between-run component estimated from other runs
(perfgrid.betweenrun); with several runs of the machine at hand, their own spread is the
better witness. Per claim: each run's estimate on the log scale with its within-run
standard error (its interval less the between-run part it holds, perfgrid.aa.within_se),
pooled by random effects (DerSimonian-Laird, perfgrid.gallery.dersimonian_laird: tau^2
between these runs, I^2 within [0, 1)), the interval Student's t with runs - 1 degrees of
freedom, then judged by the claim's ledger rule (stats.decide, its margin). A claim whose
runs disagree beyond their intervals (Cochran's Q past its 95th percentile) reads
"depends on the run": the runs say it is a fact of the run or host, not of the machine.
Two sources that are the same run (the same raw files or run.json) are refused.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from perfgrid import aa, ledger
from perfgrid.atomic import atomic_path
from perfgrid.gallery import dersimonian_laird, run_identity
from perfgrid.stats import Bounds, decide

#: the reading of a claim whose runs disagree beyond their intervals
DEPENDS = "depends on the run"
#: Cochran's Q past this quantile of chi-square(runs - 1): the runs disagree
DISAGREE = 0.95
COLUMNS = [*aa.KEY, "kind", "runs", "value", "ci_low", "ci_high", "eq_low", "eq_high",
           "tau", "i2", "q_p", "op", "threshold", "margin", "verdict", "reason", "readings"]


def _interval(mean: float, sd: float, df: int):
    """The pooled interval at a level: t with ``df`` degrees of freedom."""
    def bounds(level: float):
        half = float(sps.t.ppf(0.5 + level / 2, df)) * sd
        return math.exp(mean - half), math.exp(mean + half)

    return bounds


def pool_claim(rows: pd.DataFrame) -> dict[str, Any]:
    """One claim's runs (rows of claims.csv, one per run) pooled and judged."""
    first = rows.iloc[0]
    try:
        entry = ledger.entry(str(first["experiment"]), str(first["hypothesis"]))
    except ledger.LedgerError:  # a run of an older perfgrid, whose claim the ledger lost
        entry = None
    margin = entry.margin if entry is not None else ledger.DEFAULT_MARGIN
    out: dict[str, Any] = {**{k: first[k] for k in aa.KEY},
                           "kind": entry.kind if entry is not None else "",
                           "runs": len(rows), "op": first["op"],
                           "threshold": float(first["threshold"]), "margin": margin,
                           "readings": "; ".join(str(v) for v in rows["verdict"])}
    found = [(math.log(float(r["value"])), se) for _, r in rows.iterrows()
             for se, _ in [aa.within_se(r)] if se is not None and se > 0]
    if len(found) < 2:
        return {**out, "verdict": "inconclusive",
                "reason": f"{len(found)} run(s) with an interval; pooling needs two"}
    effect, se = (np.array(column) for column in zip(*found, strict=True))
    fit = dersimonian_laird(effect, se)
    q_p = float(sps.chi2.sf(fit["q"], fit["df"]))
    quantity = Bounds(math.exp(fit["mean"]), _interval(fit["mean"], fit["sd"], fit["df"]))
    lo, hi = quantity.interval(0.95)
    eq = quantity.interval(0.90)
    out.update(value=quantity.value, ci_low=lo, ci_high=hi, eq_low=eq[0], eq_high=eq[1],
               tau=math.sqrt(fit["tau2"]), i2=fit["i2"], q_p=q_p)
    if q_p < 1 - DISAGREE:
        return {**out, "verdict": DEPENDS,
                "reason": f"the runs disagree beyond their intervals (Q {fit['q']:.1f} on "
                          f"{fit['df']} df, p {q_p:.3g}; I^2 {fit['i2']:.0%})"}
    if first["op"] == "all" or not math.isfinite(out["threshold"]):
        return {**out, "verdict": "inconclusive", "reason": "a compound claim: pool its parts"}
    verdict, reason = decide(quantity, str(first["op"]), out["threshold"], ".3g",
                             str(first.get("unit", "")), margin)
    return {**out, "verdict": verdict, "reason": reason}


def pool(runs: list[pd.DataFrame]) -> pd.DataFrame:
    """Every claim of two or more runs' claims tables pooled (:func:`pool_claim`), in the
    first run's order."""
    frames = [r.assign(_run=i) for i, r in enumerate(runs)]
    every = pd.concat(frames, ignore_index=True)
    rows = [pool_claim(group) for _, group in every.groupby(aa.KEY, sort=False)]
    return pd.DataFrame(rows, columns=COLUMNS)


def check_distinct(roots: list[Path], sources: list[str]) -> None:
    """Refuse two sources that are one run (gallery.run_identity): pooled twice, one run
    would count as two and narrow the interval."""
    seen: dict[tuple[str, str], str] = {}
    for root, source in zip(roots, sources, strict=True):
        for kind, value in run_identity(root).items():
            if value and seen.setdefault((kind, value), source) != source:
                raise ValueError(f"refused, nothing written: {seen[(kind, value)]} and "
                                 f"{source} are the same run ({kind}); give each run once")


def main(sources: list[str], out_dir: Path) -> dict[str, Any]:
    """Read the runs, refuse duplicates, pool, write ``out_dir/pooled.csv``."""
    from perfgrid import compare

    if len(sources) < 2:
        raise ValueError(f"pooling needs two or more runs (got {len(sources)})")
    with tempfile.TemporaryDirectory(prefix="perfgrid-pool-") as scratch:
        roots = [compare.resolve(source, Path(scratch) / str(i)) if Path(source).is_file()
                 else Path(source) for i, source in enumerate(sources)]
        check_distinct(roots, sources)
        runs = [aa.claims_of(str(root), Path(scratch) / "claims") for root in roots]
    table = pool(runs)
    path = Path(out_dir) / "pooled.csv"
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False)
    counted = table[table["kind"].isin(ledger.COUNTED) | (table["kind"] == "")]
    counts = counted["verdict"].value_counts().to_dict()
    return {"table": table, "path": path, "counts": counts}
