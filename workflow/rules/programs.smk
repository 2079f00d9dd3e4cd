# The programs benchmark jobs run besides Python, each built on its own (perfgrid.design.jobs).
NATIVE = jobs.native_sources()
ERLANG = jobs.erlang_sources()


rule native_program:
    input:
        source=lambda wildcards: f"{SRC}/{NATIVE[wildcards.program]}",
        header=f"{SRC}/{jobs.NATIVE_HEADER}",
    output:
        LAYOUT.native_binary("{program}"),
    log:
        LAYOUT.log("{program}", "build.log"),
    wildcard_constraints:
        program="|".join(NATIVE) or "(?!)",
    params:
        include=lambda wildcards, input: os.path.dirname(input.header),
    conda:
        CONDA_ENV
    shell:
        "${{CC:-cc}} -O2 -Wall -pthread -I {params.include:q} -o {output:q} {input.source:q} "
        "> {log:q} 2>&1"


rule erlang_beam:
    input:
        lambda wildcards: f"{SRC}/{ERLANG[wildcards.module]}",
    output:
        f"{LAYOUT.erlang_beams}/{{module}}.beam",
    log:
        LAYOUT.log("erlang", "{module}.log"),
    wildcard_constraints:
        module="|".join(ERLANG),
    params:
        outdir=lambda wildcards, output: os.path.dirname(output[0]),
    conda:
        CONDA_ENV
    shell:
        "erlc -o {params.outdir:q} {input:q} > {log:q} 2>&1"
