# One pyperf job per grid point, the same rule for every experiment in the registry
# (perfgrid.experiments): what a job needs beyond the harness (a test file, a C program,
# Erlang modules, options from its config section) its experiment declares, and the
# input and params functions of common.smk ask it. The rule is named after its experiment.
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
        conda:
            CONDA_ENV
        shell:
            "python -m perfgrid.bench {params.experiment} {params.bench} {params.options} "
            "--result {output:q} > {log:q} 2>&1"
