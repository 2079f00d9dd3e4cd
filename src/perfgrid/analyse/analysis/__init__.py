"""Per-experiment analysis: the seed's published rows, plots, and claims.

Each experiment ``<name>`` has a module ``perfgrid.experiments.<name>.analysis`` (found by
:func:`module`), built on the shared machinery here, with:

- ``SEED_ROWS``: the seed's published figures as table rows (quoted, with
  their source), in the same columns as this machine's table;
- ``plot(table, out_dir, experiment) -> list[Path]``: seaborn figures (PNG, SVG and
  PDF) of a table with rows, set up by :func:`plot_setup`; seaborn is imported inside it,
  as the report imports the module for its claims alone (seaborn brings scipy.stats: ~0.5 s);
- ``claims(table, experiment) -> list[Claim]``: each seed claim as a hypothesis, the
  criterion, the figure measured here with its 95 % interval, and a verdict
  decided by that interval (:func:`judged`), with a ``why`` from the kernel
  counters of the points it compares (:func:`why`);
- optionally the report's further hooks (:data:`REPORT_HOOKS`): ``EXTRA_COLUMNS``,
  ``notes(table, experiment)`` and ``tables(table, experiment)``.

Each function receives the experiment's :class:`~perfgrid.experiments.base.Experiment`
(from the registry), so its facts (axes, claim points, runtimes, name) are read from it,
never copied into the analysis.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

import numpy as np

from perfgrid.analyse import ledger
from perfgrid.analyse.stats import (
    LEFT_OUT,
    LEVEL,
    SETTLE_MAX,
    Estimate,
    Share,
    Widened,
    basis,
    decide,
    disagreeing_rounds,
    equivalence_level,
    reduce,
    rounds_to_settle,
    row_now,
    rows_moderated,
    safe_interval,
)

VERDICTS = ("reproduced", "not reproduced", "at the threshold", "inconclusive")
#: a run's within-run variance past this quantile of what its prior predicts (F(df, d0))
#: is not moderated (:func:`moderate`): fixed before any run, from the simulation in
#: tests/test_readings.py (sigma varying 0.25 in ln between runs)
GUARD = 0.75


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
    #: the compared quantity, its 95 % interval and the threshold it is judged against
    value: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    op: str = ""
    threshold: float = math.nan
    unit: str = ""
    #: the kernel counters of the compared points, per unit of work (:func:`why`)
    why: str = ""
    #: what the interval rests on: paired rounds, rows reduced, processes (stats.basis)
    basis: str = ""
    #: the interval's level: 95 % (stats.LEVEL) unless a caller set another
    level: float = LEVEL
    #: the grid points its quantity was computed from (``Experiment.point_key``), "; "
    #: between them
    points: str = ""
    #: the interval two one-sided tests judge "at the threshold" by (90 % beside 95 %)
    eq_low: float = math.nan
    eq_high: float = math.nan
    #: the between-run standard deviation (log scale) the intervals hold
    #: (perfgrid.analyse.betweenrun)
    tau: float = math.nan
    #: the claims ledger's entry (perfgrid.analyse.ledger): seed, project or sanity; the seed's
    #: figure, a short quote and where it is; why the threshold differs; the margin
    kind: str = ""
    seed_figure: str = ""
    seed_quote: str = ""
    seed_where: str = ""
    threshold_why: str = ""
    why_a_claim: str = ""
    margin: float = math.nan
    margin_from: str = ""
    #: how sure the reading is (perfgrid.analyse.readings): the scale it was judged on (log, or
    #: logit for a share), the within-run standard error there (moderated by the claim's
    #: earlier runs where they tell a prior) and its df, where tau came from
    scale: str = "log"
    se: float = math.nan
    df: float = math.nan
    tau_from: str = ""
    #: the chance another run on this machine kind reads differently, whether that is
    #: :data:`perfgrid.analyse.readings.NEAR` or more, and how many runs pooled would decide it
    p_differ: float = math.nan
    near_boundary: str = ""
    runs_needed: float = math.nan
    #: the run's identity (perfgrid.analyse.betweenrun.run_of): the same on every claim of a run
    machine_kind: str = ""
    design: str = ""
    boot_id: str = ""
    run_started: float = math.nan

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict: {self.verdict!r} is not one of {', '.join(VERDICTS)}")

    def as_row(self) -> dict[str, str]:
        return asdict(self)

    @property
    def point_keys(self) -> tuple[str, ...]:
        """:attr:`points` as a tuple (none: the claim does not know them)."""
        return tuple(p for p in self.points.split("; ") if p)


def judged(experiment: str, hypothesis: str, criterion: str, quantity: Estimate, op: str,
           threshold: float, detail: str = "", runtime: str = "python", unit: str = "x",
           spec: str = ".2f", note: str = "", why: str = "") -> Claim:
    """A claim decided by the interval of ``quantity`` against ``op threshold``.

    The claims ledger's entry (perfgrid.analyse.ledger) gives the equivalence margin and must
    state the same rule. The claim's earlier runs of this machine kind and design
    (perfgrid.analyse.betweenrun) moderate its within-run spread where they tell a prior (a
    reduction's rows each, before its bounds are taken: stats.rows_moderated), and add
    the between-run component ``tau``; the reading then says how sure it is
    (perfgrid.analyse.readings). ``measured`` shows the estimate with its interval, then
    ``detail``; ``why`` the counters that explain it (:func:`why`).
    """
    from perfgrid.analyse import betweenrun

    entry = ledger.entry(experiment, hypothesis)
    if entry is not None:
        ledger.check(entry, op, threshold)
    margin = entry.margin if entry is not None else ledger.DEFAULT_MARGIN
    points = getattr(quantity, "points", frozenset())
    share = isinstance(quantity, Share)
    scale = "logit" if share else "log"
    found = betweenrun.component(experiment, runtime, hypothesis,
                                 betweenrun.quantity_of(unit, scale), scale)
    widen = quantity.inner if share else quantity
    to_log = _to_log(widen.value, share)
    prior = prior_of(widen, found)
    with rows_moderated(_row_moderation(found, share)):
        widen, moderated = moderate(widen, prior, found.runs, to_log)
        if prior is None and isinstance(getattr(widen, "row", None), Estimate) and (
                found.prior_s2 is not None):
            moderated = (f"; each row's spread moderated by {found.runs} earlier runs (prior "
                         f"df {found.prior_df:.3g}) where no noisier than they predict (F "
                         f"test at {GUARD:.0%})")
        inner = widen
        tau = found.tau * to_log
        quantity = Share(widen) if share else widen
        if tau > 0 and widen.value > 0 and widen.has_interval:
            widened = Widened(widen, tau)
            quantity = Share(widened) if share else widened  # own scale
        verdict, reason = decide(quantity, op, threshold, spec, unit, margin)
        reason += disagreeing_rounds(inner, earlier=None if prior is None else (
            prior.s0_2 * to_log**2, prior.d0))
        if verdict == "inconclusive" and not tau > 0:
            reason += _settle_words(inner, threshold)
        # the interval the verdict read: a chosen best-of's far end over all its rows
        bounds = safe_interval(quantity, LEVEL) or (math.nan, math.nan)
        near = safe_interval(quantity, equivalence_level(LEVEL)) or (math.nan, math.nan)
        measured = quantity.show(spec, unit) + (f" {detail}" if detail else "")
        words = basis(inner) + moderated
        if found.tau > 0:
            words += f"; with a between-run sd of {found.tau:.1%} ({scale} scale)"
        se, df = within_se(inner, to_log)
        run = betweenrun.current()
        sure = sureness(float(quantity.value), bounds, near, se, df, found.tau, op,
                        float(threshold), margin, scale, verdict,
                        f"{experiment}|{runtime}|{hypothesis}", prior,
                        None if share else rows_of(inner, found))
        return Claim(experiment, hypothesis, criterion, measured, verdict, runtime,
                     f"{reason}; {note}" if note else reason, float(quantity.value),
                     bounds[0], bounds[1], op, float(threshold), unit, why, words, LEVEL,
                     "; ".join(sorted(points)), near[0], near[1], found.tau, scale=scale,
                     se=se, df=df, tau_from=found.words, **sure,
                     machine_kind=run.kind or "", design=run.design or "",
                     boot_id=run.boot_id or "",
                     run_started=float(run.started) if run.started is not None else math.nan)


def _row_moderation(found: Any, share: bool) -> Any:
    """How the claim's within-run prior moderates each row of a reduction in it, for
    stats.rows_moderated: as :func:`moderate` moderates a quantity, the prior taken with
    the row's own df (a share's row on the logit scale); None without a prior."""
    if found.prior_s2 is None or found.prior_df is None:
        return None

    def row(part: Estimate) -> Estimate:
        part = _t_row(part)
        to_log = _to_log(part.value, share)
        return moderate(part, prior_of(part, found), found.runs, to_log)[0]

    return row


def _t_row(part: Estimate) -> Estimate:
    """A reduction's row with a Student t interval: a bootstrap over rounds takes its
    calibrated spread as its se."""
    if part.se is None:
        return dataclasses.replace(part, se=math.sqrt(part.var))
    return part


def rows_of(quantity: Any, found: Any) -> Any:
    """A best or least of rows with simultaneous bounds (stats.reduce) as
    perfgrid.analyse.readings.Rows: each row's estimate on the log scale, its spread as its
    prior and rounds tell it, the prior that moderates it; None for anything else,
    or where a row has no Student t interval over rounds (its next run is not drawn)."""
    from perfgrid.analyse.readings import Rows

    parts = getattr(quantity, "rows", ())
    if not parts or getattr(quantity, "reduction", "") not in ("max", "min"):
        return None
    parts = [_t_row(p) if isinstance(p, Estimate) and p.has_interval else p for p in parts]
    if not all(isinstance(p, Estimate) and p.se is not None and p.se > 0 and p.value > 0
               and np.isfinite(p.df) and p.df > 0 for p in parts):
        return None
    priors = tuple(prior_of(p, found) for p in parts)
    # each row's spread as its prior and its rounds tell it together (Smyth), the guard
    # aside: the guard keeps a noisy row's own spread so that this run is not made sure,
    # but the next run's row is as noisy as both say
    spread = [(float(p.se) ** 2, float(p.df)) if prior is None else
              prior.pooled(float(p.se) ** 2) for p, prior in zip(parts, priors, strict=True)]
    return Rows(tuple(math.log(p.value) for p in parts), tuple(math.sqrt(v) for v, _ in spread),
                tuple(df for _, df in spread), priors, quantity.reduction)


def _to_log(value: float, share: bool) -> float:
    """What turns a figure's logit-scale spread into its log-scale one: on the log scale a
    share's logit-scale figures are (1 - p) times as large; 1 for anything else."""
    return (1 - value) if share and 0 < value < 1 else 1.0


def prior_of(quantity: Any, found: Any) -> Any:
    """The within-run prior its earlier runs tell (found: betweenrun.component) for a
    quantity with a Student t interval about its estimate (``se`` and a finite ``df``),
    as perfgrid.analyse.readings.Prior, on the claim's scale; None otherwise."""
    from perfgrid.analyse.readings import Prior

    if (found.prior_s2 is None or found.prior_df is None or not isinstance(quantity, Estimate)
            or quantity.se is None or not np.isfinite(quantity.df) or quantity.df <= 0):
        return None
    return Prior.of(found.prior_s2, found.prior_df, float(quantity.df), GUARD)


def moderate(quantity: Estimate | Any, prior: Any, runs: int,
             to_log: float = 1.0) -> tuple[Any, str]:
    """``quantity`` with its within-run variance moderated by ``prior`` (:func:`prior_of`,
    readings.Prior.moderated: Smyth's ``(d0 s0^2 + df s^2) / (d0 + df)`` on ``d0 + df``
    df, unless past the guard), and words for its basis; as it is without a prior.
    ``to_log`` turns the prior's scale (logit, for a share) into the log scale."""
    if prior is None:
        return quantity, ""
    var, df, kept = prior.moderated((quantity.se / to_log) ** 2)
    if kept:
        return quantity, (f"; spread kept: noisier than its earlier runs predict (F test "
                          f"at {GUARD:.0%})")
    se = math.sqrt(float(var)) * to_log
    dev = None if quantity.dev is None else quantity.dev * (se / quantity.se)
    return (dataclasses.replace(quantity, se=se, df=float(df), dev=dev),
            f"; spread moderated by {runs} earlier runs (prior df {prior.d0:.3g}, "
            f"now {float(df):.3g} df)")


def within_se(quantity: Any, to_log: float = 1.0) -> tuple[float, float]:
    """(se, df) of the quantity's estimate on its judged scale (``to_log`` below 1 for a
    share on the logit scale) inside the run: a Student t interval's own; a best or least
    of rows (stats.Bounds.row), its row's (moderated as the claim judges it: a record holds
    one row's spread, on the row's df, so later runs can moderate the rows by it); else
    read off its 95 % interval (bootstrap: with t(df); bounds and counts: with z, df inf)."""
    from scipy import special

    row = getattr(quantity, "row", None)
    if isinstance(row, Estimate) and row.has_interval:
        quantity = row_now(row)

    if isinstance(quantity, Estimate) and quantity.se is not None and quantity.se > 0:
        return quantity.se / to_log, float(quantity.df)
    found = safe_interval(quantity, LEVEL) if quantity.value > 0 else None
    if not found or not found[0] > 0 or not np.isfinite(found[1]):
        return math.nan, math.nan
    df = float(quantity.df) if isinstance(quantity, Estimate) and np.isfinite(
        quantity.df) else math.inf
    q = float(special.stdtrit(df, 0.5 + LEVEL / 2))  # scipy.stats' t.ppf, unchecked
    return (math.log(found[1]) - math.log(found[0])) / (2 * q) / to_log, df


def sureness(value: float, bounds: tuple[float, float], near: tuple[float, float],
             se: float, df: float, tau: float, op: str, threshold: float, margin: float,
             scale: str, verdict: str, key: str, prior: Any = None,
             rows: Any = None) -> dict[str, Any]:
    """A reading's p_differ, near_boundary and runs_needed (perfgrid.analyse.readings); a
    best or least of ``rows`` (:func:`rows_of`) draws its next run row by row."""
    from perfgrid.analyse import readings

    empty = {"p_differ": math.nan, "near_boundary": "", "runs_needed": math.nan}
    if not (value > 0 and se > 0 and all(np.isfinite(bounds)) and all(np.isfinite(near))
            and op in ("~", ">=", ">", "<=", "<") and np.isfinite(threshold)):
        return empty
    to = readings.to_scale(scale)
    if scale == "logit" and not 0 < value < 1:
        return empty
    if min(bounds[0], near[0]) <= 0 or (scale == "logit" and max(bounds[1], near[1]) >= 1):
        return empty
    estimate = to(value)
    rule = readings.boundaries(op, threshold, margin, scale)
    sides = readings.sides_of(estimate, bounds, near, se, df, tau, scale)
    p = readings.p_differ(estimate, sides, rule, verdict, key, prior=prior, rows=rows)
    runs = readings.runs_needed(estimate, se, tau, rule)
    return {"p_differ": p, "near_boundary": "yes" if p >= readings.NEAR else "",
            "runs_needed": float(runs) if runs is not None else math.nan}


def _settle_words(quantity: Estimate, threshold: float) -> str:
    """How many rounds would settle an undecided claim at its present spread
    (stats.rounds_to_settle), as words to add to its reason; none where it cannot tell."""
    rounds = rounds_to_settle(quantity, threshold)
    if rounds is None:
        return ""
    if rounds > SETTLE_MAX:
        return f"; at this spread more than {SETTLE_MAX:,} rounds would settle it"
    return f"; at this spread about {rounds:,} rounds would settle it"


def all_of(verdicts: list[str]) -> str:
    """The verdict of a claim that needs every part: reproduced if every part is, not
    reproduced if any part is, at the threshold if every undecided part is, else
    inconclusive."""
    if all(v == "reproduced" for v in verdicts):
        return "reproduced"
    if "not reproduced" in verdicts:
        return "not reproduced"
    if all(v in ("reproduced", "at the threshold") for v in verdicts):
        return "at the threshold"
    return "inconclusive"


#: the order from the weakest verdict to the strongest, for a compound claim's figures
_STRENGTH = {"not reproduced": 0, "inconclusive": 1, "at the threshold": 2, "reproduced": 3}


def compound(parts: list[Claim], measured: str, labels: tuple[str, ...] = ()) -> Claim:
    """One claim that needs every part (its ledger entry's ``op: all``), decided by
    :func:`all_of`. Its figures (value, intervals, rule) are those of the part that
    decided it, the weakest; its basis and level are every part's (the strictest level),
    so nothing its parts rest on is dropped. ``labels`` name the parts in the reason
    (default: part 1, part 2, ...)."""
    from dataclasses import replace

    from perfgrid.analyse.readings import NEAR

    weakest = min(parts, key=lambda c: _STRENGTH[c.verdict])
    names = labels or tuple(f"part {i + 1}" for i in range(len(parts)))
    # the compound reads differently if any part does: at most the sum, at least the
    # largest; taken as if the parts were independent
    chances = [c.p_differ for c in parts]
    p_differ = (1 - float(np.prod([1 - p for p in chances])) if all(np.isfinite(chances))
                else math.nan)
    runs = [c.runs_needed for c in parts]
    return replace(weakest, verdict=all_of([c.verdict for c in parts]), measured=measured,
                   p_differ=p_differ, near_boundary="yes" if p_differ >= NEAR else "",
                   runs_needed=max(runs) if all(np.isfinite(runs)) else math.nan,
                   points=points_of(parts), level=max(c.level for c in parts),
                   basis="; ".join(dict.fromkeys(c.basis for c in parts if c.basis)),
                   reason="; ".join(f"{name}: {c.reason}"
                                    for name, c in zip(names, parts, strict=True)))


def points_of(claims: list[Claim]) -> str:
    """The points of several claims (a compound claim's parts), as :attr:`Claim.points`."""
    return "; ".join(sorted({p for c in claims for p in c.point_keys}))


def points_of_rows(rows) -> frozenset[str]:
    """The grid points of a table's rows (``Experiment.point_key``), for a quantity built
    from them by hand (an exact count pooled over rows)."""
    from perfgrid.analyse.aggregate import point_of

    return frozenset().union(*(point_of(row) for _, row in rows.iterrows()))


def inconclusive(experiment: str, hypothesis: str, criterion: str, reason: str,
                 runtime: str = "python", why: str = "") -> Claim:
    """A claim that the data at hand cannot decide, with the reason."""
    return Claim(experiment, hypothesis, criterion, "n/a", "inconclusive", runtime, reason,
                 why=why)


#: how a counter column reads in a "why": its name, and whether it is a count per unit of
#: work (else a share of the pass, shown as it is)
COUNTER_NAMES = {
    "ctx_switches_per_unit": "context switches",
    "migrations_per_unit": "migrations",
    "page_faults_per_unit": "page faults",
    "task_clock_ns_per_unit": "CPU time",
    "cycles_per_unit": "cycles",
    "instructions_per_unit": "instructions",
    "cache_misses_per_unit": "cache misses",
    "branch_misses_per_unit": "branch misses",
    "syscalls_per_unit": "syscalls",
    "cpu_sys_share": "sys share",
    "cpus_utilized": "CPUs busy",
}
#: the unit a "why" counts per, by the experiment's work unit: (units in one, its name)
PER = {"bytes": (2.0**30, "GiB"), "timer events": (1.0, "timer event")}


def _duration(ns: float) -> str:
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def _side(table, column: str, where: dict) -> tuple[float, str]:
    """(the median of ``column`` over the counted rows matching ``where``, or NaN; why not)."""
    import pandas as pd

    rows = rows_where(table, **where)
    if rows.empty:
        return math.nan, "no such row"
    counted = rows[rows["counters"] == "ok"] if "counters" in rows else rows.iloc[0:0]
    if counted.empty:
        status = rows["counters"].dropna() if "counters" in rows else pd.Series(dtype=object)
        return math.nan, str(status.iloc[0]) if len(status) else "not counted"
    values = pd.to_numeric(counted.get(column), errors="coerce").dropna()
    if values.empty:
        return math.nan, "not supported here"
    return float(values.median()), ""


def why(table, columns: tuple[str, ...], sides: dict[str, dict]) -> str:
    """One line of counters explaining a claim: each of ``columns`` (counter columns of
    :data:`perfgrid.measure.counters.COLUMNS`) at each side the claim compares (a label -> the
    axes of its rows; several matching rows give their median), per unit of work.

    ``per message: context switches 0.002 (single) vs 1.01 (none); ...``. Counts per byte
    are shown per GiB. Where no side was counted: why not, when a counting pass could not
    run (``no counters: perf missing: ...``); empty when the config counted none of them
    or their rows are not in the table.
    """
    from perfgrid import experiments

    if table.empty or "experiment" not in table:
        return ""
    unit = experiments.get(str(table["experiment"].iloc[0])).work_unit
    scale, per = PER.get(unit, (1.0, unit.removesuffix("s")))
    parts, reasons, causes = [], [], []
    for column in columns:
        shown = []
        for label, where in sides.items():
            value, reason = _side(table, column, where)
            if math.isnan(value):
                shown.append(f"n/a ({label})")
                reasons.append(f"{label}: {reason}")
                causes.append(reason)
                continue
            if column.endswith("_per_unit"):
                value *= scale
            text = (_duration(value) if column == "task_clock_ns_per_unit"
                    else f"{value:.0%}" if column == "cpu_sys_share" else f"{value:.3g}")
            shown.append(f"{text} ({label})")
        parts.append(f"{COUNTER_NAMES.get(column, column)} {' vs '.join(shown)}")
    if len(reasons) == len(columns) * len(sides):  # nothing counted: no row of n/a
        failed = [c for c in dict.fromkeys(causes)
                  if c != "no such row" and not c.startswith("not counted")]
        return f"no counters: {'; '.join(failed)}" if failed else ""
    missing = f" [{'; '.join(dict.fromkeys(reasons))}]" if reasons else ""
    return f"per {per}: {'; '.join(parts)}{missing}"


def module(name: str) -> ModuleType:
    """The analysis module of experiment ``name``: ``analysis.py`` in its package."""
    return importlib.import_module(f"perfgrid.experiments.{name}.analysis")


def _none(table, experiment) -> list:
    return []


#: what the report looks up in an experiment's analysis module besides ``plot`` and
#: ``claims``, each with the value it takes where the module defines none (the module's
#: docstring is the section's text): the seed's own figures (rows with a ``source``),
#: columns the experiment's table shows besides the axes and statistics, lines of notes
#: under its claims (``notes(table, experiment)``), and further tables as (title, note,
#: frame) (``tables(table, experiment)``); like ``claims`` and ``plot``, the functions get
#: the registry's Experiment
REPORT_HOOKS: dict[str, Any] = {"SEED_ROWS": [], "EXTRA_COLUMNS": [], "notes": _none,
                                "tables": _none}


def hook(analysis: ModuleType, key: str) -> Any:
    """``key`` (one of :data:`REPORT_HOOKS`) of an analysis module, or its default."""
    return getattr(analysis, key, REPORT_HOOKS[key])


def quiet(table):
    """``table`` as the claims see it: the rounds measured while other processes were
    busy (column ``noisy_rounds``, even after measuring them again) left out.

    A row keeps its other rounds' processes (``process_values``, ``process_rounds``,
    ``process_metadata`` and ``rate`` from them alone); a row whose every round was
    noisy keeps no rate (NaN) and says why in ``left_out``, so an estimate from it has
    no value and a claim that needed it says so (``no estimate ...: left out of claims:
    ...``).
    """
    import pandas as pd

    from perfgrid.analyse.aggregate import listed, raw_rate

    if "noisy_rounds" not in table or table.empty:
        return table
    rows = []
    for _, row in table.iterrows():
        row = row.copy()
        noisy = listed(row["noisy_rounds"]) or []
        groups = listed(row.get("process_values"))
        if not noisy or not groups:
            rows.append(row)
            continue
        labels = listed(row.get("process_rounds"))
        if labels is None:  # one round: its label is the one listed
            labels = [noisy[0]] * len(groups)
        meta = listed(row.get("process_metadata"))
        keep = [i for i, label in enumerate(labels) if label not in noisy]
        shown = ", ".join(str(n) for n in noisy)
        if not keep:
            busy = row.get("busy_during")
            seen = f" (other processes up to {float(busy):.0%} of the CPUs)" if isinstance(
                busy, float | int) and math.isfinite(float(busy)) else ""
            row["left_out"] = (f"{LEFT_OUT}: every round of this point ({shown}) was measured "
                               f"while other processes were busy{seen}, after measuring it "
                               f"again")
            row["rate"] = math.nan
            rows.append(row)
            continue
        groups = [groups[i] for i in keep]
        row["process_values"] = groups
        row["process_rounds"] = [labels[i] for i in keep]
        if meta is not None and len(meta) == len(labels):
            row["process_metadata"] = [meta[i] for i in keep]
        row["rate"] = raw_rate(groups, float(row["work_per_loop"]))
        row["rounds_left_out"] = shown
        rows.append(row)
    return pd.DataFrame(rows, columns=list(dict.fromkeys(
        [*table.columns, *(c for r in rows for c in r.index)]))).reset_index(drop=True)


def claims_of(name: str, table) -> list[Claim]:
    """Experiment ``name``'s claims on ``table``, its noisy rounds left out (:func:`quiet`),
    each with its ledger entry's fields (:func:`with_ledger`).

    Each claim rests on its own spread: a claim paired over three rounds takes t with two
    degrees of freedom. Borrowing spread from the experiment's other claims (a moderated
    t) was tried and left: their spreads differ up to fivefold, and the noisiest claims
    then covered 90-92 %, not 95 % (tests/test_coverage.py)."""
    from perfgrid import experiments

    table = quiet(table)
    return [with_ledger(c) for c in module(name).claims(table, experiments.get(name))]


def with_ledger(claim: Claim) -> Claim:
    """``claim`` with its ledger entry's fields (perfgrid.analyse.ledger); as it is where its
    experiment keeps no ledger. A claim left undecided before any rule was applied (its
    points missing: :func:`inconclusive`) takes the ledger's op and threshold, so every
    row says what it would be judged by."""
    from dataclasses import replace

    entry = ledger.entry(claim.experiment, claim.hypothesis)
    if entry is None:
        return claim
    if not claim.op:
        claim = replace(claim, op=entry.op, threshold=entry.threshold)
    return replace(claim, kind=entry.kind, seed_figure=entry.seed_figure,
                   seed_quote=entry.seed_quote, seed_where=entry.seed_where,
                   threshold_why=entry.threshold_why, why_a_claim=entry.why_a_claim,
                   margin=entry.margin, margin_from=entry.margin_from)


def plot_setup(table) -> list[str]:
    """Set up a plot job's figures; returns the table's bindings in the order every plot uses.

    Every analysis module's ``plot`` starts here: figures are drawn off-screen (the Agg
    backend: plot jobs have no display) in one seaborn theme, and a binding axis or
    legend follows :data:`perfgrid.kit.binding.BINDINGS` (none, single, compact, spread).
    """
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    from perfgrid.kit.binding import BINDINGS

    sns.set_theme(style="whitegrid", context="paper")
    present = set(table["binding"]) if "binding" in table else set()
    return [b for b in BINDINGS if b in present]


def literal(text: object) -> str:
    """``text`` as matplotlib draws it, verbatim: every ``$`` escaped, so a label (a folder
    name, a table cell) never turns on mathtext, which misdraws it or raises
    (``C$\\frac{$``). Backslashes need nothing: outside mathtext they are plain."""
    return str(text).replace("$", r"\$")


def palette_for(values: list) -> dict:
    """One seaborn color per value, in order, so a value keeps its color in every figure."""
    import seaborn as sns

    return dict(zip(values, sns.color_palette(n_colors=len(values)), strict=True))


#: the resolution of every raster figure (PNG), in dots per inch
DPI = 110


def cropped(fig) -> Any:
    """The box to save ``fig`` in, as ``bbox_inches``, for every format it is saved in:
    its tight box at :data:`DPI`, found once. ``bbox_inches="tight"`` finds it again at
    each save, in a draw of its own, as does any layout engine (seaborn's grids leave
    one): with the box given and the engine let go, a save draws the figure once (a quick
    run's plots of six experiments took 26 s, not 32 s). The PNG comes out pixel for
    pixel as before; an SVG's or PDF's box may differ by a point (each format's own text
    metrics)."""
    import matplotlib

    fig.dpi = DPI
    box = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
    fig.set_layout_engine(None)
    return box


def save(fig, out_dir, name: str) -> list:
    """Write one matplotlib figure as PNG, SVG and PDF; close it; return the paths."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    out = []
    box = cropped(fig)
    for ext in ("png", "svg", "pdf"):
        path = Path(out_dir) / f"{name}.{ext}"
        fig.savefig(path, dpi=DPI, bbox_inches=box)
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


def rows_where(table, **where):
    """The rows whose columns equal ``where``."""
    rows = table
    for key, value in where.items():
        if key not in rows:
            return rows.iloc[0:0]
        rows = rows[rows[key] == value]
    return rows


def rate_estimates(rows) -> list[Estimate]:
    """Each row's rate with its interval (from its raw values).

    Rows left out of claims (:func:`quiet`) are left out here too, so a best-of or a
    median is taken over the quiet rows; where every row was left out, their estimates
    (no value, and why) stand, and the claim says so.
    """
    return _quiet_estimates(rows)[1]


def _quiet_estimates(rows) -> tuple[Any, list[Estimate]]:
    """(the rows :func:`rate_estimates` keeps, their estimates), in one order: a best-of's
    chosen row (``Estimate.chosen``) indexes both."""
    from perfgrid.analyse.aggregate import rate_estimate

    estimates = [rate_estimate(row) for _, row in rows.iterrows()]
    keep = [not e.reason.startswith(LEFT_OUT) for e in estimates]
    if not any(keep):
        return rows, estimates
    return rows[keep], [e for e, k in zip(estimates, keep, strict=True) if k]


def claimed_rows(table, experiment):
    """The rows of the points ``experiment``'s claims compare (its ``used_by_claims``), so
    a claim reads the points measured in rounds and the declaration is made once."""
    if table.empty:
        return table
    return table[[experiment.used_by_claims(r) for r in table.to_dict("records")]]


def across(table, axis: str, num, den, keys) -> list[tuple[dict, Any, Any]]:
    """The comparison every "A against B, all else equal" claim makes: for each setting of
    ``keys`` (those of them the table has, ``axis`` left out) measured at both
    ``axis == num`` and ``axis == den``, (that setting, its rows at num, its rows at den).
    ``keys`` are usually the experiment's axes (``Experiment.axes``)."""
    if table.empty or axis not in table:
        return []
    keys = [k for k in keys if k != axis and k in table]
    groups = table.groupby(keys) if keys else [((), table)]
    out = []
    for key, group in groups:
        a, b = group[group[axis] == num], group[group[axis] == den]
        if not a.empty and not b.empty:
            key = key if isinstance(key, tuple) else (key,)
            out.append((dict(zip(keys, key, strict=True)), a, b))
    return out


def rate_at(table, **where) -> Estimate | None:
    """The rate (with interval) of the row matching ``where``; the best where several do.

    None if no row matches. A NaN rate stays NaN, and its claim is inconclusive.
    """
    rows = rows_where(table, **where)
    if rows.empty:
        return None
    return reduce(rate_estimates(rows), np.max)


def best_ratio(rows, den: Estimate, how=np.max) -> Estimate:
    """``how`` (the best, by default) of each row's rate over ``den``: each ratio paired
    with ``den`` round by round before the reduction (stats.reduce), so the drift a row
    shares with its denominator cancels, where a best-of rates divided by ``den`` after
    the reduction would lose that pairing and pay for it in width."""
    return reduce([estimate / den for estimate in rate_estimates(rows)], how)


def best_row(rows):
    """(the row with the highest rate, the best rate over the rows with its interval).

    The interval is that of the maximum, replicate by replicate: picking the best
    of several noisy rows is itself part of the estimate. Where no row has a rate (all
    NaN) the first row stands in and the estimate is NaN, so its claim is inconclusive.
    """
    rates = rows["rate"].astype(float)
    best = rows.loc[rates.idxmax()] if rates.notna().any() else rows.iloc[0]
    kept, estimates = _quiet_estimates(rows)
    found = reduce(estimates, np.max)
    chosen = getattr(found, "chosen", None)
    if chosen is not None:  # chosen on the first rounds: that row, not the luckiest one
        best = kept.iloc[chosen]
    return best, found


def median_of(parts: list[Estimate]) -> Estimate:
    """The median of several estimates (ratios over a grid), with its interval."""
    return reduce(parts, np.median)


#: seaborn keywords that draw the rows of :func:`interval_rows` as the point's rate and
#: its 95 % interval: the median of (low, rate, high) is the rate, their range the interval
INTERVAL_BARS = {"estimator": "median", "errorbar": ("pi", 100)}


def interval_rows(table, y: str, scale: float = 1.0, cost: bool = False):
    """Three rows per point: ``y`` at the rate, and at each end of its 95 % interval.

    ``y`` is ``rate / scale``, or with ``cost`` an existing column that varies as one
    over the rate (microseconds per message), whose interval ends swap. With
    :data:`INTERVAL_BARS` seaborn then draws each point's own interval as its error
    bar or band; a point without an interval gets none.
    """
    import pandas as pd

    if table.empty:
        return table.assign(**{y: pd.Series(dtype=float)})
    rate = table["rate"]
    low = table["rate_ci_low"].fillna(rate) / rate if "rate_ci_low" in table else rate / rate
    high = table["rate_ci_high"].fillna(rate) / rate if "rate_ci_high" in table else rate / rate
    base = table[y] if cost else rate / scale
    ends = (base / high, base / low) if cost else (base * low, base * high)
    return pd.concat([table.assign(**{y: col}) for col in (base, *ends)], ignore_index=True)


def observed_estimate(row, key, seed: int | None = None) -> Estimate:
    """The mean over worker processes of one per-process observation of ``row``, with its
    interval: ``key`` names a ``process_metadata`` entry (``sys_share``, ``wall_s``) or is a
    function of one process's dict (``lambda d: d["wall_s"] * d["cpu_pct"]``).

    Each process gives one value, so processes are the replicates (:func:`mean_estimate`).
    A row without ``process_metadata`` (a hand-made table), or whose processes lack the
    key, gives the row's own figure without an interval, and so an inconclusive verdict;
    a row whose rate is NaN gives no figure at all.
    """
    import json

    from perfgrid.analyse.aggregate import listed, point_of
    from perfgrid.analyse.stats import from_points, mean_estimate, seed_for

    name = key if isinstance(key, str) else getattr(key, "__name__", "derived")
    try:  # the row's own figure, shown where no interval can be had
        point = float(row.get(key) if isinstance(key, str) else key(row))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        point = math.nan
    left_out = row.get("left_out")
    if isinstance(left_out, str) and left_out:
        return Estimate.unknown(math.nan, left_out)
    rate = row.get("rate")
    if isinstance(rate, float | int) and not math.isfinite(float(rate)):
        return Estimate.unknown(math.nan, "NaN rate: the point measured nothing")
    raw = row.get("process_metadata")
    if not isinstance(raw, str | list) or not raw:
        return Estimate.unknown(point, "no per-process values")
    processes = json.loads(raw) if isinstance(raw, str) else raw
    try:
        values = [float(p[key]) if isinstance(key, str) else float(key(p)) for p in processes]
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return Estimate.unknown(point, f"no per-process {name}")
    if not values:
        return Estimate.unknown(point, "no per-process values")
    if seed is None:
        seed = seed_for(row.get("experiment"), row.get("runtime"), row.get("result_file"),
                        raw if isinstance(raw, str) else json.dumps(raw), name)
    # measured in rounds: each process's round, so that a ratio pairs round by round
    rounds = listed(row.get("process_rounds"))
    if rounds is not None and len(rounds) != len(values):
        rounds = None
    return from_points(mean_estimate([[v] for v in values], seed=seed, rounds=rounds),
                       point_of(row))


#: Linux's USER_HZ: /proc gives a process's user and system CPU time in ticks of 1/100 s,
#: and the kernel samples which side a tick lands on at least this often a CPU-second
TICKS_PER_S = 100


def tick_counts(row, key) -> tuple[int, int, float] | None:
    """A CPU-time share of ``row``'s processes (``key`` as in :func:`observed_estimate`) as
    the count it is: (ticks on its side, all CPU ticks, CPU seconds), pooled over the
    processes; None without the processes' user and system seconds.

    A share of exactly 0 or 1 has no log, so :func:`observed_estimate` gives it no interval;
    as a count it has exact binomial bounds (``stats.binomial_share``). The ticks are at
    least ``TICKS_PER_S`` a CPU-second, rounded down: fewer trials, a wider bound.

    A process whose share or CPU time is not a number (NaN: a share of no CPU seconds) is
    not counted: it had no ticks to count; with none left, None.
    """
    from perfgrid.analyse.aggregate import listed

    try:
        processes = listed(row["process_metadata"])
        cpu = [float(p["user_s"]) + float(p["sys_s"]) for p in processes]
        shares = [float(p[key]) if isinstance(key, str) else float(key(p)) for p in processes]
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    counted = [(s, c) for s, c in zip(shares, cpu, strict=True)
               if math.isfinite(s) and math.isfinite(c)]
    if not counted:
        return None
    shares, cpu = [s for s, _ in counted], [c for _, c in counted]
    cpu_s = sum(cpu)
    ticks = math.floor(cpu_s * TICKS_PER_S)
    hits = min(ticks, round(sum(s * c for s, c in zip(shares, cpu, strict=True)) * TICKS_PER_S))
    return hits, ticks, cpu_s
