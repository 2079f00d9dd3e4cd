"""A run inside ``taskset -c 1``: auto grids, plans and read-backs use CPU 1 only, and the
report says the run was restricted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pandas as pd
import pytest
import yaml

from perfgrid.kit import binding
from perfgrid.pipeline import settings

from helpers import REPO, SNAKEMAKE, write_config

pytestmark = pytest.mark.pipeline

CONFIG = {
    "host": "pinned",
    "experiments": ["syscall", "ring"],
    # a plumbing test, not a measurement: never wait, and no noise profile
    "noise": {"busy_share": 1.0, "profile": {"blocks": 0}},
    "measure": {"counters": "none", "claims": {"rounds": 1}},  # nor count, nor rounds
    "syscall": {"variants": ["python"], "calls": ["getuid"], "workers": "auto",
                "bindings": ["none", "compact", "spread"],
                "measure": {"processes": 1, "values": 1, "warmups": 0, "loops": 20,
                            "claims": {"processes": 1, "values": 1, "target_ci": None}}},
    "ring": {"variants": ["thread"], "workers": "auto", "bindings": ["none", "spread"],
             "worker_rounds": 50,
             "measure": {"processes": 1, "values": 1, "warmups": 0, "loops": 1,
                         "claims": {"processes": 1, "values": 1, "target_ci": None}}},
}


@pytest.mark.skipif(1 not in os.sched_getaffinity(0) or not shutil.which("taskset"),
                    reason="needs CPU 1 and taskset (util-linux)")
def test_a_taskset_run_uses_cpu_1_only(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != settings.AUTO_CPUS_ENV}
    result = subprocess.run(
        ["taskset", "-c", "1", *SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory",
         str(tmp_path), "--configfile", str(write_config(tmp_path, CONFIG)), "--cores", "1"],
        capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    root = tmp_path / "results" / "pinned"

    syscall = pd.read_csv(root / "tables" / "syscall.csv")
    ring = pd.read_csv(root / "tables" / "ring.csv")
    assert sorted(syscall["workers"].unique()) == [1, 2]  # auto on one CPU: 1 and twice it
    assert sorted(ring["workers"].unique()) == [2]        # a ring starts at two
    for table in (syscall, ring):
        for text in table["worker_cpus"]:
            lists, _ = binding.parse_plan(text)
            assert lists and all(cpus == [1] for cpus in lists), text
        # two workers on one CPU share everything; one worker shares nothing
        assert (table["shares_core"] == (table["workers"] > 1)).all()

    used = yaml.safe_load((root / "config.used.yaml").read_text())
    assert used["syscall"]["workers"] == [1, 2] and used["ring"]["workers"] == [2]
    machine = json.loads((root / "machine.json").read_text())
    assert machine["cpus_allowed"] == [1]
    assert machine["restriction"]["restricted"] is (len(machine["topology"]["online"]) > 1)
    assert machine["auto_workers"] == {"cpus": 1, "counts": [1, 2],
                                       "set_by": "the affinity mask (CPUs 1)"}
    report = (root / "report.md").read_text()
    assert "| allowed CPUs |" in report
    if machine["restriction"]["restricted"]:
        assert "This run was restricted to 1 of" in report and "taskset" in report
