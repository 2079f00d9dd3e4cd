"""One static site for N machines: every claim on every machine, and how general it is.

``perfgrid gallery SOURCE... -o DIR`` reads two or more result sets (``results/<host>``
folders or archives, each archive verified first) and writes into ``DIR``:

- ``index.html``: the claims as rows, the machines as columns, each cell the verdict
  with its interval; a last column says how general the claim is (the machines where
  it holds, and a pooled estimate); the machines' facts side by side;
- ``claims.html``: per claim a forest plot (each machine's quantity with its 95 %
  interval, the pooled estimate, the threshold) and the pooling's heterogeneity;
- ``experiment-<name>.html``: the rate by the experiment's main axis with the machines
  overlaid, every grid point with each machine's rate (``missing`` where a machine did
  not measure it), and each machine's difference from the first (compare's statistics);
- ``hosts/<host>/report.html``: each machine's own report, served inert (the HTML a
  result set or archive holds is not this perfgrid's: it is the text of a sandboxed
  frame without scripts, under a content security policy, :data:`REPORT_POLICY`);
- ``matrix.csv`` and ``pooled.csv``: the same figures, machine-readable; ``gallery.json``.

The pooled estimate is a random-effects meta-analysis on the log scale
(DerSimonian-Laird, :func:`dersimonian_laird`), each machine's standard error read off
its interval at the claim's own level: ``(log hi - log lo) / (2 z)``. A machine is one
draw from the population of machines, so the between-machine variance (tau squared,
never below 0) widens the pooled interval; I squared, in [0, 1], is the share of the
spread between machines that their own intervals do not explain.

Each source must be its own run: two sources with the same raw result files (a folder
and its copy, or its archive) or the same ``run.json`` are refused by name, since
pooling one run twice would count one machine as two and narrow the interval.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from perfgrid import experiments
from perfgrid.analyse import aggregate, analysis
from perfgrid.analyse.analysis import VERDICTS, Claim, literal, palette_for, plot_setup
from perfgrid.analyse.stats import Bounds, decide
from perfgrid.kit.atomic import atomic_path, write_json, write_text
from perfgrid.kit.paths import Layout
from perfgrid.publish import archive, compare
from perfgrid.publish.report.claims import read_claims
from perfgrid.publish.report.figure import VERDICT_COLOURS
from perfgrid.publish.report.formatting import _HUMAN, human_rate
from perfgrid.publish.report.pages import html_page

#: the z of a two-sided 95 % interval: the pooled estimate's interval is 95 %
Z95 = 1.959963984540054
#: the marker file that says a folder is a gallery, so writing into it again is safe
MARKER = "gallery.json"
#: a cell's CSS class by verdict (the report's colours); "missing": not on that machine
CSS = {"reproduced": "reproduced", "not reproduced": "not", "at the threshold": "at",
       "inconclusive": "inconclusive", "missing": "missing"}
#: the policy of the page that shows a machine's own report: the report's inline styles
#: and embedded (data:) images, no script, nothing from elsewhere, no frame but its srcdoc
REPORT_POLICY = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
                 "frame-src 'none'; form-action 'none'; base-uri 'none'")
#: the gallery's own CSS, after the report's: phone-sized windows, scrolling tables
GALLERY_CSS = """nav a{margin-right:1em}.scroll{overflow-x:auto;max-width:100%}
td.missing{background:#eee;color:#555;font-style:italic}td.cell{white-space:nowrap}
.claim{min-width:14em}.general{min-width:18em}
.legend span{display:inline-block;padding:.1em .5em;margin:.1em .3em .1em 0}
.legend .missing{background:#eee;font-style:italic}figure{margin:1em 0}
@media (max-width:600px){body{margin:.5em auto;padding:0 .5em}h1{font-size:1.4em}
h2{font-size:1.15em}table{font-size:.8em}}"""


@dataclass
class Machine:
    """One result set as the gallery reads it."""

    label: str
    source: str
    root: Path
    facts: dict[str, Any]
    claims: list[Claim]
    claims_from: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


# -- reading ----------------------------------------------------------------------------
def check_sources(sources: list[str]) -> None:
    """Refuse before anything is read further: fewer than two sources, one that is neither
    a result folder nor an archive, and every archive that fails ``perfgrid verify``
    (all of them named, each with its first problem)."""
    if len(sources) < 2:
        raise ValueError(f"a gallery needs two or more sources (got {len(sources)}); "
                         f"for one machine, read its report.html")
    failed = []
    for source in sources:
        path = Path(source)
        if path.is_file() and path.name.endswith(".tar.gz"):
            problems = archive.verify(path)
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                failed.append(f"{source}: fails verify: {problems[0]}{more}")
        elif not (path / "tables").is_dir():
            failed.append(f"{source}: neither a result folder (results/<host> with tables/) "
                          f"nor a .tar.gz archive")
    if failed:
        raise ValueError("refused, nothing written: " + "; ".join(failed))


def experiment_names(root: Path) -> list[str]:
    """The experiments with a table in this result set, in report order."""
    return [n for n in experiments.available() if Layout(root).table(n).exists()]


def load(source: str, root: Path) -> Machine:
    """A result set's facts, claims and tables. Claims come from its ``claims.csv``; a set
    written before there was one gets them computed here from its tables, and says so."""
    label = root.resolve().name
    layout = Layout(root)
    facts = json.loads(layout.machine.read_text()) if layout.machine.exists() else {}
    tables = {}
    for name in experiment_names(root):
        tables[name] = aggregate.read_table(Layout(root).table(name),
                                            experiments.get(name).axes,
                                            ["runtime", "rate", "rate_unit"])
    if layout.claims_table.exists():
        claims, claims_from = read_claims(layout.claims_table), "claims.csv"
    else:
        claims = []
        for name, table in tables.items():
            try:
                claims += analysis.module(name).claims(table, experiments.get(name))
            except KeyError as err:
                raise ValueError(f"{Layout(root).table(name)}: missing column {err}, "
                                 f"which the {name} claims need") from None
        claims_from = "computed by the gallery from its tables (no claims.csv)"
    return Machine(label, source, root, facts, claims, claims_from, tables)


def check_labels(machines: list[Machine]) -> None:
    """Each machine's label (its results/<host> folder's name) names one machine only."""
    seen: dict[str, str] = {}
    for m in machines:
        if m.label in ("", ".", ".."):
            raise ValueError(f"{m.source}: no host label (its folder is named {m.label!r})")
        if m.label in seen:
            raise ValueError(f"{seen[m.label]} and {m.source} are both host {m.label!r}: "
                             f"each machine needs its own label (the config's host)")
        seen[m.label] = m.source


def run_identity(root: Path) -> dict[str, str]:
    """What identifies the run behind a result set, whatever folder or archive it is read
    from: ``raw``, the SHA-256 over its raw result files (each one's path under ``raw/``
    and its bytes; where it has none, over its tables and claims.csv), and ``run``, its
    run.json's record of how it started (when, where, with what arguments), if any."""
    import hashlib

    digest = hashlib.sha256()
    files = sorted(p for p in (root / "raw").rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(root).parts))
    if not files:
        files = sorted((root / "tables").glob("*.csv")) + [
            p for p in (Layout(root).claims_table,) if p.is_file()]
    for path in files:
        digest.update(f"{path.relative_to(root).as_posix()}\0"
                      f"{archive.file_sha256(path)}\n".encode())
    out = {"raw": digest.hexdigest() if files else ""}
    record = Layout(root).run_record
    try:
        started = json.loads(record.read_text()) if record.is_file() else {}
    except (OSError, ValueError):
        started = {}
    if isinstance(started, dict) and started.get("started") is not None:
        out["run"] = json.dumps({k: started.get(k) for k in ("started", "cwd", "argv")},
                                sort_keys=True)
    return out


class SameRun(ValueError):
    """Two sources that are one run: judged or pooled as two, it would count twice."""


def check_distinct(roots: list[Path], sources: list[str], counts_as: str = "") -> None:
    """Refuse two sources that are one run (:func:`run_identity`: the same raw result
    files, or the same run.json): a run against its copy agrees with itself, and pooled
    twice one run would count as two and narrow the interval. SameRun naming both;
    ``counts_as`` says what it would wrongly count as."""
    seen: dict[tuple[str, str], int] = {}
    for n, (root, source) in enumerate(zip(roots, sources, strict=True)):
        identity = run_identity(root)
        for kind in ("raw", "run"):
            value = identity.get(kind)
            if value and seen.setdefault((kind, value), n) != n:
                why = (f"the same raw result files (sha256 {value[:12]})" if kind == "raw"
                       else "the same run.json (one start of the pipeline)")
                raise SameRun(f"refused, nothing written: {sources[seen[kind, value]]} and "
                              f"{source} are the same run: {why}; "
                              + (f"pooled twice it would count as {counts_as}: "
                                 if counts_as else "") + "give each run once")


def check_runs(machines: list[Machine]) -> None:
    """Each source is a run of its own (:func:`check_distinct`): pooling one twice would
    count one machine as two and narrow its interval."""
    check_distinct([m.root for m in machines], [m.source for m in machines], "two machines")


# -- claims across machines -------------------------------------------------------------
def claim_key(claim: Claim) -> tuple[str, str, str]:
    return claim.experiment, claim.runtime, claim.hypothesis


def claim_rows(machines: list[Machine]) -> list[tuple[tuple[str, str, str], dict[str, Claim]]]:
    """Every claim of every machine, once: its key and the machines' claims by label,
    in report order (experiment, then the order the claims first came)."""
    order = {name: i for i, name in enumerate(experiments.available())}
    found: dict[tuple[str, str, str], dict[str, Claim]] = {}
    for m in machines:
        for claim in m.claims:
            found.setdefault(claim_key(claim), {})[m.label] = claim
    first = {key: i for i, key in enumerate(found)}
    keys = sorted(found, key=lambda k: (order.get(k[0], len(order)), first[k]))
    return [(key, found[key]) for key in keys]


def interval_text(claim: Claim) -> str:
    """``1.32x [1.20, 1.45]``, or why there is no interval."""
    if not math.isfinite(claim.value):
        return "no estimate"
    text = f"{claim.value:.3g}{claim.unit}"
    if math.isfinite(claim.ci_low) and math.isfinite(claim.ci_high):
        return f"{text} [{claim.ci_low:.3g}, {claim.ci_high:.3g}]"
    return f"{text} [no interval]"


def _usable(claim: Claim) -> bool:
    return (all(math.isfinite(v) for v in (claim.value, claim.ci_low, claim.ci_high))
            and 0 < claim.ci_low <= claim.value <= claim.ci_high and claim.ci_low < claim.ci_high
            and 0 < _level(claim) < 1)


def _level(claim: Claim) -> float:
    """The claim's interval level (95 % where a table does not say)."""
    return claim.level if math.isfinite(claim.level) else 0.95


def dersimonian_laird(effect: np.ndarray, se: np.ndarray) -> dict[str, float]:
    """Random-effects pooling of ``effect`` (two or more, log scale) with standard errors
    ``se`` (each > 0): ``mean`` and its ``sd``, ``tau2``, ``q``, ``df`` and ``i2``.

    Q is summed as squares about the fixed-effect mean, never as a difference of two
    sums (which rounds below 0 for equal effects and made I squared of 1.8e13 out of
    it). The one-step tau squared is taken as 0 where it is negative (machines closer
    together than their intervals say), as DerSimonian and Laird do: the mean is then
    the fixed-effect one. I squared is ``(Q - df) / Q`` where Q exceeds df, else 0: it
    lies in [0, 1).
    """
    y = np.asarray(effect, dtype=float)
    v = np.asarray(se, dtype=float) ** 2
    w = 1 / v
    fixed = float(np.sum(w * y) / np.sum(w))
    q = float(np.sum(w * (y - fixed) ** 2))
    df = len(y) - 1
    c = float(np.sum(w) - np.sum(w**2) / np.sum(w))
    tau2 = max(0.0, (q - df) / c) if c > 0 and q > df else 0.0
    i2 = (q - df) / q if q > df else 0.0
    w_re = 1 / (v + tau2)
    return {"mean": float(np.sum(w_re * y) / np.sum(w_re)),
            "sd": float(1 / math.sqrt(np.sum(w_re))), "tau2": tau2, "q": q, "df": df,
            "i2": min(1.0, max(0.0, i2))}


def pool(by_host: dict[str, Claim], hosts: list[str]) -> dict[str, Any]:
    """How general one claim is over ``hosts``: its verdict counts, and a random-effects
    estimate pooled over the machines whose claim has an interval (two or more), by
    :func:`dersimonian_laird`: tau squared >= 0, I squared in [0, 1].
    """
    from scipy.special import ndtri

    counts = {v: sum(1 for h in hosts if h in by_host and by_host[h].verdict == v)
              for v in VERDICTS}
    missing = [h for h in hosts if h not in by_host]
    used = [h for h in hosts if h in by_host and _usable(by_host[h])]
    out: dict[str, Any] = {**counts, "machines": len(hosts), "missing": missing,
                           "pooled_over": used, "value": math.nan, "ci_low": math.nan,
                           "ci_high": math.nan, "tau": math.nan, "i2": math.nan,
                           "verdict": "", "reason": ""}
    if len(used) < 2:
        out["reason"] = (f"not pooled: {len(used)} machine(s) with an interval, "
                         f"two or more needed")
        return out
    claims = [by_host[h] for h in used]
    effect = np.log([c.value for c in claims])
    z = np.array([float(ndtri(0.5 + _level(c) / 2)) for c in claims])
    se = (np.log([c.ci_high for c in claims]) - np.log([c.ci_low for c in claims])) / (2 * z)
    res = dersimonian_laird(effect, se)
    mean, sd = res["mean"], res["sd"]
    out.update(value=math.exp(mean), ci_low=math.exp(mean - Z95 * sd),
               ci_high=math.exp(mean + Z95 * sd), tau=math.sqrt(res["tau2"]), i2=res["i2"])
    ref = claims[0]
    if ref.op and math.isfinite(ref.threshold):
        pooled = Bounds(out["value"], lambda level: (
            math.exp(mean - float(ndtri(0.5 + level / 2)) * sd),
            math.exp(mean + float(ndtri(0.5 + level / 2)) * sd)), "pooled over machines")
        try:
            out["verdict"], out["reason"] = decide(pooled, ref.op, ref.threshold, ".3g",
                                                   ref.unit)
        except ValueError as err:  # an op this perfgrid does not know (a hand-made CSV)
            out["reason"] = f"no pooled verdict: {err}"
    return out


def generality(claim: Claim, pooled: dict[str, Any]) -> str:
    """``holds on 2 of 3 machines (...); pooled 1.3x [1.1, 1.5] over 3 machines ...``."""
    n = pooled["machines"]
    counts = ", ".join(f"{pooled[v]} {v}" for v in VERDICTS if pooled[v])
    missing = f"; not on {', '.join(pooled['missing'])}" if pooled["missing"] else ""
    text = f"holds on {pooled['reproduced']} of {n} machines ({counts or 'none'}{missing})"
    if not math.isfinite(pooled["value"]):
        return f"{text}; {pooled['reason']}"
    unit = claim.unit
    return (f"{text}; pooled {pooled['value']:.3g}{unit} [{pooled['ci_low']:.3g}, "
            f"{pooled['ci_high']:.3g}] over {len(pooled['pooled_over'])} machines "
            f"(random effects, DerSimonian-Laird; tau {pooled['tau']:.3g} on the log scale, "
            f"I\u00b2 {pooled['i2']:.0%}): {pooled['verdict'] or 'no verdict'}")


# -- points across machines -------------------------------------------------------------
def _value(v: Any) -> str:
    """An axis value as a key: 4.0 and 4 are one worker count, NaN is no value."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _sort_key(v: str) -> tuple[int, float, str]:
    try:
        return 0, float(v), v
    except ValueError:
        return 1, 0.0, v


def point_axes(name: str, machines: list[Machine]) -> list[str]:
    """The experiment's axes that any machine's table has, then runtime."""
    present = [m.tables[name] for m in machines if name in m.tables]
    axes = [a for a in experiments.get(name).axes if any(a in t for t in present)]
    return [*axes, "runtime"]


def points_across(name: str, machines: list[Machine]) -> tuple[list[str], list[dict]]:
    """(key columns, one row per grid point any machine measured): its axis values and,
    per machine, its rate with interval or None where that machine has no such point."""
    keys = point_axes(name, machines)
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    for m in machines:
        table = m.tables.get(name)
        if table is None:
            continue
        for _, row in table.iterrows():
            key = tuple(_value(row.get(k)) for k in keys)
            entry = rows.setdefault(key, {"key": dict(zip(keys, key, strict=True)),
                                          "rates": {}})
            entry["rates"][m.label] = human_rate(
                row["rate"], row.get("rate_ci_low", float("nan")),
                row.get("rate_ci_high", float("nan")), str(row["rate_unit"])) or "no rate"
    ordered = sorted(rows.values(), key=lambda r: [_sort_key(v) for v in r["key"].values()])
    return keys, ordered


def main_axis(name: str, machines: list[Machine]) -> str:
    """The axis an experiment's headline plot runs along: workers where they vary, else
    the integer axis with the most values, else the variant."""
    exp = experiments.get(name)
    values = {a: {_value(v) for m in machines if name in m.tables and a in m.tables[name]
                  for v in m.tables[name][a].dropna()} for a in exp.axes}
    if len(values.get("workers", ())) > 1:
        return "workers"
    ints = sorted((a for a in exp.int_axes if len(values.get(a, ())) > 1),
                  key=lambda a: -len(values[a]))
    return ints[0] if ints else ("variant" if "variant" in exp.axes else exp.axes[0])


def differences(machines: list[Machine]) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """Each machine's rate over the first's, point by point, with compare's statistics
    (:func:`perfgrid.publish.compare.compare_experiment`: ratio interval, Welch's t), adjusted by
    Benjamini-Hochberg over every point of every machine at once; by experiment. Where
    compare refuses a pair (no raw results), why, by experiment."""
    ref = machines[0]
    frames: dict[str, pd.DataFrame] = {}
    problems: dict[str, list[str]] = {}
    for m in machines[1:]:
        for name in ref.tables.keys() & m.tables.keys():
            try:
                frame = compare.compare_experiment(name, ref.root, m.root)
            except (ValueError, OSError) as err:
                problems.setdefault(name, []).append(f"{m.label}: {err}")
                continue
            frames[f"{name}\0{m.label}"] = frame.assign(machine=m.label)
    adjusted = compare.adjust(frames)
    out: dict[str, pd.DataFrame] = {}
    for key, frame in adjusted.items():
        name = key.split("\0", 1)[0]
        out[name] = pd.concat([out[name], frame]) if name in out else frame
    return out, {n: "; ".join(p) for n, p in problems.items()}


# -- figures ----------------------------------------------------------------------------
def _save(fig: Any, path: Path) -> list[Path]:
    """The figure as PNG and SVG, each written atomically; closed."""
    import matplotlib.pyplot as plt

    out = []
    box = analysis.cropped(fig)
    for suffix in (".png", ".svg"):
        target = path.with_suffix(suffix)
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format=suffix[1:], dpi=analysis.DPI, bbox_inches=box)
        out.append(target)
    plt.close(fig)
    return out


def forest_plot(key: tuple[str, str, str], by_host: dict[str, Claim], hosts: list[str],
                pooled: dict[str, Any], path: Path) -> list[Path]:
    """Each machine's compared quantity with its 95 % interval, coloured by verdict, the
    pooled estimate (a diamond) and the threshold; a machine without the claim says so."""
    plot_setup(pd.DataFrame())
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = [*hosts, "pooled"]
    fig, ax = plt.subplots(figsize=(6.5, 0.42 * len(rows) + 1.3))
    ref = next(iter(by_host.values()))
    xs = [v for c in by_host.values() for v in (c.value, c.ci_low, c.ci_high)
          if math.isfinite(v) and v > 0]
    xs += [v for v in (pooled["ci_low"], pooled["ci_high"], ref.threshold)
           if math.isfinite(v) and v > 0]
    middle = math.exp(np.mean(np.log(xs))) if xs else 1.0
    for i, host in enumerate(rows):
        y = len(rows) - 1 - i
        if host == "pooled":
            if math.isfinite(pooled["value"]):
                ax.plot([pooled["ci_low"], pooled["ci_high"]], [y, y], color="k", lw=2)
                ax.plot(pooled["value"], y, "D", color="k", ms=7)
            else:
                ax.text(middle, y, "not pooled", ha="center", va="center", fontsize=8,
                        color="0.35")
            continue
        claim = by_host.get(host)
        if claim is None:
            ax.text(middle, y, "missing: no such claim on this machine", ha="center",
                    va="center", fontsize=8, color="0.35", style="italic")
            continue
        colour = VERDICT_COLOURS[claim.verdict]
        if not (math.isfinite(claim.value) and claim.value > 0):
            ax.text(middle, y, f"no estimate ({claim.verdict})", ha="center", va="center",
                    fontsize=8, color=colour)
        elif _usable(claim):
            ax.plot([claim.ci_low, claim.ci_high], [y, y], color=colour, lw=2.5)
            ax.plot(claim.value, y, "o", color=colour, ms=5)
        else:
            ax.plot(claim.value, y, "o", mfc="white", color=colour, ms=6)
    if math.isfinite(ref.threshold) and ref.threshold > 0:
        ax.axvline(ref.threshold, color="k", lw=0.9, ls="--")
    ax.set_xscale("log")
    if not xs:  # nothing drawn but words: a log axis needs some positive range
        ax.set_xlim(0.5, 2.0)
    low, high = ax.get_xlim()
    decades = math.log10(high / low) if 0 < low < high else 1.0
    if decades < 0.5:  # within a factor of 3: evenly spaced values read best
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=5))
    else:
        subs = (1.0, 1.5, 2, 3, 5, 7) if decades < 1 else (1.0, 2, 5) if decades < 3 else (1.0,)
        ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=subs))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_yticks(range(len(rows)), [literal(h) for h in reversed(
        [*hosts, "pooled (random effects)"])], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    threshold = f"{ref.op} {ref.threshold:g}{ref.unit}" if ref.op else "none"
    unit = f" ({ref.unit.strip()})" if ref.unit.strip() else ""
    ax.set_xlabel(literal(f"{key[0]} [{key[1]}]: measured{unit}, 95 % interval; dashed: "
                          f"threshold ({threshold})\nhollow dot: no interval"), fontsize=8)
    handles = [plt.Line2D([], [], color=c, lw=2.5, label=v) for v, c in VERDICT_COLOURS.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def rate_plot(name: str, machines: list[Machine], axis: str, path: Path) -> list[Path]:
    """Per runtime, each machine's best rate (with its 95 % interval) at each value of
    ``axis``, over the other axes; an x at the foot where a machine has no such point."""
    frames = [m.tables[name].assign(machine=m.label) for m in machines if name in m.tables]
    table = pd.concat(frames, ignore_index=True)
    plot_setup(table)
    import matplotlib.pyplot as plt

    table = table[table["rate"].notna() & table[axis].notna()].copy()
    table["x"] = table[axis].map(_value)
    runtimes = sorted(table["runtime"].dropna().unique(), key=str)
    hosts = [m.label for m in machines]
    colours = palette_for(hosts)
    unit = str(table["rate_unit"].iloc[0]) if len(table) else ""
    top = float(table["rate"].max()) if len(table) else 1.0
    scale, label = next(((s, u) for s, u in _HUMAN.get(unit, [(1, unit)]) if top >= s),
                        _HUMAN.get(unit, [(1, unit)])[-1])
    cols = min(3, max(1, len(runtimes)))
    rows = math.ceil(max(1, len(runtimes)) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(runtimes):]:
        ax.set_visible(False)
    for ax, runtime in zip(axes.flat, runtimes, strict=False):
        here = table[table["runtime"] == runtime]
        xs = sorted(here["x"].unique(), key=_sort_key)
        pos = {x: i for i, x in enumerate(xs)}
        for j, host in enumerate(hosts):
            mine = here[here["machine"] == host]
            best = mine.loc[mine.groupby("x")["rate"].idxmax()] if len(mine) else mine
            best = best.assign(p=best["x"].map(pos)).sort_values("p")
            shift = (j - (len(hosts) - 1) / 2) * 0.06
            if len(best):
                low = best.get("rate_ci_low", best["rate"]).fillna(best["rate"])
                high = best.get("rate_ci_high", best["rate"]).fillna(best["rate"])
                ax.errorbar(best["p"] + shift, best["rate"] / scale,
                            yerr=[(best["rate"] - low).clip(lower=0) / scale,
                                  (high - best["rate"]).clip(lower=0) / scale],
                            marker="o", ms=4, lw=1.2, capsize=2, color=colours[host],
                            label=literal(host))
            absent = [pos[x] for x in xs if x not in set(best["x"])]
            if absent:
                ax.scatter([p + shift for p in absent], [0.03] * len(absent), marker="x",
                           color=colours[host], transform=ax.get_xaxis_transform(), s=30,
                           clip_on=False)
        ax.set_xticks(range(len(xs)), [literal(x) for x in xs], fontsize=7,
                      rotation=30 if axis == "variant" else 0)
        ax.set_xlabel(literal(axis))
        ax.set_ylabel(literal(f"best rate ({label})"))
        ax.set_ylim(bottom=0)
        ax.set_title(literal(runtime), fontsize=9)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8,
               title="machine")
    fig.tight_layout()
    return _save(fig, path)


# -- machines side by side --------------------------------------------------------------
def _gib(value: Any) -> str:
    return f"{value / 2**30:.1f} GiB" if isinstance(value, int | float) else "n/a"


def machine_facts(machines: list[Machine]) -> pd.DataFrame:
    """One row per fact (CPU model, cores, topology, memory, kernel, Python), one column
    per machine, from each machine.json; ``n/a`` where a machine did not record it."""
    def facts(m: dict[str, Any]) -> dict[str, str]:
        topo = m.get("topology") if isinstance(m.get("topology"), dict) else {}
        limit = m.get("restriction") or {}
        auto = m.get("auto_workers") if isinstance(m.get("auto_workers"), dict) else {}
        shape = (f"{topo['packages']} package(s), {topo['cores']} cores, "
                 f"{topo['threads_per_core']} thread(s) per core, "
                 f"{len(topo.get('l3_groups', []))} L3 group(s), "
                 f"{len(topo.get('numa_nodes', []))} NUMA node(s)") if {
            "packages", "cores", "threads_per_core"} <= topo.keys() else "n/a"
        allowed = (f"{limit['allowed']} of {limit['online']} ({', '.join(limit['by'])})"
                   if limit.get("restricted") else "all online" if limit else "n/a")
        return {
            "CPU model": str(m.get("cpu_model", "n/a")),
            "logical CPUs": str(m.get("cpus_logical", "n/a")),
            "physical cores": str(m.get("cpus_physical", "n/a")),
            "topology": shape,
            "CPUs the run could use": allowed,
            "workers: auto": ", ".join(map(str, auto.get("counts", []))) or "n/a",
            "memory": _gib(m.get("memory_bytes")),
            "kernel": str(m.get("kernel", "n/a")),
            "OS": str(m.get("os", "n/a")),
            "Python": f"{m.get('python', 'n/a')} ({m.get('python_implementation', '?')})",
            "snapshot taken": str(m.get("taken_at", "n/a")),
        }

    columns = {m.label: facts(m.facts) for m in machines}
    frame = pd.DataFrame(columns)
    frame.index.name = "fact"
    return frame.reset_index()


# -- the site ---------------------------------------------------------------------------
def build(machines: list[Machine]) -> dict[str, Any]:
    """Everything the site shows, as data: computed before anything is written."""
    hosts = [m.label for m in machines]
    claims = []
    for i, (key, by_host) in enumerate(claim_rows(machines), 1):
        ref = next(iter(by_host.values()))
        pooled = pool(by_host, hosts)
        cells = []
        for host in hosts:
            claim = by_host.get(host)
            if claim is None:
                cells.append({"host": host, "verdict": "missing", "css": "missing",
                              "interval": "no such claim on this machine", "measured": "",
                              "reason": "the claim was not made on this machine (experiment "
                                        "not run, or a perfgrid without it)"})
            else:
                cells.append({"host": host, "verdict": claim.verdict,
                              "css": CSS[claim.verdict], "interval": interval_text(claim),
                              "reason": claim.reason, "measured": claim.measured})
        claims.append({"id": f"claim-{i}", "key": key, "experiment": key[0],
                       "runtime": key[1], "hypothesis": key[2], "criterion": ref.criterion,
                       "cells": cells, "pooled": pooled,
                       "generality": generality(ref, pooled), "by_host": by_host})
    diffs, diff_problems = differences(machines)
    names = [n for n in experiments.available() if any(n in m.tables for m in machines)]
    sections = []
    for name in names:
        keys, rows = points_across(name, machines)
        everywhere = sum(1 for r in rows if len(r["rates"]) == len(hosts))
        sections.append({
            "name": name, "columns": keys, "rows": rows, "axis": main_axis(name, machines),
            "everywhere": everywhere, "some": len(rows) - everywhere,
            "without": [m.label for m in machines if name not in m.tables],
            "diffs": diffs.get(name, pd.DataFrame()),
            "diff_problem": diff_problems.get(name, ""),
        })
    return {"machines": machines, "hosts": hosts, "claims": claims, "sections": sections,
            "facts": machine_facts(machines)}


def _matrix(data: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for c in data["claims"]:
        row = {"experiment": c["experiment"], "runtime": c["runtime"],
               "hypothesis": c["hypothesis"]}
        for cell in c["cells"]:
            row[cell["host"]] = cell["verdict"]
            row[f"{cell['host']} interval"] = cell["interval"]
        rows.append(row)
    return pd.DataFrame(rows)


def _pooled_frame(data: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for c in data["claims"]:
        p = c["pooled"]
        rows.append({"experiment": c["experiment"], "runtime": c["runtime"],
                     "hypothesis": c["hypothesis"],
                     **{v: p[v] for v in VERDICTS}, "missing": len(p["missing"]),
                     "machines": p["machines"], "pooled_over": len(p["pooled_over"]),
                     "value": p["value"], "ci_low": p["ci_low"], "ci_high": p["ci_high"],
                     "tau": p["tau"], "i2": p["i2"], "pooled_verdict": p["verdict"],
                     "pooled_reason": p["reason"]})
    return pd.DataFrame(rows)


def _diff_table(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    if frame.empty:
        return frame
    shown = frame.assign(
        ratio=[f"{r:.3g} [{lo:.3g}, {hi:.3g}]" if math.isfinite(lo) else f"{r:.3g}"
               for r, lo, hi in zip(frame["ratio_b_over_a"], frame["ratio_ci_low"],
                                    frame["ratio_ci_high"], strict=True)])
    return shown[["machine", *[k for k in keys if k in shown], "ratio", "q", "significance",
                  "test"]]


def _refuse_foreign(out_dir: Path) -> None:
    """Write only into a new or empty folder, or one an earlier gallery wrote: perfgrid
    never alters a file it did not create."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"{out_dir} exists and is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / MARKER).is_file():
        raise ValueError(f"{out_dir} is not empty and holds no {MARKER}: not a perfgrid "
                         f"gallery; choose a new or empty folder")


def write(data: dict[str, Any], out_dir: Path) -> None:
    """The site, file by file, each written atomically."""
    machines, hosts = data["machines"], data["hosts"]
    # first: a gallery stopped half-way is still one, and may be written again
    write_json(out_dir / MARKER, {
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machines": [{"label": m.label, "source": m.source, "claims": m.claims_from}
                     for m in machines]})
    figures = out_dir / "figures"
    reports = {}
    for m in machines:
        src = Layout(m.root).report_html
        if src.is_file():
            # never republished as live HTML: a script planted in it would run on the site
            write_text(out_dir / "hosts" / m.label / "report.html", html_page(
                "gallery_report.html.j2", label=m.label, source=m.source,
                policy=REPORT_POLICY, report=src.read_text(errors="replace"),
                title=f"perfgrid gallery: {m.label}'s own report"))
            reports[m.label] = f"hosts/{quote(m.label, safe='')}/report.html"
    common = {"gallery_css": GALLERY_CSS, "hosts": hosts, "reports": reports,
              "facts": data["facts"], "experiments": [s["name"] for s in data["sections"]],
              "sources": [(m.label, m.source, m.claims_from) for m in machines],
              "verdicts": [(v, CSS[v]) for v in [*VERDICTS, "missing"]]}
    for claim in data["claims"]:
        forest_plot(claim["key"], claim["by_host"], hosts, claim["pooled"],
                    figures / f"{claim['id']}.png")
    for sec in data["sections"]:
        frames = [m.tables[sec["name"]] for m in machines if sec["name"] in m.tables]
        has_rates = any(len(t) and t["rate"].notna().any() and sec["axis"] in t
                        for t in frames)
        sec["figure"] = (f"figures/{sec['name']}-rate.png" if has_rates else "")
        if has_rates:
            rate_plot(sec["name"], machines, sec["axis"], figures / f"{sec['name']}-rate.png")
        write_text(out_dir / f"experiment-{sec['name']}.html", html_page(
            "gallery_experiment.html.j2", **common, sec=sec,
            diff_table=_diff_table(sec["diffs"], sec["columns"]), reference=hosts[0],
            title=f"perfgrid gallery: {sec['name']}"))
    write_text(out_dir / "claims.html", html_page(
        "gallery_claims.html.j2", **common, claims=data["claims"],
        title="perfgrid gallery: claims across machines"))
    write_text(out_dir / "index.html", html_page(
        "gallery_index.html.j2", **common, claims=data["claims"], sections=data["sections"],
        title=f"perfgrid gallery: {len(hosts)} machines"))
    for name, frame in (("matrix.csv", _matrix(data)), ("pooled.csv", _pooled_frame(data))):
        with atomic_path(out_dir / name) as tmp:
            frame.to_csv(tmp, index=False)


def gallery(sources: list[str], out_dir: Path) -> dict[str, Any]:
    """Check every source, read them all, then write the site into ``out_dir``.

    Nothing is written (not even ``out_dir``) until every archive verified and every
    result set was read: one that fails is refused by name.
    """
    out_dir = Path(out_dir)
    check_sources(sources)
    _refuse_foreign(out_dir)
    with tempfile.TemporaryDirectory(prefix="perfgrid-gallery-") as scratch:
        machines = [load(s, compare.resolve(s, Path(scratch) / str(i)))
                    for i, s in enumerate(sources)]
        check_runs(machines)
        check_labels(machines)
        data = build(machines)
        out_dir.mkdir(parents=True, exist_ok=True)
        write(data, out_dir)
    return data
