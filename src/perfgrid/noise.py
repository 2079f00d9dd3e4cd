"""How busy the machine is with other work, measured just before a benchmark."""

from __future__ import annotations

import time

import psutil

#: how long one look at the CPUs lasts, and how many looks before giving up
SAMPLE_S = 0.5
MAX_CHECKS = 5


def busy_share(interval: float = SAMPLE_S) -> float:
    """Share of all CPUs (0..1) busy over ``interval`` seconds.

    Called while the benchmark job itself is idle, so what it sees is other
    processes' work.
    """
    return psutil.cpu_percent(interval=interval) / 100.0


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
