"""CPU binding plans: which CPUs each worker of a grid point may run on.

perfgrid knows four bindings, the same for threads and processes:

- ``none``: the OS decides (every worker may use every allowed CPU);
- ``single``: all workers share one CPU;
- ``compact``: fill adjacent CPUs, SMT siblings of a core first;
- ``spread``: one worker per physical core, round-robin across packages,
  then the siblings.

Plans come from the CPUs this process may use (``os.sched_getaffinity``)
and the sysfs topology, never from ``os.cpu_count()``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BINDINGS = ("none", "single", "compact", "spread")
SYSFS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True, order=True)
class Cpu:
    """One logical CPU and where it sits."""

    package: int
    core: int
    cpu: int


def allowed_cpus() -> list[int]:
    """The logical CPUs this process may run on, sorted."""
    return sorted(os.sched_getaffinity(0))


def _read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return default


def topology(cpus: list[int] | None = None, sysfs: Path = SYSFS_CPU) -> list[Cpu]:
    """Package and core id of each allowed CPU, read from sysfs.

    A CPU without topology files counts as its own core in package 0.
    """
    cpus = allowed_cpus() if cpus is None else cpus
    out = []
    for cpu in cpus:
        topo = sysfs / f"cpu{cpu}" / "topology"
        out.append(
            Cpu(
                package=_read_int(topo / "physical_package_id", 0),
                core=_read_int(topo / "core_id", cpu),
                cpu=cpu,
            )
        )
    return out


def compact_order(topo: list[Cpu]) -> list[int]:
    """CPUs ordered so that SMT siblings of a core are adjacent."""
    return [c.cpu for c in sorted(topo)]


def spread_order(topo: list[Cpu]) -> list[int]:
    """CPUs ordered one per physical core, alternating packages, then siblings."""
    by_core: dict[tuple[int, int], list[int]] = {}
    for c in sorted(topo):
        by_core.setdefault((c.package, c.core), []).append(c.cpu)
    packages = sorted({pkg for pkg, _ in by_core})
    cores_of = {pkg: [k for k in sorted(by_core) if k[0] == pkg] for pkg in packages}
    order: list[int] = []
    depth = max(len(v) for v in by_core.values())
    for level in range(depth):  # level 0: first thread of each core, then siblings
        rounds = max(len(v) for v in cores_of.values())
        for i in range(rounds):
            for pkg in packages:
                if i < len(cores_of[pkg]):
                    threads = by_core[cores_of[pkg][i]]
                    if level < len(threads):
                        order.append(threads[level])
    return order


def plan(binding: str, workers: int, topo: list[Cpu] | None = None) -> list[list[int]]:
    """The CPU list of each of ``workers`` workers under ``binding``.

    Workers beyond the number of CPUs wrap around, so ``compact`` and
    ``spread`` with 16 workers on 2 CPUs put 8 on each.
    """
    if binding not in BINDINGS:
        raise ValueError(f"binding: {binding!r} is not one of {', '.join(BINDINGS)}")
    if workers < 1:
        raise ValueError(f"workers: must be at least 1, got {workers}")
    topo = topology() if topo is None else topo
    everything = sorted(c.cpu for c in topo)
    if binding == "none":
        return [everything for _ in range(workers)]
    if binding == "single":
        return [[everything[0]] for _ in range(workers)]
    order = compact_order(topo) if binding == "compact" else spread_order(topo)
    return [[order[i % len(order)]] for i in range(workers)]


def pin(cpus: list[int]) -> list[int]:
    """Pin the calling thread (or process) to ``cpus``; return what it then has."""
    os.sched_setaffinity(0, cpus)
    return sorted(os.sched_getaffinity(0))


def describe(cpu_lists: list[list[int]]) -> str:
    """A compact text form of a plan for metadata: ``0,1|0|1``."""
    return "|".join(",".join(map(str, cpus)) for cpus in cpu_lists)
