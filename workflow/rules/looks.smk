# Looks at an experiment's claims after some of its rounds (perfgrid.looks, perfgrid.plan).

rule look:
    input:
        unpack(lambda w: glue.look_inputs(PLAN, LAYOUT, SRC, w.experiment, int(w.blocks))),
    output:
        LAYOUT.look("{experiment}", "{blocks}"),
    log:
        LAYOUT.log("{experiment}", "look-after-{blocks}-rounds.log"),
    wildcard_constraints:
        blocks=r"\d+",
    params:
        planned=lambda w: glue.look_params(PLAN, LAYOUT, w.experiment, int(w.blocks)),
    # alone, as a benchmark job is: it reads and bootstraps while nothing is measured
    resources:
        bench=1,
    priority: 1
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli look {wildcards.experiment} {wildcards.blocks} {output:q} "
        "{input.results:q} {params.planned} > {log:q} 2>&1"
