# Looks at an experiment's claims after some of its rounds (perfgrid.looks): the rounds
# after a look are measured only for the points of claims still undecided that can still
# be decided. Only experiments with `measure.claims.looks` have them; a look waits for
# every round before it of the experiment's claim points, and is a checkpoint: the table
# (and the next look) ask for a later round only where the look left its point open.


checkpoint look:
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
        # by name only once an earlier look has run: until then a later look's input is a
        # placeholder for that look's record (a dry run shows it so)
        results=lambda w, input: list(getattr(input, "results", [])),
    # alone, as a benchmark job is: it reads and bootstraps while nothing is measured
    resources:
        bench=1,
    priority: 1
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli look {wildcards.experiment} {wildcards.blocks} {output:q} "
        "{params.results:q} {params.planned} > {log:q} 2>&1"
