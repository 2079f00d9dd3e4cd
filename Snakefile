# perfgrid: reproduce five classic runtime experiments on this machine.
# Run: snakemake --cores 16   (config/README.md describes every key)

configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/file_read.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        all_outputs(),
    default_target: True
