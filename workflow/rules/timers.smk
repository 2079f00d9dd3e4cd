# timers (seed E4): one pyperf job per grid point. A storm runs tens of seconds
# and prints its progress every few seconds into the job's log.


rule timers:
    input:
        workload=f"{SRC}/experiments/timers.py",
        beams=erlang_input("pg_timers"),
    output:
        result_pattern("timers"),
    log:
        log_pattern("timers"),
    wildcard_constraints:
        seeding="independent|identical",
        gc="on|off",
        tasks=r"\d+",
        rounds=r"\d+",
        max_sleep=r"\d+\.\d+",
    params:
        bench=bench_params("timers"),
        seed=SETTINGS["timers"]["seed"],
        progress=SETTINGS["timers"]["progress_s"],
        erlang=erlang_options,
    threads: BENCH_THREADS
    resources:
        bench=1,
    priority: job_priority("timers")
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.bench timers {params.bench} {params.erlang} --option seed={params.seed} "
        "--option progress={params.progress} --result {output:q} > {log:q} 2>&1"
