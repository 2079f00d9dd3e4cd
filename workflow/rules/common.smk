# Validation, the effective config, grid expansion and the shared rules.
import os
import shlex
import sys
import time

from snakemake.utils import validate

from perfgrid import experiments, settings
from perfgrid.paths import Layout


validate(config, "../schemas/config.schema.yaml")
try:
    SETTINGS = settings.effective(config)
except settings.ConfigError as err:
    raise WorkflowError(f"invalid config: {err}") from None

# Jobs run `python` and import perfgrid from this checkout: the interpreter
# running Snakemake comes first on PATH (its venv), src/ on PYTHONPATH.
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [os.path.join(workflow.basedir, "src"), os.environ.get("PYTHONPATH")])
)
CONDA_ENV = "../envs/perfgrid.yaml"
PYTHON = "python"  # deprecated spelling kept for rules not yet converted
LAYOUT = Layout.for_host(SETTINGS["host"], SETTINGS["results"])
TESTFILE = SETTINGS["testfile"]["path"]
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


onstart:
    from perfgrid.atomic import write_json
    from snakemake import __version__ as snakemake_version

    write_json(LAYOUT.run_record, {"argv": sys.argv, "started": time.time(),
                                   "cwd": os.getcwd(), "snakemake": snakemake_version})


wildcard_constraints:
    experiment="|".join(experiments.available()),
    variant="[a-z_]+",
    cache="warm|cold",
    binding="none|single|compact|spread",
    workers=r"\d+",
    block_size=r"\d+",


def runnable(experiment):
    """Result files of the grid points this machine can run."""
    points, _ = settings.split_grid(SETTINGS, experiment)
    return [LAYOUT.raw_result(experiment, p) for p in points]


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
        words += settings.measure_args(SETTINGS, experiment)
        words += ["--lock", str(LAYOUT.bench_lock)]
        words += ["--busy-share", str(SETTINGS["noise"]["busy_share"])]
        return shlex.join(words)

    return args


def all_outputs():
    out = [LAYOUT.report_html, LAYOUT.report_md, LAYOUT.used_config]
    for experiment in SETTINGS["experiments"]:
        out.append(LAYOUT.table(experiment))
        out.append(LAYOUT.plot_dir(experiment))
    return out


rule machine:
    output:
        LAYOUT.machine,
    log:
        LAYOUT.log("machine.log"),
    params:
        testfile=TESTFILE,
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli machine --testfile {params.testfile:q} {output:q} > {log:q} 2>&1"


rule used_config:
    output:
        LAYOUT.used_config,
    log:
        LAYOUT.log("used_config.log"),
    params:
        config=config,
    run:
        import yaml

        from perfgrid.atomic import write_text

        write_text(output[0], yaml.safe_dump(params.config, sort_keys=True))


rule skipped:
    output:
        LAYOUT.skipped,
    log:
        LAYOUT.log("skipped.log"),
    params:
        skipped=skipped_points(),
    run:
        from perfgrid.atomic import write_json

        write_json(output[0], params.skipped)


rule testfile:
    output:
        # temp: regenerated in seconds when needed, never archived; once every
        # benchmark that reads it is done, Snakemake removes it
        data=temp(TESTFILE),
        facts=TESTFILE + ".json",
    log:
        LAYOUT.log("testfile.log"),
    params:
        size=SETTINGS["testfile"]["size_bytes"],
        seed=SETTINGS["testfile"]["seed"],
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli testfile --size {params.size} --seed {params.seed} "
        "{output.data:q} {output.facts:q} > {log:q} 2>&1"
