"""Run perfgrid's Erlang programs: the seeds' own runtime beside the Python ports.

Each experiment with erlang variants has an Erlang module in its package's ``erlang/``
folder, and they share ``src/perfgrid/erlang_src/pg_util.erl`` (all compiled to ``.beam``
files by the pipeline's ``erlang_beam`` rule). A program times
its measured part itself (``erlang:monotonic_time``, never the VM's start-up)
and prints one JSON line; :func:`run` starts a fresh VM, waits for it under a
timeout (killing it past the deadline), parses that line and returns it with
the VM's CPU time and peak RSS. :class:`Server` keeps one VM running (the
http server) and talks to it in JSON lines over stdin/stdout.

A perfgrid binding maps to the VM's own flags (config/README.md):

- ``none``: ``+S N +sbt u``, N schedulers (every allowed CPU), unbound;
- ``single``: ``+S 1``, and the VM confined to the plan's one CPU;
- ``compact``: ``+S N +sbt db``, Erlang's default bind (the seed's binding);
- ``spread``: ``+S N +sbt ts``, one scheduler per core first, then siblings.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from perfgrid.kit import binding, lifetime

#: perfgrid binding -> the VM's scheduler bind type (+sbt); single uses +S 1 instead
SBT = {"none": "u", "single": "u", "compact": "db", "spread": "ts"}
DEFAULT_TIMEOUT_S = 600.0
#: no erl_crash.dump files in the working directory when a program fails
ENV = {"ERL_CRASH_DUMP_SECONDS": "0"}


class ErlangError(RuntimeError):
    """An Erlang program failed, printed no report, or overran its deadline."""


def missing() -> str | None:
    """Why the Erlang rows cannot run here (erl or erlc not on PATH), or None."""
    absent = [tool for tool in ("erl", "erlc") if not shutil.which(tool)]
    if absent:
        return (f"{' and '.join(absent)} not found on PATH (Erlang/OTP, Debian package "
                "erlang-nox)")
    return None


@functools.cache
def otp_release() -> str:
    """The installed OTP release and ERTS version, e.g. ``25 (erts 13.1.5)``."""
    proc = subprocess.run(
        lifetime.command(["erl", "-noshell", "-eval",
                          'io:format("~s (erts ~s)", [erlang:system_info(otp_release), '
                          'erlang:system_info(version)]), halt().']),
        capture_output=True, text=True, timeout=60, env={**os.environ, **ENV}, check=False)
    return proc.stdout.strip() or "unknown"


def beam_dir(options: dict[str, str]) -> str:
    """The folder of compiled modules from a job's options (``--option beams=DIR``)."""
    beams = options.get("beams")
    if not beams or not os.path.isfile(os.path.join(beams, "pg_util.beam")):
        raise FileNotFoundError(f"erlang: --option beams=DIR with the compiled modules needed, "
                                f"got {beams!r}")
    return beams


@dataclass
class Vm:
    """The VM flags of one grid point and the CPUs to confine it to (None: leave it)."""

    flags: list[str]
    cpus: list[int] | None = None
    schedulers: int = 1

    def describe(self) -> str:
        return " ".join(self.flags) + (f" (confined to CPU {self.cpus})" if self.cpus else "")


def vm_for(bind: str, schedulers: int | None = None, extra: list[str] | None = None) -> Vm:
    """The VM of a binding: ``schedulers`` scheduler threads (default: every allowed CPU)."""
    if bind not in SBT:
        raise ValueError(f"binding: {bind!r} is not one of {', '.join(SBT)}")
    if bind == "single":
        return Vm(["+S", "1:1", "+sbt", "u", *(extra or [])],
                  binding.plan("single", 1)[0], 1)
    count = schedulers or len(binding.allowed_cpus())
    return Vm(["+S", f"{count}:{count}", "+sbt", SBT[bind], *(extra or [])], None, count)


def command(module: str, args: dict[str, Any], beams: str, vm: Vm) -> list[str]:
    """``erl -noshell -pa BEAMS FLAGS -run MODULE main KEY=VALUE... -s init stop``."""
    words = [f"{key}={value}" for key, value in args.items()]
    return ["erl", "-noshell", "-pa", str(beams), *vm.flags, "-run", module, "main", *words,
            "-s", "init", "stop"]


def parse_report(stdout: str) -> dict[str, Any]:
    """The last line of ``stdout`` that is a JSON object (the program's report)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                report = json.loads(line)
            except ValueError:
                continue
            if isinstance(report, dict):
                return report
    raise ErlangError(f"no JSON report in the program's output: {stdout[-1000:]!r}")


@dataclass
class Result:
    """One program run: its report and what the VM process cost the OS."""

    report: dict[str, Any]
    user_s: float
    sys_s: float
    maxrss_mib: float
    wall_s: float
    stderr: str = ""


def _tail(handle: Any, limit: int = 4000) -> str:
    handle.seek(0)
    return handle.read().decode(errors="replace")[-limit:]


def _killpg(pgid: int) -> None:
    """SIGKILL a VM's process group (beam.smp and its erl_child_setup), if any is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_vm(proc: subprocess.Popen) -> None:
    """SIGKILL the VM's process group and reap the VM."""
    _killpg(proc.pid)
    if proc.returncode is None:
        os.waitpid(proc.pid, 0)
        proc.returncode = -signal.SIGKILL


def run(cmd: list[str], timeout_s: float = DEFAULT_TIMEOUT_S,
        cpus: list[int] | None = None) -> Result:
    """Run one Erlang program to its end; its report, or ErlangError with its stderr.

    The VM gets its own process group (killed whole past ``timeout_s``) and
    dies with this process (:func:`perfgrid.kit.lifetime.command`); ``os.wait4``
    gives its own CPU time and peak RSS (the launcher's few milliseconds
    before ``exec`` included).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(lifetime.command(cmd, cpus), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, env={**os.environ, **ENV},
                                start_new_session=True)
        try:
            status, usage = _wait(proc, started + timeout_s)
        except BaseException:
            kill_vm(proc)
            raise
        finally:
            _killpg(proc.pid)  # whatever the VM left in its group goes with it
        wall = time.monotonic() - started
        if status is None:
            raise ErlangError(f"{_module(cmd)}: the VM ran past its {timeout_s:g} s deadline "
                              f"and was killed; stderr: {_tail(err)!r}")
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr = _tail(err)
        if proc.returncode != 0:
            raise ErlangError(f"{_module(cmd)} exited with {proc.returncode}: {stderr.strip()}")
        out.seek(0)
        report = parse_report(out.read().decode(errors="replace"))
    return Result(report, usage.ru_utime, usage.ru_stime, usage.ru_maxrss / 1024, wall, stderr)


def _module(cmd: list[str]) -> str:
    """The Erlang module a command runs (for messages)."""
    return cmd[cmd.index("-run") + 1] if "-run" in cmd else cmd[0]


def _wait(proc: subprocess.Popen, deadline: float) -> tuple[Any, Any]:
    """(wait status, rusage) of the VM; (None, None) after killing it past ``deadline``."""
    pause = 0.001
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            return status, usage
        if time.monotonic() > deadline:
            kill_vm(proc)
            return None, None
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


@dataclass
class Server:
    """A long-running Erlang program answering JSON lines: started ready, stopped whole."""

    cmd: list[str]
    cpus: list[int] | None = None
    start_timeout_s: float = 60.0
    ready: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self._buffer = b""
        self.proc = subprocess.Popen(lifetime.command(self.cmd, self.cpus),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, env={**os.environ, **ENV},
                                     start_new_session=True)
        try:
            self.ready = self._line(self.start_timeout_s)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _line(self, timeout_s: float) -> dict[str, Any]:
        """The next JSON object line the program prints within ``timeout_s``; other lines
        (logger reports the VM writes to stdout) are skipped."""
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        skipped: list[str] = []
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                text = line.decode(errors="replace").strip()
                try:
                    return parse_report(text)
                except ErlangError:
                    skipped.append(text)
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ErlangError(f"erlang server: no answer within {timeout_s:g} s; "
                                  f"stdout: {skipped[-5:]!r}; stderr: {_tail(self._err)!r}")
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait(5)
                raise ErlangError(f"erlang server exited with {self.proc.returncode}: "
                                  f"{_tail(self._err).strip()}")
            self._buffer += chunk

    def ask(self, request: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Send one command line; the program's JSON answer."""
        self.check_alive()
        self.proc.stdin.write(request.encode() + b"\n")
        self.proc.stdin.flush()
        return self._line(timeout_s)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise ErlangError(f"erlang server died with {self.proc.returncode}: "
                              f"{_tail(self._err).strip()}")

    def stop(self, grace_s: float = 3.0) -> None:
        """Ask the VM to halt (end of input), SIGKILL its group after ``grace_s``."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        _killpg(self.proc.pid)
        if self.proc.returncode is None:
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream and not stream.closed:
                stream.close()
        if not self._err.closed:
            self._err.close()


def draws_file(millis: Any, folder: str | os.PathLike[str] | None = None) -> str:
    """Write integer milliseconds as little-endian uint32 (pg_timers' input); the path."""
    import numpy as np

    data = np.ascontiguousarray(millis, dtype="<u4")
    handle = tempfile.NamedTemporaryFile(prefix="perfgrid-draws-", suffix=".u32", dir=folder,  # noqa: SIM115
                                         delete=False)
    with handle:
        handle.write(data.tobytes())
    return handle.name
