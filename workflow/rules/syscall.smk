# syscall (seed E3): the C program is built once; one pyperf job per grid point.


rule syscall_binary:
    input:
        f"{SRC}/native/syscall.c",
    output:
        LAYOUT.native_binary("syscall"),
    log:
        LAYOUT.log("syscall", "build.log"),
    conda:
        CONDA_ENV
    shell:
        "${{CC:-cc}} -O2 -Wall -o {output:q} {input:q} > {log:q} 2>&1"


rule syscall:
    input:
        workload=f"{SRC}/experiments/syscall.py",
        # the C program, for the native points only
        binary=lambda w: (
            [str(LAYOUT.native_binary("syscall"))] if w.variant == "native" else []
        ),
    output:
        result_pattern("syscall"),
    log:
        log_pattern("syscall"),
    wildcard_constraints:
        variant="python|native",
        call="getuid|getppid|clock_gettime",
    params:
        bench=bench_params("syscall"),
        options=lambda w, input: (
            shlex.join(["--option", f"binary={input.binary}"]) if input.binary else ""
        ),
    threads: BENCH_THREADS
    resources:
        bench=1,
    priority: job_priority("syscall")
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.bench syscall {params.bench} {params.options} "
        "--result {output:q} > {log:q} 2>&1"
