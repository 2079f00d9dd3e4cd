"""The noise profile: its statistics on data of known components, its plan and order, the
config that enables it, the report's table, and one short real run of the syscall pair."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import math
import shlex
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats as sps

from perfgrid.analyse import noisestats
from perfgrid.design import plan
from perfgrid.design.model import NoisePair, NoiseSide, Plan
from perfgrid.kit.paths import Layout
from perfgrid.measure import noiseprofile as measuring
from perfgrid.pipeline import cli, config_errors, glue, noiseprofile, settings
from perfgrid.publish.report import formatting, pages, run_facts

from helpers import FULL, REPO, compile_native, need

#: the synthetic components (log scale): a factor shared by both sides of a block, each
#: process's own offset, and each value's noise; five values a process
SHARED, PROCESS, WITHIN, VALUES = 0.05, 0.04, 0.015, 5


def synthetic(blocks: int, shared: float = SHARED, seed: int = 1,
              ) -> tuple[np.ndarray, np.ndarray]:
    """Log rates (blocks x values) of sides A (rate 100) and B (rate 50)."""
    rng = np.random.default_rng(seed)
    common = rng.normal(0.0, shared, (blocks, 1))

    def side(level: float) -> np.ndarray:
        return (math.log(level) + common + rng.normal(0.0, PROCESS, (blocks, 1))
                + rng.normal(0.0, WITHIN, (blocks, VALUES)))

    return side(100.0), side(50.0)


def test_the_spreads_and_the_correlation_come_out_as_the_components_put_them_in():
    a, b = synthetic(4000)
    mean_var = SHARED**2 + PROCESS**2 + WITHIN**2 / VALUES  # of one process's mean
    side = noisestats.side_stats(a, [1.0] * 4000, [0.1] * 4000, warmups=1)
    assert side["within_cv"] == pytest.approx(WITHIN, rel=0.05)
    assert side["between_cv"] == pytest.approx(math.sqrt(mean_var), rel=0.05)
    assert side["between_component_cv"] == pytest.approx(math.hypot(SHARED, PROCESS), rel=0.05)
    assert side["process_mean_var"] == pytest.approx(
        side["within_var"] / VALUES + side["between_var"])  # Kalibera and Jones' S2^2
    pair = noisestats.pair_stats(a, b)
    assert pair["ratio"] == pytest.approx(2.0, rel=0.01)
    assert pair["correlation"] == pytest.approx(SHARED**2 / mean_var, abs=0.05)
    assert pair["paired_sd"] == pytest.approx(
        math.sqrt(2 * (PROCESS**2 + WITHIN**2 / VALUES)), rel=0.05)
    assert pair["unpaired_sd"] == pytest.approx(math.sqrt(2 * mean_var), rel=0.05)
    assert pair["blocks_needed_paired"] < pair["blocks_needed_unpaired"]


def test_without_a_shared_factor_pairing_gains_nothing():
    a, b = synthetic(4000, shared=0.0, seed=2)
    pair = noisestats.pair_stats(a, b)
    assert abs(pair["correlation"]) < 0.05
    assert pair["paired_sd"] == pytest.approx(pair["unpaired_sd"], rel=0.05)


def test_optimal_values_follow_kalibera_and_jones():
    """sqrt(c2 / c1 * T1^2 / T2^2): c1 a value's cost, c2 a process's beyond its values."""
    a, _ = synthetic(4000, seed=3)
    value_s, startup_s = 0.05, 0.8
    side = noisestats.side_stats(a, [startup_s + (VALUES + 1) * value_s] * 4000,
                                   [value_s] * 4000, warmups=1)
    assert side["startup_seconds"] == pytest.approx(startup_s)
    truth = math.sqrt(startup_s / value_s * WITHIN**2 / (SHARED**2 + PROCESS**2))
    assert side["optimal_values"] == pytest.approx(truth, rel=0.1)


def test_no_between_process_component_gives_no_optimal_count():
    """Processes whose values differ but whose means agree: T2^2 = -S1^2 / values < 0."""
    values = np.log([1.00, 1.02, 0.98, 1.01, 0.99])
    logs = np.array([values, values[::-1], np.roll(values, 2)])
    side = noisestats.side_stats(logs, [1.0] * 3, [0.1] * 3, warmups=0)
    assert side["between_var"] < 0 and side["within_cv"] > 0
    assert side["optimal_values"] is None and side["between_component_cv"] == 0.0


@pytest.mark.parametrize("sd", [0.002, 0.02, 0.05, 0.1, 0.3])
def test_blocks_needed_is_the_least_count_whose_t_interval_is_within_5_percent(sd):
    n = noisestats.blocks_needed(sd**2)
    h = math.log(1.05)

    def half(k: int) -> float:
        return sps.t.ppf(0.975, k - 1) * sd / math.sqrt(k)

    assert n >= 2 and half(n) <= h
    assert n == 2 or half(n - 1) > h


def test_blocks_needed_known_value_and_edges():
    assert noisestats.blocks_needed(0.05**2) == 7  # t(6) 2.447 * 0.05 / sqrt(7) = 4.6 %
    assert noisestats.blocks_needed(0.0) == 2
    assert noisestats.blocks_needed(float("nan")) is None
    assert noisestats.blocks_needed(1e6) is None  # past MAX_BLOCKS
    # Welch's degrees of freedom (up to two per block) never ask for more blocks
    assert noisestats.blocks_needed(0.04, 2.0) <= noisestats.blocks_needed(0.04)


def _record(block: int, rate_a: float, rate_b: float) -> dict:
    side = {"seconds": 1.0, "value_seconds": 0.1, "busy_share": 0.0}
    return {"block": block, "order": ["a", "b"],
            "a": {**side, "rates": [rate_a, rate_a * 1.01, rate_a * 0.99]},
            "b": {**side, "rates": [rate_b, rate_b * 1.02, rate_b * 0.98]}}


def _pair() -> NoisePair:
    return NoisePair("p", "claim", NoiseSide("x", "syscall", {}, 1),
                     NoiseSide("y", "syscall", {}, 1))


def test_two_blocks_give_strict_json_and_no_correlation():
    out = noisestats._finite(noisestats.summarise(
        _pair(), [_record(1, 100, 50), _record(2, 110, 52)], warmups=1))
    text = json.dumps(out, allow_nan=False)  # NaN or infinity would raise
    assert out["correlation"] is None and out["blocks"] == 2
    assert json.loads(text)["a_stats"]["processes"] == 2


def test_one_block_is_no_spread_and_says_so():
    out = noisestats.summarise(_pair(), [_record(1, 100, 50)], warmups=1)
    assert "a spread needs two" in out["error"] and "a_stats" not in out


def test_blocks_measure_each_pair_back_to_back_in_drawn_orders(monkeypatch, tmp_path):
    calls = []

    def fake(side, values, warmups, folder):
        calls.append(side.label)
        if side.label == "bad":
            raise RuntimeError("the harness exited 1: boom")
        return {"seconds": 1.0, "rates": [1.0, 1.0], "value_seconds": 0.1}

    monkeypatch.setattr(measuring, "measure", fake)
    good = NoisePair("good", "", NoiseSide("a1", "e", {}, 1), NoiseSide("b1", "e", {}, 1))
    bad = NoisePair("broken", "", NoiseSide("a2", "e", {}, 1), NoiseSide("bad", "e", {}, 1))
    out, failed = measuring.run_blocks([good, bad], 12, 2, 0, seed=7, folder=tmp_path,
                                       log=io.StringIO())
    assert len(out["good"]) == 12 and out["broken"] == []
    assert "boom" in failed["broken"]
    orders = {tuple(r["order"]) for r in out["good"]}
    assert orders == {("a", "b"), ("b", "a")}  # both orders drawn over 12 blocks
    good_calls = [c for c in calls if c in ("a1", "b1")]
    pairs = [good_calls[i:i + 2] for i in range(0, len(good_calls), 2)]
    for record, pair_calls in zip(out["good"], pairs, strict=True):
        assert [{"a": "a1", "b": "b1"}[k] for k in record["order"]] == pair_calls
    # the broken pair stopped after its first failure (one or two of its calls)
    assert 1 <= sum(c in ("a2", "bad") for c in calls) <= 2


def _config(tmp_path: Path, **extra) -> dict:
    raw = {"host": "nt", "results": str(tmp_path / "results"), **extra}
    return settings.validated(raw, check_disk=False)


def test_the_plan_skips_pairs_outside_the_run_or_without_their_files(tmp_path):
    cfg = _config(tmp_path, experiments=["syscall", "file_read"],
                  testfile={"path": str(tmp_path / "absent.bin")})
    layout = Layout.for_host("nt", tmp_path / "results")
    planned = plan.noise_pairs(cfg, layout)
    pairs, skipped = noiseprofile.runnable(*planned, cfg, layout)
    assert pairs == []
    assert "no test file at" in skipped["file_read 1 MiB warm"]
    assert ("no native program at" in skipped["syscall getuid"]
            or "cc not found" in skipped["syscall getuid"])
    only = _config(tmp_path, experiments=["ring"])
    pairs, skipped = plan.noise_pairs(only, layout)
    assert pairs == {} and set(skipped) == {"file_read 1 MiB warm", "syscall getuid"}
    assert all("not among this run's experiments" in why for why in skipped.values())


def test_a_planned_side_gets_a_benchmark_jobs_options_and_command(tmp_path):
    need("cc")  # without it the native point is unavailable
    cfg = _config(tmp_path, experiments=["syscall"])
    layout = Layout.for_host("nt", tmp_path / "results")
    program = tmp_path / "syscall"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    pairs, skipped = noiseprofile.runnable(*plan.noise_pairs(cfg, layout), cfg, layout,
                                           {"syscall": str(program)})
    assert "syscall getuid" not in skipped
    (pair,) = pairs
    assert (pair.a.label, pair.b.label) == ("python", "native")
    assert pair.b.words[-2:] == ("--option", f"binary={program}")
    assert "--option" not in pair.a.words
    words = measuring.command(pair.b, 5, 1, tmp_path / "r.json")
    assert words[1:4] == ["-m", "perfgrid.measure.bench", "syscall"]
    assert " ".join(words).endswith(
        "--point variant=native --point call=getuid --point binding=single --point workers=1 "
        f"--option binary={program} --processes 1 --values 5 --warmups 1 --loops 5000 "
        f"--result {tmp_path / 'r.json'}")


def test_the_plan_holds_the_pairs_with_a_benchmark_jobs_words_outside_its_design(tmp_path):
    """plan.json's ``noise``: each side's words are those of the plan's benchmark job of its
    point (its axes, then its options); read back as written; no part of the design digest."""
    cfg = settings.validated(copy.deepcopy(FULL), check_disk=False)
    layout = Layout.for_host("nt", tmp_path / "results")
    built = plan.build(cfg, layout)
    assert set(built.noise) | set(built.noise_skipped) == {"file_read 1 MiB warm",
                                                           "syscall getuid"}
    checked = 0
    for pair in built.noise.values():
        for side in (pair.a, pair.b):
            job = next((j for j in built.jobs if j.experiment == side.experiment
                        and j.point == side.point), None)
            assert side.words[:2] == ("--point", f"{next(iter(side.point))}="
                                                 f"{next(iter(side.point.values()))}")
            if job is not None:
                assert side.words[-len(job.options) or len(side.words):] == job.options
                checked += 1
    assert checked
    data = built.to_json()
    assert Plan.from_json(json.loads(json.dumps(data))) == built
    without = {k: v for k, v in data.items() if k not in ("noise", "format")}
    assert plan.design_digest(without) == plan.design_digest(data)
    assert "noise" not in plan.DESIGN_FIELDS


def test_the_rule_measures_the_plans_pairs_as_passed_not_pairs_planned_again(tmp_path):
    """Rule noise_profile passes plan.json's noise entry (``--pairs``): the profile measures
    and skips what it says, and its params digest follows that entry alone."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"host": "nt", "results": str(tmp_path / "results"),
                                    "experiments": ["syscall"]}))
    entry = {"pairs": {}, "skipped": {"made up": "the plan says so"}}
    out = tmp_path / "noise.json"
    cli.main(["noise", "--config", str(path), "--pairs", json.dumps(entry), "--blocks", "2",
              "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["pairs"] == {} and data["skipped"] == {"made up": "the plan says so"}

    cfg = _config(tmp_path, experiments=["syscall"])
    layout = Layout.for_host("nt", tmp_path / "results")
    built = plan.build(cfg, layout)
    params = glue.noise_params(built, {"host": "nt"})
    assert json.loads(shlex.split(params["pairs"](None, None))[0])["skipped"] == {
        "file_read 1 MiB warm": "file_read is not among this run's experiments"}
    longer = plan.build({**cfg, "budget": {"minutes": 999}}, layout)
    assert glue.noise_params(longer, {})["digest"] == params["digest"]
    if built.noise:  # a side's words changed: the profile measures again
        name, pair = next(iter(built.noise.items()))
        moved = dataclasses.replace(pair, a=dataclasses.replace(pair.a, words=("--point",)))
        other = dataclasses.replace(built, noise={**built.noise, name: moved})
        assert glue.noise_params(other, {})["digest"] != params["digest"]


# -- the config ------------------------------------------------------------------------------
def with_profile(profile: dict) -> dict:
    """A copy of config/config.yaml with ``noise.profile`` replaced (validation fills in
    defaults in place, so the shared one stays as loaded)."""
    config = copy.deepcopy(FULL)
    config["noise"]["profile"] = profile
    return config


@pytest.mark.parametrize("blocks, what", [
    (1, "1 is less than the minimum of 2"),
    (-1, "-1 is less than the minimum of 2"),
    (2.5, "2.5 is not allowed"),
    ("many", "'many' is not allowed"),
    (201, "201 is greater than the maximum of 200"),
    (True, "True is not allowed"),
])
def test_bad_blocks_are_refused_naming_the_key(blocks, what):
    config = with_profile({"blocks": blocks})
    with pytest.raises(config_errors.ConfigError) as info:
        settings.validated(config, check_disk=False)
    message = str(info.value)
    assert message.startswith("noise.profile.blocks: "), message
    assert what in message, message
    assert ("allowed: one of [0] or a whole number without a decimal point >= 2 and <= 200"
            in message), message


def test_an_unknown_profile_key_is_refused():
    with pytest.raises(config_errors.ConfigError,
                       match=r"noise.profile: .*allowed keys: \['blocks'\]"):
        settings.validated(with_profile({"blocks": 2, "values": 3}), check_disk=False)


@pytest.mark.parametrize("blocks", [0, 2, 200])
def test_good_blocks_pass(blocks):
    cfg = settings.validated(with_profile({"blocks": blocks}), check_disk=False)
    assert cfg["noise"]["profile"]["blocks"] == blocks


def test_the_shipped_configs_profile_the_full_run_and_keep_quick_short():
    quick = yaml.safe_load((REPO / "config" / "quick.yaml").read_text())
    assert FULL["noise"]["profile"]["blocks"] >= 5
    assert 2 <= quick["noise"]["profile"]["blocks"] <= 3


def test_the_cli_refuses_a_disabled_profile_without_blocks(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"host": "nt", "results": str(tmp_path / "results"),
                                    "noise": {"profile": {"blocks": 0}}}))
    with pytest.raises(SystemExit):
        cli.main(["noise", "--config", str(path)])
    assert "noise.profile.blocks is 0" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


# -- the report ------------------------------------------------------------------------------
def test_the_report_table_shows_each_pair_by_side_and_the_skipped_ones():
    a, b = synthetic(50, seed=5)
    records = [{"block": i + 1, "order": ["a", "b"],
                "a": {"seconds": 1.2, "value_seconds": 0.05, "rates": list(np.exp(a[i]))},
                "b": {"seconds": 0.9, "value_seconds": 0.04, "rates": list(np.exp(b[i]))}}
               for i in range(50)]
    pair = noisestats.summarise(_pair(), records, warmups=1)
    profile = noisestats._finite({"blocks": 50, "values": VALUES, "warmups": 1,
                                  "seconds": 61.0, "pairs": {"p": pair},
                                  "skipped": {"q <b>": "no <i>test</i> file"}})
    text, frame = run_facts.noise_table(profile)
    assert "50 blocks" in text and "5 values after 1 warm-up" in text
    row = frame.iloc[0]
    assert row["A / B"] == "x / y"
    assert row["s per process"] == "1.20 / 0.90"
    assert row["within-process CV"] == (f"{pair['a_stats']['within_cv']:.1%} / "
                                        f"{pair['b_stats']['within_cv']:.1%}")
    assert row["correlation"] == f"{pair['correlation']:.2f}"
    assert row["blocks for +/-5 % paired / unpaired"] == (
        f"{pair['blocks_needed_paired']} / {pair['blocks_needed_unpaired']}")
    assert frame.iloc[1]["note"] == "skipped: no <i>test</i> file"
    html = pages._html_table(frame)
    assert "no &lt;i&gt;test&lt;/i&gt; file" in html and "<i>" not in html
    assert "| p | x / y |" in formatting.md_table(frame)


def test_without_a_profile_the_report_says_it_was_not_measured():
    text, frame = run_facts.noise_table(None)
    assert "noise.profile.blocks: 0" in text and frame.empty


# -- one short real run ----------------------------------------------------------------------
@pytest.mark.serial  # it measures the machine's noise, and bounds the spread it finds
def test_a_real_profile_of_two_blocks_of_the_syscall_pair_writes_valid_json(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"host": "nt", "results": str(tmp_path / "results"),
                                    "experiments": ["syscall"]}))
    layout = Layout.for_host("nt", tmp_path / "results")
    layout.native_binary("syscall").parent.mkdir(parents=True)
    compile_native("syscall", layout.native_binary("syscall").parent)  # as the pipeline does
    cli.main(["noise", "--config", str(path), "--blocks", "2", "--values", "3"])
    printed = capsys.readouterr().out
    print(printed)  # the figures, for whoever runs this with -s
    data = json.loads(layout.noise_profile.read_text(),
                      parse_constant=lambda name: pytest.fail(f"{name} in noise.json"))
    assert (data["blocks"], data["values"], data["warmups"]) == (2, 3, 1)
    assert list(data["pairs"]) == ["syscall getuid"]
    assert "not among this run's experiments" in data["skipped"]["file_read 1 MiB warm"]
    pair = data["pairs"]["syscall getuid"]
    assert "error" not in pair and pair["blocks"] == 2
    for record in pair["records"]:
        assert sorted(record["order"]) == ["a", "b"]
        for key in ("a", "b"):
            assert len(record[key]["rates"]) == 3 and min(record[key]["rates"]) > 0
            assert record[key]["seconds"] > record[key]["value_seconds"] > 0
    for key in ("a_stats", "b_stats"):
        # three timed values of a getuid loop differ, by well under their mean
        assert pair[key]["processes"] == 2 and 0 < pair[key]["within_cv"] < 1
        assert pair[key]["process_seconds"] > 0
    assert pair["paired_sd"] is not None and pair["ratio"] > 0
    assert isinstance(pair["blocks_needed_paired"], int)
    assert "syscall getuid: within" in printed
    assert layout.bench_lock.exists()  # held as benchmark jobs hold it
    assert not list(layout.root.rglob(".*.tmp*"))
