# The benchmark jobs, the same rules for every experiment in the registry
# (perfgrid.experiments): what a job needs beyond the harness (a test file, a C program,
# Erlang modules, options from its config section) its experiment declares, and the
# input and params functions of common.smk ask it.
#
# A point measured once (the sweep that feeds the plots) is one pyperf job, of the rule
# named after its experiment. The points an experiment's claims compare are measured in
# rounds, and one round of them is one job, a claim block (perfgrid.block, rule
# `<experiment>_round_<n>`): its points run back to back in the order perfgrid.order
# drew, each in its own harness process, so the sides of a claim are seconds apart with
# no scheduling in between, and the plan has some 90 block jobs, not some 3,000 point
# jobs. A block's outputs are its points' result files, which the experiment's rule
# could also make: the block rule comes first (ruleorder).
#
# A benchmark job that fails runs once more (BENCH_RETRIES): a fork refused once, one
# time in hundreds of runs, would otherwise stop a 90-minute run at minute 38. A job that
# fails twice stops the run as before.
#
# On a cluster (profiles/slurm) each job gets a whole node (--exclusive) with its threads
# as CPUs, and the memory its experiment asks for (job_mem_mb) or the profile's default;
# a local run ignores the slurm_* and cpus_per_task resources.

for _experiment in experiments.available():

    rule:
        name:
            _experiment
        input:
            unpack(job_inputs(_experiment)),
        output:
            result_pattern(_experiment),
        log:
            log_pattern(_experiment),
        wildcard_constraints:
            **axis_constraints(_experiment),
            **sweep_rounds(_experiment),
        params:
            experiment=_experiment,
            bench=bench_params(_experiment),
            options=job_options(_experiment),
        threads: BENCH_THREADS
        resources:
            bench=1,
            slurm_extra="'--exclusive'",
            cpus_per_task=granted_threads,
            **job_memory(_experiment),
        priority: job_priority(_experiment)
        retries: BENCH_RETRIES
        conda:
            CONDA_ENV
        shell:
            "python -m perfgrid.bench {params.experiment} {params.bench} {params.options} "
            "--result {output:q} > {log:q} 2>&1"


def experiment_threads(experiment):
    """The threads of the experiment's rule, as --set-threads left them: its claim blocks
    take the same, so one --set-threads per experiment still sizes every job."""
    return getattr(rules, experiment).rule.resources["_cores"]


for _block in CLAIM_BLOCKS:
    _plan = block_plan(_block)

    rule:
        name:
            _block.name
        input:
            **block_inputs(_block, _plan),
        output:
            [point["result"] for point in _plan["points"]],
        log:
            LAYOUT.log(_block.experiment, f"{_block.name}.log"),
        params:
            **block_params(_plan),
        threads: experiment_threads(_block.experiment)
        resources:
            bench=1,
            slurm_extra="'--exclusive'",
            cpus_per_task=granted_threads,
            **job_memory(_block.experiment),
        priority: block_priority(_block)
        retries: BENCH_RETRIES
        conda:
            CONDA_ENV
        shell:
            "python -m perfgrid.block {params.plan} > {log:q} 2>&1"

    workflow.ruleorder(_block.name, _block.experiment)
