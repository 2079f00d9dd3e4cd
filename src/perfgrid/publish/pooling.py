"""Several runs of one machine pooled into one verdict per claim, runs as the unit
(``perfgrid pool``).

One run's interval holds a between-run component estimated from other runs
(perfgrid.analyse.betweenrun); with several runs of the machine at hand, their own spread is the
better witness. Per claim, on its own scale (log, or logit for shares, back-transformed):
each run's estimate and within-run standard error (perfgrid.analyse.claimrow.within_se: read with
the quantile its interval was built with, less the between-run part it holds). Runs of one
boot (the same ``boot_id``) are one draw of the host: they are combined first (inverse
variance, a fixed effect) and count once. Across the k draws, random effects:

- the within-run variance is pooled over the draws (each weighted by its degrees of
  freedom): the runs are of one design on one machine, and a variance on 2 df scatters by
  a factor of ten from run to run, so weights of one over each run's own would follow
  chance (a Hartung-Knapp interval on such weights covered 88 % in simulation);
- tau^2 by DerSimonian-Laird's moment equation on that variance
  (perfgrid.publish.gallery.dersimonian_laird), the unbiased ``var(estimates) - within variance``;
- the interval Hartung-Knapp(-Sidik-Jonkman): Student's t with k - 1 degrees of freedom on
  the weighted spread of the draws about their mean, ``sum w (y - mean)^2 / ((k-1) sum w)``;
- Cochran's Q on the pooled within variance: under no between-run part, ``Q / (k - 1)`` is
  F on (k - 1, the within df summed). Past its 95th percentile the claim reads "depends on
  the run": the runs say it is a fact of the run or host, not of the machine.

Then the claim's ledger rule judges the interval (stats.decide, its margin). A claim listed
twice in one run is refused (it would count as another run), as are two sources that are
one run (perfgrid.publish.gallery.check_distinct).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import special as _sp

from perfgrid.analyse import claimrow, ledger
from perfgrid.analyse.stats import Bounds, decide
from perfgrid.kit.atomic import atomic_path
from perfgrid.publish import aa
from perfgrid.publish.gallery import dersimonian_laird

#: the reading of a claim whose runs disagree beyond their intervals
DEPENDS = "depends on the run"
#: Q past this quantile of its null distribution: the runs disagree
DISAGREE = 0.95
#: a within-run variance of unbounded df (a normal one) weighs as this many df when pooled
KNOWN_DF = 1e6
COLUMNS = [*aa.KEY, "kind", "runs", "draws", "scale", "value", "ci_low", "ci_high",
           "eq_low", "eq_high", "tau", "i2", "q", "q_p", "op", "threshold", "margin",
           "verdict", "reason", "readings"]


def _draws(found: list[tuple[str, claimrow.WithinSe]]) -> list[tuple[float, float, float]]:
    """(y, variance, df) per host draw: runs of one boot (``boot_id``, a label per run;
    empty: a draw of its own) combined by inverse variance, their df by
    Welch-Satterthwaite."""
    boots: dict[str, list[claimrow.WithinSe]] = {}
    for n, (boot, w) in enumerate(found):
        boots.setdefault(boot or f"\0{n}", []).append(w)
    out = []
    for group in boots.values():
        w = np.array([1 / g.se**2 for g in group])
        c = w / w.sum()
        den = sum(ci**4 * g.se**4 / g.df for ci, g in zip(c, group, strict=True)
                  if math.isfinite(g.df))
        var = float(1 / w.sum())
        out.append((float(np.sum(c * [g.y for g in group])), var,
                    var**2 / den if den > 0 else math.inf))
    return out


def hartung_knapp(y: np.ndarray, var: np.ndarray, df: np.ndarray) -> dict[str, float]:
    """Random-effects pooling of ``y`` (k >= 2 draws) whose within-run variances ``var``
    have ``df`` degrees of freedom (module doc): ``mean``, its Hartung-Knapp ``sd`` (t on
    ``k - 1`` df), ``tau2``, ``q`` and its p-value ``q_p``, ``i2``."""
    k = len(y)
    weight = np.minimum(df, KNOWN_DF)
    within = float(np.sum(weight * var) / np.sum(weight))
    total_df = float(np.sum(weight))
    fit = dersimonian_laird(y, np.full(k, math.sqrt(within)))
    w = np.full(k, 1 / (within + fit["tau2"]))
    mean = float(np.sum(w * y) / np.sum(w))
    hk = float(np.sum(w * (y - mean) ** 2) / ((k - 1) * np.sum(w)))
    # chi2.sf and f.sf without scipy.stats' ~50 us of checks a call (thousands of claims)
    q_p = float(_sp.chdtrc(k - 1, fit["q"]) if total_df >= KNOWN_DF
                else _sp.fdtrc(k - 1, total_df, fit["q"] / (k - 1)))
    return {"mean": mean, "sd": math.sqrt(hk), "df": k - 1, "tau2": fit["tau2"],
            "q": fit["q"], "q_p": q_p, "i2": fit["i2"]}


def _interval(mean: float, sd: float, df: int, scale: str):
    """The pooled interval at a level: t with ``df`` degrees of freedom, on ``scale``."""
    def bounds(level: float):
        half = float(_sp.stdtrit(df, 0.5 + level / 2)) * sd
        return claimrow.from_scale(mean - half, scale), claimrow.from_scale(mean + half, scale)

    return bounds


def pool_claim(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One claim's runs (rows of claims.csv as mappings, one per run; ``_run`` names each,
    if given) pooled and judged. Plain mappings, not a frame: a frame per claim and its
    row Series cost most of a pooling of thousands of claims."""
    rows = _same_keys(rows)
    first = rows[0]
    try:
        entry = ledger.entry(str(first["experiment"]), str(first["hypothesis"]))
    except ledger.LedgerError:  # a run of an older perfgrid, whose claim the ledger lost
        entry = None
    margin = entry.margin if entry is not None else ledger.DEFAULT_MARGIN
    out: dict[str, Any] = {**{k: first[k] for k in aa.KEY},
                           "kind": entry.kind if entry is not None else "",
                           "runs": len(rows), "op": first["op"],
                           "threshold": float(first["threshold"]), "margin": margin,
                           "readings": "; ".join(str(row["verdict"]) for row in rows)}
    found = []
    for n, row in enumerate(rows):
        w = aa.within(row, str(row.get("_run", f"{n + 1}")))
        if w.se is not None and w.se > 0:
            boot = row.get("boot_id", "")
            found.append((boot if isinstance(boot, str) else "", w))
    scales = sorted({w.scale for _, w in found})
    out["scale"] = scales[0] if len(scales) == 1 else "/".join(scales)
    draws = _draws(found) if len(scales) == 1 else []
    out["draws"] = len(draws)
    if len(scales) > 1:
        return {**out, "verdict": "inconclusive",
                "reason": f"the runs judge it on different scales ({', '.join(scales)})"}
    if len(draws) < 2:
        return {**out, "verdict": "inconclusive",
                "reason": f"{len(found)} run(s) with an interval, {len(draws)} host draw(s) "
                          f"(runs of one boot count once); pooling needs two"}
    y, var, df = (np.array(column) for column in zip(*draws, strict=True))
    fit = hartung_knapp(y, var, df)
    scale = scales[0]
    quantity = Bounds(claimrow.from_scale(fit["mean"], scale),
                      _interval(fit["mean"], fit["sd"], fit["df"], scale))
    lo, hi = quantity.interval(0.95)
    eq = quantity.interval(0.90)
    out.update(value=quantity.value, ci_low=lo, ci_high=hi, eq_low=eq[0], eq_high=eq[1],
               tau=math.sqrt(fit["tau2"]), i2=fit["i2"], q=fit["q"], q_p=fit["q_p"])
    if fit["q_p"] < 1 - DISAGREE:
        return {**out, "verdict": DEPENDS,
                "reason": f"the runs disagree beyond their within-run spread (Q "
                          f"{fit['q']:.1f} on {fit['df']} df, p {fit['q_p']:.3g}; I^2 "
                          f"{fit['i2']:.0%})"}
    if first["op"] == "all" or not math.isfinite(out["threshold"]):
        return {**out, "verdict": "inconclusive", "reason": "a compound claim: pool its parts"}
    verdict, reason = decide(quantity, str(first["op"]), out["threshold"], ".3g",
                             str(first.get("unit", "")), margin)
    return {**out, "verdict": verdict, "reason": reason}


def pool(runs: list[pd.DataFrame], labels: list[str] | None = None) -> pd.DataFrame:
    """Every claim of two or more runs' claims tables pooled (:func:`pool_claim`), in the
    order the claims first come; ValueError naming the run where one lists a claim twice."""
    labels = labels or [str(n + 1) for n in range(len(runs))]
    indexed = [{key: row | {"_run": name} for key, row in aa.index(run, name).items()}
               for run, name in zip(runs, labels, strict=True)]
    keys = list(dict.fromkeys(key for found in indexed for key in found))
    rows = [pool_claim([found[key] for found in indexed if key in found]) for key in keys]
    return pd.DataFrame(rows, columns=COLUMNS)


def _same_keys(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with the same keys, NaN where a row lacks one, as a frame of them holds
    them: a column one run lacks reads as missing, never as absent."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return [row if len(row) == len(keys) else {k: row.get(k, math.nan) for k in keys}
            for row in rows]


def main(sources: list[str], out_dir: Path) -> dict[str, Any]:
    """Read the runs, refuse duplicates, pool, write ``out_dir/pooled.csv``."""
    if len(sources) < 2:
        raise ValueError(f"pooling needs two or more runs (got {len(sources)})")
    with tempfile.TemporaryDirectory(prefix="perfgrid-pool-") as scratch:
        runs = aa.runs_of(sources, Path(scratch))
    table = pool(runs, sources)
    path = Path(out_dir) / "pooled.csv"
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False)
    counted = table[table["kind"].isin(ledger.COUNTED) | (table["kind"] == "")]
    counts = counted["verdict"].value_counts().to_dict()
    return {"table": table, "path": path, "counts": counts}
