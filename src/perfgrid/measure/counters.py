"""Kernel counters per unit of work: why a point is as fast as it is.

After a point is measured (still under the job's lock), the harness runs one
untimed counting pass of the same case under ``perf stat``, never inside the
timed pyperf runs:

    perf stat -x, -o COUNTS --control fifo:CTL,ACK -D -1 -e EVENTS -- \\
        python -m perfgrid.measure.counting_pass EXPERIMENT --point ... --option ... --loops N ...

Counting starts disabled (``-D -1``); the pass prepares the case, enables
the counters through the control FIFO right before ``case.time(loops)`` and
disables them right after, so interpreter start-up and set-up are not
counted. perf counts every thread and child process of the pass (server
workers, ``dd``, the C programs, the Erlang VM). A native or Erlang point
whose loop starts its program counts that program's start-up too: its
counters are of whole child processes (column ``counters_scope``).

Counts are divided by the units of work the pass did (a spawn, a byte, a
call, a timer event, a message, a request). An event the machine cannot
count (hardware counters on most VMs) is left out and named in
``counters_unsupported``, never recorded as zero. The tracepoint
``raw_syscalls:sys_enter`` (system calls entered, column ``syscalls_per_unit``)
needs root or a permissive ``perf_event_paranoid`` and a kernel with ftrace: perf
refuses a whole ``perf stat`` that names a tracepoint it cannot open, so where the
pass is refused each tracepoint is tried alone (``perf stat -e TRACEPOINT true``,
once per process) and left out, with perf's reason, where that fails. ``perf`` missing or
forbidden only leaves the counters out (column ``counters`` says why); it
never fails a point.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: perf event -> table column (per unit of work) and the factor from perf's unit
EVENTS: dict[str, tuple[str, float]] = {
    "task-clock": ("task_clock_ns_per_unit", 1e6),  # perf reports msec
    "context-switches": ("ctx_switches_per_unit", 1.0),
    "cpu-migrations": ("migrations_per_unit", 1.0),
    "page-faults": ("page_faults_per_unit", 1.0),
    "cycles": ("cycles_per_unit", 1.0),
    "instructions": ("instructions_per_unit", 1.0),
    "cache-misses": ("cache_misses_per_unit", 1.0),
    "branch-misses": ("branch_misses_per_unit", 1.0),
    "raw_syscalls:sys_enter": ("syscalls_per_unit", 1.0),  # system calls entered
}
#: events that perf may refuse outright (unknown, or not permitted): tried alone first
TRACEPOINTS = ("raw_syscalls:sys_enter",)
#: perf's event modifiers (``cycles:u``, ``page-faults:ukG``): a ``:suffix`` of only these
#: letters is a modifier, any other (``raw_syscalls:sys_enter``) is part of the name
_MODIFIER = re.compile(r":[ukhIGHpPSDeWbR]+$")
#: every column a counting pass may add (the table has them all, NaN where not counted)
COLUMNS = ("counters", "counters_scope", "counters_units", "counters_unsupported",
           "counters_seconds", "counters_loops_s", "cpu_sys_share", "cpus_utilized",
           *(column for column, _ in EVENTS.values()))
OK = "ok"
#: the module perf runs for the counted pass (``python -m``): it looks the experiment up in
#: the registry, which this library, imported by shared code, must not
PASS_MODULE = "perfgrid.measure.counting_pass"
#: ``counters`` of a point the config did not count
NOT_COUNTED = "not counted (measure.counters)"
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
#: phrases of perf's stderr that mean the kernel refused the events
_FORBIDDEN = ("permission", "not permitted", "access to performance monitoring",
              "perf_event_paranoid", "eacces")


@dataclass
class Counts:
    """What ``perf stat -x,`` reported: counted values, and events it could not count."""

    values: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def parse(text: str) -> Counts:
    """Parse ``perf stat -x,`` output: ``value,unit,event,run time,share,...`` lines.

    ``<not supported>`` and ``<not counted>`` go to ``missing`` with that word;
    modifiers perf adds (``cycles:u``) are dropped from the event name, a tracepoint's
    ``subsystem:name`` is kept whole.
    """
    out = Counts()
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 3:
            continue
        value, event = fields[0].strip(), _MODIFIER.sub("", fields[2].strip())
        if not event:
            continue
        if value.startswith("<"):
            out.missing[event] = value.strip("<>")
            continue
        try:
            out.values[event] = float(value)
        except ValueError:
            out.missing[event] = f"unreadable value {value!r}"
    return out


def per_unit(counts: Counts, units: float) -> dict[str, float | str]:
    """Each counted event over ``units`` of work, by column name; what was not counted."""
    if not units or not math.isfinite(units) or units <= 0:
        raise ValueError(f"units of work: {units!r}; allowed: a positive number")
    out: dict[str, float | str] = {}
    for event, (column, factor) in EVENTS.items():
        if event in counts.values:
            out[column] = counts.values[event] * factor / units
    missing = [f"{e}: {counts.missing.get(e, 'not reported')}" for e in EVENTS
               if e not in counts.values]
    out["counters_unsupported"] = "; ".join(missing) if missing else "none"
    return out


def unavailable(perf: str | None = None) -> str | None:
    """Why this machine cannot count (perf missing or forbidden), or None."""
    found = perf or shutil.which("perf")
    if not found:
        return "perf missing: perf not found on PATH (Debian: linux-perf)"
    if os.geteuid() != 0:
        try:
            level = int(PARANOID.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            level = None
        if level is not None and level > 2:
            return (f"not permitted: kernel.perf_event_paranoid is {level} (above 2 forbids "
                    f"counting one's own processes); run as root or lower it to 2")
    return None


def scope(runtime: str) -> str:
    """What a pass of ``runtime`` counts: the loops only, or whole child programs."""
    if runtime == "python":
        return "the timed loops (set-up and start-up not counted)"
    return f"the timed loops, each {runtime} program's start-up included"


def perf_command(perf: str, counts: Path, ctl: Path, ack: Path, workload: list[str],
                 events: list[str] | tuple[str, ...] = tuple(EVENTS)) -> list[str]:
    """``perf stat`` counting ``events`` (all by default) only while the workload
    enables them through ``ctl``."""
    return [perf, "stat", "-x,", "-o", str(counts), "--control", f"fifo:{ctl},{ack}",
            "-D", "-1", "-e", ",".join(events), "--", *workload]


def refused_tracepoints(perf: str) -> dict[str, str]:
    """The tracepoints of :data:`TRACEPOINTS` that ``perf`` cannot count here, each with
    perf's reason; tried once per process (``perf stat -e TRACEPOINT true``)."""
    return dict(_refused(perf))


@functools.cache
def _refused(perf: str) -> tuple[tuple[str, str], ...]:
    from perfgrid.kit import lifetime

    out = []
    for event in TRACEPOINTS:
        try:
            done = subprocess.run(lifetime.command([perf, "stat", "-x,", "-e", event, "--",
                                                    "true"]),
                                  capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            out.append((event, f"not counted (perf stat -e {event} true: {err})"))
            continue
        counted = parse(done.stderr)
        if done.returncode != 0 or event not in counted.values:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            text = " ".join(" ".join(lines[:2]).split())[:160] or "no message"
            word = ("not permitted" if any(p in done.stderr.lower() for p in _FORBIDDEN)
                    else counted.missing.get(event, "not counted"))
            out.append((event, f"{word} (perf stat -e {event} true: {text})"))
    return tuple(out)


def count_point(experiment: str, point: list[str], options: list[str], loops: int,
                runtime: str, timeout: float = 600.0) -> dict[str, Any]:
    """One counting pass of a point; ``perfgrid_*`` metadata. Never raises: a pass that
    cannot run records why in ``perfgrid_counters``. All events are asked for at once; only
    where perf refuses, the pass runs again without :func:`refused_tracepoints`."""
    reason = unavailable()
    if reason:
        return _status(reason)
    perf = shutil.which("perf") or "perf"
    started = time.monotonic()
    workload = [experiment, "--loops", str(loops)]
    for flag, items in (("--point", point), ("--option", options)):
        workload += [word for item in items for word in (flag, item)]
    refused: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="perfgrid-counters-") as tmp:
        try:
            done, counts, report = _pass(perf, Path(tmp) / "all", workload, tuple(EVENTS),
                                         timeout)
            if done.returncode != 0 and not report.exists():
                refused = refused_tracepoints(perf)
                if refused:
                    done, counts, report = _pass(
                        perf, Path(tmp) / "some", workload,
                        tuple(e for e in EVENTS if e not in refused), timeout)
        except subprocess.TimeoutExpired:
            return _status(f"failed: the counting pass took over {timeout:.0f} s")
        sys.stderr.write(done.stderr)
        if done.returncode != 0 or not report.exists():
            tail = done.stderr.strip()[-300:] or "no message"
            word = "not permitted" if any(p in tail.lower() for p in _FORBIDDEN) else "failed"
            return _status(f"{word}: perf stat exited {done.returncode}: {tail}")
        try:
            facts = json.loads(report.read_text())
            parsed = parse(counts.read_text())
            parsed.missing.update(refused)
            meta: dict[str, Any] = {f"perfgrid_{k}": v
                                    for k, v in per_unit(parsed, facts["units"]).items()}
        except (OSError, ValueError, KeyError) as err:
            return _status(f"failed: unreadable counts or report ({err})")
    cpu = facts["user_s"] + facts["sys_s"]
    if cpu > 0:
        meta["perfgrid_cpu_sys_share"] = facts["sys_s"] / cpu
    if "task-clock" in parsed.values and facts["elapsed_s"] > 0:
        meta["perfgrid_cpus_utilized"] = parsed.values["task-clock"] / 1e3 / facts["elapsed_s"]
    meta.update(perfgrid_counters=OK, perfgrid_counters_scope=scope(runtime),
                perfgrid_counters_units=facts["units"],
                perfgrid_counters_loops_s=round(facts["elapsed_s"], 6),
                perfgrid_counters_seconds=round(time.monotonic() - started, 3))
    return meta


def _pass(perf: str, folder: Path, workload: list[str], events: tuple[str, ...],
          timeout: float) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """(perf's result, its counts, the pass's report) of a pass counting ``events``."""
    from perfgrid.kit import lifetime

    folder.mkdir()
    ctl, ack, counts, report = (folder / n for n in ("ctl", "ack", "counts", "report"))
    os.mkfifo(ctl)
    os.mkfifo(ack)
    command = [sys.executable, "-m", PASS_MODULE, *workload, "--ctl", str(ctl),
               "--ack", str(ack), "--report", str(report)]
    done = subprocess.run(lifetime.command(perf_command(perf, counts, ctl, ack, command,
                                                        events)),
                          capture_output=True, text=True, timeout=timeout, check=False)
    return done, counts, report


def _status(text: str) -> dict[str, str]:
    """Why a point has no counts, on one line (pyperf metadata holds no newlines)."""
    return {"perfgrid_counters": " ".join(text.split())[:400]}
