"""Process helpers shared by the tests that check nothing outlives its job."""

from __future__ import annotations

import time

import psutil


def live(pids: list[int]) -> list[int]:
    """The ``pids`` that are still running (zombies count as gone)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def still_alive_after(pids: list[int], timeout: float) -> list[int]:
    """The ``pids`` still running after polling for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (alive := live(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def gone(pids: list[int], timeout: float = 5.0) -> bool:
    """True once none of ``pids`` is a live (non-zombie) process, within ``timeout``."""
    return not still_alive_after(pids, timeout)
