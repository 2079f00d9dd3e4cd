"""Load generators of the http experiment: Apache's ``ab`` and a builtin asyncio client.

Both send ``requests`` GET requests to 127.0.0.1 (never anywhere else) from
``concurrency`` connections at once, with or without keep-alive, and stop at
a deadline whatever happens. Each returns a :class:`LoadResult`: the wall
time of the load, what came back (2xx, other statuses, errors), latency
statistics and the client's own CPU time. The builtin client also keeps every
counter value the server handed out, so the caller can check for duplicates.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyperf import perf_counter

from perfgrid.kit import lifetime

HOST = "127.0.0.1"
CLIENTS = ("ab", "builtin")
#: seconds one request may wait for its answer (ab's -s default is 30)
REQUEST_TIMEOUT_S = 30.0


@dataclass
class LoadResult:
    """What one load run did and saw."""

    client: str
    requests: int
    concurrency: int
    keepalive: bool
    wall_s: float
    completed: int  # answers received, any status
    ok: int  # 2xx answers (ab, when it counted failures: a lower bound, see run_ab)
    non2xx: int
    errors: int  # connect/read failures, timeouts, malformed answers (ab: an upper bound)
    latency_mean_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    client_cpu_s: float  # ab: its process's, with the launcher's start-up before its exec
    timed_out: bool = False
    values: list[int] | None = None  # counter values handed out (builtin only)
    detail: dict[str, int] = field(default_factory=dict)

    @property
    def unanswered(self) -> int:
        """Requests that never got an answer or an error (the deadline cut them)."""
        return self.requests - self.completed - self.errors


def check_target(port: int, requests: int, concurrency: int) -> None:
    """Refuse a load that cannot be run as asked."""
    if not 0 < port < 65536:
        raise ValueError(f"http load: port {port} is not a TCP port")
    if concurrency < 1:
        raise ValueError(f"http.concurrency: must be at least 1, got {concurrency}")
    if concurrency > requests:
        raise ValueError(f"http.concurrency: {concurrency} exceeds http.requests: {requests}; "
                         f"a load cannot keep more connections busy than it has requests")


def _percentile(sorted_ms: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (NaN if empty)."""
    if not sorted_ms:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(sorted_ms)))
    return sorted_ms[rank - 1]


# --- builtin ------------------------------------------------------------------------


def _request_bytes(keepalive: bool) -> bytes:
    connection = "keep-alive" if keepalive else "close"
    return (f"GET / HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: perfgrid\r\n"
            f"Connection: {connection}\r\n\r\n").encode("ascii")


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, server keeps the connection) of one response."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length, keep = 0, True
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            keep = value.strip().lower() != b"close"
    body = await reader.readexactly(length) if length else b""
    return status, body, keep


class Tally:
    """What a load client counts of the answers: the counter check reads ``values``."""

    def __init__(self) -> None:
        self.ok = self.non2xx = self.errors = 0
        self.values: list[int] = []
        self.error_kinds: dict[str, int] = {}

    def _error(self, err: BaseException) -> None:
        self.errors += 1
        kind = type(err).__name__
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def _answer(self, status: int, body: bytes) -> None:
        """One answer: a 2xx carries the counter's previous value."""
        if 200 <= status < 300:
            self.ok += 1
            try:
                self.values.append(int(body))
            except ValueError as err:
                self._error(err)
        else:
            self.non2xx += 1


class _Builtin(Tally):
    def __init__(self, port: int, requests: int, concurrency: int, keepalive: bool) -> None:
        super().__init__()
        self.port = port
        self.requests = requests
        self.concurrency = concurrency
        self.keepalive = keepalive
        self.payload = _request_bytes(keepalive)
        self.issued = 0
        self.stopped = False
        self.latencies: list[float] = []

    async def _connection(self) -> None:
        reader = writer = None
        try:
            while self.issued < self.requests and not self.stopped:
                self.issued += 1
                started = perf_counter()
                try:
                    async with asyncio.timeout(REQUEST_TIMEOUT_S):
                        if writer is None:
                            reader, writer = await asyncio.open_connection(HOST, self.port)
                        writer.write(self.payload)
                        status, body, keep = await _read_answer(reader)
                except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                        TimeoutError, ValueError, IndexError) as err:
                    self._error(err)
                    if writer is not None:
                        writer.close()
                    reader = writer = None
                    continue
                self.latencies.append((perf_counter() - started) * 1000.0)
                self._answer(status, body)
                if not (self.keepalive and keep):
                    writer.close()
                    reader = writer = None
        finally:
            if writer is not None:
                writer.close()

    async def run(self, deadline_s: float) -> bool:
        """Run the load; True if the deadline cut it short."""
        tasks = [asyncio.create_task(self._connection()) for _ in range(self.concurrency)]
        done, pending = await asyncio.wait(tasks, timeout=deadline_s)
        self.stopped = True  # a task that swallows its cancellation still stops looping
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            task.result()  # a bug in the client must not pass silently
        return bool(pending)


def run_builtin(port: int, requests: int, concurrency: int, keepalive: bool,
                deadline_s: float) -> LoadResult:
    """Load 127.0.0.1:``port`` from this process with the asyncio client."""
    check_target(port, requests, concurrency)
    client = _Builtin(port, requests, concurrency, keepalive)
    cpu0 = time.process_time()
    started = perf_counter()
    timed_out = asyncio.run(client.run(deadline_s))
    wall = perf_counter() - started
    cpu = time.process_time() - cpu0
    lat = sorted(client.latencies)
    return LoadResult(
        client="builtin", requests=requests, concurrency=concurrency, keepalive=keepalive,
        wall_s=wall, completed=client.ok + client.non2xx, ok=client.ok, non2xx=client.non2xx,
        errors=client.errors,
        latency_mean_ms=statistics.fmean(lat) if lat else float("nan"),
        latency_p50_ms=_percentile(lat, 50), latency_p99_ms=_percentile(lat, 99),
        client_cpu_s=cpu, timed_out=timed_out, values=client.values,
        detail={f"error_{k}": v for k, v in sorted(client.error_kinds.items())},
    )


# --- ab -----------------------------------------------------------------------------


def ab_command(port: int, requests: int, concurrency: int, keepalive: bool,
               deadline_s: float, csv_path: str) -> list[str]:
    """The ab command line: -t before -n so that both the time and the count bound it."""
    cmd = ["ab", "-q", "-r", "-t", str(max(1, math.ceil(deadline_s))), "-n", str(requests),
           "-c", str(concurrency), "-s", str(int(REQUEST_TIMEOUT_S)), "-e", csv_path]
    if keepalive:
        cmd.append("-k")
    return cmd + [f"http://{HOST}:{port}/"]


def missing_ab() -> str | None:
    """Why ab cannot run here, or None."""
    if shutil.which("ab"):
        return None
    return "ab not found on PATH (Apache's benchmark tool, Debian package apache2-utils)"


def ab_version() -> str:
    """ab's version line, e.g. ``2.3 <$Revision: 1913912 $>``."""
    proc = subprocess.run(lifetime.command(["ab", "-V"]), capture_output=True, text=True,
                          check=False)
    match = re.search(r"Version (.+)", proc.stdout)
    return match.group(1).strip() if match else "unknown"


def _number(pattern: str, text: str, default: float | None = None) -> float:
    match = re.search(pattern, text, re.MULTILINE)
    if match:
        return float(match.group(1))
    if default is None:
        raise RuntimeError(f"ab printed no {pattern!r}:\n{text[-2000:]}")
    return default


def parse_ab(text: str) -> dict[str, float]:
    """The figures we use from ab's report (counts, seconds, mean ms)."""
    return {
        "wall_s": _number(r"^Time taken for tests:\s+([0-9.]+) seconds", text),
        "completed": _number(r"^Complete requests:\s+(\d+)", text),
        "failed": _number(r"^Failed requests:\s+(\d+)", text),
        "non2xx": _number(r"^Non-2xx responses:\s+(\d+)", text, 0),
        "keepalive_requests": _number(r"^Keep-Alive requests:\s+(\d+)", text, 0),
        "mean_ms": _number(r"^Time per request:\s+([0-9.]+) \[ms\] \(mean\)$", text),
        "fail_connect": _number(r"\(Connect: (\d+),", text, 0),
        "fail_receive": _number(r"Receive: (\d+),", text, 0),
        "fail_length": _number(r"Length: (\d+),", text, 0),
        "fail_exceptions": _number(r"Exceptions: (\d+)\)", text, 0),
    }


def parse_ab_csv(path: str | os.PathLike[str]) -> dict[int, float]:
    """ab's -e file: milliseconds within which each percentage of requests was served."""
    out = {}
    for line in Path(path).read_text().splitlines()[1:]:
        pct, _, ms = line.partition(",")
        with contextlib.suppress(ValueError):
            out[int(pct)] = float(ms)
    return out


def run_ab(port: int, requests: int, concurrency: int, keepalive: bool,
           deadline_s: float) -> LoadResult:
    """Load 127.0.0.1:``port`` with ab; ab's own time is the wall time."""
    check_target(port, requests, concurrency)
    with tempfile.TemporaryDirectory(prefix="perfgrid-ab-") as tmp:
        csv_path = os.path.join(tmp, "percentiles.csv")
        cmd = ab_command(port, requests, concurrency, keepalive, deadline_s, csv_path)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            proc = subprocess.run(lifetime.command(cmd), capture_output=True, text=True,
                                  check=False, timeout=deadline_s + 30)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"ab did not finish within {deadline_s + 30:.0f} s: "
                               f"{' '.join(cmd)}") from None
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            done = re.search(r"^Total of (\d+) requests completed", proc.stdout, re.MULTILINE)
            raise RuntimeError(f"ab exited with {proc.returncode} after "
                               f"{done.group(1) if done else 'an unknown number of'} of "
                               f"{requests} requests (c={concurrency}): "
                               f"{(proc.stderr + proc.stdout).strip()[-1000:]}")
        figures = parse_ab(proc.stdout)
        pct = parse_ab_csv(csv_path) if os.path.exists(csv_path) else {}
    completed = int(figures["completed"])
    failed = int(figures["failed"])
    non2xx = int(figures["non2xx"])
    # ab counts a request that failed as complete too, and a non-2xx answer not as failed;
    # it counts failures, not failed requests (one request can fail twice: receive and
    # length), so errors is at most the complete non-2xx-free requests and ok, then, a
    # lower bound; the detail keeps ab's own counts
    errors = min(failed, completed - non2xx)
    ok = completed - non2xx - errors
    return LoadResult(
        client="ab", requests=requests, concurrency=concurrency, keepalive=keepalive,
        wall_s=figures["wall_s"], completed=ok + non2xx, ok=ok, non2xx=non2xx,
        errors=errors, latency_mean_ms=figures["mean_ms"],
        latency_p50_ms=pct.get(50, float("nan")), latency_p99_ms=pct.get(99, float("nan")),
        client_cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        timed_out=completed < requests,
        detail={"ab_failures": failed, **{k: int(v) for k, v in figures.items()
                                          if k.startswith("fail_") or k == "keepalive_requests"}},
    )


def run_load(client: str, port: int, requests: int, concurrency: int, keepalive: bool,
             deadline_s: float) -> LoadResult:
    """Run one load with ``client`` (``ab`` or ``builtin``)."""
    if client == "ab":
        return run_ab(port, requests, concurrency, keepalive, deadline_s)
    if client == "builtin":
        return run_builtin(port, requests, concurrency, keepalive, deadline_s)
    raise ValueError(f"http.clients: {client!r} is not one of {', '.join(CLIENTS)}")
