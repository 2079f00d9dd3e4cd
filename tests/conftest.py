"""Shared fixtures: a small seeded test file and helpers to run the pipeline."""

from __future__ import annotations

import os
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
