# The benchmark jobs: each experiment's sweep rule, and a rule for each claim block of the
# plan (perfgrid.design.plan, perfgrid.pipeline.glue). A failed job runs once more (BENCH_RETRIES); on a
# cluster (profiles/slurm) each job gets a whole node with its threads as CPUs.

for _experiment in experiments.available():

    rule:
        name:
            _experiment
        input:
            unpack(glue.job_inputs(SETTINGS, LAYOUT, SRC, _experiment)),
        output:
            glue.result_pattern(SETTINGS, LAYOUT, _experiment),
        log:
            glue.log_pattern(SETTINGS, LAYOUT, _experiment),
        wildcard_constraints:
            **glue.axis_constraints(_experiment),
            **glue.sweep_rounds(SETTINGS, _experiment),
        params:
            experiment=_experiment,
            bench=glue.bench_params(SETTINGS, LAYOUT, PLAN, _experiment),
            options=glue.job_options(SETTINGS, LAYOUT, PLAN, _experiment),
        threads: BENCH_THREADS
        resources:
            bench=1,
            slurm_extra="'--exclusive'",
            cpus_per_task=lambda wildcards, threads: threads,
            **glue.job_memory(SETTINGS, _experiment),
        priority: glue.job_priority(PLAN, _experiment)
        retries: BENCH_RETRIES
        conda:
            CONDA_ENV
        shell:
            "python -m perfgrid.measure.bench {params.experiment} {params.bench} {params.options} "
            "--result {output:q} > {log:q} 2>&1"


for _block in PLAN.blocks.values():

    rule:
        name:
            _block.name
        input:
            **glue.block_inputs(SETTINGS, LAYOUT, PLAN, SRC, _block.name),
        output:
            _block.results,
        log:
            LAYOUT.log(_block.experiment, f"{_block.name}.log"),
        params:
            **glue.block_params(PLAN, _block.name),
        # the threads of its experiment's rule, as --set-threads left them
        threads: getattr(rules, _block.experiment).rule.resources["_cores"]
        resources:
            bench=1,
            slurm_extra="'--exclusive'",
            cpus_per_task=lambda wildcards, threads: threads,
            **glue.job_memory(SETTINGS, _block.experiment),
        priority: _block.priority
        retries: BENCH_RETRIES
        conda:
            CONDA_ENV
        shell:
            "python -m perfgrid.measure.block {params.plan} > {log:q} 2>&1"

    workflow.ruleorder(_block.name, _block.experiment)
