"""Nothing a benchmark job starts may outlive it.

Three mechanisms, because a job can lose its parent, or its children, in
three ways:

- every program a job starts (dd, fio, ab, the C programs, erl, the http
  server workers, the spawn runner) is started through :func:`command`:
  a small launcher (this file run as a script) asks the kernel for SIGKILL
  when the job dies (``PR_SET_PDEATHSIG``), checks that the job is still its
  parent (the job may have died before the ``prctl``) and only then execs
  the program, which keeps the death signal across ``exec``. No
  ``preexec_fn`` (unsafe with threads) and no process-group bookkeeping;
- a child that Python code forks, and a pyperf worker (started by pyperf,
  not by us), calls :func:`die_with_parent` itself with the pid of the
  process it must die with, which closes the same race;
- the job's own harness watches the Snakemake process above it: if Snakemake
  is SIGKILLed, the shell between them survives, so the harness notices,
  kills its process tree and exits.

The kernel sends the death signal when the *thread* that started the child
exits, so children are started from threads that live as long as the job.

This module imports only the standard library at its top, so that the
launcher starts in a bare ``python -I -S``; psutil is imported where it is
used.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil

_PR_SET_PDEATHSIG = 1
#: exit status of a launcher or worker whose parent was already gone
ORPHANED = 70


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when ``parent`` dies; exit now if it already has.

    The check after ``prctl`` closes the window between fork and ``prctl``:
    a parent that died in it left us orphaned, and the signal would never come.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os.write(2, f"perfgrid: parent {parent} already gone, exiting\n".encode())
        os._exit(ORPHANED)


def command(cmd: list[str], cpus: list[int] | None = None) -> list[str]:
    """``cmd`` run so that it dies with this process (and is confined to ``cpus``).

    Pass the result to ``subprocess`` from the thread (normally the main
    one) that lives as long as the job.
    """
    prefix = [sys.executable, "-I", "-S", str(Path(__file__).resolve()), str(os.getpid())]
    if cpus:
        prefix.append("--cpus=" + ",".join(map(str, cpus)))
    return [*prefix, "--", *cmd]


def run_json(cmd: list[str], timeout: float = 600) -> dict[str, Any]:
    """Run a program that prints one JSON report (perfgrid's C programs), dying with us.

    A failure raises with the command's first words and the tail of its stderr,
    which names what the program refused.
    """
    import json
    import subprocess

    proc = subprocess.run(command(cmd), capture_output=True, text=True, check=False,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def _launch(argv: list[str]) -> None:
    """The launcher: ``PARENT [--cpus=LIST] -- PROGRAM ARGS...``; never returns."""
    split = argv.index("--")
    parent, options, cmd = int(argv[0]), argv[1:split], argv[split + 1:]
    die_with_parent(parent)
    for option in options:
        if option.startswith("--cpus="):
            os.sched_setaffinity(0, [int(c) for c in option[len("--cpus="):].split(",")])
    try:
        os.execvp(cmd[0], cmd)
    except OSError as err:
        os.write(2, f"perfgrid: cannot run {cmd[0]}: {err}\n".encode())
        os._exit(127)


def kill_tree(root: psutil.Process | None = None, include_root: bool = False) -> int:
    """SIGKILL every descendant of ``root`` (default: this process); return how many."""
    import psutil

    root = root or psutil.Process()
    victims = root.children(recursive=True)
    if include_root:
        victims.append(root)
    for proc in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(victims, timeout=5)
    return len(victims)


def _snakemake_ancestor() -> psutil.Process | None:
    import psutil

    for proc in psutil.Process().parents():
        try:
            if any("snakemake" in part for part in proc.cmdline()[:3]):
                return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def watch_snakemake(interval: float = 0.5) -> threading.Thread | None:
    """Exit (killing our process tree) if the Snakemake process above us dies."""
    import psutil

    ancestor = _snakemake_ancestor()
    if ancestor is None:
        return None

    def watch() -> None:
        while True:
            try:
                alive = ancestor.is_running() and ancestor.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                alive = False
            if not alive:
                kill_tree()
                os._exit(1)
            threading.Event().wait(interval)

    thread = threading.Thread(target=watch, name="perfgrid-watchdog", daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    _launch(sys.argv[1:])
