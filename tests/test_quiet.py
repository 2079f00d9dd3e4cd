"""Quiet during the measurement: other processes' work over the measured window, a
disturbed round measured again, and one still disturbed left out of the claims.

The window's arithmetic runs on synthetic CPU times, the harness's loop on a fake
measurement, and the claims on synthetic rows and result files: no timing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import namedtuple

import pandas as pd
import pyperf
import pytest

from perfgrid.analyse import aggregate, analysis
from perfgrid.experiments import get
from perfgrid.kit.paths import REPO, Layout
from perfgrid.measure import bench, noise

from synthetic import row

#: psutil.cpu_times(percpu=True) on Linux: one of these per CPU
CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest "
                                  "guest_nice")


def ends(busy: float, own: float, steal: float = 0.0, total: float = 10.0) -> tuple[dict, dict]:
    """A window's two ends (noise.window) over ``total`` CPU-seconds of capacity."""
    start = {"total": 100.0, "busy": 40.0, "steal": 1.0, "own": 2.0}
    return start, {"total": 100.0 + total, "busy": 40.0 + busy, "steal": 1.0 + steal,
                   "own": 2.0 + own}


def test_other_work_is_the_busy_time_less_the_jobs_own():
    seen = noise.during(*ends(busy=7.0, own=4.0, steal=0.5), limit=0.25)
    assert seen == {"perfgrid_busy_during": 0.3, "perfgrid_own_share": 0.4,
                    "perfgrid_steal_during": 0.05, "perfgrid_noisy": 1}
    assert noise.during(*ends(busy=7.0, own=6.0), limit=0.25)["perfgrid_noisy"] == 0
    assert noise.during(*ends(busy=7.0, own=4.0), limit=None)["perfgrid_noisy"] == 0
    # the job's own time read a tick above the CPUs' busy time: no negative share
    assert noise.during(*ends(busy=4.0, own=4.02), limit=0.25)["perfgrid_busy_during"] == 0.0


def test_the_window_counts_the_allowed_cpus_steal_as_busy_and_interrupts_as_neither(
        monkeypatch):
    cpus = [CpuTimes(5, 1, 2, 10, 1, 0.5, 0.5, 1, 3, 0),  # CPU 0: not allowed
            CpuTimes(2, 0, 1, 6, 1, 1, 1, 2, 1, 0),
            CpuTimes(1, 0, 1, 9, 0, 0, 0, 0, 0, 0)]
    monkeypatch.setattr(noise.psutil, "cpu_times", lambda percpu: cpus)
    monkeypatch.setattr(noise.os, "sched_getaffinity", lambda pid: {1, 2})
    monkeypatch.setattr(noise, "own_cpu_seconds", lambda: 1.5)
    # CPU 1: 15 s less 1 s guest (already in user) = 14, busy 14 - 6 idle - 1 iowait - 2
    # irq and softirq = 5 (user, system and steal); CPU 2: 11, busy 2
    assert noise.window() == {"total": 25.0, "busy": 7.0, "steal": 2.0, "own": 1.5}


def test_the_jobs_own_time_includes_a_child_it_reaped():
    before = noise.own_cpu_seconds()
    burn = ("import time\n"
            "while time.process_time() < 0.2:\n"
            "    pass\n")
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert noise.own_cpu_seconds() - before >= 0.18  # whole clock ticks of user and sys


class Noise:
    """noise's looks for the harness: the share of other work each measurement sees."""

    def __init__(self, monkeypatch, shares: list[float]) -> None:
        self.shares = list(shares)
        self.made: list[dict] = []
        monkeypatch.setattr(noise, "wait_until_quiet", lambda limit: {
            "perfgrid_busy_share": 0.0, "perfgrid_busy_checks": 1, "perfgrid_busy_before": 0})
        monkeypatch.setattr(noise, "window", lambda: {})
        monkeypatch.setattr(noise, "snapshot", lambda: {"total": 1.0, "steal": 0.0,
                                                        "load": 0.0})
        monkeypatch.setattr(noise, "during", self.during)

    def during(self, start, end, limit):
        share = self.shares.pop(0)
        return {"perfgrid_busy_during": share, "perfgrid_own_share": 0.5,
                "perfgrid_steal_during": 0.0,
                "perfgrid_noisy": int(limit is not None and share > limit)}

    def measure(self, args, first=None):
        """A measurement: which it is, whether it ran in this process, and its loops."""
        self.made.append({"first": first is not None, "loops": args.loops})
        run = pyperf.Run([0.01], metadata={"name": "p", "loops": 64 if not args.loops
                                           else args.loops}, collect_metadata=False)
        return pyperf.Benchmark([run]), {"perfgrid_batches": len(self.made)}


def harness_args(busy_share: float | None = 0.25) -> argparse.Namespace:
    return argparse.Namespace(busy_share=busy_share, steal_share=None, loops=0)


@pytest.mark.parametrize("shares, kept, noisy", [
    ([0.1], 1, 0),               # quiet: measured once
    ([0.6, 0.1], 2, 0),          # busy, then quiet: the second kept
    ([0.6, 0.5, 0.1], 3, 0),
    ([0.6, 0.5, 0.4], 3, 1),     # busy every time: the last kept, flagged
])
def test_a_round_measured_while_busy_is_measured_again_at_most_twice(monkeypatch, shares,
                                                                      kept, noisy):
    looks = Noise(monkeypatch, shares)
    first = object()
    bench_, outcome, quiet = bench.measure_quietly(harness_args(), "p", first=lambda: first,
                                                   measure=looks.measure)
    assert len(looks.made) == kept == quiet["perfgrid_measurements"]
    assert outcome == {"perfgrid_batches": kept}  # the kept measurement's own outcome
    assert quiet["perfgrid_noisy"] == noisy
    assert quiet["perfgrid_busy_during"] == shares[kept - 1]
    assert quiet["perfgrid_busy_during_each"] == " ".join(f"{s:.4f}" for s in shares)
    # only the first runs in the job's own pyperf Runner (it measures once per process);
    # a measurement made again reuses the loops calibrated first
    assert [m["first"] for m in looks.made] == [True] + [False] * (kept - 1)
    assert [m["loops"] for m in looks.made] == [0] + [64] * (kept - 1)


def test_without_a_busy_limit_a_round_is_measured_once(monkeypatch):
    looks = Noise(monkeypatch, [0.9])
    _, _, quiet = bench.measure_quietly(harness_args(None), "p", measure=looks.measure)
    assert quiet["perfgrid_measurements"] == 1 and quiet["perfgrid_noisy"] == 0


@pytest.mark.serial  # it waits for a quiet machine: ~8 s idle beside other tests
def test_a_real_round_records_its_window_and_each_measurement(tmp_path):
    """The harness itself, with no room for other work (``--busy-share 0``): whatever this
    machine is doing, the result records what each measurement saw, consistently."""
    out = tmp_path / "syscall.json"
    cmd = [sys.executable, "-m", "perfgrid.measure.bench", "syscall", "--point", "variant=python",
           "--point", "call=getuid", "--point", "binding=none", "--point", "workers=1",
           "--busy-share", "0", "--result", str(out), "--processes", "1", "--values", "1",
           "--warmups", "0", "--loops", "200"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = pyperf.Benchmark.load(str(out)).get_metadata()
    each = [float(s) for s in meta["perfgrid_busy_during_each"].split()]
    assert len(each) == meta["perfgrid_measurements"] in (1, 2, 3)
    assert meta["perfgrid_busy_during"] == each[-1]
    # measured again exactly while other work was seen; the last kept, flagged if busy
    assert all(share > 0 for share in each[:-1])
    assert meta["perfgrid_noisy"] == int(each[-1] > 0)
    assert len(each) == 3 or meta["perfgrid_noisy"] == 0
    assert 0 <= meta["perfgrid_own_share"] <= 1 and 0 <= meta["perfgrid_steal_during"] <= 1
    assert proc.stderr.count("perfgrid: measuring syscall[") == len(each)


# -- the table and the claims -----------------------------------------------------------
SYSCALL = get("syscall")
POINT = {"variant": "native", "call": "getuid", "binding": "spread", "workers": 1}


def write_rounds(tmp_path, noisy: list[int], rounds: int = 3) -> list[str]:
    """One point's result files, one per round, each ``noisy`` round flagged; round r's
    two processes measure 1/r seconds per loop."""
    layout = Layout(tmp_path)
    paths = []
    for r in range(1, rounds + 1):
        path = tmp_path / layout.raw_result("syscall", POINT, SYSCALL.axes, round=r)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"name": "x", "loops": 1, "perfgrid_experiment": "syscall",
                "perfgrid_point": json.dumps(POINT, sort_keys=True),
                "perfgrid_runtime": "native", "perfgrid_work_per_loop": 1,
                "perfgrid_round": r, "perfgrid_noisy": int(r in noisy),
                "perfgrid_busy_during": 0.6 if r in noisy else 0.05,
                "perfgrid_measurements": 3 if r in noisy else 1,
                **{f"perfgrid_{k}": v for k, v in POINT.items()}}
        runs = [pyperf.Run([1 / r * f, 1 / r * f], metadata={**meta, "perfgrid_sys_s": r},
                           collect_metadata=False) for f in (0.99, 1.01)]
        pyperf.Benchmark(runs).dump(str(path))
        paths.append(str(path))
    return paths


def test_the_table_names_the_rounds_still_busy_after_measuring_again(tmp_path):
    table = aggregate.build_table("syscall", write_rounds(tmp_path, noisy=[2]))
    got = table.iloc[0]
    assert got["noisy_rounds"] == [2]
    assert got["noisy"] == 1 and got["busy_during"] == 0.6 and got["measurements"] == 5
    assert aggregate.build_table("syscall", write_rounds(
        tmp_path / "quiet", noisy=[])).iloc[0]["noisy_rounds"] == []


def test_the_claims_see_only_the_quiet_rounds(tmp_path):
    table = aggregate.build_table("syscall", write_rounds(tmp_path, noisy=[2]))
    seen = analysis.quiet(table).iloc[0]
    assert seen["process_rounds"] == [1, 1, 3, 3]
    assert [p["sys_s"] for p in seen["process_metadata"]] == [1, 1, 3, 3]
    assert seen["rate"] == pytest.approx(aggregate.raw_rate(seen["process_values"], 1.0))
    assert seen["rate"] == pytest.approx(1 / ((1 + 1 / 3) / 2))  # rounds 1 and 3 only
    assert seen["rounds_left_out"] == "2"
    assert table.iloc[0]["rate"] != seen["rate"]  # the table itself keeps every round


def test_a_point_busy_in_every_round_has_no_rate_for_the_claims_and_says_why(tmp_path):
    table = aggregate.build_table("syscall", write_rounds(tmp_path, noisy=[1, 2, 3]))
    seen = analysis.quiet(table).iloc[0]
    assert pd.isna(seen["rate"])
    assert seen["left_out"].startswith("left out of claims: every round of this point "
                                       "(1, 2, 3) was measured while other processes were "
                                       "busy (other processes up to 60% of the CPUs)")
    estimate = aggregate.rate_estimate(seen)
    assert pd.isna(estimate.value) and estimate.reason == seen["left_out"]


def test_one_round_measured_once_and_busy_is_left_out_too():
    one = pd.DataFrame([row(100.0, noisy_rounds="[1]", process_rounds="", noisy=1)])
    assert analysis.quiet(one).iloc[0]["left_out"].startswith("left out of claims: every round")
    quiet = pd.DataFrame([row(100.0, noisy_rounds="[]", process_rounds="", noisy=0)])
    assert analysis.quiet(quiet).equals(quiet)


def syscall_table(left_out: dict) -> pd.DataFrame:
    """The syscall claims' synthetic table, the rows matching ``left_out`` busy in every
    round (as the table records it)."""
    from test_syscall import syscall_rows

    rows = syscall_rows()
    for r in rows:
        busy = all(r[k] == v for k, v in left_out.items())
        r.update(noisy=int(busy), noisy_rounds="[1]" if busy else "[]", process_rounds="")
    return pd.DataFrame(rows)


def test_a_claim_whose_point_was_busy_in_every_round_says_so():
    table = syscall_table({"runtime": "native", "call": "getuid", "workers": 2})
    claims = analysis.claims_of("syscall", table)
    got = claims[0]  # native getuid: rate at 2 workers over 1
    assert got.verdict == "inconclusive"
    assert got.reason.startswith("no estimate (missing or NaN rate): left out of claims: "
                                 "every round of this point (1) was measured while other "
                                 "processes were busy"), got.reason
    # the other claims are untouched; without the flags every claim holds
    assert [c.verdict for c in claims[2:4]] == ["reproduced"] * 2
    assert [c.verdict for c in analysis.claims_of("syscall", syscall_table({"call": "x"}))] \
        == ["reproduced"] * 6


def test_a_best_of_is_taken_over_the_quiet_rows():
    """A reduction over several rows leaves a busy row out rather than failing for it."""
    table = syscall_table({"runtime": "native", "call": "getuid", "workers": 1,
                           "binding": "spread"})
    extra = table[(table["runtime"] == "native") & (table["call"] == "getuid")
                  & (table["workers"] == 1)].assign(binding="compact", noisy=0,
                                                    noisy_rounds="[]")
    table = pd.concat([table, extra], ignore_index=True)
    got = analysis.rate_at(analysis.quiet(table), runtime="native", call="getuid", workers=1)
    assert got.has_interval and got.value == pytest.approx(7e6)
