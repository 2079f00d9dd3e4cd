"""Where a long run stands: a grid-wide count and an ETA, printed by Snakemake's
own process while it runs (its "N of M steps" counts every job, not points). What it
counts is the run's plan (perfgrid.plan): its jobs' results, whether a look may let rounds
go, and the time budget."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from perfgrid.paths import Layout

#: the share of points done before the ETA is said: the first points finished are not a
#: fair sample (a line said "at most about 370 min left" 4 min into a 60-min run)
ETA_AFTER = 0.05


def eta_line(expected: list[str], started: float, now: float | None = None,
             at_most: bool = False, budget: tuple[float, int] | None = None,
             rounds: dict[str, int] | None = None) -> str:
    """``done/total benchmark points``, and an ETA from the points finished since
    ``started`` (their mean duration times the points left), said once :data:`ETA_AFTER`
    of the points are done. With ``at_most`` the total
    is an upper bound: looks (perfgrid.looks) may let later rounds go, and the ETA with
    it. With ``budget`` (when the run's time budget ends, and its ``keep_rounds``) the line
    says how long later rounds may still start, and the ETA counts the rounds after
    ``keep_rounds`` (``round=N`` in a result's path; they run last) only up to the budget's
    end, since none starts past it. ``rounds``: each result's round, where not read from
    its path."""
    now = time.time() if now is None else now
    done_before, done_now, left_late = 0, 0, 0
    for path in expected:
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            round_ = rounds[path] if rounds is not None else Layout.result_round(path)
            if budget is not None and (round_ or 1) > budget[1]:
                left_late += 1
            continue
        if mtime >= started:
            done_now += 1
        else:
            done_before += 1
    done = done_before + done_now
    left = len(expected) - done
    total = f" of at most {len(expected)}" if at_most else f"/{len(expected)}"
    line = f"perfgrid: {done}{total} benchmark points done"
    if left and done_now and done < ETA_AFTER * len(expected):
        line += f", time left said once {ETA_AFTER:.0%} of them are done"
    elif left and done_now:
        per_point = (now - started) / done_now
        seconds = (left - left_late) * per_point
        if budget is not None:  # the later rounds run last, and start only until its end
            seconds += min(left_late * per_point, max(0.0, budget[0] - now - seconds))
        line += f", {'at most ' if at_most else ''}about {seconds / 60:.0f} min left"
    if at_most:
        line += " (looks may let later rounds go)"
    if budget is not None:
        end, keep_rounds = budget
        if now <= end:  # as perfgrid.block.past_budget
            line += (f"; the time budget lets rounds after {keep_rounds} start for "
                     f"{(end - now) / 60:.0f} more min")
        else:
            line += f"; the time budget is spent: rounds after {keep_rounds} are let go"
    return line


def from_plan(plan: dict[str, Any], run_started: float) -> dict[str, Any]:
    """:func:`eta_line`'s ``expected``, ``at_most``, ``budget`` and ``rounds`` for the run
    of ``plan`` (plan.json's data, perfgrid.plan.Plan.to_json) started at
    ``run_started``: its jobs' results, whether a look may let rounds go, and when the
    time budget ends."""
    from perfgrid.block import budget_end

    end = budget_end(run_started, plan["budget"])
    return {"expected": [job["result"] for job in plan["jobs"]],
            "at_most": any(len(e["looks"]) > 1 for e in plan["experiments"].values()),
            "budget": None if end is None else (end, plan["budget"]["keep_rounds"]),
            "rounds": {job["result"]: job["round"] for job in plan["jobs"]}}


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
