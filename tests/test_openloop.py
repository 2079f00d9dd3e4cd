"""The open-loop client: a stall the closed loop hides shows in its tail; sweeps and checks."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time

import pandas as pd
import pytest
from hdrh.histogram import HdrHistogram

from perfgrid.experiments import get
from perfgrid.experiments.http import CorrectnessError, analysis, check_load, openloop
from perfgrid.experiments.http import load as http_load

from synthetic import row

EXP = get("http")
STALL_S = 0.2
#: the stalling server's normal service time: requests are in flight when the stall hits
SERVICE_S = 0.02


class StallingServer:
    """127.0.0.1 HTTP server in a thread: answers every GET after SERVICE_S (without
    blocking), and once per arming blocks its whole event loop for STALL_S at the
    ``stall_at``-th request, as a GC pause or a blocking call would."""

    def __init__(self, stall_at: int) -> None:
        self.stall_at = stall_at
        self.seen = 0
        self.counter = 0
        self.loop = asyncio.new_event_loop()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._run, daemon=True)
        started = threading.Event()
        self.loop.call_soon(started.set)
        self.thread.start()
        started.wait(10)

    def arm(self) -> None:
        self.seen = 0

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, sock=self.sock))
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.seen += 1
                if self.seen == self.stall_at:
                    time.sleep(STALL_S)  # blocks the loop: every request in flight waits
                await asyncio.sleep(SERVICE_S)
                value, self.counter = self.counter, self.counter + 1
                keep = b"connection: close" not in head.lower()
                body = f"{value:020d}\n".encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n%s"
                             % (len(body), b"keep-alive" if keep else b"close", body))
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        def stop() -> None:
            self.server.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def stalling():
    server = StallingServer(stall_at=60)
    yield server
    server.close()


@pytest.mark.serial  # latencies and rates asserted
def test_a_200ms_stall_shows_in_the_open_loop_p99_with_abs_report_beside_it(stalling, tmp_path):
    """200 requests at 200/s (1 s): the requests in flight when the server stalls, and
    those sent in its first SERVICE_S, all wait >= 200 ms from their scheduled times:
    about 4 % of them, so the p99 is at least 200 ms. ab, a closed loop on one
    connection, sends nothing while it waits: one slow request in 300, so its p99 (recorded
    beside, not asserted: it is a timing) does not show the stall."""
    stalling.arm()
    before = stalling.counter
    result, step = openloop.run_step(stalling.port, 200.0, 200, 50, True, 30.0)
    check_load(result, stalling.counter - before)  # the counter invariant
    report = {"open_loop": {k: v for k, v in vars(step).items() if k != "hdr"}}
    if http_load.missing_ab() is None:
        stalling.arm()
        ab = http_load.run_ab(stalling.port, 300, 1, True, 60.0)
        report["ab_same_server"] = {"p50_ms": ab.latency_p50_ms, "p99_ms": ab.latency_p99_ms,
                                    "mean_ms": ab.latency_mean_ms, "ok": ab.ok}
    (tmp_path / "stall.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    assert step.ok == 200 and step.unsent == 0 and step.errors == 0
    assert step.p99_ms >= STALL_S * 1000
    assert step.max_ms >= STALL_S * 1000
    hist = HdrHistogram.decode(base64.b64decode(step.hdr))  # the raw histogram comes back
    assert hist.get_total_count() == 200
    if "ab_same_server" in report:
        assert report["ab_same_server"]["ok"] == 300


@pytest.mark.serial  # latencies and rates asserted
def test_a_sweep_stops_at_the_first_saturated_step_and_bounds_each_step(stalling):
    """Rates run lowest first, and the sweep stops after the first saturated step. Which
    steps saturate does not hang on the machine's speed: 0.1/s for 0.5 s is one request,
    saturated only if its answer took over 11 s (1 / 0.9 of its 10 s schedule); two
    connections at >= 20 ms a request serve at most 100/s, so 400/s saturates however
    fast the machine, and 800/s is never offered."""
    stalling.stall_at = 10**9  # no stall: a server of at most 1 / SERVICE_S per connection
    checked = []
    results, steps = openloop.sweep(stalling.port, [400, 0.1, 800], 0.5, 1000, 2, True,
                                    30.0, after=checked.append)
    assert [s.offered_rate for s in steps] == [0.1, 400]
    assert [s.saturated for s in steps] == [False, True]
    assert len(checked) == len(steps) == len(results)
    assert [s.scheduled for s in steps] == [1, 200]
    assert all(s.scheduled == openloop.step_requests(s.offered_rate, 0.5, 1000) for s in steps)
    assert all(s.sent + s.unsent == s.scheduled for s in steps)


@pytest.mark.serial  # latencies and rates asserted
def test_unsent_requests_are_dropped_at_the_deadline_not_sent_late(stalling):
    stalling.stall_at = 10**9
    before = stalling.counter
    result, step = openloop.run_step(stalling.port, 1000.0, 400, 1, True, 0.5)
    assert step.unsent > 0 and step.saturated
    assert result.requests == step.sent  # the check counts what was sent
    check_load(result, stalling.counter - before)


def test_a_lost_increment_fails_the_step():
    result = http_load.LoadResult("openloop", 10, 2, True, 1.0, 10, 10, 0, 0, 1, 1, 1, 0.1,
                                 values=list(range(10)))
    with pytest.raises(CorrectnessError, match="counter went up by 9"):
        check_load(result, 9)


def test_only_openloop_points_get_the_sweep_options():
    section = {"servers": ["asyncio"], "clients": ["ab", "openloop"], "keepalive": ["on"],
               "bindings": ["none"], "workers": [1], "concurrency": [10], "requests": 1000,
               "port": 0, "timeout_s": 60, "openloop": {"rates": [100, 200.5],
                                                         "duration_s": 1.5}}
    points = {p["client"]: p for p in EXP.points(section, {})}
    assert set(EXP.options(section, points["ab"], "db")) == {"requests", "database", "port",
                                                               "timeout_s"}
    options = EXP.options(section, points["openloop"], "db")
    assert options["openloop_rates"] == "100,200.5" and options["openloop_duration_s"] == "1.5"


def test_openloop_case_checks_the_counter_per_step_on_the_real_server(tmp_path):
    options = {"requests": "200", "database": str(tmp_path / "c.sqlite"),
               "openloop_rates": "100,200", "openloop_duration_s": "0.5"}
    point = {"variant": "asyncio", "client": "openloop", "keepalive": "on", "binding": "none",
             "workers": 1, "concurrency": 10}
    case = EXP.prepare(point, options)
    try:
        assert case.time(1) > 0
        seen = case.observed()
    finally:
        case.close()
    steps = json.loads(seen["perfgrid_openloop_steps"])
    assert [s["offered_rate"] for s in steps][:1] == [100.0]
    assert seen["perfgrid_ok"] == sum(s["ok"] for s in steps)
    assert seen["perfgrid_openloop_peak_rate"] == round(max(s["achieved_rate"]
                                                            for s in steps), 2)


def test_report_table_plot_and_note_from_the_sweep(tmp_path):
    def step(offered, achieved, p99, saturated=False):
        return {"offered_rate": offered, "scheduled": 10, "sent": 10, "unsent": 0, "ok": 10,
                "non2xx": 0, "errors": 0, "wall_s": 1.0, "achieved_rate": achieved,
                "p50_ms": p99 / 4, "p90_ms": p99 / 2, "p99_ms": p99, "p99_9_ms": p99 * 1.2,
                "max_ms": p99 * 1.5, "mean_ms": p99 / 3, "send_lag_p99_ms": 1.0,
                "client_cpu_s": 0.1, "saturated": saturated, "hdr": ""}

    rows = [row(1000.0, variant=v, client="openloop", keepalive="on", binding="none",
                workers=1, concurrency=100, runtime="python",
                openloop_steps=json.dumps([step(500, 499, 2.0), step(1000, 990, 5.0),
                                           step(2000, 1400, 300.0, True)]))
            for v in ("asyncio", "uvloop")]
    table = pd.DataFrame(rows)
    [(title, note, frame)] = analysis.tables(table, get("http"))
    assert "Open-loop" in title and "coordinated omission" in note
    assert len(frame) == 6 and list(frame["p99 (ms)"][:3]) == [2.0, 5.0, 300.0]
    written = analysis._openloop_plot(table, tmp_path)
    assert (tmp_path / "openloop_latency.png") in written
    notes = [n for n in analysis.notes(table, get("http")) if n.startswith("Open loop")]
    assert len(notes) == 2 and "1,400 requests/s" in notes[0] and "saturated at 2,000" in notes[0]
