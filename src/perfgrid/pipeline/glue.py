"""What the rule files ask while Snakemake parses the workflow: each rule's input, output,
params and resources, from the effective config (perfgrid.pipeline.settings), the result set's
paths (perfgrid.kit.paths.Layout) and the run's plan (perfgrid.design.plan), each passed in.

workflow/rules/common.smk keeps only what needs Snakemake itself (the config's check as a
WorkflowError, the environment, onstart and the other handlers, ``ancient``); the rule
files call these functions, and tests can too.

The benchmark jobs (rules/benchmark.smk) are the same rules for every experiment in the
registry: what a job needs beyond the harness (a test file, a C program, Erlang modules,
options from its config section) its experiment declares, and perfgrid.design.jobs asks it. A
point measured in one round (a sweep point, and a claim point where claims have one
round) is a job of the rule named after its experiment, which makes one result file a
point (a round file where the experiment has rounds). The rounds of a claim point are
jobs of claim blocks (perfgrid.measure.block, rule ``<experiment>_round_<r>``), a few dozen
block jobs rather than hundreds of point jobs: a block's outputs are its points' results,
which the experiment's rule could also make, so the block's rule comes first (ruleorder)
and the experiment's rule is held to round 1 where only claim points have rounds
(:func:`sweep_rounds`). A block takes the threads of its experiment's rule, as
``--set-threads`` left them, so one ``--set-threads`` per experiment sizes every job.

A claim block gets its part of the plan (``Plan.block_plan``) on its command line
(:func:`block_params`), and Snakemake records and compares only a digest of its points'
command words (:func:`block_digest`), so it reruns the block when they change, not when
the order inside the block does. plan.json is no input of any
benchmark job: Snakemake (9.27, ``DAG.update_needrun``) does not check the params, input
set or code of a job downstream of one that must rerun, and then skips a dependency that
is only an ``ancient`` input, so a block taking plan.json as an ancient input would not
rerun when its points' words changed together with the plan.

A benchmark job that fails runs once more (``BENCH_RETRIES``): a fork refused once, one
time in hundreds of runs, would otherwise stop a long run. On a cluster
(profiles/slurm) each job gets a whole node (``--exclusive``) with its threads as CPUs,
and the memory its experiment asks for (:func:`job_memory`) or the profile's default; a
local run ignores the ``slurm_*`` and ``cpus_per_task`` resources.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from typing import Any

from perfgrid import experiments
from perfgrid.design import jobs, planning
from perfgrid.design.codeinputs import code_inputs
from perfgrid.design.model import Block, Job, Plan, noise_to_json, short_digest
from perfgrid.design.plan import bench_words, option_words
from perfgrid.experiments.base import Experiment, Point
from perfgrid.kit import binding
from perfgrid.kit.paths import Layout
from perfgrid.measure import fixtures

Config = dict[str, Any]

#: wildcard constraints shared by every rule; each experiment's own axes: axis_constraints
WILDCARD_CONSTRAINTS = {
    "experiment": "|".join(experiments.available()),
    "variant": "[a-z_]+",
    "binding": "|".join(binding.BINDINGS),
    "workers": r"\d+",
    "round": r"\d+",
}


def fixture_args(flag: str, kinds: list[fixtures.Fixture], path: Callable[[Any], str]) -> str:
    """``FLAG NAME=PATH`` for each fixture of ``kinds``, quoted for the shell."""
    return " ".join(f"{flag} {shlex.quote(f'{f.name}={path(f)}')}" for f in kinds)


def fixture_record(cfg: Config, layout: Layout, fixture: fixtures.Fixture) -> str:
    """A fixture rule's ``--record PATH`` where its file is at its default path, so that
    perfgrid removes the file it generated there in this run (and only such a file)."""
    path = cfg[fixture.name]["path"]
    if os.path.abspath(path) != os.path.abspath(layout.fixture_default(fixture.file_name)):
        return ""
    return f"--record {shlex.quote(str(layout.fixture_record(fixture.name)))}"


def largest_workers(cfg: Config) -> int:
    """The grid's largest worker count: the CPUs a benchmark job asks SLURM for where
    Snakemake was given no ``--cores`` (a cluster run, ``--lint``, a dry run)."""
    return max((int(p.get("workers", 1)) for e in cfg["experiments"]
                for p in planning.grid(cfg, e)), default=1)


def all_outputs(cfg: Config, layout: Layout) -> list[Any]:
    """Rule all's inputs: the plan, the report, the config as used, and each experiment's
    table and plots."""
    out = [layout.plan, layout.report_html, layout.report_md, layout.used_config]
    for experiment in cfg["experiments"]:
        out += [layout.table(experiment), layout.plot_dir(experiment)]
    return out


# --- a sweep rule's job (rules/benchmark.smk) ---------------------------------------------


def result_pattern(cfg: Config, layout: Layout, experiment: str) -> str:
    """A benchmark rule's output: one file per point (per round when measured in rounds)."""
    axes = experiments.get(experiment).axes
    return layout.raw_pattern(experiment, axes, planning.rounds_of(cfg, experiment))


def log_pattern(cfg: Config, layout: Layout, experiment: str) -> str:
    """A benchmark rule's log, beside its result under logs/."""
    axes = experiments.get(experiment).axes
    return layout.log_pattern(experiment, axes, planning.rounds_of(cfg, experiment))


def job_point(experiment: str, wildcards: Any) -> Point:
    """The typed grid point of a benchmark job's wildcards."""
    exp = experiments.get(experiment)
    return exp.parse_point({a: wildcards[a] for a in exp.axes})


def _planned(plan: Plan, experiment: str, wildcards: Any) -> Job | None:
    """The plan's job of a benchmark rule's wildcards (None for a point it does not hold)."""
    axes = experiments.get(experiment).axes
    return plan.job((experiment, tuple(wildcards[a] for a in axes),
                     int(wildcards.get("round", 1))))


def job_priority(plan: Plan, experiment: str) -> Callable[[Any], int]:
    """Priority function: the job's place in the run's order (the plan's), first highest;
    a job the plan does not hold comes after every planned one."""

    def priority(wildcards: Any) -> int:
        job = _planned(plan, experiment, wildcards)
        return -1 - len(plan.jobs) if job is None else job.priority

    return priority


def after_benchmarks(plan: Plan) -> int:
    """The priority of the jobs that read results and measure nothing (tables, plots, the
    report): below every benchmark job's (:func:`job_priority`), so they wait for the last
    measurement and then run side by side on the cores it leaves. A benchmark job takes
    every core, so none ever runs beside one; ahead of them, each ran alone between two
    measurements (six plots of the quick run one after another, ~35 s on 2 CPUs)."""
    return -2 - len(plan.jobs)


def bench_params(cfg: Config, layout: Layout, plan: Plan, experiment: str) -> Callable:
    """Params function: the harness's own words for one job's wildcards, quoted (the plan's,
    else worked out for a point it does not hold)."""

    @jobs.signature_once
    def args(wildcards: Any) -> str:
        job = _planned(plan, experiment, wildcards)
        if job is not None:
            return shlex.join(job.bench)
        text = {a: wildcards[a] for a in experiments.get(experiment).axes}
        return shlex.join(bench_words(cfg, layout, experiment, job_point(experiment, wildcards),
                                      wildcards.get("round"), text))

    return args


def job_options(cfg: Config, layout: Layout, plan: Plan, experiment: str) -> Callable:
    """Params function: the job's ``--option KEY=VALUE`` words, quoted."""

    @jobs.signature_once
    def words(wildcards: Any) -> str:
        job = _planned(plan, experiment, wildcards)
        if job is not None:
            return shlex.join(job.options)
        return shlex.join(option_words(cfg, layout, experiment, job_point(experiment, wildcards)))

    return words


def job_inputs(cfg: Config, layout: Layout, src: str, experiment: str) -> Callable:
    """Input function (unpack): the job's declared files, code, C program and Erlang modules."""

    @jobs.signature_once
    def named(wildcards: Any) -> dict[str, list[str]]:
        exp = experiments.get(experiment)
        return jobs.inputs(exp, job_point(experiment, wildcards), cfg, layout, src)

    return named


def job_memory(cfg: Config, experiment: str) -> dict[str, int]:
    """A benchmark rule's ``mem_mb``, where its experiment asks for memory: none otherwise,
    since a rule's resource that comes out None drops the profile's default-resources one."""
    mem_mb = experiments.get(experiment).job_mem_mb(cfg)
    return {} if mem_mb is None else {"mem_mb": mem_mb}


def sweep_rounds(cfg: Config, experiment: str) -> dict[str, str]:
    """The experiment rule's ``round`` constraint: where only claim points have rounds
    (``measure.rounds`` 1), the rule makes round 1 of the points measured once and the
    claim blocks every round of the others, so a later round's result has one rule that
    can make it (Snakemake sets up a job of every rule that could, which for ~3,000 claim
    results doubled an up-to-date dry run)."""
    if planning.rounds_of(cfg, experiment) < 2:
        return {}
    return {"round": "1"} if int(cfg[experiment]["measure"].get("rounds") or 1) < 2 else {}


def axis_constraints(experiment: str) -> dict[str, str]:
    """Wildcard constraints of a benchmark rule: those its experiment declares
    (``axis_patterns``), else whole numbers for integer axes and no ``/`` in any other
    value (axes with a workflow-wide constraint keep that one)."""
    exp = experiments.get(experiment)
    return {a: exp.axis_patterns.get(a) or (r"\d+" if a in exp.int_axes else "[^/]+")
            for a in exp.axes if a not in WILDCARD_CONSTRAINTS}


# --- claim blocks (rules/benchmark.smk, perfgrid.measure.block) -----------------------------------


def block_inputs(cfg: Config, layout: Layout, plan: Plan, src: str,
                 name: str) -> dict[str, list[str]]:
    """What claim block ``name`` needs besides the plan: what a job of each of its points
    would need, and its code."""
    members = plan.blocks[name]
    exp = experiments.get(members.experiment)
    by_result = {job.result: job for job in plan.jobs if job.rule == name}
    points = [by_result[result].point for result in members.results]
    out = jobs.merged_inputs(((exp, point) for point in points), cfg, layout, src)
    out["code"] = code_inputs(src, "perfgrid.measure.block")
    return out


def digest_and_unrecorded(digest: str, **values: Any) -> dict[str, Any]:
    """Params that rerun a job when ``digest`` changes and nothing else does: ``digest``,
    which Snakemake records and compares, and each of ``values`` by its name as quoted
    JSON for the command line, a function of the output, which Snakemake neither records
    nor compares."""
    texts = {name: shlex.quote(json.dumps(value, sort_keys=True))
             for name, value in values.items()}
    return {"digest": digest, **{name: (lambda wildcards, output, text=text: text)
                                 for name, text in texts.items()}}


def block_params(plan: Plan, name: str) -> dict[str, Any]:
    """Claim block ``name``'s params (:func:`digest_and_unrecorded`): its digest
    (:func:`block_digest`) and ``plan``, the block's part of the plan for its command line
    (``Plan.block_plan``, perfgrid.measure.block): recorded, it would be stored once per
    result file, some kilobytes for each of a block's jobs."""
    return digest_and_unrecorded(block_digest(plan.blocks[name]), plan=plan.block_plan(name))


def block_digest(block: Block) -> str:
    """A claim block's params digest, which Snakemake records and compares: it changes with
    any job's point, command words, result or log, not with the order inside the block."""
    parts = sorted(json.dumps({"key": job.point_key, "args": job.args, "result": job.result,
                               "log": job.log}, sort_keys=True) for job in block.jobs)
    return short_digest("\n".join(parts))


# --- the noise profile (rules/noise.smk, perfgrid.pipeline.noiseprofile) ----------------


def noise_points(plan: Plan) -> list[tuple[Experiment, Point]]:
    """The points of the plan's noise pairs (those this machine can run)."""
    return [(experiments.get(side.experiment), side.point)
            for pair in plan.noise.values() for side in (pair.a, pair.b)]


def noise_inputs(cfg: Config, layout: Layout, plan: Plan, src: str) -> dict[str, list[str]]:
    """The noise profile's inputs besides the config as used: its code and what a benchmark
    job of each of its points needs (its files, code and C program)."""
    return {"code": code_inputs(src, "perfgrid.pipeline.cli:_noise"),
            **jobs.merged_inputs(noise_points(plan), cfg, layout, src)}


def noise_params(plan: Plan, raw_config: dict[str, Any]) -> dict[str, Any]:
    """The noise profile's params (:func:`digest_and_unrecorded`): a digest of the plan's
    noise entry (its pairs' points and command words, and the pairs skipped), so that the
    profile reruns when what it measures changes and not on a config edit elsewhere;
    ``pairs``, that entry for its command line; and ``config``, the run's config, which
    says where the pairs' files are. (An ``ancient`` config file as input would not do:
    when the config file must be written again, Snakemake 9.27 checks no params of a job
    below it.)"""
    entry = noise_to_json(plan.noise, plan.noise_skipped)
    digest = short_digest(json.dumps(entry, sort_keys=True))
    return digest_and_unrecorded(digest, pairs=entry, config=raw_config)


def noise_memory(cfg: Config, plan: Plan) -> dict[str, int]:
    """The noise profile's ``mem_mb``: the most its points' experiments ask for, if any."""
    asked = [m for m in (exp.job_mem_mb(cfg) for exp, _ in noise_points(plan)) if m is not None]
    return {"mem_mb": max(asked)} if asked else {}


def start_run(cfg: Config, layout: Layout, plan: Plan, argv: list[str], quiet: bool) -> None:
    """At the start of a run (onstart): write run.json, whose ``started`` the report's note
    on the time budget counts from, and start the progress line (perfgrid.pipeline.progress)."""
    import time

    from snakemake import __version__ as snakemake_version

    from perfgrid.analyse import ledger
    from perfgrid.design.plan import design_digest
    from perfgrid.kit import formats
    from perfgrid.kit.atomic import write_json
    from perfgrid.pipeline.progress import start_reporter
    from perfgrid.publish import gitinfo

    started = time.time()
    plan_data = plan.to_json()
    # the result set's format: this perfgrid's, or an earlier one whose files it holds
    written = formats.for_run(layout.run_record, layout.raw_dir(""))  # raw/: every experiment's
    # the rules the verdicts are judged by and what the run measures, fixed at its start
    write_json(layout.run_record, {"argv": argv, "started": started, "cwd": os.getcwd(),
                                   "snakemake": snakemake_version, "order": cfg["order"],
                                   "job_rate_limiter_stopped": quiet,
                                   "commit": gitinfo.facts().get("commit", ""),
                                   "ledger": ledger.digest(),
                                   "design": design_digest(plan_data),
                                   "format": written})
    start_reporter(plan_data, started)
