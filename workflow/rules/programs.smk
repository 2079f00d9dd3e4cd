# The programs benchmark jobs run besides Python, each built on its own, so that editing
# one experiment's program reruns that experiment's jobs only. An experiment names its
# C program (native_program) and Erlang module (erlang_module); a native or erlang
# point's job takes them as input and gets them as `--option binary=PATH` and
# `--option beams=DIR` (perfgrid.jobs).


rule native_program:
    input:
        source=f"{SRC}/{NATIVE_SOURCES}/{{program}}.c",
        header=f"{SRC}/{NATIVE_SOURCES}/perfgrid.h",
    output:
        LAYOUT.native_binary("{program}"),
    log:
        LAYOUT.log("{program}", "build.log"),
    wildcard_constraints:
        program="[a-z_]+",
    conda:
        CONDA_ENV
    shell:
        "${{CC:-cc}} -O2 -Wall -pthread -o {output:q} {input.source:q} > {log:q} 2>&1"


rule erlang_beam:
    input:
        f"{SRC}/{ERLANG_SOURCES}/{{module}}.erl",
    output:
        f"{LAYOUT.erlang_beams}/{{module}}.beam",
    log:
        LAYOUT.log("erlang", "{module}.log"),
    wildcard_constraints:
        module="pg_[a-z_]+",
    params:
        outdir=lambda wildcards, output: os.path.dirname(output[0]),
    conda:
        CONDA_ENV
    shell:
        "erlc -o {params.outdir:q} {input:q} > {log:q} 2>&1"
