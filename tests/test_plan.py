"""The run's plan (perfgrid.plan), built from the shipped configs without Snakemake: every
job once and in one order, its command words, result and rule, the claim blocks as
perfgrid.block reads them, and the rules' functions (perfgrid.glue) in step with it."""

from __future__ import annotations

import copy
import dataclasses
import json
import shlex
from pathlib import Path

import pytest
import yaml

from perfgrid import block, experiments, glue, looks, planning, progress, settings
from perfgrid.paths import Layout
from perfgrid.plan import Plan, build, write

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
        assert {j.look for j in jobs} == {members.look}


def test_every_jobs_command_words_name_its_point_on_each_axis(planned):
    _, layout, plan = planned
    for job in plan.jobs:
        pairs = set(zip(job.args, job.args[1:], strict=False))
        for axis in experiments.get(job.experiment).axes:
            assert ("--point", f"{axis}={job.point[axis]}") in pairs, (job.key, axis)
        assert ("--lock", str(layout.bench_lock)) in pairs
        assert (("--round", str(job.round)) in pairs) == (plan.rounds[job.experiment] > 1)


def test_a_blocks_plan_reads_back_from_plan_json_as_perfgrid_block_reads_it(planned):
    _, _, plan = planned
    data = json.loads(json.dumps(plan.to_json()))
    assert data == plan.to_json()
    for name, members in plan.blocks.items():
        read = block.from_plan(data, name)
        assert read == plan.block_plan(name)
        assert [p["result"] for p in read["points"]] == list(members.results)
        assert read["budget"] == plan.budget and read["round"] == members.round


def test_the_full_plan_has_blocks_and_its_later_rounds_run_last():
    cfg = config(*CONFIGS["full"])
    plan = build(cfg, Layout.for_host(cfg["host"], cfg["results"]))
    assert plan.blocks
    if plan.budget["minutes"] is not None:  # the rounds it may let go run last
        keep = plan.budget["keep_rounds"]
        late = [job.priority for job in plan.jobs if job.round > keep]
        early = [job.priority for job in plan.jobs if job.round <= keep]
        assert not late or max(late) < min(early)


def test_the_rounds_after_a_look_wait_for_it():
    cfg = config(*CONFIGS["full"], syscall={"measure": {"claims": {"rounds": 4, "looks": [2]}}})
    layout = Layout.for_host(cfg["host"], cfg["results"])
    plan = build(cfg, layout)
    assert plan.looks["syscall"] == (2, 4)
    look = str(layout.look("syscall", 2))
    claimed = [j for j in plan.jobs if j.experiment == "syscall" and j.claim and j.rounds > 1]
    assert claimed and {j.look for j in claimed if j.round > 2} == {look}
    assert {j.look for j in claimed if j.round <= 2} == {None}
    assert {b.look for b in plan.blocks.values() if b.experiment == "syscall"
            and b.round > 2} == {look}
    found = glue.look_inputs(plan, layout, "src/perfgrid", "syscall", 2)
    assert found["results"] == [j.result for j in claimed if j.round <= 2]
    assert found["previous"] == []
    assert glue.look_params(plan, layout, "syscall", 2) == "--looks 2 --cap 4 --at 1"


def test_the_quick_plan_is_a_smaller_plan_of_the_same_shape():
    plans = {}
    for name, files in CONFIGS.items():
        cfg = config(*files)
        plans[name] = build(cfg, Layout.for_host(cfg["host"], cfg["results"]))
    full, quick = plans["full"], plans["quick"]
    assert 0 < len(quick.jobs) < len(full.jobs)
    assert len(quick.blocks) <= len(full.blocks)
    assert set(quick.looks) <= set(full.looks)
    assert quick.to_json().keys() == full.to_json().keys()
    assert {k: type(v) for k, v in quick.to_json()["jobs"][0].items()} == {
        k: type(v) for k, v in full.to_json()["jobs"][0].items()}


def test_the_plan_is_a_function_of_the_config_and_its_blocks_digests_of_their_points():
    cfg = config(*CONFIGS["full"])
    layout = Layout.for_host(cfg["host"], cfg["results"])
    plan = build(cfg, layout)
    assert build(cfg, layout).digest() == plan.digest()

    def digests(other: Plan) -> dict[frozenset, str]:
        return {frozenset(b.results): glue.block_digest(other.block_plan(name))
                for name, b in other.blocks.items()}

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
    for experiment, schedule in plan.looks.items():
        for n in schedule[:-1]:
            found = glue.look_inputs(plan, layout, "src/perfgrid", experiment, n)["results"]
            assert found and set(found) <= {j.result for j in plan.jobs if j.round <= n}
    assert layout.plan in glue.all_outputs(cfg, layout)


def test_the_progress_line_counts_the_plans_jobs_and_its_budget(planned, tmp_path, monkeypatch):
    _, _, plan = planned
    monkeypatch.chdir(tmp_path)  # no result of the plan's there yet
    facts = progress.from_plan(json.loads(json.dumps(plan.to_json())), run_started=1000.0)
    assert facts["expected"] == [job.result for job in plan.jobs]
    assert facts["at_most"] == any(len(s) > 1 for s in plan.looks.values())
    minutes = plan.budget["minutes"]
    assert facts["budget"] == (None if minutes is None
                               else (1000.0 + 60 * minutes, plan.budget["keep_rounds"]))
    line = progress.eta_line(started=1000.0, now=1060.0, **facts)
    assert line.startswith(f"perfgrid: 0{' of at most ' if facts['at_most'] else '/'}"
                           f"{len(plan.jobs)} benchmark points done")


def test_the_report_counts_the_rounds_the_budget_let_go_among_the_plans_blocks(tmp_path):
    from perfgrid.report import budget_notes

    cfg = config(*CONFIGS["full"])
    layout = Layout(tmp_path / cfg["host"])
    planned = build(cfg, layout)
    write(planned, layout.plan, layout.log("plan.log"))
    experiment = next(iter(planned.blocks.values())).experiment
    late = [j for j in planned.jobs if j.experiment == experiment and j.rule != experiment
            and j.round == planned.rounds[experiment]]
    for job, look in ((late[0], looks.BUDGET), (late[1], looks.BUDGET), (late[2], "a look")):
        looks.write_not_measured(job.result, look, {"why": "", "blocks": job.round - 1})
    stray = layout.raw_dir(experiment) / "not=planned" / "round=9.json"  # in no plan
    looks.write_not_measured(stray, looks.BUDGET, {"why": "", "blocks": 1})
    [line] = budget_notes(layout, experiment)
    assert "before 2 point rounds" in line and f"from round {late[0].round} on" in line
