# http (seed E5 a): one pyperf job per grid point; the job starts its own server
# workers (set-up, outside the timing), loads them and stops them.

rule http:
    input:
        workload=f"{SRC}/experiments/http.py",
        server=f"{SRC}/httpserver.py",
        load=f"{SRC}/httpload.py",
        beams=erlang_input("pg_http"),
    output:
        result_pattern("http"),
    log:
        log_pattern("http"),
    params:
        bench=bench_params("http"),
        options=http_options,
        erlang=erlang_options,
    wildcard_constraints:
        client="ab|builtin|openloop",
        keepalive="off|on",
        concurrency=r"\d+",
    threads: BENCH_THREADS
    resources:
        bench=1,
    priority: job_priority("http")
    conda:
        CONDA_ENV
    shell:
        "python -m perfgrid.bench http {params.bench} {params.options} {params.erlang} "
        "--result {output:q} > {log:q} 2>&1"
