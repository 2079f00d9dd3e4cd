"""http (seed E5 a): a counter served over HTTP, one SQLite transaction per request.

Stresses a Python HTTP server under many concurrent connections: accepting,
parsing and answering in an event loop (asyncio or uvloop), plus a write
lock shared by ``workers`` processes on one port (SO_REUSEPORT), each bound
per ``binding``. The load comes from ``ab`` (as in the seed) or a builtin
asyncio client, with and without keep-alive. Every load is checked: the
counter must equal the successful answers, with no value handed out twice.
The ``openloop`` client sends at fixed times whatever the answers (no
coordinated omission) and sweeps offered rates up to saturation
(:mod:`.openloop`); its row's rate is the highest rate it achieved.
The ``erlang`` server is the seed's own design (erlang/pg_http.erl here):
gen_tcp on one VM with ``workers`` schedulers, one mnesia transaction per
request (an ETS counter if mnesia cannot start, said in the row), under the
same loads and the same check.

This module is the experiment; the rest of the package is what its jobs run:
:mod:`.counter` (the SQLite counter), :mod:`.server` (one worker's HTTP),
:mod:`.worker` (a worker process), :mod:`.supervisor` (workers sharing one port),
:mod:`.load` (the closed-loop clients ab and builtin), :mod:`.openloop` (the
open-loop client).
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import psutil

from perfgrid.experiments.base import Case, Experiment, Metadata, Point, Tool
from perfgrid.experiments.http import load
from perfgrid.experiments.http.counter import (
    BUSY_TIMEOUT_MS,
    check_database,
    init_database,
    read_counter,
)
from perfgrid.experiments.http.server import BACKLOG, somaxconn
from perfgrid.experiments.http.server import SERVERS as PYTHON_SERVERS
from perfgrid.experiments.http.supervisor import ServerGroup
from perfgrid.kit import binding, erlang
from perfgrid.kit.eventloops import uvloop_missing

if TYPE_CHECKING:
    from perfgrid.kit.paths import Layout

SERVERS = (*PYTHON_SERVERS, "erlang")
#: acceptor processes of the Erlang server waiting on the listening socket
ERLANG_ACCEPTORS = 16
#: the open-loop sweep when the config names none: offered requests/s, seconds per step
OPENLOOP_DEFAULTS = {"rates": [500, 1000, 2000, 4000, 8000], "duration_s": 2.0}
KEEPALIVE = ("off", "on")
#: config list key -> grid axis; an extra grid may set any of them, and ``requests``
LIST_KEYS = {"servers": "variant", "clients": "client", "keepalive": "keepalive",
             "bindings": "binding", "workers": "workers", "concurrency": "concurrency"}
DEFAULT_TIMEOUT_S = 300.0
#: requests of a counting pass (perfgrid.measure.counters): counts per request settle within a
#: few thousand, and a 100,000-request load would cost another minute per point
COUNT_REQUESTS = 5000


def keepalive_word(value: Any) -> str:
    """``off``/``on`` from a config value (YAML 1.1 reads bare off/on as booleans)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value in KEEPALIVE:
        return value
    raise ValueError(f"http.keepalive: {value!r} is not one of off, on")


class CorrectnessError(RuntimeError):
    """A failed load: requests failed, or the load's answers disagree with the counter."""


def check_load(result: load.LoadResult, counter: int) -> None:
    """Fail unless every request succeeded, every increment was answered exactly once
    and the load finished.

    A point's rate is requests over wall time, so a load with failed requests
    would be recorded as fast (errors come back quickly): any error or non-2xx
    answer fails the job with the numbers. ``counter`` is how many increments
    the server committed during the load.
    """
    problems = []
    if result.ok == 0 or result.errors or result.non2xx:
        problems.append(f"{result.errors} errors and {result.non2xx} non-2xx answers: "
                        f"{result.ok} of {result.requests} requests succeeded"
                        + _error_kinds(result))
    if result.timed_out or result.unanswered:
        problems.append(f"the deadline cut the load: {result.completed} answers and "
                        f"{result.errors} errors for {result.requests} requests")
    if counter != result.ok:
        problems.append(f"counter went up by {counter} but {result.ok} requests were "
                        f"answered 2xx ({counter - result.ok:+d}: "
                        f"{'lost answers' if counter > result.ok else 'lost increments'})")
    if result.values is not None:
        distinct = set(result.values)
        if len(distinct) != len(result.values):
            problems.append(f"{len(result.values) - len(distinct)} counter values were "
                            f"handed out twice")
        outside = [v for v in distinct if not 0 <= v < counter]
        if outside:
            problems.append(f"{len(outside)} values outside 0..{counter - 1}, e.g. {outside[0]}")
    if problems:
        raise CorrectnessError(
            f"http load ({result.client}, c={result.concurrency}, "
            f"keepalive={'on' if result.keepalive else 'off'}): " + "; ".join(problems))


def _error_kinds(result: load.LoadResult) -> str:
    """`` (kind: count, ...)`` of the load's failures, where the client tells them apart."""
    kinds = {k: v for k, v in result.detail.items()
             if k.startswith(("error_", "fail_", "ab_failures")) and v}
    note = ("; ab counts failures, not failed requests, so the errors are an upper bound"
            if result.detail.get("ab_failures", 0) > result.errors else "")
    return f" ({', '.join(f'{k}: {v}' for k, v in kinds.items())}{note})" if kinds else ""


#: how the seed loaded its server: ab without keep-alive; the points so loaded are the
#: ones the claims compare (analysis.py) and the ones the kernel counters count
SEED_LOAD = {"client": "ab", "keepalive": "off"}
#: the servers and bindings a claim compares: asyncio, the direct port of the seed's
#: server, and Erlang, the seed's own; unbound and the bindings the claims read (the
#: seed's spread; compact, Erlang's +sbt db). uvloop and the single-CPU binding are
#: measured once, for the plots and the notes: no claim reads them, and their rounds
#: took ~2 of the 90 minutes of a full run
CLAIM_LOAD = {**SEED_LOAD, "variant": ["asyncio", "erlang"],
              "binding": ["none", "spread", "compact"]}
#: rounds of a Python claim point, rather than ``measure.claims.rounds``: three, as the
#: seed ran ab three times (a load takes 4-25 s here); Erlang's loads (~3 s) get them all
PYTHON_ROUNDS = 3


class Http(Experiment):
    name = "http"
    packages = ("uvloop",)  # its uvloop variant (perfgrid.kit.eventloops)
    report_position = 60
    axes = ("variant", "client", "keepalive", "binding", "workers", "concurrency")
    int_axes = frozenset({"workers", "concurrency"})
    #: analysis.py's claims use the points loaded as the seed loaded its server: ab
    #: without keep-alive (the seed ran ab three times for each concurrency), with more
    #: than one connection (:meth:`used_by_claims`), of the servers and bindings in
    #: CLAIM_LOAD; the kernel counters count every seed-loaded point
    claim_points = (CLAIM_LOAD,)
    counter_points = (SEED_LOAD,)
    work_unit = "requests"
    rate_unit = "requests/s"
    erlang_variants = ("erlang",)
    erlang_module = "pg_http"
    path_keys = ("database",)

    def used_by_claims(self, point: Point) -> bool:
        """A seed-loaded point with more than one connection: one connection is one request
        at a time, so a second worker or a bound CPU has nothing to share, and a
        seed-scale load at one connection (35-60 s here) is measured once, for the plots."""
        return super().used_by_claims(point) and int(point["concurrency"]) > 1

    def claim_rounds(self, point: Point, rounds: int) -> int:
        """A Python load lasts 4-25 s: at most PYTHON_ROUNDS rounds, as the seed ran ab."""
        return rounds if point["variant"] in self.erlang_variants else min(rounds, PYTHON_ROUNDS)

    def grids(self, section: dict[str, Any]) -> list[dict[str, Any]]:
        """The main grid (the section's lists) and each extra grid, defaults filled in."""
        main = {key: section[key] for key in (*LIST_KEYS, "requests")}
        out = []
        for grid in [main] + [{**main, **extra} for extra in section.get("extra_grids") or []]:
            out.append({**grid, "keepalive": [keepalive_word(v) for v in grid["keepalive"]]})
        return out

    def claim_group(self, point: Point) -> Hashable | None:
        """One server's claim points run back to back: its claims compare its worker
        counts, bindings and concurrencies."""
        return point["variant"]

    def points(self, section: dict[str, Any], config: dict[str, Any]) -> list[Point]:
        out: dict[tuple, Point] = {}
        for number, grid in enumerate(self.grids(section)):
            where = "http" if number == 0 else f"http.extra_grids[{number - 1}]"
            too_many = [c for c in grid["concurrency"] if c > grid["requests"]]
            if too_many:
                raise ValueError(f"{where}.concurrency: {too_many} above requests "
                                 f"({grid['requests']}); ab refuses a concurrency above "
                                 f"its request count")
            for values in itertools.product(*(grid[key] for key in LIST_KEYS)):
                point = dict(zip(LIST_KEYS.values(), values, strict=True))
                out.setdefault(tuple(point[a] for a in self.axes),
                               {a: point[a] for a in self.axes})
        return self.keep_runtimes(list(out.values()), section)

    def requests_for(self, section: dict[str, Any], point: Point) -> int:
        """The request count of ``point``: that of the first grid that contains it."""
        for grid in self.grids(section):
            if all(point[axis] in grid[key] for key, axis in LIST_KEYS.items()):
                return int(grid["requests"])
        raise KeyError(f"http: {point} is in no grid of the config")

    def options(self, section: dict[str, Any], point: Point, database: str) -> dict[str, str]:
        """The ``--option`` values of one job (everything but the axes).

        Only openloop points get the sweep's options, so the other points' jobs keep
        their exact parameters (and Snakemake does not rerun them for a new key).
        """
        out = {"requests": str(self.requests_for(section, point)), "database": database,
               "port": str(section.get("port", 0)),
               "timeout_s": str(section.get("timeout_s", DEFAULT_TIMEOUT_S))}
        if point["client"] == "openloop":
            sweep = {**OPENLOOP_DEFAULTS, **(section.get("openloop") or {})}
            out["openloop_rates"] = ",".join(f"{r:g}" for r in sweep["rates"])
            out["openloop_duration_s"] = f"{sweep['duration_s']:g}"
        return out

    def job_options(self, point: Point, section: dict[str, Any], config: dict[str, Any],
                    layout: Layout) -> dict[str, str]:
        return self.options(section, point, self.database(section, layout))

    @staticmethod
    def database(section: dict[str, Any], layout: Layout) -> str:
        """The SQLite file of the counter: ``http.database``, else the result set's."""
        return section.get("database") or str(layout.data_file("http.sqlite"))

    def check_files(self, section: dict[str, Any], layout: Layout) -> None:
        """Only a database perfgrid created may be at ``http.database`` (the counter is
        reset before every load): :func:`.counter.check_database`."""
        check_database(self.database(section, layout))

    def tools(self) -> dict[str, Tool]:
        """ab, the load generator of the ``ab`` client."""
        return {"ab": Tool(load.missing_ab, load.ab_version, "ApacheBench (ab)",
                           "the http load generator", "https://httpd.apache.org/",
                           table_column="client_version")}

    def uncountable(self, point: Point) -> str | None:
        if point["client"] == "openloop":
            return "not counted: an open-loop sweep is not one loop of its requests"
        return None

    def counting_options(self, point: Point, options: dict[str, str]) -> dict[str, str]:
        requests = int(options.get("requests", COUNT_REQUESTS))
        fewer = max(point["concurrency"], min(requests, COUNT_REQUESTS))  # ab: c <= n
        return {**options, "requests": str(fewer)}

    def unavailable(self, point: Point) -> str | None:
        if point["variant"] == "uvloop" and (why := uvloop_missing()):
            return why
        if point["variant"] == "erlang" and (why := erlang.missing()):
            return why
        if point["client"] == "ab":
            return load.missing_ab()
        if point["client"] == "openloop":
            try:
                import hdrh.histogram  # noqa: F401
            except ImportError:
                return "hdrhistogram not installed (pip install hdrhistogram): no open-loop load"
        return None

    def prepare(self, point: Point, options: dict[str, str]) -> Case:
        requests = int(options.get("requests", 1000))
        port = int(options.get("port", 0))
        timeout_s = float(options.get("timeout_s", DEFAULT_TIMEOUT_S))
        database = options["database"]
        client, concurrency = point["client"], point["concurrency"]
        keepalive = keepalive_word(point["keepalive"])
        if point["workers"] < 1:
            raise ValueError(f"http.workers: must be at least 1, got {point['workers']}")
        load.check_target(port or 1, requests, concurrency)
        if (why := self.unavailable(point)) is not None:
            raise RuntimeError(why)
        plan = binding.plan(point["binding"], point["workers"])
        meta: Metadata = {
            "perfgrid_requests": requests,
            "perfgrid_binding_plan": binding.describe(plan),
            "perfgrid_database": os.path.abspath(database),
            "perfgrid_sqlite_busy_timeout_ms": BUSY_TIMEOUT_MS,
            "perfgrid_listen_backlog": min(BACKLOG, somaxconn() or BACKLOG),
            "perfgrid_timeout_s": timeout_s,
        }
        if client == "ab":
            meta["perfgrid_client_version"] = load.ab_version()
        if point["variant"] == "erlang":
            del meta["perfgrid_sqlite_busy_timeout_ms"]
            return self._erlang_case(point, options, meta, port, requests, timeout_s)
        if point["variant"] == "uvloop":
            import uvloop

            meta["perfgrid_uvloop_version"] = uvloop.__version__
        init_database(database)
        # set-up, outside the timing: the workers are listening when this returns
        group = ServerGroup(point["variant"], database, plan, port=port,
                                       bind=point["binding"] != "none")
        results: list[load.LoadResult] = []
        server_cpu: list[float] = []
        steps: list = []

        def one_load() -> float:
            if client == "openloop":  # a sweep of offered rates, the counter checked per step
                return _openloop(group.port, requests, concurrency, keepalive == "on",
                                 timeout_s, options, lambda: init_database(database),
                                 lambda: read_counter(database), group.cpu_seconds,
                                 results, server_cpu, steps)
            init_database(database)  # counter back to 0, servers idle
            group.check_alive()
            before = group.cpu_seconds()
            result = load.run_load(client, group.port, requests, concurrency,
                                       keepalive == "on", timeout_s)
            server_cpu.append(group.cpu_seconds() - before)
            results.append(result)
            check_load(result, read_counter(database))
            return result.wall_s

        def time_loops(loops: int) -> float:
            return sum(one_load() for _ in range(loops))

        observed = _observer(results, server_cpu, lambda: group.actual_cpus, steps)
        return Case(time=time_loops, work_per_loop=requests, metadata=meta,
                    close=group.stop, observed=observed)

    @staticmethod
    def _erlang_case(point: Point, options: dict[str, str], meta: Metadata, port: int,
                     requests: int, timeout_s: float) -> Case:
        """One VM serves every load of the job; it is started (and listening) before any."""
        client, concurrency = point["client"], point["concurrency"]
        keepalive = keepalive_word(point["keepalive"]) == "on"
        vm = erlang.vm_for(point["binding"], point["workers"])
        state_dir = tempfile.mkdtemp(prefix="perfgrid-mnesia-")
        args = {"port": port, "acceptors": ERLANG_ACCEPTORS, "db": "mnesia", "dir": state_dir}
        cmd = erlang.command("pg_http", args, erlang.beam_dir(options), vm)
        try:
            server = erlang.Server(cmd, vm.cpus)
        except BaseException:
            shutil.rmtree(state_dir, ignore_errors=True)
            raise
        ready = server.ready
        meta.update({"perfgrid_database": str(ready["database"]),
                     "perfgrid_database_note": str(ready["database_note"]),
                     "perfgrid_listen_backlog": min(BACKLOG, somaxconn() or BACKLOG),
                     "perfgrid_vm_flags": vm.describe(), "perfgrid_otp": erlang.otp_release(),
                     "perfgrid_schedulers": int(ready["schedulers"]),
                     "perfgrid_acceptors": int(ready["acceptors"])})
        process = psutil.Process(server.pid)
        results: list[load.LoadResult] = []
        server_cpu: list[float] = []
        steps: list = []

        def cpu_seconds() -> float:
            times = process.cpu_times()
            return times.user + times.system

        def one_load() -> float:
            if client == "openloop":  # a sweep of offered rates, the counter checked per step
                return _openloop(int(ready["port"]), requests, concurrency, keepalive, timeout_s,
                                 options, lambda: server.ask("reset"),
                                 lambda: int(server.ask("count")["counter"]), cpu_seconds,
                                 results, server_cpu, steps)
            server.ask("reset")  # counter back to 0, server idle
            before = cpu_seconds()
            result = load.run_load(client, int(ready["port"]), requests, concurrency,
                                       keepalive, timeout_s)
            server_cpu.append(cpu_seconds() - before)
            results.append(result)
            check_load(result, int(server.ask("count")["counter"]))
            return result.wall_s

        def time_loops(loops: int) -> float:
            return sum(one_load() for _ in range(loops))

        def cpus() -> list[list[int]]:
            if vm.cpus:
                return [vm.cpus]
            return [[int(c)] if c.isdigit() else binding.allowed_cpus()
                    for c in str(ready["scheduler_bindings"]).split(",")]

        def close() -> None:
            try:
                server.stop()
            finally:
                shutil.rmtree(state_dir, ignore_errors=True)

        return Case(time=time_loops, work_per_loop=requests, metadata=meta, close=close,
                    observed=_observer(results, server_cpu, cpus, steps))


def _openloop(port: int, requests: int, concurrency: int, keepalive: bool, timeout_s: float,
              options: dict[str, str], reset: Callable[[], object], count: Callable[[], int],
              cpu_seconds: Callable[[], float], results: list[load.LoadResult],
              server_cpu: list[float], steps: list) -> float:
    """One open-loop sweep; returns the time ``requests`` take at the highest achieved rate.

    So the row's rate (``requests`` over that time) is the sweep's peak achieved rate;
    every step, with its percentiles and histogram, goes into the metadata.
    """
    from perfgrid.experiments.http import openloop

    rates = [float(r) for r in options.get("openloop_rates", "").split(",") if r]
    duration = float(options.get("openloop_duration_s", OPENLOOP_DEFAULTS["duration_s"]))
    before = cpu_seconds()
    done, found = openloop.sweep(port, rates or OPENLOOP_DEFAULTS["rates"], duration, requests,
                                 concurrency, keepalive, timeout_s, before=reset,
                                 after=lambda result: check_load(result, count()))
    server_cpu.append(cpu_seconds() - before)
    results.extend(done)
    steps.append(found)
    return requests / max(s.achieved_rate for s in found)


def _observer(results: list[load.LoadResult], server_cpu: list[float],
              worker_cpus: Callable[[], list[list[int]]],
              steps: list | None = None) -> Callable[[], Metadata]:
    """The per-run metadata of the loads run so far (any server); an open-loop sweep adds
    its steps (the latest sweep's)."""

    def observed() -> Metadata:
        if not results:
            return {}
        wall = sum(r.wall_s for r in results)
        client_cpu = sum(r.client_cpu_s for r in results)
        extra: Metadata = {
            "perfgrid_loads": len(results),
            "perfgrid_ok": sum(r.ok for r in results),
            "perfgrid_non2xx": sum(r.non2xx for r in results),
            "perfgrid_errors": sum(r.errors for r in results),
            "perfgrid_ok_per_s": round(sum(r.ok for r in results) / wall, 2) if wall else 0.0,
            "perfgrid_latency_mean_ms": statistics.fmean(r.latency_mean_ms for r in results),
            "perfgrid_latency_p50_ms": statistics.fmean(r.latency_p50_ms for r in results),
            "perfgrid_latency_p99_ms": statistics.fmean(r.latency_p99_ms for r in results),
            "perfgrid_server_cpu_s": round(sum(server_cpu), 4),
            "perfgrid_client_cpu_s": round(client_cpu, 4),
            "perfgrid_server_cpus": round(sum(server_cpu) / wall, 4) if wall else 0.0,
            "perfgrid_client_cpus": round(client_cpu / wall, 4) if wall else 0.0,
            "perfgrid_worker_cpus": binding.describe(worker_cpus()),
        }
        for result in results:
            for key, value in result.detail.items():
                name = f"perfgrid_{key}"
                extra[name] = int(extra.get(name, 0)) + value
        if steps:
            from perfgrid.experiments.http import openloop

            extra.update(openloop.summary(steps[-1]))
        return extra

    return observed


EXPERIMENT = Http()
