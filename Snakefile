# perfgrid: six classic runtime experiments from five seed posts, run on this machine.
# Run: snakemake --cores 16   (config/README.md describes every key)

configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/setup.smk"
include: "workflow/rules/programs.smk"
include: "workflow/rules/noise.smk"
include: "workflow/rules/benchmark.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/archive.smk"


# With a cluster executor (profiles/slurm) these run where Snakemake runs: they
# measure nothing and read only results. Every other job runs on a node.
localrules:
    all,
    plan,
    used_config,
    skipped,
    table,
    plots,
    report,
    archive,
    compare,


rule all:
    input:
        glue.all_outputs(SETTINGS, LAYOUT),
    default_target: True
