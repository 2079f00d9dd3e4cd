"""Nothing a job starts outlives it: every kind of child dies when its job is SIGKILLed.

Each kill test starts a small "job" (a Python process) that starts one kind
of child through perfgrid's own code path, waits until the child runs,
SIGKILLs the job and waits (bounded, not a speed assertion) until none of
the job's descendants is left.
"""

from __future__ import annotations

import ast
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter

import psutil
import pytest

from perfgrid.design import jobs
from perfgrid.kit import lifetime

from helpers import REPO, cpu_seconds, need, still_alive_after, wait_for

SRC = REPO / "src" / "perfgrid"
GONE_WITHIN_S = 10.0
#: the name the kernel gives a process running this Python (``comm``: 15 characters)
PYTHON = os.path.basename(sys.executable)[:15]


def _wait_gone(pids: list[int]) -> list[int]:
    """The pids still alive after at most GONE_WITHIN_S seconds of polling."""
    return still_alive_after(pids, GONE_WITHIN_S)


def _describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            out.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline()[:4])}")
    return out


def _family(job: subprocess.Popen) -> list[psutil.Process]:
    """The job's live descendants (none once it is gone)."""
    try:
        found = psutil.Process(job.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    alive = []
    for proc in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def _names(procs: list[psutil.Process]) -> Counter[str]:
    """How many of ``procs`` run each program (by the name the kernel gives it)."""
    out: Counter[str] = Counter()
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            out[proc.name()] += 1
    return out


def kill_job_and_check(script: str, family: dict[str, int], tmp_path, *args: str) -> list[str]:
    """Run ``script`` (argv: tmp_path, ``args``) as a job; once its whole ``family`` runs
    (program name -> how many of the job's descendants run it: the child and the children
    the child starts in turn) and the job wrote ``tmp_path/ready``, if it writes one,
    SIGKILL the job; return the names of the descendants seen (and assert they all went).

    Waiting for the family, not for a while, means no grandchild is still to come when
    the job is killed, on a machine however slow."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "src"), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    job = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(tmp_path), *args],
                           env=env, stderr=subprocess.PIPE, text=True)
    found: list[psutil.Process] = []
    wants_ready = "ready" in script

    def complete() -> bool:
        nonlocal found
        if job.poll() is not None:
            pytest.fail(f"the job ended ({job.returncode}) before its family ran: "
                        f"{job.stderr.read()[-2000:]}")
        found = _family(job)
        running = _names(found)
        return (all(running[name] >= count for name, count in family.items())
                and (not wants_ready or (tmp_path / "ready").exists()))

    try:
        assert wait_for(complete, 60), f"after 60 s the job runs {dict(_names(found))}, " \
                                       f"not {family}"
        seen = sorted(_names(found))
        pids = [p.pid for p in found]
        os.kill(job.pid, signal.SIGKILL)
        job.wait(10)
        left = _wait_gone(pids)
        assert not left, f"alive {GONE_WITHIN_S:g} s after the job's SIGKILL: {_describe(left)}"
        return seen
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        for proc in found:  # a failed test must not leave its own children behind
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        job.stderr.close()


# --- the launcher ---------------------------------------------------------------------


def test_launcher_runs_the_program_with_its_cpus():
    cpu = sorted(os.sched_getaffinity(0))[0]
    cmd = lifetime.command(["grep", "-e", "Cpus_allowed_list", "/proc/self/status"], [cpu])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["Cpus_allowed_list:", str(cpu)]


def test_launcher_exits_if_its_parent_is_already_gone():
    """The race: the job died between fork and prctl; the child must not run the program."""
    cmd = lifetime.command(["touch", "/nonexistent-should-not-run"])
    cmd[cmd.index(str(os.getpid()))] = str(os.getppid())  # a parent that is not ours
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == lifetime.ORPHANED and "already gone" in proc.stderr


def test_launcher_reports_a_missing_program():
    proc = subprocess.run(lifetime.command(["perfgrid-no-such-tool"]), capture_output=True,
                          text=True)
    assert proc.returncode == 127 and "perfgrid-no-such-tool" in proc.stderr


def test_pyperf_worker_whose_manager_is_gone_does_not_measure(tmp_path):
    """A worker orphaned before its prctl exits instead of measuring without the lock."""
    cmd = [sys.executable, "-m", "perfgrid.measure.bench", "syscall", "--worker", "--parent",
           str(os.getppid()), "--point", "variant=python", "--point", "call=getuid",
           "--point", "binding=none", "--point", "workers=1", "--loops", "1", "--values", "1",
           "--warmups", "0", "--output", str(tmp_path / "w.json")]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == lifetime.ORPHANED, proc.stderr
    assert "already gone" in proc.stderr and not (tmp_path / "w.json").exists()


def test_pyperf_manager_passes_its_pid_to_workers():
    from perfgrid.measure import bench

    cmd: list[str] = []
    bench._forward(cmd, type("Args", (), {"experiment": "x", "point": [], "option": []})())
    assert cmd[cmd.index("--parent") + 1] == str(os.getpid())


def _subprocess_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"
                and node.func.attr in {"run", "Popen", "call", "check_call", "check_output"}):
            yield node


def test_every_subprocess_start_goes_through_the_launcher():
    """One way to start a program: ``subprocess.X(lifetime.command(...))``, no preexec_fn."""
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for call in _subprocess_calls(tree):
            first = call.args[0] if call.args else None
            through = (isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute)
                       and first.func.attr == "command"
                       and getattr(first.func.value, "id", "") == "lifetime")
            # inside lifetime.py itself (run_json) the launcher is plain ``command``
            through = through or (path.name == "lifetime.py" and isinstance(first, ast.Call)
                                  and getattr(first.func, "id", "") == "command")
            keywords = {k.arg for k in call.keywords}
            if not through or keywords & {"preexec_fn", "process_group"}:
                wrong.append(f"{path.relative_to(REPO)}:{call.lineno}")
    assert not wrong


# --- kill a job, its children go -------------------------------------------------------


def test_killed_job_takes_dd_with_it(tmp_path):
    need("dd")
    seen = kill_job_and_check("""
        from perfgrid.experiments import file_read
        file_read.dd_seconds("/dev/zero", 1)  # never ends
        """, {"dd": 1}, tmp_path)
    assert seen == ["dd"]


def test_killed_job_takes_fio_with_it(tmp_path):
    need("fio")
    seen = kill_job_and_check("""
        import sys
        from pathlib import Path
        from perfgrid.experiments import file_read
        from perfgrid.kit import binding
        data = Path(sys.argv[1]) / "f.bin"
        data.write_bytes(b"x" * (1 << 20))
        cmd = file_read.fio_command(str(data), 4096, 2, "none", binding.plan("none", 2))
        file_read.fio_seconds(cmd + ["--time_based", "--runtime=120"])
        """, {"fio": 1}, tmp_path)
    assert seen == ["fio"]


def test_killed_job_takes_ab_with_it(tmp_path):
    need("ab")
    silent = socket.socket()  # accepts (in the kernel), never answers: ab waits 30 s
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    try:
        seen = kill_job_and_check("""
            import sys
            from perfgrid.experiments.http import load
            load.run_ab(int(sys.argv[2]), 10, 2, False, 120)
            """, {"ab": 1}, tmp_path, str(silent.getsockname()[1]))
    finally:
        silent.close()
    assert seen == ["ab"]


def test_killed_job_takes_a_c_program_and_its_workers_with_it(tmp_path):
    need("cc")
    binary = tmp_path / "syscall"
    subprocess.run(jobs.native_command("cc", str(SRC / jobs.native_sources()["syscall"]),
                                       str(binary)), check=True)
    seen = kill_job_and_check(f"""
        import os
        from perfgrid.kit import lifetime
        from perfgrid.experiments import syscall
        CPU = min(os.sched_getaffinity(0))
        lifetime.run_json(syscall.native_command({str(binary)!r}, "getuid", 10**12,
                                                 [[CPU], [CPU]]))
        """, {"syscall": 3}, tmp_path)  # the program and its two workers
    assert seen == ["syscall"]


def test_killed_job_takes_the_erlang_vm_with_it(tmp_path):
    need("erl")
    seen = kill_job_and_check("""
        from perfgrid.kit import erlang
        erlang.run(["erl", "-noshell", "-eval", "timer:sleep(120000), halt()."], 300)
        """, {"beam.smp": 1, "erl_child_setup": 1}, tmp_path)
    assert seen == ["beam.smp", "erl_child_setup"]


def test_killed_job_takes_http_server_workers_with_it(tmp_path):
    seen = kill_job_and_check("""
        import sys, time
        from perfgrid.kit import binding
        from perfgrid.experiments.http.counter import init_database
        from perfgrid.experiments.http.supervisor import ServerGroup
        db = sys.argv[1] + "/c.sqlite"
        init_database(db)
        group = ServerGroup("asyncio", db, binding.plan("none", 2))
        open(sys.argv[1] + "/ready", "w").close()
        time.sleep(120)
        """, {PYTHON: 2}, tmp_path)  # its two server workers (ServerGroup waits for them)
    assert seen == [PYTHON]


def test_killed_manager_takes_its_pyperf_worker_with_it(tmp_path):
    """SIGKILL a pyperf manager while its worker measures: the worker goes too."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "perfgrid.measure.bench", "syscall", "--point", "variant=python",
           "--point", "call=getuid", "--point", "binding=none", "--point", "workers=1",
           "--result", str(tmp_path / "out.json"), "--processes", "1", "--values", "50",
           "--warmups", "0", "--loops", "20000"]
    manager = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    workers: list[psutil.Process] = []
    family: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not workers:
            assert manager.poll() is None and time.monotonic() < deadline, "no worker"
            time.sleep(0.05)
            with contextlib.suppress(psutil.NoSuchProcess):
                # the point manager starts a batch (a pyperf manager), which starts workers
                family = psutil.Process(manager.pid).children(recursive=True)
                workers = [p for p in family if "--worker" in p.cmdline()]
        # past its prctl (set as it parses its arguments), measuring: a worker with a
        # second of CPU time of its own (importing takes a fraction of one)
        def measuring() -> bool:
            with contextlib.suppress(psutil.NoSuchProcess):
                return any(cpu_seconds([p]) >= 1.0 and "--worker" in p.cmdline()
                           for p in psutil.Process(manager.pid).children(recursive=True))
            return False

        assert wait_for(measuring, 60), "no worker measured"
        assert manager.poll() is None, "the job ended before it could be killed"
        family = psutil.Process(manager.pid).children(recursive=True)
        manager.kill()
        manager.wait(10)
        left = _wait_gone([p.pid for p in family])
        assert not left, f"alive {GONE_WITHIN_S:g} s after the manager's SIGKILL: {_describe(left)}"
    finally:
        if manager.poll() is None:
            manager.kill()
            manager.wait()
        for proc in family:  # all it started, not only those found as workers
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
