"""The counted pass of a point, run by ``perf stat`` (perfgrid.measure.counters): prepare the
case, enable the counters through perf's control FIFO, run ``loops`` loops, disable them,
and report the units of work and CPU times as JSON.

    python -m perfgrid.measure.counting_pass EXPERIMENT --point AXIS=VALUE ... --option KEY=VALUE \\
        --loops N --ctl FIFO --ack FIFO --report FILE

The worker's entry point lives here, not in perfgrid.measure.counters: it looks the experiment
up in the registry (perfgrid.experiments), while the counters' library is imported by
shared code below the registry.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from perfgrid import experiments
from perfgrid.kit import lifetime
from perfgrid.kit.atomic import write_text
from perfgrid.measure.jobargs import pairs


def _cpu_tree() -> tuple[float, float]:
    """(user, sys) seconds of this process, its live descendants and its reaped children."""
    import psutil

    me = psutil.Process()
    own = me.cpu_times()
    user, system = own.user + own.children_user, own.system + own.children_system
    for child in me.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        user += times.user
        system += times.system
    return user, system


def _tell(ctl: int, ack: int, command: str) -> None:
    """Send perf a control command and wait for its ``ack``."""
    os.write(ctl, f"{command}\n".encode())
    answer = b""
    while b"\n" not in answer:  # perf answers "ack\n\0"
        chunk = os.read(ack, 64)
        if not chunk:
            raise RuntimeError(f"perf closed its ack FIFO after {command!r}")
        answer += chunk


def main(argv: list[str] | None = None) -> None:
    """The counted pass (run by perf): prepare, enable, ``loops`` loops, disable, report."""
    parser = argparse.ArgumentParser(prog="python -m perfgrid.measure.counting_pass")
    parser.add_argument("experiment")
    parser.add_argument("--point", action="append", default=[], metavar="AXIS=VALUE")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--loops", type=int, required=True)
    parser.add_argument("--ctl", required=True)
    parser.add_argument("--ack", required=True)
    parser.add_argument("--report", required=True)
    args = parser.parse_args(argv)

    lifetime.die_with_parent(os.getppid())  # perf: dies with the job, so must we
    experiment = experiments.get(args.experiment)
    point = experiment.parse_point(pairs(args.point, "--point"))
    options = experiment.counting_options(point, pairs(args.option, "--option"))
    case = experiment.prepare(point, options)
    ctl, ack = os.open(args.ctl, os.O_WRONLY), os.open(args.ack, os.O_RDONLY)
    try:
        user0, sys0 = _cpu_tree()
        _tell(ctl, ack, "enable")
        began = time.perf_counter()
        case.time(args.loops)
        elapsed = time.perf_counter() - began
        _tell(ctl, ack, "disable")
        user1, sys1 = _cpu_tree()
    finally:
        case.close()
        os.close(ctl)
        os.close(ack)
    units = args.loops * (case.inner_loops or 1) * case.work_per_loop
    write_text(args.report, json.dumps({"units": units, "elapsed_s": elapsed,
                                        "user_s": user1 - user0, "sys_s": sys1 - sys0}))


if __name__ == "__main__":
    main()
