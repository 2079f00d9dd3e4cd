"""spawn: the seed's E1 figures, this machine's rates by primitive and chains, and the claims."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from perfgrid.analyse import ledger
from perfgrid.analyse.analysis import (
    INTERVAL_BARS,
    Claim,
    best_row,
    by_runtime,
    inconclusive,
    interval_rows,
    judged,
    palette_for,
    plot_setup,
    rate_at,
    save,
    why,
    without_erlang,
)
from perfgrid.analyse.stats import Estimate, band
from perfgrid.experiments.base import Experiment

#: what one CPU saves a chain: the scheduler's context switches and migrations per spawn
SCHEDULING_COUNTERS = ("ctx_switches_per_unit", "migrations_per_unit", "task_clock_ns_per_unit")
#: what a spawn costs: CPU time, page faults (a fork copies page tables) and kernel share
COST_COUNTERS = ("task_clock_ns_per_unit", "page_faults_per_unit", "ctx_switches_per_unit",
                 "cpu_sys_share")
_FILE = "seed E1 (000_62f551dd3ff8b81f.txt)"
_P4 = f"{_FILE}, Pentium 4 2.8 GHz, Erlang R11B, 1,000,000 spawns"
_E5200 = f"{_FILE}, Pentium E5200 2.5 GHz (2 cores), Erlang R13B01, 1,000,000 spawns"
#: Erlang processes are green threads: asyncio tasks are their Python counterpart, so the
#: seed rows sit beside the asyncio_task rows (and C threads beside them as the native
#: figure). One scheduler is binding single, SMP none.
SEED_ROWS = [
    {"chains": 1, "rate": 358_599.0, "release": "R11B", "source": _P4},
    {"chains": 10, "rate": 348_489.0, "release": "R11B, run 1", "source": _P4},
    {"chains": 10, "rate": 340_288.0, "release": "R11B, run 2", "source": _P4},
    {"chains": 100, "rate": 335_983.0, "release": "R11B, run 1", "source": _P4},
    {"chains": 100, "rate": 336_743.0, "release": "R11B, run 2", "source": _P4},
    {"chains": 1, "binding": "single", "rate": 749_027.0,
     "release": "R13B01, 1 scheduler (-smp disable)", "source": _E5200},
    {"chains": 1, "binding": "none", "rate": 402_022.0,
     "release": "R13B01, SMP, 2 schedulers", "source": _E5200},
    {"chains": 1, "binding": "single", "rate": 2_264_042.0,
     "release": "R13B01 patched (no clock_gettime per spawn), 1 scheduler", "source": _E5200},
    {"chains": 1, "binding": "none", "rate": 652_947.0,
     "release": "R13B01 patched (no clock_gettime per spawn), SMP 2 schedulers",
     "source": _E5200},
]
for _row in SEED_ROWS:
    _row.update({"runtime": "erlang", "variant": "asyncio_task",
                 "native_variant": "native_pthread", "erlang_variant": "erlang"})

#: columns the report shows after the statistics
EXTRA_COLUMNS = ["cpu_us_per_spawn", "sys_share", "peak_rss_bytes", "children_peak_rss_bytes"]

ORDER = ["erlang", "asyncio_task", "thread", "native_pthread", "fork", "native_fork",
         "mp_fork", "posix_spawn", "native_posix_spawn"]
#: a per-spawn syscall "costs throughput" if removing it speeds spawning up by this much
SYSCALL_COSTS = 1.2
#: one scheduler "beats" SMP if the single-CPU rate is at least this multiple of the free one
SINGLE_BEATS = 1.1
#: the seed's create+destroy cost: "about" it is two-sided, within the margin its claims.yaml
#: entry fixes from the seed's own figures (:func:`_about`)
SEED_US = 0.5


def plot(table: pd.DataFrame, out_dir: Path, experiment: Experiment) -> list[Path]:
    """Rate per primitive by chains (log scale), per binding; CPU per spawn and its sys share."""
    import seaborn as sns

    written: list[Path] = []
    order = plot_setup(table)
    hue_order = [v for v in ORDER if v in set(table["variant"])]
    palette = palette_for(hue_order)
    grid = sns.relplot(data=interval_rows(table, "rate"), x="chains", y="rate", hue="variant",
                       hue_order=hue_order, palette=palette, style="runtime", col="binding",
                       col_order=order, kind="line", marker="o", height=3.2, aspect=0.9,
                       err_style="bars", **INTERVAL_BARS)
    grid.set(xscale="log", yscale="log", xlabel="chains running at once",
             ylabel="spawns/s (log)")
    grid.figure.suptitle("spawn: create+teardown rate by primitive and chains, per binding "
                         "(seed, Erlang: ~340,000/s)", y=1.04)
    written += save(grid.figure, out_dir, "rate_by_chains")

    if "cpu_us_per_spawn" in table and table["cpu_us_per_spawn"].notna().any():
        one = table[table["chains"] == table["chains"].min()]
        data = one.assign(sys_pct=100 * one["sys_share"])
        grid = sns.catplot(data=data, x="variant", y="cpu_us_per_spawn", hue="binding",
                           hue_order=order, order=hue_order, kind="bar", height=3.4, aspect=2.2)
        grid.set(yscale="log", xlabel="", ylabel="CPU microseconds per spawn (log)")
        grid.figure.suptitle(f"spawn: CPU cost of one spawn, {int(one['chains'].min())} chain "
                             f"(seed: ~{SEED_US} us, half of it sys)", y=1.04)
        for ax in grid.axes.flat:
            ax.tick_params(axis="x", rotation=30)
        written += save(grid.figure, out_dir, "cpu_per_spawn")
    return written


def _about(name: str, hyp: str) -> str:
    """"about SEED_US us" in words: the band its ledger entry's margin gives (stats.band)."""
    entry = ledger.entry(name, hyp)
    margin = entry.margin if entry is not None else ledger.DEFAULT_MARGIN
    low, high = band(SEED_US, margin)
    return (f"about {SEED_US} us of wall time per spawn: within {margin:.0%} of it, a factor "
            f"{1 + margin:g} either way ({low:.3f}-{high:.3f} us)")


def _us_per_spawn(rows: pd.DataFrame) -> tuple[pd.Series, Estimate]:
    """(the fastest row, wall microseconds per spawn of the best rate, with its interval)."""
    best, best_rate = best_row(rows)
    return best, 1e6 / best_rate


def _sides(variant: str) -> dict[str, dict]:
    """1-chain rows of ``variant`` on one CPU and free, for :func:`why`."""
    return {b: {"variant": variant, "chains": 1, "binding": b} for b in ("single", "none")}


def _any_rate(rows: pd.DataFrame) -> bool:
    """Whether any row has a rate, so a best-of can name its row (idxmax of NaNs raises)."""
    return "rate" in rows and rows["rate"].notna().any()


def claims(table: pd.DataFrame, experiment: Experiment) -> list[Claim]:
    """A per-spawn syscall costs throughput; one CPU beats SMP for a chain; spawn cost.

    Each compared figure is an :class:`~perfgrid.analyse.stats.Estimate` from the rows' raw values,
    and each verdict comes from its 95 % interval (:func:`~perfgrid.analyse.analysis.judged`).
    """
    out: list[Claim] = []
    name = experiment.name
    free = table[table["binding"] == "none"] if len(table) else table

    hyp = ("A syscall on the spawn path costs throughput (seed: removing a clock_gettime per "
           "spawn tripled the rate)")
    crit = ("asyncio_task, binding none: with 1 chain the event loop polls epoll once per "
            "spawn, with 100 chains once per 100; rate(100 chains) >= "
            f"{SYSCALL_COSTS}x rate(1 chain)")
    one, many = (rate_at(free, variant="asyncio_task", chains=c) for c in (1, 100))
    if one and many:
        sys_text = ""
        if "sys_share" in free:
            rows = free[free["variant"] == "asyncio_task"]
            shares = {c: rows[rows["chains"] == c]["sys_share"].max() for c in (1, 100)}
            sys_text = f"; sys {shares[1]:.0%} vs {shares[100]:.0%}"
        saved_us = (1 / float(one) - 1 / float(many)) * 1e6
        out.append(judged(name, hyp, crit, many / one, ">=", SYSCALL_COSTS,
                          f"({one:,.0f} -> {many:,.0f} spawns/s; "
                          f"{saved_us:.2f} us per spawn saved{sys_text})",
                          why=why(free, ("task_clock_ns_per_unit", "cpu_sys_share",
                                         "ctx_switches_per_unit"),
                                  {f"{c} chain{'s' * (c > 1)}": {"variant": "asyncio_task",
                                                                 "chains": c}
                                   for c in (1, 100)})))
    else:
        out.append(inconclusive(name, hyp, crit, "no asyncio_task rows at 1 and 100 chains "
                                "under binding none"))

    for variant in ("native_pthread", "thread"):
        runtime = experiment.runtime({"variant": variant})
        hyp = ("One scheduler beats SMP for a serial chain (seed: 749,027 vs 402,022 spawns/s, "
               "1 vs 2 schedulers)")
        crit = (f"{variant}, 1 chain: rate with every unit on one CPU (single) >= "
                f"{SINGLE_BEATS}x the rate with the OS free to move them (none)")
        single = rate_at(table, variant=variant, chains=1, binding="single") if len(table) else None
        smp = rate_at(table, variant=variant, chains=1, binding="none") if len(table) else None
        if single and smp:
            out.append(judged(name, hyp, crit, single / smp, ">=", SINGLE_BEATS,
                              f"({single:,.0f} vs {smp:,.0f} spawns/s)", runtime,
                              why=why(table, SCHEDULING_COUNTERS, _sides(variant))))
        else:
            out.append(inconclusive(name, hyp, crit, f"no 1-chain {variant} rows under both "
                                    "single and none", runtime))

    hyp = f"Creating and tearing down a unit costs about {SEED_US} us (seed, Erlang)"
    crit = f"the fastest primitive, 1 chain: {_about(name, hyp)}"
    ports = without_erlang(table)
    rows = ports[ports["chains"] == 1] if len(ports) else ports
    if len(rows) and _any_rate(rows):
        best, us = _us_per_spawn(rows)
        out.append(judged(name, hyp, crit, us, "~", SEED_US,
                          f"({best['variant']}, {best['binding']}; best of {len(rows)} "
                          "1-chain rows)", str(best.get("runtime", "python")), unit=" us",
                          why=why(rows, COST_COUNTERS,
                                  {str(best["variant"]): {"variant": best["variant"],
                                                          "binding": best["binding"]}})))
    elif len(rows):
        out.append(inconclusive(name, hyp, crit, "no estimate (missing or NaN rate) in the "
                                "1-chain rows"))
    else:
        out.append(inconclusive(name, hyp, crit, "no 1-chain rows"))
    erl = by_runtime(table, "erlang") if len(table) else table
    if len(erl):
        out += _erlang_claims(erl, name)
    return out


def _erlang_claims(erl: pd.DataFrame, name: str) -> list[Claim]:
    """The seed's claims on Erlang today, as experiment ``name``'s: one scheduler beats
    SMP; ~0.5 us per spawn."""
    out: list[Claim] = []
    hyp = ("One scheduler beats SMP for a serial chain of Erlang processes (seed: 749,027 vs "
           "402,022 spawns/s, 1 vs 2 schedulers)")
    crit = (f"erlang, 1 chain: rate with one scheduler (single, +S 1) >= {SINGLE_BEATS}x the "
            "rate with one unbound scheduler per CPU (none)")
    single = rate_at(erl, chains=1, binding="single")
    smp = rate_at(erl, chains=1, binding="none")
    if single and smp:
        bound = rate_at(erl, chains=1, binding="compact")
        extra = f"; bound SMP (+sbt db) {bound:,.0f}" if bound else ""
        out.append(judged(name, hyp, crit, single / smp, ">=", SINGLE_BEATS,
                          f"({single:,.0f} vs {smp:,.0f} spawns/s{extra})", "erlang",
                          why=why(erl, SCHEDULING_COUNTERS, _sides("erlang"))))
    else:
        out.append(inconclusive(name, hyp, crit, "no 1-chain erlang rows under both single "
                                "and none", "erlang"))

    hyp = f"Creating and tearing down an Erlang process costs about {SEED_US} us (seed)"
    crit = f"erlang, 1 chain, best binding: {_about(name, hyp)}"
    rows = erl[erl["chains"] == 1]
    if len(rows) and _any_rate(rows):
        best, us = _us_per_spawn(rows)
        out.append(judged(name, hyp, crit, us, "~", SEED_US,
                          f"({best['binding']}, {best['rate']:,.0f} spawns/s)", "erlang",
                          unit=" us", why=why(rows, COST_COUNTERS,
                                              {best["binding"]: {"binding": best["binding"]}})))
    elif len(rows):
        out.append(inconclusive(name, hyp, crit, "no estimate (missing or NaN rate) in the "
                                "1-chain erlang rows", "erlang"))
    else:
        out.append(inconclusive(name, hyp, crit, "no 1-chain erlang rows", "erlang"))
    return out


def notes(table: pd.DataFrame, experiment: Experiment) -> list[str]:
    """Python beside C for the OS primitives, where both were measured."""
    out = []
    rows = table[(table["chains"] == 1) & (table["binding"] == "single")] if len(table) else table
    for py, c in (("thread", "native_pthread"), ("fork", "native_fork"),
                  ("posix_spawn", "native_posix_spawn")):
        a, b = rate_at(rows, variant=py), rate_at(rows, variant=c)
        if a and b:
            out.append(f"`{py}` vs `{c}` (1 chain, one CPU): {a:,.0f} vs {b:,.0f} spawns/s "
                       f"({a / b:.2f}x).")
    return out
