"""CPU time and context switches of a ring's members: this process's, and its forked
members' (read with psutil while they live)."""

from __future__ import annotations

import resource
from dataclasses import dataclass

import psutil


@dataclass
class Usage:
    """CPU time and context switches spent by the ring's members."""

    user_s: float = 0.0
    sys_s: float = 0.0
    ctx_voluntary: int = 0
    ctx_involuntary: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.user_s + other.user_s, self.sys_s + other.sys_s,
                     self.ctx_voluntary + other.ctx_voluntary,
                     self.ctx_involuntary + other.ctx_involuntary)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.user_s - other.user_s, self.sys_s - other.sys_s,
                     self.ctx_voluntary - other.ctx_voluntary,
                     self.ctx_involuntary - other.ctx_involuntary)


def self_usage() -> Usage:
    """This process, all its threads."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return Usage(ru.ru_utime, ru.ru_stime, ru.ru_nvcsw, ru.ru_nivcsw)


def process_usage(pids: list[int]) -> Usage:
    """Live single-threaded processes, read with psutil."""
    total = Usage()
    for pid in pids:
        proc = psutil.Process(pid)
        cpu, ctx = proc.cpu_times(), proc.num_ctx_switches()
        total = total + Usage(cpu.user, cpu.system, ctx.voluntary, ctx.involuntary)
    return total
