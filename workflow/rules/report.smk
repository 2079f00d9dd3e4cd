# Tables (with side tables, paths.py), plots and the report; code inputs: code(). They
# measure nothing: they run after the last benchmark job, side by side (glue.after_benchmarks).


rule table:
    input:
        results=lambda wildcards: runnable(wildcards.experiment),
        code=lambda wildcards: code("perfgrid.pipeline.cli:_table",
                                    f"perfgrid.experiments.{wildcards.experiment}"),
    output:
        table=report(
            LAYOUT.table(r"{experiment,\w+}"),
            caption="../report/table.rst",
            category="{experiment}",
            labels={"experiment": "{experiment}", "type": "table"},
        ),
        sides=LAYOUT.side_tables(r"{experiment,\w+}"),
    log:
        LAYOUT.log("{experiment}", "table.log"),
    priority: glue.after_benchmarks(PLAN)
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.pipeline.cli table {wildcards.experiment} {output.table:q} "
        "{input.results:q} > {log:q} 2>&1"


rule plots:
    input:
        table=LAYOUT.table("{experiment}"),
        sides=LAYOUT.side_tables("{experiment}"),
        code=lambda wildcards: code("perfgrid.pipeline.cli:_plots",
                                    f"perfgrid.experiments.{wildcards.experiment}.analysis"),
    output:
        figures=report(
            directory(LAYOUT.plot_dir("{experiment}")),
            patterns=["{figure}.png"],
            caption="../report/plots.rst",
            category="{experiment}",
            labels={"experiment": "{experiment}", "figure": "{figure}"},
        ),
    log:
        LAYOUT.log("{experiment}", "plots.log"),
    priority: glue.after_benchmarks(PLAN)
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.pipeline.cli plots {wildcards.experiment} {input.table:q} {output.figures:q} "
        "> {log:q} 2>&1"


rule report:
    input:
        tables=[t for e in SETTINGS["experiments"] for t in LAYOUT.table_files(e)],
        figures=[LAYOUT.plot_dir(e) for e in SETTINGS["experiments"]],
        machine=LAYOUT.machine,
        skipped=LAYOUT.skipped,
        used_config=LAYOUT.used_config,
        noise=[LAYOUT.noise_profile] if NOISE_BLOCKS else [],
        code=code("perfgrid.pipeline.cli:_report",
                  *(f"perfgrid.experiments.{e}.analysis" for e in SETTINGS["experiments"])),
    output:
        html=report(LAYOUT.report_html, caption="../report/report.rst", category="report"),
        md=LAYOUT.report_md,
        claims=LAYOUT.claims_figure,
        claims_table=LAYOUT.claims_table,
    log:
        LAYOUT.log("report.log"),
    params:
        experiments=SETTINGS["experiments"],
        fixture_facts=fixture_args("--fixture-facts", NEEDED_FIXTURES,
                                   lambda f: fixtures.facts_file(SETTINGS, f)),
        noise=SETTINGS["noise"],
        noise_profile=lambda w, input: input.noise[0] if input.noise else "none",
        root=lambda w, input: os.path.dirname(input.machine),
    priority: glue.after_benchmarks(PLAN)
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.pipeline.cli report --root {params.root:q} "
        "--experiments {params.experiments:q} --cv-threshold {params.noise[cv_threshold]} "
        "{params.fixture_facts} "
        "--noise-profile {params.noise_profile:q} "
        "--html {output.html:q} --md {output.md:q} > {log:q} 2>&1"
