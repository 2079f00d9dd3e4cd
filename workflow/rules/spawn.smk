# spawn (seed E1): the C program is built once; one pyperf job per grid point.


rule spawn_binary:
    input:
        f"{SRC}/native/spawn.c",
    output:
        LAYOUT.native_binary("spawn"),
    log:
        LAYOUT.log("spawn", "build.log"),
    conda:
        CONDA_ENV
    shell:
        "${{CC:-cc}} -O2 -Wall -pthread -o {output:q} {input:q} > {log:q} 2>&1"


rule spawn:
    input:
        workload=f"{SRC}/experiments/spawn.py",
        # the C program, for the native points only
        binary=lambda w: (
            [str(LAYOUT.native_binary("spawn"))] if w.variant.startswith("native_") else []
        ),
        beams=erlang_input("pg_spawn"),
    output:
        result_pattern("spawn"),
    log:
        log_pattern("spawn"),
    wildcard_constraints:
        chains=r"\d+",
        total=r"\d+",
    params:
        bench=bench_params("spawn"),
        options=lambda w, input: (
            shlex.join(["--option", f"binary={input.binary}"]) if input.binary else ""
        ),
        erlang=erlang_options,
    threads: BENCH_THREADS
    resources:
        bench=1,
    priority: job_priority("spawn")
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.bench spawn {params.bench} {params.options} {params.erlang} "
        "--result {output:q} > {log:q} 2>&1"
