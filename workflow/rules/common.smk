# Validation, the effective config, grid expansion and input functions; no rules.
import os
import shlex
import sys
import time

from perfgrid import experiments, order, settings
from perfgrid.paths import Layout


# The schema (../schemas/config.schema.yaml, defaults filled in) and what it cannot
# express: one short message naming the key, before any job, and nothing written.
try:
    # workers: auto counts the CPUs where the workflow is parsed; a cluster job parses it
    # again on its node, so the count goes with it (envvars) and every job sees one grid
    os.environ.setdefault(settings.AUTO_CPUS_ENV, str(settings.auto_cpus()))
    SETTINGS = settings.validated(config)
except settings.ConfigError as err:
    raise WorkflowError(settings.brief(f"invalid config: {err}")) from None

envvars:
    "PATH",
    settings.AUTO_CPUS_ENV,


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
TESTFILE = SETTINGS["testfile"]["path"]
# perfgrid removes only a test file it generated at the default path in this run
# (rule testfile notes its identity; onsuccess below); any other file stays
TESTFILE_OWNED = os.path.abspath(TESTFILE) == os.path.abspath(LAYOUT.testfile_default)
STARTED = time.time()
try:  # benchmark jobs take every core, so nothing runs beside them
    BENCH_THREADS = workflow.cores
except WorkflowError:  # no --cores: a cluster run (profiles/slurm), --report, --lint, dry runs
    # the grid's largest worker count: the CPUs a benchmark job asks SLURM for
    BENCH_THREADS = max(
        (int(p.get("workers", 1)) for e in SETTINGS["experiments"]
         for p in settings.grid(SETTINGS, e)),
        default=1,
    )
SRC = os.path.relpath(os.path.join(workflow.basedir, "src", "perfgrid"))
# every benchmark job in the order it should run; Snakemake runs the highest priority first
JOBS = settings.jobs(SETTINGS)
ORDER = order.planned(JOBS, SETTINGS["order"]["shuffle"], SETTINGS["order"]["seed"])
PRIORITY = order.priorities(ORDER, {e: experiments.get(e).axes for e in SETTINGS["experiments"]})


onstart:
    from perfgrid.atomic import write_json
    from snakemake import __version__ as snakemake_version

    from perfgrid.progress import start_reporter

    write_json(LAYOUT.run_record, {"argv": sys.argv, "started": time.time(),
                                   "cwd": os.getcwd(), "snakemake": snakemake_version,
                                   "order": SETTINGS["order"]})
    start_reporter([r for e in SETTINGS["experiments"] for r in runnable(e)])


onsuccess:
    from perfgrid import testfile

    testfile.remove_generated(LAYOUT.testfile_record, since=STARTED)


wildcard_constraints:
    experiment="|".join(experiments.available()),
    variant="[a-z_]+",
    cache="warm|cold",
    binding="none|single|compact|spread",
    workers=r"\d+",
    block_size=r"\d+",
    round=r"\d+",


def runnable(experiment):
    """Result files of the grid points this machine can run (one per round)."""
    rounds = settings.rounds_of(SETTINGS, experiment)
    return [LAYOUT.raw_result(job.experiment, job.point, round=job.round if rounds > 1 else None)
            for job in JOBS if job.experiment == experiment]


def result_pattern(experiment):
    """A benchmark rule's output: one file per point (per round when measured in rounds)."""
    exp = experiments.get(experiment)
    return LAYOUT.raw_pattern(experiment, exp.axes, settings.rounds_of(SETTINGS, experiment))


def log_pattern(experiment):
    """A benchmark rule's log, beside its result under logs/."""
    exp = experiments.get(experiment)
    return LAYOUT.log_pattern(experiment, exp.axes, settings.rounds_of(SETTINGS, experiment))


def job_priority(experiment):
    """Priority function: the job's place in the run's order (perfgrid.order), first highest."""
    axes = experiments.get(experiment).axes

    def priority(wildcards):
        key = (experiment, tuple(wildcards[a] for a in axes), int(wildcards.get("round", 1)))
        return PRIORITY.get(key, -1 - len(PRIORITY))

    return priority


def skipped_points():
    """Grid points skipped on this machine, each with its reason."""
    return [s for e in SETTINGS["experiments"] for s in settings.split_grid(SETTINGS, e)[1]]


def bench_params(experiment):
    """Command-line arguments of the pyperf harness for one job's wildcards."""

    def args(wildcards):
        exp = experiments.get(experiment)
        words = []
        for axis in exp.axes:
            words += ["--point", f"{axis}={wildcards[axis]}"]
        point = exp.parse_point({a: wildcards[a] for a in exp.axes})
        words += settings.measure_args(SETTINGS, experiment, point)
        words += ["--lock", str(LAYOUT.bench_lock)]
        words += ["--busy-share", str(SETTINGS["noise"]["busy_share"])]
        words += ["--steal-share", str(SETTINGS["noise"]["steal_share"]), "--verbose"]
        if "round" in wildcards.keys():
            words += ["--round", wildcards.round]
        return shlex.join(words)

    return args


def all_outputs():
    out = [LAYOUT.report_html, LAYOUT.report_md, LAYOUT.used_config]
    for experiment in SETTINGS["experiments"]:
        out.append(LAYOUT.table(experiment))
        out.append(LAYOUT.plot_dir(experiment))
    return out


# Erlang (the seeds' runtime): the compiled modules of rule erlang_beam (erlang.smk).
ERLANG_BEAMS = LAYOUT.native_binary("erlang")


def erlang_input(module):
    """Input function: pg_util and ``module`` compiled, for the erlang* variants only."""

    def beams(wildcards):
        if wildcards.variant.startswith("erlang"):
            return [f"{ERLANG_BEAMS}/{m}.beam" for m in ("pg_util", module)]
        return []

    return beams


def erlang_options(wildcards, input):
    """``--option beams=DIR`` where the job runs an Erlang program."""
    return shlex.join(["--option", f"beams={ERLANG_BEAMS}"]) if input.beams else ""


# --- experiment-specific input and option functions ---------------------------

HTTP = experiments.get("http")
HTTP_DATABASE = SETTINGS.get("http", {}).get("database") or str(
    LAYOUT.root / "data" / "http.sqlite"
)


def http_options(wildcards):
    """--option words of one job: its request count, the database, port and deadline."""
    point = HTTP.parse_point(dict(wildcards.items()))
    options = HTTP.options(SETTINGS.get("http", {}), point, HTTP_DATABASE)
    return shlex.join(w for key, value in options.items() for w in ("--option", f"{key}={value}"))


def ring_native_input(wildcards):
    """The C ring, for the native points only."""
    return [str(LAYOUT.native_binary("ring"))] if wildcards.variant == "native" else []


def ring_options(wildcards, input):
    """The ring's sizes (and the C ring's path) as harness options."""
    section = SETTINGS["ring"]
    words = []
    for key in ("rings", "size", "rounds", "worker_rounds"):
        words += ["--option", f"{key}={section[key]}"]
    if input.binary:
        words += ["--option", f"binary={input.binary}"]
    return shlex.join(words)
