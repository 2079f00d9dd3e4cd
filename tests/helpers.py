"""The one place for test chores: paths, running Snakemake, processes, tools, C programs.

Tests import from here (``from helpers import ...``), never from ``conftest``, so a
chore is done one way; ``conftest.py`` keeps only fixtures and hooks.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
FULL = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def full_config() -> dict:
    """config/config.yaml as the workflow reads it, on a copy: the schema's defaults filled
    in (a section may leave keys to them, as a new experiment's may), derived values added,
    ``workers: auto`` left as written."""
    from perfgrid.pipeline import configschema, settings

    config = copy.deepcopy(FULL)
    configschema.validate(config)
    return settings.effective(config, check_disk=False)

#: the Debian package that provides each tool the Makefile installs (`TEST_DEBS`)
PACKAGE_OF = {"fio": "fio", "ab": "apache2-utils", "cc": "gcc", "erl": "erlang-nox",
              "chromium": "chromium", "dd": "coreutils", "perf": "linux-perf"}


def in_ci() -> bool:
    """True in CI (``CI`` set to anything but empty/0/false), where no test may skip."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


# -- tools ------------------------------------------------------------------------------
def missing_tools(*tools: str) -> list[str]:
    """The ``tools`` not found on PATH."""
    return [tool for tool in tools if not shutil.which(tool)]


def tool_reason(*tools: str) -> str:
    """``ab not found on PATH (Debian package apache2-utils)``: why a test skips."""
    missing = missing_tools(*tools)
    return ", ".join(f"{t} not found on PATH (Debian package {PACKAGE_OF.get(t, t)})"
                     for t in missing)


def need(*tools: str) -> None:
    """Skip the calling test, saying which tool and package, unless every tool is here.

    In CI a skip fails the run (``conftest.pytest_sessionfinish``)."""
    if missing_tools(*tools):
        pytest.skip(tool_reason(*tools))


def needs(*tools: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark for tests that need ``tools`` (same reason as :func:`need`)."""
    return pytest.mark.skipif(bool(missing_tools(*tools)), reason=tool_reason(*tools) or "-")


def compile_native(name: str, out_dir: Path) -> str:
    """Compile C program ``name`` (in its experiment's ``native/``) as the pipeline does;
    skip without ``cc``."""
    from perfgrid.design import jobs
    from perfgrid.kit.paths import PACKAGE

    need("cc")
    out = out_dir / name
    subprocess.run(jobs.native_command("cc", str(PACKAGE / jobs.native_sources()[name]),
                                       str(out)), check=True)
    return str(out)


def compile_erlang(out_dir: str | os.PathLike[str]) -> Path:
    """``erlc`` every Erlang module into ``out_dir``, as the pipeline's ``erlang_beam`` rule
    does; raises perfgrid.kit.erlang.ErlangError with erlc's message where it fails."""
    from perfgrid.design import jobs
    from perfgrid.kit import erlang, lifetime
    from perfgrid.kit.paths import PACKAGE

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sources = [str(PACKAGE / source) for source in jobs.erlang_sources().values()]
    proc = subprocess.run(lifetime.command(["erlc", "-o", str(out), *sources]),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise erlang.ErlangError(f"erlc failed: {(proc.stderr or proc.stdout).strip()}")
    return out


# -- processes --------------------------------------------------------------------------
def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` every 50 ms; True as soon as it holds, False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """The CPU time (user and sys, reaped children included) ``procs`` have used, those
    gone counting none: what a test polls for to know that processes are past their
    start-up and at work, on a machine however slow, rather than sleeping a while."""
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def live(pids: list[int]) -> list[int]:
    """The ``pids`` that are still running (zombies count as gone)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def still_alive_after(pids: list[int], timeout: float) -> list[int]:
    """The ``pids`` still running after polling for at most ``timeout`` seconds."""
    wait_for(lambda: not live(pids), timeout)
    return live(pids)


def gone(pids: list[int], timeout: float = 5.0) -> bool:
    """True once none of ``pids`` is a live (non-zombie) process, within ``timeout``."""
    return not still_alive_after(pids, timeout)


def tagged(marker: str, variable: str = "PERFGRID_KILLTEST") -> list[psutil.Process]:
    """Live processes whose environment has ``variable=marker`` (orphans included)."""
    out = []
    for proc in psutil.process_iter():
        try:
            if (proc.status() != psutil.STATUS_ZOMBIE
                    and proc.environ().get(variable) == marker):
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def in_session(leader: int) -> list[psutil.Process]:
    """The live (non-zombie) processes of the session that ``leader`` began.

    Start what a test runs with ``start_new_session=True``: its pid is then the id of a
    session that only the processes it starts join, and they stay in it when their parent
    dies (an orphan keeps its session), so this finds the test's own processes, and only
    those, without matching anything by name. The kernel does not give the id to a new
    process while one of the session's members lives."""
    out = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) != leader:
                continue
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess,
                psutil.AccessDenied):
            continue
    return out


# -- the pipeline -----------------------------------------------------------------------
def write_config(folder: Path, config: dict) -> Path:
    """``folder/config.yaml`` holding ``config``."""
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def snakemake(workdir: Path, *args: str, config: Path | None = None,
              timeout: float = 600) -> subprocess.CompletedProcess:
    """Run this repository's Snakefile with ``workdir`` as the working directory."""
    cmd = [*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(workdir)]
    if config is not None:
        cmd += ["--configfile", str(config)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=workdir)


#: the pipeline tests' grid: every file_read claim's points (1 KiB and 1 MiB, 2 workers),
#: so real verdicts come out; unbound only (the quick run, config/quick.yaml, pins the
#: parallel readers too)
CONFIG = {
    "host": "tiny",
    "experiments": ["file_read"],
    # a plumbing test, not a measurement: never wait; and a CV threshold every point with
    # two different values exceeds, so the report's "Flagged points" section is exercised
    "noise": {"busy_share": 1.0, "cv_threshold": 1e-9,
              "profile": {"blocks": 2}},  # the smallest noise profile: file_read's pair
    # no counting passes (~15 s a run here): tests/test_counters.py runs one through the
    # harness, and the pipeline tests run several pipelines
    "measure": {"counters": "none"},
    "testfile": {"size": "8MiB", "seed": 3},
    "file_read": {
        "variants": ["read", "readinto", "readinto_unaligned", "whole", "pread_parallel", "dd",
                     "fio"],
        "block_sizes": [1024, 1048576],
        "parallel_block_sizes": [1048576],
        "workers": [1, 2],
        "bindings": ["none"],
        "caches": ["warm"],
        "measure": {"processes": 1, "values": 2, "warmups": 0, "loops": 1, "target_ci": None,
                    "claims": {"processes": 3, "values": 1, "target_ci": None, "rounds": 1}},
    },
}


def copy_workflow(root: Path, config: dict | None = CONFIG) -> Path:
    """A copy of the workflow under ``root`` (so tests may edit it), with ``config`` as
    ``tiny.yaml`` (none with None). The bytecode Python wrote for ``src`` comes along: it
    holds for the copy (copy2 keeps each source's size and mtime, and an edit changes them),
    so the copy's first process does not compile perfgrid again (~0.2 s)."""
    for name in ("Snakefile", "workflow", "config", "profiles", "src", "CITATION.cff"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name)
        else:
            shutil.copy2(src, root / name)
    if config is not None:
        (root / "tiny.yaml").write_text(yaml.safe_dump(config))
    return root


def run(tree: Path, *args: str) -> str:
    """Snakemake in a copied ``tree`` with ``tiny.yaml``; its output, asserting success."""
    result = subprocess.run(
        [*SNAKEMAKE, "--configfile", str(tree / "tiny.yaml"), *args],
        cwd=tree, capture_output=True, text=True, timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


@contextlib.contextmanager
def edited(path: Path) -> Iterator[None]:
    """Change a source file's content for the ``with`` block (Snakemake compares content,
    not just mtime), then put back its bytes and times: tests sharing one pipeline tree
    find it as they left it, in any order."""
    before, times = path.read_bytes(), path.stat()
    try:
        with open(path, "a") as handle:
            handle.write("\n# edited by a test\n")
        yield
    finally:
        path.write_bytes(before)
        os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))


def job_counts(output: str) -> dict[str, int]:
    """Rule -> job count from Snakemake's "Job stats" table."""
    stats = output.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.MULTILINE)
            if m.group(1) != "total"}


#: the system Chromium the browser tests drive through playwright, and its arguments
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def watched_page(browser, width: int, problems: list[str]):
    """(context, page) of an offline Chromium window ``width`` px wide whose console
    errors, page errors and failed requests are appended to ``problems``."""
    context = browser.new_context(viewport={"width": width, "height": 900}, offline=True)
    page = context.new_page()
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url}"))
    return context, page


def fixed_tau(monkeypatch, tau: float, prior: tuple[float, float] | None = None) -> None:
    """Judge every claim of this test with between-run component ``tau`` (and the
    within-run prior ``(s0^2, d0)``), whatever the records say (perfgrid.analyse.betweenrun)."""
    from perfgrid.analyse import betweenrun

    def component(experiment, runtime, hypothesis, quantity="ratio", scale="log"):
        return betweenrun.Component(
            tau, "claim" if tau > 0 else "none", 5, "test kind", "test design",
            f"fixed by the test: {tau:g}", prior[0] if prior else None,
            prior[1] if prior else None, scale)

    monkeypatch.setattr(betweenrun, "component", component)
