"""One claim block: one round of the points an experiment's claims compare, measured back
to back by one Snakemake job (rules/benchmark.smk).

    python -m perfgrid.measure.block BLOCK_PLAN
    python -m perfgrid.measure.block --plan results/<host>/plan.json BLOCK

``BLOCK_PLAN`` is JSON, the block's part of the run's plan (perfgrid.design.plan,
``Plan.block_plan``; rules/benchmark.smk passes it), or it is taken from plan.json by the
block's name (:func:`from_plan`, to run a block by hand): the experiment, its round, and
the points in the order perfgrid.design.order drew, each with its key, the harness's arguments,
its result and its log.

Each point is measured by the harness (perfgrid.measure.bench) in its own process, exactly as a
job of its own would be, its output in its own log; the block adds no scheduling between
them, so a claim's sides are seconds apart. Every point is measured, whatever the time:
the design is the same every run. The first point that fails ends the block (Snakemake
then removes its results, and a rerun measures the block again).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perfgrid.kit import lifetime


def measure(experiment: str, point: dict[str, Any]) -> int:
    """Run the harness for one point, its output to the point's log; its exit status."""
    Path(point["log"]).parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "perfgrid.measure.bench", experiment, *point["args"],
           "--result", point["result"]]
    with open(point["log"], "w") as log:
        return subprocess.run(lifetime.command(cmd), stdout=log, stderr=subprocess.STDOUT,
                              check=False).returncode


def from_plan(plan: dict[str, Any], name: str) -> dict[str, Any]:
    """Block ``name``'s plan, taken from the run's ``plan`` (plan.json, perfgrid.design.plan):
    its points in the order they run, each with the harness's command words."""
    members = plan["blocks"][name]
    by_result = {job["result"]: job for job in plan["jobs"] if job["rule"] == name}
    points = [{"key": job["key"], "args": [*job["bench"], *job["options"]],
               "result": job["result"], "log": job["log"]}
              for job in (by_result[result] for result in members["results"])]
    return {"experiment": members["experiment"], "round": members["round"], "points": points}


def run(plan: dict[str, Any]) -> None:
    """Measure every point of ``plan`` in its order."""
    points = plan["points"]
    for index, point in enumerate(points, 1):
        began = time.monotonic()
        status = measure(plan["experiment"], point)
        if status != 0:
            raise SystemExit(f"perfgrid: {point['key']}: the harness failed (exit status "
                             f"{status}); its log: {point['log']}")
        print(f"perfgrid: {index}/{len(points)} {point['key']} "
              f"({time.monotonic() - began:.1f} s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perfgrid.measure.block", description=__doc__)
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
