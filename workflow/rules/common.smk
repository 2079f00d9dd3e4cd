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
SRC = os.path.relpath(os.path.join(workflow.basedir, "src", "perfgrid"))
# every benchmark job in the order it should run; Snakemake runs the highest priority first
JOBS = planning.jobs(SETTINGS)
ORDER = order.planned(JOBS, SETTINGS["order"]["shuffle"], SETTINGS["order"]["seed"],
                      block=planning.claim_block(SETTINGS), group=planning.claim_group)
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
    write_json(LAYOUT.run_record, {"argv": sys.argv, "started": time.time(),
                                   "cwd": os.getcwd(), "snakemake": snakemake_version,
                                   "order": SETTINGS["order"],
                                   "job_rate_limiter_stopped": quiet})
    start_reporter([r for e in SETTINGS["experiments"] for r in runnable(e)],
                   at_most=any(looks.looks_of(SETTINGS, e) > 1 for e in SETTINGS["experiments"]))


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


def bench_params(experiment):
    """Command-line arguments of the pyperf harness for one job's wildcards."""

    @jobs.signature_once
    def args(wildcards):
        exp = experiments.get(experiment)
        words = []
        for axis in exp.axes:
            words += ["--point", f"{axis}={wildcards[axis]}"]
        point = exp.parse_point({a: wildcards[a] for a in exp.axes})
        words += planning.measure_args(SETTINGS, experiment, point)
        words += ["--lock", str(LAYOUT.bench_lock)]
        words += ["--busy-share", str(SETTINGS["noise"]["busy_share"])]
        words += ["--steal-share", str(SETTINGS["noise"]["steal_share"]), "--verbose"]
        if "round" in wildcards.keys():
            words += ["--round", wildcards.round]
            look = job_look(experiment, point, wildcards)
            if look is not None:  # measured only if that look left a claim undecided
                words += ["--look", look]
        return shlex.join(words)

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
        found = jobs.inputs(exp, point, SETTINGS, LAYOUT, SRC)
        look = job_look(experiment, point, wildcards)
        if look is not None:
            found["look"] = [look]
        return found

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
    out = {"config": ancient(str(LAYOUT.used_config)), "code": f"{SRC}/noiseprofile.py"}
    for exp, point in NOISE_PAIRS:
        for name, files in jobs.inputs(exp, point, SETTINGS, LAYOUT, SRC).items():
            out.setdefault(name, [])
            out[name] += [f for f in files if f not in out[name]]
    return out


def noise_memory():
    """The noise profile's ``mem_mb``: the most its points' experiments ask for, if any."""
    asked = [m for m in (exp.job_mem_mb(SETTINGS) for exp, _ in NOISE_PAIRS) if m is not None]
    return {"mem_mb": max(asked)} if asked else {}


# --- looks at an experiment's claims (rules/looks.smk, perfgrid.looks) ---------------------
def measured_rounds(experiment, jobs, after_looks):
    """The result files of ``jobs``: with ``after_looks`` False those no look decides on,
    else the rounds after a look that it measures, where a claim the look left open
    compares the point (perfgrid.looks.measures). A look is a checkpoint: asking for its
    record before it ran defers the asker (the other inputs are asked for at once), and
    the rounds it lets go never become jobs."""
    exp, records, out = experiments.get(experiment), {}, []
    for job in jobs:
        look = looks.look_before(SETTINGS, experiment, job.point, job.round)
        if (look is not None) != after_looks:
            continue
        if look is not None:
            if look not in records:
                done = checkpoints.look.get(experiment=experiment, blocks=str(look))
                records[look] = looks.read(done.output[0])
            if not looks.measures(records[look], exp.point_key(job.point)):
                continue
        out.append(LAYOUT.raw_result(experiment, job.point, round=job.round))
    return out


def table_results(after_looks):
    """Input function of a table: the experiment's results no look decides on, or
    (``after_looks``) the rounds after its looks that they measure."""

    def results(wildcards):
        experiment = wildcards.experiment
        if looks.looks_of(SETTINGS, experiment) < 2:
            return [] if after_looks else list(runnable(experiment))
        jobs = [j for j in JOBS if j.experiment == experiment]
        return measured_rounds(experiment, jobs, after_looks)

    return results


def previous_look(experiment, blocks):
    """The record of the look before the one after ``blocks`` rounds, or None."""
    earlier = [n for n in looks.schedule(SETTINGS, experiment) if n < blocks]
    return str(LAYOUT.look(experiment, max(earlier))) if earlier else None


def look_results(wildcards):
    """Input function of a look: the results of the experiment's claim points up to its
    round (those after an earlier look where it measured them), and the look before it."""
    experiment, blocks = wildcards.experiment, int(wildcards.blocks)
    exp = experiments.get(experiment)
    jobs = [job for job in JOBS if job.experiment == experiment and job.round <= blocks
            and exp.used_by_claims(job.point)
            and planning.rounds_of(SETTINGS, experiment, job.point) > 1]
    results = (measured_rounds(experiment, jobs, False)
               + measured_rounds(experiment, jobs, True))
    previous = previous_look(experiment, blocks)
    return {"results": results, "previous": [previous] if previous else [],
            "code": [f"{SRC}/looks.py", f"{SRC}/analysis/sequential.py", f"{SRC}/stats.py",
                     f"{SRC}/aggregate.py",
                     f"{SRC}/analysis/__init__.py", f"{SRC}/experiments/{experiment}/analysis.py"]}


def job_look(experiment, point, wildcards):
    """The record of the look a benchmark job's round waits for (perfgrid.looks), or None."""
    if "round" not in wildcards.keys():
        return None
    look = looks.look_before(SETTINGS, experiment, point, int(wildcards.round))
    return None if look is None else str(LAYOUT.look(experiment, look))


def look_params(wildcards):
    """The looks planned for the experiment, its claim points' last round, and the record
    of the look before this one (from the wildcards, not the input: while an earlier look
    has not run, the input is a placeholder)."""
    planned = looks.schedule(SETTINGS, wildcards.experiment)
    blocks = int(wildcards.blocks)
    at = planned.index(blocks) + 1 if blocks in planned else None
    previous = previous_look(wildcards.experiment, blocks)
    return (f"--looks {len(planned)} --cap {planned[-1]}" + (f" --at {at}" if at else "")
            + (f" --previous {shlex.quote(previous)}" if previous else ""))
