# Targets outside `all`: `snakemake --cores 1 archive`, `snakemake --cores 1 compare`.
import glob

from perfgrid.archive import archive_name

ARCHIVE = f"{SETTINGS['results']}/archive/{archive_name(SETTINGS['host'])}.tar.gz"
HOSTS_WITH_TABLES = sorted(
    {os.path.basename(os.path.dirname(os.path.dirname(p)))
     for p in glob.glob(f"{SETTINGS['results']}/*/tables/*.csv")}
)


rule archive:
    input:
        LAYOUT.report_html,
        LAYOUT.report_md,
    output:
        ARCHIVE,
    log:
        LAYOUT.log("archive.log"),
    params:
        root=lambda w, input: os.path.dirname(input[0]),
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli archive {params.root:q} {output:q} > {log:q} 2>&1"


rule compare:
    input:
        [Layout.for_host(h, SETTINGS["results"]).table(e)
         for h in HOSTS_WITH_TABLES for e in experiments.available()
         if os.path.exists(Layout.for_host(h, SETTINGS["results"]).table(e))],
    output:
        md=f"{SETTINGS['results']}/compare/summary.md",
        html=f"{SETTINGS['results']}/compare/summary.html",
    log:
        f"{SETTINGS['results']}/compare/compare.log",
    params:
        roots=[f"{SETTINGS['results']}/{h}" for h in HOSTS_WITH_TABLES],
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli summary {params.roots:q} --out-md {output.md:q} "
        "--out-html {output.html:q} > {log:q} 2>&1"
