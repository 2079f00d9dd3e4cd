# The noise profile (perfgrid.noiseprofile): before the benchmarks, two pairs of points the
# claims compare, measured back to back in fresh processes block by block, give each
# level's spread and cost on this machine (noise.json; a table in the report). Like a
# benchmark job it holds the bench resource and the harness's lock, so nothing measures
# beside it, and the highest priority, so it runs once its inputs are there and before
# any benchmark. Its pairs are the experiments' own (noise_pair), those of this run's
# experiments; it needs what a benchmark job of each of their points needs (the test file's
# ready note, the workload's code, the C program), so it is measured again when those are
# made again (a run that remakes the test file for its jobs) or change, or when its own
# code or blocks change. noise.profile.blocks: 0 leaves it out of the run.

rule noise_profile:
    input:
        unpack(noise_inputs),
    output:
        LAYOUT.noise_profile,
    log:
        LAYOUT.log("noise_profile.log"),
    params:
        blocks=NOISE_BLOCKS,
        seed=SETTINGS["order"]["seed"],
        lock=LAYOUT.bench_lock,
    threads: BENCH_THREADS
    resources:
        bench=1,
        slurm_extra="'--exclusive'",
        cpus_per_task=granted_threads,
        **noise_memory(),
    priority: 1
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli noise --config {input.config:q} --blocks {params.blocks} "
        "--seed {params.seed} --lock {params.lock:q} --out {output:q} > {log:q} 2>&1"
