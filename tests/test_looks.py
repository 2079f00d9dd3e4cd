"""Sequential claims (perfgrid.looks): the stopping rule by simulation, and the pieces that
carry a look's decision from the look job to the rounds after it and the table."""

from __future__ import annotations

import json
import math
import re
import time
from types import SimpleNamespace

import numpy as np
import pytest

from perfgrid import looks, stats
from perfgrid.analysis import sequential
from perfgrid.config_errors import ConfigError

DRAWS = 1000
#: looks after 4 and 8 rounds, the cap at 12, as a claim's blocks
SCHEDULE = [4, 8, 12]
#: the spread of one block's log quantity: this VM's paired claim points, 5-15 %
SPREAD = 0.10


def _claim(blocks: np.ndarray, threshold: float, op: str) -> SimpleNamespace:
    """A claim on a paired quantity over ``blocks`` (log values), judged as the analysis
    judges it: its verdict from :func:`stats.decide` at the current level."""
    value = float(np.exp(blocks.mean()))
    quantity = stats.paired(value, dict(enumerate(blocks.tolist())))
    verdict, _ = stats.decide(quantity, op, threshold)
    low, high = quantity.interval()
    return SimpleNamespace(value=value, ci_low=low, ci_high=high, threshold=threshold,
                           verdict=verdict, level=stats.current_level())


def _sequential(truth: float, threshold: float, rng: np.random.Generator,
                schedule: list[int] = SCHEDULE, spread: float = SPREAD,
                op: str = ">=") -> tuple[str, int]:
    """(the claim's last reading, the blocks it used) under perfgrid.looks' rule."""
    blocks = rng.normal(math.log(truth), spread, schedule[-1])
    planned = len(schedule)
    for at, n in enumerate(schedule, 1):
        with stats.decision_level(looks.level(planned, at)):
            claim = _claim(blocks[:n], threshold, op)
        if claim.verdict in sequential.DECIDED:
            return claim.verdict, n
        power = sequential.conditional_power(claim, n, schedule[-1], looks.level(planned))
        if n < schedule[-1] and power < sequential.FUTILE:
            return claim.verdict, n
    return claim.verdict, schedule[-1]


def _naive(truth: float, threshold: float, rng: np.random.Generator) -> str:
    """The same looks with the plain 95 % interval at each: optional stopping done naively."""
    blocks = rng.normal(math.log(truth), SPREAD, SCHEDULE[-1])
    for n in SCHEDULE:
        claim = _claim(blocks[:n], threshold, ">=")
        if claim.verdict in ("reproduced", "not reproduced"):
            return claim.verdict
    return claim.verdict


@pytest.mark.simulation
def test_with_the_truth_at_the_threshold_at_most_5_percent_are_decided_either_way() -> None:
    rng = np.random.default_rng(1)
    readings = [_sequential(1.5, 1.5, rng)[0] for _ in range(DRAWS)]
    wrong = sum(r in ("reproduced", "not reproduced") for r in readings) / DRAWS
    print(f"truth at the threshold: decided either way {wrong:.3f}")
    assert wrong <= 0.05


@pytest.mark.simulation
def test_negative_control_naive_looks_decide_too_often_at_the_threshold() -> None:
    """Three looks at the plain 95 % interval: false decisions well above 5 %."""
    rng = np.random.default_rng(2)
    wrong = sum(_naive(1.5, 1.5, rng) != "inconclusive" for _ in range(DRAWS)) / DRAWS
    print(f"naive looks at the threshold: decided {wrong:.3f}")
    assert wrong > 0.08


@pytest.mark.simulation
@pytest.mark.parametrize("direction", [1.15, 1 / 1.15])
def test_with_the_truth_15_percent_past_the_threshold_80_percent_are_decided(direction):
    """15 % above (reproduced) or below (not reproduced) the threshold, 10 % per block:
    at least 80 % decided, and rightly, within the cap; many stop at an early look."""
    rng = np.random.default_rng(3)
    runs = [_sequential(1.5 * direction, 1.5, rng) for _ in range(DRAWS)]
    right = "reproduced" if direction > 1 else "not reproduced"
    decided = sum(v == right for v, _ in runs) / DRAWS
    wrongly = sum(v in ("reproduced", "not reproduced") and v != right for v, _ in runs)
    early = sum(n < SCHEDULE[-1] for _, n in runs) / DRAWS
    print(f"truth x{direction:.3f}: decided {decided:.3f}, stopped early {early:.3f}")
    assert decided >= 0.80 and wrongly == 0
    assert early >= 0.5


@pytest.mark.simulation
def test_a_claim_that_cannot_be_decided_stops_early_without_a_verdict() -> None:
    """Truth 2 % past the threshold with 10 % per block: hopeless by the cap; most such
    claims stop at a look for futility, inconclusive (never a false decision)."""
    rng = np.random.default_rng(4)
    runs = [_sequential(1.5 * 1.02, 1.5, rng) for _ in range(DRAWS)]
    early = sum(n < SCHEDULE[-1] for _, n in runs) / DRAWS
    print(f"truth 2 % past: stopped early {early:.3f}")
    assert early >= 0.5


def test_level_and_schedule() -> None:
    assert looks.level(1) == pytest.approx(0.95)
    # the looks before the last spend a fifth of the 5 %, the last the rest
    assert looks.level(3, 1) == looks.level(3, 2) == pytest.approx(1 - 0.01 / 2)
    assert looks.level(3) == looks.level(3, 3) == pytest.approx(0.96)
    assert looks.level(2, 1) == pytest.approx(0.99)
    assert sum(1 - looks.level(3, at) for at in (1, 2, 3)) == pytest.approx(0.05)
    cfg = {"x": {"measure": {"claims": {"rounds": 12, "looks": [8, 4]}}}}
    assert looks.schedule(cfg, "x") == [4, 8, 12]
    assert looks.looks_of(cfg, "x") == 3
    # a point measured in fewer rounds passes fewer looks; one done by the first, one
    assert [looks.looks_of(cfg, "x", r) for r in (3, 4, 8, 12)] == [1, 1, 2, 3]
    assert looks.schedule({"x": {"measure": {"claims": {"rounds": 5}}}}, "x") == [5]


def test_conditional_power_follows_the_distance_to_the_threshold() -> None:
    far = SimpleNamespace(value=2.0, ci_low=1.6, ci_high=2.5, threshold=1.0, level=0.95)
    near = SimpleNamespace(value=1.01, ci_low=0.8, ci_high=1.27, threshold=1.0, level=0.95)
    assert sequential.conditional_power(far, 4, 12) > 0.99
    assert sequential.conditional_power(near, 4, 12) < sequential.FUTILE
    none = SimpleNamespace(value=1.0, ci_low=math.nan, ci_high=math.nan, threshold=1.0)
    assert math.isnan(sequential.conditional_power(none, 4, 12))


def test_a_stopped_look_is_carried_to_the_next_and_the_rounds_after_it(tmp_path) -> None:
    first = {"stop": True, "stopped_at": 4, "why": "after 4 of 12 rounds: ...", "claims": []}
    later = sequential.judge("syscall", [], 8, 3, 12, previous=first)
    assert later["stop"] and later["stopped_at"] == 4 and later["blocks"] == 8
    result = tmp_path / "round=9.json"
    looks.write_not_measured(result, tmp_path / "after-8-rounds.json", later)
    assert looks.not_measured(result)["why"] == first["why"]
    measured = tmp_path / "round=1.json"
    measured.write_text(json.dumps({"benchmarks": [], "version": "1.0"}))
    assert looks.not_measured(measured) is None
    assert looks.measured([measured, result]) == [measured]


def _block_plan(tmp_path, look, *workers):
    """A claim block's plan (perfgrid.block) of syscall points with these worker counts."""
    from perfgrid import experiments

    exp = experiments.get("syscall")
    points = []
    for count in workers:
        point = {"variant": "python", "call": "getuid", "binding": "spread", "workers": count}
        points.append({"key": exp.point_key(point),
                       "args": [w for k, v in point.items() for w in ("--point", f"{k}={v}")]
                       + ["--lock", str(tmp_path / "no" / "lock"), "--round", "9"],
                       "result": str(tmp_path / f"workers={count}" / "round=9.json"),
                       "log": str(tmp_path / "logs" / f"workers={count}.log")})
    return {"experiment": "syscall", "look": str(look) if look else None, "points": points}


def test_a_block_writes_notes_instead_of_measuring_after_a_stopping_look(tmp_path):
    """perfgrid.block after a look that stopped the claims: no point is measured (no
    harness started, no lock taken), each result file a note that says why."""
    from perfgrid import block

    look = tmp_path / "after-4-rounds.json"
    look.write_text(json.dumps({"stop": True, "why": "decided", "blocks": 4}))
    plan = _block_plan(tmp_path, look, 1, 2)
    block.main([json.dumps(plan)])
    for point in plan["points"]:
        assert looks.not_measured(point["result"]) == {"look": str(look), "why": "decided",
                                                       "blocks": 4}
    assert not (tmp_path / "no").exists() and not (tmp_path / "logs").exists()


def test_a_block_measures_only_the_points_an_open_claim_compares(tmp_path, monkeypatch):
    """perfgrid.block after a look that left a claim open: the harness measures that
    claim's points, in the plan's order, and the others get a note."""
    from perfgrid import block

    look = tmp_path / "after-8-rounds.json"
    plan = _block_plan(tmp_path, look, 2, 1, 4)
    look.write_text(json.dumps({"stop": False, "blocks": 8, "cap": 20,
                                "open_points": [plan["points"][0]["key"],
                                                plan["points"][2]["key"]],
                                "open_unnamed": False}))
    measured = []
    monkeypatch.setattr(block, "measure", lambda name, point: measured.append(point) or 0)
    block.main([json.dumps(plan)])
    assert [p["result"] for p in measured] == [plan["points"][i]["result"] for i in (0, 2)]
    note = looks.not_measured(plan["points"][1]["result"])
    assert note is not None and "every claim comparing this point was decided" in note["why"]


def test_a_block_stops_at_the_first_point_that_fails(tmp_path, monkeypatch):
    """A failed point ends the block with its key and log: the points after it are not
    measured (Snakemake removes a failed job's results and measures the block again)."""
    from perfgrid import block

    plan = _block_plan(tmp_path, None, 1, 2, 4)
    measured = []
    monkeypatch.setattr(block, "measure",
                        lambda name, point: measured.append(point) or (3 if measured[1:] else 0))
    with pytest.raises(SystemExit, match=r"workers=2.*exit status 3.*workers=2\.log"):
        block.main([json.dumps(plan)])
    assert len(measured) == 2


def _budget_plan(tmp_path, round_, minutes_ago, minutes=60, keep_rounds=3):
    """A block plan of ``round_`` with a time budget, the run started ``minutes_ago``."""
    record = tmp_path / "run.json"
    record.write_text(json.dumps({"started": time.time() - 60 * minutes_ago}))
    plan = _block_plan(tmp_path, None, 1, 2)
    return {**plan, "round": round_, "budget": {"minutes": minutes,
                                                 "keep_rounds": keep_rounds,
                                                 "run_record": str(record)}}


def test_a_later_round_past_the_time_budget_writes_notes_and_measures_nothing(tmp_path,
                                                                              monkeypatch):
    """A block of a round after keep_rounds that starts past budget.minutes: every point a
    note (look: budget) that says when and why, no harness started."""
    from perfgrid import block

    monkeypatch.setattr(block, "measure", lambda name, point: pytest.fail("measured"))
    plan = _budget_plan(tmp_path, 4, minutes_ago=61)
    block.main([json.dumps(plan)])
    for point in plan["points"]:
        note = looks.not_measured(point["result"])
        assert note is not None and note["look"] == looks.BUDGET and note["blocks"] == 3
        assert "round 4 would start 61 min after the run did" in note["why"]
        assert "budget.minutes (60)" in note["why"] and "rounds up to 3" in note["why"]


@pytest.mark.parametrize("round_, minutes_ago, minutes", [
    (3, 90, 60),      # a round up to keep_rounds: measured whatever the time
    (4, 59, 60),      # within the budget
    (9, 600, None),   # no budget
])
def test_a_round_is_measured_within_the_budget_or_up_to_keep_rounds(tmp_path, monkeypatch,
                                                                    round_, minutes_ago,
                                                                    minutes):
    from perfgrid import block

    measured = []
    monkeypatch.setattr(block, "measure", lambda name, point: measured.append(point) or 0)
    plan = _budget_plan(tmp_path, round_, minutes_ago, minutes=minutes)
    block.main([json.dumps(plan)])
    assert measured == plan["points"]


def test_a_block_without_a_record_of_the_run_start_has_no_budget(tmp_path) -> None:
    """Run by hand (no run.json): the budget cannot count, so it stops nothing."""
    from perfgrid import block

    budget = {"minutes": 1, "keep_rounds": 1, "run_record": str(tmp_path / "run.json")}
    assert block.past_budget(budget, 5) is None
    (tmp_path / "run.json").write_text(json.dumps({"started": 0.0}))
    assert block.past_budget(budget, 5)["stop"] is True


def test_the_report_says_how_many_rounds_the_budget_let_go(tmp_path) -> None:
    from perfgrid.paths import Layout
    from perfgrid.report import budget_notes

    layout = Layout(tmp_path)
    assert budget_notes(layout, "spawn") == []
    for name, look, blocks in (("a", looks.BUDGET, 5), ("b", looks.BUDGET, 4),
                               ("c", "after-5-rounds.json", 5)):
        looks.write_not_measured(layout.raw_dir("spawn") / name / "round=6.json", look,
                                 {"why": "", "blocks": blocks})
    [line] = budget_notes(layout, "spawn")
    assert "before 2 point rounds" in line and "from round 5 on" in line


def test_looks_must_lie_before_the_last_round() -> None:
    from perfgrid import settings

    with pytest.raises(ConfigError, match=r"syscall\.measure\.claims\.looks: 8 is not a "
                                          r"round before the last .* from 2 to 7"):
        settings.effective({**_base(), "syscall": {"measure": {"claims": {
            "rounds": 8, "looks": [4, 8]}}}}, check_disk=False)


def _base() -> dict:
    import yaml

    from perfgrid.paths import REPO

    with open(REPO / "config" / "config.yaml") as handle:
        cfg = yaml.safe_load(handle)
    cfg["experiments"] = ["syscall"]
    return cfg


# -- per claim: the rounds after a look measure only the points of the claims left open --
def test_a_round_after_a_look_measures_only_points_of_open_claims() -> None:
    record = {"stop": False, "open_points": ["variant=a", "variant=b"], "open_unnamed": False}
    assert looks.measures(record, "variant=a")
    assert not looks.measures(record, "variant=c")
    assert looks.measures({**record, "open_unnamed": True}, "variant=c")
    assert not looks.measures({**record, "stop": True}, "variant=a")
    # a look written before claims named their points goes on with every point
    assert looks.measures({"stop": False}, "variant=c")


def _look_of(monkeypatch, claims: list, passes: dict[str, int], previous=None, at=1):
    """sequential.judge over a stand-in table (one row per point, its looks) and claims."""
    import pandas as pd

    from perfgrid import aggregate

    rows = [{"experiment": "ring", "variant": key, "binding": "none", "workers": 2,
             "claims_looks": count} for key, count in passes.items()]
    monkeypatch.setattr(aggregate, "build_table", lambda name, results: pd.DataFrame(rows))
    monkeypatch.setattr(sequential, "claims_of", lambda name, table, at=None: claims)
    return sequential.judge("ring", [], 5, 2, 10, previous=previous, at=at)


def _ring_key(variant: str) -> str:
    from perfgrid import experiments

    return experiments.get("ring").point_key({"variant": variant, "binding": "none",
                                               "workers": 2})


def _open_claim(*variants: str, verdict: str = "inconclusive", **numbers):
    from perfgrid.analysis import Claim

    figures = {"value": 1.52, "ci_low": 1.0, "ci_high": 2.3, "threshold": 1.2, "op": ">=",
               **numbers}
    return Claim("ring", f"on {'+'.join(variants)}", "c", "m", verdict, level=0.99,
                 points="; ".join(_ring_key(v) for v in variants), **figures)


def test_a_look_leaves_open_only_the_points_of_undecided_decidable_claims(monkeypatch):
    claims = [_open_claim("asyncio", "thread"),                     # open: measured on
              _open_claim("native", "thread", verdict="reproduced"),  # decided
              _open_claim("uvloop", value=1.21, ci_low=0.5, ci_high=2.9),  # hopeless
              _open_claim("erlang")]                    # its point has every round already
    passes = {"asyncio": 2, "thread": 2, "native": 2, "uvloop": 2, "erlang": 1}
    record = _look_of(monkeypatch, claims, passes)
    assert [c["holds"] for c in record["claims"]] == [True, False, False, False]
    assert record["open_points"] == sorted([_ring_key("asyncio"), _ring_key("thread")])
    assert not record["stop"] and not record["open_unnamed"]
    assert not looks.measures(record, _ring_key("native"))
    # a later look keeps let-go points let go, though an open claim names them
    later = _look_of(monkeypatch, [_open_claim("asyncio", "native")], passes,
                     previous=record, at=1)
    assert later["open_points"] == [_ring_key("asyncio")]


def test_a_claim_that_cannot_name_its_points_keeps_every_point(monkeypatch):
    from perfgrid.analysis import Claim

    unnamed = Claim("ring", "h", "c", "m", "inconclusive", value=1.52, ci_low=1.0,
                    ci_high=2.3, threshold=1.2, op=">=", level=0.99)
    record = _look_of(monkeypatch, [unnamed], {"asyncio": 2})
    assert record["claims"][0]["holds"] and record["open_unnamed"]
    assert looks.measures(record, _ring_key("native"))


def test_each_claim_decides_at_the_level_of_the_looks_its_points_pass(monkeypatch):
    """A claim on points measured past the first look decides at 99 % there and 96 % at
    the end; one on points done before the first look is judged once, at 95 %."""
    import pandas as pd

    from perfgrid import analysis
    from perfgrid.analysis import judged

    looked, once = frozenset({_ring_key("asyncio")}), frozenset({_ring_key("erlang")})
    quantity = stats.paired(1.5, {1: 0.3, 2: 0.5, 3: 0.4, 4: 0.45, 5: 0.35})
    fake = type("M", (), {"claims": staticmethod(lambda table, experiment: [
        judged("ring", "h", "c", stats.from_points(quantity, points), ">=", 1.2)
        for points in (looked, once)])})
    monkeypatch.setattr(analysis, "module", lambda name: fake)
    monkeypatch.setattr(analysis.ledger, "entry", lambda experiment, hypothesis: None)
    table = pd.DataFrame([{"experiment": "ring", "variant": "asyncio", "binding": "none",
                           "workers": 2, "claims_looks": 2},
                          {"experiment": "ring", "variant": "erlang", "binding": "none",
                           "workers": 2, "claims_looks": math.nan}])
    at_look = analysis.claims_of("ring", table, at=1)
    final = analysis.claims_of("ring", table)
    assert [c.level for c in at_look] == pytest.approx([0.99, 0.95])
    assert [c.level for c in final] == pytest.approx([0.96, 0.95])
    assert final[0].point_keys == (_ring_key("asyncio"),)


def test_the_report_says_which_points_a_look_kept(tmp_path) -> None:
    from perfgrid.paths import Layout
    from perfgrid.report import look_notes

    folder = tmp_path / "looks" / "spawn"
    folder.mkdir(parents=True)
    (folder / "after-5-rounds.json").write_text(json.dumps({
        "blocks": 5, "cap": 10, "looks": 2, "level": 0.99, "stop": False, "stopped_at": None,
        "why": "after 5 of 10 rounds: 1 of 6 claims still undecided and decidable by round 10",
        "open_points": ["variant=a", "variant=b"], "open_unnamed": False}))
    [line] = look_notes(Layout(tmp_path), "spawn")
    assert "intervals at 99.0%" in line
    assert line.endswith("the next rounds were measured at the 2 points those claims compare.")


@pytest.mark.pipeline
def test_looks_let_the_rounds_of_decided_claims_go_in_a_real_run(tmp_path) -> None:
    """A tiny file_read run with looks after 2 and 3 of 4 rounds: its dry run plans both
    looks and every round's claim block, each later round measures exactly the points
    the looks before it left open (the others' results are notes), the table has their
    rounds, and an up-to-date dry run plans nothing."""
    import pandas as pd

    from perfgrid import experiments

    from helpers import CONFIG, copy_workflow, run

    section = {**CONFIG["file_read"], "variants": ["read", "readinto", "dd"],
               "measure": {**CONFIG["file_read"]["measure"], "claims": {
                   "processes": 1, "values": 1, "target_ci": None, "rounds": 4,
                   "looks": [2, 3]}}}
    root = copy_workflow(tmp_path, {**CONFIG, "host": "looks", "file_read": section})
    plan = run(root, "-n")
    assert re.search(r"^look\s+2$", plan, re.MULTILINE)
    assert all(re.search(rf"^file_read_round_{n}\s+1$", plan, re.MULTILINE) for n in range(1, 5))
    run(root, "--cores", "2")
    results = root / "results" / "looks"
    records = [json.loads((results / "looks" / "file_read" / f"after-{n}-rounds.json")
                          .read_text()) for n in (2, 3)]
    exp = experiments.get("file_read")
    table = pd.read_csv(results / "tables" / "file_read.csv")
    claimed = [row for row in table.to_dict("records") if exp.used_by_claims(row)]
    assert claimed
    raw = results / "raw" / "file_read"
    for row in claimed:
        key = exp.point_key(row)
        kept = [looks.measures(record, key) for record in records]
        later = [any(key == exp.point_key(_point_of(p)) and looks.not_measured(p) is None
                     for p in raw.rglob(f"round={n}.json")) for n in (3, 4)]
        assert later == [kept[0], kept[0] and kept[1]], key
        assert row["n_rounds"] == 2 + sum(later), key
    assert "Nothing to be done" in run(root, "-n")


@pytest.mark.pipeline
def test_the_time_budget_lets_the_later_rounds_go_in_a_real_run(tmp_path) -> None:
    """A tiny file_read run of 3 rounds whose budget is spent at once: rounds 1 and 2 are
    measured whatever the time (keep_rounds), round 3 is notes, the claims use 2 rounds,
    and the report says so."""
    import pandas as pd

    from perfgrid import experiments

    from helpers import CONFIG, copy_workflow, run

    section = {**CONFIG["file_read"], "variants": ["readinto", "dd"],
               "measure": {**CONFIG["file_read"]["measure"], "claims": {
                   "processes": 1, "values": 1, "target_ci": None, "rounds": 3,
                   "looks": []}}}
    root = copy_workflow(tmp_path, {**CONFIG, "host": "budget", "experiments": ["file_read"],
                                    "budget": {"minutes": 1e-6, "keep_rounds": 2},
                                    "file_read": section})
    run(root, "--cores", "2")
    results = root / "results" / "budget"
    raw = results / "raw" / "file_read"
    notes = {n: [looks.not_measured(p) for p in raw.rglob(f"round={n}.json")]
             for n in (1, 2, 3)}
    assert notes[3] and all(note and note["look"] == looks.BUDGET for note in notes[3])
    assert notes[1] and notes[2] and not any(notes[1] + notes[2])
    exp = experiments.get("file_read")
    table = pd.read_csv(results / "tables" / "file_read.csv")
    claimed = [row for row in table.to_dict("records") if exp.used_by_claims(row)]
    assert claimed and all(row["n_rounds"] == 2 for row in claimed)
    assert "time budget (budget.minutes) was spent" in (results / "report.md").read_text()


def _point_of(path) -> dict:
    """The axes of a raw result's path (``.../variant=dd/cache=warm/.../round=3.json``)."""
    return dict(part.split("=", 1) for part in path.parent.parts if "=" in part)


def test_a_point_has_one_name_from_a_job_a_table_row_and_the_config():
    """A look's open points are named from table rows, and a job asks with its own
    wildcards: a float axis must read the same from "1.0", 1.0 and 1."""
    from perfgrid import experiments

    exp = experiments.get("timers")
    base = {"variant": "uvloop", "seeding": "identical", "gc": "off", "tasks": 100000,
            "rounds": 3}
    job = exp.parse_point({k: str(v) for k, v in {**base, "max_sleep": "1.0"}.items()})
    names = {exp.point_key(job), exp.point_key({**base, "max_sleep": 1.0}),
             exp.point_key({**base, "max_sleep": 1})}
    assert names == {"variant=uvloop/seeding=identical/gc=off/tasks=100000/rounds=3/max_sleep=1"}
    assert exp.point_key({**base, "max_sleep": "0.5"}).endswith("max_sleep=0.5")
