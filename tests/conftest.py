"""Shared fixtures: a small seeded test file and helpers to run the pipeline."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perfgrid import testfile

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


@pytest.fixture(scope="session")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4 MiB seeded random file (page-size multiple)."""
    path = tmp_path_factory.mktemp("data") / "small.bin"
    testfile.generate(path, 4 << 20, seed=7)
    return path


def write_config(folder: Path, config: dict) -> Path:
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


CONFIG = {
    "host": "tiny",
    "experiments": ["file_read"],
    "noise": {"busy_share": 1.0},  # a plumbing test, not a measurement: never wait
    "testfile": {"size": "8MiB", "seed": 3},
    "file_read": {
        # the points every file_read claim compares (1 KiB and 1 MiB), so real verdicts come out
        "variants": ["read", "readinto", "readinto_unaligned", "whole", "pread_parallel", "dd",
                     "fio"],
        "block_sizes": [1024, 1048576],
        "parallel_block_sizes": [1048576],
        "workers": [1, 2],
        "bindings": ["none", "single"],
        "caches": ["warm"],
        "measure": {"processes": 1, "values": 2, "warmups": 0, "loops": 1, "target_ci": None,
                    "claims": {"processes": 3, "values": 1}},
    },
}


def run(tree: Path, *args: str) -> str:
    import subprocess

    result = subprocess.run(
        [*SNAKEMAKE, "--configfile", str(tree / "tiny.yaml"), *args],
        cwd=tree, capture_output=True, text=True, timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def edit(path: Path) -> None:
    """Change a source file's content (Snakemake compares content, not just mtime)."""
    with open(path, "a") as handle:
        handle.write("\n# edited by a test\n")


def job_counts(output: str) -> dict[str, int]:
    """Rule -> job count from Snakemake's "Job stats" table."""
    stats = output.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.MULTILINE)
            if m.group(1) != "total"}


@pytest.fixture(scope="session")
def tree(tmp_path_factory) -> Path:
    """A copy of the workflow (so edits stay here) after one complete run."""
    root = tmp_path_factory.mktemp("tree")
    for name in ("Snakefile", "workflow", "config", "profiles", "src"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, root / name)
    (root / "tiny.yaml").write_text(yaml.safe_dump(CONFIG))
    run(root, "--cores", "2")
    return root
