"""config/quick.yaml as shipped, end to end: the run a user starts first (the ``quick``
fixture, tests/conftest.py), its claims table, counter columns and compiled programs. The
user commands on its real output are tests/test_quick_commands.py's."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from perfgrid import experiments
from perfgrid.analyse import ledger
from perfgrid.analyse.stats import LEFT_OUT
from perfgrid.design import jobs
from perfgrid.kit.paths import Layout
from perfgrid.measure import counters
from perfgrid.publish.report.claims import read_claims

from helpers import SNAKEMAKE
from verdicts import judged, problems

#: serial: the shipped config waits for a quiet machine and flags a busy point (its
#: noise.busy_share), so a test running beside it would change the claims judged here
pytestmark = [pytest.mark.pipeline, pytest.mark.snakemake, pytest.mark.serial]

QUICK = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "quick.yaml")
                       .read_text())
HOST = QUICK["host"]
#: what a user types: ``perfgrid ...`` is this interpreter's perfgrid.pipeline.cli
PERFGRID = [sys.executable, "-m", "perfgrid.pipeline.cli"]


def perfgrid(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """A user command in ``cwd``, asserting exit 0."""
    done = subprocess.run([*PERFGRID, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"perfgrid {' '.join(args)}: rc {done.returncode}\n" + (
        done.stdout + done.stderr)[-4000:]
    return done


def layout(root: Path) -> Layout:
    return Layout(root / "results" / HOST)


@pytest.fixture(scope="module")
def summary(quick: Path) -> dict[str, dict[str, str]]:
    """``snakemake --summary`` of the run, by output file: the rule that wrote it, its
    status and what a rerun would do (Snakemake's own account, not its private records)."""
    done = subprocess.run([*SNAKEMAKE, "--configfile", "config/quick.yaml", "--summary"],
                          cwd=quick, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return {row["output_file"]: row for row in csv.DictReader(
        done.stdout.splitlines(), delimiter="\t")}


def rule_that_wrote(summary: dict[str, dict[str, str]], root: Path, output: Path) -> str:
    """The rule Snakemake says wrote ``output``."""
    name = output.relative_to(root).as_posix()
    assert name in summary, f"Snakemake knows no output {name}"
    return summary[name]["rule"]


# -- the run ----------------------------------------------------------------------------
def test_every_claim_has_its_ledger_rule_and_the_verdict_its_intervals_give(quick: Path):
    """Each claims.csv row judged again apart from production (tests/verdicts.py): its
    rule (op, threshold, margin, kind) is its ledger entry's, and its verdict the one its
    own interval, equivalence interval, threshold and margin give by the decision rule."""
    path = layout(quick).claims_table
    assert problems(path) == []
    claims = read_claims(path)
    made = {(c.experiment, c.hypothesis) for c in claims}
    for name in experiments.available():
        expected = {(name, hypothesis) for hypothesis in ledger.entries(name)}
        assert expected, f"{name} has no claims ledger"
        assert expected <= made, f"{name}: no row for {sorted(expected - made)}"
    for c in claims:  # an undecided claim says why; a judged one what it rests on
        what = f"{c.experiment} [{c.runtime}] {c.hypothesis}"
        assert c.op, f"{what}: no rule"
        assert c.reason.strip() or c.verdict != "inconclusive", what
        assert c.basis.strip() or not judged(c), what
    # quick.yaml holds the points of at least one claim of each experiment: judged, or
    # (a noisy host: other processes or steal time past quick's noise limits) its points
    # measured and left out of claims as busy, which the claim says
    unjudged = set(experiments.available()) - {c.experiment for c in claims if judged(c)}
    reasons = {name: [f"[{c.runtime}] {c.hypothesis[:50]}: {c.reason}" for c in claims
                      if c.experiment == name] for name in sorted(unjudged)}
    assert all(any(LEFT_OUT in c.reason for c in claims if c.experiment == name)
               for name in unjudged), reasons


def rows_of(path: Path) -> tuple[list[str], list[dict]]:
    """(the columns, the rows as dicts of text) of a claims.csv."""
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def altered(source: Path, folder: Path, change) -> Path:
    """A copy of claims.csv ``source`` in ``folder`` with ``change(rows)`` applied to its
    rows (dicts of text, as csv reads them)."""
    fields, rows = rows_of(source)
    change(rows)
    out = folder / "claims.csv"
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return out


def first_judged(rows: list[dict]) -> dict:
    """The first row with a rule and a finite interval."""
    return next(r for r in rows if r["op"] not in ("", "all") and r["ci_low"] and r["ci_high"]
                and float(r["ci_low"]) > -1e300 and float(r["ci_high"]) < 1e300)


def test_the_verdict_check_refuses_a_flipped_verdict_or_a_moved_threshold(quick: Path,
                                                                         tmp_path: Path):
    """The check above on copies of the run's claims.csv: one verdict flipped (each other
    verdict in turn), one threshold moved by 10 %; each is named."""
    source = layout(quick).claims_table
    shutil.copy(source, tmp_path / "same.csv")
    assert problems(tmp_path / "same.csv") == []
    row = first_judged(rows_of(source)[1])
    for other in ("reproduced", "not reproduced", "at the threshold", "inconclusive"):
        if other == row["verdict"]:
            continue
        folder = tmp_path / other.replace(" ", "-")
        folder.mkdir()

        def flip(rows, other=other):
            first_judged(rows)["verdict"] = other

        found = problems(altered(source, folder, flip))
        assert len(found) == 1 and f"{other!r}, but" in found[0], found

    def move(rows):
        first_judged(rows)["threshold"] = repr(float(first_judged(rows)["threshold"]) * 1.1)

    (tmp_path / "moved").mkdir()
    found = problems(altered(source, tmp_path / "moved", move))
    assert len(found) == 1 and "the ledger states" in found[0], found


def test_every_table_has_the_counter_columns_and_each_row_says_what_was_counted(quick: Path):
    """config.yaml's ``measure.counters: claims``, which quick.yaml keeps: every point the
    experiment chooses for counting (its claim points, or the ``counter_points`` it names
    instead) gets a counting pass, with its counts or perf's reason; the others say they
    were not counted. Where perf can count here (counters.unavailable), every experiment
    has counted points; where not, each pass says why, in perf's words."""
    why_not = counters.unavailable()
    tried = 0
    for name in experiments.available():
        experiment = experiments.get(name)
        table = pd.read_csv(layout(quick).table(name))
        assert len(table), f"{name}: an empty table"
        missing = [c for c in counters.COLUMNS if c not in table]
        assert not missing, f"{name}: no column(s) {missing}"
        status = table["counters"]
        assert status.notna().all() and (status.astype(str).str.strip() != "").all(), name
        ok = table[status == counters.OK]
        assert ok["task_clock_ns_per_unit"].gt(0).all(), name  # counted: its counts
        assert ok["counters_scope"].notna().all() and ok["counters_units"].notna().all()
        chosen = table.apply(lambda row, e=experiment: e.counted_by_default(
            {a: row[a] for a in e.axes}), axis=1).astype(bool)
        not_tried = table.loc[chosen & (status == counters.NOT_COUNTED), list(experiment.axes)]
        assert not_tried.empty, f"{name}: points chosen for counting not counted:\n{not_tried}"
        # and only those: a point not chosen is not counted
        assert (status[~chosen] == counters.NOT_COUNTED).all(), name
        tried_here = status[status != counters.NOT_COUNTED]
        if why_not is not None:  # each pass says why, in counters.unavailable's words
            assert (tried_here == " ".join(why_not.split())[:400]).all(), (
                f"{name}: {sorted(set(tried_here))}")
        elif len(tried_here):  # perf counts here: a pass may fail (saying why), not all
            assert (tried_here == counters.OK).any(), f"{name}: no pass counted: " + "; ".join(
                sorted(set(tried_here)))
        tried += len(tried_here)
    assert tried, "no counting pass at any point of the quick run"


def test_the_c_programs_and_erlang_modules_were_compiled_by_their_rules(quick: Path, summary):
    where = layout(quick)
    for program in jobs.native_sources():
        binary = where.native_binary(program)
        assert binary.is_file() and binary.stat().st_mode & 0o111, binary
        assert rule_that_wrote(summary, quick, binary) == "native_program"
        assert where.log(program, "build.log").is_file()
    for module in jobs.erlang_sources():
        beam = where.erlang_beams / f"{module}.beam"
        assert beam.is_file() and beam.stat().st_size, beam
        assert rule_that_wrote(summary, quick, beam) == "erlang_beam"
        assert where.log("erlang", f"{module}.log").is_file()


def test_the_finished_run_is_complete_and_up_to_date(summary):
    """Every output Snakemake knows is there (or, a temp() file, removed once used) and
    would not be made again."""
    assert summary
    stale = {name: (row["status"], row["plan"]) for name, row in summary.items()
             if row["status"] not in ("ok", "removed temp file") or row["plan"] != "no update"}
    assert stale == {}
    assert sum(row["status"] == "ok" for row in summary.values()) > len(summary) / 2


def test_the_tables_plots_and_report_were_made_after_the_last_measurement(quick: Path):
    """They measure nothing (perfgrid.pipeline.glue.after_benchmarks): they wait for the
    last benchmark job, then run side by side, rather than each alone between two."""
    where = layout(quick)
    measured = max(p.stat().st_mtime for p in (where.root / "raw").rglob("*.json"))
    made = [where.report_html, *(where.table(name) for name in experiments.available())]
    made += [png for name in experiments.available()
             for png in where.plot_dir(name).glob("*.png")]
    assert len(made) > 1 + 2 * len(experiments.available())  # a figure of each, at least
    early = sorted(str(p.relative_to(where.root)) for p in made
                   if p.stat().st_mtime < measured)
    assert early == []


def test_spawn_ran_through_snakemake_for_every_primitive(quick: Path, summary):
    table = pd.read_csv(layout(quick).table("spawn"))
    skipped = {p["variant"] for p in json.loads(layout(quick).skipped.read_text())
               if p["experiment"] == "spawn"}
    assert set(table["variant"]) | skipped == set(QUICK["spawn"]["primitives"])
    assert table["rate"].gt(0).all()
    for result in map(Path, table["result_file"]):  # each written by a Snakemake job
        files = sorted((quick / result).glob("round=*.json")) or [quick / result]
        for path in files:
            assert rule_that_wrote(summary, quick, path).startswith("spawn"), path
