# Looks at an experiment's claims after some of its rounds (perfgrid.looks): the rounds
# after a look are measured only for the points of claims still undecided that can still
# be decided. Only experiments with `measure.claims.looks` have them; a look waits for
# every round before it of the experiment's claim points, and the claim blocks of later
# rounds wait for it (rules/benchmark.smk): a point it let go gets a note, not a
# measurement (perfgrid.block), so the plan is the same before and after a look.


rule look:
    input:
        unpack(look_results),
    output:
        LAYOUT.look("{experiment}", "{blocks}"),
    log:
        LAYOUT.log("{experiment}", "look-after-{blocks}-rounds.log"),
    wildcard_constraints:
        blocks=r"\d+",
    params:
        planned=look_params,
    # alone, as a benchmark job is: it reads and bootstraps while nothing is measured
    resources:
        bench=1,
    priority: 1
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli look {wildcards.experiment} {wildcards.blocks} {output:q} "
        "{input.results:q} {params.planned} > {log:q} 2>&1"
