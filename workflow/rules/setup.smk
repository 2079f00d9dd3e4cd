# Besides the benchmarks: the plan, machine facts, the config as used, skipped points, fixtures.


rule plan:
    # written again when the plan changes (its digest); no job takes it as input (perfgrid.pipeline.glue)
    output:
        plan=LAYOUT.plan,
    log:
        LAYOUT.log("plan.log"),
    params:
        digest=PLAN.digest(),
    run:
        plan.write(PLAN, output.plan, log[0])


rule machine:
    output:
        LAYOUT.machine,
    log:
        LAYOUT.log("machine.log"),
    params:
        fixtures=fixture_args("--fixture", FIXTURES, lambda f: SETTINGS[f.name]["path"]),
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.pipeline.cli machine {params.fixtures} {output:q} > {log:q} 2>&1"


rule used_config:
    output:
        LAYOUT.used_config,
    log:
        LAYOUT.log("used_config.log"),
    params:
        config=json.dumps(config, sort_keys=True),
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.pipeline.cli used-config --config {params.config:q} {output:q} > {log:q} 2>&1"


rule skipped:
    # params: the list the DAG was built with, so it reruns when the list changes
    input:
        LAYOUT.used_config,
    output:
        LAYOUT.skipped,
    log:
        LAYOUT.log("skipped.log"),
    params:
        skipped=planning.skipped(SETTINGS),
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.pipeline.cli skipped {input:q} {output:q} > {log:q} 2>&1"


# One rule per fixture (perfgrid.measure.fixtures), named after it (rule testfile): the data file
# is no declared output; the job writes the ready note the benchmarks wait for.
for fixture in FIXTURES:

    rule:
        name:
            fixture.name
        output:
            ready=temp(LAYOUT.fixture_ready(fixture.name)),
        log:
            LAYOUT.log(f"{fixture.name}.log"),
        params:
            path=SETTINGS[fixture.name]["path"],
            args=fixture.make_args(SETTINGS[fixture.name]),
            record=glue.fixture_record(SETTINGS, LAYOUT, fixture),
        threads: BENCH_THREADS
        conda:
            CONDA_ENV
        shell:
            f"python -m perfgrid.pipeline.cli {fixture.name} {{params.args}} "
            "{params.record} -- {params.path:q} {output.ready:q} > {log:q} 2>&1"
