"""How busy the machine is with other work, just before a benchmark and while it runs.

Before a measurement the job looks at the CPUs while it is idle itself
(:func:`wait_until_quiet`). Over the measured window it cannot look away from its
own work, so it subtracts it (:func:`window`, :func:`during`): the allowed CPUs'
busy time, less the CPU time of the job's own process tree (the manager, its live
descendants, and every descendant reaped through it), is other processes' work.
Steal time counts as busy, as in the look before (psutil's ``cpu_percent``). Time
in interrupts (``irq``, ``softirq``) is left out of both: much of it is the
benchmark's own I/O and loopback traffic, which no process's CPU time holds. A
descendant its parent never reaped (an orphan not adopted by a subreaper of the
job) reads as another process's work: that errs towards measuring again.
"""

from __future__ import annotations

import os
import time

import psutil

#: measurements of a round made again, at most, while other processes were busy beyond
#: ``noise.busy_share`` over its measured window (perfgrid.measure.bench)
MAX_REMEASURES = 2
#: how long one look at the CPUs lasts before a measurement (10 clock ticks a CPU: enough
#: to tell a quarter busy from idle; whether the measurement itself was disturbed is
#: judged over its own window), the pause before looking again, and how many looks
#: before giving up (about 3 s). Every job pays a look, about 1,500 times a full run:
#: 0.25 s cost 6.5 minutes of one full run. A short look more often sees
#: a moment's work between jobs (89 of 1,505 jobs in one full run, 88 of them
#: quiet at the second look, which came 1 s later then): so the pause is short too
SAMPLE_S = 0.1
PAUSE_S = 0.25
MAX_CHECKS = 8


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
    ``perfgrid_busy_before`` if the machine never got quiet enough (the measurement then
    starts anyway; whether it was disturbed is judged over its window: :func:`during`).
    """
    share = busy_share()
    made = 1
    while limit is not None and share > limit and made < checks:
        time.sleep(PAUSE_S)
        share = busy_share()
        made += 1
    busy = int(limit is not None and share > limit)
    return {"perfgrid_busy_share": round(share, 4), "perfgrid_busy_checks": made,
            "perfgrid_busy_before": busy}


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


def own_cpu_seconds() -> float:
    """User and system CPU-seconds of this process, its reaped descendants and its live
    ones: the job's own work (a reaped child's time includes what it reaped in turn)."""
    me = psutil.Process()
    times = me.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in me.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # gone since listed: its parent reaps it into its own
            continue
        total += times.user + times.system
    return total


def window() -> dict[str, float]:
    """The allowed CPUs' CPU-seconds (all, busy, stolen) and the job's own, now: one end
    of a measured window for :func:`during`."""
    per_cpu = psutil.cpu_times(percpu=True)
    allowed = [per_cpu[cpu] for cpu in os.sched_getaffinity(0) if cpu < len(per_cpu)]
    total = busy = steal = 0.0
    for times in allowed or per_cpu:
        fields = times._asdict()
        # guest time is already in user and nice (psutil's cpu_percent does the same)
        all_s = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
        total += all_s
        steal += fields.get("steal", 0.0)
        busy += all_s - fields["idle"] - fields.get("iowait", 0.0) - fields.get(
            "irq", 0.0) - fields.get("softirq", 0.0)
    return {"total": total, "busy": busy, "steal": steal, "own": own_cpu_seconds()}


def during(start: dict[str, float], end: dict[str, float],
           limit: float | None) -> dict[str, float | int]:
    """Metadata of a measured window from its two ends (:func:`window`).

    ``perfgrid_busy_during``: other processes' share of the allowed CPUs over it (busy
    time less the job's own, steal included); ``perfgrid_own_share``: the job's own;
    ``perfgrid_steal_during``: steal alone; ``perfgrid_noisy``: 1 where other work
    exceeded ``limit``.
    """
    elapsed = end["total"] - start["total"]
    if elapsed <= 0:
        return {"perfgrid_busy_during": 0.0, "perfgrid_own_share": 0.0,
                "perfgrid_steal_during": 0.0, "perfgrid_noisy": 0}
    own = max(0.0, end["own"] - start["own"])
    other = round(min(1.0, max(0.0, end["busy"] - start["busy"] - own) / elapsed), 4)
    return {"perfgrid_busy_during": other,  # as recorded, so is the flag decided
            "perfgrid_own_share": round(min(1.0, own / elapsed), 4),
            "perfgrid_steal_during": round(max(0.0, end["steal"] - start["steal"]) / elapsed, 4),
            "perfgrid_noisy": int(limit is not None and other > limit)}
