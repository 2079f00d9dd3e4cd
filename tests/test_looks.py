"""Sequential claims (perfgrid.looks): the stopping rule by simulation, and the pieces that
carry a look's decision from the look job to the rounds after it and the table."""

from __future__ import annotations

import json
import math
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
    with stats.decision_level(looks.level(len(schedule))):
        for n in schedule:
            claim = _claim(blocks[:n], threshold, op)
            if claim.verdict in sequential.DECIDED:
                return claim.verdict, n
            power = sequential.conditional_power(claim, n, schedule[-1])
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


def test_with_the_truth_at_the_threshold_at_most_5_percent_are_decided_either_way() -> None:
    rng = np.random.default_rng(1)
    readings = [_sequential(1.5, 1.5, rng)[0] for _ in range(DRAWS)]
    wrong = sum(r in ("reproduced", "not reproduced") for r in readings) / DRAWS
    print(f"truth at the threshold: decided either way {wrong:.3f}")
    assert wrong <= 0.05


def test_negative_control_naive_looks_decide_too_often_at_the_threshold() -> None:
    """Three looks at the plain 95 % interval: false decisions well above 5 %."""
    rng = np.random.default_rng(2)
    wrong = sum(_naive(1.5, 1.5, rng) != "inconclusive" for _ in range(DRAWS)) / DRAWS
    print(f"naive looks at the threshold: decided {wrong:.3f}")
    assert wrong > 0.08


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
    assert looks.level(3) == pytest.approx(1 - 0.05 / 3)
    cfg = {"x": {"measure": {"claims": {"rounds": 12, "looks": [8, 4]}}}}
    assert looks.schedule(cfg, "x") == [4, 8, 12]
    assert looks.looks_of(cfg, "x") == 3
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


def test_the_harness_writes_a_note_instead_of_measuring_after_a_stopping_look(tmp_path):
    """bench.py with --look: a look that stopped the claims leaves the round unmeasured
    (no pyperf run, no lock taken), its result file a note that says why."""
    from perfgrid import bench

    look = tmp_path / "after-4-rounds.json"
    look.write_text(json.dumps({"stop": True, "why": "decided", "blocks": 4}))
    result = tmp_path / "round=5.json"
    bench.main(["syscall", "--point", "variant=python", "--point", "call=getuid",
                "--point", "binding=spread", "--point", "workers=1", "--result", str(result),
                "--lock", str(tmp_path / "no" / "lock"), "--look", str(look), "--round", "5"])
    assert looks.not_measured(result) == {"look": str(look), "why": "decided", "blocks": 4}
    assert not (tmp_path / "no").exists()


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
