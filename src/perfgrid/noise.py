"""How busy the machine is with other work, measured just before a benchmark."""

from __future__ import annotations

import os
import time

import psutil

#: how long one look at the CPUs lasts, and how many looks before giving up
SAMPLE_S = 0.5
MAX_CHECKS = 5


def busy_share(interval: float = SAMPLE_S) -> float:
    """Share (0..1) of the CPUs this process may run on that is busy over ``interval`` s.

    Called while the benchmark job itself is idle, so what it sees is other
    processes' work. Only the allowed CPUs count: under a cpuset (SLURM, taskset)
    the workers run there, and a busy CPU elsewhere does not slow them.
    """
    per_cpu = psutil.cpu_percent(interval=interval, percpu=True)
    allowed = [per_cpu[cpu] for cpu in os.sched_getaffinity(0) if cpu < len(per_cpu)]
    return (sum(allowed) / len(allowed) if allowed else sum(per_cpu) / len(per_cpu)) / 100.0


def wait_until_quiet(limit: float | None, checks: int = MAX_CHECKS) -> dict[str, float | int]:
    """Look up to ``checks`` times until the busy share is at most ``limit``.

    Returns metadata: the last share seen, the checks made, and 1 in
    ``perfgrid_noisy`` if the machine never got quiet enough.
    """
    share = busy_share()
    made = 1
    while limit is not None and share > limit and made < checks:
        time.sleep(1.0)
        share = busy_share()
        made += 1
    noisy = int(limit is not None and share > limit)
    return {"perfgrid_busy_share": round(share, 4), "perfgrid_busy_checks": made,
            "perfgrid_noisy": noisy}
