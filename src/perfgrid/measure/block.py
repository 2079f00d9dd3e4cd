"""One claim block: one round of the points an experiment's claims compare, measured back
to back by one Snakemake job (rules/benchmark.smk).

    python -m perfgrid.measure.block BLOCK_PLAN
    python -m perfgrid.measure.block --plan results/<host>/plan.json BLOCK

``BLOCK_PLAN`` is JSON, the block's part of the run's plan (perfgrid.design.plan,
``Plan.block_plan``, plan.json's data for the block and its jobs; rules/benchmark.smk
passes it), or it is taken from plan.json by the block's name (to run a block by hand),
read by perfgrid.design.model's ``Plan.from_json``: the block's jobs in the order
perfgrid.design.order drew, each with the harness's words, its result and its log.

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

from perfgrid.design.model import Block, Job, Plan, read
from perfgrid.kit import lifetime


def measure(job: Job) -> int:
    """Run the harness for one job, its output to the job's log; its exit status."""
    Path(job.log).parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "perfgrid.measure.bench", job.experiment, *job.args,
           "--result", job.result]
    with open(job.log, "w") as log:
        return subprocess.run(lifetime.command(cmd), stdout=log, stderr=subprocess.STDOUT,
                              check=False).returncode


def run(block: Block) -> None:
    """Measure every job of ``block`` in its order."""
    for index, job in enumerate(block.jobs, 1):
        began = time.monotonic()
        status = measure(job)
        if status != 0:
            raise SystemExit(f"perfgrid: {job.point_key}: the harness failed (exit status "
                             f"{status}); its log: {job.log}")
        print(f"perfgrid: {index}/{len(block.jobs)} {job.point_key} "
              f"({time.monotonic() - began:.1f} s)", flush=True)


def from_args(block: str, plan: str | None = None) -> Block:
    """The block to run: ``block`` by name from the run's plan.json ``plan``, or, without
    ``plan``, ``block`` is its part of the plan as JSON (Plan.block_plan), one block."""
    if plan is not None:
        return Plan.from_json(read(plan)).blocks[block]
    (only,) = Plan.from_json(json.loads(block)).blocks.values()
    return only


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perfgrid.measure.block",
                                     description=__doc__)
    parser.add_argument("block", help="the block's name (with --plan), or its plan as JSON")
    parser.add_argument("--plan", help="the run's plan (plan.json)")
    args = parser.parse_args(argv)
    lifetime.watch_snakemake()
    run(from_args(args.block, args.plan))


if __name__ == "__main__":
    main()
