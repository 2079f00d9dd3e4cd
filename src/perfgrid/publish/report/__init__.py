"""The final report: this machine's figures beside the seeds', claim by claim.

Writes one self-contained HTML file (images embedded as data URIs, no
external requests) and a Markdown twin. Every verdict is computed from the
tables by the experiment's analysis module; nothing here is hard-coded.
This module gathers the report's data (:func:`build`) and writes it
(:func:`main`); the modules beside it hold its parts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from perfgrid import experiments
from perfgrid.analyse.aggregate import read_table
from perfgrid.analyse.analysis import Claim, claims_of, hook, module
from perfgrid.design import model
from perfgrid.experiments.base import Experiment
from perfgrid.kit import formats
from perfgrid.kit.atomic import write_text
from perfgrid.kit.paths import Layout
from perfgrid.measure import fixtures
from perfgrid.publish import gitinfo
from perfgrid.publish.report.claims import _claims_frame, write_claims
from perfgrid.publish.report.figure import claims_figure
from perfgrid.publish.report.formatting import with_human_rates
from perfgrid.publish.report.pages import render
from perfgrid.publish.report.quality import flags, precision, precision_frame, unconverged
from perfgrid.publish.report.run_facts import provenance
from perfgrid.publish.report.seeds import seed_comparison

#: statistics shown after the axes in each experiment's table
STATS = ["n_processes", "n_values", "cv", "rate (95 % interval)", "ci_rel", "converged",
         "ratio_to_native"]


def extra_tables(analysis: Any, table: pd.DataFrame, plot_dir: Path,
                 experiment: Experiment) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, note, frame) of the tables besides the main one: the scaling fits the plots
    job wrote (``scaling.csv``), then whatever the analysis module's ``tables()`` gives."""
    from perfgrid.analyse import scaling

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


def let_go(layout: Layout, experiment: str) -> int:
    """How many of the experiment's point rounds a format-1 run let go (a look or its time
    budget left a note where the result would be: perfgrid.kit.formats.not_measured);
    0 for a result set of a later format, which measures every round of its plan, without
    looking at its files."""
    if not formats.may_hold_notes(layout.run_record):
        return 0
    return sum(formats.not_measured(path) is not None
               for path in layout.raw_dir(experiment).rglob("round=*.json"))


def over_budget(layout: Layout, sections: list[dict[str, Any]]) -> dict[str, float] | None:
    """The run's length and its time budget where its benchmarks ended later than
    ``budget.minutes`` (plan.json) after it started (run.json), else None. A resumed run
    counts from its own start."""
    if not (layout.plan.exists() and layout.run_record.exists()):
        return None
    minutes = model.read(layout.plan).get("budget", {}).get("minutes")
    started = json.loads(layout.run_record.read_text()).get("started")
    ends = [float(sec["table"]["finished"].max()) for sec in sections
            if "finished" in sec["table"] and sec["table"]["finished"].notna().any()]
    if minutes is None or started is None or not ends:
        return None
    last = max(ends)
    took = (last - started) / 60
    return {"minutes": took, "budget": minutes} if took > minutes else None


def build(root: Path, experiment_names: list[str], cv_threshold: float) -> dict[str, Any]:
    """Everything the report shows, as data (tables, claims, figure paths)."""
    from perfgrid.analyse import betweenrun

    with betweenrun.judging(betweenrun.run_of(root)):
        return _build(root, experiment_names, cv_threshold)


def _build(root: Path, experiment_names: list[str], cv_threshold: float) -> dict[str, Any]:
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
            "notes": hook(analysis, "notes")(table, experiment),
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
            "cut": sum(let_go(layout, name) for name in experiment_names),
            "over_budget": over_budget(layout, sections),
            "cv_threshold": cv_threshold, "provenance": provenance(layout, sections)}


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
