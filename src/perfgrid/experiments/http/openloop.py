"""An open-loop HTTP load: requests at fixed times, latency from the scheduled time.

``ab`` and the builtin client are closed loops: each connection waits for its
answer before sending again, so while the server stalls they send less, and
the stall vanishes from their latencies ("coordinated omission", the wrk2
README). This client schedules request ``i`` at ``t0 + i / rate`` whatever the
answers, measures each latency from that scheduled time (so time spent
waiting for a free connection or for a stalled server counts), and records it
in an HDR histogram (``hdrhistogram``: microseconds, 3 significant digits).

A sweep runs one step per offered rate, lowest first, and stops after the
first saturated step: one where the achieved rate fell below
:data:`SATURATED` of the offered rate, or requests were still unsent at the
step's deadline. Every step is bounded in requests (``min(rate x duration,
requests)``) and in time (its deadline; then unsent requests are dropped and
counted, never sent late), targets 127.0.0.1 only, and keeps every counter
value handed out so the caller can check the counter invariant per step.
"""

from __future__ import annotations

import asyncio
import base64
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from hdrh.histogram import HdrHistogram
from pyperf import perf_counter

from perfgrid.experiments.http import load

HOST = load.HOST
#: an achieved rate below this share of the offered rate: the step is saturated
SATURATED = 0.90
#: histogram range in microseconds: 1 us to one hour, 3 significant digits
HDR_RANGE = (1, 3_600_000_000, 3)
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99_9": 99.9}


@dataclass
class Step:
    """One offered rate of a sweep: what was scheduled, sent and answered, and latencies."""

    offered_rate: float
    scheduled: int
    sent: int
    unsent: int  # scheduled but not sent by the deadline (dropped, counted)
    ok: int
    non2xx: int
    errors: int
    wall_s: float
    achieved_rate: float  # 2xx answers per second of the step
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p99_9_ms: float
    max_ms: float
    mean_ms: float
    send_lag_p99_ms: float  # how late the client itself sent (its own lag, not the server's)
    client_cpu_s: float
    saturated: bool
    hdr: str  # the histogram, HdrHistogram's compressed base64 encoding


class _OpenLoop(load.Tally):
    def __init__(self, port: int, rate: float, count: int, concurrency: int,
                 keepalive: bool) -> None:
        super().__init__()
        self.port, self.rate, self.count = port, rate, count
        self.keepalive = keepalive
        self.payload = load._request_bytes(keepalive)
        self.slots = asyncio.Semaphore(concurrency)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.hist = HdrHistogram(*HDR_RANGE)
        self.lag = HdrHistogram(*HDR_RANGE)
        self.sent = 0
        self.stopped = False
        self.last_answer = 0.0

    async def _one(self, scheduled: float) -> None:
        async with self.slots:
            if self.stopped:  # the deadline passed while waiting for a connection
                return
            self.sent += 1
            self.lag.record_value(max(1, round((perf_counter() - scheduled) * 1e6)))
            conn = self.idle.pop() if self.idle else None
            try:
                async with asyncio.timeout(load.REQUEST_TIMEOUT_S):
                    if conn is None:
                        conn = await asyncio.open_connection(HOST, self.port)
                    conn[1].write(self.payload)
                    status, body, keep = await load._read_answer(conn[0])
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    TimeoutError, ValueError, IndexError) as err:
                self._error(err)
                if conn is not None:
                    conn[1].close()
                return
            now = perf_counter()
            self.last_answer = now
            self.hist.record_value(max(1, round((now - scheduled) * 1e6)))
            self._answer(status, body)
            if self.keepalive and keep:
                self.idle.append(conn)
            else:
                conn[1].close()

    async def run(self, deadline_s: float) -> float:
        """Send on schedule until every request is sent or the deadline; return t0."""
        t0 = perf_counter() + 0.01
        deadline = t0 + deadline_s
        tasks = []
        for i in range(self.count):
            scheduled = t0 + i / self.rate
            wait = scheduled - perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            elif i % 16 == 0:  # behind schedule: still let the requests already due run
                await asyncio.sleep(0)
            if perf_counter() > deadline:
                break
            tasks.append(asyncio.create_task(self._one(scheduled)))
        pending = [t for t in tasks if not t.done()]
        left = max(0.0, deadline - perf_counter())
        if pending:
            _, still = await asyncio.wait(pending, timeout=left)
            self.stopped = True  # requests still waiting for a connection are not sent
            if still:  # those sent are awaited: each is bounded by its own timeout
                await asyncio.gather(*still, return_exceptions=True)
        self.stopped = True
        for _, writer in self.idle:
            writer.close()
        for task in tasks:
            task.result()  # a bug in the client must not pass silently
        return t0


def _ms(hist: HdrHistogram, percentile: float) -> float:
    return hist.get_value_at_percentile(percentile) / 1e3 if hist.get_total_count() else math.nan


def run_step(port: int, rate: float, requests: int, concurrency: int, keepalive: bool,
             deadline_s: float) -> tuple[load.LoadResult, Step]:
    """One open-loop load of ``requests`` requests at ``rate`` per second on 127.0.0.1.

    The LoadResult counts the requests actually sent (so the caller's counter check
    holds for them); the Step adds the offered rate, percentiles and the histogram.
    """
    load.check_target(port, requests, min(concurrency, requests))
    if not rate > 0:
        raise ValueError(f"http.openloop.rates: {rate} is not a positive rate")
    client = _OpenLoop(port, rate, requests, concurrency, keepalive)
    cpu0 = time.process_time()
    t0 = asyncio.run(client.run(deadline_s))
    cpu = time.process_time() - cpu0
    wall = max(client.last_answer - t0, 1e-9) if client.ok + client.non2xx else math.nan
    hist = client.hist
    unsent = requests - client.sent
    achieved = client.ok / wall if client.ok else 0.0
    step = Step(
        offered_rate=float(rate), scheduled=requests, sent=client.sent, unsent=unsent,
        ok=client.ok, non2xx=client.non2xx, errors=client.errors, wall_s=wall,
        achieved_rate=achieved,
        **{f"{k}_ms": _ms(hist, q) for k, q in PERCENTILES.items()},
        max_ms=hist.get_max_value() / 1e3 if hist.get_total_count() else math.nan,
        mean_ms=hist.get_mean_value() / 1e3 if hist.get_total_count() else math.nan,
        send_lag_p99_ms=_ms(client.lag, 99.0), client_cpu_s=cpu,
        saturated=bool(unsent or achieved < SATURATED * rate),
        hdr=base64.b64encode(hist.encode()).decode("ascii") if hist.get_total_count() else "",
    )
    result = load.LoadResult(
        client="openloop", requests=client.sent, concurrency=concurrency, keepalive=keepalive,
        wall_s=wall, completed=client.ok + client.non2xx, ok=client.ok, non2xx=client.non2xx,
        errors=client.errors, latency_mean_ms=step.mean_ms, latency_p50_ms=step.p50_ms,
        latency_p99_ms=step.p99_ms, client_cpu_s=cpu, timed_out=False, values=client.values,
        detail={f"error_{k}": v for k, v in sorted(client.error_kinds.items())},
    )
    return result, step


def step_requests(rate: float, duration_s: float, requests: int) -> int:
    """Requests of one step: ``rate x duration_s``, at most ``requests``, at least 1."""
    return max(1, min(requests, round(rate * duration_s)))


def sweep(port: int, rates: Sequence[float], duration_s: float, requests: int,
          concurrency: int, keepalive: bool, timeout_s: float,
          before: Callable[[], None] = lambda: None,
          after: Callable[[load.LoadResult], None] = lambda result: None,
          ) -> tuple[list[load.LoadResult], list[Step]]:
    """Steps at ``rates`` (ascending) until the first saturated one.

    ``before()`` runs before each step (reset the counter), ``after(result)`` after
    it (check the counter). A step's deadline is twice its duration plus 5 s, and
    at most ``timeout_s``.
    """
    results, steps = [], []
    for rate in sorted(rates):
        count = step_requests(rate, duration_s, requests)
        before()
        result, step = run_step(port, rate, count, concurrency, keepalive,
                                min(timeout_s, 2 * count / rate + 5.0))
        after(result)
        results.append(result)
        steps.append(step)
        if step.saturated:
            break
    return results, steps


def summary(steps: Sequence[Step]) -> dict[str, float | int | str]:
    """The sweep as ``perfgrid_*`` metadata: every step (JSON), the peak achieved rate."""
    import json

    peak = max((s.achieved_rate for s in steps), default=math.nan)
    return {
        "perfgrid_openloop_steps": json.dumps([asdict(s) for s in steps], allow_nan=True,
                                              separators=(",", ":")),
        "perfgrid_openloop_peak_rate": round(peak, 2),
        "perfgrid_openloop_saturated": int(any(s.saturated for s in steps)),
        "perfgrid_openloop_top_offered": max((s.offered_rate for s in steps), default=0.0),
        "perfgrid_openloop_mean_p99_ms": statistics.fmean(
            [s.p99_ms for s in steps if math.isfinite(s.p99_ms)] or [math.nan]),
    }
