# What every result set needs besides the benchmarks: machine facts, the config
# as used, the skipped points, and the random test file.


rule machine:
    output:
        LAYOUT.machine,
    log:
        LAYOUT.log("machine.log"),
    params:
        testfile=TESTFILE,
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli machine --testfile {params.testfile:q} {output:q} > {log:q} 2>&1"


rule used_config:
    output:
        LAYOUT.used_config,
    log:
        LAYOUT.log("used_config.log"),
    params:
        config=config,
    run:
        import yaml

        from perfgrid.atomic import write_text

        write_text(output[0], yaml.safe_dump(params.config, sort_keys=True))


rule skipped:
    output:
        LAYOUT.skipped,
    log:
        LAYOUT.log("skipped.log"),
    params:
        skipped=skipped_points(),
    run:
        from perfgrid.atomic import write_json

        write_json(output[0], params.skipped)


rule testfile:
    output:
        # temp: regenerated in seconds when needed, never archived; once every
        # benchmark that reads it is done, Snakemake removes it
        data=temp(TESTFILE),
        facts=TESTFILE + ".json",
    log:
        LAYOUT.log("testfile.log"),
    params:
        size=SETTINGS["testfile"]["size_bytes"],
        seed=SETTINGS["testfile"]["seed"],
    # alone on the machine, like a benchmark: its generation speed is recorded
    threads: BENCH_THREADS
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.cli testfile --size {params.size} --seed {params.seed} "
        "{output.data:q} {output.facts:q} > {log:q} 2>&1"
