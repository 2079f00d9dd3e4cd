# The noise profile, measured before the benchmarks: the plan's pairs (plan.json's noise),
# run by perfgrid.pipeline.noiseprofile.

rule noise_profile:
    input:
        unpack(lambda w: glue.noise_inputs(SETTINGS, LAYOUT, PLAN, SRC)),
    output:
        LAYOUT.noise_profile,
    log:
        LAYOUT.log("noise_profile.log"),
    params:
        blocks=NOISE_BLOCKS,
        seed=SETTINGS["order"]["seed"],
        lock=LAYOUT.bench_lock,
        # the plan's pairs and their words (a config edit elsewhere does not rerun it), and
        # the config
        **glue.noise_params(PLAN, config),
    threads: BENCH_THREADS
    resources:
        bench=1,
        slurm_extra="'--exclusive'",
        cpus_per_task=lambda wildcards, threads: threads,
        **glue.noise_memory(SETTINGS, PLAN),
    priority: 1
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.pipeline.cli noise --config-json {params.config} --pairs {params.pairs} "
        "--blocks {params.blocks} "
        "--seed {params.seed} --lock {params.lock:q} --out {output:q} > {log:q} 2>&1"
