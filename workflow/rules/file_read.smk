# file_read (seed E2): one pyperf job per grid point.


rule file_read:
    input:
        # the test file is generated or checked by rule testfile (setup.smk)
        ready=LAYOUT.testfile_ready,
        workload=f"{SRC}/experiments/file_read.py",
        beams=erlang_input("pg_file_read"),
    output:
        result_pattern("file_read"),
    log:
        log_pattern("file_read"),
    params:
        testfile=TESTFILE,
        bench=bench_params("file_read"),
        erlang=erlang_options,
    threads: BENCH_THREADS
    resources:
        bench=1,
    priority: job_priority("file_read")
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.bench file_read {params.bench} {params.erlang} "
        "--option testfile={params.testfile:q} --result {output:q} > {log:q} 2>&1"
