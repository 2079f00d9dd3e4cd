# Erlang (the seeds' own runtime): each module of src/perfgrid/erlang/ is compiled on its
# own, so editing one experiment's program reruns that experiment's Erlang jobs only.
# An erlang* point's job takes pg_util and its experiment's module as input (erlang_input
# in common.smk) and gets the folder as `--option beams=DIR`.


rule erlang_beam:
    input:
        f"{SRC}/erlang/{{module}}.erl",
    output:
        f"{ERLANG_BEAMS}/{{module}}.beam",
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
