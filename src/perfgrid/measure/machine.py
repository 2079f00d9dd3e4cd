"""A psutil snapshot of the machine, so results can be compared across hosts."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from perfgrid.kit import binding, topology

#: perfgrid's own requirements; then machine.json lists the packages experiments declare
PACKAGES = ("perfgrid", "snakemake", "pyperf", "pandas", "seaborn", "matplotlib", "numpy",
            "psutil")
#: the native tools every experiment's jobs may run: name -> the arguments printing its
#: version (first line kept); then come erl and the tools experiments declare
TOOL_VERSION = {"cc": ("--version",), "perf": ("--version",)}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def packages() -> tuple[str, ...]:
    """The Python packages machine.json records: :data:`PACKAGES`, then those the
    experiments declare (``Experiment.packages``), each once."""
    from perfgrid import experiments

    return tuple(dict.fromkeys([*PACKAGES, *experiments.packages()]))


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in packages():
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def tools() -> dict[str, str | None]:
    """The versions of the native tools on PATH here (None: not on PATH), recorded with the
    run so that an archive made elsewhere states what ran (perfgrid.publish.crate)."""
    from perfgrid import experiments
    from perfgrid.experiments.base import version_line
    from perfgrid.kit import erlang

    out: dict[str, str | None] = {}
    for name, args in TOOL_VERSION.items():
        program = (os.environ.get("CC") or "cc") if name == "cc" else name
        if not shutil.which(program):
            out[name] = None
            continue
        try:
            out[name] = version_line(program, args)
        except (OSError, subprocess.SubprocessError):
            out[name] = "unknown"
    checks = [("erl", erlang.missing, erlang.otp_release)]
    checks += [(key, tool.missing, tool.version) for key, tool in experiments.tools().items()]
    for name, missing, version in checks:
        try:
            out[name] = None if missing() else version()
        except (OSError, subprocess.SubprocessError):
            out[name] = "unknown"
    return out


def _filesystem(path: str) -> dict[str, Any]:
    probe = Path(path).absolute()
    while not probe.exists():
        probe = probe.parent
    best = None
    for part in psutil.disk_partitions(all=True):
        if str(probe).startswith(part.mountpoint) and (
            best is None or len(part.mountpoint) > len(best.mountpoint)
        ):
            best = part
    usage = shutil.disk_usage(probe)
    return {
        "path": str(path),
        "mountpoint": best.mountpoint if best else None,
        "fstype": best.fstype if best else None,
        "device": best.device if best else None,
        "free_bytes": usage.free,
        "total_bytes": usage.total,
    }


def _auto_workers() -> dict[str, Any]:
    """What ``workers: auto`` stands for in this run: the CPU count the grid was built for
    (PERFGRID_AUTO_CPUS, which the workflow sets where it parses the config), what set it
    (the affinity mask, a cgroup CPU quota, the variable) and its counts."""
    try:
        cpus, source = topology.cpu_limit()
    except ValueError:  # the workflow refuses a bad variable before any job
        cpus, source = topology.cpu_limit({})
    return {"cpus": cpus, "counts": binding.auto_workers(cpus), "set_by": source}


def _boot_id() -> str:
    """The kernel's random id of this boot (empty where the kernel offers none)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def snapshot(fixtures: dict[str, str] | None = None) -> dict[str, Any]:
    """CPU, topology, memory, file system, kernel and versions of this machine; the file
    system of each fixture's path (``fixtures``: name -> path)."""
    freq = psutil.cpu_freq()
    mem = psutil.virtual_memory()
    topo = topology.read()
    usable = topo.usable()
    return {
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hostname": socket.gethostname(),
        # one boot of one host: two runs of one boot are one host draw (perfgrid pool)
        "boot_id": _boot_id(),
        "boot_time": psutil.boot_time(),
        "cpu_model": _cpu_model(),
        "cpus_logical": psutil.cpu_count(logical=True),
        "cpus_physical": psutil.cpu_count(logical=False),
        "cpus_allowed": list(topo.allowed),
        # packages, dies, cores, SMT siblings, L3 groups and NUMA nodes (sysfs), and
        # whether a taskset, cpuset cgroup or SLURM allocation leaves fewer CPUs usable
        "topology": topo.summary(),
        "restriction": topology.restriction(topo),
        "compact_order": binding.compact_order(usable),
        "spread_order": binding.spread_order(usable),
        "auto_workers": _auto_workers(),
        "cpu_freq_mhz": {"current": freq.current, "min": freq.min, "max": freq.max}
        if freq else None,
        "memory_bytes": mem.total,
        "memory_available_bytes": mem.available,
        "load_average": list(os.getloadavg()),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": _versions(),
        "tools": tools(),
        **{f"{name}_filesystem": _filesystem(path) if path else None
           for name, path in (fixtures or {}).items()},
    }
