"""Where a long run stands: a grid-wide count and an ETA, printed by Snakemake's
own process while it runs (its "N of M steps" counts every job, not points). What it
counts is the run's plan (perfgrid.design.plan): its jobs' results, and the time budget."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

#: the share of points done before the ETA is said: the first points finished are not a
#: fair sample (a line said "at most about 370 min left" 4 min into a 60-min run)
ETA_AFTER = 0.05


def eta_line(expected: list[str], started: float, now: float | None = None,
             budget_end: float | None = None) -> str:
    """``done/total benchmark points``, and an ETA from the points finished since
    ``started`` (their mean duration times the points left), said once :data:`ETA_AFTER`
    of the points are done. With ``budget_end`` (when the run's time budget ends, seconds
    since the epoch) the line says how much of the budget is left, or that it is spent:
    the budget cuts nothing, so a run past it is only marked (perfgrid.design.plan)."""
    now = time.time() if now is None else now
    done_before, done_now = 0, 0
    for path in expected:
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            continue
        if mtime >= started:
            done_now += 1
        else:
            done_before += 1
    done = done_before + done_now
    left = len(expected) - done
    line = f"perfgrid: {done}/{len(expected)} benchmark points done"
    if left and done_now and done < ETA_AFTER * len(expected):
        line += f", time left said once {ETA_AFTER:.0%} of them are done"
    elif left and done_now:
        line += f", about {left * (now - started) / done_now / 60:.0f} min left"
    if budget_end is not None:
        if now <= budget_end:
            line += f"; {(budget_end - now) / 60:.0f} min of the time budget left"
        else:
            line += ("; past the time budget (nothing is cut: the report marks the run as "
                     "over its budget)")
    return line


def from_plan(plan: dict[str, Any], run_started: float) -> dict[str, Any]:
    """:func:`eta_line`'s ``expected`` and ``budget_end`` for the run of ``plan``
    (plan.json's data, perfgrid.design.plan.Plan.to_json) started at ``run_started``."""
    minutes = plan["budget"]["minutes"]
    return {"expected": [job["result"] for job in plan["jobs"]],
            "budget_end": None if minutes is None else run_started + 60 * minutes}


def start_reporter(plan: dict[str, Any], run_started: float,
                   interval: float = 60.0) -> threading.Thread:
    """Print :func:`eta_line` for the run of ``plan`` (:func:`from_plan`) to stderr every
    ``interval`` seconds until the run ends."""
    started = time.time()
    facts = from_plan(plan, run_started)

    def report() -> None:
        last = ""
        while True:
            time.sleep(interval)
            line = eta_line(started=started, **facts)
            if line != last:
                print(line, file=sys.stderr, flush=True)
                last = line

    thread = threading.Thread(target=report, name="perfgrid-progress", daemon=True)
    thread.start()
    return thread
