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


def syscall_native_input(wildcards):
    """The C program, for the native points only."""
    return [str(LAYOUT.native_binary("syscall"))] if wildcards.variant == "native" else []


def syscall_options(wildcards, input):
    """The C program's path as a harness option (native points only)."""
    return shlex.join(["--option", f"binary={input.binary}"]) if input.binary else ""


rule syscall:
    input:
        workload=f"{SRC}/experiments/syscall.py",
        binary=syscall_native_input,
    output:
        LAYOUT.raw_pattern("syscall", experiments.get("syscall").axes),
    log:
        LAYOUT.log_pattern("syscall", experiments.get("syscall").axes),
    wildcard_constraints:
        variant="python|native",
        call="getuid|getppid|clock_gettime",
    params:
        bench=bench_params("syscall"),
        options=syscall_options,
    threads: BENCH_THREADS
    resources:
        bench=1,
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.bench syscall {params.bench} {params.options} "
        "--result {output:q} > {log:q} 2>&1"
