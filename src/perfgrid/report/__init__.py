"""The final report: this machine's figures beside the seeds', claim by claim.

Writes one self-contained HTML file (images embedded as data URIs, no
external requests) and a Markdown twin. Every verdict is computed from the
tables by the experiment's analysis module; nothing here is hard-coded.
This module gathers the report's data (:func:`build`) and writes it
(:func:`main`); the modules beside it hold its parts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from perfgrid import experiments, fixtures, gitinfo, looks
from perfgrid.aggregate import read_table
from perfgrid.analysis import Claim, claims_of, hook, module
from perfgrid.atomic import write_text
from perfgrid.experiments.base import Experiment
from perfgrid.paths import Layout
from perfgrid.report.claims import _claims_frame, write_claims
from perfgrid.report.figure import claims_figure
from perfgrid.report.formatting import with_human_rates
from perfgrid.report.pages import render
from perfgrid.report.quality import flags, precision, precision_frame, unconverged
from perfgrid.report.run_facts import provenance
from perfgrid.report.seeds import seed_comparison

#: statistics shown after the axes in each experiment's table
STATS = ["n_processes", "n_values", "cv", "rate (95 % interval)", "ci_rel", "converged",
         "ratio_to_native"]


def extra_tables(analysis: Any, table: pd.DataFrame, plot_dir: Path,
                 experiment: Experiment) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, note, frame) of the tables besides the main one: the scaling fits the plots
    job wrote (``scaling.csv``), then whatever the analysis module's ``tables()`` gives."""
    from perfgrid import scaling

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
                    scaling.summary(pd.read_csv(fitted), experiment.axes)))
    out += hook(analysis, "tables")(table, experiment)
    return out


def look_notes(layout: Layout, experiment: str) -> list[str]:
    """One line per look at the experiment's claims (perfgrid.looks), in order: what it
    found, and whether the rounds after it were measured."""
    records = [json.loads(p.read_text())
               for p in (layout.root / "looks" / experiment).glob("after-*-rounds.json")]
    lines = []
    for record in sorted(records, key=lambda r: r["blocks"]):
        fresh = record.get("stopped_at") in (None, record["blocks"])
        if record["stop"] and not fresh:
            continue  # a later look that only passed an earlier stop on
        open_points = record.get("open_points")
        if record["stop"]:
            outcome = "the later rounds were not measured"
        elif open_points is None or record.get("open_unnamed"):
            outcome = "the next rounds were measured"
        else:
            outcome = (f"the next rounds were measured at the {len(open_points)} points "
                       f"those claims compare")
        lines.append(f"Claims judged at look {record['blocks']} of {record['cap']} rounds "
                     f"({record['looks']} looks, intervals at {record['level']:.1%}): "
                     f"{record['why']}; {outcome}.")
    return lines


def _budget_cut(layout: Layout, experiment: str) -> list[dict]:
    """The notes of the experiment's point rounds the time budget let go (perfgrid.block):
    among the results of its claim blocks' jobs in the run's plan (plan.json,
    perfgrid.plan), the only jobs the budget lets go (whatever budget made the note); in a
    result set without a plan, among its round files."""
    if layout.plan.exists():
        planned = json.loads(layout.plan.read_text())
        paths = [layout.root / os.path.relpath(job["result"], planned["root"])
                 for job in planned["jobs"]
                 if job["experiment"] == experiment and job["rule"] in planned["blocks"]]
        paths = [path for path in paths if path.exists()]
    else:
        paths = list(layout.raw_dir(experiment).rglob("round=*.json"))
    return [note for note in map(looks.not_measured, paths)
            if note is not None and note.get("look") == looks.BUDGET]


def budget_notes(layout: Layout, experiment: str) -> list[str]:
    """A line if the run's time budget let later rounds of the experiment's claim points
    go (perfgrid.block): how many, and from which round on."""
    notes = _budget_cut(layout, experiment)
    if not notes:
        return []
    first = min(note["blocks"] for note in notes) + 1
    return [f"The run's time budget (budget.minutes) was spent before {len(notes)} point "
            f"rounds of its claim points, from round {first} on: they were not measured, "
            f"and its claims' intervals use the rounds before them."]


def build(root: Path, experiment_names: list[str], cv_threshold: float) -> dict[str, Any]:
    """Everything the report shows, as data (tables, claims, figure paths)."""
    layout = Layout(root)
    machine = json.loads(layout.machine.read_text())
    skipped = json.loads(layout.skipped.read_text()) if layout.skipped.exists() else []
    sections = []
    all_claims: list[Claim] = []
    for name in experiment_names:
        analysis = module(name)
        experiment = experiments.get(name)
        axes = experiment.axes
        table = with_human_rates(read_table(layout.table(name), axes))
        shown = ["runtime", *axes, *STATS, *hook(analysis, "EXTRA_COLUMNS")]
        seed_rows = hook(analysis, "SEED_ROWS")
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
            "notes": hook(analysis, "notes")(table, experiment) + look_notes(layout, name)
                     + budget_notes(layout, name),
            "flags": flags(table, cv_threshold),
            "precision": precision(table),
            "unconverged": unconverged(table, list(axes)),
            "figures": sorted(layout.plot_dir(name).glob("*.png")),
            "skipped": [s for s in skipped if s["experiment"] == name],
            "tables": extra_tables(analysis, table, layout.plot_dir(name), experiment),
        })
    return {"machine": machine, "sections": sections, "claims": _claims_frame(all_claims),
            "precision": precision_frame(sections),
            "claim_list": all_claims, "git": gitinfo.facts(), "host": root.name,
            "cut": sum(len(_budget_cut(layout, name)) for name in experiment_names),
            "cv_threshold": cv_threshold,
            "provenance": provenance(layout, sections)}


def main(root: Path, experiment_names: list[str], html_path: str, md_path: str,
         cv_threshold: float, fixture_facts: dict[str, str] | None = None,
         noise_profile: str = "none",
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
    for name, path in (fixture_facts or {}).items():  # each fixture's sidecar facts
        if path not in ("", "none") and Path(path).exists():
            fixture = fixtures.get(name)
            data["provenance"][fixture.provenance_key] = fixture.provenance(
                json.loads(Path(path).read_text()))
    md, page = render(data)
    write_claims(data["claims"], Layout(root).claims_table)
    write_text(md_path, md)
    write_text(html_path, page)
    print(f"report: {len(data['claims'])} claims over {len(experiment_names)} experiments")
