# Targets outside `all`: `snakemake --cores 1 archive`, `snakemake --cores 1 compare`.
from perfgrid.publish.archive import archive_name
from perfgrid.kit.paths import every_table, side_tables_of

ARCHIVE = f"{SETTINGS['results']}/archive/{archive_name(SETTINGS['host'])}.tar.gz"


rule archive:
    input:
        LAYOUT.report_html,
        LAYOUT.report_md,
    output:
        archive=ARCHIVE,
        sha256=f"{ARCHIVE}.sha256",
    log:
        LAYOUT.log("archive.log"),
    params:
        root=lambda w, input: os.path.dirname(input[0]),
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.pipeline.cli archive {params.root:q} {output.archive:q} > {log:q} 2>&1"


rule compare:
    # every table of every host under results/ and its side tables (a host's tables from
    # before side tables have none), looked for only when compare is asked for
    input:
        lambda w: [str(path) for table in every_table(SETTINGS["results"])
                   for path in [table, *side_tables_of(table).values()] if path.exists()],
    output:
        md=f"{SETTINGS['results']}/compare/summary.md",
        html=f"{SETTINGS['results']}/compare/summary.html",
    log:
        f"{SETTINGS['results']}/compare/compare.log",
    params:
        results=lambda w, output: os.path.dirname(os.path.dirname(output.md)),
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.pipeline.cli summary {params.results:q} --out-md {output.md:q} "
        "--out-html {output.html:q} > {log:q} 2>&1"
