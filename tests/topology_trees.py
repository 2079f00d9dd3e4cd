"""The synthetic sysfs trees of tests/test_topology.py, written where a test asks.

Each tree is shaped like /sys for the files perfgrid.kit.topology reads, numbered as Linux
numbers the real machine (SMT siblings of CPU i are i + cores on Intel and AMD alike):

- vm2_nosmt: a 2-vCPU KVM guest without SMT (this project's machine): no node/ folder;
- desktop_8c16t: an 8-core 16-thread desktop, one L3, one NUMA node; no core_cpus_list
  (kernels before 5.x have only thread_siblings_list);
- server_2s16c_smt: two sockets of 16 cores with SMT, one L3 and one NUMA node per socket;
  core_id has gaps and repeats across the sockets, as on Xeons;
- epyc_64c_8l3: a 64-core single-socket part (SMT off) with 8 L3 groups of 8 cores (one
  per CCD), one NUMA node (NPS1); core_id restarts in each of 8 dies, so core_id alone
  does not name a core.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def fmt(cpus: list[int]) -> str:
    cpus = sorted(cpus)
    parts, start, prev = [], cpus[0], cpus[0]
    for cpu in cpus[1:] + [None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(parts)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def tree(base: Path, name: str, cpus: dict[int, dict], nodes: dict[int, list[int]] | None,
         siblings_file: str = "core_cpus_list") -> None:
    root = base / name
    shutil.rmtree(root, ignore_errors=True)
    base = root / "devices/system/cpu"
    write(base / "online", fmt(list(cpus)))
    for cpu, c in cpus.items():
        topo = base / f"cpu{cpu}/topology"
        write(topo / "physical_package_id", str(c["package"]))
        write(topo / "die_id", str(c.get("die", 0)))
        write(topo / "core_id", str(c["core_id"]))
        write(topo / siblings_file, fmt(c["siblings"]))
        cache = base / f"cpu{cpu}/cache"
        write(cache / "index2/level", "2")
        write(cache / "index2/shared_cpu_list", fmt(c["siblings"]))
        write(cache / "index3/level", "3")
        write(cache / "index3/type", "Unified")
        write(cache / "index3/shared_cpu_list", fmt(c["l3"]))
    for node, members in (nodes or {}).items():
        write(root / f"devices/system/node/node{node}/cpulist", fmt(members))


def build(base: Path) -> Path:
    """Write the four trees under ``base`` (one folder per shape); returns ``base``."""
    tree(base, "vm2_nosmt", {i: {"package": 0, "core_id": i, "siblings": [i], "l3": [0, 1]}
                       for i in range(2)}, None)
    tree(base, "desktop_8c16t",
         {i: {"package": 0, "core_id": i % 8, "siblings": [i % 8, i % 8 + 8],
              "l3": list(range(16))} for i in range(16)},
         {0: list(range(16))}, siblings_file="thread_siblings_list")
    core_ids = [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]
    server = {}
    for i in range(64):
        package, index = (i // 16) % 2, i % 16
        first = package * 16 + index
        package_cpus = [c for c in range(64) if (c // 16) % 2 == package]
        server[i] = {"package": package, "core_id": core_ids[index],
                     "siblings": [first, first + 32], "l3": package_cpus}
    tree(base, "server_2s16c_smt", server,
         {p: [c for c in range(64) if (c // 16) % 2 == p] for p in (0, 1)})
    tree(base, "epyc_64c_8l3",
         {i: {"package": 0, "die": i // 8, "core_id": i % 8, "siblings": [i],
              "l3": list(range(i // 8 * 8, i // 8 * 8 + 8))} for i in range(64)},
         {0: list(range(64))})
    return base
