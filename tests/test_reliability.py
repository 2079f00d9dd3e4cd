"""Faults, bad input and noise: an interrupted, misconfigured or disturbed run
never yields a wrong number silently, and nothing is lost."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import psutil
import pyperf
import pytest
import yaml

from perfgrid import atomic, counters, noise

from helpers import REPO, SNAKEMAKE, write_config

pytestmark = pytest.mark.pipeline

GRID = {
    "host": "rel",
    "experiments": ["file_read"],
    # these runs test plumbing, not figures: never wait, and no noise profile
    "noise": {"busy_share": 1.0, "profile": {"blocks": 0}},
    "measure": {"counters": "none"},  # nor count
    "testfile": {"size": "32MiB", "seed": 5},
    "file_read": {
        "variants": ["read", "readinto", "dd"],
        "block_sizes": [1024, 4096, 65536],
        "caches": ["warm"],
        # enough values that an interrupt lands before the last point, even on a busy machine
        "measure": {"processes": 1, "values": 8, "warmups": 1, "loops": 1, "target_ci": None,
                    "claims": {"processes": 1, "values": 8, "target_ci": None, "rounds": 1}},
    },
}
POINTS = 9


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
    proc = start(workdir, "--cores", "2", *args)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    return out


def results(workdir: Path) -> list[Path]:
    return sorted((workdir / "results/rel/raw").rglob("*.json"))


def _record(workdir: Path, kind: str, output: Path) -> Path:
    """Where Snakemake keeps its ``kind`` record (``metadata`` or ``incomplete``) of
    ``output``, as snakemake.persistence names it: the path relative to the working
    folder in URL-safe base64, cut into parts of at most 254 characters."""
    name = base64.urlsafe_b64encode(str(output.relative_to(workdir)).encode()).decode()
    parts = [name[i:i + 254] for i in range(0, len(name), 254)]
    return workdir / ".snakemake" / kind / Path(*[f"@{p}" for p in parts[:-1]], parts[-1])


def recorded(workdir: Path) -> list[Path]:
    """The results Snakemake has recorded as complete, so a resumed run keeps them: when a
    job ends it writes each output's metadata record, then removes its incomplete marker."""
    return [p for p in results(workdir)
            if _record(workdir, "metadata", p).exists()
            and not _record(workdir, "incomplete", p).exists()]


def wait_for_results(workdir: Path, count: int, proc: subprocess.Popen, timeout: float = 240,
                     found: Callable[[Path], list[Path]] = results) -> None:
    """Wait until ``found`` lists ``count`` results; the deadline only stops a hung run."""
    deadline = time.monotonic() + timeout
    while len(found(workdir)) < count:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no results appeared"
        time.sleep(0.2)


def bench_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any("perfgrid.bench" in part for part in cmd) and "rel" in " ".join(cmd):
            found.append(proc)
    return found


def assert_no_orphans(grace: float = 10.0) -> None:
    deadline = time.monotonic() + grace
    while bench_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert bench_processes() == []


def assert_complete(workdir: Path) -> None:
    files = results(workdir)
    assert len(files) == POINTS
    for path in files:
        assert len(pyperf.Benchmark.load(str(path)).get_values()) == 8
    assert not list((workdir / "results").rglob(".*.tmp*"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    write_config(tmp_path, GRID)
    return tmp_path


def benchmark_jobs() -> list[psutil.Process]:
    """The benchmark jobs Snakemake started (not the pyperf workers they start)."""
    return [p for p in bench_processes() if "--worker" not in p.cmdline()]


def kill_jobs_until_snakemake_stops(proc: subprocess.Popen, timeout: float = 180) -> str:
    """Kill every benchmark job that starts until Snakemake gives up: a failed job runs
    once more (the rules' retries), so one kill no longer stops a run."""
    deadline = time.monotonic() + timeout
    while True:
        for job in benchmark_jobs():
            with contextlib.suppress(psutil.NoSuchProcess):
                job.kill()
        try:
            out, _ = proc.communicate(timeout=0.05)  # retried on timeout, nothing lost
            return out
        except subprocess.TimeoutExpired:
            assert time.monotonic() < deadline, "Snakemake went on after every job was killed"


def test_a_killed_benchmark_job_runs_once_more_and_the_run_completes(workdir):
    proc = start(workdir, "--cores", "2")
    deadline = time.monotonic() + 120
    while not (jobs := benchmark_jobs()):
        assert proc.poll() is None and time.monotonic() < deadline, "no benchmark job started"
        time.sleep(0.05)
    jobs[0].kill()
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    assert "Trying to restart job" in out
    assert_complete(workdir)
    assert_no_orphans()


@pytest.mark.parametrize("how", ["sigint", "sigkill_snakemake", "sigkill_job"])
def test_interrupted_run_resumes_with_nothing_lost(workdir, how):
    for _attempt in range(5):  # on a loaded machine a Ctrl-C can come after the last point
        proc = start(workdir, "--cores", "2")
        wait_for_results(workdir, 2, proc, found=recorded)
        # results Snakemake had recorded as complete before the interrupt (it may record
        # more before the signal lands: those are not asserted on)
        done_before = {p: p.stat().st_mtime_ns for p in recorded(workdir)}
        if how == "sigint":
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=120)
        elif how == "sigkill_snakemake":
            proc.kill()
            proc.communicate(timeout=120)
        else:
            kill_jobs_until_snakemake_stops(proc)
        assert_no_orphans()
        if len(results(workdir)) < POINTS:
            break
        for folder in ("results", ".snakemake"):  # it all finished first: interrupt again
            shutil.rmtree(workdir / folder, ignore_errors=True)
    assert 2 <= len(results(workdir)) < POINTS
    assert len(done_before) >= 2
    if how == "sigkill_snakemake":  # a killed Snakemake leaves its lock behind
        finish(workdir, "--unlock")
    finish(workdir)
    assert_complete(workdir)
    # only the incomplete jobs ran again: results recorded as complete are untouched
    assert all(p.stat().st_mtime_ns == m for p, m in done_before.items())


def test_second_run_on_the_same_folder_is_refused(workdir):
    first = start(workdir, "--cores", "2")
    wait_for_results(workdir, 1, first)
    second = start(workdir, "--cores", "2")
    out, _ = second.communicate(timeout=120)
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


def test_test_file_without_room_fails_before_any_job(workdir, small_fs):
    write_config(workdir, {**GRID, "testfile": {"size": "8MiB", "path": str(small_fs / "t.bin")}})
    proc = start(workdir, "--cores", "1")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "testfile.size" in out and "8,388,608 bytes" in out and "free" in out
    assert list(small_fs.iterdir()) == []
    assert not (workdir / "results").exists()


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

# tool(s) hidden, Python module hidden, the experiment's tiny section, the skipped variants
MISSING = {
    "fio": (["fio"], None, "file_read", {
        "variants": ["read", "fio"], "block_sizes": [65536], "parallel_block_sizes": [1048576],
        "workers": [1], "bindings": ["none"], "caches": ["warm"]}, {"fio"}),
    "ab": (["ab"], None, "http", {
        "servers": ["asyncio"], "clients": ["ab", "builtin"], "workers": [1],
        "bindings": ["none"], "concurrency": [10], "requests": 200, "extra_grids": []},
        {"asyncio"}),
    "gcc": (["cc", "gcc"], None, "syscall", {
        "variants": ["python", "native"], "calls": ["getuid"], "workers": [1],
        "bindings": ["none"]}, {"native"}),
    # asyncio and thread: the points of a claim, counted (for the perf-missing test)
    "erl": (["erl", "erlc"], None, "ring", {
        "variants": ["asyncio", "thread", "erlang"], "workers": [2], "bindings": ["none"],
        "erlang": {"workers": [2], "bindings": ["none"]}}, {"erlang"}),
    "uvloop": ([], "uvloop", "timers", {
        "variants": ["asyncio", "uvloop"], "seeding": ["independent"], "gc": ["off"],
        "tasks": [1000], "rounds": [2], "max_sleep": [0.1], "extra_grids": []}, {"uvloop"}),
}


#: hidden as well: without perf no point is skipped, the counting passes cannot run
NO_COUNTING = "perf"


@pytest.fixture(scope="module")
def without_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of every MISSING experiment with all of MISSING's tools and modules hidden
    (each hides a different experiment's rows, so one run serves every case), and perf."""
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
    config = {**QUICK, "host": "rel", "experiments": [spec[2] for spec in MISSING.values()],
              "noise": {"busy_share": 1.0, "profile": {"blocks": 0}}}
    for _, _, experiment, section, _ in MISSING.values():
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


@pytest.mark.parametrize("missing", sorted(MISSING))
def test_missing_tool_rows_are_skipped_with_the_reason(without_tools, missing):
    tools, _, experiment, _, variants = MISSING[missing]
    workdir = without_tools
    skipped = [s for s in json.loads((workdir / "results/rel/skipped.json").read_text())
               if s["experiment"] == experiment]
    assert skipped and {s["variant"] for s in skipped} == variants
    assert all(missing in s["reason"] or tools[0] in s["reason"] for s in skipped)
    report = (workdir / "results/rel/report.md").read_text()
    assert "Skipped points" in report and skipped[0]["reason"] in report
    ran = list((workdir / "results/rel/raw" / experiment).rglob("*.json"))
    assert ran  # the rest of the experiment still ran


def test_without_perf_points_are_measured_and_the_report_says_why_not_counted(without_tools):
    """perf missing: the points chosen for counting are measured as usual, their counters
    left out (never zeros) with the reason in column ``counters``; the report renders and
    lists them, and a claim whose points were to be counted says why it has no counters."""
    workdir = without_tools
    reason = "perf missing: perf not found on PATH"
    names = {spec[2] for spec in MISSING.values()}
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


def test_busy_machine_is_waited_for_then_flagged():
    """One hog per CPU this test may use: the share counts those CPUs only."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(len(os.sched_getaffinity(0)))]
    try:
        time.sleep(0.3)
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
