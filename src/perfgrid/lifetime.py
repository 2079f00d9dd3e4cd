"""Nothing a benchmark job starts may outlive it.

Two mechanisms, because a job can lose its parent in two ways:

- a child (pyperf worker, server, load generator) asks the kernel for
  SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), so killing a job
  (even with SIGKILL) takes its children with it;
- the job's own harness watches the Snakemake process above it: if Snakemake
  is SIGKILLed, the shell between them survives, so the harness notices,
  kills its process tree and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import threading

import psutil

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent exits (Linux)."""
    if _libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def kill_tree(root: psutil.Process | None = None, include_root: bool = False) -> int:
    """SIGKILL every descendant of ``root`` (default: this process); return how many."""
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
    for proc in psutil.Process().parents():
        try:
            if any("snakemake" in part for part in proc.cmdline()[:3]):
                return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def watch_snakemake(interval: float = 0.5) -> threading.Thread | None:
    """Exit (killing our process tree) if the Snakemake process above us dies."""
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
