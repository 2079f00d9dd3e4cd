"""Faults, bad input and noise: an interrupted, misconfigured or disturbed run
never yields a wrong number silently, and nothing is lost."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psutil
import pyperf
import pytest
import yaml

from perfgrid.kit import atomic
from perfgrid.measure import counters, noise

from helpers import REPO, SNAKEMAKE, cpu_seconds, in_session, wait_for, write_config

GRID = {
    "host": "rel",
    "experiments": ["file_read"],
    # these runs test plumbing, not figures: never wait, and no noise profile
    "noise": {"busy_share": 1.0, "profile": {"blocks": 0}},
    "measure": {"counters": "none"},  # nor count
    "testfile": {"size": "16MiB", "seed": 5},
    "file_read": {
        # the fewest points an interrupt test needs: two recorded, one held, one waiting;
        # a held job (hold_a_benchmark_job), not the grid's length, keeps the run going
        "variants": ["read", "readinto", "dd"],
        "block_sizes": [4096, 65536],
        "caches": ["warm"],
        "measure": {"processes": 1, "values": 4, "warmups": 1, "loops": 1, "target_ci": None,
                    "claims": {"processes": 1, "values": 4, "target_ci": None, "rounds": 1}},
    },
}
POINTS = 6
VALUES = 4
#: the runs of the interrupt tests go as far as the benchmark jobs (and the test file they
#: read): those tests check the raw results only, and the table, plots and report after
#: them (about half a run's CPU time) are the same whether a run was interrupted or not
BENCHMARKS = ("--until", "file_read")
#: what Snakemake prints once it has taken a Ctrl-C
TERMINATING = "Terminating processes on user request"


def _as_in_a_terminal() -> None:
    """In the child: Ctrl-C's default action. A process started in the background by a
    non-interactive shell inherits SIGINT ignored, and Python then installs no handler of
    its own, so Snakemake would never see the interrupt this file sends it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(workdir: Path, *args: str) -> subprocess.Popen:
    cmd = [*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "config.yaml"), *args]
    return subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, preexec_fn=_as_in_a_terminal)


def finish(workdir: Path, *args: str) -> str:
    proc = start(workdir, "--cores", "2", *BENCHMARKS, *args)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    return out


def results(workdir: Path) -> list[Path]:
    return sorted((workdir / "results/rel/raw").rglob("*.json"))


def wait_for_results(workdir: Path, count: int, proc: subprocess.Popen,
                     timeout: float = 240) -> None:
    """Wait until ``count`` results are written; the deadline only stops a hung run."""
    deadline = time.monotonic() + timeout
    while len(results(workdir)) < count:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no results appeared"
        time.sleep(0.2)


def assert_no_orphans(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Nothing that the test's Snakemake (``proc``, ended) started is still running: no
    process is left in its session (:func:`helpers.in_session`), orphans included."""
    assert proc.poll() is not None, "Snakemake is still running"
    left = in_session(proc.pid)
    if left:
        wait_for(lambda: not in_session(proc.pid), grace)
        left = in_session(proc.pid)
    assert left == [], [p.pid for p in left]


def assert_complete(workdir: Path) -> None:
    files = results(workdir)
    assert len(files) == POINTS
    for path in files:
        assert len(pyperf.Benchmark.load(str(path)).get_values()) == VALUES
    assert not list((workdir / "results").rglob(".*.tmp*"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    write_config(tmp_path, GRID)
    return tmp_path


def _stdout(proc: psutil.Process) -> str | None:
    """Where ``proc``'s standard output goes (a path, ``pipe:[...]``), None if unknown."""
    try:
        return os.readlink(f"/proc/{proc.pid}/fd/1")
    except OSError:
        return None


def point_log(workdir: Path, target: str | None) -> Path | None:
    """``target`` if it is the log of one of ``workdir``'s benchmark points
    (``results/rel/logs/file_read/<axis>=<value>/...log``), else None."""
    logs = workdir / "results" / "rel" / "logs"
    if not target or not target.endswith(".log"):
        return None
    path = Path(target)
    if not path.is_relative_to(logs):
        return None
    parts = path.relative_to(logs).parts
    if parts[0] != "file_read" or len(parts) < 3 or not all("=" in p for p in parts[1:]):
        return None
    return path


def benchmark_jobs(proc: subprocess.Popen, workdir: Path) -> dict[int, Path]:
    """The benchmark jobs the test's Snakemake (``proc``) runs now, pid -> the point's log:
    in Snakemake's session, each the topmost process whose output goes to a point's log
    (the shell above it writes to Snakemake, the batches and workers below it to the same
    log). Found by what the test itself started, never by a program's name."""
    members = in_session(proc.pid)
    writes = {p.pid: point_log(workdir, _stdout(p)) for p in members}
    jobs = {}
    for member in members:
        log = writes[member.pid]
        with contextlib.suppress(psutil.NoSuchProcess):
            if log is not None and writes.get(member.ppid()) != log:
                jobs[member.pid] = log
    return jobs


def result_of(workdir: Path, log: Path) -> Path:
    """The result file of the point whose log is ``log`` (its twin under ``raw/``)."""
    logs = workdir / "results" / "rel" / "logs"
    return (workdir / "results" / "rel" / "raw" / log.relative_to(logs)).with_suffix(".json")


def _family(pid: int) -> list[psutil.Process]:
    """``pid``'s process and its live descendants."""
    with contextlib.suppress(psutil.NoSuchProcess):
        top = psutil.Process(pid)
        return [top, *top.children(recursive=True)]
    return []


def _suspend(pid: int) -> list[psutil.Process]:
    """SIGSTOP ``pid`` and every descendant, until none is left running (a child started
    while its parent was being stopped is stopped too); the processes stopped."""
    held: dict[int, psutil.Process] = {}
    while new := [p for p in _family(pid) if p.pid not in held]:
        for member in new:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.suspend()
                held[member.pid] = member

    def stopped() -> bool:
        for member in held.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                if member.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE):
                    return False
        return True

    assert wait_for(stopped, 10), "a held job did not stop"
    return list(held.values())


def resume(held: list[psutil.Process]) -> None:
    """SIGCONT what :func:`hold_a_benchmark_job` stopped (those still there)."""
    for member in held:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.resume()


def hold_a_benchmark_job(proc: subprocess.Popen, workdir: Path,
                         timeout: float = 240) -> tuple[Path, list[psutil.Process]]:
    """Stop (SIGSTOP) the next benchmark job whose point has no result yet, with all it
    started; (its log, the processes stopped). One benchmark job runs at a time (resource
    ``bench=1``), so while it is held no point can be finished: what the test does next
    meets a run in a known state, however slow the machine. A job caught after writing
    its result is let go, and the next one held."""
    deadline = time.monotonic() + timeout
    while True:
        for pid, log in benchmark_jobs(proc, workdir).items():
            held = _suspend(pid)
            if not result_of(workdir, log).exists():
                return log, held
            resume(held)
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no benchmark job without a result to hold"
        time.sleep(0.02)


def kill_jobs_until_snakemake_stops(proc: subprocess.Popen, workdir: Path,
                                    timeout: float = 180) -> str:
    """Kill every benchmark job that starts until Snakemake gives up: a failed job runs
    once more (the rules' retries), so one kill no longer stops a run."""
    deadline = time.monotonic() + timeout
    while True:
        for pid in benchmark_jobs(proc, workdir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=0.05)  # retried on timeout, nothing lost
            return out
        except subprocess.TimeoutExpired:
            assert time.monotonic() < deadline, "Snakemake went on after every job was killed"


@contextlib.contextmanager
def stopped_on_failure(proc: subprocess.Popen) -> Iterator[None]:
    """On a failure inside, end what the test started (Snakemake's session, held jobs
    included: SIGKILL ends a stopped process too), so nothing it started outlives it."""
    try:
        yield
    except BaseException:
        for member in in_session(proc.pid):
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        proc.kill()
        proc.communicate(timeout=60)
        raise


@pytest.mark.pipeline
def test_a_killed_benchmark_job_runs_once_more_and_the_run_completes(workdir):
    proc = start(workdir, "--cores", "2", *BENCHMARKS)
    with stopped_on_failure(proc):
        _, held = hold_a_benchmark_job(proc, workdir)  # so it cannot end before it is killed
        held[0].kill()  # the job; what it started dies with it (perfgrid.kit.lifetime)
        resume(held)
        out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    assert "Trying to restart job" in out
    assert_complete(workdir)
    assert_no_orphans(proc)


def _interrupt(proc: subprocess.Popen, workdir: Path, how: str,
               held: list[psutil.Process]) -> None:
    """Interrupt the run ``how``, with a benchmark job ``held``; return once Snakemake ended."""
    if how == "sigint":
        said: list[str] = []  # Snakemake's output, read as it comes
        reader = threading.Thread(target=lambda: said.extend(proc.stdout), daemon=True)
        reader.start()
        proc.send_signal(signal.SIGINT)
        # Snakemake reacts to Ctrl-C while the job is held (so the run cannot end first):
        # it says so, and waits for its jobs, so the held one must go on to end; or it ends.
        # Its word ends the wait at once; without it, 10 s
        wait_for(lambda: proc.poll() is not None
                 or any(TERMINATING in line for line in said), 10)
        resume(held)
        proc.wait(timeout=120)
        reader.join(timeout=60)
    elif how == "sigkill_snakemake":
        proc.kill()
        proc.wait(timeout=60)
        resume(held)  # its harness finds Snakemake gone, and ends its own processes
        proc.communicate(timeout=120)  # the output pipe closes once they have ended
    else:
        kill_jobs_until_snakemake_stops(proc, workdir)
        resume(held)


@pytest.mark.pipeline
@pytest.mark.parametrize("how", ["sigint", "sigkill_snakemake", "sigkill_job"])
def test_interrupted_run_resumes_with_nothing_lost(workdir, how):
    """Interrupted with at least two points recorded and two not yet measured: a benchmark
    job is held (stopped) from before the interrupt until Snakemake has reacted to it, so
    the run cannot finish first, and no rerun is needed to get past a race."""
    proc = start(workdir, "--cores", "2", *BENCHMARKS)
    with stopped_on_failure(proc):
        wait_for_results(workdir, 2, proc)
        _, held = hold_a_benchmark_job(proc, workdir)
        # every result but the held job's (it has none yet) is of a job Snakemake finished:
        # one benchmark job runs at a time (resource bench=1), and Snakemake records a job
        # as complete before it frees the job's resources for the next one
        done_before = {p: p.stat().st_mtime_ns for p in results(workdir)}
        assert len(done_before) >= 2
        waiting = POINTS - len(results(workdir)) - 1  # besides the held one
        assert waiting >= 1, f"the run measured {POINTS - 1} points before one was held"
        _interrupt(proc, workdir, how, held)
    assert_no_orphans(proc)
    assert 2 <= len(results(workdir)) < POINTS
    if how == "sigkill_snakemake":  # a killed Snakemake leaves its lock behind
        finish(workdir, "--unlock")
    finish(workdir)
    assert_complete(workdir)
    # only the incomplete jobs ran again: results recorded as complete are untouched
    assert all(p.stat().st_mtime_ns == m for p, m in done_before.items())


@pytest.mark.pipeline
def test_second_run_on_the_same_folder_is_refused(workdir):
    first = start(workdir, "--cores", "2", *BENCHMARKS)
    with stopped_on_failure(first):
        wait_for_results(workdir, 1, first)
        _, held = hold_a_benchmark_job(first, workdir)  # the first run cannot end meanwhile
        second = start(workdir, "--cores", "2", *BENCHMARKS)
        out, _ = second.communicate(timeout=120)
        resume(held)
    assert second.returncode != 0
    assert "cannot be locked" in out or "LockException" in out
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]
    assert_complete(workdir)


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True)
    return done.returncode == 0


@pytest.fixture
def small_fs(tmp_path: Path):
    mount = tmp_path / "small"
    if os.geteuid() != 0 or not _tmpfs(mount, "2m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.pipeline
def test_test_file_without_room_fails_before_any_job(workdir, small_fs):
    write_config(workdir, {**GRID, "testfile": {"size": "8MiB", "path": str(small_fs / "t.bin")}})
    proc = start(workdir, "--cores", "1")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "testfile.size" in out and "8,388,608 bytes" in out and "free" in out
    assert list(small_fs.iterdir()) == []
    assert not (workdir / "results").exists()


@pytest.mark.pipeline
def test_unwritable_results_folder_fails_with_the_path(workdir, small_fs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    write_config(workdir, {**GRID, "results": str(small_fs / "results"),
                           "testfile": {"size": "1MiB", "path": str(workdir / "t.bin")}})
    proc = start(workdir, "--cores", "1")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "cannot write results" in out and str(small_fs) in out


def test_full_disk_half_way_leaves_no_partial_file(small_fs):
    target = small_fs / "result.json"
    with pytest.raises(OSError):
        atomic.write_json(target, {"values": "x" * (4 << 20)})
    assert list(small_fs.iterdir()) == []


QUICK = yaml.safe_load((REPO / "config" / "quick.yaml").read_text())

#: the run's experiments, each on a tiny grid; ring's holds the rows of three tools (a C
#: compiler, Erlang, uvloop), so that three experiments, not five, show every tool's skip
#: (their plots and tables are most of the run; each experiment's ``unavailable`` is also
#: tested in its own test file)
SECTIONS = {
    "file_read": {"variants": ["read", "fio"], "block_sizes": [65536],
                  "parallel_block_sizes": [1048576], "workers": [1], "bindings": ["none"],
                  "caches": ["warm"]},
    "http": {"servers": ["asyncio"], "clients": ["ab", "builtin"], "workers": [1],
             "bindings": ["none"], "concurrency": [10], "requests": 200, "extra_grids": []},
    # asyncio and thread: the points of a claim, counted (for the perf-missing test)
    "ring": {"variants": ["asyncio", "thread", "native", "erlang", "uvloop"], "workers": [2],
             "bindings": ["none"], "erlang": {"workers": [2], "bindings": ["none"]}},
}
# tool(s) hidden, Python module hidden, the experiment, the variants it skips
MISSING = {
    "fio": (["fio"], None, "file_read", {"fio"}),
    "ab": (["ab"], None, "http", {"asyncio"}),  # http's variant is its server
    "gcc": (["cc", "gcc"], None, "ring", {"native"}),
    "erl": (["erl", "erlc"], None, "ring", {"erlang"}),
    "uvloop": ([], "uvloop", "ring", {"uvloop"}),
}


#: hidden as well: without perf no point is skipped, the counting passes cannot run
NO_COUNTING = "perf"


@pytest.fixture(scope="module")
def without_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of the SECTIONS experiments with all of MISSING's tools and modules hidden
    (each hides its own rows, so one run serves every case), and perf."""
    root = tmp_path_factory.mktemp("missing")
    # a PATH with everything in /usr/local/bin, /usr/bin and /bin but the tools
    hidden = root / "bin"
    hidden.mkdir()
    tools = {tool for spec in MISSING.values() for tool in spec[0]} | {NO_COUNTING}
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for name in os.listdir(folder):
            if name not in tools and not (hidden / name).exists():
                (hidden / name).symlink_to(Path(folder) / name)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{hidden}"}
    stub = root / "stub"  # first on the path: modules that refuse to import
    stub.mkdir()
    for module in {spec[1] for spec in MISSING.values()} - {None}:
        (stub / f"{module}.py").write_text(f"raise ImportError('{module} hidden by a test')\n")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stub), os.environ.get("PYTHONPATH")]))
    # one process a claim point (not quick's three): these tests read which rows ran, not
    # their intervals
    measure = {**QUICK["measure"], "claims": {**QUICK["measure"]["claims"], "processes": 1}}
    config = {**QUICK, "host": "rel", "experiments": list(SECTIONS), "measure": measure,
              "noise": {"busy_share": 1.0, "profile": {"blocks": 0}}}
    for experiment, section in SECTIONS.items():
        config[experiment] = {**QUICK[experiment], **section}
    workdir = root / "work"
    workdir.mkdir()
    write_config(workdir, config)
    done = subprocess.run(
        [*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(workdir / "config.yaml"), "--cores", "2"],
        cwd=workdir, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return workdir


@pytest.mark.pipeline
@pytest.mark.parametrize("missing", sorted(MISSING))
def test_missing_tool_rows_are_skipped_with_the_reason(without_tools, missing):
    tools, _, experiment, variants = MISSING[missing]
    workdir = without_tools
    skipped = [s for s in json.loads((workdir / "results/rel/skipped.json").read_text())
               if s["experiment"] == experiment]
    # the experiment skips the rows of its hidden tools, and no other
    assert {s["variant"] for s in skipped} == set().union(
        *(spec[3] for spec in MISSING.values() if spec[2] == experiment))
    mine = [s for s in skipped if s["variant"] in variants]
    assert mine and all(missing in s["reason"] or tools[0] in s["reason"] for s in mine)
    report = (workdir / "results/rel/report.md").read_text()
    assert "Skipped points" in report and all(s["reason"] in report for s in mine)
    ran = list((workdir / "results/rel/raw" / experiment).rglob("*.json"))
    assert ran  # the rest of the experiment still ran


@pytest.mark.pipeline
def test_without_perf_points_are_measured_and_the_report_says_why_not_counted(without_tools):
    """perf missing: the points chosen for counting are measured as usual, their counters
    left out (never zeros) with the reason in column ``counters``; the report renders and
    lists them, and a claim whose points were to be counted says why it has no counters."""
    workdir = without_tools
    reason = "perf missing: perf not found on PATH"
    names = set(SECTIONS)
    figures = [c for c in counters.COLUMNS if c.endswith("_per_unit")] + [
        "cpu_sys_share", "cpus_utilized"]
    uncounted = 0
    for experiment in sorted(names):
        table = pd.read_csv(workdir / f"results/rel/tables/{experiment}.csv")
        missing = table["counters"].str.startswith(reason)
        assert (missing | table["counters"].str.startswith("not counted")).all(), experiment
        assert table.loc[missing, "rate"].gt(0).all()
        assert table.loc[missing, figures].isna().all().all()
        uncounted += missing.sum()
    assert uncounted > 0  # measure.counters: claims chose some points
    md = (workdir / "results/rel/report.md").read_text()
    html = (workdir / "results/rel/report.html").read_text()
    assert "### Points whose counting pass did not run" in md and reason in md
    assert "Points whose counting pass did not run" in html and reason in html
    claims = md.split("## Claims", 1)[1].split("## Precision", 1)[0]
    rows = [line for line in claims.splitlines()
            if line.split(" | ", 1)[0].removeprefix("| ") in names]
    whys = [re.split(r"(?<!\\)\|", line)[-2].strip() for line in rows]  # the last column
    assert any(w.startswith(f"no counters: {reason}") for w in whys), whys
    assert all(w == "" or w.startswith("no counters: ") for w in whys), whys  # no figures


@pytest.mark.serial  # it loads every CPU on purpose
def test_busy_machine_is_waited_for_then_flagged():
    """One hog per CPU this test may use: the share counts those CPUs only."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(len(os.sched_getaffinity(0)))]
    try:
        # each hog spinning (its CPU time growing) before the machine is looked at
        assert wait_for(lambda: all(cpu_seconds([psutil.Process(h.pid)]) >= 0.2
                                    for h in hogs), 30), "the hogs never ran"
        seen = noise.wait_until_quiet(0.25, checks=2)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert seen["perfgrid_busy_checks"] == 2
    assert seen["perfgrid_busy_before"] == 1 and seen["perfgrid_busy_share"] > 0.25


def test_busy_share_counts_only_the_allowed_cpus(monkeypatch):
    """A CPU outside this process's affinity, however busy, does not make it busy."""
    monkeypatch.setattr(noise.psutil, "cpu_percent",
                        lambda interval, percpu: [100.0, 10.0, 30.0, 100.0])
    monkeypatch.setattr(noise.os, "sched_getaffinity", lambda pid: {1, 2})
    assert noise.busy_share(0) == pytest.approx(0.2)


def test_quiet_scheduler_stops_the_rate_limiter_once():
    """Snakemake's job-rate limiter wakes its scheduler once a second per finished job;
    a local run drops it (and says so), and a second call finds nothing to stop."""
    scheduler = types.SimpleNamespace(job_rate_limiter=object())
    assert noise.quiet_scheduler(scheduler) is True
    assert scheduler.job_rate_limiter is None
    assert noise.quiet_scheduler(scheduler) is False
    assert noise.quiet_scheduler(object()) is False  # a Snakemake without the attribute
