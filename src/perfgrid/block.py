"""One claim block: one round of the points an experiment's claims compare, measured back
to back by one Snakemake job (rules/benchmark.smk).

    python -m perfgrid.block BLOCK_PLAN
    python -m perfgrid.block --plan results/<host>/plan.json BLOCK

``BLOCK_PLAN`` is JSON, the block's part of the run's plan (perfgrid.plan,
``Plan.block_plan``; rules/benchmark.smk passes it), or it is taken from plan.json by the
block's name (:func:`from_plan`, to run a block by hand): the experiment, its round, the
record of the look the round waits for (or null), the run's time budget, and the points
in the order perfgrid.order drew, each with its key, the harness's arguments, its result
and its log.

Each point is measured by the harness (perfgrid.bench) in its own process, exactly as a
job of its own would be, its output in its own log; the block adds no scheduling between
them, so a claim's sides are seconds apart. Where the round waits for a look
(perfgrid.looks) that let a point go, the point gets the note that it was not measured
instead, and no process is started for it. So does every point of a block of a round
after ``budget.keep_rounds`` that would start when the run's time budget is spent
(``budget.minutes`` after Snakemake started, run.json's ``started``): the looks decide
which later rounds a claim needs, the budget whether the run still has time for them.
The first point that fails ends the block (Snakemake then removes its results, and a
rerun measures the block again).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perfgrid import lifetime, looks


def let_go(point: dict[str, Any], look: str, record: dict[str, Any]) -> None:
    """Write the note that ``point`` was not measured this round, and why: ``look`` is the
    record of the look that let it go, or ``looks.BUDGET``."""
    if not record.get("stop"):
        record = {**record, "why": (
            f"after {record.get('blocks')} rounds every claim comparing this point was "
            f"decided, or could not be decided by round {record.get('cap')}")}
    looks.write_not_measured(point["result"], look, record)
    print(f"perfgrid: {point['key']}: not measured: {record.get('why', '')}", flush=True)


def budget_end(started: float, budget: dict[str, Any]) -> float | None:
    """When rounds after ``keep_rounds`` stop starting: ``budget.minutes`` after the run
    started (seconds since the epoch, as ``started``); None without a budget."""
    return None if budget["minutes"] is None else started + 60 * budget["minutes"]


def past_budget(budget: dict[str, Any] | None, round_: int) -> dict[str, Any] | None:
    """The note's record when a block of ``round_`` starts past the run's time budget
    (``budget``: the plan's ``minutes``, ``keep_rounds`` and ``run_record``), else None.
    A round up to ``keep_rounds`` is always measured, so every claim keeps its interval."""
    if budget is None or budget["minutes"] is None or round_ <= budget["keep_rounds"]:
        return None
    try:
        started = float(json.loads(Path(budget["run_record"]).read_text())["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no record of the run's start (a block run by hand): no budget
    now = time.time()
    if now <= budget_end(started, budget):
        return None
    minutes = (now - started) / 60
    return {"stop": True, "blocks": round_ - 1, "why": (
        f"the run's time budget was spent: round {round_} would start {minutes:.0f} min "
        f"after the run did, past budget.minutes ({budget['minutes']:g}); rounds up to "
        f"{budget['keep_rounds']} are measured whatever the time")}


def measure(experiment: str, point: dict[str, Any]) -> int:
    """Run the harness for one point, its output to the point's log; its exit status."""
    Path(point["log"]).parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "perfgrid.bench", experiment, *point["args"],
           "--result", point["result"]]
    with open(point["log"], "w") as log:
        return subprocess.run(lifetime.command(cmd), stdout=log, stderr=subprocess.STDOUT,
                              check=False).returncode


def from_plan(plan: dict[str, Any], name: str) -> dict[str, Any]:
    """Block ``name``'s plan, taken from the run's ``plan`` (plan.json, perfgrid.plan):
    its points in the order they run, each with the harness's command words."""
    members = plan["blocks"][name]
    by_result = {job["result"]: job for job in plan["jobs"] if job["rule"] == name}
    points = [{"key": job["key"], "args": [*job["bench"], *job["options"]],
               "result": job["result"], "log": job["log"]}
              for job in (by_result[result] for result in members["results"])]
    return {"experiment": members["experiment"], "round": members["round"],
            "look": members["look"], "budget": plan["budget"], "points": points}


def run(plan: dict[str, Any]) -> None:
    """Measure every point of ``plan`` in its order (those its look lets go, or all of them
    past the run's time budget: a note)."""
    points = plan["points"]
    spent = past_budget(plan.get("budget"), plan.get("round", 1))
    if spent is not None:
        for point in points:
            let_go(point, looks.BUDGET, spent)
        return
    look = plan.get("look")
    record = looks.read(look) if look else None
    for index, point in enumerate(points, 1):
        if record is not None and not looks.measures(record, point["key"]):
            let_go(point, look, record)
            continue
        began = time.monotonic()
        status = measure(plan["experiment"], point)
        if status != 0:
            raise SystemExit(f"perfgrid: {point['key']}: the harness failed (exit status "
                             f"{status}); its log: {point['log']}")
        print(f"perfgrid: {index}/{len(points)} {point['key']} "
              f"({time.monotonic() - began:.1f} s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perfgrid.block", description=__doc__)
    parser.add_argument("block", help="the block's name (with --plan), or its plan as JSON")
    parser.add_argument("--plan", help="the run's plan (plan.json)")
    args = parser.parse_args(argv)
    lifetime.watch_snakemake()
    if args.plan:
        run(from_plan(json.loads(Path(args.plan).read_text()), args.block))
    else:
        run(json.loads(args.block))


if __name__ == "__main__":
    main()
