"""The http experiment's server: a counter behind one SQLite transaction per request.

Each request opens a write transaction on one database file shared by all
worker processes (WAL mode, ``BEGIN IMMEDIATE``), reads the counter, writes
counter+1, commits and answers the previous value. So the benchmark stresses
accept/parse/respond in the event loop plus a cross-process write lock, like
the seed's mnesia transaction. Workers share one port through SO_REUSEPORT,
listen on 127.0.0.1 only, and never outlive the process that started them
(they are started through :func:`perfgrid.lifetime.command`).

``python -m perfgrid.httpserver --server asyncio --port P --database F ...``
runs one worker; :class:`ServerGroup` starts and stops a set of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import selectors
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from perfgrid import binding, lifetime
from perfgrid.eventloops import uvloop_missing

SERVERS = ("asyncio", "uvloop")
HOST = "127.0.0.1"
#: listen backlog asked for; the kernel caps it at net.core.somaxconn
BACKLOG = 4096
#: how long a worker's SQLite waits for the shared write lock before a 503
BUSY_TIMEOUT_MS = 5000
#: zero-padded so every answer has the same length (ab counts length changes as failures)
VALUE_DIGITS = 20
BODY_BYTES = VALUE_DIGITS + 1
#: the largest request head a worker accepts
MAX_HEAD = 16384


def somaxconn() -> int | None:
    """The kernel's cap on a listen backlog (net.core.somaxconn)."""
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return None


# --- the database -----------------------------------------------------------------


def connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN ourselves), WAL, busy timeout.

    ``synchronous=NORMAL``: in WAL mode a commit writes the log without an
    fsync (the checkpoint syncs), so the benchmark measures the transaction's
    locking, not the disk's flush latency.
    """
    conn = sqlite3.connect(os.fspath(path), timeout=BUSY_TIMEOUT_MS / 1000,
                           isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def init_database(path: str | os.PathLike[str], value: int = 0) -> None:
    """Create the counter table (if needed) and set the counter to ``value``.

    Raises ValueError naming ``http.database`` if the file cannot be written.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(path)
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode.lower() != "wal":
                raise sqlite3.OperationalError(f"journal_mode is {mode}, WAL refused")
            conn.execute("CREATE TABLE IF NOT EXISTS counter "
                         "(id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
            conn.execute("INSERT INTO counter (id, value) VALUES (1, ?) "
                         "ON CONFLICT(id) DO UPDATE SET value = excluded.value", (value,))
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as err:
        raise ValueError(f"http.database: cannot write the SQLite file {path}: {err}") from None


def read_counter(path: str | os.PathLike[str]) -> int:
    """The counter's current value."""
    conn = connect(path)
    try:
        return int(conn.execute("SELECT value FROM counter WHERE id = 1").fetchone()[0])
    finally:
        conn.close()


class Counter:
    """One worker's connection; ``increment()`` is one write transaction."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.conn = connect(path)

    def increment(self) -> int:
        """Counter+1 in one IMMEDIATE transaction; returns the previous value."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            value = conn.execute("SELECT value FROM counter WHERE id = 1").fetchone()[0]
            conn.execute("UPDATE counter SET value = ? WHERE id = 1", (value + 1,))
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        return int(value)

    def close(self) -> None:
        self.conn.close()


# --- one worker --------------------------------------------------------------------


def _response(status: str, body: bytes, keepalive: bool) -> bytes:
    head = (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keepalive else 'close'}\r\n\r\n")
    return head.encode("ascii") + body


def wants_keepalive(head: bytes) -> bool:
    """HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only when asked."""
    lines = head.split(b"\r\n")
    version = lines[0].rsplit(b" ", 1)[-1].upper()
    connection = b""
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"connection":
            connection = value.strip().lower()
    if version == b"HTTP/1.1":
        return connection != b"close"
    return connection == b"keep-alive"


def answer(head: bytes, counter: Counter) -> tuple[bytes, bool]:
    """The response bytes to one request head, and whether to keep the connection."""
    request_line = head.split(b"\r\n", 1)[0].split()
    if len(request_line) != 3 or not request_line[2].startswith(b"HTTP/"):
        return _response("400 Bad Request", b"bad request\n", False), False
    keep = wants_keepalive(head)
    if request_line[0] != b"GET":
        return _response("405 Method Not Allowed", b"GET only\n", keep), keep
    try:
        value = counter.increment()
    except sqlite3.OperationalError as err:  # busy timeout: counted by the client as non-2xx
        return _response("503 Service Unavailable", f"{err}\n".encode(), keep), keep
    return _response("200 OK", f"{value:0{VALUE_DIGITS}d}\n".encode("ascii"), keep), keep


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  counter: Counter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            data, keep = answer(head, counter)
            writer.write(data)
            await writer.drain()
            if not keep:
                return
    except ConnectionError:
        return
    finally:
        writer.close()


def _share(sock: socket.socket) -> None:
    """SO_REUSEPORT to share the port between workers; SO_REUSEADDR to bind over the
    TIME_WAIT connections a previous run left (it never allows a second listener)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)


def listening_socket(port: int, backlog: int = BACKLOG) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:``port`` that shares the port (SO_REUSEPORT)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        _share(sock)
        sock.bind((HOST, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def _serve(sock: socket.socket, counter: Counter, ready: dict) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = await asyncio.start_server(lambda r, w: _handle(r, w, counter), sock=sock,
                                        backlog=BACKLOG, limit=MAX_HEAD)
    print(json.dumps(ready), flush=True)
    async with server:
        await stop.wait()
        server.close()


def worker_main(argv: list[str] | None = None) -> None:
    """One server worker: pin, open the database, listen, report ready, serve."""
    parser = argparse.ArgumentParser(prog="python -m perfgrid.httpserver")
    parser.add_argument("--server", choices=SERVERS, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--cpus", default="", help="comma-separated CPUs to pin to")
    args = parser.parse_args(argv)
    cpus = binding.pin([int(c) for c in args.cpus.split(",")]) if args.cpus else sorted(
        os.sched_getaffinity(0))
    counter = Counter(args.database)
    sock = listening_socket(args.port)
    ready = {"pid": os.getpid(), "cpus": cpus, "port": sock.getsockname()[1]}
    coro = _serve(sock, counter, ready)
    try:
        if args.server == "uvloop":
            import uvloop

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(coro)
        else:
            asyncio.run(coro)
    finally:
        counter.close()


# --- a group of workers --------------------------------------------------------------


def reserve_port(port: int) -> socket.socket:
    """A bound (not listening) SO_REUSEPORT socket holding 127.0.0.1:``port`` for the workers.

    A fixed port is first bound without SO_REUSEPORT, so a port that anyone
    listens on (even with SO_REUSEPORT) is refused instead of silently shared.
    """
    if port:
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((HOST, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ValueError(f"http.port: {HOST}:{port} is already in use; "
                                 f"choose another port or 0 for an ephemeral one") from None
            raise ValueError(f"http.port: cannot bind {HOST}:{port}: {err}") from None
        finally:
            probe.close()
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        _share(holder)
        holder.bind((HOST, port))
    except OSError as err:
        holder.close()
        raise ValueError(f"http.port: cannot bind {HOST}:{port}: {err}") from None
    return holder


def wait_for_port(port: int, timeout: float) -> None:
    """Return once a TCP connect to 127.0.0.1:``port`` succeeds; raise after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((HOST, port), timeout=1.0):
                return
        except OSError as err:
            if time.monotonic() > deadline:
                raise RuntimeError(f"http server: {HOST}:{port} does not answer: {err}") from None
            time.sleep(0.02)


class ServerGroup:
    """``len(cpu_plan)`` worker processes of one server kind sharing one port.

    Use as a context manager, or call :meth:`stop`; a failed start stops
    whatever had started before raising.
    """

    def __init__(self, server: str, database: str | os.PathLike[str],
                 cpu_plan: list[list[int]], port: int = 0, start_timeout: float = 30.0,
                 bind: bool = True) -> None:
        if server not in SERVERS:
            raise ValueError(f"http.servers: {server!r} is not one of {', '.join(SERVERS)}")
        if not cpu_plan:
            raise ValueError("http.workers: must be at least 1, got 0")
        if server == "uvloop" and (why := uvloop_missing()):
            raise RuntimeError(why)
        self.server = server
        self.database = os.fspath(database)
        self.procs: list[subprocess.Popen] = []
        self._stderr: list[Any] = []
        self.actual_cpus: list[list[int]] = []
        holder = reserve_port(port)
        self.port = holder.getsockname()[1]
        try:
            for cpus in cpu_plan:
                self._spawn(cpus if bind else [])
            self._wait_ready(start_timeout)
            wait_for_port(self.port, start_timeout)
        except BaseException:
            self.stop()
            raise
        finally:
            holder.close()
        self.processes = [psutil.Process(p.pid) for p in self.procs]

    def _spawn(self, cpus: list[int]) -> None:
        err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self._stderr.append(err)
        cmd = [sys.executable, "-m", "perfgrid.httpserver", "--server", self.server,
               "--port", str(self.port), "--database", self.database,
               "--cpus", ",".join(map(str, cpus))]
        self.procs.append(subprocess.Popen(lifetime.command(cmd), stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE, stderr=err))

    def _failure(self, index: int) -> str:
        err = self._stderr[index]
        err.seek(0)
        text = err.read().decode(errors="replace").strip()
        return text.splitlines()[-1] if text else "(no message)"

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = {p.stdout: i for i, p in enumerate(self.procs)}
        found: dict[int, list[int]] = {}
        with selectors.DefaultSelector() as sel:
            for stream in pending:
                sel.register(stream, selectors.EVENT_READ)
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"http server: {len(pending)} worker(s) not ready "
                                       f"after {timeout:.0f} s")
                for key, _ in sel.select(min(left, 0.2)):
                    index = pending.pop(key.fileobj)
                    sel.unregister(key.fileobj)
                    line = key.fileobj.readline()
                    if not line:
                        self.procs[index].wait(5)
                        raise RuntimeError(
                            f"http server worker {index} ({self.server}) exited with "
                            f"{self.procs[index].returncode}: {self._failure(index)}")
                    ready = json.loads(line)
                    found[index] = ready["cpus"]
        self.actual_cpus = [found[i] for i in range(len(self.procs))]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def cpu_seconds(self) -> float:
        """User+system CPU seconds the workers have used so far."""
        total = 0.0
        for proc in self.processes:
            times = proc.cpu_times()
            total += times.user + times.system
        return total

    def check_alive(self) -> None:
        """Raise if a worker has died (a crash would otherwise look like refused connections)."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise RuntimeError(f"http server worker {i} died with {proc.returncode}: "
                                   f"{self._failure(i)}")

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM every worker, SIGKILL those still there after ``grace`` seconds."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
        deadline = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for proc in self.procs:
            if proc.stdout:
                proc.stdout.close()
        for err in self._stderr:
            err.close()
        self._stderr = []

    def __enter__(self) -> ServerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    worker_main()
