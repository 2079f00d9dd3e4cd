"""ring (seed E5 b): every ring passes its tokens, pins its members, leaves nothing behind."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pandas as pd
import psutil
import pytest

from perfgrid.design import planning
from perfgrid.experiments import get
from perfgrid.experiments import ring as ring_mod
from perfgrid.experiments.ring import analysis
from perfgrid.experiments.ring import rings as ring_rings
from perfgrid.experiments.ring.usage import process_usage
from perfgrid.kit import binding, lifetime
from perfgrid.pipeline import configschema, settings

from helpers import FULL, compile_native, gone
from synthetic import LEVELS, expected_verdict, row, single

EXP = get("ring")
LOOPS = ["asyncio", "uvloop"]  # uvloop is a hard dependency: no skip
OPTIONS = {"rings": "3", "size": "4", "rounds": "5", "worker_rounds": "50"}


@pytest.fixture(scope="module")
def native_binary(tmp_path_factory) -> str:
    return compile_native("ring", tmp_path_factory.mktemp("bin"))


@pytest.mark.parametrize("variant", LOOPS)
def test_task_rings_pass_every_token_and_cancel_every_member(variant):
    rings = ring_rings.TaskRings(variant, rings=3, size=4)
    try:
        assert rings.alive() == 3 * 3
        assert rings.run(10) > 0
        assert all(q.empty() for inboxes in rings.inboxes for q in inboxes)
    finally:
        rings.close()
    assert rings.alive() == 0


@pytest.mark.parametrize("bind", ["none", "single", "spread"])
def test_thread_ring_pins_members_and_joins_them(bind):
    saved = sorted(os.sched_getaffinity(0))
    plan = binding.plan(bind, 3)
    ring = ring_rings.ThreadRing(plan)
    try:
        assert ring.actual == plan
        assert ring.run(50) > 0
        assert all(q.empty() for q in ring.queues)
    finally:
        ring.close()
    assert ring.alive() == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("ring-")]
    assert sorted(os.sched_getaffinity(0)) == saved


@pytest.mark.parametrize("bind", ["none", "single", "spread"])
def test_pipe_ring_pins_members_and_reaps_them(bind, monkeypatch):
    saved = sorted(os.sched_getaffinity(0))
    plan = binding.plan(bind, 3)
    ring = ring_rings.PipeRing(plan)
    pids = list(ring.pids)
    ended: dict[int, int] = {}  # pid -> wait status, as close() reaps it
    waitpid = os.waitpid

    def noting(pid: int, options: int) -> tuple[int, int]:
        done, status = waitpid(pid, options)
        if done:
            ended[done] = status
        return done, status

    try:
        assert len(pids) == 2
        assert ring.actual == plan
        assert ring.run(50) > 0
        before = process_usage(pids)
        ring.run(200)
        after = process_usage(pids)
        assert after.ctx_voluntary - before.ctx_voluntary >= 200  # each member woke per trip
    finally:
        monkeypatch.setattr(ring_rings.os, "waitpid", noting)
        ring.close()
        monkeypatch.undo()
    ring.close()  # twice is harmless
    # each member left by itself at end of file (exit 0, not killed after the grace), and
    # close() waited for it: reaped, no child of this process any more
    assert {pid: os.waitstatus_to_exitcode(s) for pid, s in ended.items()} == dict.fromkeys(
        pids, 0)
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    assert not psutil.Process().children()
    assert sorted(os.sched_getaffinity(0)) == saved


def test_pipe_ring_members_die_with_a_killed_job():
    script = textwrap.dedent("""
        import sys, time
        from perfgrid.kit import binding
        from perfgrid.experiments.ring.rings import PipeRing
        ring = PipeRing(binding.plan("none", 4))
        print(" ".join(map(str, ring.pids)), flush=True)
        while True:
            ring.run(100)
    """)
    job = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in job.stdout.readline().split()]
        assert len(pids) == 3
        job.send_signal(signal.SIGKILL)
        job.wait(5)
        assert gone(pids)
    finally:
        job.kill()
        job.wait()


def test_native_ring_counts_pins_and_reports(native_binary):
    plan = binding.plan("spread", 3)
    report = lifetime.run_json(ring_mod.native_command(native_binary, 3, 100, plan))
    assert report["messages"] == 300
    assert report["cpus"] == binding.describe(plan)
    assert report["seconds"] > 0 and report["setup_seconds"] > 0
    assert report["ctx_voluntary"] >= 300
    assert not psutil.Process().children()


@pytest.mark.parametrize("args, needle", [
    (["1", "10", "0"], "WORKERS"),
    (["2", "0", "0|0"], "ROUNDS"),
    (["2", "10", "0"], "PLAN"),
    (["2", "10", "0|x"], "PLAN"),
])
def test_native_ring_refuses_bad_arguments(native_binary, args, needle):
    with pytest.raises(RuntimeError, match=needle):
        lifetime.run_json([native_binary, *args])


@pytest.mark.parametrize("variant, bind, workers", [
    ("asyncio", "single", 1),
    ("uvloop", "none", 1),
    ("thread", "single", 2),
    ("process_pipe", "spread", 3),
    ("native", "single", 2),
])
def test_case_measures_messages_and_the_cpu_split(request, variant, bind, workers):
    saved = sorted(os.sched_getaffinity(0))
    pt = {"variant": variant, "binding": bind, "workers": workers}
    # only the C ring needs the compiler: the Python rings run without one
    options = ({"binary": request.getfixturevalue("native_binary")}
               if variant == "native" else {})
    started = time.monotonic()
    case = EXP.prepare(pt, {**OPTIONS, **options})
    try:
        assert case.time(2) > 0
        seen = case.observed()
    finally:
        case.close()
    lived = time.monotonic() - started
    expected = 3 * 4 * 5 if workers == 1 else workers * 50
    assert case.work_per_loop == expected
    assert seen["perfgrid_worker_cpus"] == binding.describe(binding.plan(bind, workers))
    assert 0 <= seen["perfgrid_sys_share"] <= 1
    total = seen["perfgrid_user_pct"] + seen["perfgrid_sys_pct"] + seen["perfgrid_idle_pct"]
    assert total == pytest.approx(100, abs=1) or seen["perfgrid_idle_pct"] == 0
    assert 0 < seen["perfgrid_setup_s"] < lived  # a set-up was timed, within the case
    assert sorted(os.sched_getaffinity(0)) == saved
    assert not psutil.Process().children()


def test_points_one_worker_for_loops_every_workers_and_binding_for_rings():
    section = {"variants": ["asyncio", "process_pipe", "native"], "workers": [2, 4],
               "bindings": ["none", "compact", "spread"], "rings": 10, "size": 10}
    points = EXP.points(section, {})
    loop = [p for p in points if p["variant"] == "asyncio"]
    assert loop == [{"variant": "asyncio", "binding": "none", "workers": 1},
                    {"variant": "asyncio", "binding": "single", "workers": 1}]
    assert len(points) == 2 + 2 * 2 * 3
    with pytest.raises(ValueError, match="ring.rings x ring.size"):
        EXP.points({**section, "rings": 100_000, "size": 100}, {})


def test_full_grid_holds_the_seeds_1000_rings_of_100():
    config = copy.deepcopy(FULL)
    configschema.validate(config)
    cfg = settings.effective(config, check_disk=False)
    assert (cfg["ring"]["rings"], cfg["ring"]["size"]) == (1000, 100)
    variants = {p["variant"] for p in planning.grid(cfg, "ring")}
    assert variants == {"asyncio", "uvloop", "thread", "process_pipe", "native", "erlang"}


def test_missing_tools_are_skip_reasons(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "cc" in EXP.unavailable({"variant": "native", "binding": "none", "workers": 2})
    assert EXP.unavailable({"variant": "process_pipe", "binding": "none", "workers": 2}) is None
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now fails
    assert "uvloop" in EXP.unavailable({"variant": "uvloop", "binding": "none", "workers": 1})


def test_ratio_to_native_only_at_the_same_workers_and_binding():
    table = pd.DataFrame([
        {"variant": "native", "workers": 2, "binding": "single", "rate": 300.0},
        {"variant": "process_pipe", "workers": 2, "binding": "single", "rate": 150.0},
        {"variant": "process_pipe", "workers": 2, "binding": "spread", "rate": 20.0},
        {"variant": "asyncio", "workers": 1, "binding": "single", "rate": 100.0},
    ])
    ratio = EXP.ratio_to_native(table)
    assert ratio.iloc[1] == pytest.approx(0.5)
    assert ratio.iloc[[2, 3]].isna().all()


# --- analysis: every verdict is decided by the interval of its quantity ------------------

#: the knobs of :func:`ring_table`, each the quantity one claim compares, all reproduced
GOOD = {"h_native": 3.0, "h_pipe": 3.0, "cross": 4.0, "kernel": 0.8, "faster": 3.0,
        "sys_ratio": 0.1, "erlang": 0.2}
#: claim index, knob, threshold, and whether the claim asks for the quantity to be above
CASES = [
    (0, "h_native", analysis.BINDING_HELPS, True),
    (1, "h_pipe", analysis.BINDING_HELPS, True),
    (2, "cross", analysis.CROSSING_COSTS, True),
    (3, "kernel", analysis.MOSTLY_SYS, True),
    (4, "faster", analysis.FASTER, True),
    (4, "sys_ratio", 0.5, False),
    (5, "erlang", analysis.ERLANG_MOSTLY_USER, False),
]
RUNTIMES = ["native", "python", "native", "native", "python", "erlang"]


def shares(share: float, processes: int = 4, seed: int = 0) -> str:
    """A ``process_metadata`` column: per-process sys shares whose mean is ``share``."""
    rng = np.random.default_rng(seed + 7919)
    values = np.exp(rng.normal(0, 0.01, processes))
    return json.dumps([{"sys_share": float(v)} for v in values / values.mean() * share])


def ring_row(variant: str, bind: str, workers: int, rate: float, share: float, seed: int,
             one: bool = False) -> dict:
    runtime = {"native": "native", "erlang": "erlang"}.get(variant, "python")
    columns = {"variant": variant, "runtime": runtime, "binding": bind, "workers": workers,
               "sys_share": share, "us_per_message": 1e6 / rate, "user_pct": 40.0,
               "sys_pct": 100 * share * 0.5, "idle_pct": 10.0, "ctx_per_message": 1.0,
               "ratio_to_native": 1.0, "setup_s": 0.01,
               "rings": 1000 if workers == 1 or variant == "erlang" else 1,
               "ring_members": 100 if workers == 1 or variant == "erlang" else workers}
    measured = single(rate, **columns) if one else row(rate, seed=seed, **columns)
    return {**measured, "process_metadata": shares(share, seed=seed)}


def ring_table(erlang_rows: bool = True, **knobs) -> pd.DataFrame:
    """Every ring claim's data; each knob sets exactly the quantity one claim compares."""
    k = {**GOOD, **knobs}
    rows, seed = [], 0
    for variant, helps in (("native", k["h_native"]), ("process_pipe", k["h_pipe"])):
        for bind, rate in (("none", 1e5), ("single", 1e5 * helps),
                           ("spread", 1e5 * helps / k["cross"])):
            seed += 1
            rows.append(ring_row(variant, bind, 2, rate, k["kernel"], seed))
    rows.append(ring_row("thread", "none", 2, 1e4, 0.6, 100))
    rows.append(ring_row("asyncio", "none", 1, 1e4 * k["faster"], 0.6 * k["sys_ratio"], 101))
    if erlang_rows:
        rows.append(ring_row("erlang", "none", 1, 5e5, 0.9, 200))  # 1 scheduler: not counted
        rows.append(ring_row("erlang", "none", 2, 1e6, k["erlang"], 201))
        rows.append(ring_row("erlang", "spread", 4, 2e6, k["erlang"], 202))
    return pd.DataFrame(rows)


def replace(table: pd.DataFrame, where: dict, new: dict) -> pd.DataFrame:
    """``table`` with the one row matching ``where`` replaced by ``new``."""
    mask = np.logical_and.reduce([table[c] == v for c, v in where.items()])
    assert mask.sum() == 1
    rows = table.to_dict("records")
    rows[int(np.flatnonzero(mask)[0])] = new
    return pd.DataFrame(rows)


def test_all_ring_claims_reproduce_on_clear_data():
    found = analysis.claims(ring_table(), get("ring"))
    assert [c.verdict for c in found] == ["reproduced"] * 6
    assert [c.runtime for c in found] == RUNTIMES
    assert all("[" in c.measured and "wholly" in c.reason for c in found)
    assert all(c.ci_low < c.value < c.ci_high for c in found)
    assert len(analysis.claims(ring_table(erlang_rows=False), get("ring"))) == 5


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("index, knob, threshold, above", CASES,
                         ids=[f"{i}-{k}" for i, k, _, _ in CASES])
def test_ring_claim_verdict_follows_its_interval(index, knob, threshold, above, level):
    found = analysis.claims(ring_table(**{knob: threshold * LEVELS[level]}), get("ring"))
    claim = found[index]
    expected, word = expected_verdict("above" if above else "below", level)
    assert claim.verdict == expected, (claim.measured, claim.reason)
    assert word in claim.reason
    assert "[" in claim.measured and "no interval" not in claim.measured
    assert claim.runtime == RUNTIMES[index]
    others = [c.verdict for i, c in enumerate(found) if i != index]
    assert others == ["reproduced"] * 5  # each knob moves its own claim only


def test_ring_compound_claim_fails_when_one_part_fails():
    claim = analysis.claims(ring_table(faster=1.5, sys_ratio=0.8), get("ring"))[4]
    # speed at its threshold, sys share wholly too high: the failing part decides
    assert claim.verdict == "not reproduced"
    assert "part 1:" in claim.reason and "lies within" in claim.reason
    assert "part 2:" in claim.reason and "wholly on the other side" in claim.reason
    assert claim.measured.count("[") == 2


def _without(table, **where):
    mask = np.logical_and.reduce([table[c] == v for c, v in where.items()])
    return table[~mask]


def _no_metadata(table, variants):
    table = table.copy()
    table.loc[table["variant"].isin(variants), "process_metadata"] = None
    return table


def _nan_share(table, variants):
    table = table.copy()
    table.loc[table["variant"].isin(variants), "sys_share"] = float("nan")
    return table


MISSING = [
    (0, lambda t: _without(t, variant="native", binding="none"), "no 2-member native ring"),
    (1, lambda t: _without(t, variant="process_pipe", binding="none"),
     "no 2-member process_pipe ring"),
    (2, lambda t: _without(t, binding="spread"), "no 2-member pipe ring under both single"),
    (3, lambda t: _nan_share(t, ["native", "process_pipe"]), "no process ring with a sys share"),
    (3, lambda t: _no_metadata(t, ["native", "process_pipe"]),
     "no interval: no per-process values"),
    (4, lambda t: _without(t, variant="asyncio"), "no asyncio/uvloop ring"),
    (4, lambda t: _without(t, variant="thread"), "no unbound thread ring"),
    (4, lambda t: _no_metadata(t, ["asyncio"]), "no interval: no per-process values"),
    (5, lambda t: _without(t, variant="erlang", workers=2).pipe(
        _without, variant="erlang", workers=4), "no erlang ring on 2+ schedulers"),
    (5, lambda t: _no_metadata(t, ["erlang"]), "no interval: no per-process values"),
]


@pytest.mark.parametrize("index, drop, reason", MISSING,
                         ids=[f"{i}-{r[:24]}" for i, _, r in MISSING])
def test_ring_claim_without_its_data_is_inconclusive(index, drop, reason):
    found = analysis.claims(drop(ring_table()), get("ring"))
    assert found[index].verdict == "inconclusive"
    assert reason in found[index].reason
    assert found[index].runtime == RUNTIMES[index]
    assert [c.verdict for i, c in enumerate(found) if i != index] == ["reproduced"] * 5


NAN = [
    (0, {"variant": "native", "binding": "single"}, [0, 2]),
    (1, {"variant": "process_pipe", "binding": "none"}, [1]),
    (4, {"variant": "asyncio"}, [4]),
    (4, {"variant": "thread"}, [4]),
]


@pytest.mark.parametrize("index, where, hit", NAN, ids=[str(w) for _, w, _ in NAN])
@pytest.mark.parametrize("one", [False, True], ids=["nan-rate", "one-value"])
def test_ring_nan_rate_or_one_value_is_inconclusive(index, where, hit, one):
    table = ring_table()
    old = table[np.logical_and.reduce([table[c] == v for c, v in where.items()])].iloc[0]
    new = ring_row(old["variant"], old["binding"], int(old["workers"]),
                   old["rate"] if one else float("nan"), old["sys_share"], 999, one=one)
    found = analysis.claims(replace(table, where, new), get("ring"))
    if not one and where["variant"] in ("native", "process_pipe"):
        hit = sorted({*hit, 3})  # a point that measured nothing has no sys share either
    for i in hit:
        assert found[i].verdict == "inconclusive", found[i].reason
        want = "no interval: one value" if one else "no estimate (missing or NaN rate)"
        assert want in found[i].reason
    assert [c.verdict for i, c in enumerate(found) if i not in hit] == \
        ["reproduced"] * (6 - len(hit))


@pytest.mark.parametrize("index", [3, 5])
def test_ring_sys_share_of_one_process_has_no_interval(index):
    table = ring_table()
    variants = ["native", "process_pipe"] if index == 3 else ["erlang"]
    table.loc[table["variant"].isin(variants), "process_metadata"] = [
        shares(s, processes=1) for s in table.loc[table["variant"].isin(variants), "sys_share"]]
    claim = analysis.claims(table, get("ring"))[index]
    assert claim.verdict == "inconclusive" and "no interval: one value" in claim.reason


def test_a_thread_ring_with_no_sys_time_leaves_the_sys_part_undecided():
    """Each thread-ring process counted 0 s of system time (below the clock's tick, as in a
    short run): the lock-free claim's sys-share part has no ratio and says why; the claim
    is inconclusive, and the other claims are still judged."""
    table = ring_table()
    threads = (table["variant"] == "thread") & (table["binding"] == "none")
    table.loc[threads, "process_metadata"] = json.dumps([{"sys_share": 0.0}] * 4)
    table.loc[threads, "sys_share"] = 0.0
    found = analysis.claims(table, get("ring"))
    claim = found[4]
    assert claim.hypothesis.startswith("Passing without locks")
    assert claim.verdict == "inconclusive"
    assert "part 2: no estimate: a ratio to a figure of 0" in claim.reason, claim.reason
    before = analysis.claims(ring_table(), get("ring"))
    assert [c.verdict for c in found[:4]] == [c.verdict for c in before[:4]]


def test_hand_made_ring_table_is_inconclusive_and_still_plots(tmp_path):
    rows = []
    for variant, runtime in (("native", "native"), ("process_pipe", "python"),
                             ("thread", "python")):
        for bind, us in (("none", 30.0), ("single", 3.0), ("spread", 30.0)):
            rows.append({"variant": variant, "runtime": runtime, "binding": bind,
                         "workers": 2, "us_per_message": us, "rate": 1e6 / us,
                         "sys_share": 0.9 if variant != "thread" else 0.6,
                         "user_pct": 5.0, "sys_pct": 40.0, "idle_pct": 55.0,
                         "ctx_per_message": 1.0, "ratio_to_native": 1.0, "setup_s": 0.01,
                         "rings": 1, "ring_members": 2})
    rows.append({"variant": "asyncio", "runtime": "python", "binding": "none", "workers": 1,
                 "us_per_message": 10.0, "rate": 1e5, "sys_share": 0.02, "user_pct": 49.0,
                 "sys_pct": 1.0, "idle_pct": 50.0, "ctx_per_message": 0.0, "setup_s": 2.5,
                 "ratio_to_native": float("nan"), "rings": 1000, "ring_members": 100})
    table = pd.DataFrame(rows)
    written = analysis.plot(table, tmp_path, get("ring"))
    assert {p.stem for p in written} >= {"cost_by_binding", "cpu_split"}
    found = analysis.claims(table, get("ring"))
    assert [c.verdict for c in found] == ["inconclusive"] * 5
    assert all("no interval" in c.reason for c in found)
    assert all(c.verdict == "inconclusive" for c in analysis.claims(table.iloc[0:0], get("ring")))
    assert len(analysis.notes(table, get("ring"))) >= 2


def test_synthetic_ring_table_plots_and_notes(tmp_path):
    table = ring_table()
    written = analysis.plot(table, tmp_path, get("ring"))
    assert {p.stem for p in written} >= {"cost_by_binding", "cpu_split", "switches_per_message"}
    assert len(analysis.notes(table, get("ring"))) >= 4


def _ticks(*rounds: tuple[float, float]) -> str:
    """A ``process_metadata`` column of rounds that counted (sys, user) CPU seconds."""
    return json.dumps([{"sys_share": s / (s + u), "sys_s": s, "user_s": u} for s, u in rounds])


def test_an_erlang_round_with_no_tick_in_the_kernel_still_gives_an_interval():
    """The run of 6d63bdb: a 0.3 s pass on 8 schedulers caught 0 of 44 ticks in the kernel
    (a share of exactly 0, no log), so the claim read "no interval"; pooled over its
    rounds the row is 8 of 168 ticks, with exact binomial bounds."""
    table = ring_table()
    erl = table["variant"] == "erlang"
    table.loc[erl & (table["workers"] == 2), "process_metadata"] = _ticks(
        (0.0, 0.44), (0.04, 0.62), (0.04, 0.54))
    table.loc[erl & (table["workers"] == 2), "sys_share"] = 0.0
    claim = analysis.claims(table, get("ring"))[5]
    assert claim.verdict == "reproduced", (claim.measured, claim.reason)
    assert "no interval" not in claim.measured and 0 < claim.ci_low < claim.ci_high < 0.5
    # every round of the row at 0: its own one-sided bound from the count
    table.loc[erl, "process_metadata"] = _ticks((0.0, 0.44), (0.0, 0.62), (0.0, 0.54))
    row = table[erl & (table["workers"] == 2)].iloc[0]
    share = analysis._sys_shares(table[erl & (table["workers"] == 2)])[0]
    assert share.value == 0 and share.interval()[0] == 0 and 0 < share.interval()[1] < 0.05
    assert "0 of 160 clock ticks" in share.reason and row["variant"] == "erlang"


def test_a_process_of_no_cpu_seconds_is_not_counted_in_the_tick_counts():
    """A process with 0 CPU seconds has a NaN share (0/0): it adds no ticks, neither to
    the share's side nor to all; the others are counted. None when none is left."""
    from perfgrid.analyse.analysis import tick_counts

    busy = {"user_s": 0.6, "sys_s": 0.4, "sys_share": 0.4}
    idle = {"user_s": 0.0, "sys_s": 0.0, "sys_share": float("nan")}
    assert tick_counts({"process_metadata": [busy, idle]}, "sys_share") == (40, 100, 1.0)
    assert tick_counts({"process_metadata": json.dumps([idle, busy])}, "sys_share") == (
        40, 100, 1.0)  # an older table's JSON text alike
    assert tick_counts({"process_metadata": [idle]}, "sys_share") is None
    assert tick_counts({"process_metadata": []}, "sys_share") is None
