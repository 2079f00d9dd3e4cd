"""How busy the machine is with other work, just before a benchmark and while it runs."""

from __future__ import annotations

import os
import time

import psutil

#: how long one look at the CPUs lasts (25 clock ticks a CPU: enough to tell a quarter
#: busy from idle; it is most of a quick job's overhead, 945 times a full run), and how
#: many looks before giving up
SAMPLE_S = 0.25
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


def quiet_scheduler(scheduler: object) -> bool:
    """Stop Snakemake's job-rate limiter on a local run; True if it was stopped.

    Each scheduling pass re-arms a one-second timer, and every finished job adds
    a pass, so after N jobs Snakemake wakes N times a second (snakemake PR #3744):
    on this 2-CPU machine 35-45 % of a CPU beside the benchmark, and 0.2 % without
    it. Benchmark jobs run one at a time, so a local run needs no rate limit;
    a cluster run keeps it (its head node measures nothing).
    """
    if getattr(scheduler, "job_rate_limiter", None) is None:
        return False
    scheduler.job_rate_limiter = None
    return True


def snapshot() -> dict[str, float]:
    """CPU times (steal included), load and CPU frequency now, for :func:`drift`."""
    times = psutil.cpu_times()
    snap = {"total": sum(times), "steal": float(getattr(times, "steal", 0.0)),
            "load": os.getloadavg()[0]}
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError):  # not exposed (many VMs)
        freq = None
    if freq is not None and freq.current:
        snap["mhz"] = float(freq.current)
    return snap


def drift(before: dict[str, float], after: dict[str, float],
          steal_limit: float | None) -> dict[str, float | int]:
    """Metadata of what changed while a point was measured.

    The steal share (CPU time the hypervisor gave to other guests, over all
    CPU time) above ``steal_limit`` flags the point like a busy machine does.
    """
    elapsed = after["total"] - before["total"]
    steal = (after["steal"] - before["steal"]) / elapsed if elapsed > 0 else 0.0
    meta: dict[str, float | int] = {
        "perfgrid_steal_share": round(steal, 4),
        "perfgrid_load_before": round(before["load"], 2),
        "perfgrid_load_after": round(after["load"], 2),
        "perfgrid_stolen": int(steal_limit is not None and steal > steal_limit),
    }
    for when, snap in (("before", before), ("after", after)):
        if "mhz" in snap:
            meta[f"perfgrid_cpu_mhz_{when}"] = round(snap["mhz"], 1)
    return meta
