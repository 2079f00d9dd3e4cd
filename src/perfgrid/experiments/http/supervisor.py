"""A group of http server workers sharing one port, started and stopped together.

Workers never outlive the process that started them: each is started through
:func:`perfgrid.kit.lifetime.command`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import psutil

from perfgrid.experiments.http.server import HOST, SERVERS, share_port
from perfgrid.kit import lifetime
from perfgrid.kit.eventloops import uvloop_missing


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
        share_port(holder)
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
        cmd = [sys.executable, "-m", "perfgrid.experiments.http.worker", "--server", self.server,
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

