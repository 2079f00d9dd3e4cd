# ring (seed E5 b): the C ring is built once; one pyperf job per grid point.


rule ring_binary:
    input:
        f"{SRC}/native/ring.c",
    output:
        LAYOUT.native_binary("ring"),
    log:
        LAYOUT.log("ring", "build.log"),
    conda:
        CONDA_ENV
    shell:
        "${{CC:-cc}} -O2 -Wall -o {output:q} {input:q} > {log:q} 2>&1"


rule ring:
    input:
        workload=f"{SRC}/experiments/ring.py",
        binary=ring_native_input,
        beams=erlang_input("pg_ring"),
    output:
        result_pattern("ring"),
    log:
        log_pattern("ring"),
    params:
        bench=bench_params("ring"),
        options=ring_options,
        erlang=erlang_options,
    threads: BENCH_THREADS
    resources:
        bench=1,
    priority: job_priority("ring")
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.bench ring {params.bench} {params.options} {params.erlang} "
        "--result {output:q} > {log:q} 2>&1"
