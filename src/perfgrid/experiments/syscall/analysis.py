"""syscall: the seed's E3 figures, this machine's scaling plots, and the claims checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from perfgrid.analyse.analysis import (
    INTERVAL_BARS,
    TICKS_PER_S,
    Claim,
    compound,
    inconclusive,
    interval_rows,
    judged,
    observed_estimate,
    palette_for,
    plot_setup,
    points_of_rows,
    rate_at,
    save,
    tick_counts,
    why,
)
from perfgrid.analyse.stats import (
    METHOD_BINOMIAL,
    Bounds,
    Counted,
    Estimate,
    binomial_share,
    from_points,
    poisson_rate,
    reduce,
)
from perfgrid.experiments.base import Experiment

_SOURCE = ("seed E3 (002_8ebf3a0e202d2726.txt), 8 cores (2x Xeon E5450 3.0 GHz), "
           "Erlang R13B02 patched to expose getuid, schedulers bound (+sct db)")
#: the seed's one published point: 8 bound workers, ~30 M calls/s in total
SEED_ROWS = [
    {"runtime": "erlang", "call": "getuid", "binding": "spread", "workers": 8,
     "rate": 30_000_000.0, "rate_per_worker": 3_700_000.0,
     "note": "~222,000,000 calls per worker after 60 s (two workers ~150,000,000)",
     "source": _SOURCE},
]

#: bound workers "scale linearly" if two of them reach this multiple of one
LINEAR = 1.6
#: workers beyond the CPUs "cannot scale further": at most this multiple of the rate at
#: as many workers as CPUs
NO_FURTHER = 1.15
#: "no lock contention": calls per CPU-second at the most workers about those at one (an
#: equivalence within the ledger's margin)
NO_CONTENTION = 1.0
#: clock_gettime "makes no syscall": fewer than this many system calls entered per call
#: (perf's raw_syscalls:sys_enter over the counted loops), where getuid makes at least
#: GETUID_CALLS. Not 0.01: a native count includes its program's start-up (the Python
#: launcher and the C program: ~950 syscalls here), and quick.yaml counts 50,000 calls
VDSO_CALLS = 0.05
GETUID_CALLS = 0.95
#: the syscalls a native point's count may hold beyond its loops, per counting pass (its
#: program's start-up; ~950 measured on Debian 12): each count's lower end is taken this
#: many syscalls lower, so start-up can make neither side look like what it is not
STARTUP_SYSCALLS = 2000
#: the event and column of the count
SYSCALL_EVENT, SYSCALL_COLUMN = "raw_syscalls:sys_enter", "syscalls_per_unit"
#: without a count: clock_gettime "makes no syscall" if at most this share of its CPU
#: time is sys
VDSO_SYS = 0.05
BOUND = ("spread", "compact")
#: the counters that explain how calls scale with workers: CPU time per call (contention
#: shows as more of it), and the scheduler's context switches and migrations per call
SCALING_COUNTERS = ("task_clock_ns_per_unit", "ctx_switches_per_unit", "migrations_per_unit")
#: columns the report shows after the statistics
EXTRA_COLUMNS = ["rate_per_worker", "calls_per_cpu_s", "sys_share", "worker_cpus"]


def plot(table: pd.DataFrame, out_dir: Path, experiment: Experiment) -> list[Path]:
    """Total rate by workers per binding (hue call, style runtime); CPU efficiency and split."""
    import seaborn as sns

    written: list[Path] = []
    order = plot_setup(table)
    data = interval_rows(table, "m_calls_per_s", 1e6)
    calls = sorted(set(table["call"]))
    palette = palette_for(calls)
    grid = sns.relplot(data=data, x="workers", y="m_calls_per_s", hue="call", palette=palette,
                       style="runtime", col="binding", col_order=order, kind="line",
                       marker="o", height=3.2, aspect=0.9, err_style="bars", **INTERVAL_BARS)
    grid.set(xscale="log", yscale="log", xlabel="workers (processes)",
             ylabel="calls/s in total (millions, log)")
    for ax in grid.axes.flat:
        ax.set_xticks(sorted(table["workers"].unique()))
        ax.set_xticklabels([str(w) for w in sorted(table["workers"].unique())])
    grid.figure.suptitle("syscall: total call rate by workers, per binding "
                         "(bound workers should scale up to the CPUs)", y=1.04)
    written += save(grid.figure, out_dir, "rate_by_workers")

    if "calls_per_cpu_s" in table and table["calls_per_cpu_s"].notna().any():
        data = table.assign(m_per_cpu_s=table["calls_per_cpu_s"] / 1e6,
                            sys_pct=100 * table["sys_share"])
        grid = sns.relplot(data=data, x="workers", y="m_per_cpu_s", hue="call", style="runtime",
                           col="binding", col_order=order, kind="line", marker="o",
                           height=3.0, aspect=0.9)
        grid.set(xscale="log", yscale="log", xlabel="workers (processes)",
                 ylabel="calls per CPU-second (millions, log)")
        grid.figure.suptitle("syscall: calls per CPU-second each worker received "
                             "(flat = no contention)", y=1.04)
        written += save(grid.figure, out_dir, "calls_per_cpu_second")

        one = data[data["workers"] == data["workers"].min()]
        grid = sns.catplot(data=one, x="call", y="sys_pct", hue="runtime", col="binding",
                           col_order=order, kind="bar", height=3.0, aspect=0.8)
        grid.set(xlabel="", ylabel="sys share of the workers' CPU (%)")
        grid.figure.suptitle("syscall: kernel share of the CPU time (clock_gettime: vDSO)",
                             y=1.04)
        written += save(grid.figure, out_dir, "sys_share")
    return written


def _bound(table: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The bound binding measured (spread, else compact) and its rows."""
    for bind in BOUND:
        rows = table[table["binding"] == bind]
        if not rows.empty:
            return bind, rows
    return "", table.iloc[0:0]


def cpu_count(table: pd.DataFrame) -> int:
    """CPUs the bound plans used: distinct CPUs in the largest bound point's plan."""
    _, rows = _bound(table)
    if rows.empty or "binding_plan" not in rows:
        return 0
    plan = str(rows.loc[rows["workers"].idxmax(), "binding_plan"])
    return len({cpu for worker in plan.split("|") for cpu in worker.split(",") if cpu})


def user_share(process: dict) -> float:
    """The share of a process's CPU time spent outside the kernel.

    A share "below 5 %" is judged as its complement "above 95 %": estimates are positive
    quantities on the log scale, and a vDSO call's sys share may be exactly zero.
    """
    return 1.0 - float(process["sys_share"])


def claims(table: pd.DataFrame, experiment: Experiment) -> list[Claim]:
    """Linear scaling of bound workers up to the CPUs, none past them, no contention, vDSO.

    Rates come with their intervals from the raw values, CPU-time figures from each worker
    process's own observations; every verdict is decided by a 95 % interval.
    """
    out: list[Claim] = []
    name = experiment.name
    getuid = table[table["call"] == "getuid"] if len(table) else table
    bind, bound = _bound(getuid)
    cpus = cpu_count(table)

    for runtime in ("native", "python"):
        rows = bound[bound["runtime"] == runtime] if len(bound) else bound
        hyp = "Bound workers scale syscalls linearly with cores (seed: 8 workers, ~3.7 M/s each)"
        crit = f"getuid, {bind or 'spread'} binding: rate at 2 workers >= {LINEAR}x rate at 1"
        one, two = rate_at(rows, workers=1), rate_at(rows, workers=2)
        mine = getuid[getuid["runtime"] == runtime] if len(getuid) else getuid
        because = why(mine, SCALING_COUNTERS,
                      {f"{w}w {b}": {"workers": w, "binding": b}
                       for w, b in ((1, bind), (2, bind), (2, "none"))})
        if one and two and cpus >= 2:
            out.append(judged(name, hyp, crit, two / one, ">=", LINEAR,
                              f"({one / 1e6:.2f} -> {two / 1e6:.2f} M calls/s)", runtime,
                              why=because))
        else:
            out.append(inconclusive(name, hyp, crit, "no bound getuid rows at 1 and 2 workers "
                                    "on 2+ CPUs", runtime, why=because))

        hyp = "More workers than CPUs cannot raise the rate further"
        crit = (f"getuid, {bind or 'spread'}: rate at the most workers <= {NO_FURTHER}x the "
                f"rate at as many workers as CPUs ({cpus or '?'})")
        most = int(rows["workers"].max()) if len(rows) else 0
        at_cpus, at_most = rate_at(rows, workers=cpus), rate_at(rows, workers=most)
        if at_cpus and at_most and most > cpus:
            out.append(judged(name, hyp, crit, at_most / at_cpus, "<=", NO_FURTHER,
                              f"({most} workers vs {cpus})", runtime,
                              why=why(rows, SCALING_COUNTERS,
                                      {f"{cpus} workers": {"workers": cpus},
                                       f"{most} workers": {"workers": most}})))
        else:
            out.append(inconclusive(name, hyp, crit, "no bound getuid rows at the CPU count "
                                    "and beyond it", runtime))

    hyp = "Bound workers do not contend: each call costs the same CPU time however many run"
    crit = (f"native getuid, {bind or 'spread'}: calls per CPU-second at the most workers "
            f"about {NO_CONTENTION}x at 1 worker")
    rows = bound[bound["runtime"] == "native"] if len(bound) else bound
    if len(rows) and "calls_per_cpu_s" in rows and rows["calls_per_cpu_s"].notna().any():
        most = int(rows["workers"].max())
        first, last = rows[rows["workers"] == 1], rows[rows["workers"] == most]
        if len(first) and len(last) and most > 1:
            a = observed_estimate(first.iloc[0], "calls_per_cpu_s")
            b = observed_estimate(last.iloc[0], "calls_per_cpu_s")
            out.append(judged(name, hyp, crit, b / a, "~", NO_CONTENTION,
                              f"({a / 1e6:.2f} -> {b / 1e6:.2f} M per CPU-s, {most} workers)",
                              "native", why=why(rows, SCALING_COUNTERS,
                                                {"1 worker": {"workers": 1},
                                                 f"{most} workers": {"workers": most}})))
        else:
            out.append(inconclusive(name, hyp, crit, "no native bound getuid rows at 1 and "
                                    "more workers", "native"))
    else:
        out.append(inconclusive(name, hyp, crit, "no native bound getuid rows with CPU times",
                                "native"))

    out.append(vdso_claim(table, name))
    return out


def _count_of(rows: pd.DataFrame) -> tuple[Counted | None, str]:
    """(system calls per call over the counted calls of ``rows`` pooled, with its exact
    interval; else None and why there is no count)."""
    if "counters" not in rows:
        return None, "not counted"
    counted = rows[rows["counters"] == "ok"]
    if counted.empty:
        status = [str(s) for s in rows["counters"].dropna()]
        return None, status[0] if status else "not counted"
    per_call = pd.to_numeric(counted.get(SYSCALL_COLUMN), errors="coerce")
    units = pd.to_numeric(counted.get("counters_units"), errors="coerce")
    ok = per_call.notna() & units.notna() & (units > 0)
    if not ok.any():
        unsupported = [part.strip() for text in counted.get("counters_unsupported", [])
                       if isinstance(text, str) for part in text.split("; ")
                       if part.startswith(f"{SYSCALL_EVENT}:")]
        return None, unsupported[0] if unsupported else f"{SYSCALL_EVENT} not counted"
    events = int(sum(round(c * u) for c, u in zip(per_call[ok], units[ok], strict=True)))
    count = poisson_rate(events, float(units[ok].sum()),
                         allowance=STARTUP_SYSCALLS * int(ok.sum()))
    return from_points(count, points_of_rows(counted[ok])), ""


def _counted_calls(count: Counted) -> str:
    """``12 syscalls over 500,000 calls``: the raw count behind a per-call figure."""
    return f"{count.events:,} syscalls over {count.units:,.0f} calls"


def tick_share(row: pd.Series, key) -> Estimate | Bounds:
    """A CPU-time share over the row's processes (:func:`observed_estimate`), and where
    every process saw exactly 0 or exactly 1, a one-sided bound instead of none.

    Such a share has no spread to give an interval, but it is a count: the kernel splits a
    process's CPU time by which side each clock tick (at least ``TICKS_PER_S`` a
    CPU-second) caught it on, so 0 of at least ``100 x CPU-seconds`` ticks bounds the
    share (Clopper-Pearson). Without the processes' CPU seconds it stays without an
    interval, its reason saying what would decide it.
    """
    estimate = observed_estimate(row, key)
    if estimate.has_interval or not estimate.reason.startswith("all values identical"):
        return estimate
    name = key if isinstance(key, str) else getattr(key, "__name__", "share")
    counted = tick_counts(row, key)
    if counted is None:
        return Estimate.unknown(estimate.value, (
            f"{estimate.reason} ({name} exactly {estimate.value:g} in every process, and "
            f"no CPU seconds to count clock ticks by: a syscall count (perf "
            f"{SYSCALL_EVENT}) would decide it)"))
    hits, ticks, cpu_s = counted
    share = estimate.value
    if share not in (0.0, 1.0) or ticks < 1:
        return estimate
    basis = (f"{name} exactly {share:g} in every process, over >= {ticks:,} clock ticks "
             f"({cpu_s:.3g} CPU-s at >= {TICKS_PER_S} Hz): a one-sided bound")
    return from_points(binomial_share(hits, ticks, basis), estimate.points)


def _shares(clock: pd.DataFrame, uid: pd.DataFrame, hyp: str, why_not: str,
            name: str) -> Claim:
    """The vDSO claim (experiment ``name``'s) judged by CPU-time shares, where no syscall
    count decides it."""
    crit = (f"native, 1 worker: clock_gettime spends < {VDSO_SYS:.0%} of its CPU in the "
            f"kernel while getuid spends more (CPU-time shares: no syscall count)")
    # the worst case of each side over the bindings: clock's least user share, getuid's
    # least sys share
    clock_user = reduce([tick_share(r, user_share) for _, r in clock.iterrows()], np.min)
    uid_sys = reduce([tick_share(r, "sys_share") for _, r in uid.iterrows()], np.min)
    sides = [judged(name, hyp, crit, clock_user, ">", 1 - VDSO_SYS, "", "native", "", ".1%"),
             judged(name, hyp, crit, uid_sys, ">", VDSO_SYS, "", "native", "", ".1%")]
    speed = float(clock["rate"].max()) / float(uid["rate"].max())
    claim = compound(sides, f"clock_gettime user share {clock_user.show('.1%')} (sys "
                         f"{1 - clock_user.value:.1%}) vs getuid sys share "
                         f"{uid_sys.show('.1%')}; {speed:.1f}x the getuid rate",
                     ("clock_gettime", "getuid"))
    bases = [p.reason for p in (clock_user, uid_sys)
             if p.method == METHOD_BINOMIAL]
    notes = "; ".join([*bases, f"judged by CPU-time shares: no syscall count ({why_not})"])
    return replace(claim, reason=f"{claim.reason}; {notes}")


def vdso_claim(table: pd.DataFrame, name: str) -> Claim:
    """clock_gettime makes no syscall, unlike getuid: decided by counting the syscalls
    the counted loops entered (perf's ``raw_syscalls:sys_enter``), else by CPU-time shares;
    a claim of experiment ``name``.

    A native count includes each counting pass's program start-up (``counters_scope``):
    nothing is subtracted from the value; each side's lower end is taken
    :data:`STARTUP_SYSCALLS` syscalls a pass lower, and the thresholds leave start-up room
    over the calls counted.
    """
    hyp = ("clock_gettime makes no syscall on modern Linux (served by the vDSO), unlike "
           "getuid (the seed's aside on erlang:now())")
    crit = (f"native, 1 worker: clock_gettime enters the kernel < {VDSO_CALLS:g} times per "
            f"call, getuid >= {GETUID_CALLS:g} times (perf {SYSCALL_EVENT} over the counted "
            f"loops, each pass's program start-up included)")
    rows = table[(table["runtime"] == "native") & (table["workers"] == 1)] if len(table) else table
    clock = rows[rows["call"] == "clock_gettime"] if len(rows) else rows
    uid = rows[rows["call"] == "getuid"] if len(rows) else rows
    if not (len(clock) and len(uid)):
        return inconclusive(name, hyp, crit, "no native 1-worker clock_gettime and getuid "
                            "rows", "native")
    because = why(rows, ("cpu_sys_share", "task_clock_ns_per_unit", "ctx_switches_per_unit"),
                  {"clock_gettime": {"call": "clock_gettime"}, "getuid": {"call": "getuid"}})
    (clock_count, clock_why), (uid_count, uid_why) = _count_of(clock), _count_of(uid)
    if clock_count is None or uid_count is None:
        why_not = "; ".join(f"{side}: {text}" for side, text in
                            (("clock_gettime", clock_why), ("getuid", uid_why)) if text)
        if "sys_share" not in rows:
            return inconclusive(name, hyp, crit, f"no syscall count ({why_not}) and no CPU "
                                "shares", "native", why=because)
        return replace(_shares(clock, uid, hyp, why_not, name), why=because)
    scope = (f"each count covers the counted loops and, per pass, its program's start-up "
             f"(lower ends allow {STARTUP_SYSCALLS:,} start-up syscalls a pass)")
    sides = [judged(name, hyp, crit, clock_count, "<", VDSO_CALLS, "", "native", "", ".4g"),
             judged(name, hyp, crit, uid_count, ">=", GETUID_CALLS, "", "native", "", ".4g")]
    shares = ""
    if "sys_share" in rows:
        clock_sys = reduce([observed_estimate(r, "sys_share") for _, r in clock.iterrows()],
                           np.max)
        uid_sys = reduce([observed_estimate(r, "sys_share") for _, r in uid.iterrows()],
                         np.min)
        shares = (f"; CPU in the kernel: clock_gettime {clock_sys.value:.1%}, getuid "
                  f"{uid_sys.value:.1%}")
    speed = float(clock["rate"].max()) / float(uid["rate"].max())
    claim = compound(sides, f"syscalls per call: clock_gettime {clock_count.show('.4g')} "
                         f"({_counted_calls(clock_count)}) vs getuid {uid_count.show('.4g')} "
                         f"({_counted_calls(uid_count)}){shares}; {speed:.1f}x the getuid "
                         f"rate",
                     ("clock_gettime", "getuid"))
    return replace(claim, reason=f"{claim.reason}; {scope}", why=because)


def notes(table: pd.DataFrame, experiment: Experiment) -> list[str]:
    """Python beside C for the same call, where both were measured."""
    out = []
    rows = table[(table["workers"] == 1) & (table["binding"] == "single")] if len(table) else table
    for call in ("getuid", "clock_gettime"):
        py = rate_at(rows, call=call, runtime="python")
        c = rate_at(rows, call=call, runtime="native")
        if py and c:
            ratio = py / c
            bounds = ratio.interval()
            cost = (f"the interpreter adds {(1 / float(py) - 1 / float(c)) * 1e9:.0f} ns per "
                    "call" if bounds and bounds[1] < 1
                    else "no interpreter cost shows above the noise (the interval reaches 1x)")
            out.append(f"`{call}`, one worker pinned: Python {py / 1e6:.1f} M calls/s, C "
                       f"{c / 1e6:.1f} M calls/s ({ratio.show('.2f', 'x')}): {cost}.")
    return out
