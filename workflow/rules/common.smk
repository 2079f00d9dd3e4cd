# Validation, the effective config, grid expansion and input functions; no rules.
import functools
import gc
import json
import os
import shlex
import sys
import time

from perfgrid import (
    binding,
    block,
    codeinputs,
    config_errors,
    experiments,
    fixtures,
    jobargs,
    jobs,
    looks,
    noiseprofile,
    order,
    planning,
    settings,
)
from perfgrid.paths import Layout

# Snakemake's process holds some 130,000 objects by now (its modules, pandas, numpy),
# nearly all kept for the whole run, and Python's cyclic collector scanned them again
# and again while the workflow was parsed and its ~1,000 jobs planned: about 0.5 s of
# an up-to-date dry run. Frozen, later collections look only at objects made from here on.
gc.freeze()

# The config checked (perfgrid.settings.validated): its size, then the schema
# perfgrid.configschema assembles (the shared workflow/schemas/config.schema.yaml, each
# fixture's section, as the test file's src/perfgrid/testfile.schema.yaml, and each
# experiment's schema.yaml in its package; defaults filled in), then what the schema
# cannot express: one short message naming the key, before any job, and nothing written.
try:
    # workers: auto counts the CPUs where the workflow is parsed; a cluster job parses it
    # again on its node, so the count (and what set it) goes with it (envvars) and every
    # job sees one grid
    settings.export_auto_cpus(os.environ)
    SETTINGS = settings.validated(config)
except config_errors.ConfigError as err:
    raise WorkflowError(config_errors.brief(f"invalid config: {err}")) from None

envvars:
    "PATH",
    settings.AUTO_CPUS_ENV,
    settings.AUTO_CPUS_SOURCE_ENV,


# Jobs run `python` and import perfgrid from this checkout: the interpreter
# running Snakemake comes first on PATH (its venv), src/ on PYTHONPATH.
os.environ.update(
    PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)]),
    PYTHONPATH=os.pathsep.join(
        filter(None, [os.path.join(workflow.basedir, "src"), os.environ.get("PYTHONPATH")])
    ),
)
CONDA_ENV = "../envs/perfgrid.yaml"
LAYOUT = Layout.for_host(SETTINGS["host"], SETTINGS["results"])
# the input files made before the jobs of the experiments that declare them (the test
# file); every kind's path is settled, machine.json records its file system
FIXTURES = fixtures.all_kinds()
NEEDED_FIXTURES = fixtures.needed(SETTINGS)


def fixture_args(flag, kinds, path):
    """``FLAG NAME=PATH`` for each fixture of ``kinds``, quoted for the shell."""
    return " ".join(f"{flag} {shlex.quote(f'{f.name}={path(f)}')}" for f in kinds)


STARTED = time.time()
try:  # benchmark jobs take every core, so nothing runs beside them
    BENCH_THREADS = workflow.cores
except WorkflowError:  # no --cores: a cluster run (profiles/slurm), --report, --lint, dry runs
    # the grid's largest worker count: the CPUs a benchmark job asks SLURM for
    BENCH_THREADS = max(
        (int(p.get("workers", 1)) for e in SETTINGS["experiments"]
         for p in planning.grid(SETTINGS, e)),
        default=1,
    )
# a failed benchmark job runs this many more times before it stops the run
BENCH_RETRIES = 1
SRC = os.path.relpath(os.path.join(workflow.basedir, "src", "perfgrid"))


def code(*roots):
    """A job's code inputs: the files of this tree's perfgrid (SRC) that ``roots``, the
    modules it runs (``module`` or ``module:function``), import (perfgrid.codeinputs)."""
    return codeinputs.code_inputs(SRC, *roots)


# every benchmark job in the order it should run; Snakemake runs the highest priority first
JOBS = planning.jobs(SETTINGS)
# with a time budget, the rounds it may let go (after keep_rounds) run last
ORDER = order.planned(JOBS, SETTINGS["order"]["shuffle"], SETTINGS["order"]["seed"],
                      block=planning.claim_block(SETTINGS), group=planning.claim_group,
                      late_after=(SETTINGS["budget"]["keep_rounds"]
                                  if SETTINGS["budget"]["minutes"] is not None else None))
PRIORITY = order.priorities(ORDER, {e: experiments.get(e).axes for e in SETTINGS["experiments"]})


onstart:
    from perfgrid.atomic import write_json
    from snakemake import __version__ as snakemake_version

    from perfgrid import noise, runlock
    from perfgrid.progress import start_reporter

    # one run at a time on a result set, whichever working directory it runs from (first:
    # a second run must not even write run.json); onstart is skipped by dry runs
    try:
        runlock.acquire(LAYOUT.run_lock, sys.argv)
    except runlock.Held as err:
        raise WorkflowError(str(err)) from None
    # Snakemake's rate limiter would wake it ever more often beside the measurement
    quiet = workflow.local_exec and noise.quiet_scheduler(workflow.scheduler)
    run_started = time.time()  # the time budget counts from here (perfgrid.block)
    write_json(LAYOUT.run_record, {"argv": sys.argv, "started": run_started,
                                   "cwd": os.getcwd(), "snakemake": snakemake_version,
                                   "order": SETTINGS["order"],
                                   "job_rate_limiter_stopped": quiet})
    budget_end = block.budget_end(run_started, SETTINGS["budget"])
    start_reporter([r for e in SETTINGS["experiments"] for r in runnable(e)],
                   at_most=any(looks.looks_of(SETTINGS, e) > 1 for e in SETTINGS["experiments"]),
                   budget=None if budget_end is None else (
                       budget_end, SETTINGS["budget"]["keep_rounds"]))


onsuccess:
    from perfgrid import runlock

    # perfgrid removes only a fixture's file it generated at the default path in this run
    # (its rule notes the file's identity); any other file stays
    for fixture in FIXTURES:
        fixture.remove_generated(LAYOUT.fixture_record(fixture.name), since=STARTED)
    runlock.release(LAYOUT.run_lock)


onerror:
    from perfgrid import runlock

    runlock.release(LAYOUT.run_lock)


# names shared by every rule; each experiment's own axes: axis_constraints below
WILDCARD_CONSTRAINTS = {
    "experiment": "|".join(experiments.available()),
    "variant": "[a-z_]+",
    "binding": "|".join(binding.BINDINGS),
    "workers": r"\d+",
    "round": r"\d+",
}


wildcard_constraints:
    **WILDCARD_CONSTRAINTS,


@functools.cache
def runnable(experiment):
    """Result files of the grid points this machine can run (one per round); worked out
    once, since Snakemake asks for each experiment's table inputs more than once."""
    rounds = planning.rounds_of(SETTINGS, experiment)
    return tuple(LAYOUT.raw_result(job.experiment, job.point,
                                   round=job.round if rounds > 1 else None)
                 for job in JOBS if job.experiment == experiment)


def result_pattern(experiment):
    """A benchmark rule's output: one file per point (per round when measured in rounds)."""
    exp = experiments.get(experiment)
    return LAYOUT.raw_pattern(experiment, exp.axes, planning.rounds_of(SETTINGS, experiment))


def log_pattern(experiment):
    """A benchmark rule's log, beside its result under logs/."""
    exp = experiments.get(experiment)
    return LAYOUT.log_pattern(experiment, exp.axes, planning.rounds_of(SETTINGS, experiment))


def job_priority(experiment):
    """Priority function: the job's place in the run's order (perfgrid.order), first highest."""
    axes = experiments.get(experiment).axes

    def priority(wildcards):
        key = (experiment, tuple(wildcards[a] for a in axes), int(wildcards.get("round", 1)))
        return PRIORITY.get(key, -1 - len(PRIORITY))

    return priority


def bench_words(experiment, point, round_=None, text=None):
    """The pyperf harness's own arguments for one point (and round): its axes (``text``:
    as the job's wildcards spell them; else as its result path does), its repetitions,
    the lock and the noise limits (perfgrid.bench)."""
    exp = experiments.get(experiment)
    words = []
    for axis in exp.axes:
        words += ["--point", f"{axis}={(text or point)[axis]}"]
    words += planning.measure_args(SETTINGS, experiment, point)
    words += ["--lock", str(LAYOUT.bench_lock)]
    words += ["--busy-share", str(SETTINGS["noise"]["busy_share"])]
    words += ["--steal-share", str(SETTINGS["noise"]["steal_share"]), "--verbose"]
    if round_ is not None:
        words += ["--round", str(round_)]
    return words


def bench_params(experiment):
    """Command-line arguments of the pyperf harness for one job's wildcards."""

    @jobs.signature_once
    def args(wildcards):
        point = job_point(experiment, wildcards)
        text = {a: wildcards[a] for a in experiments.get(experiment).axes}
        return shlex.join(bench_words(experiment, point, wildcards.get("round"), text))

    return args


def all_outputs():
    out = [LAYOUT.report_html, LAYOUT.report_md, LAYOUT.used_config]
    for experiment in SETTINGS["experiments"]:
        out.append(LAYOUT.table(experiment))
        out.append(LAYOUT.plot_dir(experiment))
    return out


# --- a benchmark job's inputs and options, asked of its experiment (perfgrid.jobs) --------


def job_point(experiment, wildcards):
    """The typed grid point of a benchmark job's wildcards."""
    exp = experiments.get(experiment)
    return exp.parse_point({a: wildcards[a] for a in exp.axes})


def job_inputs(experiment):
    """Input function (unpack): the job's declared files, code, C program and Erlang modules."""

    @jobs.signature_once
    def named(wildcards):
        exp = experiments.get(experiment)
        point = job_point(experiment, wildcards)
        return jobs.inputs(exp, point, SETTINGS, LAYOUT, SRC)

    return named


def job_options(experiment):
    """Params function: the job's ``--option KEY=VALUE`` words."""

    @jobs.signature_once
    def words(wildcards):
        exp = experiments.get(experiment)
        return shlex.join(jobargs.option_words(
            jobs.options(exp, job_point(experiment, wildcards), SETTINGS, LAYOUT)))

    return words


def granted_threads(wildcards, threads):
    """Resource function: a benchmark job's threads, as the CPUs it asks SLURM for."""
    return threads


def job_memory(experiment):
    """A benchmark rule's ``mem_mb``, where its experiment asks for memory: none otherwise,
    since a rule's resource that comes out None drops the profile's default-resources one."""
    mem_mb = experiments.get(experiment).job_mem_mb(SETTINGS)
    return {} if mem_mb is None else {"mem_mb": mem_mb}


def sweep_rounds(experiment):
    """The experiment rule's ``round`` constraint: where only claim points have rounds
    (``measure.rounds`` 1), the rule makes round 1 of the points measured once, and the
    claim blocks every round of the others. So a later round's result has one rule that
    can make it: Snakemake sets up a job of every rule that could (ruleorder picks one
    after), which for ~3,000 claim results doubled an up-to-date dry run."""
    if planning.rounds_of(SETTINGS, experiment) < 2:
        return {}
    measure = SETTINGS[experiment]["measure"]
    return {"round": "1"} if int(measure.get("rounds") or 1) < 2 else {}


def axis_constraints(experiment):
    """Wildcard constraints of a benchmark rule: those its experiment declares
    (``axis_patterns``), else whole numbers for integer axes and no ``/`` in any other
    value (axes with a workflow-wide constraint keep that one)."""
    exp = experiments.get(experiment)
    return {a: exp.axis_patterns.get(a) or (r"\d+" if a in exp.int_axes else "[^/]+")
            for a in exp.axes if a not in WILDCARD_CONSTRAINTS}


# --- the noise profile (rules/noise.smk) ---------------------------------------------------
NOISE_BLOCKS = SETTINGS["noise"]["profile"]["blocks"]
# the noise pairs (perfgrid.noiseprofile) of this run's experiments that this machine can run
NOISE_PAIRS = [(exp, point) for exp, pair in noiseprofile.declared()
               if exp.name in SETTINGS["experiments"]
               and not any(exp.unavailable(p) for p in (pair.a, pair.b))
               for point in (pair.a, pair.b)]


def noise_inputs(wildcards):
    """Input function (unpack) of the noise profile: the config as used (ancient: a config
    edit elsewhere does not rerun it), its code, and what a benchmark job of each of its
    points needs (its files, code and C program)."""
    return {"config": ancient(str(LAYOUT.used_config)), "code": code("perfgrid.cli:_noise"),
            **jobs.merged_inputs(NOISE_PAIRS, SETTINGS, LAYOUT, SRC)}


def noise_memory():
    """The noise profile's ``mem_mb``: the most its points' experiments ask for, if any."""
    asked = [m for m in (exp.job_mem_mb(SETTINGS) for exp, _ in NOISE_PAIRS) if m is not None]
    return {"mem_mb": max(asked)} if asked else {}


# --- claim blocks (rules/benchmark.smk, perfgrid.block) -----------------------------------
# one Snakemake job per round of an experiment's claim points, as the order placed them
CLAIM_BLOCKS = planning.claim_blocks(SETTINGS, ORDER)


def block_priority(block):
    """A claim block's Snakemake priority: its first point's place in the run's order."""
    first = block.jobs[0]
    return PRIORITY[first.key(experiments.get(block.experiment).axes)]


def block_inputs(block, plan):
    """What a claim block needs (unpack): what a job of each of its points would need, and
    the record of the look its round waits for (its ``plan``'s), if any."""
    exp = experiments.get(block.experiment)
    out = jobs.merged_inputs(((exp, job.point) for job in block.jobs), SETTINGS, LAYOUT, SRC)
    out["code"] = code("perfgrid.block")
    if plan["look"] is not None:
        out["look"] = [plan["look"]]
    return out


def block_look(block):
    """The record of the look a claim block's round waits for (perfgrid.looks), or None."""
    look = looks.look_before(SETTINGS, block.experiment, block.jobs[0].point, block.round)
    return None if look is None else str(LAYOUT.look(block.experiment, look))


def block_plan(block):
    """The block's plan as perfgrid.block reads it (as JSON): its round, the look it waits
    for, the run's time budget (``budget``, with the record of the run's start), and each
    point's key (what a look names), the harness's arguments, its result (the
    block's outputs, in the order they are measured) and its log. Made once per block:
    the rule's input, output and params all read it."""
    exp = experiments.get(block.experiment)
    points = []
    for job in block.jobs:
        words = [*bench_words(block.experiment, job.point, job.round),
                 *jobargs.option_words(jobs.options(exp, job.point, SETTINGS, LAYOUT))]
        points.append({"key": exp.point_key(job.point), "args": words,
                       "result": LAYOUT.raw_result(job.experiment, job.point, round=job.round),
                       "log": LAYOUT.point_log(job.experiment, job.point, job.round)})
    return {"experiment": block.experiment, "round": block.round, "look": block_look(block),
            "budget": {**SETTINGS["budget"], "run_record": str(LAYOUT.run_record)},
            "points": points}


def block_params(plan):
    """A claim block's params: ``digest``, which Snakemake records and compares (a rerun
    trigger: it changes with any point's arguments, not with the order inside the block or
    the time budget),
    and ``plan``, the plan itself for the command line. The plan is a function of the
    output, which Snakemake neither records nor compares: recorded, it would be stored
    once per result file, some 15 kB for each of a block's ~50 points."""
    import hashlib

    parts = sorted(json.dumps(p, sort_keys=True) for p in plan["points"])
    digest = hashlib.sha256("\n".join([str(plan["look"]), *parts]).encode()).hexdigest()
    text = shlex.quote(json.dumps(plan))
    return {"digest": digest[:16], "plan": lambda wildcards, output: text}


# --- looks at an experiment's claims (rules/looks.smk, perfgrid.looks) ---------------------
def previous_look(experiment, blocks):
    """The record of the look before the one after ``blocks`` rounds, or None."""
    earlier = [n for n in looks.schedule(SETTINGS, experiment) if n < blocks]
    return str(LAYOUT.look(experiment, max(earlier))) if earlier else None


def look_results(wildcards):
    """Input function of a look: the results of the experiment's claim points up to its
    round (a round after an earlier look that let its point go is a note that says so),
    and the look before it."""
    experiment, blocks = wildcards.experiment, int(wildcards.blocks)
    exp = experiments.get(experiment)
    results = [LAYOUT.raw_result(experiment, job.point, round=job.round) for job in JOBS
               if job.experiment == experiment and job.round <= blocks
               and exp.used_by_claims(job.point)
               and planning.rounds_of(SETTINGS, experiment, job.point) > 1]
    previous = previous_look(experiment, blocks)
    return {"results": results, "previous": [previous] if previous else [],
            "code": code("perfgrid.cli:_look", f"perfgrid.experiments.{experiment}.analysis")}


def look_params(wildcards):
    """The looks planned for the experiment, its claim points' last round, and the record
    of the look before this one."""
    planned = looks.schedule(SETTINGS, wildcards.experiment)
    blocks = int(wildcards.blocks)
    at = planned.index(blocks) + 1 if blocks in planned else None
    previous = previous_look(wildcards.experiment, blocks)
    return (f"--looks {len(planned)} --cap {planned[-1]}" + (f" --at {at}" if at else "")
            + (f" --previous {shlex.quote(previous)}" if previous else ""))
