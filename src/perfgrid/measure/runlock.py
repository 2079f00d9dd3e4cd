"""One run at a time on a result set: a lock kept in ``results/<host>/`` itself.

Snakemake's own lock lives in the working directory's ``.snakemake/``, so two
clones (two working directories) pointed at one ``results`` folder and host
both ran every point, the last write winning. The workflow takes this lock
when it starts running jobs (``onstart``: never for a dry run, ``--lint`` or
``--report``) and lets go at the end; a second run on the same result set
stops at once, naming the holder. It is an ``flock``, so the kernel lets go
when the holder dies however it dies: a lock file left by a dead run blocks
nothing, and what it says (pid, host, start, working directory) is only
information. ``bench_lock`` (:mod:`perfgrid.measure.bench`) is another lock: it
serialises the benchmark jobs within one run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time
from pathlib import Path

#: open lock files of this process, by path: kept open (and so held) until released
_HELD: dict[str, int] = {}


class Held(RuntimeError):
    """Another run holds the result set's lock; the message names it."""


def holder(path: str | os.PathLike[str]) -> str:
    """What the lock file says of the run holding it, in words."""
    try:
        with open(path, encoding="utf-8") as handle:
            facts = json.loads(handle.read(1 << 16))
        return (f"pid {facts['pid']} on host {facts['host']}, started "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(facts['started']))}, "
                f"working directory {facts['cwd']}")
    except (OSError, ValueError, KeyError, TypeError):
        return "a run whose lock file says nothing yet"


def acquire(path: str | os.PathLike[str], argv: list[str] | None = None) -> None:
    """Take the result set's lock at ``path`` for this process, or raise :class:`Held`.

    The lock file (created if missing) then says who holds it. Taking a lock
    this process already holds is a no-op.
    """
    key = os.path.abspath(path)
    if key in _HELD:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # no symlink followed; a pipe put there neither blocks the open nor passes the check
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Held(f"{path} is not a regular file; perfgrid keeps its run lock there: "
                       f"move it away")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise Held(f"another perfgrid run is using the result set {Path(path).parent}/: "
                       f"{holder(path)} (it holds {path}). Wait for it to end, or give this "
                       f"run another `results` or `host`") from None
        facts = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                 "cwd": os.getcwd(), "argv": argv or []}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(facts, indent=2) + "\n").encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    _HELD[key] = fd


def release(path: str | os.PathLike[str]) -> None:
    """Let go of the lock at ``path`` if this process holds it. The file stays: removed,
    a run that opened it just before could lock the old file and another a new one."""
    fd = _HELD.pop(os.path.abspath(path), None)
    if fd is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
