"""http: the seed's E5 a claims (no published numbers), this machine's plots and verdicts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from perfgrid.analyse.analysis import (
    INTERVAL_BARS,
    Claim,
    across,
    by_runtime,
    claimed_rows,
    inconclusive,
    interval_rows,
    judged,
    median_of,
    plot_setup,
    rate_estimates,
    save,
    why,
    without_erlang,
)
from perfgrid.analyse.stats import Estimate, geometric_mean, reduce
from perfgrid.experiments.base import Experiment

SOURCE = ("seed E5 a (004_cee54dc8e5b26200.txt), 2x quad Xeon E5450, R12B-5 vs R13A, "
          "4 vs 8 schedulers, ab -c up to 1000 -n 100000")
#: the seed shows E5 a only as charts; it prints no figure we could quote as a row
SEED_ROWS: list[dict] = []
#: a bound configuration gets this share more requests/s than the unbound one to "help"
HELPS = 1.05
MORE_WORKERS_HELP = 1.10
#: requests/s at 1000 connections at most this share of those at 500: a steep drop
STEEP = 0.70
#: what a request costs the machine: CPUs kept busy, the scheduler's switches and moves,
#: and CPU time (server and client together: the counting pass counts both)
REQUEST_COUNTERS = ("cpus_utilized", "ctx_switches_per_unit", "migrations_per_unit",
                    "task_clock_ns_per_unit")
#: the seed's binding (thread_no_node_processor_spread) first; single (every worker on one
#: CPU) is no binding a claim reads (perfgrid.experiments.http.CLAIM_LOAD)
BOUND = ("spread", "compact")



#: open-loop latency columns of a step, in the order the report shows them
OPENLOOP_LATENCIES = {"p50_ms": "p50", "p90_ms": "p90", "p99_ms": "p99", "p99_9_ms": "p99.9",
                      "max_ms": "max"}


def openloop_steps(table: pd.DataFrame) -> pd.DataFrame:
    """One row per step of every open-loop sweep (the ``openloop_steps`` records of its
    row: the table's ``records`` side table, or an older table's JSON)."""
    from perfgrid.analyse.aggregate import listed

    if table.empty or "openloop_steps" not in table:
        return pd.DataFrame()
    rows = []
    for _, r in table[table["openloop_steps"].notna()].iterrows():
        for step in listed(r["openloop_steps"]) or []:
            step = {k: v for k, v in step.items() if k != "hdr"}
            rows.append({"variant": r["variant"], "keepalive": r["keepalive"],
                         "binding": r["binding"], "workers": int(r["workers"]),
                         "concurrency": int(r["concurrency"]), **step})
    return pd.DataFrame(rows)


def tables(table: pd.DataFrame, experiment: Experiment) -> list[tuple[str, str, pd.DataFrame]]:
    """The report's extra table: open-loop latency percentiles against achieved throughput."""
    steps = openloop_steps(table)
    if steps.empty:
        return []
    shown = steps[["variant", "workers", "keepalive", "concurrency", "offered_rate",
                   "achieved_rate", *OPENLOOP_LATENCIES, "send_lag_p99_ms", "unsent",
                   "saturated"]].rename(columns={
                       "offered_rate": "offered req/s", "achieved_rate": "achieved req/s",
                       **{k: f"{v} (ms)" for k, v in OPENLOOP_LATENCIES.items()},
                       "send_lag_p99_ms": "client send lag p99 (ms)",
                       "concurrency": "connections"})
    note = ("The openloop client sends each request at its scheduled time whatever the "
            "answers and measures latency from that time (no coordinated omission), into an "
            "HDR histogram; one step per offered rate, lowest first, until the first "
            "saturated step (achieved below 90 % of offered, or requests unsent at the "
            "step's deadline). A large client send lag says the client, not the server, "
            "fell behind (it shares the CPUs).")
    return [("Open-loop latency against achieved throughput", note,
             shown.round(2).reset_index(drop=True))]


def _openloop_plot(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Latency percentiles against achieved requests/s, one line per percentile and server."""
    import seaborn as sns

    steps = openloop_steps(table)
    if steps.empty:
        return []
    long = steps.melt(id_vars=["variant", "workers", "keepalive", "concurrency",
                               "achieved_rate", "offered_rate"],
                      value_vars=list(OPENLOOP_LATENCIES), var_name="percentile",
                      value_name="latency_ms")
    long["percentile"] = long["percentile"].map(OPENLOOP_LATENCIES)
    long["krps"] = long["achieved_rate"] / 1e3
    long["server"] = (long["variant"] + ", " + long["workers"].astype(str) + " worker(s), "
                      + "keep-alive " + long["keepalive"].astype(str) + ", "
                      + long["concurrency"].astype(str) + " connections")
    grid = sns.relplot(data=long, x="krps", y="latency_ms", hue="percentile",
                       hue_order=list(OPENLOOP_LATENCIES.values()), col="server",
                       col_wrap=min(2, long["server"].nunique()), kind="line", markers=True,
                       sort=False, height=3.2, aspect=1.3, palette="flare")
    grid.set(yscale="log", xlabel="achieved requests/s (thousands)", ylabel="latency (ms)")
    grid.figure.suptitle("http, open loop: latency from the scheduled time against achieved "
                         "throughput (one point per offered rate)", y=1.03)
    return save(grid.figure, out_dir, "openloop_latency")


def _load_label(table: pd.DataFrame) -> pd.Series:
    return table["client"].astype(str) + ", keep-alive " + table["keepalive"].astype(str)


def plot(table: pd.DataFrame, out_dir: Path, experiment: Experiment) -> list[Path]:
    """Requests/s, p99 latency and CPU used, each vs concurrency, per workers and binding."""
    import seaborn as sns

    written: list[Path] = []
    order = plot_setup(table)
    workers = sorted(table["workers"].astype(int).unique())
    data = table.assign(load=_load_label(table), krps=table["rate"] / 1e3,
                        workers=table["workers"].astype(int).astype(str))
    with_intervals = interval_rows(data, "krps", 1e3)
    facets = {"col": "variant", "row": "load", "height": 3.0, "aspect": 1.25,
              "hue_order": [str(w) for w in workers], "palette": "deep",
              "col_order": sorted(data["variant"].unique()),
              "row_order": sorted(data["load"].unique()),
              "facet_kws": {"sharey": False, "margin_titles": True}}

    grid = sns.relplot(data=with_intervals, x="concurrency", y="krps", hue="workers",
                       style="binding", style_order=order, kind="line", markers=True,
                       dashes=True, err_style="bars",
                       **INTERVAL_BARS, **facets)
    grid.set(xscale="log", xlabel="concurrency (connections)", ylabel="requests/s (thousands)")
    for ax in grid.axes.flat:
        ax.set_ylim(bottom=0)
    grid.figure.suptitle("http: requests/s by concurrency, per workers and binding "
                         "(bars: 95 % intervals)", y=1.02)
    written += save(grid.figure, out_dir, "rate_by_concurrency")

    if "latency_p99_ms" in data and data["latency_p99_ms"].notna().any():
        grid = sns.relplot(data=data, x="concurrency", y="latency_p99_ms", hue="workers",
                           style="binding", kind="line", markers=True, **facets)
        grid.set(xscale="log", yscale="log", xlabel="concurrency (connections)",
                 ylabel="p99 latency (ms)")
        grid.figure.suptitle("http: 99th percentile latency by concurrency", y=1.02)
        written += save(grid.figure, out_dir, "latency_p99_by_concurrency")

    if {"server_cpus", "client_cpus"} <= set(data.columns):
        cpu = data.melt(id_vars=["variant", "load", "binding", "workers", "concurrency"],
                        value_vars=["server_cpus", "client_cpus"], var_name="process",
                        value_name="cpus_used")
        cpu["process"] = cpu["process"].str.removesuffix("_cpus")
        grid = sns.relplot(data=cpu, x="concurrency", y="cpus_used", hue="workers",
                           style="process", kind="line", markers=True, errorbar=None,
                           **facets)
        grid.set(xscale="log", xlabel="concurrency (connections)",
                 ylabel="CPUs used (CPU-seconds per second)")
        for ax in grid.axes.flat:
            ax.set_ylim(bottom=0)
        grid.figure.suptitle("http: CPU the server workers and the load generator got "
                             "(mean over bindings)", y=1.02)
        written += save(grid.figure, out_dir, "cpu_by_concurrency")
    written += _openloop_plot(table, out_dir)
    return written


def _ratios(rows: pd.DataFrame, axis: str, num, den,
            axes: tuple[str, ...]) -> list[tuple[dict, Estimate]]:
    """rate(axis=num) / rate(axis=den), with its interval, for every setting of the other
    ``axes`` (the experiment's) that has both (the best row where a setting has several)."""
    return [(key, reduce(rate_estimates(a), np.max) / reduce(rate_estimates(b), np.max))
            for key, a, b in across(rows, axis, num, den, axes)]


#: the reductions :func:`_spread` states ratios by, each with its words
REDUCTION_WORDS: dict[Callable[[list[Estimate]], Estimate], str] = {
    median_of: "median", geometric_mean: "geometric mean"}


def _spread(ratios: list[Estimate],
            typical: Callable[[list[Estimate]], Estimate] = median_of) -> str:
    """The ratios in words: their ``typical`` value (notes: the median; claims: the
    geometric mean, as judged), and range."""
    values = [r.value for r in ratios if np.isfinite(r.value)]
    missing = len(ratios) - len(values)
    span = f"range {min(values):.2f}-{max(values):.2f}" if values else "no finite ratio"
    found, words = typical(ratios), REDUCTION_WORDS[typical]
    return (f"{words} {found.show(unit='x')} over {len(ratios)} point(s), {span}"
            + (f", {missing} NaN" if missing else ""))


def _typical(ratios: list[Estimate]) -> str:
    return _spread(ratios, geometric_mean)


def _seed_rows_or_all(table: pd.DataFrame,
                      experiment: Experiment) -> tuple[pd.DataFrame, str]:
    rows = claimed_rows(table, experiment)
    if rows.empty:
        return table, ("no claim rows (asyncio or Erlang, ab without keep-alive, more than one "
                       "connection, unbound, spread or compact); all loads used")
    return rows, ""


def claims(table: pd.DataFrame, experiment: Experiment) -> list[Claim]:
    """More workers help; binding helps; a steep drop from 500 to 1000 connections: on the
    Python servers and, where measured, on the Erlang server (the seed's own design, whose
    workers are the VM's schedulers). Every verdict is decided by the 95 % interval of the
    typical ratio over the points compared: their geometric mean, paired round by round
    (a median over points takes simultaneous bounds, too wide to decide at three rounds)."""
    out = _claims(without_erlang(table), "python", experiment)
    erl = by_runtime(table, "erlang") if not table.empty else table
    return out + (_claims(erl, "erlang", experiment) if not erl.empty else [])


def _claims(table: pd.DataFrame, runtime: str, experiment: Experiment) -> list[Claim]:
    """The seed's three claims on the rows of one runtime."""
    out: list[Claim] = []
    name, axes = experiment.name, experiment.axes
    rows, note = _seed_rows_or_all(table, experiment) if not table.empty else (table, "")

    hyp = "More server workers (the seed's schedulers) give more requests/s"
    crit = (f"ab without keep-alive: the best worker count above 1 reaches >= "
            f"{MORE_WORKERS_HELP:.2f}x the rate of 1 worker, geometric mean over the points "
            "(2+ connections) that have both")
    counts = sorted(int(w) for w in rows["workers"].unique() if w > 1) if not rows.empty else []
    found = [(w, [r for _, r in _ratios(rows, "workers", w, 1, axes)]) for w in counts]
    found = [(w, ratios) for w, ratios in found if ratios]
    if found:
        best = reduce([geometric_mean(r) for _, r in found], np.max)
        most = max(w for w, _ in found)
        out.append(judged(name, hyp, crit, best, ">=", MORE_WORKERS_HELP,
                          "best of the means; " + "; ".join(f"{w} workers / 1: {_typical(r)}"
                                                            for w, r in found),
                          runtime=runtime, note=note,
                          why=why(rows, REQUEST_COUNTERS,
                                  {"1 worker": {"workers": 1},
                                   f"{most} workers": {"workers": most}})))
    else:
        out.append(inconclusive(name, hyp, crit, "the grid has no point measured with both "
                                "1 worker and more", runtime))

    hyp = "Binding the workers to CPUs gives more requests/s"
    crit = (f"rate bound / rate unbound (binding none) >= {HELPS:.2f}x, geometric mean over the "
            "points that have both; the seed's spread binding if measured, else compact")
    found = [(kind, [r for _, r in _ratios(rows, "binding", kind, "none", axes)]) for kind in BOUND]
    found = [(kind, ratios) for kind, ratios in found if ratios]
    if found:
        kind, ratios = found[0]
        others = "; ".join(f"{k}: {_typical(r)}" for k, r in found[1:])
        out.append(judged(name, hyp, crit, geometric_mean(ratios), ">=", HELPS,
                          f"{kind}/none: {_typical(ratios)}" + (f" ({others})" if others else ""),
                          runtime=runtime, note=note,
                          why=why(rows, REQUEST_COUNTERS,
                                  {kind: {"binding": kind}, "none": {"binding": "none"}})))
    else:
        out.append(inconclusive(name, hyp, crit, "the grid has no bound and unbound rows at the "
                                "same server, workers and concurrency (bound: spread or "
                                "compact)", runtime))

    hyp = "Requests/s drop steeply between 500 and 1000 concurrent connections"
    crit = (f"rate at concurrency 1000 <= {STEEP:.2f}x the rate at 500, geometric mean over "
            "the points that have both")
    ratios = [r for _, r in _ratios(rows, "concurrency", 1000, 500, axes)]
    if ratios:
        out.append(judged(name, hyp, crit, geometric_mean(ratios), "<=", STEEP,
                          f"1000/500: {_typical(ratios)}", runtime=runtime, note=note,
                          why=why(rows, REQUEST_COUNTERS,
                                  {f"c={c}": {"concurrency": c} for c in (500, 1000)})))
    else:
        out.append(inconclusive(name, hyp, crit, "the grid lacks concurrency 500 and 1000 "
                                "at the same point", runtime))
    return out


def notes(table: pd.DataFrame, experiment: Experiment) -> list[str]:
    """What the report should say besides the verdicts."""
    axes = experiment.axes
    out = [f"The seed ({SOURCE}) publishes E5 a only as charts, with no figures in the text: "
           "there are no seed rows to compare with, only its claims (R13A beat R12B-5, "
           "binding helped, R13A with 8 schedulers dropped steeply between 500 and 1000 "
           "concurrent requests)."]
    if table.empty:
        return out
    for column, what in (("errors", "failed requests"), ("non2xx", "non-2xx answers")):
        if column in table and table[column].fillna(0).sum() > 0:
            bad = table[table[column].fillna(0) > 0]
            out.append(f"{int(bad[column].sum())} {what} in {len(bad)} point(s), e.g. "
                       + ", ".join(f"{r.variant}/{r.client}/keep-alive {r.keepalive}/"
                                   f"{r.workers}w/c={r.concurrency}: {int(r[column])}"
                                   for _, r in bad.head(3).iterrows()) + ".")
    if "ok" in table:
        out.append(f"Every load passed the correctness check (the counter went up by the "
                   f"number of 2xx answers; with the builtin client, which sees the values, no "
                   f"value was handed out twice): {int(table['ok'].sum()):,} increments.")
    if {"server_cpus", "client_cpus"} <= set(table.columns):
        cpus = table["server_cpus"] + table["client_cpus"]
        top = table.loc[table["server_cpus"].idxmax()]
        out.append(f"The server workers got at most {table['server_cpus'].max():.2f} CPUs "
                   f"({top['workers']} worker(s), c={top['concurrency']}); the load generator "
                   f"took {table['client_cpus'].median():.2f} CPUs (median), so server plus "
                   f"client used {cpus.median():.2f} CPUs of the machine (median).")
    ratios = [r for _, r in _ratios(table, "variant", "uvloop", "asyncio", axes)]
    if ratios:
        out.append(f"uvloop over asyncio: {_spread(ratios)}.")
    ratios = [r for _, r in _ratios(table, "keepalive", "on", "off", axes)]
    if ratios:
        out.append(f"keep-alive on over off: {_spread(ratios)}.")
    steps = openloop_steps(table)
    for variant, found in steps.groupby("variant") if not steps.empty else []:
        top = found.loc[found["achieved_rate"].idxmax()]
        last = found.iloc[-1]
        out.append(f"Open loop, {variant}: at most {top['achieved_rate']:,.0f} requests/s "
                   f"achieved (offered {top['offered_rate']:,.0f}; p99 {top['p99_ms']:.1f} ms, "
                   f"max {top['max_ms']:.1f} ms); the sweep "
                   + ("saturated" if last["saturated"] else "did not saturate")
                   + f" at {last['offered_rate']:,.0f} offered (client send lag p99 "
                   f"{last['send_lag_p99_ms']:.1f} ms).")
    ratios = [r for _, r in _ratios(table, "client", "builtin", "ab", axes)]
    if ratios:
        out.append(f"builtin client over ab: {_spread(ratios)} (the builtin client is Python "
                   "and competes with the server for the same CPUs).")
    return out
