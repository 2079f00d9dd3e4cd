"""Scaling models for every worker axis: Amdahl's law and the Universal Scalability Law.

A rate measured at several worker counts says whether more workers help; a
model says why it stops helping. Amdahl's law, ``X(N) = λN / (1 + s(N - 1))``,
has one serial share ``s``: throughput rises towards ``λ/s`` and never falls.
Gunther's Universal Scalability Law (USL),
``X(N) = λN / (1 + σ(N - 1) + κN(N - 1))``, adds a coherency delay ``κ``
(workers waiting on each other pairwise: cache lines, locks handed around),
so throughput peaks at ``N* = sqrt((1 - σ) / κ)`` and then falls.

Both are fitted by least squares on the log of the rate (each point weighted
by its own interval, so a noisy point counts less), with ``scipy.optimize``.
The parameters' 95 % intervals come from refitting the models to bootstrap
replicates of the rates (each row's hierarchical-bootstrap replicates,
:mod:`perfgrid.analyse.stats`, drawn independently per row as the rows were measured
in different jobs): percentile intervals of the refitted parameters. Where the
points scatter about the USL curve more than their own intervals allow (drift
between jobs, a model that misses), the replicates are widened by that excess
(the Birge ratio, ``widened_by``) so the parameters' intervals do not pretend.

The better model is chosen by Akaike's criterion with the small-sample
correction (AICc) when both models leave at least two degrees of freedom;
with fewer worker counts than that (three counts cannot tell a 3-parameter
USL from a perfect fit) the table says "undecided" and why, instead of
pretending. Efficiency against linear compares the rate at the largest
worker count with the smallest one scaled linearly.

Only worker counts up to the CPUs the run could use are fitted: past them the
workers take turns on the CPUs, and a fit over those points models the CPU
limit, not contention or coherency. The points above stay in the table and the
figure, marked "not fitted" (hollow markers); a group left with fewer than
:data:`MIN_COUNTS` counts says so instead of a fit. The CPU count is the run's
own record (:func:`recorded_cpus`: the CPUs its binding plans used), never the
machine the analysis runs on; where nothing is recorded, every point is fitted
and the table says the CPU count is unknown.
"""

from __future__ import annotations

import math
import numbers
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize

from perfgrid.analyse.stats import Estimate

#: refits per group for the parameters' intervals (each a handful of points: fast)
N_REFITS = 200
#: a group needs this many worker counts for a fit (at least the USL's three parameters)
MIN_COUNTS = 3
#: what a group's row says where the run recorded no CPU count
UNKNOWN_CPUS = "CPU count unknown: fitted over all points"
#: axes that are never grouped on (they are the fit's x, or say nothing about the setting)
_NOT_GROUPS = {"workers"}


def amdahl(n: np.ndarray, lam: float, s: float) -> np.ndarray:
    """Amdahl's law as throughput: ``λN / (1 + s(N - 1))``."""
    n = np.asarray(n, dtype=float)
    return lam * n / (1 + s * (n - 1))


def usl(n: np.ndarray, lam: float, sigma: float, kappa: float) -> np.ndarray:
    """The Universal Scalability Law: ``λN / (1 + σ(N - 1) + κN(N - 1))``."""
    n = np.asarray(n, dtype=float)
    return lam * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))


MODELS = {"amdahl": (amdahl, ("lambda", "s")), "usl": (usl, ("lambda", "sigma", "kappa"))}


@dataclass(frozen=True)
class Fit:
    """One model fitted to one set of points: parameters, residual sum of squares (log)."""

    model: str
    params: dict[str, float]
    rss: float
    n: int

    @property
    def k(self) -> int:
        return len(self.params)

    @property
    def aicc(self) -> float:
        """AIC with the small-sample correction; NaN when ``n - k - 1 <= 0``."""
        if self.n - self.k - 1 <= 0:
            return math.nan
        aic = self.n * math.log(max(self.rss, 1e-300) / self.n) + 2 * self.k
        return aic + 2 * self.k * (self.k + 1) / (self.n - self.k - 1)

    def predict(self, n: np.ndarray) -> np.ndarray:
        return MODELS[self.model][0](n, *self.params.values())


def fit(model: str, workers: Sequence[float], rates: Sequence[float],
        log_se: Sequence[float] | None = None, start: Sequence[float] | None = None) -> Fit:
    """Least squares of ``model`` on log rates, each point weighted by ``1 / log_se``.

    Bounds keep the parameters meaningful: λ > 0, 0 <= s, σ <= 1, κ >= 0. Without
    ``start`` several starting points are tried (the best kept); refits to bootstrap
    replicates start from the point estimate's parameters.
    """
    func, names = MODELS[model]
    n = np.asarray(workers, dtype=float)
    y = np.log(np.asarray(rates, dtype=float))
    w = np.ones_like(y) if log_se is None else 1 / np.maximum(np.asarray(log_se, float), 1e-3)
    lam0 = float(np.exp(y[np.argmin(n)]) / n.min())

    def residuals(theta: np.ndarray) -> np.ndarray:
        return (np.log(func(n, *theta)) - y) * w

    if model == "amdahl":
        starts, lower, upper = [[lam0, 0.1], [lam0, 0.5]], [1e-12, 0.0], [np.inf, 1.0]
    else:
        starts = [[lam0, 0.05, 0.001], [lam0, 0.3, 0.05], [lam0, 0.01, 0.0]]
        lower, upper = [1e-12, 0.0, 0.0], [np.inf, 1.0, np.inf]
    if start is not None:
        starts = [np.clip(start, lower, [u if np.isfinite(u) else 1e300 for u in upper])]
    best = None
    for start in starts:
        res = optimize.least_squares(residuals, start, bounds=(lower, upper), x_scale="jac",
                                     ftol=1e-6, xtol=1e-6, gtol=1e-8, max_nfev=200)
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    rss = float(np.sum(((np.log(func(n, *best.x)) - y)) ** 2))
    return Fit(model, dict(zip(names, map(float, best.x), strict=True)), rss, len(n))


#: a USL peak beyond this many workers is reported as none (κ indistinguishable from 0)
NO_PEAK = 1e4
#: κ below this is taken as 0: USL reduces to Amdahl
KAPPA_ZERO = 1e-9


def peak_workers(params: dict[str, float]) -> float:
    """USL's worker count at peak throughput, ``sqrt((1 - σ) / κ)``, at least 1.

    inf when κ is 0 or the peak lies beyond :data:`NO_PEAK` workers: no peak in sight.
    """
    kappa, sigma = params["kappa"], params["sigma"]
    if kappa <= KAPPA_ZERO:
        return math.inf
    peak = math.sqrt(max(1 - sigma, 0.0) / kappa)
    return max(peak, 1.0) if peak <= NO_PEAK else math.inf


def _interval(values: np.ndarray) -> tuple[float, float]:
    """The 95 % percentile interval; refits without a peak (inf) sort last, uninterpolated."""
    lo, hi = np.quantile(values, [0.025, 0.975], method="inverted_cdf")
    return float(lo), float(hi)


def fit_group(workers: Sequence[int], estimates: Sequence[Estimate],
              n_refits: int = N_REFITS) -> dict[str, object]:
    """Both models fitted to one group's points, with bootstrap intervals and a verdict.

    ``estimates`` are the rates at ``workers`` with their replicates (rows
    without an interval make the fit's intervals unavailable, with the reason).
    """
    n = np.asarray(workers, dtype=float)
    rates = np.array([e.value for e in estimates])
    se = [math.sqrt(e.var) if e.has_interval and e.var > 0 else math.nan for e in estimates]
    weights = None if any(not math.isfinite(s) for s in se) else se
    fits = {m: fit(m, n, rates, weights) for m in MODELS}
    out: dict[str, object] = {"counts": len(n),
                              "fitted_workers": ",".join(str(int(w)) for w in n)}
    for model, f in fits.items():
        for name, value in f.params.items():
            out[f"{model}_{name}"] = value
        out[f"{model}_aicc"] = f.aicc
    out["usl_peak_workers"] = peak_workers(fits["usl"].params)
    order = np.argsort(n)
    lo_n, hi_n = n[order[0]], n[order[-1]]
    eff = (estimates[order[-1]] / estimates[order[0]]) * float(lo_n / hi_n)
    out["efficiency_at_max"] = eff.value
    bounds = eff.interval()
    out["efficiency_ci_low"], out["efficiency_ci_high"] = bounds or (math.nan, math.nan)
    out["measured_peak_workers"] = int(n[int(np.argmax(rates))])
    out["better_model"], out["better_by"] = _better(fits)

    if not all(e.has_interval for e in estimates):
        out["ci_reason"] = "a point has no interval (one value): no parameter intervals"
        return out
    # refit to replicates: row i's replicate b is value_i * exp(dev_i[b])
    rng = np.random.default_rng(len(n) * 7919 + int(rates.sum()) % 7919)
    devs = np.stack([e.dev for e in estimates])
    # points scattered about the curve more than their own intervals allow (a model that
    # misses, drift between jobs): widen the replicates by that excess (the Birge ratio)
    usl_fit = fits["usl"]
    if usl_fit.n > usl_fit.k and weights is not None:
        resid = (np.log(usl_fit.predict(n)) - np.log(rates)) / np.asarray(weights)
        birge = float(np.sum(resid ** 2) / (usl_fit.n - usl_fit.k))
        if birge > 1:
            devs = devs * math.sqrt(birge)
            out["widened_by"] = math.sqrt(birge)
    picks = rng.choice(devs.shape[1], size=min(n_refits, devs.shape[1]), replace=False)
    draws: dict[str, list[float]] = {}
    for b in picks:
        replicate = rates * np.exp(devs[:, b])
        for model in MODELS:
            f = fit(model, n, replicate, weights, list(fits[model].params.values()))
            for name, value in f.params.items():
                draws.setdefault(f"{model}_{name}", []).append(value)
            if model == "usl":
                draws.setdefault("usl_peak_workers", []).append(peak_workers(f.params))
    for key, values in draws.items():
        out[f"{key}_ci_low"], out[f"{key}_ci_high"] = _interval(np.array(values))
    out["ci_reason"] = ""
    return out


def _better(fits: dict[str, Fit]) -> tuple[str, str]:
    """(better model, how decided): AICc where both models have degrees of freedom left."""
    a, u = fits["amdahl"], fits["usl"]
    if not (math.isfinite(a.aicc) and math.isfinite(u.aicc)):
        return "undecided", (f"{u.n} worker counts: AICc needs at least {u.k + 2} "
                             "to compare the 3-parameter USL")
    if u.params["kappa"] <= KAPPA_ZERO:
        return "amdahl", "USL's coherency κ is 0: USL reduces to Amdahl (fewer parameters)"
    diff = a.aicc - u.aicc
    if abs(diff) < 2:
        return "amdahl", f"AICc differs by {abs(diff):.1f} < 2: the simpler model"
    return ("usl" if diff > 0 else "amdahl"), f"AICc lower by {abs(diff):.1f}"


# -- over a table ---------------------------------------------------------------
def group_axes(table: pd.DataFrame, axes: Sequence[str]) -> list[str]:
    """The axes a group is defined by: every axis but the workers (and the runtime)."""
    return [a for a in ("runtime", *axes) if a in table and a not in _NOT_GROUPS]


def recorded_cpus(table: pd.DataFrame) -> int | None:
    """The CPUs the run's benchmark jobs could use, from what its rows recorded: the union
    of the CPU lists of their binding plans (``binding_plan``). A point run unbound
    (binding ``none``) or with more workers than CPUs lists every CPU its job was allowed.

    Not machine.json (its own job: on a cluster another, smaller allocation) nor this
    process's affinity (the plots job runs where Snakemake runs). None where no row holds
    a plan of CPU lists (an Erlang VM's flags are none).
    """
    from perfgrid.kit.binding import parse_plan

    if "binding_plan" not in table:
        return None
    seen: set[int] = set()
    for text in table["binding_plan"].dropna().astype(str):
        try:
            lists, _ = parse_plan(text)
        except ValueError:
            continue
        seen.update(cpu for cpus in lists for cpu in cpus)
    return len(seen) or None


def fits(table: pd.DataFrame, axes: Sequence[str], *, cpus: int | None,
         n_refits: int = N_REFITS) -> pd.DataFrame:
    """One row per setting of the other axes measured at MIN_COUNTS worker counts or more.

    Only the counts up to ``cpus`` (the run's CPUs, :func:`recorded_cpus`) are fitted, all
    where it is None; a row whose fitted counts are too few says why (``fit_note``).
    """
    from perfgrid.analyse.analysis import rate_estimates

    if table.empty or "workers" not in table:
        return pd.DataFrame()
    keys = group_axes(table, axes)
    needed = max(MIN_COUNTS, len(MODELS["usl"][1]))
    rows = []
    usable = table[np.isfinite(table["rate"].astype(float)) & (table["rate"] > 0)]
    for key, group in usable.groupby(keys, dropna=False):
        group = group.sort_values("workers")
        if group["workers"].nunique() < MIN_COUNTS or len(group) != group["workers"].nunique():
            continue
        counts = group["workers"].astype(int)
        inside = counts <= cpus if cpus is not None else counts > 0
        head = {**dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)),
                "cpus": cpus if cpus is not None else math.nan,
                "workers": ",".join(map(str, counts)),
                "not_fitted_workers": ",".join(map(str, counts[~inside])),
                "fit_note": UNKNOWN_CPUS if cpus is None else ""}
        if inside.sum() < needed:
            listed = ", ".join(map(str, counts[inside])) or "none"
            rows.append({**head, "counts": int(inside.sum()),
                         "fitted_workers": ",".join(map(str, counts[inside])),
                         "fit_note": f"too few worker counts up to the {cpus} CPUs: {listed} "
                                     f"({needed} needed)"})
            continue
        fitted = group[inside.to_numpy()]
        rows.append({**head, **fit_group(fitted["workers"].astype(int).tolist(),
                                         rate_estimates(fitted), n_refits)})
    return pd.DataFrame(rows)


def _num(value: object, spec: str) -> str:
    if not isinstance(value, numbers.Real) or math.isnan(value):
        return ""
    return "none (∞)" if value == math.inf else f"{value:{spec}}"


def _show(row: pd.Series | dict, key: str, spec: str) -> str:
    """``0.052 [0.047, 0.058]``; a USL peak that does not exist shows as ``none (∞)``."""
    text = _num(row.get(key, math.nan), spec)
    lo, hi = row.get(f"{key}_ci_low", math.nan), row.get(f"{key}_ci_high", math.nan)
    if text and isinstance(lo, numbers.Real) and not math.isnan(lo):
        return f"{text} [{_num(lo, spec)}, {_num(hi, spec)}]"
    return text


def _is_fitted(row: pd.Series | dict) -> bool:
    """Whether the group's row holds a fit (else its ``fit_note`` says why not)."""
    lam = row.get("usl_lambda", math.nan)
    return isinstance(lam, numbers.Real) and math.isfinite(lam)


def _counts(value: object) -> str:
    """A CSV cell of worker counts (``1,2,4``; one count reads back as a number) as text."""
    if isinstance(value, float) and math.isnan(value):
        return ""
    return str(int(value) if isinstance(value, float) else value).replace(",", ", ")


def _cpu_limit(row: pd.Series | dict) -> str:
    cpus = row.get("cpus", math.nan)
    return (str(int(cpus)) if isinstance(cpus, numbers.Real) and math.isfinite(cpus)
            else UNKNOWN_CPUS.replace("CPU count ", ""))


def summary(fitted: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    """The report's scaling table: one line per group, parameters with 95 % intervals, the
    CPU limit the fit stopped at and the counts above it; a group without a fit says why."""
    if fitted.empty:
        return fitted
    keys = [a for a in group_axes(fitted, axes) if fitted[a].nunique(dropna=False) > 1]
    out = fitted[keys].copy() if keys else pd.DataFrame(index=fitted.index)
    rows = [r for _, r in fitted.iterrows()]
    out["CPU limit"] = [_cpu_limit(r) for r in rows]
    out["workers fitted"] = [_counts(r.get("fitted_workers", math.nan)) or "none" for r in rows]
    out["not fitted (above the CPUs)"] = [
        _counts(r.get("not_fitted_workers", math.nan)) or "none" for r in rows]
    out["Amdahl s"] = [_show(r, "amdahl_s", ".3f") for r in rows]
    out["USL σ (contention)"] = [_show(r, "usl_sigma", ".3f") for r in rows]
    out["USL κ (coherency)"] = [_show(r, "usl_kappa", ".4f") for r in rows]
    out["USL peak N*"] = [_show(r, "usl_peak_workers", ".1f") for r in rows]
    out["measured peak N"] = [_num(r.get("measured_peak_workers", math.nan), ".0f")
                              for r in rows]
    out["efficiency at max N"] = [
        _show({"e": r.get("efficiency_at_max", math.nan),
               "e_ci_low": r.get("efficiency_ci_low", math.nan),
               "e_ci_high": r.get("efficiency_ci_high", math.nan)}, "e", ".2f")
        for r in rows]
    out["better model"] = [f"{r['better_model']} ({r['better_by']})" if _is_fitted(r)
                           else f"no fit: {r.get('fit_note', '')}" for r in rows]
    return out.reset_index(drop=True)


def plot(table: pd.DataFrame, fitted: pd.DataFrame, axes: Sequence[str], out_dir: Path,
         name: str) -> list[Path]:
    """Measured rates (95 % intervals) per group, both fitted curves and the linear reference.

    Rates are shown relative to the fitted single-worker rate λ (USL), so every
    panel shares the scale of speed-up and the linear line is ``y = N``; a group
    without a fit is shown relative to its fewest workers' rate per worker. Points
    not fitted (above the CPU limit, the dash-dotted line) are hollow.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from perfgrid.analyse.analysis import save

    if fitted.empty:
        return []
    keys = group_axes(fitted, axes)
    varying = [a for a in keys if fitted[a].nunique(dropna=False) > 1]
    panels = len(fitted)
    cols = min(4, panels)
    rows = math.ceil(panels / cols)
    fig, grid = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    legend: dict[str, object] = {}
    for ax, (_, f) in zip(grid.flat, fitted.iterrows(), strict=False):
        where = np.ones(len(table), bool)
        for a in keys:
            where &= (table[a].astype(str) == str(f[a])).to_numpy()
        pts = table[where].sort_values("workers")
        n = pts["workers"].astype(float).to_numpy()
        cpus = f.get("cpus", math.nan)
        known = isinstance(cpus, numbers.Real) and math.isfinite(cpus)
        used = (n <= cpus if known else np.ones(len(n), bool)) & _is_fitted(f)
        lam = f["usl_lambda"] if _is_fitted(f) else float(pts["rate"].iloc[0]) / n[0]
        y = pts["rate"].to_numpy() / lam
        lo = pts.get("rate_ci_low", pts["rate"]).fillna(pts["rate"]).to_numpy() / lam
        hi = pts.get("rate_ci_high", pts["rate"]).fillna(pts["rate"]).to_numpy() / lam
        for mask, face, label in ((used, "k", "measured (95 %)"), (~used, "none", "not fitted")):
            if mask.any():
                ax.errorbar(n[mask], y[mask], yerr=[(y - lo)[mask], (hi - y)[mask]], fmt="o",
                            color="k", mfc=face, ms=3, capsize=2, label=label)
        grid_n = np.linspace(1, max(n.max(), 2), 100)
        ax.plot(grid_n, grid_n, ":", color="0.5", label="linear")
        if known:
            ax.axvline(cpus, ls="-.", lw=0.8, color="0.6", label="CPU limit")
        if _is_fitted(f):
            fit_n = np.linspace(1, max(n[used].max(), 2), 100)
            ax.plot(fit_n, usl(fit_n, 1.0, f["usl_sigma"], f["usl_kappa"]), "-",
                    color="tab:blue", label="USL")
            ax.plot(fit_n, amdahl(fit_n, f["amdahl_lambda"] / lam, f["amdahl_s"]), "--",
                    color="tab:orange", label="Amdahl")
        ax.set_ylim(0, max(float(np.nanmax(hi)) * 1.15, 1.2))
        words = [f"{a}={f[a]}" if isinstance(f[a], int | float | np.integer) else str(f[a])
                 for a in varying if a != "runtime" or "variant" not in varying]
        title = textwrap.fill(", ".join(words), 40) or name
        ax.set_title(title if _is_fitted(f) else f"{title}\n(no fit: too few counts)",
                     fontsize=7)
        ax.tick_params(labelsize=6)
        ax.set_xlabel("workers", fontsize=7)
        ax.set_ylabel("rate / fitted λ" if _is_fitted(f) else "rate / rate per worker at fewest N",
                      fontsize=7)
        handles, labels = ax.get_legend_handles_labels()
        legend.update(zip(labels, handles, strict=True))
    for ax in list(grid.flat)[panels:]:
        ax.axis("off")
    grid.flat[0].legend(legend.values(), legend.keys(), fontsize=6)
    fig.suptitle(f"{name}: scaling with workers (USL solid, Amdahl dashed, linear dotted; "
                 "hollow: not fitted)", fontsize=9)
    fig.tight_layout()
    return save(fig, out_dir, "scaling")


def write(table: pd.DataFrame, axes: Sequence[str], out_dir: Path, name: str, *,
          cpus: int | None) -> list[Path]:
    """Fit every group up to ``cpus``, write ``scaling.csv`` and the ``scaling`` figure.

    The report reads the CSV (fitting once, in the plots job); nothing is written
    for an experiment without a worker axis or without a group of enough counts.
    The CSV's ``fitted_workers`` and ``not_fitted_workers`` say which points were fitted.
    """
    from perfgrid.kit.atomic import atomic_path

    if "workers" not in axes:
        return []
    fitted = fits(table, axes, cpus=cpus)
    if fitted.empty:
        return []
    path = Path(out_dir) / "scaling.csv"
    with atomic_path(path) as tmp:
        fitted.to_csv(tmp, index=False)
    return [path, *plot(table, fitted, axes, Path(out_dir), name)]
