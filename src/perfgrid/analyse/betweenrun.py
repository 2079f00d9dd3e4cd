"""The variance between runs, per claim and machine kind: what one run's interval cannot see.

An interval over the rounds of one run covers the noise inside that run. Two runs of one
design on two VMs of one kind differ by more (the host, the day, the neighbours), so a
verdict about the machine adds a between-run component ``tau`` (a standard deviation on
the claim's own scale: log, or logit for a share).

Where it comes from, in this order (:func:`component`):

1. **records of the same machine kind and design** (``records.csv``: the rows shipped as
   package data, read-only, and the user's own under ``results/records.csv``, which
   ``perfgrid record`` writes; perfgrid.publish.recording), from runs that started before the run
   judged and are not that run. Each row holds a claim's estimate and its within-run
   standard error read with the quantile it was built with (se and df), so the unweighted
   moment estimator ``var(run estimates) - mean(se^2)`` is unbiased. A claim measured in
   :data:`OWN_RUNS` or more runs keeps its own estimate, shrunk toward the mean of its like
   claims (side-by-side ratios, absolute costs, shares: :func:`quantity_of`) by how
   precisely it is known; a claim with fewer takes its like claims' mean.
2. otherwise the **legacy record** (``recorded_runs.csv``: runs of earlier designs,
   without df, method or design digest) of the same kind, each interval read as Student's
   t with two degrees of freedom (three rounds, the design most of them ran), a claim's
   like claims there being its experiment's (the record keeps no units): a labelled
   fallback.
3. otherwise **none**: the intervals hold the noise inside the run only, and say so.

The same records give each claim a prior for its within-run variance (Smyth 2004):
:func:`component` returns ``prior_s2`` and ``prior_df`` (``d0``) from how the claim's
within-run variances spread over three or more earlier runs of its kind and design, and
perfgrid.analyse.analysis moderates the run's own variance toward it.

The machine kind is the CPU model (its brand words, without trademarks and clock) and
the CPU count, from machine.json (:func:`machine_kind`); the design the digest of what the
plan measures (perfgrid.design.plan.design_digest). The run being judged sets both with
:func:`judging`; without it (a table judged outside a run) no record applies.
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

#: the shipped records of this perfgrid's current format (package data, read-only)
SHIPPED = "records.csv"
#: the legacy record: figures quoted in closing notes, without df, method or design
LEGACY = "recorded_runs.csv"
#: the user's own records, beside the result folders (``results/records.csv``)
USER_RECORDS = "records.csv"
#: a claim recorded in this many runs or more has a between-run component of its own
#: (shrunk toward its like claims'); below it, its like claims' mean
OWN_RUNS = 3
#: a within-run variance prior needs this many earlier runs of the claim (Smyth's d0)
PRIOR_RUNS = 3
#: the degrees of freedom a legacy interval is read with (three rounds, t with 2 df)
LEGACY_DF = 2.0
#: what makes two recorded rows the same claim
CLAIM = ["experiment", "runtime", "hypothesis"]
#: kinds of quantity whose between-run spreads are alike (:func:`quantity_of`)
QUANTITIES = ("ratio", "cost", "share")
#: the record's columns, in order
COLUMNS = ["run_id", "started", "date", "commit", "machine_kind", "boot_id", "design",
           "ledger", "config", "experiment", "runtime", "hypothesis", "quantity", "scale",
           "value", "se", "df", "method", "verdict"]


def machine_kind(machine: dict[str, Any]) -> str:
    """``AMD EPYC x2``, ``Intel Xeon x2``: the CPU model's brand words (no ``(R)``,
    ``Processor``, ``CPU`` or clock) and the logical CPU count, from machine.json."""
    model = str(machine.get("cpu_model") or "unknown CPU")
    model = re.sub(r"\((R|TM|r|tm)\)", " ", model)
    model = re.sub(r"@.*$", " ", model)
    model = re.sub(r"\b(Processor|CPU|\d+-Core)\b", " ", model)
    model = " ".join(model.split()) or "unknown CPU"
    cpus = machine.get("cpus_logical") or machine.get("cpus") or "?"
    return f"{model} x{cpus}"


def _legacy_kind(host: str) -> str | None:
    """A legacy row's machine kind from its free-text host, where it names one."""
    cpus = re.search(r"(\d+)-v?CPU", host)
    count = cpus.group(1) if cpus else "?"
    for brand in ("AMD EPYC", "Intel Xeon"):
        if brand in host.replace("(R)", ""):
            return f"{brand} x{count}"
    return None


def quantity_of(unit: str, scale: str) -> str:
    """Which like claims a claim's between-run spread is shrunk toward: ``share`` (judged on
    the logit scale), ``ratio`` (two figures measured side by side, unit ``x``) or
    ``cost`` (an absolute figure, which follows the host's speed)."""
    if scale == "logit":
        return "share"
    return "ratio" if str(unit).strip() in ("x", "") else "cost"


@dataclass(frozen=True)
class Judging:
    """The run being judged: its machine kind, design, start and identity (records of that
    run, or started after it, never count), and the user's record files."""

    kind: str | None = None
    design: str | None = None
    started: float | None = None
    run_id: str | None = None
    boot_id: str | None = None
    records: tuple[str, ...] = ()


_judging: contextvars.ContextVar[Judging | None] = contextvars.ContextVar("judging",
                                                                         default=None)


def current() -> Judging:
    """The run being judged (:func:`judging`); an empty one outside it."""
    return _judging.get() or Judging()


@contextmanager
def judging(run: Judging) -> Iterator[Judging]:
    """Judge claims for ``run`` inside the block: its kind's and design's records apply."""
    token = _judging.set(run)
    try:
        yield run
    finally:
        _judging.reset(token)


def run_of(root: Path) -> Judging:
    """The run of a result folder (``results/<host>``): its machine kind (machine.json),
    design (plan.json), start (run.json; records of the run itself started no earlier, so
    never count) and the user's records beside it (``results/records.csv``)."""
    from perfgrid.design import model
    from perfgrid.kit.paths import Layout

    layout = Layout(Path(root))
    machine = json.loads(layout.machine.read_text()) if layout.machine.is_file() else {}
    design = (model.design_digest(model.read(layout.plan))
              if layout.plan.is_file() else None)
    started = (json.loads(layout.run_record.read_text()).get("started")
               if layout.run_record.is_file() else None)
    return Judging(kind=machine_kind(machine) if machine else None, design=design,
                   started=started, boot_id=machine.get("boot_id"),
                   records=(str(Path(root).resolve().parent / USER_RECORDS),))


@functools.cache
def _read(path: str) -> Any:
    import pandas as pd

    frame = pd.read_csv(path, encoding="utf-8-sig") if Path(path).is_file() else pd.DataFrame()
    for column in ("value", "se", "df", "started"):
        if column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def shipped_path() -> Path:
    """The shipped records (read-only package data)."""
    return Path(str(resources.files("perfgrid.data").joinpath(SHIPPED)))


def clear() -> None:
    """Forget what was read (after ``perfgrid record`` wrote a file)."""
    _read.cache_clear()


def records(run: Judging | None = None) -> Any:
    """The records (shipped and the user's) of ``run``'s machine kind and design, from runs
    that started before it and are not it: one row per run and claim."""
    import pandas as pd

    run = run or current()
    frames = [_read(str(shipped_path())), *(_read(p) for p in run.records)]
    frame = pd.concat([f for f in frames if not f.empty], ignore_index=True) if any(
        not f.empty for f in frames) else pd.DataFrame(columns=COLUMNS)
    if run.kind is None or run.design is None or frame.empty:
        return frame.iloc[0:0]
    keep = (frame["machine_kind"] == run.kind) & (frame["design"] == run.design)
    keep &= (frame["value"] > 0) & (frame["se"] > 0) & (frame["df"] > 0)
    if run.started is not None:
        keep &= frame["started"] < run.started
    if run.run_id:
        keep &= frame["run_id"] != run.run_id
    return frame[keep].drop_duplicates(["run_id", *CLAIM])


@functools.cache
def legacy(kind: str) -> Any:
    """The legacy record's rows of machine kind ``kind`` as records: each interval (at its
    level) read as Student's t with :data:`LEGACY_DF` degrees of freedom on the log scale."""
    import pandas as pd
    from scipy import special as sp  # Student's t quantile; scipy.stats takes ~0.4 s to import

    path = resources.files("perfgrid.data").joinpath(LEGACY)
    frame = pd.read_csv(str(path)) if path.is_file() else pd.DataFrame()
    if frame.empty:
        return frame
    frame = frame[frame["host"].fillna("").map(_legacy_kind) == kind].copy()
    for column in ("value", "ci_low", "ci_high", "level"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame = frame[(frame["value"] > 0) & (frame["ci_low"] > 0)
                  & (frame["ci_high"] > frame["ci_low"])]
    q = sp.stdtrit(LEGACY_DF, (0.5 + frame["level"].fillna(0.95) / 2).to_numpy())
    frame["se"] = (frame["ci_high"].map(math.log) - frame["ci_low"].map(math.log)) / (2 * q)
    frame["df"] = LEGACY_DF
    frame["run_id"] = frame["run_label"].astype(str) + " " + frame["date"].astype(str)
    frame["scale"] = "log"
    frame["quantity"] = "ratio"  # the legacy record keeps no units (component: by experiment)
    return frame.drop_duplicates(["run_id", *CLAIM])


def _scaled(rows: Any) -> Any:
    """Each row's estimate on its scale (log, or logit for a share)."""
    def one(row: Any) -> float:
        v = float(row["value"])
        if row.get("scale") == "logit":
            return math.log(v / (1 - v)) if 0 < v < 1 else math.nan
        return math.log(v)

    return rows.apply(one, axis=1)


@dataclass(frozen=True)
class Moments:
    """One claim's runs: the unweighted moment estimate of tau^2 (may be negative: kept so,
    for pooling over claims without bias) and its sampling variance."""

    tau2: float
    runs: int
    sampling_var: float


def moments(rows: Any) -> Moments | None:
    """The unweighted moment estimator over one claim's runs (two or more):
    ``var(estimates) - mean(se^2)``, unbiased whatever each run's within variance, since
    each ``se^2`` is read with its own df. Its sampling variance is about
    ``2 (tau^2 + mean se^2)^2 / (runs - 1)`` (normal theory)."""
    y = _scaled(rows).to_numpy(dtype=float)
    se = rows["se"].to_numpy(dtype=float)
    ok = [i for i in range(len(y)) if math.isfinite(y[i]) and se[i] > 0]
    if len(ok) < 2:
        return None
    import numpy as np

    y, se = y[ok], se[ok]
    within = float(np.mean(se**2))
    tau2 = float(np.var(y, ddof=1)) - within
    total = max(tau2, 0.0) + within
    return Moments(tau2, len(y), 2 * total**2 / (len(y) - 1))


@dataclass(frozen=True)
class Component:
    """A claim's between-run standard deviation and where it came from, with the prior for
    its within-run variance (None where fewer than :data:`PRIOR_RUNS` runs tell it)."""

    tau: float
    source: str  # "claim", "like claims", "legacy", "none"
    runs: int
    kind: str
    design: str
    words: str
    prior_s2: float | None = None
    prior_df: float | None = None
    scale: str = "log"


def _shrunk(own: Moments | None, like: list[Moments]) -> tuple[float, str]:
    """(tau^2, how): a claim's own moment estimate shrunk toward its like claims' mean by
    their precisions (empirical Bayes over the like claims), or that mean alone."""
    import numpy as np

    if not like:
        return (max(own.tau2, 0.0), "its own runs") if own else (0.0, "")
    mean = float(np.mean([m.tau2 for m in like]))
    spread = float(np.var([m.tau2 for m in like], ddof=1)) if len(like) > 1 else 0.0
    noise = float(np.mean([m.sampling_var for m in like]))
    between = max(0.0, spread - noise)
    if own is None or own.runs < OWN_RUNS:
        return max(mean, 0.0), f"the mean of {len(like)} like claims"
    weight = between / (between + own.sampling_var) if between + own.sampling_var > 0 else 0.0
    return (max(weight * own.tau2 + (1 - weight) * mean, 0.0),
            f"its own {own.runs} runs, weight {weight:.2f}, shrunk toward {len(like)} like "
            f"claims")


def smyth_prior(se: Any, df: float) -> tuple[float, float] | None:
    """(s0^2, d0): the prior of a within-run variance from the variances ``se^2`` of
    earlier runs, each on ``df`` degrees of freedom (Smyth 2004, method of moments on
    ``ln s^2``). ``d0`` is inf where the variances spread no more than chi-square alone
    would (all runs equally noisy); None with fewer than :data:`PRIOR_RUNS`."""
    import numpy as np
    from scipy import special as sp

    s2 = np.asarray(se, dtype=float) ** 2
    s2 = s2[np.isfinite(s2) & (s2 > 0)]
    if s2.size < PRIOR_RUNS or not (df > 0 and math.isfinite(df)):
        return None
    z = np.log(s2)
    e = z - sp.digamma(df / 2) + math.log(df / 2)
    excess = float(np.var(e, ddof=1)) - float(sp.polygamma(1, df / 2))
    mean = float(np.mean(e))
    if excess <= 0:
        return math.exp(mean), math.inf
    d0 = 2 * _trigamma_inverse(excess)
    return math.exp(mean + float(sp.digamma(d0 / 2)) - math.log(d0 / 2)), d0


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x (Newton's method, Smyth's starting point)."""
    from scipy import special as sp

    if x > 1e7:
        return 1 / math.sqrt(x)
    if x < 1e-6:
        return 1 / x
    y = 0.5 + 1 / x
    for _ in range(50):
        tri = float(sp.polygamma(1, y))
        step = tri * (1 - tri / x) / float(sp.polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def _estimated(frame: Any, claim: tuple[Any, ...], like_rows: Any) -> tuple[Any, Any]:
    """(the claim's own rows, ((tau^2, how), its own moments) or None where neither it
    nor a like claim tells a spread): its own moments shrunk toward those of the other
    claims among ``like_rows`` (a mask of ``frame``), :func:`_shrunk`."""
    mine = frame[(frame[CLAIM] == list(claim)).all(axis=1)]
    own = moments(mine) if len(mine) >= 2 else None
    pool = frame[like_rows]
    like = [m for key, rows in pool.groupby(CLAIM) if key != claim
            and (m := moments(rows)) is not None]
    if own is None and not like:
        return mine, None
    return mine, (_shrunk(own, like), own)


def _one_guest(found: Any) -> str:
    """Words for records that all share one boot id: runs on one guest are one draw of a
    host, so the spread between them is the spread between runs on that guest, not
    between guests, which a run on another guest of the kind also meets."""
    boots = found.drop_duplicates("run_id")["boot_id"].fillna("").astype(str)
    if len(boots) < 2 or (boots == "").any() or boots.nunique() > 1:
        return ""
    return (f", all on one guest (boot id {boots.iloc[0][:8]}), so the spread between guests "
            f"is not in it")


def component(experiment: str, runtime: str | None, hypothesis: str | None,
              quantity: str = "ratio", scale: str = "log") -> Component:
    """The between-run component of a claim for the run being judged (:func:`judging`)."""
    run = current()
    kind, design = run.kind or "unknown", run.design or "unknown"
    if run.kind is None:
        return Component(0.0, "none", 0, kind, design,
                         "the machine kind is unknown (no machine.json): no between-run "
                         "component", scale=scale)
    claim = (experiment, runtime, hypothesis)
    found = records(run)
    recorded = int(found["run_id"].nunique()) if not found.empty else 0
    few = ("NO record of this machine kind and design" if not recorded else
           f"only {recorded} recorded run of this machine kind and design, too few for a "
           f"spread between runs")
    if recorded:
        found = found.assign(quantity=found["quantity"].fillna("ratio"))
        mine, estimated = _estimated(found, claim, found["quantity"] == quantity)
        if estimated is not None:
            (tau2, how), own = estimated
            # a spread read off bounds or a count (df inf: an older best-of's record) tells
            # no prior; the others, each on its df
            spread = mine[mine["df"].map(math.isfinite)] if len(mine) else mine
            prior = (smyth_prior(spread["se"], float(spread["df"].median())) if len(spread)
                     else None)
            return Component(math.sqrt(tau2), "claim" if own and own.runs >= OWN_RUNS
                             else "like claims", recorded, kind, design,
                             f"from {recorded} recorded runs of this machine kind ({kind}) "
                             f"and design ({design}){_one_guest(found)}: {how}",
                             prior[0] if prior else None,
                             prior[1] if prior else None, scale)
    old = legacy(run.kind)
    if not old.empty:
        # the legacy record keeps no units: a claim's like claims are its experiment's
        _, estimated = _estimated(old, claim, old["experiment"] == experiment)
        if estimated is not None:
            (tau2, how), _ = estimated
            runs = int(old["run_id"].nunique())
            return Component(math.sqrt(tau2), "legacy", runs, kind, design,
                             f"{few}; instead the legacy "
                             f"record: {runs} runs of {kind} of mixed earlier designs, "
                             f"intervals read as t with {LEGACY_DF:g} df: {how}",
                             scale=scale)
    return Component(0.0, "none", 0, kind, design,
                     f"{few} ({kind}, {design}), and no legacy record of the kind: the "
                     f"interval holds the noise inside this run only", scale=scale)


def describe(claims: Any) -> str:
    """One paragraph for the report: the machine kind and design the between-run
    components came from, and what was used where there was no record of them."""
    if "tau_from" not in claims or claims.empty:
        return ("No between-run component was applied: the intervals hold the noise inside "
                "this run only, and a second run may differ by more.")
    run = current()
    kinds = claims.get("machine_kind", [])
    kind = next((k for k in kinds if isinstance(k, str) and k), run.kind or "unknown")
    designs = claims.get("design", [])
    design = next((d for d in designs if isinstance(d, str) and d), run.design or "unknown")
    sources = claims["tau_from"].fillna("").map(lambda w: w.split(":")[0])
    counts = sources.value_counts()
    parts = "; ".join(f"{n} claims {src}" for src, n in counts.items() if src)
    none = not any(s.startswith("from ") for s in counts.index)
    head = (f"This run's machine kind is {kind} and its design {design}. " + (
        "THERE ARE TOO FEW RECORDED RUNS OF THIS MACHINE KIND AND DESIGN (fewer than two): "
        if none else ""))
    return (f"{head}Each interval holds a between-run standard deviation (tau) on the "
            f"claim's own scale, estimated without bias from recorded runs of the same "
            f"kind and design before this one where there are any ({parts}). Column "
            f"tau_from of claims.csv gives each claim's source.")


def pair_tau(row_a: Any, row_b: Any) -> float:
    """The between-run standard deviation for judging two runs of one claim against each
    other (``perfgrid aa``): from the records of their machine kind and design that
    started before the earlier of the two and are neither (:func:`component`); where the
    rows name no kind, the smaller of the two rows' own ``tau``."""
    def get(row: Any, key: str) -> Any:
        value = row.get(key) if hasattr(row, "get") else None
        missing = value is None or value == "" or (isinstance(value, float)
                                                   and math.isnan(value))
        return None if missing else value

    kind, design = get(row_a, "machine_kind"), get(row_a, "design")
    if kind is None or design is None or kind != get(row_b, "machine_kind") or (
            design != get(row_b, "design")):
        from perfgrid.analyse.claimrow import tau_on_scale

        return min(tau_on_scale(row_a), tau_on_scale(row_b))
    starts = [float(s) for s in (get(row_a, "run_started"), get(row_b, "run_started"))
              if s is not None]
    outer = current()
    run = Judging(kind=str(kind), design=str(design), started=min(starts) if starts else None,
                  records=outer.records)
    with judging(run):
        found = component(str(row_a["experiment"]), str(row_a["runtime"]),
                          str(row_a["hypothesis"]), quantity_of(
                              str(get(row_a, "unit") or "x"), str(get(row_a, "scale") or "log")),
                          str(get(row_a, "scale") or "log"))
    return found.tau
