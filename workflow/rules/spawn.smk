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


def spawn_native_input(wildcards):
    """The C program, for the native_* points only."""
    native = wildcards.variant.startswith("native_")
    return [str(LAYOUT.native_binary("spawn"))] if native else []


def spawn_options(wildcards, input):
    """The C program's path as a harness option (native points only)."""
    return shlex.join(["--option", f"binary={input.binary}"]) if input.binary else ""


rule spawn:
    input:
        workload=f"{SRC}/experiments/spawn.py",
        binary=spawn_native_input,
    output:
        LAYOUT.raw_pattern("spawn", experiments.get("spawn").axes),
    log:
        LAYOUT.log_pattern("spawn", experiments.get("spawn").axes),
    wildcard_constraints:
        chains=r"\d+",
        total=r"\d+",
    params:
        bench=bench_params("spawn"),
        options=spawn_options,
    threads: BENCH_THREADS
    resources:
        bench=1,
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.bench spawn {params.bench} {params.options} "
        "--result {output:q} > {log:q} 2>&1"
