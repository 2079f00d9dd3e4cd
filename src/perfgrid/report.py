"""The final report: this machine's figures beside the seeds', claim by claim.

Writes one self-contained HTML file (images embedded as data URIs, no
external requests) and a Markdown twin. Every verdict is computed from the
tables by the experiment's analysis module; nothing here is hard-coded.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup

from perfgrid import counters, experiments, gitinfo
from perfgrid.aggregate import read_table
from perfgrid.analysis import VERDICTS, Claim, claims_of, literal, module
from perfgrid.atomic import atomic_path, write_text
from perfgrid.paths import Layout
from perfgrid.topology import format_cpu_list, parse_cpu_list

#: statistics shown after the axes in each experiment's table
STATS = ["n_processes", "n_values", "cv", "rate (95 % interval)", "ci_rel", "converged",
         "ratio_to_native"]

#: how a rate unit is shown to a reader: (scale, unit) pairs from large to small
_HUMAN = {
    "bytes/s": [(1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1, "B/s")],
    "calls/s": [(1e6, "M calls/s"), (1e3, "k calls/s"), (1, "calls/s")],
    "spawns/s": [(1e6, "M spawns/s"), (1e3, "k spawns/s"), (1, "spawns/s")],
    "requests/s": [(1e3, "k req/s"), (1, "req/s")],
    "messages/s": [(1e6, "M msg/s"), (1e3, "k msg/s"), (1, "msg/s")],
    "timer events/s": [(1e6, "M events/s"), (1e3, "k events/s"), (1, "events/s")],
}


def human_rate(rate: float, low: float, high: float, unit: str) -> str:
    """``11.2 GB/s [10.9, 11.5]``: a rate and its interval in a readable unit."""
    if not isinstance(rate, int | float) or pd.isna(rate):
        return ""
    scale, label = next(((s, u) for s, u in _HUMAN.get(unit, [(1, unit)]) if abs(rate) >= s),
                        _HUMAN.get(unit, [(1, unit)])[-1])
    text = f"{rate / scale:.3g} {label}"
    if isinstance(low, int | float) and not pd.isna(low) and not pd.isna(high):
        return f"{text} [{low / scale:.3g}, {high / scale:.3g}]"
    return f"{text} [no interval]"


def with_human_rates(table: pd.DataFrame) -> pd.DataFrame:
    """The table with a readable ``rate (95 % interval)`` column; the raw SI columns stay."""
    if table.empty or "rate" not in table:
        return table
    cols = {c: table[c] if c in table else pd.Series(float("nan"), index=table.index)
            for c in ("rate_ci_low", "rate_ci_high", "rate_unit")}
    human = [human_rate(r, lo, hi, str(u)) for r, lo, hi, u in zip(
        table["rate"], cols["rate_ci_low"], cols["rate_ci_high"], cols["rate_unit"],
        strict=True)]
    return table.assign(**{"rate (95 % interval)": human})


def verdict_counts(claims: pd.DataFrame) -> str:
    """``12 reproduced, 3 not reproduced, 9 inconclusive``."""
    counts = claims["verdict"].value_counts() if len(claims) else pd.Series(dtype=int)
    return ", ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS)


#: each verdict's colour in a figure (the report's claims figure, the gallery's forest plots)
VERDICT_COLOURS = {"reproduced": "tab:green", "not reproduced": "tab:red",
                   "at the threshold": "tab:blue", "inconclusive": "tab:orange"}


def claims_figure(claims: list[Claim], path: Path) -> Path:
    """Every claim's interval against its threshold, coloured by verdict (PNG and SVG).

    The axis is the measured quantity over its threshold, turned so that right of
    1 means the claim holds, so claims of every unit share one axis.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    colours = VERDICT_COLOURS
    fig, ax = plt.subplots(figsize=(8, 0.28 * max(len(claims), 1) + 1.4))
    labels = []
    for i, claim in enumerate(reversed(claims)):
        labels.append(literal(f"{claim.experiment} [{claim.runtime}] {claim.hypothesis}"[:80]))
        if not (np.isfinite(claim.value) and np.isfinite(claim.threshold) and claim.threshold):
            ax.text(1.0, i, "no estimate", fontsize=6, va="center", ha="center", color="0.4")
            continue
        flip = claim.op.startswith("<")
        xs = [v / claim.threshold for v in (claim.value, claim.ci_low, claim.ci_high)]
        if flip:  # a lower end of 0 (a count of none: a one-sided bound) turns unbounded
            xs = [1 / x if x else (np.inf if x == 0 else np.nan) for x in xs]
        colour = colours[claim.verdict]
        ends = sorted(xs[1:])
        if np.isfinite(ends[0]) and np.isposinf(ends[1]) and np.isfinite(xs[0]):  # one-sided
            end = max(xs[0], ends[0]) * 1.5
            ax.plot([ends[0], end], [i, i], color=colour, lw=2.5)
            ax.plot(end, i, ">", color=colour, ms=4)
            ax.plot(xs[0], i, "o", color=colour, ms=4)
        elif np.isfinite(xs[1]) and np.isfinite(xs[2]):
            ax.plot([min(xs[1:]), max(xs[1:])], [i, i], color=colour, lw=2.5)
            ax.plot(xs[0], i, "o", color=colour, ms=4)
        else:
            ax.plot(xs[0], i, "o", mfc="white", color=colour, ms=5)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xlabel("measured / threshold, right of 1: the claim holds\n"
                  "bar: 95 % interval (arrow: one-sided, unbounded); hollow dot: no interval",
                  fontsize=8)
    handles = [plt.Line2D([], [], color=c, lw=2.5, label=v) for v, c in colours.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    fig.savefig(path.with_suffix(".svg"), bbox_inches="tight")
    plt.close(fig)
    return path


def md_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table."""
    if frame.empty:
        return "_(no rows)_\n"
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    """One Markdown table cell: a pipe is escaped and a line break becomes a space, so a
    value (a reason, a path) cannot end its row or add a column."""
    if isinstance(value, float):
        if pd.isna(value):
            return ""
        return f"{value:.4g}"
    return " ".join(str(value).splitlines()).replace("|", "\\|")


def _rounds(listed: Any) -> int:
    """How many rounds a ``noisy_rounds`` cell (a JSON list) names."""
    try:
        return len(json.loads(listed)) if isinstance(listed, str) and listed else 0
    except ValueError:
        return 0


def flags(table: pd.DataFrame, cv_threshold: float) -> pd.DataFrame:
    """Rows whose figure should not be taken as clean, with the reason."""
    reasons = pd.Series("", index=table.index)
    if "cv" in table:
        reasons = reasons.where(~(table["cv"] > cv_threshold),
                                reasons + f"CV above {cv_threshold:.0%}; ")
    if "noisy" in table:
        left = table["noisy_rounds"].map(_rounds) if "noisy_rounds" in table else None
        text = pd.Series("other processes busy while measured (left out of claims); ",
                         index=table.index)
        if left is not None and "n_rounds" in table:
            some = (left > 0) & (left < table["n_rounds"].fillna(1))
            text = text.where(~some, "other processes busy while measured in "
                              + left.astype(str) + " of " + table["n_rounds"].astype(
                                  "Int64").astype(str) + " rounds (those left out of claims); ")
        reasons = reasons.where(~(table["noisy"] == 1), reasons + text)
    if "stolen" in table:
        reasons = reasons.where(~(table["stolen"] == 1),
                                reasons + "hypervisor steal time above the limit; ")
    if "cache_reached" in table:
        reasons = reasons.where(~(table["cache_reached"] == 0),
                                reasons + "cache state not reached; ")
    flagged = table[reasons != ""].copy()
    flagged["flag"] = reasons[reasons != ""].str.rstrip("; ")
    return flagged


def precision(table: pd.DataFrame) -> dict[str, Any]:
    """How precise an experiment's points came out, and what that cost.

    Points with an interval, those at most 3 % wide (half-width over rate),
    and where measured adaptively, how many met their target and how many the
    cap stopped first.
    """
    with_ci = table["ci_rel"].notna() if "ci_rel" in table else pd.Series(False, table.index)
    adaptive = table["converged"].notna() if "converged" in table else with_ci & False
    converged = table["converged"].astype("boolean") if "converged" in table else None
    seconds = table.get("measure_seconds")
    return {
        "points": len(table),
        "with_interval": int(with_ci.sum()),
        "within_3pct": int((table.loc[with_ci, "ci_rel"] <= 0.03).sum()) if with_ci.any() else 0,
        "median_ci_rel": float(table.loc[with_ci, "ci_rel"].median()) if with_ci.any()
        else float("nan"),
        "adaptive": int(adaptive.sum()),
        "converged": int(converged[adaptive].sum()) if converged is not None else 0,
        "unconverged": int((~converged[adaptive]).sum()) if converged is not None else 0,
        "seconds": float(seconds.sum()) if seconds is not None else float("nan"),
    }


def unconverged(table: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """The adaptively measured points whose interval missed its target, and why they stopped."""
    if "converged" not in table:
        return table.iloc[0:0]
    rows = table[table["converged"].notna() & ~table["converged"].astype("boolean")]
    return rows[[c for c in ["runtime", *axes, "n_processes", "ci_rel", "measure_seconds",
                             "stop"] if c in rows]]


def uncounted_points(table: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """Points chosen for counting whose pass could not run (perf missing, forbidden, failed)."""
    if "counters" not in table:
        return pd.DataFrame()
    status = table["counters"].fillna(counters.NOT_COUNTED).astype(str)
    rows = table[(status != counters.OK) & ~status.str.startswith("not counted")]
    return rows[["runtime", *[a for a in axes if a in rows], "counters"]]


def precision_frame(sections: list[dict[str, Any]]) -> pd.DataFrame:
    """One line per experiment of :func:`precision`."""
    rows = [{"experiment": sec["name"], **sec["precision"]} for sec in sections]
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["median_ci_rel"] = frame["median_ci_rel"].map(
            lambda v: f"{v:.1%}" if pd.notna(v) else "")
        frame["seconds"] = frame["seconds"].round(0)
    return frame


def seed_comparison(seed_rows: list[dict], table: pd.DataFrame,
                    axes: tuple[str, ...]) -> pd.DataFrame:
    """Each seed row beside the best matching row of this machine, by runtime.

    A seed row's ``<runtime>_variant`` (e.g. ``erlang_variant: erlang_read``)
    names the variant that runtime's rows carry, where it differs from the
    seed row's own ``variant``.
    """
    out = []
    for seed in seed_rows:
        keys = [k for k in axes if k in seed and k in table]
        row = {**{k: seed[k] for k in keys}, "seed_runtime": seed.get("runtime", ""),
               "seed_rate": seed["rate"]}
        for runtime in ("python", "native", "erlang"):
            wanted = {**seed, "variant": seed.get(f"{runtime}_variant", seed.get("variant"))}
            match = table
            for key in keys:
                match = match[match[key] == wanted[key]]
            found = match[match["runtime"] == runtime]
            rate = float(found["rate"].max()) if not found.empty else float("nan")
            row[f"{runtime}_rate"] = rate
        here = row.get(f"{seed.get('runtime', '')}_rate", float("nan"))
        if pd.isna(here):
            here = row["python_rate"]
        row["here_over_seed"] = here / seed["rate"] if pd.notna(here) else float("nan")
        out.append(row)
    frame = pd.DataFrame(out)
    return frame.dropna(axis=1, how="all")


def extra_tables(analysis: Any, table: pd.DataFrame, plot_dir: Path,
                 axes: tuple[str, ...]) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, note, frame) of the tables besides the main one: the scaling fits the plots
    job wrote (``scaling.csv``), then whatever the analysis module's ``tables()`` gives."""
    from perfgrid.analysis import scaling

    out = []
    fitted = plot_dir / "scaling.csv"
    if fitted.exists():
        out.append(("Scaling with workers: Amdahl and USL fits",
                    "Fitted only over the worker counts up to the CPUs the run's jobs could "
                    "use (CPU limit: the CPUs of their binding plans); the counts above it "
                    "are in the figure, hollow, not fitted, and a group left with too few "
                    "counts says so. Parameters with 95 % bootstrap intervals (refits to the "
                    "rows' bootstrap replicates); efficiency: rate at the largest fitted "
                    "worker count over the smallest one's scaled linearly; better model by "
                    "AICc where both models keep two degrees of freedom.",
                    scaling.summary(pd.read_csv(fitted), axes)))
    if hasattr(analysis, "tables"):
        out += analysis.tables(table)
    return out


CLAIM_COLUMNS = ["experiment", "hypothesis", "criterion", "measured", "verdict", "runtime",
                 "reason", "basis", "why"]
#: the columns of ``claims.csv``: every field of :class:`Claim`, in its order
CLAIM_FIELDS = [f.name for f in dataclasses.fields(Claim)]
#: columns a ``claims.csv`` of an older perfgrid may lack (read as empty)
OPTIONAL_CLAIM_FIELDS = ("basis",)


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
    numbers = ("value", "ci_low", "ci_high", "threshold")
    claims = []
    for number, row in enumerate(rows, 2):
        try:
            fields = {k: (float(row[k]) if row[k] else float("nan")) if k in numbers
                      else row.get(k) or "" for k in CLAIM_FIELDS}
            claims.append(Claim(**fields))
        except ValueError as err:
            raise ValueError(f"{path} line {number}: {err}") from None
    return claims


def build(root: Path, experiment_names: list[str], cv_threshold: float) -> dict[str, Any]:
    """Everything the report shows, as data (tables, claims, figure paths)."""
    layout = Layout(root)
    machine = json.loads(layout.machine.read_text())
    skipped = json.loads(layout.skipped.read_text()) if layout.skipped.exists() else []
    sections = []
    all_claims: list[Claim] = []
    for name in experiment_names:
        analysis = module(name)
        axes = experiments.get(name).axes
        table = with_human_rates(read_table(layout.table(name), axes))
        shown = ["runtime", *axes, *STATS, *getattr(analysis, "EXTRA_COLUMNS", [])]
        seed_rows = getattr(analysis, "SEED_ROWS", [])
        claims = claims_of(name, table)
        all_claims += claims
        grid = {axis: sorted(table[axis].dropna().unique().tolist(), key=str)
                for axis in axes if axis in table and table[axis].notna().any()}
        sections.append({
            "name": name,
            "doc": (analysis.__doc__ or "").strip(),
            "table": table,
            "shown": table[[c for c in dict.fromkeys(shown) if c in table]],
            "axes": list(axes),
            "grid": grid,
            "claims": claims,
            "seed": seed_comparison(seed_rows, table, axes),
            "seed_source": sorted({r.get("source", "") for r in seed_rows}),
            "notes": analysis.notes(table) if hasattr(analysis, "notes") else [],
            "flags": flags(table, cv_threshold),
            "precision": precision(table),
            "unconverged": unconverged(table, list(axes)),
            "figures": sorted(layout.plot_dir(name).glob("*.png")),
            "skipped": [s for s in skipped if s["experiment"] == name],
            "tables": extra_tables(analysis, table, layout.plot_dir(name), axes),
        })
    return {"machine": machine, "sections": sections, "claims": _claims_frame(all_claims),
            "precision": precision_frame(sections),
            "claim_list": all_claims, "git": gitinfo.facts(), "host": root.name,
            "cv_threshold": cv_threshold,
            "provenance": provenance(layout, sections)}


def provenance(layout: Layout, sections: list[dict[str, Any]]) -> dict[str, Any]:
    """How this result set came to be: command, times, config as used."""
    run = json.loads(layout.run_record.read_text()) if layout.run_record.exists() else {}
    walls = {}
    first, last = float("inf"), 0.0
    for sec in sections:
        table = sec["table"]
        if {"started", "finished"} <= set(table.columns) and len(table):
            spans = (table["job_seconds"] if "job_seconds" in table
                     else table["finished"] - table["started"])
            walls[sec["name"]] = float(spans.sum())
            first = min(first, float(table["started"].min()))
            last = max(last, float(table["finished"].max()))
    stamp = "%Y-%m-%d %H:%M:%S UTC"
    return {
        "command": " ".join(run.get("argv", [])) or "unknown",
        "snakemake": run.get("snakemake", "unknown"),
        "run_started": time.strftime(stamp, time.gmtime(run["started"])) if run else "unknown",
        "first_measurement": time.strftime(stamp, time.gmtime(first)) if walls else "n/a",
        "last_measurement": time.strftime(stamp, time.gmtime(last)) if walls else "n/a",
        "report_written": time.strftime(stamp, time.gmtime()),
        "benchmark_seconds": {k: round(v, 1) for k, v in walls.items()},
        "benchmark_seconds_total": round(sum(walls.values()), 1),
        "job_order": (f"shuffled, seed {run['order']['seed']}" if run.get("order", {}).get(
            "shuffle") else "sorted (grid order)") if run.get("order") else "unknown",
        "config": layout.used_config.read_text() if layout.used_config.exists() else "",
    }


def topology_table(machine: dict[str, Any]) -> tuple[str, pd.DataFrame]:
    """A sentence on the CPUs this run could use, and one row per package, NUMA node and
    L3 group: its CPUs, cores, threads per core and the CPUs of it the run was allowed."""
    topo, limit = machine.get("topology"), machine.get("restriction") or {}
    if not isinstance(topo, dict):  # machine.json of an older perfgrid
        return "", pd.DataFrame()
    groups: dict[tuple, list[dict]] = {}
    for c in topo["cpus"]:
        groups.setdefault((c["package"], c["node"], c["l3"]), []).append(c)
    allowed = set(topo["allowed"])
    rows = [{"package": package, "NUMA node": node,
             "L3 group (CPUs)": format_cpu_list(c["cpu"] for c in cpus),
             "cores": len({(c["die"], c["core_id"]) for c in cpus}),
             "threads per core": max(len(parse_cpu_list(c["siblings"])) for c in cpus),
             "allowed CPUs": format_cpu_list(c["cpu"] for c in cpus if c["cpu"] in allowed)
             or "none"}
            for (package, node, _), cpus in sorted(groups.items(), key=lambda g: (
                g[0][0], g[0][1], min(c["cpu"] for c in g[1])))]
    text = (f"{topo['packages']} package(s), {topo['cores']} cores, {topo['threads_per_core']} "
            f"thread(s) per core, {len(topo['l3_groups'])} L3 group(s), "
            f"{len(topo['numa_nodes'])} NUMA node(s) (from {topo['source']}). ")
    if limit.get("restricted"):
        text += (f"This run was restricted to {limit['allowed']} of {limit['online']} online "
                 f"CPUs ({limit['allowed_list']}) by {', '.join(limit['by'])}: auto worker "
                 f"counts and binding plans use only these.")
    else:
        text += f"This run could use every online CPU ({len(topo['online'])})."
    auto = machine.get("auto_workers")
    if isinstance(auto, dict):
        set_by = f", set by {auto['set_by']}" if auto.get("set_by") else ""
        text += (f" workers: auto stood for {', '.join(map(str, auto['counts']))} (built for "
                 f"{auto['cpus']} CPU(s){set_by}; a ring's from 2).")
    return text, pd.DataFrame(rows)


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _num(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def noise_table(profile: dict[str, Any] | None) -> tuple[str, pd.DataFrame]:
    """A sentence on the noise profile (perfgrid.noiseprofile) and one row per pair, each
    cell ``A / B`` where it is per side; without a profile, why there is none."""
    if profile is None:
        return ("Not measured (noise.profile.blocks: 0).", pd.DataFrame())
    text = (f"Before the benchmarks, {profile['blocks']} blocks each measured both points "
            f"of each pair back to back in a random order, each in a fresh process of "
            f"{profile['values']} values after {profile['warmups']} warm-up(s) "
            f"({profile['seconds']:.0f} s in all; noise.json has every figure). {NOISE_TEXT}")
    rows = []
    for name, pair in profile["pairs"].items():
        if "a_stats" not in pair:
            rows.append({"pair": name, "A / B": f"{pair['a']} / {pair['b']}",
                         "note": pair.get("error", "")})
            continue
        a, b = pair["a_stats"], pair["b_stats"]
        rows.append({
            "pair": name, "A / B": f"{pair['a']} / {pair['b']}",
            "within-process CV": f"{_pct(a['within_cv'])} / {_pct(b['within_cv'])}",
            "between-process CV": f"{_pct(a['between_cv'])} / {_pct(b['between_cv'])}",
            "s per process": f"{a['process_seconds']:.2f} / {b['process_seconds']:.2f}",
            "KJ values per process": (f"{_num(a['optimal_values'], '.1f')} / "
                                      f"{_num(b['optimal_values'], '.1f')}"),
            "log-ratio SD paired / unpaired": (f"{_pct(pair['paired_sd'])} / "
                                               f"{_pct(pair['unpaired_sd'])}"),
            "correlation": _num(pair["correlation"], ".2f"),
            "blocks for +/-5 % paired / unpaired": (
                f"{_num(pair['blocks_needed_paired'], 'd')} / "
                f"{_num(pair['blocks_needed_unpaired'], 'd')}"),
            "note": pair.get("error", ""),
        })
    rows += [{"pair": name, "note": f"skipped: {why}"}
             for name, why in profile["skipped"].items()]
    frame = pd.DataFrame(rows).fillna("")
    if not frame["note"].astype(bool).any():
        frame = frame.drop(columns="note")
    return text, frame


NOISE_TEXT = ("Spreads are standard deviations of log rates (for a few per cent, the "
              "coefficient of variation). Between-process: of process means over blocks. "
              "Log-ratio SD paired: of each block's A-over-B log-ratio; unpaired: what a "
              "ratio of points measured apart would see. Correlation: of A and B over blocks. "
              "KJ values per process: Kalibera and Jones' optimal count, from the spreads "
              "and the cost of a value and of a process's start-up (n/a: no "
              "between-process component seen). Blocks for +/-5 %: paired blocks (or "
              "unpaired processes per side) a ratio needs for a 95 % interval of +/-5 % "
              "(t-based).")
PRECISION_TEXT = ("Precision: points with a 95 % interval, those whose half-width is at most "
                  "3 % of the rate, and, where measure.target_ci is set, the points whose "
                  "interval met the target before the cap (measure.max_seconds) stopped them.")
VERDICT_TEXT = ("A verdict is decided by the 95 % interval of the compared quantity: reproduced "
                "or not reproduced only when the whole interval lies on one side of the "
                "threshold; at the threshold when it straddles the threshold but lies wholly "
                "within 5 % of it (the truth is that close to the seed's number), inconclusive "
                "otherwise. A ratio of two points measured in the same rounds is paired round "
                "by round (ci_method \"paired over rounds\": drift both sides share cancels), "
                "and a best-of or a median over rows takes the rows' intervals at levels that "
                "hold for all of them at once (\"simultaneous bounds\"). An interval over "
                "rounds (ci_method \"hierarchical bootstrap over "
                "rounds\": jobs spread over the run, measure.claims.rounds) holds the machine's "
                "drift over the run; one over the processes of one job holds only the noise "
                "of that moment, and a second run may differ by more. Why: the kernel counters "
                "(perf stat, in an untimed pass after the timed runs) of the points a claim "
                "compares, per unit of work; where none was counted, why not when the "
                "counting pass could not run (perf missing, not permitted), else empty.")
TEMPLATES = Path(__file__).resolve().parent / "templates"

_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;font-size:.85em;margin:1em 0}td,th{border:1px solid
#ccc;padding:.2em .5em;text-align:left;vertical-align:top}th{background:#f3f3f3}img{max-width:100%}
.reproduced{background:#dfd}.not{background:#fdd}.inconclusive{background:#ffd}
.at{background:#ddf}"""


def view(data: dict[str, Any]) -> dict[str, Any]:
    """What both templates show, in the order they show it: :func:`build`'s data with the
    topology sentence, the verdict counts and each section's problem tables worked out."""
    topology_text, topology = topology_table(data["machine"])
    noise_text, noise_frame = noise_table(data.get("noise"))
    sections = []
    for sec in data["sections"]:
        problems = []
        if not sec["flags"].empty:
            problems.append(("Flagged points",
                             sec["flags"][["runtime", *sec["axes"], "cv", "flag"]]))
        if not sec["unconverged"].empty:
            problems.append(("Points that missed their interval target", sec["unconverged"]))
        if sec["skipped"]:
            problems.append(("Skipped points", pd.DataFrame(sec["skipped"])))
        uncounted = uncounted_points(sec["table"], sec["axes"])
        if not uncounted.empty:
            problems.append(("Points whose counting pass did not run", uncounted))
        sections.append({**sec, "problems": problems, "tables": sec.get("tables", []),
                         "grid": [(k, ", ".join(map(str, v))) for k, v in sec["grid"].items()]})
    claims = data["claims"][CLAIM_COLUMNS]
    verdict_css = {"reproduced": "reproduced", "not reproduced": "not", "at the threshold": "at"}
    prov = data["provenance"]
    return {
        "host": data["host"], "m": data["machine"], "git": data["git"],
        "topology_text": topology_text, "topology_table": topology,
        "verdict_text": f"Verdicts: {verdict_counts(data['claims'])}. {VERDICT_TEXT}",
        "claims_figure": data.get("claims_figure"),
        "claims": claims, "claim_columns": CLAIM_COLUMNS,
        "claim_rows": [{**{k: str(v) for k, v in row.items()},
                        "css": verdict_css.get(row["verdict"], "inconclusive")}
                       for row in claims.to_dict("records")],
        "precision_text": PRECISION_TEXT, "precision": data["precision"],
        "noise_text": noise_text, "noise_table": noise_frame,
        "sections": sections,
        "provenance": [(key.replace("_", " "), prov[key]) for key in prov if key != "config"],
        "config": prov["config"],
        "machine_json": json.dumps(data["machine"], indent=2),
    }


def _html_table(frame: pd.DataFrame) -> Markup:
    if frame.empty:
        return Markup("<p><em>(no rows)</em></p>")
    return Markup(frame.to_html(index=False, escape=True, na_rep="",
                                float_format=lambda v: f"{v:.4g}"))


def _img(path: Path) -> Markup:
    data = base64.b64encode(path.read_bytes()).decode()
    return Markup('<img alt="{}" src="data:image/png;base64,{}">').format(path.stem, data)


def _environment(autoescape: bool) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=autoescape, trim_blocks=True,
        lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


def html_page(template: str, **context: Any) -> str:
    """An HTML page from ``templates/<template>``, every value escaped (autoescape on).

    The one way perfgrid writes HTML (report, compare, summary): a host folder's name
    or a table cell is text, never markup; tables go through the ``table`` filter
    (pandas ``to_html`` with escaping), images through ``img``.
    """
    page = _environment(autoescape=True)
    page.filters.update(table=_html_table, img=_img)
    return page.get_template(template).render(css=_CSS, **context)


def render(data: dict[str, Any]) -> tuple[str, str]:
    """The Markdown and the HTML report of :func:`build`'s data, from the two templates."""
    shown = view(data)
    md = _environment(autoescape=False)
    md.filters["table"] = md_table
    return md.get_template("report.md.j2").render(shown), html_page("report.html.j2", **shown)


def main(root: Path, experiment_names: list[str], html_path: str, md_path: str,
         cv_threshold: float, testfile_facts: str = "", noise_profile: str = "none",
         git: dict[str, str] | None = None, notes: dict[str, str] | None = None) -> None:
    """Write the report; ``git`` (the run's commit, where not this checkout's) and
    ``notes`` (more provenance lines) serve a report rendered from an archive."""
    data = build(root, experiment_names, cv_threshold)
    if git is not None:
        data["git"] = git
    data["provenance"].update(notes or {})
    if noise_profile not in ("", "none"):  # the run's own profile: missing is an error
        data["noise"] = json.loads(Path(noise_profile).read_text())
    data["claims_figure"] = claims_figure(data["claim_list"], Layout(root).claims_figure)
    if testfile_facts not in ("", "none") and Path(testfile_facts).exists():
        facts = json.loads(Path(testfile_facts).read_text())
        data["provenance"]["test_file"] = (
            f"{facts['size']:,} bytes, seed {facts['seed']}, sha256 {facts['sha256']}, "
            f"generated at {facts['bytes_per_s'] / 1e9:.2f} GB/s")
    md, page = render(data)
    write_claims(data["claims"], Layout(root).claims_table)
    write_text(md_path, md)
    write_text(html_path, page)
    print(f"report: {len(data['claims'])} claims over {len(experiment_names)} experiments")
