"""One worker of the http experiment's server: HTTP/1.x on asyncio or uvloop.

A worker parses each request head, increments the counter (:mod:`.counter`)
and answers the previous value. Workers share one port through SO_REUSEPORT and
listen on 127.0.0.1 only; :mod:`.worker` is one worker's command line and
:class:`.supervisor.ServerGroup` starts and stops a set of them.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sqlite3
from pathlib import Path

from perfgrid.experiments.http.counter import Counter

SERVERS = ("asyncio", "uvloop")
HOST = "127.0.0.1"
#: listen backlog asked for; the kernel caps it at net.core.somaxconn
BACKLOG = 4096
#: zero-padded so every answer has the same length (ab counts length changes as failures)
VALUE_DIGITS = 20
#: the largest request head a worker accepts
MAX_HEAD = 16384


def somaxconn() -> int | None:
    """The kernel's cap on a listen backlog (net.core.somaxconn)."""
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return None


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


def share_port(sock: socket.socket) -> None:
    """SO_REUSEPORT to share the port between workers; SO_REUSEADDR to bind over the
    TIME_WAIT connections a previous run left (it never allows a second listener)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)


def listening_socket(port: int, backlog: int = BACKLOG) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:``port`` that shares the port (SO_REUSEPORT)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        share_port(sock)
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


def serve(server: str, sock: socket.socket, counter: Counter, ready: dict) -> None:
    """Serve on ``sock`` in an event loop of kind ``server`` until SIGTERM or SIGINT."""
    coro = _serve(sock, counter, ready)
    if server == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(coro)
    else:
        asyncio.run(coro)
