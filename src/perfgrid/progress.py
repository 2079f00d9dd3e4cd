"""Where a long run stands: a grid-wide count and an ETA, printed by Snakemake's
own process while it runs (its "N of M steps" counts every job, not points)."""

from __future__ import annotations

import os
import sys
import threading
import time


def eta_line(expected: list[str], started: float, now: float | None = None) -> str:
    """``done/total benchmark points``, and an ETA from the points finished since
    ``started`` (their mean duration times the points left)."""
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
    if left and done_now:
        per_point = (now - started) / done_now
        line += f", about {left * per_point / 60:.0f} min left"
    return line


def start_reporter(expected: list[str], interval: float = 60.0) -> threading.Thread:
    """Print :func:`eta_line` to stderr every ``interval`` seconds until the run ends."""
    started = time.time()

    def report() -> None:
        last = ""
        while True:
            time.sleep(interval)
            line = eta_line(expected, started)
            if line != last:
                print(line, file=sys.stderr, flush=True)
                last = line

    thread = threading.Thread(target=report, name="perfgrid-progress", daemon=True)
    thread.start()
    return thread
