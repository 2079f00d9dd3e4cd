# What every result set needs besides the benchmarks: machine facts, the config
# as used, the skipped points, and the fixtures (the random test file).


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
        "python -m perfgrid.cli machine {params.fixtures} {output:q} > {log:q} 2>&1"


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
        "python -m perfgrid.cli used-config --config {params.config:q} {output:q} > {log:q} 2>&1"


rule skipped:
    # The job works the list out again from the config as used (hundreds of points do not
    # fit on a command line); the params hold the list the DAG was built with, so that
    # Snakemake reruns the job when it changes (a tool installed or removed).
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
        "python -m perfgrid.cli skipped {input:q} {output:q} > {log:q} 2>&1"


# One rule per fixture (perfgrid.fixtures), named after it: rule testfile.
for fixture in FIXTURES:

    rule:
        # The data file is no declared output: Snakemake deletes the outputs of a failed
        # job and temp() outputs once used, and the file at <fixture>.path may be a file
        # perfgrid did not create. The job generates it where nothing is (linked into
        # place, never replacing), or checks the one perfgrid generated there before
        # (sidecar and SHA-256), and then writes the ready note the benchmarks wait for.
        name:
            fixture.name
        output:
            # temp: made again (in seconds) whenever a benchmark needs the file
            ready=temp(LAYOUT.fixture_ready(fixture.name)),
        log:
            LAYOUT.log(f"{fixture.name}.log"),
        params:
            path=SETTINGS[fixture.name]["path"],
            args=fixture.make_args(SETTINGS[fixture.name]),
            # perfgrid removes only a file it generated at the default path in this run
            record=(f"--record {shlex.quote(str(LAYOUT.fixture_record(fixture.name)))}"
                    if os.path.abspath(SETTINGS[fixture.name]["path"])
                    == os.path.abspath(LAYOUT.fixture_default(fixture.file_name)) else ""),
        # alone on the machine, like a benchmark: its generation speed is recorded
        threads: BENCH_THREADS
        conda:
            CONDA_ENV
        shell:
            f"python -m perfgrid.cli {fixture.name} {{params.args}} "
            "{params.record} -- {params.path:q} {output.ready:q} > {log:q} 2>&1"
