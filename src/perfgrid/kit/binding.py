"""CPU binding plans: which CPUs each worker of a grid point may run on.

perfgrid knows four bindings, the same for threads and processes:

- ``none``: the OS decides (every worker may use every allowed CPU);
- ``single``: all workers share one CPU (the first allowed one);
- ``compact``: fill a core's SMT siblings, then the cores sharing an L3 cache, then a
  NUMA node and a package, then the next;
- ``spread``: one worker per core, round-robin across packages, NUMA nodes and L3 groups,
  then the second SMT sibling of every core, and so on.

Workers beyond the allowed CPUs wrap around. Plans come from the CPUs this process may use
(``os.sched_getaffinity``: a taskset, cpuset cgroup or SLURM allocation shows there) and
the sysfs topology (:mod:`perfgrid.kit.topology`), never from ``os.cpu_count()``.

After a point ran, :func:`checked_placement` compares the plan with the affinities read
back from the workers, fails the point where they differ, and says whether the workers
shared a core, an L3 group or a NUMA node.
"""

from __future__ import annotations

import os
from pathlib import Path

from perfgrid.kit import topology as topology_module
from perfgrid.kit.topology import Cpu, compact_order, spread_order

__all__ = ["BINDINGS", "Cpu", "PlacementError", "allowed_cpus", "auto_workers",
           "checked_placement", "compact_order", "describe", "parse_plan", "pin", "placement",
           "plan", "spread_order", "topology"]

BINDINGS = ("none", "single", "compact", "spread")
SYSFS_CPU = Path("/sys/devices/system/cpu")


class PlacementError(RuntimeError):
    """The workers did not run where the plan put them."""


def allowed_cpus() -> list[int]:
    """The logical CPUs this process may run on, sorted."""
    return sorted(os.sched_getaffinity(0))


def auto_workers(cpus: int, minimum: int = 1) -> list[int]:
    """``workers: auto``: 1, 2, 4, ... below ``cpus``, ``cpus`` itself, and twice it
    (oversubscription), leaving out counts below ``minimum`` (a ring needs 2)."""
    if cpus < 1:
        raise ValueError(f"auto workers: need at least one CPU, got {cpus}")
    counts = []
    power = 1
    while power < cpus:
        counts.append(power)
        power *= 2
    counts += [cpus, 2 * cpus]
    return [c for c in counts if c >= minimum] or [minimum]


def topology(cpus: list[int] | None = None, sysfs: Path = SYSFS_CPU) -> list[Cpu]:
    """The allowed CPUs (or ``cpus``) with their package, die, core, L3 group and node.

    ``sysfs`` is the ``devices/system/cpu`` folder, as before; its root is three levels up.
    """
    root = sysfs.parents[2] if sysfs.name == "cpu" else sysfs
    return topology_module.read(root, allowed=cpus).usable()


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


def parse_plan(text: str) -> tuple[list[list[int]], bool]:
    """The CPU lists of :func:`describe`'s text, and whether it was shortened
    (``0|1|...|1|... (100 chains)`` keeps only the first lists)."""
    lists: list[list[int]] = []
    for part in str(text).split("|"):
        part = part.strip()
        if part.startswith("..."):
            return lists, True
        lists.append(sorted(int(c) for c in part.split(",") if c.strip()))
    return lists, False


def placement(cpu_lists: list[list[int]], topo: list[Cpu]) -> dict[str, bool]:
    """Whether any two workers may run on one core, one L3 group, one NUMA node.

    A worker may run on every CPU of its list, so two unbound workers share all three.
    """
    places = {c.cpu: c for c in topo}

    def shares(key) -> bool:  # noqa: ANN001 - a Cpu -> hashable accessor
        seen: set = set()
        for cpus in cpu_lists:
            mine = {key(places.get(c, Cpu(0, -1 - c, c))) for c in cpus}
            if mine & seen:
                return True
            seen |= mine
        return False

    return {"shares_core": shares(lambda c: c.core_key),
            "shares_l3": shares(lambda c: c.l3_key),
            "shares_node": shares(lambda c: c.node)}


#: where experiments record the affinities read back from their workers (or chains)
READBACK_KEYS = ("perfgrid_worker_cpus", "perfgrid_chain_cpus")


def checked_placement(metadata: dict, topo: list[Cpu] | None = None) -> dict[str, bool]:
    """Placement columns of one run, from the read-back affinities in its metadata.

    Raises PlacementError where a worker's read-back CPUs differ from its plan: a
    measurement of the wrong placement must not become a row. Nothing is checked (and no
    columns come back) where no per-worker read-back exists: the Erlang VM binds its own
    schedulers (``+sbt``), fio pins its own threads, timers has no workers.
    """
    plan_text = metadata.get("perfgrid_binding_plan")
    key = next((k for k in READBACK_KEYS if metadata.get(k)), None)
    if metadata.get("perfgrid_runtime") == "erlang" or not plan_text or key is None:
        return {}
    planned, plan_cut = parse_plan(str(plan_text))
    seen, seen_cut = parse_plan(str(metadata[key]))
    if not (plan_cut or seen_cut) and len(planned) != len(seen):
        return {}
    wrong = [(i, p, s) for i, (p, s) in enumerate(zip(planned, seen, strict=False)) if p != s]
    if wrong:
        shown = "; ".join(f"worker {i}: planned {describe([p])}, ran on {describe([s])}"
                          for i, p, s in wrong[:4])
        more = "; ..." if len(wrong) > 4 else ""
        raise PlacementError(f"binding {metadata.get('perfgrid_binding')!r}: the read-back "
                             f"affinities differ from the plan ({shown}{more}); something "
                             f"else (a cgroup, the kernel, another tool) moved the workers, "
                             f"so the point was not measured as planned")
    flags = placement(seen, topology() if topo is None else topo)
    if seen_cut:  # only the first lists are known: a share seen there holds, no share may not
        return {k: v for k, v in flags.items() if v}
    return flags
