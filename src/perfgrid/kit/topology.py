"""The machine's CPU topology from sysfs: SMT siblings, cores, dies, L3 groups, packages,
NUMA nodes, and which CPUs this process may use.

Binding plans and the placement columns need to know which CPUs share a core, a last-level
cache or a memory node; ``os.cpu_count()`` and ``core_id`` alone cannot say (``core_id``
repeats across the dies and packages of a machine). sysfs is read directly, so nothing
needs installing; hwloc (``lstopo``) shows the same facts and is a good cross-check.

Every reader takes the sysfs root as an argument so that tests can point it at a synthetic
tree (``tests/topology_trees.py`` writes four) shaped like ``/sys``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SYSFS = Path("/sys")
#: the CPU count ``workers: auto`` is built for, where set (see :func:`cpu_limit`)
AUTO_CPUS_ENV = "PERFGRID_AUTO_CPUS"
#: what set that count (the affinity mask, a cgroup CPU quota, the variable), for the report
AUTO_CPUS_SOURCE_ENV = "PERFGRID_AUTO_CPUS_SOURCE"
MAX_AUTO_CPUS = 2048
#: the longest text of a bad variable's message, or of what set the count
_MESSAGE = 300


@dataclass(frozen=True, order=True)
class Cpu:
    """One logical CPU and where it sits.

    ``core`` is sysfs's ``core_id``: unique only within one die of one package, so a core is
    identified by ``core_key`` (package, die, core). ``l3`` is the smallest CPU of the CPUs
    sharing its L3 cache (None: unknown, one L3 per package assumed); ``node`` its NUMA node.
    """

    package: int
    core: int
    cpu: int
    die: int = 0
    l3: int | None = None
    node: int = 0

    @property
    def core_key(self) -> tuple[int, int, int]:
        return (self.package, self.die, self.core)

    @property
    def l3_key(self) -> tuple[int, int]:
        return (self.package, -1 if self.l3 is None else self.l3)


def parse_cpu_list(text: str) -> list[int]:
    """``0-3,8,10-11`` (the kernel's list format) into sorted CPU numbers."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            out.update(range(int(low), int(high) + 1))
        else:
            out.add(int(part))
    return sorted(out)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """Sorted CPU numbers in the kernel's list format: ``0-3,8``."""
    cpus = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in [*cpus, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_int(path: Path, default: int) -> int:
    text = _read(path)
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def online_cpus(sysfs: Path = SYSFS) -> list[int]:
    """The CPUs the kernel has online (``cpu/online``, else every ``cpuN`` folder)."""
    text = _read(sysfs / "devices/system/cpu/online")
    if text:
        return parse_cpu_list(text)
    folder = sysfs / "devices/system/cpu"
    found = [int(m.group(1)) for p in folder.glob("cpu*")
             if (m := re.fullmatch(r"cpu(\d+)", p.name))]
    return sorted(found) or sorted(os.sched_getaffinity(0))


def _l3_of(cpu_dir: Path) -> int | None:
    """Smallest CPU sharing this CPU's level-3 cache, or None without one."""
    for index in sorted((cpu_dir / "cache").glob("index*")):
        if _read(index / "level") == "3" and _read(index / "type") in (None, "Unified"):
            shared = _read(index / "shared_cpu_list")
            if shared:
                return parse_cpu_list(shared)[0]
    return None


def _nodes(sysfs: Path) -> dict[int, int]:
    """CPU -> NUMA node from ``node/nodeN/cpulist``; empty without NUMA information."""
    out: dict[int, int] = {}
    for folder in (sysfs / "devices/system/node").glob("node*"):
        match = re.fullmatch(r"node(\d+)", folder.name)
        text = _read(folder / "cpulist") if match else None
        if match and text:
            for cpu in parse_cpu_list(text):
                out[cpu] = int(match.group(1))
    return out


@dataclass(frozen=True)
class Topology:
    """Every online CPU and the ones this process may use (``allowed``)."""

    cpus: tuple[Cpu, ...]
    allowed: tuple[int, ...]
    source: str = "sysfs"
    smt: dict[int, tuple[int, ...]] = field(default_factory=dict, compare=False)

    def usable(self) -> list[Cpu]:
        """The allowed CPUs with their places: what plans may use."""
        chosen = set(self.allowed)
        return [c for c in self.cpus if c.cpu in chosen]

    def by_cpu(self) -> dict[int, Cpu]:
        return {c.cpu: c for c in self.cpus}

    def summary(self) -> dict[str, Any]:
        """Counts and groups as JSON for machine.json and the report."""
        usable = self.usable()
        l3_groups: dict[tuple[int, int], list[int]] = {}
        for c in self.cpus:
            l3_groups.setdefault(c.l3_key, []).append(c.cpu)
        nodes: dict[int, list[int]] = {}
        for c in self.cpus:
            nodes.setdefault(c.node, []).append(c.cpu)
        cores = {c.core_key for c in self.cpus}
        return {
            "source": self.source,
            "online": [c.cpu for c in self.cpus],
            "allowed": list(self.allowed),
            "packages": len({c.package for c in self.cpus}),
            "dies": len({(c.package, c.die) for c in self.cpus}),
            "cores": len(cores),
            "threads_per_core": max((len(v) for v in _group(self.cpus).values()), default=1),
            "l3_groups": [format_cpu_list(v) for _, v in sorted(l3_groups.items())],
            "numa_nodes": {str(n): format_cpu_list(v) for n, v in sorted(nodes.items())},
            "allowed_cores": len({c.core_key for c in usable}),
            "allowed_l3_groups": len({c.l3_key for c in usable}),
            "allowed_numa_nodes": len({c.node for c in usable}),
            "cpus": [{"cpu": c.cpu, "package": c.package, "die": c.die, "core_id": c.core,
                      "l3": c.l3, "node": c.node,
                      "siblings": format_cpu_list(self.smt.get(c.cpu, (c.cpu,)))}
                     for c in self.cpus],
        }


def _group(cpus: Iterable[Cpu]) -> dict[tuple[int, int, int], list[int]]:
    out: dict[tuple[int, int, int], list[int]] = {}
    for c in sorted(cpus, key=lambda c: c.cpu):
        out.setdefault(c.core_key, []).append(c.cpu)
    return out


def read(sysfs: Path = SYSFS, allowed: Iterable[int] | None = None) -> Topology:
    """The topology under ``sysfs`` (default ``/sys``); ``allowed`` defaults to this
    process's affinity (``os.sched_getaffinity``), limited to the online CPUs.

    Missing files fall back safely: no ``die_id`` is die 0, no ``core_id`` makes a CPU its
    own core, no L3 entry puts a package's CPUs in one group, no ``node/`` folder puts
    every CPU on node 0.
    """
    online = online_cpus(sysfs)
    nodes = _nodes(sysfs)
    cpus: list[Cpu] = []
    smt: dict[int, tuple[int, ...]] = {}
    for cpu in online:
        folder = sysfs / f"devices/system/cpu/cpu{cpu}"
        topo = folder / "topology"
        cpus.append(Cpu(package=_read_int(topo / "physical_package_id", 0),
                        core=_read_int(topo / "core_id", cpu), cpu=cpu,
                        die=_read_int(topo / "die_id", 0), l3=_l3_of(folder),
                        node=nodes.get(cpu, 0)))
        siblings = _read(topo / "core_cpus_list") or _read(topo / "thread_siblings_list")
        smt[cpu] = tuple(parse_cpu_list(siblings)) if siblings else (cpu,)
    # the siblings list is the kernel's own word on what a core is: CPUs listed together
    # are one core even if core_id says otherwise (some VMs report every core_id as 0)
    first_of: dict[int, int] = {}
    for cpu, group in smt.items():
        first_of[cpu] = min(group)
    by_cpu = {c.cpu: c for c in cpus}
    fixed = []
    for c in cpus:
        lead = by_cpu.get(first_of[c.cpu], c)
        same_core = {x.cpu for x in cpus if x.core_key == c.core_key}
        if lead.cpu != c.cpu and lead.core_key != c.core_key:
            c = Cpu(c.package, lead.core, c.cpu, lead.die, c.l3, c.node)
        elif len(same_core) > len(smt[c.cpu]):  # core_id repeats without being siblings
            c = Cpu(c.package, -1 - first_of[c.cpu], c.cpu, c.die, c.l3, c.node)
        fixed.append(c)
    chosen = sorted(os.sched_getaffinity(0)) if allowed is None else sorted(set(allowed))
    allowed_online = tuple(cpu for cpu in chosen if cpu in by_cpu) or tuple(chosen)
    return Topology(cpus=tuple(fixed), allowed=allowed_online, smt=smt)


def compact_order(topo: list[Cpu]) -> list[int]:
    """Fill a core's SMT siblings, then the cores sharing an L3, then a NUMA node and a
    package, then the next."""
    return [c.cpu for c in sorted(topo, key=lambda c: (c.package, c.node, c.l3_key, c.die,
                                                       c.core, c.cpu))]


def _interleave(groups: list[list[int]]) -> list[int]:
    out: list[int] = []
    for i in range(max((len(g) for g in groups), default=0)):
        out += [g[i] for g in groups if i < len(g)]
    return out


def spread_order(topo: list[Cpu]) -> list[int]:
    """One CPU per core, round-robin across packages, then NUMA nodes, then L3 groups;
    then the second SMT sibling of every core in the same order, and so on."""
    cores = _group(topo)
    places = {c.cpu: c for c in topo}
    order: list[int] = []
    for level in range(max((len(v) for v in cores.values()), default=0)):
        firsts = [places[v[level]] for v in cores.values() if level < len(v)]
        tree: dict[int, dict[int, dict[tuple[int, int], list[Cpu]]]] = {}
        for c in sorted(firsts, key=lambda c: (c.die, c.core, c.cpu)):
            tree.setdefault(c.package, {}).setdefault(c.node, {}).setdefault(
                c.l3_key, []).append(c)
        order += _interleave([
            _interleave([_interleave([[c.cpu for c in group]
                                      for _, group in sorted(l3s.items())])
                         for _, l3s in sorted(nodes.items())])
            for _, nodes in sorted(tree.items())])
    return order


def restriction(topo: Topology, environ: dict[str, str] | None = None,
                proc: Path = Path("/proc/self/cgroup"),
                cgroup_root: Path = Path("/sys/fs/cgroup")) -> dict[str, Any]:
    """Whether this process may use fewer CPUs than are online, and what says so.

    The affinity mask is what counts (it already reflects taskset, a cpuset cgroup and a
    SLURM allocation); the cgroup's cpuset and SLURM's variables only explain it.
    """
    environ = dict(os.environ) if environ is None else environ
    online = [c.cpu for c in topo.cpus]
    why: list[str] = []
    cpuset = _cgroup_cpuset(proc, cgroup_root)
    if cpuset is not None and set(cpuset) < set(online):
        why.append(f"cpuset cgroup ({format_cpu_list(cpuset)})")
    if environ.get("SLURM_JOB_ID"):
        cpus = environ.get("SLURM_CPUS_ON_NODE") or environ.get("SLURM_JOB_CPUS_PER_NODE")
        why.append(f"SLURM job {environ['SLURM_JOB_ID']}"
                   + (f" ({cpus} CPUs on this node)" if cpus else ""))
    restricted = len(topo.allowed) < len(online)
    if restricted and (cpuset is None or set(topo.allowed) < set(cpuset)):
        why.append("affinity mask (taskset, numactl or a parent's sched_setaffinity)")
    return {"restricted": restricted, "allowed": len(topo.allowed), "online": len(online),
            "allowed_list": format_cpu_list(topo.allowed), "by": why if restricted else []}


def cpu_limit(environ: Mapping[str, str] | None = None,
              allowed: Iterable[int] | None = None,
              proc: Path = Path("/proc/self/cgroup"),
              cgroup_root: Path = Path("/sys/fs/cgroup")) -> tuple[int, str]:
    """The CPU count ``workers: auto`` is built for, and what set it.

    ``PERFGRID_AUTO_CPUS`` where set: a cluster run builds its grid on the login node,
    not where the jobs run, and the workflow sets it (and ``PERFGRID_AUTO_CPUS_SOURCE``)
    for its jobs. Else the smaller of the CPUs this process may use (the affinity mask,
    so taskset, a cpuset cgroup or a SLURM allocation count, never ``os.cpu_count()``)
    and a cgroup CPU quota rounded up (:func:`cgroup_cpu_quota`). ``allowed``,
    ``proc`` and ``cgroup_root`` stand in for the mask and the cgroup files in tests.
    Raises ValueError, naming the variable and what is allowed, for a bad variable
    (perfgrid.pipeline.settings words it as a ConfigError).
    """
    environ = os.environ if environ is None else environ
    text = environ.get(AUTO_CPUS_ENV, "").strip(" \t\r\n")
    if text:
        # ASCII digits only: str.isdigit() also takes '²' (int() refuses it) and '٣' (3)
        if not re.fullmatch(r"[0-9]+", text) or not 1 <= int(text) <= MAX_AUTO_CPUS:
            raise ValueError(_brief(f"{AUTO_CPUS_ENV}={text!r} (the CPU count of workers: "
                                    f"auto); allowed: a whole number from 1 to "
                                    f"{MAX_AUTO_CPUS} in the digits 0-9, or unset"))
        return int(text), _brief(environ.get(AUTO_CPUS_SOURCE_ENV, "").strip()
                                 or f"the {AUTO_CPUS_ENV} variable")
    cpus = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    count, source = len(cpus), f"the affinity mask (CPUs {format_cpu_list(cpus)})"
    quota = cgroup_cpu_quota(proc, cgroup_root)
    if quota is not None and quota[0] < count:
        count, source = quota[0], f"the cgroup CPU quota ({quota[1]})"
    return count, source


def _brief(text: str, limit: int = _MESSAGE) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (as
    perfgrid.pipeline.config_errors.brief, which sits floors above this module)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters left out)"


def cgroup_cpu_quota(proc: Path = Path("/proc/self/cgroup"),
                     root: Path = Path("/sys/fs/cgroup")) -> tuple[int, str] | None:
    """The CPUs a CPU bandwidth quota lets this process's cgroup use, rounded up, and where
    it is set; None where there is none.

    A container given 2 CPUs of 16 by a quota still has all 16 in its affinity mask, and 16
    workers there run 2 at a time. The quota is cgroup v2's ``cpu.max`` (``200000 100000``:
    2 CPUs; ``max 100000``: none) or v1's ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``,
    of the cgroup or any ancestor (the smallest counts).
    """
    text = _read(proc)
    if not text:
        return None
    best: tuple[int, str] | None = None
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        parts = [p for p in path.strip().split("/") if p]
        if ".." in parts:  # outside this cgroup namespace: only its root is visible
            parts = []
        if controllers == "":  # cgroup v2
            base, reader = root, _cpu_max
        elif "cpu" in controllers.split(","):  # v1, mounted as cpu,cpuacct or cpu
            base = root / controllers if (root / controllers).is_dir() else root / "cpu"
            reader = _cfs_quota
        else:
            continue
        for depth in range(len(parts), -1, -1):
            found = reader(base.joinpath(*parts[:depth]))
            if found is not None and (best is None or found[0] < best[0]):
                best = found
    return best


def _quota_cpus(quota: str | None, period: str | None) -> int | None:
    """ceil(quota / period) from the two numbers' text; None for no quota (max, -1)."""
    if not (quota and period and re.fullmatch(r"[0-9]+", quota)
            and re.fullmatch(r"[0-9]+", period) and int(period) > 0):
        return None
    return max(1, -(-int(quota) // int(period)))


def _cpu_max(folder: Path) -> tuple[int, str] | None:
    text = _read(folder / "cpu.max") or ""
    quota, _, period = text.partition(" ")
    cpus = _quota_cpus(quota, period)
    return None if cpus is None else (cpus, f"{folder / 'cpu.max'}: {text}")


def _cfs_quota(folder: Path) -> tuple[int, str] | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    cpus = _quota_cpus(quota, period)
    return None if cpus is None else (
        cpus, f"{folder / 'cpu.cfs_quota_us'}: {quota} us per {period} us")


def _cgroup_cpuset(proc: Path, root: Path) -> list[int] | None:
    """The CPUs of this process's cpuset cgroup (v2 or v1), or None if unreadable."""
    text = _read(proc)
    if not text:
        return None
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        path = path.lstrip("/")
        if controllers == "":  # cgroup v2
            candidates = [root / path / "cpuset.cpus.effective"]
        elif "cpuset" in controllers.split(","):
            candidates = [root / "cpuset" / path / "cpuset.effective_cpus",
                          root / "cpuset" / path / "cpuset.cpus"]
        else:
            continue
        for candidate in candidates:
            value = _read(candidate)
            if value:
                return parse_cpu_list(value)
    return None
