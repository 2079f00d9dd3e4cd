"""One run at a time on a result set, from whichever working directory
(perfgrid.measure.runlock)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from perfgrid.kit.paths import Layout
from perfgrid.measure import runlock

from helpers import snakemake, write_config

#: holds the lock at argv[1], says so on stdout, then waits for stdin to close
_HOLDER = textwrap.dedent("""
    import sys
    from perfgrid.measure import runlock
    runlock.acquire(sys.argv[1])
    print("held", flush=True)
    sys.stdin.read()
""")


def hold_elsewhere(path) -> subprocess.Popen:
    """Another process holding the lock at ``path`` (returns once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_second_run_is_refused_naming_the_holder(tmp_path):
    lock = Layout.for_host("h", tmp_path / "results").run_lock
    holder = hold_elsewhere(lock)
    try:
        with pytest.raises(runlock.Held) as info:
            runlock.acquire(lock)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    message = str(info.value)
    assert f"pid {holder.pid} on host {socket.gethostname()}" in message
    assert f"working directory {os.getcwd()}" in message and str(lock) in message
    runlock.acquire(lock)  # the holder ended: free again
    try:
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    finally:
        runlock.release(lock)


def test_the_same_process_holds_it_once_and_lets_go(tmp_path):
    lock = tmp_path / ".perfgrid.lock"
    runlock.acquire(lock)
    runlock.acquire(lock)  # a no-op, not a refusal of itself
    try:
        probe = subprocess.run([sys.executable, "-c", _HOLDER, str(lock)], input="",
                               capture_output=True, text=True, timeout=60)
        assert probe.returncode != 0 and f"pid {os.getpid()}" in probe.stderr
    finally:
        runlock.release(lock)
    assert lock.exists()  # the file stays; only the flock is gone
    hold_elsewhere(lock).communicate("", timeout=60)  # another process may take it now


def test_a_lock_file_left_by_a_killed_run_blocks_nothing(tmp_path):
    lock = tmp_path / ".perfgrid.lock"
    holder = hold_elsewhere(lock)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    holder.stdin.close()
    holder.stdout.close()
    assert json.loads(lock.read_text())["pid"] == holder.pid  # stale, only information
    runlock.acquire(lock)
    try:
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    finally:
        runlock.release(lock)


def test_a_pipe_at_the_lock_path_is_refused_without_blocking(tmp_path):
    lock = tmp_path / ".perfgrid.lock"
    os.mkfifo(lock)
    with pytest.raises(runlock.Held, match="is not a regular file"):
        runlock.acquire(lock)


@pytest.mark.pipeline
def test_a_run_stops_at_once_while_another_holds_the_result_set_and_a_dry_run_does_not(
        tmp_path):
    config = write_config(tmp_path, {"host": "tiny", "experiments": ["syscall"]})
    root = tmp_path / "results" / "tiny"
    holder = hold_elsewhere(root / ".perfgrid.lock")
    try:
        dry = snakemake(tmp_path, "-n", config=config, timeout=300)
        assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
        run = snakemake(tmp_path, "--cores", "1", config=config, timeout=300)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "another perfgrid run is using the result set" in out, out[-3000:]
    assert f"pid {holder.pid} on host {socket.gethostname()}" in out, out[-3000:]
    assert sorted(p.name for p in root.iterdir()) == [".perfgrid.lock"]  # no job ran
