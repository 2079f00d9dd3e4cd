"""The run's plan (perfgrid.design.plan), built from the shipped configs without Snakemake: every
job once and in one order, its command words, result and rule, the claim blocks as
perfgrid.measure.block reads them, and the rules' functions (perfgrid.pipeline.glue) in
step with it."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from perfgrid import experiments
from perfgrid.design import planning
from perfgrid.design.plan import Plan, build, write
from perfgrid.kit import formats
from perfgrid.kit.paths import Layout
from perfgrid.measure import block
from perfgrid.pipeline import glue, progress, settings
from perfgrid.pipeline.config_errors import ConfigError

from helpers import REPO


def merged(base: dict, over: dict) -> dict:
    """``over`` on ``base``, section by section, as Snakemake merges a --configfile."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def config(*names: str, **overrides: object) -> dict:
    """The validated config of ``config/<name>`` files, each over the one before."""
    raw: dict = {}
    for name in names:
        raw = merged(raw, yaml.safe_load((REPO / "config" / name).read_text()))
    return settings.validated(merged(raw, overrides), check_disk=False)


CONFIGS = {"full": ("config.yaml",), "quick": ("config.yaml", "quick.yaml")}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def planned(request: pytest.FixtureRequest) -> tuple[dict, Layout, Plan]:
    cfg = config(*CONFIGS[request.param])
    layout = Layout.for_host(cfg["host"], cfg["results"])
    return cfg, layout, build(cfg, layout)


def test_every_job_is_planned_once_with_its_own_place_result_and_log(planned):
    _, layout, plan = planned
    assert plan.jobs
    assert len({job.key for job in plan.jobs}) == len(plan.jobs)
    assert sorted(job.priority for job in plan.jobs) == list(range(-len(plan.jobs), 0))
    results = [job.result for job in plan.jobs]
    logs = [job.log for job in plan.jobs]
    assert len(set(results)) == len(results) and len(set(logs)) == len(logs)
    assert all(Path(r).is_relative_to(layout.root / "raw") for r in results)
    assert all(Path(log).is_relative_to(layout.root / "logs") for log in logs)
    assert plan.root == str(layout.root)


def test_each_point_this_machine_can_run_has_one_job_per_round(planned):
    cfg, _, plan = planned
    for experiment in cfg["experiments"]:
        axes = experiments.get(experiment).axes
        runnable, _ = planning.split_grid(cfg, experiment)
        expected = {(experiment, tuple(str(p[a]) for a in axes), r) for p in runnable
                    for r in range(1, planning.rounds_of(cfg, experiment, p) + 1)}
        assert {job.key for job in plan.jobs if job.experiment == experiment} == expected


def test_claim_points_rounds_sit_in_claim_blocks_and_sweep_points_in_no_block(planned):
    cfg, _, plan = planned
    for job in plan.jobs:
        if job.claim and job.rounds > 1:
            members = plan.blocks[job.rule]
            assert (members.experiment, members.round) == (job.experiment, job.round)
            assert job.result in members.results
        elif not job.claim and int(cfg[job.experiment]["measure"].get("rounds") or 1) == 1:
            assert job.rule == job.experiment and job.rounds == 1
    for name, members in plan.blocks.items():
        jobs = sorted((j for j in plan.jobs if j.rule == name), key=lambda j: -j.priority)
        assert [j.result for j in jobs] == list(members.results)  # in the run's order
        assert members.priority == jobs[0].priority


def test_every_jobs_command_words_name_its_point_on_each_axis(planned):
    _, layout, plan = planned
    for job in plan.jobs:
        words = [*job.bench, *job.options]
        pairs = set(zip(words, words[1:], strict=False))
        for axis in experiments.get(job.experiment).axes:
            assert ("--point", f"{axis}={job.point[axis]}") in pairs, (job.key, axis)
        assert ("--lock", str(layout.bench_lock)) in pairs
        assert (("--round", str(job.round)) in pairs) == (plan.rounds[job.experiment] > 1)


def test_a_blocks_plan_reads_back_from_plan_json_as_perfgrid_block_reads_it(planned,
                                                                            tmp_path):
    _, _, plan = planned
    written = tmp_path / "plan.json"
    write(plan, written)
    data = json.loads(written.read_text())
    assert data == plan.to_json()
    assert Plan.from_json(data) == plan
    for name, members in plan.blocks.items():
        read = block.from_args(name, str(written))
        assert read == members == block.from_args(json.dumps(plan.block_plan(name)))
        assert [job.result for job in read.jobs] == list(members.results)
        assert {job.rule for job in read.jobs} == {name}
        # the block's command line carries it as one word: under Linux's 128 KiB a word
        assert len(shlex.quote(json.dumps(plan.block_plan(name), sort_keys=True))) < 131072


def test_the_full_plan_has_blocks_and_a_budget_that_cuts_nothing():
    cfg = config(*CONFIGS["full"])
    plan = build(cfg, Layout.for_host(cfg["host"], cfg["results"]))
    assert plan.blocks
    assert plan.budget == {"minutes": cfg["budget"]["minutes"]}
    assert "look" not in plan.to_json()["jobs"][0] and "looks" not in plan.to_json()


@pytest.mark.parametrize("overrides, key", [
    ({"syscall": {"measure": {"claims": {"rounds": 4, "looks": [2]}}}}, "looks"),
    ({"budget": {"minutes": 80, "keep_rounds": 3}}, "keep_rounds"),
])
def test_a_config_that_asks_for_looks_or_a_clock_cut_is_refused_naming_the_key(overrides,
                                                                               key):
    """Rounds are fixed before the run: no look at the claims, no cut by the clock."""
    with pytest.raises(ConfigError, match=key):
        config(*CONFIGS["full"], **overrides)


def test_the_quick_plan_is_a_smaller_plan_of_the_same_shape():
    plans = {}
    for name, files in CONFIGS.items():
        cfg = config(*files)
        plans[name] = build(cfg, Layout.for_host(cfg["host"], cfg["results"]))
    full, quick = plans["full"], plans["quick"]
    assert 0 < len(quick.jobs) < len(full.jobs)
    assert len(quick.blocks) <= len(full.blocks)
    assert set(quick.rounds) <= set(full.rounds)
    assert quick.to_json().keys() == full.to_json().keys()
    assert {k: type(v) for k, v in quick.to_json()["jobs"][0].items()} == {
        k: type(v) for k, v in full.to_json()["jobs"][0].items()}


def test_the_plan_is_a_function_of_the_config_and_its_blocks_digests_of_their_points():
    cfg = config(*CONFIGS["full"])
    layout = Layout.for_host(cfg["host"], cfg["results"])
    plan = build(cfg, layout)
    assert build(cfg, layout).digest() == plan.digest()

    def digests(other: Plan) -> dict[frozenset, str]:
        return {frozenset(b.results): glue.block_digest(b) for b in other.blocks.values()}

    reordered = build(config(*CONFIGS["full"], order={"seed": cfg["order"]["seed"] + 1}), layout)
    assert reordered.digest() != plan.digest()
    same = digests(plan).keys() & digests(reordered).keys()
    assert same and all(digests(plan)[k] == digests(reordered)[k] for k in same)
    noisier = build(config(*CONFIGS["full"], noise={"busy_share": 0.5}), layout)
    assert not set(digests(plan).values()) & set(digests(noisier).values())


class Wildcards(dict):
    """A benchmark job's wildcards as Snakemake gives them to a function."""


def wildcards_of(plan: Plan, job) -> Wildcards:
    out = Wildcards({axis: str(value) for axis, value in job.point.items()})
    if plan.rounds[job.experiment] > 1:
        out["round"] = str(job.round)
    return out


def test_the_rules_functions_agree_with_the_plan(planned):
    cfg, layout, plan = planned
    unplanned = dataclasses.replace(plan, jobs=())  # what the functions work out alone
    for experiment in cfg["experiments"]:
        by_grid = [layout.raw_result(j.experiment, j.point,
                                     round=j.round if plan.rounds[experiment] > 1 else None)
                   for j in planning.jobs(cfg) if j.experiment == experiment]
        assert plan.results(experiment) == by_grid
        pattern = glue.result_pattern(cfg, layout, experiment)
        logs = glue.log_pattern(cfg, layout, experiment)
        priority = glue.job_priority(plan, experiment)
        for job in (j for j in plan.jobs if j.experiment == experiment):
            wildcards = wildcards_of(plan, job)
            assert pattern.format(**wildcards) == job.result
            assert logs.format(**wildcards) == job.log
            assert priority(wildcards) == job.priority
        for job in [j for j in plan.jobs if j.experiment == experiment][:25]:
            wildcards = wildcards_of(plan, job)
            for made in (plan, unplanned):
                assert glue.bench_params(cfg, layout, made, experiment)(wildcards) == (
                    shlex.join(job.bench))
                assert glue.job_options(cfg, layout, made, experiment)(wildcards) == (
                    shlex.join(job.options))
        assert glue.job_priority(unplanned, experiment)(wildcards) == -1
    assert layout.plan in glue.all_outputs(cfg, layout)


def test_the_progress_line_counts_the_plans_jobs_and_its_budget(planned, tmp_path, monkeypatch):
    _, _, plan = planned
    monkeypatch.chdir(tmp_path)  # no result of the plan's there yet
    facts = progress.from_plan(json.loads(json.dumps(plan.to_json())), run_started=1000.0)
    assert facts["expected"] == [job.result for job in plan.jobs]
    minutes = plan.budget["minutes"]
    assert facts["budget_end"] == (None if minutes is None else 1000.0 + 60 * minutes)
    line = progress.eta_line(started=1000.0, now=1060.0, **facts)
    assert line.startswith(f"perfgrid: 0/{len(plan.jobs)} benchmark points done")


def _sections(finished: float) -> list[dict]:
    import pandas as pd

    return [{"name": "spawn", "table": pd.DataFrame({"finished": [finished - 5, finished]})}]


@pytest.mark.parametrize("ended_after, marked", [(81, True), (79, False)])
def test_the_report_marks_a_run_whose_benchmarks_ended_past_its_budget(tmp_path, ended_after,
                                                                        marked):
    from perfgrid.kit.atomic import write_json
    from perfgrid.publish.report import over_budget
    from perfgrid.publish.report.pages import _cut_words

    cfg = config(*CONFIGS["full"])
    layout = Layout(tmp_path / cfg["host"])
    write(build(cfg, layout), layout.plan)
    write_json(layout.run_record, {"started": 1000.0})
    found = over_budget(layout, _sections(1000.0 + 60 * ended_after))
    assert (found is not None) == marked
    if marked:
        assert found == {"minutes": pytest.approx(81), "budget": cfg["budget"]["minutes"]}
        words = _cut_words(0, found)
        assert "TOOK LONGER THAN ITS TIME BUDGET" in words and "81 min" in words
        assert "Nothing was cut" in words
    assert _cut_words(0, None) == ""
    (layout.run_record).unlink()  # a result set without run.json: no mark
    assert over_budget(layout, _sections(1e12)) is None


def test_the_report_counts_the_rounds_an_earlier_perfgrid_let_go(tmp_path):
    """A result set of an earlier perfgrid, whose looks or clock let rounds go, each a note
    where its result would be: the report still says the run was cut."""
    from perfgrid.kit.atomic import write_json
    from perfgrid.publish.report import let_go
    from perfgrid.publish.report.pages import _cut_words

    layout = Layout(tmp_path / "old")
    for round_ in (4, 5):
        write_json(layout.raw_dir("spawn") / "variant=x" / f"round={round_}.json",
                   {"perfgrid_not_measured": {"look": "budget", "why": "", "blocks": 3}})
    write_json(layout.raw_dir("spawn") / "variant=x" / "round=1.json", {"benchmarks": []})
    assert let_go(layout, "spawn") == 2 and let_go(layout, "timers") == 0
    assert _cut_words(2, None).startswith("THIS RUN WAS CUT: an earlier perfgrid let 2 point")
    # resumed by this perfgrid, the set stays format 1 (its notes are still counted) ...
    assert formats.for_run(layout.run_record, layout.raw_dir("")) == 1
    write_json(layout.run_record, {"started": 1.0})  # an earlier perfgrid's run.json
    assert formats.for_run(layout.run_record, layout.raw_dir("")) == 1
    write_json(layout.run_record, {"started": 1.0, "format": 1})
    assert let_go(layout, "spawn") == 2
    # ... and a set this perfgrid began is format 2: its rounds are never looked at for notes
    fresh = Layout(tmp_path / "new")
    assert formats.for_run(fresh.run_record, fresh.raw_dir("")) == formats.FORMAT == 2
    write_json(fresh.run_record, {"started": 1.0, "format": 2})
    write_json(fresh.raw_dir("spawn") / "variant=x" / "round=4.json",
               {"perfgrid_not_measured": {"look": "budget", "why": "", "blocks": 3}})
    assert let_go(fresh, "spawn") == 0
    assert formats.for_run(fresh.run_record, fresh.raw_dir("")) == 2


@pytest.mark.parametrize("written, why", [
    (3, "format: 3 is not a result format this perfgrid reads; allowed: 1 to 2"),
    ("2", "format: '2' is not a result format this perfgrid reads; allowed: 1 to 2"),
    (True, "format: True is not"),
])
def test_a_format_this_perfgrid_cannot_read_is_refused_naming_the_key(written, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        formats.of({"format": written})
    assert formats.of({}) == 1 and formats.of({"format": 2}) == 2


def test_plan_json_says_its_format_and_an_earlier_plan_reads_without_noise_pairs(tmp_path):
    cfg = config(*CONFIGS["full"])
    layout = Layout(tmp_path / cfg["host"])
    write(build(cfg, layout), layout.plan)
    data = json.loads(layout.plan.read_text())
    assert data["format"] == formats.FORMAT and data["noise"]["pairs"]
    assert Plan.from_json(data).noise
    earlier = {k: v for k, v in data.items() if k not in ("format", "noise")}
    old = Plan.from_json(earlier)
    assert old.noise == {} and old.jobs == Plan.from_json(data).jobs


def test_a_block_runs_its_jobs_in_order_with_the_harness_words_and_stops_at_a_failure(
        monkeypatch, capsys):
    cfg = config(*CONFIGS["full"])
    plan = build(cfg, Layout.for_host(cfg["host"], cfg["results"]))
    members = next(iter(plan.blocks.values()))
    ran = []
    monkeypatch.setattr(block, "measure", lambda job: ran.append(job) or 0)
    block.run(block.from_args(json.dumps(plan.block_plan(members.name))))
    assert ran == list(members.jobs) and ran[0].args == [*ran[0].bench, *ran[0].options]
    assert f"1/{len(ran)} {ran[0].point_key}" in capsys.readouterr().out
    ran.clear()
    monkeypatch.setattr(block, "measure", lambda job: ran.append(job) or 3)
    with pytest.raises(SystemExit, match="exit status 3"):
        block.run(members)
    assert ran == [members.jobs[0]]
