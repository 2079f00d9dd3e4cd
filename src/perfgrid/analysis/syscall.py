"""syscall: the seed's E3 figures, this machine's scaling plots, and the claims checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns

from perfgrid.analysis import (
    INTERVAL_BARS,
    Claim,
    all_of,
    inconclusive,
    interval_rows,
    judged,
    observed_estimate,
    palette_for,
    plot_setup,
    rate_at,
    save,
    why,
)
from perfgrid.stats import reduce

NAME = "syscall"
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
#: "no lock contention": calls per CPU-second at the most workers keep this share of one's
NO_CONTENTION = 0.9
#: clock_gettime "makes no syscall" if at most this share of its CPU time is sys
VDSO_SYS = 0.05
BOUND = ("spread", "compact")
#: the counters that explain how calls scale with workers: CPU time per call (contention
#: shows as more of it), and the scheduler's context switches and migrations per call
SCALING_COUNTERS = ("task_clock_ns_per_unit", "ctx_switches_per_unit", "migrations_per_unit")
#: columns the report shows after the statistics
EXTRA_COLUMNS = ["rate_per_worker", "calls_per_cpu_s", "sys_share", "worker_cpus"]


def plot(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Total rate by workers per binding (hue call, style runtime); CPU efficiency and split."""
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


def _both(sides: list[Claim], measured: str) -> Claim:
    """One claim from a criterion judged on each of its sides, decided by
    :func:`~perfgrid.analysis.all_of`.

    The value and interval fields are those of the side that decided (the weakest)."""
    rank = {"not reproduced": 0, "inconclusive": 1, "at the threshold": 2, "reproduced": 3}
    weakest = min(sides, key=lambda c: rank[c.verdict])
    return replace(weakest, verdict=all_of([c.verdict for c in sides]), measured=measured,
                   reason="; ".join(f"{side}: {c.reason}" for side, c in
                                    zip(("clock_gettime", "getuid"), sides, strict=True)))


def claims(table: pd.DataFrame) -> list[Claim]:
    """Linear scaling of bound workers up to the CPUs, none past them, no contention, vDSO.

    Rates come with their intervals from the raw values, CPU-time figures from each worker
    process's own observations; every verdict is decided by a 95 % interval.
    """
    out: list[Claim] = []
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
            out.append(judged(NAME, hyp, crit, two / one, ">=", LINEAR,
                              f"({one / 1e6:.2f} -> {two / 1e6:.2f} M calls/s)", runtime,
                              why=because))
        else:
            out.append(inconclusive(NAME, hyp, crit, "no bound getuid rows at 1 and 2 workers "
                                    "on 2+ CPUs", runtime, why=because))

        hyp = "More workers than CPUs cannot raise the rate further"
        crit = (f"getuid, {bind or 'spread'}: rate at the most workers <= {NO_FURTHER}x the "
                f"rate at as many workers as CPUs ({cpus or '?'})")
        most = int(rows["workers"].max()) if len(rows) else 0
        at_cpus, at_most = rate_at(rows, workers=cpus), rate_at(rows, workers=most)
        if at_cpus and at_most and most > cpus:
            out.append(judged(NAME, hyp, crit, at_most / at_cpus, "<=", NO_FURTHER,
                              f"({most} workers vs {cpus})", runtime,
                              why=why(rows, SCALING_COUNTERS,
                                      {f"{cpus} workers": {"workers": cpus},
                                       f"{most} workers": {"workers": most}})))
        else:
            out.append(inconclusive(NAME, hyp, crit, "no bound getuid rows at the CPU count "
                                    "and beyond it", runtime))

    hyp = "Bound workers do not contend: each call costs the same CPU time however many run"
    crit = (f"native getuid, {bind or 'spread'}: calls per CPU-second at the most workers "
            f">= {NO_CONTENTION}x at 1 worker")
    rows = bound[bound["runtime"] == "native"] if len(bound) else bound
    if len(rows) and "calls_per_cpu_s" in rows and rows["calls_per_cpu_s"].notna().any():
        most = int(rows["workers"].max())
        first, last = rows[rows["workers"] == 1], rows[rows["workers"] == most]
        if len(first) and len(last) and most > 1:
            a = observed_estimate(first.iloc[0], "calls_per_cpu_s")
            b = observed_estimate(last.iloc[0], "calls_per_cpu_s")
            out.append(judged(NAME, hyp, crit, b / a, ">=", NO_CONTENTION,
                              f"({a / 1e6:.2f} -> {b / 1e6:.2f} M per CPU-s, {most} workers)",
                              "native", why=why(rows, SCALING_COUNTERS,
                                                {"1 worker": {"workers": 1},
                                                 f"{most} workers": {"workers": most}})))
        else:
            out.append(inconclusive(NAME, hyp, crit, "no native bound getuid rows at 1 and "
                                    "more workers", "native"))
    else:
        out.append(inconclusive(NAME, hyp, crit, "no native bound getuid rows with CPU times",
                                "native"))

    hyp = ("clock_gettime makes no syscall on modern Linux (served by the vDSO), unlike "
           "getuid (the seed's aside on erlang:now())")
    crit = (f"native, 1 worker: clock_gettime spends < {VDSO_SYS:.0%} of its CPU in the kernel "
            "while getuid spends more")
    rows = table[(table["runtime"] == "native") & (table["workers"] == 1)] if len(table) else table
    clock = rows[rows["call"] == "clock_gettime"] if len(rows) else rows
    uid = rows[rows["call"] == "getuid"] if len(rows) else rows
    if len(clock) and len(uid) and "sys_share" in rows:
        # the worst case of each side over the bindings: clock's least user share, getuid's
        # least sys share
        clock_user = reduce([observed_estimate(r, user_share) for _, r in clock.iterrows()],
                            np.min)
        uid_sys = reduce([observed_estimate(r, "sys_share") for _, r in uid.iterrows()], np.min)
        sides = [judged(NAME, hyp, crit, clock_user, ">", 1 - VDSO_SYS, "", "native", "",
                        ".1%"),
                 judged(NAME, hyp, crit, uid_sys, ">", VDSO_SYS, "", "native", "", ".1%")]
        speed = float(clock["rate"].max()) / float(uid["rate"].max())
        claim = _both(sides, f"clock_gettime user share {clock_user.show('.1%')} (sys "
                             f"{1 - clock_user.value:.1%}) vs getuid sys share "
                             f"{uid_sys.show('.1%')}; {speed:.1f}x the getuid rate")
        out.append(replace(claim, why=why(
            rows, ("cpu_sys_share", "task_clock_ns_per_unit", "ctx_switches_per_unit"),
            {"clock_gettime": {"call": "clock_gettime"}, "getuid": {"call": "getuid"}})))
    else:
        out.append(inconclusive(NAME, hyp, crit, "no native 1-worker clock_gettime and getuid "
                                "rows", "native"))
    return out


def notes(table: pd.DataFrame) -> list[str]:
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
