# The config checked, the environment jobs run in, the run's plan (perfgrid.design.plan) and the
# handlers; the rules' input and params functions are perfgrid.pipeline.glue's. No rules.
import gc
import json
import os
import sys
import time

from perfgrid import experiments
from perfgrid.design import codeinputs, jobs, plan, planning
from perfgrid.kit.paths import Layout
from perfgrid.measure import fixtures
from perfgrid.pipeline import config_errors, glue, settings

# Snakemake's ~130,000 objects, kept all run: frozen, the cyclic collector scans them no
# more while the workflow is parsed (about 0.5 s of an up-to-date dry run)
gc.freeze()

# the config checked (perfgrid.pipeline.settings): one short message naming the key, before any job
try:
    # workers: auto counts the CPUs where the workflow is parsed; a cluster job parses it
    # again on its node, so the count goes with it (envvars) and every job sees one grid
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
PLAN = plan.build(SETTINGS, LAYOUT)
FIXTURES = fixtures.all_kinds()
NEEDED_FIXTURES = fixtures.needed(SETTINGS)
fixture_args = glue.fixture_args
STARTED = time.time()
try:  # benchmark jobs take every core, so nothing runs beside them
    BENCH_THREADS = workflow.cores
except WorkflowError:  # no --cores: a cluster run (profiles/slurm), --report, --lint, dry runs
    BENCH_THREADS = glue.largest_workers(SETTINGS)
# a failed benchmark job runs this many more times before it stops the run
BENCH_RETRIES = 1
SRC = os.path.relpath(os.path.join(workflow.basedir, "src", "perfgrid"))
NOISE_BLOCKS = SETTINGS["noise"]["profile"]["blocks"]


def code(*roots):
    """A job's code inputs: the files of this tree's perfgrid (SRC) that ``roots``, the
    modules it runs (``module`` or ``module:function``), import (perfgrid.design.codeinputs)."""
    return codeinputs.code_inputs(SRC, *roots)


onstart:
    from perfgrid.measure import noise, runlock

    # one run at a time on a result set (perfgrid.measure.runlock); dry runs skip onstart
    try:
        runlock.acquire(LAYOUT.run_lock, sys.argv)
    except runlock.Held as err:
        raise WorkflowError(str(err)) from None
    # quiet: Snakemake's job-rate limiter stopped (it would wake it beside the measurement)
    quiet = workflow.local_exec and noise.quiet_scheduler(workflow.scheduler)
    glue.start_run(SETTINGS, LAYOUT, PLAN, sys.argv, quiet)


onsuccess:  # remove the fixtures' files this run generated at their default paths
    from perfgrid.measure import runlock

    for fixture in FIXTURES:
        fixture.remove_generated(LAYOUT.fixture_record(fixture.name), since=STARTED)
    runlock.release(LAYOUT.run_lock)


onerror:
    from perfgrid.measure import runlock

    runlock.release(LAYOUT.run_lock)


wildcard_constraints:
    **glue.WILDCARD_CONSTRAINTS,


# a table's inputs: the results of its experiment's planned jobs
runnable = PLAN.results
